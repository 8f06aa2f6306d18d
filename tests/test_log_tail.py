"""The log tail printed when a server fails says why (issue 23, item 10): llama.cpp's tensor-loading dump,
progress bars and answered requests are left out (the log file keeps them), what the server said last is kept."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from harness.engines.process import (
    LOG_NOISE,
    EngineError,
    ServerProcess,
    quiet_tail,
    root_cause,
    wait_until_ready,
)

#: The first 257 lines of a real llama-cpp-python server log (SmolLM2 on this CPU): metadata and tensor loading.
LOADING = (Path(__file__).parent / "data" / "llamacpp_load.log").read_text()


def test_a_death_while_loading_shows_the_death_not_the_tensors() -> None:
    log = LOADING + "Fatal Python error: Illegal instruction\n\nThread 0x7f (most recent call first):\n" \
        '  File "/venv/llama_cpp/llama.py", line 371 in __init__\n'
    tail = quiet_tail(log, 20).splitlines()
    assert len(LOADING.splitlines()) >= 250 and len(tail) <= 21
    assert "Fatal Python error: Illegal instruction" in tail
    assert not any(line.startswith(("create_tensor:", "llama_model_loader:", "print_info:", "load_tensors:"))
                   for line in tail)
    assert tail[-1].endswith("loading and progress line(s) left out; the log file has them)")


def test_errors_and_failed_requests_stay() -> None:
    lines = ['INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 200 OK',
             'INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 500 Internal Server Error',
             "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01]",
             "RuntimeError: CUDA out of memory", "Traceback (most recent call last):"]
    kept = [line for line in lines if not LOG_NOISE.search(line)]
    assert kept == lines[1:2] + lines[3:]


def test_a_quiet_log_is_shown_as_it_is() -> None:
    assert quiet_tail("a\nb\nc", 2) == "b\nc"


#: How vLLM's CPU build dies on a host without AVX-512 or AMX when asked for an fp8 KV cache: the engine core's
#: traceback holds the cause, the API server's longer traceback after it only the wrapper.
VLLM_DEATH = """(EngineCore_DP0 pid=412) ERROR 12-03 10:01:02 [core.py:842] EngineCore failed to start.
(EngineCore_DP0 pid=412) Traceback (most recent call last):
(EngineCore_DP0 pid=412)   File "/venv/vllm/v1/attention/backends/cpu_attn.py", line 88, in __init__
(EngineCore_DP0 pid=412) RuntimeError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX
Traceback (most recent call last):
  File "/venv/bin/vllm", line 8, in <module>
""" + "".join(f'  File "/venv/vllm/x{i}.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(40)) + \
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n"


def test_the_root_cause_is_the_childs_exception_not_the_wrapper() -> None:
    assert root_cause(VLLM_DEATH) == ("(EngineCore_DP0 pid=412) RuntimeError: FP8 KV cache on CPU requires x86 "
                                      "with AVX-512 or AMX")
    assert "FP8 KV cache" not in quiet_tail(VLLM_DEATH, 40)  # why the tail alone is not enough
    assert root_cause("RuntimeError: Engine core initialization failed. See root cause above.").startswith(
        "RuntimeError: Engine core")  # only a wrapper: it is still the best line there is
    assert root_cause(LOADING) == ""


def test_a_server_that_dies_while_loading_names_its_root_cause(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    script = tmp_path / "die.py"
    script.write_text(f"import sys\nsys.stdout.write({VLLM_DEATH!r})\nsys.exit(1)\n")
    proc = ServerProcess([sys.executable, str(script)], env=dict(os.environ), cwd=tmp_path, log_path=log,
                         name="server a")
    proc.start()
    try:
        with pytest.raises(EngineError) as e:
            wait_until_ready(proc, lambda: (False, "ConnectionError"), "the health check", timeout_s=600,
                             interval_s=0.05)
    finally:
        proc.stop()
    assert "exited with code 1" in e.value.reason or "code 1" in e.value.reason
    assert e.value.reason.endswith("root cause: (EngineCore_DP0 pid=412) RuntimeError: FP8 KV cache on CPU "
                                   "requires x86 with AVX-512 or AMX")
