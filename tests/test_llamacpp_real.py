"""Real end-to-end: the llamacpp engine serving SmolLM2-135M (CPU), through the harness's Engine and eval."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TEST_JSONL, pid_alive
from helpers.llamacpp import needs_llamacpp, not_portable_instructions
from helpers.waiting import wait_until

from harness.arms.arm import ResolvedArm
from harness.checks.live import run_live_checks
from harness.config import CheckConfig, LlamaCppEngineConfig
from harness.engines import create_engine
from harness.engines.llamacpp import REBUILD_COMMAND
from harness.measure.evaluation import EvalOptions, run_eval
from harness.results.eval_store import load_samples
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k

pytestmark = [pytest.mark.slow, pytest.mark.real_model,
              needs_llamacpp()]


def test_llamacpp_build_runs_on_any_x86_64_cpu_with_avx2(tmp_path):
    """The installed llama-cpp-python was built with the README's portable flags: its CPU backend holds no AMX or
    AVX-512 instruction (a native build on an AMX Xeon holds ``tilezero``, and dies of SIGILL on other CPUs).
    The detector is checked first on an object that holds both."""
    import importlib.util
    import platform
    import subprocess

    if platform.machine() != "x86_64":
        pytest.skip(f"x86-64 instruction sets; this is {platform.machine()}")
    control = tmp_path / "control.s"
    control.write_text("tilezero %tmm0\nvaddps %zmm0,%zmm1,%zmm2\nvaddps %ymm0,%ymm1,%ymm2\n")
    subprocess.run(["as", str(control), "-o", str(tmp_path / "control.o")], check=True)
    found = not_portable_instructions(tmp_path / "control.o")
    assert len(found) == 2 and "tilezero" in found[0] and "zmm" in found[1]
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None
    libs = sorted((Path(spec.origin).parent / "lib").glob("libggml-cpu*.so"))
    assert libs, "no libggml-cpu*.so in the installed llama_cpp package"
    for lib in libs:
        bad = not_portable_instructions(lib)
        assert not bad, f"{lib} is not portable ({len(bad)} AMX/AVX-512 instructions, e.g. {bad[0].strip()}): " \
                        f"rebuild it: {REBUILD_COMMAND}"


def test_llamacpp_smollm2_end_to_end(tmp_path):
    arm = ResolvedArm(key="a", name="smollm2", checks=[
        CheckConfig(kind="fingerprint", name="llama-cpp-python in the serving process", key="dist.llama_cpp_python",
                    contains="."),
        CheckConfig(kind="http", name="serves the SmolLM2 GGUF", path="/v1/models", key="data.0.id",
                    contains="SmolLM2-135M-Instruct"),
    ])
    engine = create_engine(LlamaCppEngineConfig(n_ctx=2048, n_threads=2, ready_timeout_s=120, stop_timeout_s=20),
                           arm, tmp_path, "smollm2")
    statuses: list[str] = []
    with engine:
        engine.launch()
        pid = engine.pid
        engine.wait_ready(statuses.append)
        info = engine.probe()
        assert info["engine"] == "llamacpp" and not info["simulated"]
        assert "SmolLM2-135M-Instruct" in info["models"]["data"][0]["id"]
        assert info["fingerprint"]["modules"]["llama_cpp"]["file"].endswith("llama_cpp/__init__.py")
        checks = run_live_checks(arm, engine)
        assert all(c.passed for c in checks), [c.line() for c in checks]
        test = gsm8k.load(TEST_JSONL, "test")
        summary = run_eval(test, gsm8k.RecipeConfig(num_questions=10), ClientConfig(url=engine.url, api="openai",
                                                                                    parallel=2),
                           tmp_path / "eval", opts=EvalOptions(progress=False, abort_check=engine.alive))
        assert engine.alive() is None
    stop = engine.stop()
    assert stop["how"] in ("SIGTERM", "SIGKILL") and stop["port_free"]
    wait_until(lambda: not pid_alive(pid), "the llama.cpp server's process to exit")
    rows = load_samples(tmp_path / "eval")
    assert len(rows) == 10 and all(r.error is None and r.output is not None for r in rows)
    assert summary["answered"] == 10 and summary["errors"] == 0 and summary["complete"]
    assert summary["api"] == "openai" and not summary["simulated"]



def test_busy_llamacpp_server_stops_within_the_stop_timeout(tmp_path):
    """llama-cpp-python's uvicorn waits after SIGTERM for the request in flight (a scoring request computes for
    minutes); the engine's SIGINT, uvicorn's force quit, stops it long before the stop timeout's SIGKILL."""
    import json
    import socket

    import psutil

    engine = create_engine(LlamaCppEngineConfig(n_ctx=2048, n_threads=2, ready_timeout_s=300, stop_timeout_s=60,
                                                args=["--logits_all", "true"]),
                           ResolvedArm(key="a", name="smollm2"), tmp_path, "busy")
    engine.launch()
    engine.wait_ready()
    pid = engine.pid
    server = psutil.Process(pid)
    # a scoring request (~800 tokens echoed with 20 alternatives each: a minute or more of CPU), sent whole
    prompt = " ".join(["Natalia sold clips to 48 of her friends in April, and half as many in May."] * 40)
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "echo": True, "logprobs": 20}).encode()
    host, port = engine.url.removeprefix("http://").rsplit(":", 1)
    conn = socket.create_connection((host, int(port)), timeout=600)
    cpu0 = sum(server.cpu_times()[:2])
    conn.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_until(lambda: sum(server.cpu_times()[:2]) - cpu0 >= 3,  # it computes on the request
               "the server to start on the scoring request")
    conn.setblocking(False)
    try:
        early = conn.recv(1)
    except BlockingIOError:
        early = None
    assert early is None, "the scoring request was answered before the stop: not a busy server"
    stop = engine.stop()
    conn.close()
    assert stop["how"] == "SIGTERM, then SIGINT", stop  # SIGINT after the stop timeout: the escalation bounds it
    assert stop["port_free"] and stop["leftover_pids"] == []
    assert not pid_alive(pid)


@pytest.mark.timeout(1200)
def test_cpu_smollm2_as_shipped_reads_each_servers_kv_type(tmp_path):
    """The experiment as shipped: each arm's live check reading the key type its running server allocated
    (llama.cpp's log), divergence off with the reason said. (Its time is the README's, measured, not asserted: a
    test does not depend on the machine's speed.)"""
    from helpers.runs import abh_run

    from harness.results.fileio import read_json

    run_dir = tmp_path / "run"
    r = abh_run("experiment=cpu_smollm2", f"hydra.run.dir={run_dir}", "progress=false", cwd=tmp_path, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    m = read_json(run_dir / "manifest.json")
    live = {k: [c for c in arm["live_checks"] if c["kind"] == "log_line"] for k, arm in m["arms"].items()}
    assert all(len(cs) == 1 and cs[0]["passed"] for cs in live.values()), live
    assert "K (f16):" in live["a"][0]["evidence"]["lines"][0] and "K (q8_0):" in live["b"][0]["evidence"]["lines"][0]
    d = read_json(run_dir / "comparison.json")["divergence"]
    assert d["verdict"] == "not_measured" and "divergence.enabled=true" in d["verdict_reason"]
    assert "divergence: not measured: off by default for llama.cpp" in r.stderr + r.stdout
    assert all(launch["stop"]["how"] == "SIGTERM" for arm in m["arms"].values() for launch in arm["launches"])
