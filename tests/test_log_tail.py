"""The log tail printed when a server fails says why (issue 23, item 10): llama.cpp's tensor-loading dump,
progress bars and answered requests are left out (the log file keeps them), what the server said last is kept."""

from __future__ import annotations

from pathlib import Path

from harness.engines.process import LOG_NOISE, quiet_tail

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
