"""SIGHUP (issue 22, item 14): a closed terminal or ssh session is handled like SIGTERM: the servers stopped,
the interruption recorded, exit 129, resumable; and `abh ab` on two servers of different models exits 2 with
the reason before any question (it used to measure both, then exit 5 "retry the failed requests")."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_JSONL, SimServer
from helpers.faultserver import FaultServer
from helpers.runs import ONE_EACH, SMALL, interrupt_run, rows
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.results.fileio import read_json


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_sighup_mid_eval_stops_the_servers_and_exits_129(tmp_path: Path):
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, "engine.latency_s=0.05", "engine.max_running_requests=8"]
    target = run_dir / "evals" / "a" / "r1" / "samples.jsonl"
    res = interrupt_run(args, tmp_path, when=lambda: rows(target) > 20, sig=signal.SIGHUP)
    assert res.returncode == exitcodes.HANGUP == 129, res.stderr[-2000:]
    assert "interrupted by SIGHUP; servers stopped, results kept" in res.stderr and "Traceback" not in res.stderr
    assert res.children and res.survivors() == []
    m = read_json(run_dir / "manifest.json")
    assert m["evals"]["evals/a/r1"]["status"] == "interrupted" and m["sessions"][-1].get("ended")
    assert 0 < rows(target) < 200


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_abh_eval_exits_129_on_sighup(tmp_path: Path):
    srv = SimServer("--latency-s", "0.2").wait_ready()
    out = tmp_path / "ev"
    try:
        p = subprocess.Popen([sys.executable, "-m", "harness.cli.main", "eval", "--url", srv.url, "--out", str(out),
                              "--data", str(TEST_JSONL), "--num-questions", "200", "--parallel", "4",
                              "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + PATIENCE_S
        while rows(out / "samples.jsonl") < 5:
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.05)
        p.send_signal(signal.SIGHUP)
        _, err = p.communicate(timeout=PATIENCE_S)
    finally:
        srv.stop()
    assert p.returncode == 129, err
    assert "interrupted by SIGHUP" in err and "Rerun the same command to resume" in err
    assert read_json(out / "summary.json")["aborted"] == "interrupted by SIGHUP"


def test_abh_ab_refuses_servers_of_different_models(tmp_path: Path):
    out = tmp_path / "ab"
    with FaultServer("ok", model_path="org/model-7b") as sa, FaultServer("ok", model_path="org/model-70b") as sb:
        r = subprocess.run([sys.executable, "-m", "harness.cli.main", "ab", sa.url, sb.url, "--out", str(out),
                            "--num-questions", "4", "--no-progress", "--data", str(TEST_JSONL)],
                           capture_output=True, text=True, timeout=PATIENCE_S)
        asked = [x for x in sa.requests + sb.requests if x.startswith("POST")]
    assert r.returncode == exitcodes.BAD_CONFIG, r.stderr
    assert "the servers serve different models (A: 'org/model-7b', B: 'org/model-70b')" in r.stderr
    assert "retry" not in r.stderr and not asked and not out.exists()
