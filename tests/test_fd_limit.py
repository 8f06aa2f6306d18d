"""The open-file limit (issue 22, item 12): checked before the first request. The soft limit is raised to the
hard one; when even that is too low for the parallelism, the parallelism is capped with a warning, rather than
requests failing with "Too many open files" (retried, lost, or taken for a server that is gone)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_JSONL, SimServer
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.serving.client import RESERVED_FDS, fit_parallelism


def eval_with_nofile(url: str, out: Path, soft: int, hard: int, n: int = 600) -> subprocess.CompletedProcess:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return subprocess.run([sys.executable, "-m", "harness.cli.main", "eval", "--url", url, "--out", str(out),
                           "--data", str(TEST_JSONL), "--num-questions", str(n), "--parallel", str(n),
                           "--no-progress"], capture_output=True, text=True, timeout=PATIENCE_S, preexec_fn=limit)


def rows(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def slow_server():
    s = SimServer("--latency-s", "0.3").wait_ready()  # every request holds its socket a while
    yield s
    s.stop()


@pytest.mark.slow
def test_a_low_hard_limit_caps_the_parallelism_with_a_warning(slow_server, tmp_path):
    r = eval_with_nofile(slow_server.url, tmp_path / "ev", 256, 256)
    assert r.returncode == exitcodes.OK, r.stderr
    cap = 256 - RESERVED_FDS
    assert f"the open-file limit is 256 (its hard limit too): parallel 600 capped at {cap}" in r.stderr
    got = rows(tmp_path / "ev")
    assert len(got) == 600 and all(x["error"] is None for x in got)
    assert all(x["attempts"] == 1 for x in got)  # none was refused for want of a file descriptor (most were)


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_low_soft_limit_is_raised_to_the_hard_one(slow_server, tmp_path):
    r = eval_with_nofile(slow_server.url, tmp_path / "ev", 256, 4096)
    assert r.returncode == exitcodes.OK, r.stderr
    assert "open-file limit" not in r.stderr and all(x["attempts"] == 1 for x in rows(tmp_path / "ev"))


def test_fit_parallelism_in_this_process():
    assert fit_parallelism(10) == (10, None)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        pytest.skip("no open-file limit here")
    parallel, warning = fit_parallelism(soft)  # a socket per request plus the reserve would not fit
    assert parallel == soft - RESERVED_FDS and warning is not None and "capped" in warning


@pytest.mark.slow
def test_the_eval_that_used_to_fail_on_a_low_limit(tmp_path):
    """The issue's case: parallel 1319 under ulimit -n 256 against a server that takes 2 s per answer used to
    end with "refuses connections: the server is gone" (exit 4); capped, it finishes."""
    s = SimServer("--latency-s", "2").wait_ready()
    try:
        r = eval_with_nofile(s.url, tmp_path / "ev", 256, 256, n=1319)
    finally:
        s.stop()
    assert r.returncode == exitcodes.OK, r.stderr
    assert len(rows(tmp_path / "ev")) == 1319


def test_eval_json_records_the_parallelism_used_after_the_cap(sim_server, tmp_path, monkeypatch):
    from harness.measure.evaluation import run_eval
    from harness.results.eval_store import load_eval
    from harness.serving import client
    from harness.serving.client import ClientConfig
    from harness.tasks import gsm8k
    from harness.tasks.gsm8k import RecipeConfig

    monkeypatch.setattr(client, "raise_nofile_limit", lambda: RESERVED_FDS + 8)  # room for 8 sockets only
    s = sim_server("--accuracy", "0.9")
    run_eval(gsm8k.load(TEST_JSONL), RecipeConfig(num_questions=20), ClientConfig(url=s.url, parallel=20),
             tmp_path / "ev")
    meta, _, _ = load_eval(tmp_path / "ev")
    assert (meta["parallel"], meta["parallel_used"]) == (20, 8)  # asked for, used
    assert [x["parallel_used"] for x in meta["sessions"]] == [8]
