"""harness.util.blas: OpenBLAS's idle threads sleep at once while a command imports, and nothing of it outlives
the imports (a server abh starts later gets the environment it was given)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.util import blas


def test_set_while_loading_then_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(blas.TIMEOUT, raising=False)
    with blas.idle_threads_sleep():
        assert os.environ[blas.TIMEOUT] == blas.SHORTEST
        child = subprocess.run([sys.executable, "-c", f"import os; print(os.environ.get({blas.TIMEOUT!r}))"],
                               capture_output=True, text=True, check=True).stdout.strip()
        assert child == blas.SHORTEST  # what a library loading now reads
    assert blas.TIMEOUT not in os.environ
    with pytest.raises(RuntimeError), blas.idle_threads_sleep():
        raise RuntimeError("an import failed")
    assert blas.TIMEOUT not in os.environ


def test_the_users_setting_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(blas.TIMEOUT, "20")
    with blas.idle_threads_sleep():
        assert os.environ[blas.TIMEOUT] == "20"
    assert os.environ[blas.TIMEOUT] == "20"


def test_a_command_leaves_no_trace_in_the_environment() -> None:
    """``abh --version`` imports nothing heavy; ``abh power`` loads numpy and scipy in the context: neither
    leaves the variable set for what the process starts afterwards."""
    env = {k: v for k, v in os.environ.items() if k != blas.TIMEOUT}
    code = ("import os, sys; from harness.cli import main as m; sys.argv = ['abh', 'power', '--help'];\n"
            "try: m.main()\nexcept SystemExit: pass\n"
            f"print('LEFT', os.environ.get({blas.TIMEOUT!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip().splitlines()[-1] == "LEFT None"
