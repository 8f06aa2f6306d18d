"""Ctrl-C, SIGTERM and SIGHUP during ``abh run``, honoured in every phase
(:data:`~harness.measure.runner.SIGNALS`).

A signal raises :class:`Interrupted` at once in synchronous code (the run's ``finally`` clauses stop the
servers); inside :meth:`Interrupts.deferred` (starting or stopping a server) when the section ends; inside the
eval's event loop, where a handler's exception would be swallowed, it cancels the eval's task, which writes
what it has. A second signal while the first is handled is ignored, so stopping the servers can finish.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

from harness.measure.runner import SIGNALS, Interrupted, run

__all__ = ["Interrupted", "Interrupts"]

T = TypeVar("T")


class Interrupts:
    """Installs the run's SIGINT/SIGTERM/SIGHUP handler for the duration of a ``with`` block (main thread only)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._raise = True
        self._task: tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]] | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._old = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        if self._task is not None:
            loop, task = self._task
            loop.call_soon_threadsafe(task.cancel)
        elif first and self._raise:
            raise Interrupted(signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` if a signal arrived (e.g. during a deferred section)."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """A section a signal must not cut in two (a process started but not yet tracked, a stop under way)."""
        old = self._raise
        self._raise = False
        try:
            yield
        finally:
            self._raise = old

    def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` in a fresh event loop (:func:`harness.measure.runner.run`); a signal cancels it and comes
        out as :class:`Interrupted` once the coroutine has cleaned up (a measurement's own signal handler raises
        the same :class:`Interrupted`)."""

        async def guarded() -> T:
            task = asyncio.ensure_future(coro)
            self._task = (asyncio.get_running_loop(), task)
            try:
                if self.signum is not None:
                    task.cancel()
                return await task
            finally:
                self._task = None

        with self.deferred():
            try:
                result = run(guarded())
            except Interrupted as e:  # the measurement's own handler caught the signal: ours must know it too
                self.signum = self.signum or e.signum
                raise
            except asyncio.CancelledError:
                self.check()
                raise
        self.check()  # a signal that arrived as the coroutine ended: what it has is on disk
        return result
