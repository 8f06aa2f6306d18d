"""An arm: which server software one side of the comparison runs, turned from config into something
launchable. :class:`ResolvedArm` owns how the arm's own processes are started (interpreter, environment,
source tree).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import ArmConfig, CheckConfig, ConfigError, typed
from harness.results import fileio
from harness.results.records import JSONObject

SOURCE_KINDS = ("installed", "pythonpath", "git")


class ArmError(ValueError):
    """An arm cannot be prepared (missing tree, not a git repo, unknown ref, a patch that does not apply)."""


# ------------------------------------------------------------------------------------ resolved arm
@dataclass
class SourceInfo:
    """Where an arm's server software comes from (recorded in the run and the report)."""

    kind: str = "installed"
    #: pythonpath: the tree; git: the repository the worktree was made from.
    path: str = ""
    subdir: str = ""
    ref: str = ""
    #: The source tree actually used (pythonpath: ``path``; git: the worktree); empty for ``installed``.
    tree: str = ""
    #: git: the worktree the harness created (per-launch location; ignored by the arm diff).
    worktree: str = ""
    #: Entries put FIRST on the server's PYTHONPATH.
    pythonpath: list[str] = field(default_factory=list)
    commit: str | None = None
    dirty: bool | None = None
    #: git: the patches applied, in order: {"file", "sha256"}.
    patches: list[dict[str, str]] = field(default_factory=list)
    #: Problems found while resolving with ``strict=False`` (a dry run): e.g. the tree does not exist.
    problems: list[str] = field(default_factory=list)


@dataclass
class ResolvedArm:
    key: str
    name: str
    side: str = ""
    description: str = ""
    #: The arm's Python interpreter ("" = the harness's own, ``sys.executable``).
    python: str = ""
    #: PYTHONPATH entries (first) for the server and the source probes.
    pythonpath: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    args: list[str] = field(default_factory=list)
    engine_overrides: JSONObject = field(default_factory=dict)
    source: SourceInfo = field(default_factory=SourceInfo)
    checks: list[CheckConfig] = field(default_factory=list)
    #: Directory holding ``arms/`` (patches, custom probe files are looked up under it), when known.
    arms_root: str | None = None

    @property
    def interpreter(self) -> str:
        """The interpreter that runs the arm's server and its source probes."""
        return self.python or sys.executable

    def env_delta(self, base: Mapping[str, Any] | None = None, extra_pythonpath: Sequence[str] = ()) -> dict[str, str]:
        """What the arm's processes get on top of the inherited environment: ``base`` (the engine's env), the
        arm's env, and PYTHONPATH with the arm's entries, then ``extra_pythonpath``, first."""
        delta = {**{str(k): str(v) for k, v in (base or {}).items()}, **{str(k): str(v) for k, v in self.env.items()}}
        entries = [*self.pythonpath, *extra_pythonpath]
        if entries:
            inherited = delta.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
            delta["PYTHONPATH"] = os.pathsep.join([*entries, *([inherited] if inherited else [])])
        return delta

    def process_env(self, base: Mapping[str, Any] | None = None) -> dict[str, str]:
        """The full environment of an arm's process: inherited + :meth:`env_delta`."""
        return {**os.environ, **self.env_delta(base)}

    def source_modules(self) -> list[str]:
        """The modules the arm's ``source`` checks name, once each (the launcher records where each resolves)."""
        return list(dict.fromkeys(c.module for c in self.checks if c.kind == "source" and c.module))


def _arm_config(arm_cfg: Any) -> ArmConfig:
    if isinstance(arm_cfg, ArmConfig):
        return arm_cfg
    try:
        return typed(ArmConfig, arm_cfg)
    except ConfigError as e:
        raise ArmError(f"bad arm config: {e}") from e


def git(args: Sequence[str], cwd: str | Path | None = None, check: bool = False,
        env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``git args`` (in ``cwd``, with ``env``), its output captured; ArmError when ``check`` and it fails."""
    r = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=300, env=env)
    if check and r.returncode != 0:
        raise ArmError(f"git {' '.join(args)} failed: {(r.stderr or r.stdout).strip()}")
    return r


def git_state(tree: str | Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of a git checkout; (None, None) when it is not one."""
    try:
        r = git(["-C", str(tree), "rev-parse", "HEAD"])
        if r.returncode != 0:
            return None, None
        s = git(["-C", str(tree), "status", "--porcelain", "--untracked-files=no"])
        return r.stdout.strip(), (bool(s.stdout.strip()) if s.returncode == 0 else None)
    except (OSError, subprocess.SubprocessError):
        return None, None


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_arm_file(rel: str, arms_root: str | Path | None) -> Path:
    """A file an arm names (patch, custom probe): absolute, else the one match under ``arms_root/arms`` (the
    path as given, or a file anywhere below whose path ends with it) or ``arms_root`` itself."""
    p = Path(rel).expanduser()
    if p.is_absolute():
        if not p.is_file():
            raise ArmError(f"{p} does not exist")
        return p
    matches: list[Path] = []
    if arms_root is not None:
        root = Path(arms_root)
        for base in (root / "arms", root):
            if (base / p).is_file():
                matches.append((base / p).resolve())
        if (root / "arms").is_dir():
            matches += [m.resolve() for m in (root / "arms").rglob(p.name) if m.is_file() and
                        m.as_posix().endswith(p.as_posix())]
    matches = sorted(set(matches))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ArmError(f"{rel} not found (looked under {Path(arms_root or '.') / 'arms'})")
    raise ArmError(f"{rel} is ambiguous: {', '.join(map(str, matches))}; give a path relative to arms/ or "
                   f"an absolute one")


def _make_worktree(key: str, repo: Path, ref: str, run_dir: Path) -> tuple[Path, str]:
    if git(["-C", str(repo), "rev-parse", "--git-dir"]).returncode != 0:
        raise ArmError(f"arm {key!r}: source.path {repo} is not a git repository")
    want = ref or "HEAD"
    r = git(["-C", str(repo), "rev-parse", "--verify", "--quiet", f"{want}^{{commit}}"])
    if r.returncode != 0:
        raise ArmError(f"arm {key!r}: git ref {want!r} not found in {repo}")
    commit = r.stdout.strip()
    wt = fileio.check(run_dir / "worktrees" / key).resolve()  # a planted link is refused, never removed through
    if wt.exists():  # a rerun of the same run directory: start from a clean worktree again
        if git(["-C", str(repo), "worktree", "remove", "--force", str(wt)]).returncode != 0:
            shutil.rmtree(wt, ignore_errors=True)
    git(["-C", str(repo), "worktree", "prune"])
    fileio.make_dirs(wt.parent)
    git(["-C", str(repo), "worktree", "add", "--detach", str(wt), commit], check=True)
    return wt, commit


def _apply_patches(key: str, wt: Path, patches: Iterable[str], arms_root: str | None) -> list[dict[str, str]]:
    applied: list[dict[str, str]] = []
    for rel in patches:
        try:
            patch = find_arm_file(rel, arms_root)
        except ArmError as e:
            raise ArmError(f"arm {key!r}: patch {e}") from None
        r = git(["-C", str(wt), "apply", "--check", str(patch)])
        if r.returncode != 0:
            raise ArmError(f"arm {key!r}: patch {patch} does not apply to the worktree {wt}:\n"
                           f"{(r.stderr or r.stdout).strip()}")
        git(["-C", str(wt), "apply", str(patch)], check=True)
        applied.append({"file": str(patch), "sha256": sha256_file(patch)})
    return applied


def resolve_arm(key: str, arm_cfg: Any, run_dir: str | Path, arms_root: str | Path | None = None, *,
                strict: bool = True, unset_env: str | None = None) -> ResolvedArm:
    """Prepare arm ``key`` (``cfg.arms[key]``: ArmConfig or a mapping) for a run in ``run_dir``; ``unset_env``:
    the unset environment variable its ``source.path`` was to come from (the path is then a placeholder). With
    ``strict=False`` (dry runs) a missing source tree is recorded in ``source.problems``."""
    a = _arm_config(arm_cfg)
    run_dir = Path(run_dir).resolve()
    root = str(Path(arms_root).resolve()) if arms_root is not None else None
    s = a.source
    if s.kind not in SOURCE_KINDS:
        raise ArmError(f"arm {key!r}: source.kind must be one of {', '.join(SOURCE_KINDS)}, not {s.kind!r}")
    src = SourceInfo(kind=s.kind, path=s.path, subdir=s.subdir, ref=s.ref)
    if s.kind in ("pythonpath", "git") and not s.path:
        raise ArmError(f"arm {key!r}: source.path is required for source.kind={s.kind}")
    if s.kind == "installed" and (s.patches or s.subdir):
        raise ArmError(f"arm {key!r}: patches/subdir need source.kind=git or pythonpath")
    if s.kind == "pythonpath" and s.patches:
        raise ArmError(f"arm {key!r}: patches need source.kind=git (the harness applies them in a worktree)")
    def exists(path: Path, what: str) -> bool:
        """A missing tree stops a real run; a dry run records it and prints everything else."""
        if path.is_dir():
            return True
        unset = unset_env
        msg = (f"arm {key!r}: set {unset} to your {what} ({path} is the placeholder used while {unset} is unset)"
               if unset else f"arm {key!r}: {what} {path} does not exist (source.path)")
        if strict:
            raise ArmError(msg)
        src.problems.append(msg)
        return False

    if s.kind == "pythonpath":
        tree = Path(s.path).expanduser().resolve()
        src.path = src.tree = str(tree)
        if exists(tree, "source tree"):
            src.commit, src.dirty = git_state(tree)
    elif s.kind == "git":
        repo = Path(s.path).expanduser().resolve()
        src.path = str(repo)
        if exists(repo, "git repository"):
            wt, _commit = _make_worktree(key, repo, s.ref, run_dir)
            src.worktree = src.tree = str(wt)
            src.patches = _apply_patches(key, wt, s.patches, root)
            src.commit, src.dirty = git_state(wt)
    if src.tree:
        entry = Path(src.tree) / s.subdir if s.subdir else Path(src.tree)
        if strict and not entry.is_dir():
            raise ArmError(f"arm {key!r}: {entry} does not exist (source.subdir)")
        src.pythonpath = [str(entry)]
    return ResolvedArm(key=key, name=a.name, side=a.side, description=a.description, python=a.python,
                       pythonpath=list(src.pythonpath), env={k: str(v) for k, v in a.env.items()},
                       args=[str(x) for x in a.args], engine_overrides=dict(a.engine), source=src,
                       checks=list(a.checks), arms_root=root)


def run_probe(arm: ResolvedArm, script: Path, args: Sequence[str], *, env: Mapping[str, str], marker: str,
              timeout_s: float, what: str, cwd: str | None = None, timeout_hint: str = "") -> JSONObject:
    """Run a stdlib probe program by path in the arm's own interpreter and return the JSON it prints after
    ``marker`` (its last such line), or ``{"error": ...}`` saying why there is none."""
    try:
        r = subprocess.run([arm.interpreter, str(script), *args], env=dict(env), capture_output=True, text=True,
                           timeout=timeout_s, cwd=cwd)
    except FileNotFoundError:
        return {"error": f"the arm's interpreter {arm.interpreter} does not exist"}
    except subprocess.TimeoutExpired:
        return {"error": f"the {what} timed out after {timeout_s:.0f} s{timeout_hint}"}
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(marker):
            result: JSONObject = json.loads(line[len(marker):])
            return result
    return {"error": f"the {what} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}"}

