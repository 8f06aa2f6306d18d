"""Shared fixtures (and the config schemas registered with Hydra, as the commands register them): the GSM8K files (the test set embedded in the package; the train set from ../shared
beside the checkout where it is, else its first rows in tests/data), free ports, simulated servers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from helpers.waiting import PATIENCE_S

import harness.cli.compose  # noqa: F401 - the config schemas registered with Hydra, as every abh command does
from harness.tasks.gsm8k import EMBEDDED_TEST

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT.parent / "shared" / "data" / "gsm8k"
TEST_JSONL = EMBEDDED_TEST
#: the full train split where ../shared has it; else its first 16 rows, kept in the clone (MIT, as the test set)
TRAIN_IS_CANONICAL = (DATA_DIR / "train.jsonl").exists()
TRAIN_JSONL = DATA_DIR / "train.jsonl" if TRAIN_IS_CANONICAL else ROOT / "tests" / "data" / "gsm8k_train_head.jsonl"


#: pytest's rewritten test modules are cached even where PYTHONDONTWRITEBYTECODE is set (as on CI machines): each
#: xdist worker would otherwise rewrite and compile every test file again (collection 7 s instead of 2 s here)
sys.dont_write_bytecode = False


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the package once, before any worker starts: the tests start ~150 interpreters (``abh``
    commands, simulators, probes), and with PYTHONDONTWRITEBYTECODE set (as on CI machines) each would compile
    every harness module it imports from source again. Best effort: a read-only tree just stays uncompiled."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall

    for package in ("harness", "abh_simulator"):
        compileall.compile_dir(str(ROOT / package), quiet=2)
    if config.getoption("numprocesses", None):
        _rewrite_the_test_modules(config)


def _rewrite_the_test_modules(config: pytest.Config) -> None:
    """pytest rewrites a test module's asserts when it imports it, and caches the result; in a fresh checkout each
    xdist worker would rewrite every test module at the same time (~9 s of CPU each on 2 cores): the controller does
    it once, before the workers start. pytest's own rewriting (private, pinned by requirements.lock): on any error
    the workers rewrite as before."""
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        for fn in sorted((ROOT / "tests").glob("test_*.py")):
            pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc, state.trace) is None and rewrite.try_makedirs(pyc.parent):
                source_stat, code = rewrite._rewrite_test(fn, config)
                rewrite._write_pyc(state, code, source_stat, pyc)
    except Exception:  # noqa: BLE001 - best effort: the workers rewrite what is not cached
        return


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: unknown with -p no:xdist
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the default, pyproject.toml): one pytest-xdist worker more than the CPUs. Many tests wait on
    real server processes (start-up, timeouts, signals), so one extra worker keeps the CPUs busy: on 2 cores,
    3 workers finish the default run ~10 % sooner than 2 (4 are slower again). PYTEST_XDIST_AUTO_NUM_WORKERS
    still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus + 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class SimServer:
    """A simulated engine in a real subprocess, for tests."""

    def __init__(self, *args: str, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "abh_simulator", "--port", str(self.port), "--data", str(TEST_JSONL), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float = PATIENCE_S, path: str = "/health") -> SimServer:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited: {self.proc.stdout.read().decode()[-2000:]}")
            try:
                if requests.get(self.url + path, timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise TimeoutError("simulator not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()


@pytest.fixture
def sim_server():
    servers: list[SimServer] = []

    def start(*args: str, ready_path: str = "/health") -> SimServer:
        s = SimServer(*args)
        servers.append(s)
        return s.wait_ready(path=ready_path)

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def chromium() -> str:
    """The headless Chromium the report's browser and layout tests drive (slow tests: .ci/run installs it)."""
    from harness.report.browser import find_chromium

    exe = find_chromium()
    if exe is None:
        pytest.fail("headless Chromium is required for the report's browser tests and was not found on PATH "
                    "(install the Debian package `chromium`, as .ci/run does, or set ABH_CHROMIUM)")
    return exe
