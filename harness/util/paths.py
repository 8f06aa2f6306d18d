"""Where abh may write: an output directory is checked (:func:`output_problem`) before anything is made."""

from __future__ import annotations

import os
from pathlib import Path

#: Directories that are the system's, never an output: the root, the pseudo file systems (anything under them),
#: and the system's own trees.
_PSEUDO = ("/proc", "/sys", "/dev")
_SYSTEM = ("/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr/bin", "/usr/lib",
           "/usr/lib64", "/usr/sbin")
_EXACT = frozenset({"/", "/usr", "/var", "/run", "/home", "/opt", "/srv", "/mnt", "/media", "/usr/local",
                    "/usr/share"})


def _under(path: str, roots: tuple[str, ...]) -> str | None:
    return next((r for r in roots if path == r or path.startswith(r + "/")), None)


def output_problem(path: str | Path, what: str = "--out") -> str | None:
    """Why ``path`` cannot be an output directory (None when it can): a system directory (or under one), a
    file (or under one), or not writable; symlinks are followed, where it lands is what counts."""
    p = Path(path).expanduser()
    real = os.path.realpath(p)
    shown = f"{what} {path}" + (f" (that is {real})" if real != str(p) and real != os.path.abspath(p) else "")
    if real in _EXACT:
        return f"{shown}: refusing to write results into {real} itself; give a directory of their own"
    root = _under(real, _PSEUDO) or _under(real, _SYSTEM)
    if root is not None:
        return f"{shown}: refusing to write results under {root}, a system directory"
    probe = Path(real)
    while not probe.exists():  # the nearest ancestor that exists decides
        probe = probe.parent
    if not probe.is_dir():
        return (f"{shown}: {probe} is a file, not a directory" if probe == Path(real)
                else f"{shown}: {probe} is a file, so nothing can be made under it")
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{shown}: {probe} is not writable"
    return None
