"""The source diff between the two arms, computed (not declared) and held against the files the fix may touch:
``git diff`` of the two trees for git arms of one repository (a patched or dirty worktree as the tree its
files make), else a file-by-file sha256 comparison under each tree's package dir (``source.subdir``); an
``installed`` arm has no tree to diff. :func:`enforce` stops the run (exit 6) when a file outside
``experiment.fix_files`` changed, or the diff cannot be computed.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from harness import exitcodes
from harness.arms.arm import ResolvedArm, git, sha256_file

#: What every line starts with (the dry run, the manifest, the report).
PREFIX = "source diff between the arms:"
#: Names skipped by the sha256 comparison: build and interpreter caches, not source.
SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
SKIP_SUFFIXES = (".pyc", ".pyo")
#: Files shown on the one line; the manifest keeps the full list.
SHOW = 12


class SourceDiffError(Exception):
    """The arms' sources differ outside the fix, or cannot be compared: nothing is measured (exit 6)."""

    code = exitcodes.ARMS_DIFFER


class SourceDiffDoc(TypedDict):
    """A :class:`SourceDiff` as recorded (the manifest's ``source_diff``): its fields and its :meth:`line`."""

    method: str
    a: str
    b: str
    files: list[str]
    compared: dict[str, str]
    fix_files: list[str]
    outside: list[str]
    error: str | None
    missing_source: bool
    line: str


@dataclass
class SourceDiff:
    #: ``git``, ``sha256`` or ``none`` (not computed: see ``error``).
    method: str
    a: str
    b: str
    #: Changed files (added, removed or modified), relative to the source tree's root, sorted.
    files: list[str] = field(default_factory=list)
    #: What was compared, per arm key: a commit / tree id (git) or the directory hashed (sha256).
    compared: dict[str, str] = field(default_factory=dict)
    #: The experiment's ``fix_files`` and the changed files none of them covers.
    fix_files: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    #: Why the diff could not be computed.
    error: str | None = None
    #: The error comes from an arm whose source is missing (a dry run records that elsewhere).
    missing_source: bool = False

    def to_dict(self) -> SourceDiffDoc:
        return cast(SourceDiffDoc, {**dataclasses.asdict(self), "line": self.line()})

    def line(self) -> str:
        """``source diff between the arms: F1, F2 (2 files; git diff 1a2b3c4d5e6f..7a8b9c0d1e2f)``."""
        if self.error is not None:
            return f"{PREFIX} not computed ({self.error})"
        if not self.files:
            return f"{PREFIX} none (the {self.a} and {self.b} sources are identical; {self._how()})"
        n = len(self.files)
        return f"{PREFIX} {_shown(self.files)} ({n} file{'s' if n != 1 else ''}; {self._how()})"

    def _how(self) -> str:
        ca, cb = self.compared.get(self.a, "?"), self.compared.get(self.b, "?")
        if self.method == "git":
            return f"git diff {ca[:12]}..{cb[:12]}"
        return f"sha256 of every file under {ca} vs {cb}"

    def outside_line(self) -> str:
        """The changed files outside ``fix_files`` (empty when none, or nothing is declared)."""
        if not self.outside:
            return ""
        return f"changed outside experiment.fix_files ({', '.join(self.fix_files)}): {_shown(self.outside)}"


def _shown(files: Sequence[str]) -> str:
    """The first :data:`SHOW` of ``files``, and how many more there are."""
    return ", ".join(files[:SHOW]) + (f", ... and {len(files) - SHOW} more" if len(files) > SHOW else "")


# ------------------------------------------------------------------------------------------ git
def _common_dir(path: str | Path) -> Path | None:
    """The git object store a checkout or worktree uses (worktrees of one repository share it)."""
    r = git(["rev-parse", "--path-format=absolute", "--git-common-dir"], path)
    return Path(r.stdout.strip()).resolve() if r.returncode == 0 and r.stdout.strip() else None


def _git_out(args: Sequence[str], checkout: str | Path, env: Mapping[str, str] | None = None) -> str:
    """The output of ``git args`` in ``checkout``; RuntimeError naming both when it fails."""
    r = git(args, checkout, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {checkout}: {r.stderr.strip()}")
    return r.stdout


def tree_of(checkout: str | Path) -> str:
    """The git tree id of a checkout's files as they are: its HEAD commit when clean, else the tree its
    tracked and untracked files (ignored ones and caches excepted) make, written through a throw-away index
    so neither the checkout's index nor its refs change."""
    status = _git_out(["status", "--porcelain"], checkout)
    head = _git_out(["rev-parse", "HEAD"], checkout).strip()
    dirty = [ln for ln in status.splitlines()
             if not any(part in SKIP_DIRS for part in Path(ln[3:].strip('"')).parts)
             and not ln.rstrip().endswith(SKIP_SUFFIXES)]
    if not dirty:
        return head
    with tempfile.TemporaryDirectory(prefix="abh-index-") as tmp:
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git_out(["read-tree", "HEAD"], checkout, env)
        _git_out(["add", "-A", "--", ".", ":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc"],
                 checkout, env)
        return _git_out(["write-tree"], checkout, env).strip()


def git_changed_files(repo: str | Path, a: str, b: str) -> list[str]:
    """``git diff --name-only --no-renames a b`` (commits or trees of ``repo``), sorted."""
    out = _git_out(["diff", "--name-only", "--no-renames", "-z", a, b], repo)
    return sorted(p for p in out.split("\0") if p)


# --------------------------------------------------------------------------------------- sha256
def package_dir(arm: ResolvedArm) -> Path:
    """The directory an arm's files are hashed under: its tree's ``subdir`` (what goes on PYTHONPATH)."""
    tree = Path(arm.source.tree)
    return tree / arm.source.subdir if arm.source.subdir else tree


def file_hashes(root: str | Path, rel_to: str | Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (caches skipped, links by target) by its path from ``rel_to``."""
    root, rel_to = Path(root), Path(rel_to)
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            if name.endswith(SKIP_SUFFIXES):
                continue
            p = Path(dirpath) / name
            if p.is_file():
                out[p.relative_to(rel_to).as_posix()] = sha256_file(p)
    return out


def hash_changed_files(a: ResolvedArm, b: ResolvedArm) -> list[str]:
    ha = file_hashes(package_dir(a), a.source.tree)
    hb = file_hashes(package_dir(b), b.source.tree)
    return sorted(k for k in set(ha) | set(hb) if ha.get(k) != hb.get(k))


# ----------------------------------------------------------------------------------------- both
def outside_fix(files: Iterable[str], fix_files: Sequence[str]) -> list[str]:
    """The files no ``fix_files`` entry (a path or a shell pattern, relative to the tree's root) covers."""
    pats = [p.strip().lstrip("/") for p in fix_files if p.strip()]
    return [f for f in files if not any(f == p or fnmatch.fnmatchcase(f, p) for p in pats)]


def _source_problem(arm: ResolvedArm) -> str | None:
    if arm.source.problems:
        return "; ".join(arm.source.problems)
    if arm.source.kind == "installed" or not arm.source.tree:
        return (f"arm {arm.key!r} runs the interpreter's installed package (source.kind={arm.source.kind}): "
                "there is no source tree to diff")
    if not Path(arm.source.tree).is_dir():
        return f"arm {arm.key!r}: source tree {arm.source.tree} does not exist"
    return None


def compute(a: ResolvedArm, b: ResolvedArm, fix_files: Sequence[str] = ()) -> SourceDiff:
    """The source diff between arm ``a`` (baseline) and arm ``b`` (the change); never raises for a source
    that cannot be compared (``error`` says why)."""
    fix = [str(f) for f in fix_files]
    d = SourceDiff(method="none", a=a.key, b=b.key, fix_files=fix)
    for arm in (a, b):
        problem = _source_problem(arm)
        if problem:
            d.error = problem
            d.missing_source = bool(arm.source.problems)
            return d
    try:
        same_store = (a.source.kind == b.source.kind == "git" and _common_dir(a.source.tree) is not None
                      and _common_dir(a.source.tree) == _common_dir(b.source.tree))
        if same_store:
            ta, tb = tree_of(a.source.tree), tree_of(b.source.tree)
            d.method, d.compared = "git", {a.key: ta, b.key: tb}
            d.files = git_changed_files(a.source.tree, ta, tb)
        else:
            d.method = "sha256"
            d.compared = {a.key: str(package_dir(a)), b.key: str(package_dir(b))}
            d.files = hash_changed_files(a, b)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        d.method, d.error = "none", f"{type(e).__name__}: {e}"
        return d
    d.outside = outside_fix(d.files, fix) if fix else []
    return d


def enforce(d: SourceDiff) -> None:
    """Stop the run (:class:`SourceDiffError`) when the experiment declares ``fix_files`` and a file outside
    them changed, or the diff could not be computed. A missing source tree is left to the arm's own error
    (a real run fails resolving it; a dry run reports it)."""
    if not d.fix_files:
        return
    if d.error is not None:
        if d.missing_source:
            return
        raise SourceDiffError(f"{d.line()}. The experiment declares experiment.fix_files, so the arms must "
                              "come from source trees or git refs whose difference can be computed; nothing is "
                              "measured.")
    if d.outside:
        raise SourceDiffError(f"{d.line()}: {d.outside_line()}. The arms differ by more than the fix; nothing "
                              "is measured. Pin the arms to the fix's commit and its parent (arms.X.source.ref), "
                              "or declare the extra files in experiment.fix_files if they are part of the fix.")
