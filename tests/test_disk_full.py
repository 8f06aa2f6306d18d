"""A full disk or an unwritable output (issue 22, item 11): one line naming the path and the OS error, exit 2,
never a traceback; nothing measured is lost and the rerun resumes. On a real tiny tmpfs where this process may
mount one (root), else with the file-size limit (RLIMIT_FSIZE: writes past it fail with EFBIG, the same OS
boundary) in the child."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import TEST_JSONL, SimServer, pid_alive
from helpers.evals import make_eval, seed_vectors
from helpers.runs import ONE_EACH, SMALL, abh_run_here, rows, wait_for
from helpers.waiting import PATIENCE_S

from harness import exitcodes

ABH = [sys.executable, "-m", "harness.cli.main"]


@dataclass
class SmallDisk:
    """A directory that holds ``size`` bytes (tmpfs), or whose children may write files of ``size`` bytes at most."""

    root: Path
    size: int
    tmpfs: bool

    def preexec(self) -> Callable[[], None] | None:
        if self.tmpfs:
            return None
        size = self.size

        def limit() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
            resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        return limit

    def grow(self) -> None:
        """Free the space: a rerun is then expected to resume."""
        if self.tmpfs:
            subprocess.run(["mount", "-o", "remount,size=64m", str(self.root)], check=True)
        self.size = 1 << 30

    def read_only(self) -> None:
        if self.tmpfs:
            subprocess.run(["mount", "-o", "remount,ro", str(self.root)], check=True)
        else:
            self.root.chmod(0o500)

    def run(self, *args: str, timeout: float = PATIENCE_S) -> subprocess.CompletedProcess:
        return subprocess.run([*ABH, *args], capture_output=True, text=True, timeout=timeout,
                              preexec_fn=self.preexec(), cwd=self.root.parent)


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[int], SmallDisk]]:
    mounted: list[Path] = []
    made: list[Path] = []

    def make(size: int) -> SmallDisk:
        root = tmp_path / f"fs{len(made)}"
        made.append(root)
        root.mkdir()
        # ABH_TEST_NO_TMPFS=1 tries the fallback where this process could mount
        if os.geteuid() == 0 and not os.environ.get("ABH_TEST_NO_TMPFS") and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)],
                                                capture_output=True).returncode == 0:
            mounted.append(root)
            return SmallDisk(root, size, True)
        return SmallDisk(root, size, False)

    yield make
    for root in mounted:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert "Traceback" not in r.stderr, r.stderr
    return lines[-1]


OS_ERRORS = ("No space left on device", "File too large")


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_abh_eval_on_a_full_disk_says_so_and_resumes(small_disk):
    disk = small_disk(64 * 1024)
    out = disk.root / "ev"
    srv = SimServer().wait_ready()
    try:
        args = ("eval", "--url", srv.url, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", "200",
                "--no-progress")
        r = disk.run(*args)
        assert r.returncode == exitcodes.BAD_CONFIG, r.stderr
        line = one_line(r)
        assert len(r.stderr.strip().splitlines()) == 1
        assert f"cannot write {out}/" in line and any(e in line for e in OS_ERRORS), line
        assert "rerun the same command to resume" in line
        kept = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()[:-1]]
        assert kept  # what was written before the disk filled is there
        disk.grow()
        r = disk.run(*args)
        assert r.returncode == exitcodes.OK, r.stderr
        rows = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
        assert sorted(x["index"] for x in rows) == list(range(200))
        by_index = {x["index"]: x for x in rows}
        assert all(by_index[x["index"]]["output"] == x["output"] for x in kept)  # kept, not asked again
    finally:
        srv.stop()


def fill(root: Path) -> Path:
    """Fill the file system of ``root`` to the last byte; the filler file."""
    filler = root / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
    return filler


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_abh_run_on_a_disk_that_fills_mid_eval(small_disk):
    disk = small_disk(8 << 20)
    if not disk.tmpfs:
        pytest.skip("needs a tmpfs (root): the file-size limit would reach the servers' own logs first")
    run_dir = disk.root / "run"
    args = ("run", f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, "task.num_questions=60", "client.parallel=60",
            "engine.latency_s=0.05", "engine.max_running_requests=4", "verbose=true")  # prints each server stop
    p = subprocess.Popen([*ABH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=disk.root.parent)
    try:
        wait_for(lambda: rows(run_dir / "evals" / "a" / "r1" / "samples.jsonl") > 10 or p.poll() is not None, 60,
                 "the first answers")
        filler = fill(disk.root)  # the disk fills while the eval writes
        _, err = p.communicate(timeout=PATIENCE_S)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == exitcodes.BAD_CONFIG, err
    last = one_line(subprocess.CompletedProcess([], p.returncode, "", err))
    assert last.startswith(f"[abh] error: cannot write {run_dir}/") and "No space left on device" in last, last
    assert "could not stop" not in err and "bug" not in err
    pids = [int(x.split("(pid ")[1].split(")")[0]) for x in err.splitlines() if "stopping simulated server" in x]
    assert pids and not any(pid_alive(p) for p in pids)
    filler.unlink()  # space again: the same command resumes (in this process: the servers are processes still)
    assert abh_run_here(*args[1:]) == exitcodes.OK


@pytest.mark.slow  # the eval's full-disk test stays in the default run
def test_abh_compare_on_a_full_or_read_only_disk(small_disk, tmp_path):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:300]), make_eval(tmp_path / "b", b[:300])
    disk = small_disk(16 * 1024)
    cmd = ("compare", "--a", str(da), "--b", str(db), "--out", str(disk.root / "cmp"), "--resamples", "100")
    r = disk.run(*cmd)
    assert r.returncode == exitcodes.BAD_CONFIG, r.stderr
    line = one_line(r)
    assert line.startswith("abh compare: error: cannot write") and any(e in line for e in OS_ERRORS), line
    ro = small_disk(1 << 20)
    if not ro.tmpfs and os.geteuid() == 0:
        return  # root writes through any mode bits: only a read-only mount refuses it
    ro.read_only()
    r = ro.run("compare", "--a", str(da), "--b", str(db), "--out", str(ro.root / "cmp"), "--resamples", "100")
    assert r.returncode == exitcodes.BAD_CONFIG and "Traceback" not in r.stderr, r.stderr
    assert "abh compare: error:" in one_line(r)
