"""Crash-safe file writes, JSON and JSONL reads: the primitives every stored result goes through (stdlib only,
importing nothing of the harness).

No write follows a symbolic link planted in an output directory (one this process holds, :func:`hold`): every
file is opened with ``O_NOFOLLOW`` (or made anew and renamed into place), and every directory between the
output directory and the file is checked (:func:`check`); a link is :class:`PlantedLink`, naming it. The
output directory itself may be a link: the user named it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

_UMASK_LOCK = threading.Lock()


class StoreError(RuntimeError):
    """A stored file or directory cannot be used (unreadable, of another eval, of an unknown schema)."""


class OutputError(StoreError):
    """A file cannot be written: one line naming it and the OS error (what was written before stays)."""

    def __init__(self, path: str | Path, error: OSError):
        why = error.strerror or str(error) or type(error).__name__
        super().__init__(f"cannot write {path}: {why} (errno {error.errno})" if error.errno else
                         f"cannot write {path}: {why}")
        self.path, self.errno = Path(path), error.errno


class PlantedLink(StoreError):
    """A symbolic link where abh would write in an output directory: refused before anything is written."""

    def __init__(self, path: str | Path):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        super().__init__(f"{path} is a symbolic link{target}: abh writes nothing through a link inside its output "
                         "directory; remove the link (or use another output directory)")
        self.path = Path(path)


# ------------------------------------------------------------------------------------- output directories
_ROOTS: dict[str, int] = {}  # the output directories this process holds (both spellings), how many times held
_ROOTS_LOCK = threading.Lock()


def _spellings(root: str | Path) -> set[str]:
    return {os.path.abspath(root), os.path.realpath(root)}


def hold(root: str | Path) -> None:
    """``root`` is an output directory of this process: paths below it are checked until :func:`let_go`."""
    with _ROOTS_LOCK:
        for r in _spellings(root):
            _ROOTS[r] = _ROOTS.get(r, 0) + 1


def let_go(root: str | Path) -> None:
    with _ROOTS_LOCK:
        for r in _spellings(root):
            if _ROOTS.get(r, 0) <= 1:
                _ROOTS.pop(r, None)
            else:
                _ROOTS[r] -= 1


def _below_root(path: Path) -> list[Path]:
    """The paths from the outermost held output directory containing ``path`` (exclusive) down to ``path``."""
    p = os.path.abspath(path)
    with _ROOTS_LOCK:
        roots = [r for r in _ROOTS if p.startswith(r.rstrip(os.sep) + os.sep)]
    if not roots:
        return []
    root = min(roots, key=len)
    parts = Path(os.path.relpath(p, root)).parts
    return [Path(root, *parts[:i]) for i in range(1, len(parts) + 1)]


def check(path: str | Path) -> Path:
    """``path``, after checking that neither it nor a directory between its output directory and it is a symbolic
    link (PlantedLink naming the first); a path under no held output directory is not checked."""
    for p in _below_root(Path(path)):
        try:
            if os.lstat(p).st_mode & 0o170000 == 0o120000:  # S_IFLNK
                raise PlantedLink(p)
        except (FileNotFoundError, NotADirectoryError):  # not made yet, or a file (the write fails, saying so)
            break
    return Path(path)


def check_dir(path: str | Path) -> Path:
    """``path`` checked (:func:`check`), and no entry directly inside it a symbolic link (it was planted)."""
    check(path)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(path) as entries:
        for e in entries:
            if e.is_symlink():
                raise PlantedLink(e.path)
    return Path(path)


def check_tree(path: str | Path) -> Path:
    """:func:`check_dir` of ``path`` and of every directory below it (a tree abh alone writes)."""
    for top, dirs, files in os.walk(check_dir(path)):  # a link to a directory is among the files: not descended
        for name in (*dirs, *files):
            if os.path.islink(os.path.join(top, name)):
                raise PlantedLink(os.path.join(top, name))
    return Path(path)


def make_dirs(path: str | Path) -> Path:
    """``mkdir -p path`` that descends into no symbolic link below its output directory (PlantedLink)."""
    path = check(path)
    with writing(path):
        path.mkdir(parents=True, exist_ok=True)
    return check(path)  # made between the check and the mkdir: still no link on the way


def open_nofollow(path: str | Path, flags: int, mode: int = 0o666) -> int:
    """``os.open`` following no link at ``path`` or on the way (PlantedLink); other OS errors: OutputError."""
    check(path)
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PlantedLink(path) from None
        raise OutputError(path, e) from None


def read_own(path: str | Path) -> bytes:
    """The bytes of a file abh wrote, read following no link at ``path`` (PlantedLink)."""
    with os.fdopen(open_nofollow(path, os.O_RDONLY), "rb") as f:
        return f.read()


def open_append(path: str | Path) -> IO[bytes]:
    """``path`` opened for appending (created if missing), unbuffered: each write is on disk when it returns."""
    return os.fdopen(open_nofollow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab", buffering=0)


def open_append_whole(path: str | Path) -> IO[bytes]:
    """:func:`open_append` for a JSONL file, a torn (unterminated) last line cut first so that the next row
    starts a line of its own."""
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        end = size
        while end > 0:  # back to the last newline, a block at a time
            start = max(0, end - 65536)
            block = os.pread(fd, end - start, start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        if end != size:
            os.ftruncate(fd, end)
    finally:
        os.close(fd)
    return open_append(path)


def open_new(path: str | Path) -> IO[bytes]:
    """``path`` made anew for writing (a stale file of a crashed session removed first; a link never followed)."""
    check(path)
    with writing(path), contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a link is refused above; this removes a regular file only
    return os.fdopen(open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "wb")


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` to ``path`` (a log), no link followed."""
    with open_append(path) as f, writing(path):
        f.write(text.encode("utf-8"))


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary file to write ``path`` through: a temp file beside it, fsynced and renamed over ``path`` when
    the block ends (removed if it raises): readers see the old file or the new one, never half. It gets the
    mode a plain write would have (``mkstemp`` makes 0600), so others on a cluster can read it."""
    path = check(path)
    make_dirs(path.parent)
    with writing(path):
        mode = _mode_for(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            os.fchmod(fd, mode)
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            check(path)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def replace(src: str | Path, dst: str | Path) -> None:
    """``os.replace(src, dst)`` onto a ``dst`` that is no planted link (PlantedLink otherwise)."""
    check(dst)
    with writing(dst):
        os.replace(src, dst)


class RunLogHandler(logging.FileHandler):
    """The handler of a run's ``run.log`` (configs/hydra/job_logging): appends following no link (a planted
    one gets no record: the run refuses it, naming it)."""

    def __init__(self, filename: str, encoding: str = "utf-8") -> None:
        super().__init__(filename, mode="a", encoding=encoding, delay=True)
        self.refused = False

    def _open(self) -> Any:
        return os.fdopen(open_nofollow(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a",
                         encoding=self.encoding)

    def emit(self, record: logging.LogRecord) -> None:
        if self.refused:
            return
        try:
            super().emit(record)
        except StoreError:  # a planted link (or an unwritable run.log): the run says so in its own words
            self.refused = True


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
    except OSError:
        return 0o666 & ~current_umask()


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` through :func:`atomic_output`."""
    with atomic_output(path) as f:
        f.write(text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    """The parsed content of a JSON file (no schema check: typed files are read with harness.results.schema)."""
    with Path(path).open(encoding="utf-8") as f:
        return json.load(f)


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of a JSONL file as a stream; a torn last line from a crash is skipped, any other
    line that is not a JSON object is a StoreError naming it."""
    p = Path(path)
    if not p.exists():
        return
    with p.open("rb") as f:
        yield from iter_lines(f, p)


def iter_lines(f: Iterable[bytes], p: Path, start: int = 1) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`iter_jsonl` of the lines of an open binary file ``f`` (``p``: its name in an error; ``start``: the
    number of its first line)."""
    for lineno, raw in enumerate(f, start):
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


#: ``json.dumps(obj, ensure_ascii=False)``, its encoder made once (``dumps`` makes one a call for any option but
#: the defaults: a few microseconds of every row an eval appends)
dumps_unicode = json.JSONEncoder(ensure_ascii=False).encode


def append_line(f: IO[bytes], path: Path, obj: Mapping[str, Any]) -> None:
    """One JSON line, written whole or failing with OutputError (a torn last line is dropped by a resume)."""
    append_made_line(f, path, dumps_unicode(obj) + "\n")


def append_made_line(f: IO[bytes], path: Path, text: str) -> None:
    """:func:`append_line` of a line already made (``text``: its JSON and the newline)."""
    view = memoryview(text.encode("utf-8"))
    with writing(path):
        while view:
            n = f.write(view)
            if not n:  # a regular file writes something or raises; never spin on nothing
                raise OSError(errno.EIO, "short write")
            view = view[n:]
