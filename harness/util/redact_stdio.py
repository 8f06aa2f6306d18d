"""Secrets redacted in everything written to ``sys.stdout`` / ``sys.stderr`` while a block runs: Hydra prints
the config and repeats overrides in its errors on the standard streams, before any of the harness's code runs.
Text is redacted a line at a time; a ``flush()`` forwards the pending part of a line at once, so progress bars
and prompts show as before.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO

from harness.util.redact import Redactor, secret_values


class RedactingWriter:
    """A text stream that redacts what it forwards to ``target``."""

    def __init__(self, target: TextIO, redactor: Redactor) -> None:
        self._target = target
        self._redactor = redactor
        self._pending = ""
        self._lock = threading.RLock()  # reentrant: a signal handler may print while a write is under way

    def write(self, s: str) -> int:
        with self._lock:
            data = self._pending + s
            cut = max(data.rfind("\n"), data.rfind("\r")) + 1
            self._pending = data[cut:]
            if cut:
                self._target.write(self._redactor.text(data[:cut]))
        return len(s)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, ""
            if pending:
                self._target.write(self._redactor.line(pending))
            self._target.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def _redacting_excepthook(secrets: set[str]) -> Any:
    def hook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        w = RedactingWriter(sys.stderr, Redactor(secrets))
        w.write("".join(traceback.format_exception(kind, value, tb)))
        w.flush()

    return hook


@contextlib.contextmanager
def redacted_stdio(argv: Sequence[str] = ()) -> Iterator[None]:
    """While the block runs, ``sys.stdout`` and ``sys.stderr`` redact secrets by name and, literally, the
    secret values ``argv`` carries (:func:`~harness.util.redact.secret_values`), which Hydra may repeat."""
    secrets = secret_values(argv)
    saved = sys.stdout, sys.stderr
    # one Redactor per stream: each keeps its own line state
    out, err = RedactingWriter(saved[0], Redactor(secrets)), RedactingWriter(saved[1], Redactor(secrets))
    sys.stdout, sys.stderr = out, err
    try:
        yield
    except BaseException as e:
        if not isinstance(e, SystemExit | GeneratorExit) and sys.excepthook is sys.__excepthook__:
            sys.excepthook = _redacting_excepthook(secrets)
        raise
    finally:
        for w in (out, err):
            with contextlib.suppress(OSError, ValueError):  # the stream was closed under us (a broken pipe)
                w.flush()
        # handlers made meanwhile (Hydra's logging) may keep a writer: it stays usable, forwarding to the stream
        if sys.stdout is out:
            sys.stdout = saved[0]
        if sys.stderr is err:
            sys.stderr = saved[1]
