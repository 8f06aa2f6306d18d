"""One abh process per directory (issue 22, item 2): a second `abh run`, `abh eval`, `abh ab` or `abh compare`
into a directory another one holds exits 2 at once, naming the holder's pid, and starts nothing. Real
processes, real flock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TEST_JSONL, SimServer
from helpers.evals import make_eval, seed_vectors
from helpers.faultserver import FaultServer
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.results.dirlock import LOCK_FILE, DirectoryInUse, DirLock

ABH = [sys.executable, "-m", "harness.cli.main"]


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = PATIENCE_S) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def holder(d: Path) -> subprocess.Popen:
    """Another process holding ``d``'s lock until killed."""
    code = ("import sys, time; from harness.results.dirlock import DirLock; DirLock(sys.argv[1]).acquire(); "
            "print('held', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(d)], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def stop(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    if p.poll() is None:
        p.send_signal(sig)
    p.communicate(timeout=PATIENCE_S)


def test_the_lock_is_exclusive_named_and_leaves_nothing(tmp_path):
    with DirLock(tmp_path, "run directory"):
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
        with pytest.raises(DirectoryInUse, match=rf"in use by another abh process \(pid {os.getpid()}\)"):
            DirLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_FILE).exists()
    DirLock(tmp_path).acquire().release()


def test_a_killed_holder_releases_the_lock(tmp_path):
    p = holder(tmp_path)
    with pytest.raises(DirectoryInUse, match=f"pid {p.pid}"):
        DirLock(tmp_path).acquire()
    stop(p)  # SIGKILL: no clean-up ran, the kernel released the lock; the stale file is reused
    assert (tmp_path / LOCK_FILE).exists()
    DirLock(tmp_path).acquire().release()


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_second_abh_eval_into_the_same_directory_exits_2_at_once(tmp_path):
    srv = SimServer("--latency-s", "0.5").wait_ready()
    # the holder's server answers the warm-up and two questions, then nothing: the holder runs until it is
    # stopped, however long the second process takes to start on a loaded machine
    hung = SimServer("--hang-after", "3").wait_ready()
    out = tmp_path / "ev"
    args = ["eval", "--url", hung.url, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", "40",
            "--parallel", "2", "--no-progress"]
    try:
        first = subprocess.Popen(ABH + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for(out / LOCK_FILE, first)
        second = subprocess.run(ABH + args, capture_output=True, text=True, timeout=PATIENCE_S)
        assert first.poll() is None  # refused while the holder still runs: it did not wait for it (however slow
        # its own start on a loaded machine)
        assert second.returncode == exitcodes.BAD_CONFIG, second.stderr
        assert f"in use by another abh process (pid {first.pid})" in second.stderr
        assert "Traceback" not in second.stderr and len(second.stderr.strip().splitlines()) == 1
        stop(first, signal.SIGTERM)
        assert first.returncode == exitcodes.TERMINATED and not (out / LOCK_FILE).exists()
        rows = (out / "samples.jsonl").read_text().splitlines()
        assert len(rows) == len({json.loads(r)["index"] for r in rows})  # nobody wrote into its file
        args[2] = srv.url
        done = subprocess.run(ABH + [*args[:-3], "--parallel", "40", "--no-progress"], capture_output=True,
                              text=True, timeout=PATIENCE_S)  # the holder gone, the same command resumes
        assert done.returncode == exitcodes.OK, done.stderr
    finally:
        srv.stop()
        hung.stop()


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_a_second_abh_run_on_the_same_directory_starts_no_server(tmp_path):
    run_dir = tmp_path / "run"
    args = ["run", f"hydra.run.dir={run_dir}", "task.num_questions=40", "engine.latency_s=0.5", "client.parallel=2",
            "experiment.repeats=1", "experiment.aa_control=false", "divergence.enabled=false", "report=false",
            "progress=false"]
    first = subprocess.Popen(ABH + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(run_dir / "evals" / "a" / "r1" / LOCK_FILE, first, timeout=PATIENCE_S)  # measuring
        logs = sorted(p.name for p in (run_dir / "servers").iterdir())
        second = subprocess.run(ABH + args, capture_output=True, text=True, timeout=PATIENCE_S)
        assert second.returncode == exitcodes.BAD_CONFIG, second.stderr
        assert f"{run_dir} is in use by another abh process (pid {first.pid})" in second.stderr
        assert "Traceback" not in second.stderr
        assert sorted(p.name for p in (run_dir / "servers").iterdir()) == logs  # it launched nothing
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert len(manifest["sessions"]) == 1
        assert "in use" not in (run_dir / "run.log").read_text()  # the holder's log is the holder's
    finally:
        stop(first, signal.SIGTERM)
    assert first.returncode == exitcodes.TERMINATED, first.stderr
    assert not (run_dir / LOCK_FILE).exists()


def test_abh_compare_out_is_locked(tmp_path, capsys):
    from harness.cli.main import main as abh

    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:100]), make_eval(tmp_path / "b", b[:100])
    out = tmp_path / "out"
    out.mkdir()
    p = holder(out)
    try:
        code = abh(["compare", "--a", str(da), "--b", str(db), "--out", str(out), "--resamples", "100"])
        assert code == exitcodes.BAD_CONFIG
        assert f"in use by another abh process (pid {p.pid})" in capsys.readouterr().err
        assert sorted(x.name for x in out.iterdir()) == [LOCK_FILE]  # nothing written
    finally:
        stop(p)
    assert abh(["compare", "--a", str(da), "--b", str(db), "--out", str(out), "--resamples", "100"]) == 0
    assert not (out / LOCK_FILE).exists()


@pytest.mark.slow  # the eval directory's lock test stays in the default run
def test_abh_ab_out_is_locked(tmp_path):
    out = tmp_path / "ab"
    out.mkdir()
    p = holder(out)
    try:
        with FaultServer("ok") as sa, FaultServer("ok") as sb:
            r = subprocess.run(ABH + ["ab", sa.url, sb.url, "--out", str(out), "--num-questions", "4",
                                      "--no-progress", "--data", str(TEST_JSONL)],
                               capture_output=True, text=True, timeout=PATIENCE_S)
            assert not [x for x in sa.requests + sb.requests if x.startswith("POST")]  # nothing asked
    finally:
        stop(p)
    assert r.returncode == exitcodes.BAD_CONFIG, r.stderr
    assert f"in use by another abh process (pid {p.pid})" in r.stderr and "Traceback" not in r.stderr
