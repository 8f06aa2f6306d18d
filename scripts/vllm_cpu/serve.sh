#!/usr/bin/env bash
# Run vLLM's OpenAI server on this CPU for a model directory made by build_model.py (foreground; exec).
#
#   scripts/vllm_cpu/serve.sh VENV_DIR MODEL_DIR PORT [extra vllm serve args, e.g. --dtype float32]
#
# Serves the model as "smollm2" on 127.0.0.1:PORT with --max-model-len 2048 --dtype bfloat16 --enforce-eager
# --generation-config vllm (sampling defaults are vLLM's, never the model dir's generation_config.json; a
# later --dtype/--max-model-len/--generation-config in the extra args wins). Ready when GET /health is 200 (connection refused
# until then; 22-76 s here). SIGTERM stops it (the whole tree is gone within ~4 s).
# Environment (each can be overridden):
#   VLLM_CPU_KVCACHE_SPACE=2      GiB of KV cache (2 GiB = 93k tokens at bf16)
#   VLLM_CPU_OMP_THREADS_BIND=auto  on 2 cores: 1 OMP thread pinned to core 0, core 1 left for the API
#                                   process; two servers at once should get 0 and 1 explicitly
#   VLLM_HOST_IP=127.0.0.1        else the engine's internal message queue binds a non-loopback address
#   HF_HUB_OFFLINE=1              no hub on this machine
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: $0 VENV_DIR MODEL_DIR PORT [vllm serve args...]" >&2
    exit 2
fi
VENV=$1 MODEL=$2 PORT=$3
shift 3
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-auto}
export VLLM_HOST_IP=${VLLM_HOST_IP:-127.0.0.1}
export HF_HUB_OFFLINE=1
exec "$VENV/bin/python" -m vllm.entrypoints.cli.main serve "$MODEL" \
    --served-model-name smollm2 --host 127.0.0.1 --port "$PORT" \
    --max-model-len 2048 --dtype bfloat16 --enforce-eager --generation-config vllm "$@"
