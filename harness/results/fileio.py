"""Crash-safe file writes, JSON and JSONL reads: the primitives every stored result goes through.

Stdlib only and importing nothing of the harness, so the schema (:mod:`harness.results.schema`) and the eval
store (:mod:`harness.results.eval_store`) can both build on it. (The arm-side launcher keeps its own copy: it runs in
the arm's interpreter, where the harness may not be importable.)
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_UMASK_LOCK = threading.Lock()


class StoreError(RuntimeError):
    """A stored file or directory cannot be used (unreadable, of another eval, of an unknown schema)."""


class OutputError(StoreError):
    """A file cannot be written (disk full, read-only, permissions): one line naming it and the OS error. What
    was written before stays as it was (writes are atomic or appended whole lines), so a rerun resumes."""

    def __init__(self, path: str | Path, error: OSError):
        why = error.strerror or str(error) or type(error).__name__
        super().__init__(f"cannot write {path}: {why} (errno {error.errno})" if error.errno else
                         f"cannot write {path}: {why}")
        self.path, self.errno = Path(path), error.errno


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Any OSError of the block as the OutputError of ``path`` (the OS boundary of every write)."""
    try:
        yield
    except OutputError:
        raise
    except OSError as e:
        raise OutputError(path, e) from None


def current_umask() -> int:
    """The process umask (read by setting and restoring it: there is no read-only call)."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """An existing file keeps its permissions; a new one gets what ``open()`` would give it (0666 & ~umask)."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~current_umask()


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same directory, fsync, rename: readers see old or new, never half; an OS
    error (a full disk) is the OutputError of ``path``, and the old file stays.

    ``mkstemp`` creates the temp file 0600; it is given the mode a plain write would have (the umask's, or
    the replaced file's), so a reviewer on the same cluster can open what the harness wrote.
    """
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = _mode_for(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    """The parsed content of a JSON file (no schema check: typed files are read with harness.results.schema)."""
    with Path(path).open(encoding="utf-8") as f:
        return json.load(f)


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a JSONL file, read as a stream (a file of 1319 answers never has to fit in memory
    twice). A torn (unterminated, unparsable) last line from a crash is skipped; any other line that is not a
    JSON object is a StoreError naming the file and the line."""
    p = Path(path)
    if not p.exists():
        return
    with p.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
                if not raw.endswith(b"\n"):  # the unterminated last line a crash leaves: torn, not wrong
                    return
                raise StoreError(f"{p}: line {lineno} is not valid JSON") from None
            if not isinstance(row, dict):
                raise StoreError(f"{p}: line {lineno} is not a JSON object (found {type(row).__name__})")
            yield lineno, row


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file (see :func:`iter_jsonl`)."""
    return [row for _, row in iter_jsonl(path)]
