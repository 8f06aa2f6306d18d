"""One abh process per directory: an exclusive ``flock`` on a run, eval or comparison directory.

Two processes on one directory would resume over each other's files, so the second stops at once (exit 2),
naming the holder's pid, written in ``<dir>/.abh.lock``. The lock is the kernel's, so a holder that dies (even
of SIGKILL) releases it; the file is removed on release, and an acquirer checks that the file it locked is
still the one at the path (a removal races with an open). Where ``flock`` or a lock file cannot be had, it
runs unlocked. While locked, the directory is an output directory of this process
(:func:`harness.results.fileio.hold`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from harness.results import fileio
from harness.results.fileio import PlantedLink, StoreError

LOCK_FILE = ".abh.lock"


class DirectoryInUse(StoreError):
    """Another process holds the directory's lock (the message names it)."""


class DirLock:
    """``with DirLock(path, "run directory"):`` holds ``path`` exclusively (see the module docstring)."""

    def __init__(self, root: str | Path, what: str = "directory"):
        self.root = Path(root)
        self.path = self.root / LOCK_FILE
        self.what = what
        self._fd: int | None = None
        self._holding = False  # an output directory of this process (fileio.hold), locked or not

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> DirLock:
        """Take the lock (the directory must exist); DirectoryInUse when another process holds it, PlantedLink
        when the lock file is a link."""
        fileio.check(self.path)
        while self._fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise PlantedLink(self.path) from None
                return self._hold()  # no lock file can be made here (read-only, full): the writes will say why
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise DirectoryInUse(self._in_use()) from None
                return self._hold()  # no flock here (some network file systems): run unlocked
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # its holder removed it as we opened it: lock the new one
                os.close(fd)
                continue
            with contextlib.suppress(OSError):  # a full disk: the lock holds, only the pid cannot be shown
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
        return self._hold()

    def _hold(self) -> DirLock:
        if not self._holding:
            fileio.hold(self.root)
            self._holding = True
        return self

    def _in_use(self) -> str:
        try:
            pid = self.path.read_text().strip()
        except OSError:
            pid = ""
        holder = f"pid {pid}" if pid.isdigit() else "pid unknown"
        return (f"{self.root} is in use by another abh process ({holder}): one process per {self.what}; wait for it "
                "to end, or use another directory")

    def release(self) -> None:
        if self._holding:
            fileio.let_go(self.root)
            self._holding = False
        if self._fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # while still holding it: see the module docstring
        finally:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __enter__(self) -> DirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
