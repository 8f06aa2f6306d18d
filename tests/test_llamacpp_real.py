"""Real end-to-end: the llamacpp engine serving SmolLM2-135M (CPU), through the harness's Engine and eval."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import TEST_JSONL, pid_alive
from helpers.llamacpp import needs_llamacpp, not_portable_instructions

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
        t0 = time.monotonic()
        summary = run_eval(test, gsm8k.RecipeConfig(num_questions=10), ClientConfig(url=engine.url, api="openai",
                                                                                    parallel=2),
                           tmp_path / "eval", opts=EvalOptions(progress=False, abort_check=engine.alive))
        took = time.monotonic() - t0
        assert engine.alive() is None
    stop = engine.stop()
    assert stop["how"] in ("SIGTERM", "SIGKILL") and stop["port_free"]
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)
    rows = load_samples(tmp_path / "eval")
    assert len(rows) == 10 and all(r.error is None and r.output is not None for r in rows)
    assert summary["answered"] == 10 and summary["errors"] == 0 and summary["complete"]
    assert summary["api"] == "openai" and not summary["simulated"]
    assert took < 120
