"""OpenBLAS's idle threads put to sleep at once while a command loads numpy and scipy.

Each OpenBLAS library (numpy's and scipy's bundle one each) starts a worker thread per core when it loads, and a
worker with no job spins 2**28 cycles (~0.1 s of CPU each) before it sleeps: ~0.15 s of CPU of every command that
imports them, for nothing (abh's statistics barely call BLAS). ``OPENBLAS_THREAD_TIMEOUT``, read once as the
library loads, shortens that spin; the number of threads, hence how a product is split and summed, is unchanged
(the same bits). The environment is restored afterwards: a process abh starts later (a server under test) gets
exactly the environment it was given."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

#: OpenBLAS's variable: an idle worker spins 2**value cycles before it sleeps
TIMEOUT = "OPENBLAS_THREAD_TIMEOUT"
#: the shortest spin OpenBLAS allows (its default is 28)
SHORTEST = "4"


@contextlib.contextmanager
def idle_threads_sleep() -> Iterator[None]:
    """Within: an OpenBLAS that loads puts its idle workers to sleep at once (unless the user set
    ``OPENBLAS_THREAD_TIMEOUT``: theirs is kept); the environment as it was on exit."""
    if TIMEOUT in os.environ:
        yield
        return
    os.environ[TIMEOUT] = SHORTEST
    try:
        yield
    finally:
        os.environ.pop(TIMEOUT, None)
