"""The seed write-up's launch command: its env and flags, in order.

``SEED`` is the command copied into ``tests/data`` (the tests need nothing outside the clone); ``WRITE_UP`` is the
write-up itself (../shared/seed/pr-shared-slot-fix.txt), present only where ../shared lies beside the checkout."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "tests" / "data" / "seed_launch_command.txt"
WRITE_UP = ROOT.parent / "shared" / "seed" / "pr-shared-slot-fix.txt"

SEED_ENV = {
    "SGLANG_HACK_FLASHMLA_BACKEND": "unified_kv_triton", "SGLANG_OPT_FUSE_COMPRESS_NORM_ROPE": "1",
    "SGLANG_OPT_NATIVE_BPRESHUFFLE_SCALE": "1", "SGLANG_OPT_USE_AITER_BATCHED_GEMM": "1",
    "AITER_BF16_FP8_MOE_BOUND": "0", "SGLANG_USE_AITER": "1", "SGLANG_SHARED_EXPERT_TP1": "1",
    "SGLANG_DP_SHARED_EXPERT_LOCAL": "1", "SGLANG_DP_USE_GATHERV": "1", "SGLANG_DP_USE_REDUCE_SCATTER": "1",
    "GPU_MAX_HW_QUEUES": "5", "MORI_SHMEM_MODE": "ISOLATION", "MORI_SHMEM_HEAP_SIZE": "8G",
    "MORI_EP_LAUNCH_CONFIG_MODE": "AUTO",
}
SEED_ARGS = (
    "--model-path deepseek-ai/DeepSeek-V4-Pro --tensor-parallel-size 8 --dp 8 --enable-dp-attention "
    "--ep-size 8 --moe-a2a-backend mori --deepep-mode normal --moe-dense-tp-size 1 --enable-dp-lm-head "
    "--attention-backend dsv4 --page-size 256 --kv-cache-dtype fp8_e4m3 --enforce-shared-experts-fusion "
    "--context-length 16384 --chunked-prefill-size 8192 --mem-fraction-static 0.78 "
    "--max-running-requests 64 --cuda-graph-max-bs 64").split()


def parse_seed_command(text: str) -> tuple[dict[str, str], list[str]]:
    """(env, server flags) of the launch command in the seed write-up."""
    start = text.index("SGLANG_HACK_FLASHMLA_BACKEND")
    end = text.index("python3 benchmark/gsm8k")
    toks = shlex.split(text[start:end].replace("\\\n", " "))
    env: dict[str, str] = {}
    i = 0
    while re.match(r"^[A-Z_][A-Z0-9_]*=", toks[i]):
        k, v = toks[i].split("=", 1)
        env[k] = v
        i += 1
    assert toks[i:i + 3] == ["python3", "-m", "sglang.launch_server"]
    return env, toks[i + 3:]


def flag_lines(flags: list[str]) -> list[str]:
    """Flags as a dry run prints them: ``--flag value`` (or a bare ``--flag``), one per line."""
    out, i = [], 0
    while i < len(flags):
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            out.append(f"{flags[i]} {flags[i + 1]}")
            i += 2
        else:
            out.append(flags[i])
            i += 1
    return out
