"""The one async runner every measurement uses (an eval, a scoring pass): the event loop (:func:`run`), why a
measurement stops early (:class:`Stop`: tripped by a signal, the stall watchdog or the server-process check; the
first reason wins, a signal is always recorded), and the progress bar."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Generic, TypeVar

from harness.serving.client import Client, ServerGone, ServerStalled

try:
    import uvloop

    HAVE_UVLOOP = True
except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
    HAVE_UVLOOP = False

T = TypeVar("T")

#: The signals that stop a measurement cleanly: Ctrl-C, SIGTERM (a scheduler's preemption) and SIGHUP (the
#: terminal or ssh session that ran abh went away): each stops the servers and leaves a resumable directory.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` in a fresh event loop (uvloop when installed: half the client's per-request overhead), the
    cyclic garbage collector paused meanwhile: a collection walks every live request's objects to find nothing
    (10-20 % of a scoring pass's client CPU: ``benchmarks/bench_scoring.py``)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return uvloop.run(coro) if HAVE_UVLOOP else asyncio.run(coro)
    finally:
        if was:
            gc.enable()


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP: what was measured is on disk and everything is resumable; the command exits
    128 + the signal's number (``abh run`` stops its servers first: :mod:`harness.orchestrate.interrupts`)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


#: Requests in a row refused after all their retries before a measurement decides the server is gone.
REFUSED_STREAK = 10


class Stop:
    """Why a measurement stops early; :meth:`raise_for_reason` turns it into the exception the caller sees."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.reason: str | None = None
        self.signum: int | None = None
        self.stalled = False
        #: an error of the measurement's own (its results cannot be written): raised as it is
        self.error: Exception | None = None

    def fail(self, error: Exception) -> None:
        """Stop because of ``error`` (e.g. a full disk): the caller sees ``error`` itself."""
        if self.error is None:
            self.error = error
        self.trip(str(error))

    def trip(self, reason: str, *, stalled: bool = False) -> None:
        if self.reason is None:
            self.reason, self.stalled = reason, stalled
        self.event.set()

    def on_signal(self, signum: int) -> None:
        if self.signum is None:
            self.signum = signum
        self.trip(f"interrupted by {signal.Signals(signum).name}")

    @property
    def tripped(self) -> bool:
        return self.event.is_set()

    def raise_for_reason(self) -> None:
        """:class:`Interrupted` for a signal, :class:`ServerStalled` / :class:`ServerGone` for a server that hung
        or went away; nothing when the measurement was not stopped."""
        if self.signum is not None:
            raise Interrupted(self.signum)
        if self.error is not None:
            raise self.error
        if self.reason is not None:
            raise (ServerStalled if self.stalled else ServerGone)(self.reason)

    def after_failure(self, abort_check: Callable[[], str | None] | None) -> bool:
        """After a request failed: whether it failed because the measurement stops (the server process is gone,
        ``abort_check`` asked now, or it was stopped already); such a request is missing (sent again on a
        resume), never an error."""
        if abort_check is not None and not self.event.is_set():
            reason = abort_check()
            if reason is not None:
                self.trip(reason)
        return self.event.is_set()

    async def race(self, aw: Awaitable[T]) -> T | None:
        """``await aw``, unless the measurement is stopped first: then it is cancelled and None returned."""
        if self.event.is_set():
            if asyncio.iscoroutine(aw):
                aw.close()
            elif asyncio.isfuture(aw):
                aw.cancel()
                await asyncio.gather(aw, return_exceptions=True)
            return None
        task = asyncio.ensure_future(aw)
        stopper = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not task.done():
                task.cancel()
            await asyncio.gather(task, stopper, return_exceptions=True)
        return None if task.cancelled() else task.result()


class Refusals(Generic[T]):
    """Requests that got no HTTP answer after all their retries (refused, reset, timed out: what a dying server
    does), held back: :data:`REFUSED_STREAK` refused ones with no answer in between mean the server is gone
    (``stop`` is tripped; every held request stays missing, sent again on a resume; a server abh did not start has
    no process to watch); an answer in between makes them real request errors (:meth:`release`)."""

    def __init__(self, url: str, stop: Stop):
        self.url, self.stop = url, stop
        self.held: list[T] = []
        self.refused = 0

    def hold(self, item: T, refused: bool) -> None:
        self.held.append(item)
        self.refused += refused
        if self.refused >= REFUSED_STREAK:
            self.stop.trip(f"{self.url} refuses connections ({self.refused} requests in a row after retries): "
                           "the server is gone")

    def release(self) -> list[T]:
        """The held requests, to be recorded as errors (the server answers again, or the measurement ended)."""
        out, self.held, self.refused = self.held, [], 0
        return out


@contextmanager
def signals_to(stop: Stop) -> Iterator[None]:
    """SIGINT/SIGTERM/SIGHUP trip ``stop`` for as long as the measurement runs, setup included. The handlers are the
    loop's own (under uvloop an exception raised in a Python-level signal handler is swallowed); the caller's
    handlers are given back afterwards."""
    loop = asyncio.get_running_loop()
    handled: list[tuple[signal.Signals, Any]] = []
    for sig in SIGNALS:
        with suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            previous = signal.getsignal(sig)
            loop.add_signal_handler(sig, stop.on_signal, sig)
            handled.append((sig, previous))
    try:
        yield
    finally:
        for handled_sig, previous in handled:
            loop.remove_signal_handler(handled_sig)
            signal.signal(handled_sig, previous)


async def _stall_guard(client: Client, stop: Stop) -> None:
    stop.trip(await client.watch_stall(), stalled=True)


async def _watch(check: Callable[[], str | None], stop: Stop) -> None:
    """Poll ``check`` (is the server process alive?) about twice a second; trip ``stop`` when it gives a reason."""
    while not stop.event.is_set():
        reason = check()
        if reason is not None:
            stop.trip(reason)
            return
        await asyncio.sleep(0.5)


@contextmanager
def watchdogs(client: Client, stop: Stop, abort_check: Callable[[], str | None] | None) -> Iterator[None]:
    """For the duration of the block: the client's stall watchdog, and ``abort_check`` polled, both tripping
    ``stop``. Cancelled on the way out (the caller awaits nothing more of them)."""
    watchers = [asyncio.ensure_future(_stall_guard(client, stop))]
    if abort_check is not None:
        watchers.append(asyncio.ensure_future(_watch(abort_check, stop)))
    try:
        yield
    finally:
        for w in watchers:
            w.cancel()


class Progress:
    """A tqdm bar on stderr: answered of total, errors, requests in flight (``in_flight``: the client's count,
    refreshed every second by :meth:`ticking` even when nothing finishes) and, for an eval, accuracy so far."""

    def __init__(self, total: int, enabled: bool, label: str, *, initial: int = 0, correct: int = 0,
                 accuracy: bool = False, in_flight: Callable[[], int] | None = None,
                 note: Callable[[], str | None] | None = None):
        self.answered, self.correct, self.errors = initial, correct, 0
        self.accuracy = accuracy
        self.in_flight = in_flight
        #: what the client is waiting on, when anything (e.g. requests waiting out a server's Retry-After)
        self.note = note
        self.bar = None
        if enabled:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=label, unit="q", file=sys.stderr,
                            mininterval=0.5 if sys.stderr.isatty() else 5.0, dynamic_ncols=True)

    def _postfix(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if self.accuracy:
            shown["acc"] = f"{self.correct / self.answered:.3f}" if self.answered else "-"
        shown["err"] = self.errors
        if self.in_flight is not None:
            shown["in_flight"] = self.in_flight()
        note = self.note() if self.note is not None else None
        if note:
            shown["note"] = note
        return shown

    def update(self, *, error: bool, correct: bool = False) -> None:
        """One question finished: answered (``correct``: right, for an eval) or an error."""
        if error:
            self.errors += 1
        else:
            self.answered += 1
            self.correct += bool(correct)
        if self.bar is not None:
            self.bar.set_postfix(self._postfix(), refresh=False)
            self.bar.update(1)

    @contextmanager
    def ticking(self) -> Iterator[None]:
        """Refresh the bar every second for the duration of the block (a batch whose first answers take minutes
        still shows its requests in flight)."""
        task = asyncio.ensure_future(self._tick()) if self.bar is not None else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()

    async def _tick(self) -> None:
        while self.bar is not None:
            await asyncio.sleep(1.0)
            self.bar.set_postfix(self._postfix(), refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: requests of a measurement's preparation (/tokenize, /detokenize) in flight at once after the first: the server
#: answers one while the client reads the one before (one at a time, each side waits for the other)
PREPARE_IN_FLIGHT = 2


async def in_turn(chunks: Sequence[Any], ask: Callable[[Any], Awaitable[Any]]) -> list[Any] | None:
    """``await ask(chunk)`` of every chunk, in order: the first alone (a server that does not answer it, None, is
    asked no more), then :data:`PREPARE_IN_FLIGHT` at a time; None when any answer is None."""
    if not chunks:
        return []
    first = await ask(chunks[0])
    if first is None:
        return None
    admitted = asyncio.Semaphore(PREPARE_IN_FLIGHT)

    async def one(chunk: Any) -> Any:
        async with admitted:
            return await ask(chunk)

    tasks = [asyncio.ensure_future(one(c)) for c in chunks[1:]]
    try:
        rest = await asyncio.gather(*tasks)
    finally:  # one failed (or the measurement stops): the others are not left running
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return None if any(x is None for x in rest) else [first, *rest]
