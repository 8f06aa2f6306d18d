"""Builders for `abh run` end-to-end tests: run the CLI in a subprocess, find a run's server processes,
interrupt a run in a given phase."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.cli.run import main as run_main
from harness.results.fileio import read_json, read_jsonl
from helpers.waiting import PATIENCE_S

#: A run small enough for tests that do not test the full question set (and need no report.html), of the accuracy
#: design alone: the divergence's scoring passes (extra launches after the evals) are tested in test_divergence_run.py.
SMALL = ("progress=false", "report=false", "task.num_questions=200", "client.parallel=200", "divergence.enabled=false")
#: One repeat per arm, no A/A control.
ONE_EACH = ("experiment.aa_control=false", "experiment.repeats=1")


def abh(*args: str, cwd: Path, timeout: float = PATIENCE_S, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``abh ARGS`` in a subprocess (this checkout's code, via PYTHONPATH inherited from the test run)."""
    return subprocess.run([sys.executable, "-m", "harness.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, **(env or {})})


def abh_run(*args: str, cwd: Path, timeout: float = PATIENCE_S, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return abh("run", *args, cwd=cwd, timeout=timeout, env=env)


def abh_run_here(*args: str) -> int:
    """``abh run ARGS`` in this process: the exit code (stdout and stderr go to the test's capture). No interpreter
    start and no imports per run; any servers are real processes all the same. For what the command's own
    process does (signals, its output stream, its exit status) use :func:`abh_run`. Hydra's logging setup is
    left out, so the test process's logging stays as it is."""
    return run_main([*args, "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"])


def server_pids(run_dir: Path) -> list[int]:
    """The pids of every server launch the manifest recorded."""
    m = read_json(run_dir / "manifest.json")
    pids = []
    for arm in m["arms"].values():
        for launch in arm.get("launches", []):
            pid = (launch.get("probe") or {}).get("pid")
            if pid:
                pids.append(int(pid))
    return pids


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def log_has(run_dir: Path, text: str) -> bool:
    log = run_dir / "run.log"
    return log.exists() and text in log.read_text(errors="replace")


def rows(path: Path) -> int:
    return len(read_jsonl(path)) if path.exists() else 0


@dataclass
class Interrupted:
    returncode: int
    seconds: float  # from the signal to the exit
    stderr: str
    children: list[psutil.Process]  # every process the run had started when it was signalled

    def survivors(self) -> list[int]:
        out = []
        for p in self.children:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except psutil.NoSuchProcess:
                continue
        return out


def interrupt_run(args: list[str], cwd: Path, when: Callable[[], bool], sig: int = signal.SIGINT,
                  after_s: float = 0.0, timeout: float = PATIENCE_S) -> Interrupted:
    """Start ``abh run ARGS``, wait until ``when()`` (+ ``after_s``), send ``sig``, wait for the exit."""
    p = subprocess.Popen([sys.executable, "-m", "harness.cli.main", "run", *args], cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: when() or p.poll() is not None, timeout, "the moment to interrupt")
        assert p.poll() is None, f"the run ended too early: {p.communicate()[1][-2000:]}"
        time.sleep(after_s)
        children = psutil.Process(p.pid).children(recursive=True)
        t0 = time.monotonic()
        p.send_signal(sig)
        _, err = p.communicate(timeout=timeout)
        return Interrupted(p.returncode, time.monotonic() - t0, err, children)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
