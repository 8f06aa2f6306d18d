"""Real SGLang (0.5.23 from PyPI on the CPU, in the venv of scripts/sglang_cpu/install.sh) serving
SmolLM2-135M-Instruct: the experiment ``cpu_sglang_smollm2`` end to end through the project's own sglang engine,
and the venv's stand-ins for SGLang's GPU-only modules failing loudly when used."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest
from helpers.runs import abh_run
from helpers.vllm import needs_sglang, sglang_python

from harness.results.fileio import read_json

pytestmark = [pytest.mark.slow, pytest.mark.real_model, needs_sglang()]


@pytest.mark.timeout(2700)
def test_cpu_sglang_smollm2_serves_two_kv_cache_dtypes_and_measures_divergence(tmp_path):
    run_dir = tmp_path / "run"
    r = abh_run("experiment=cpu_sglang_smollm2", "task.num_questions=8", f"hydra.run.dir={run_dir}",
                "progress=false", cwd=tmp_path, timeout=2700)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert summary["simulated"] is False
    c = read_json(run_dir / "comparison.json")
    assert c["verdict"] in ("inconclusive", "equivalent", "noninferior")  # SmolLM2-135M: ~0 % on GSM8K
    d = c["divergence"]
    assert d["verdict"] in ("diverged", "indistinguishable"), d["verdict_reason"]  # measured, from real logprobs
    assert d["questions"] >= 5 and d["tokens"] > 100
    for rel in ("evals/a/r1", "evals/b/r1", "evals/aa/r1"):  # SGLang's /generate takes input_ids: scored by ids
        meta = read_json(run_dir / rel / "scores.json")
        assert meta["status"] == "ok" and meta["by_ids"] is True, rel
    m = read_json(run_dir / "manifest.json")
    assert all(p["ran"] and not p["problems"] for p in m["preflight"].values())  # SGLang's own parser
    launches = [launch for arm in m["arms"].values() for launch in arm["launches"]]
    assert len(launches) == 3  # A and B once each (up together), the floor on a fresh launch of A
    checks = {key: arm["live_checks"] for key, arm in m["arms"].items()}
    assert all(ch["passed"] for cs in checks.values() for ch in cs) and all(len(cs) == 4 for cs in checks.values())
    kv = {key: [ch for ch in cs if ch["kind"] == "log_line"][0]["evidence"]["lines"] for key, cs in checks.items()}
    assert "dtype: torch.float32," in kv["a"][0] and "dtype: torch.bfloat16," in kv["b"][0]  # the arms told apart
    for launch in launches:
        probe = launch["probe"]
        assert probe["engine"] == "sglang" and not probe["simulated"]
        assert probe["fingerprint"]["dist"]["sglang"] == "0.5.23"
        stop = launch["stop"]
        assert stop["port_free"] and stop["memory_released"] and stop["leftover_pids"] == []
        assert 500 < stop["rss_mib"] < 6000  # memory bounded by --max-total-tokens, all of it back after the stop
    assert "relaunch noise (KLD" in r.stdout and "outputs not measured" not in r.stdout  # the outputs line


def test_the_venv_serves_through_its_stand_ins_and_they_fail_loudly_when_used():
    """In the SGLang venv: SGLang sees no AMX backend (its CPU norms take forward_native), transformers reads the
    stand-in torchvision as too old to use, and calling a stand-in raises StandInUsed naming it."""
    code = textwrap.dedent("""
        import sgl_kernel, torchvision, abh_standin
        from sglang.srt.utils.common import cpu_has_amx_support, is_cpu
        from transformers.utils import import_utils
        assert is_cpu() and not cpu_has_amx_support()
        assert not import_utils.is_torchvision_greater_or_equal("0.1")
        try:
            sgl_kernel.rmsnorm(None, None)
        except abh_standin.StandInUsed as e:
            print("RAISED", e)
    """)
    r = subprocess.run([str(sglang_python()), "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RAISED sgl_kernel.rmsnorm was called: sgl_kernel is a stand-in" in r.stdout
