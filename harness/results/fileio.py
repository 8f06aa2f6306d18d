"""Crash-safe file writes, JSON and JSONL reads: the primitives every stored result goes through.

Stdlib only and importing nothing of the harness, so the schema (:mod:`harness.results.schema`) and the eval
store (:mod:`harness.results.eval_store`) can both build on it. (The arm-side launcher keeps its own copy: it runs in
the arm's interpreter, where the harness may not be importable.)
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

_UMASK_LOCK = threading.Lock()


class StoreError(RuntimeError):
    """A stored file or directory cannot be used (unreadable, of another eval, of an unknown schema)."""


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
    """Write via a temp file in the same directory, fsync, rename: readers see old or new, never half.

    ``mkstemp`` creates the temp file 0600; it is given the mode a plain write would have (the umask's, or
    the replaced file's), so a reviewer on the same cluster can open what the harness wrote.
    """
    path = Path(path)
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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn (unterminated, unparsable) last line from a crash is ignored."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    with p.open(encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # torn tail
                continue
            raise StoreError(f"{p}: line {i + 1} is not valid JSON") from None
    return out
