"""Arms: how each side's server software is obtained, which side of the fix it is on, and how arms differ.

* :func:`resolve_arm` turns an arm config into a :class:`ResolvedArm`: interpreter, PYTHONPATH, env, flags,
  engine overrides and its source: ``installed`` (the interpreter's package), ``pythonpath`` (a source tree,
  plus optional ``subdir``, put FIRST on PYTHONPATH: the fast path for pure-Python fixes) or ``git`` (a
  worktree of ``path`` at ``ref`` that the harness creates under the run directory with
  ``git worktree add --detach``, then ``git apply`` of each of ``patches``).
* Side assertions, run before any question is sent, each giving a :class:`CheckResult` with its evidence:
  :func:`run_static_checks` (kind ``source``: in the arm's OWN interpreter, import ``module``, take the
  dotted ``object``, check that its source contains / lacks a text and that the module file lies under
  ``file_under``) and :func:`run_live_checks` (kinds ``fingerprint``, ``http``, ``custom``).
  :func:`assert_checks` raises :class:`SideAssertionError` naming the check, the expected and the found value.
* Arm diff: :func:`describe_launch` (argv, env with secrets redacted, source, fingerprint) for each arm,
  :func:`arm_diff` (the flattened dotted keys whose values differ, per-launch noise ignored) and
  :func:`disallowed` (differences not covered by the experiment's ``allowed_differences``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from harness.config import ArmConfig, CheckConfig
from harness.redact import redact_argv, redact_env

if TYPE_CHECKING:
    from harness.engines.base import Engine

SOURCE_KINDS = ("installed", "pythonpath", "git")
STATIC_KINDS = ("source",)
LIVE_KINDS = ("fingerprint", "http", "custom")
#: Seconds allowed for a source probe (importing a large package such as SGLang can take a while).
SOURCE_PROBE_TIMEOUT_S = 300.0
#: The stdlib-only launcher; the source probe borrows its module lookup.
LAUNCHER = Path(__file__).resolve().parent / "engines" / "launcher.py"


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    engine_overrides: dict[str, Any] = field(default_factory=dict)
    source: SourceInfo = field(default_factory=SourceInfo)
    checks: list[CheckConfig] = field(default_factory=list)
    #: Folder of the arm's YAML file (patches, probe scripts), when known.
    arm_dir: str | None = None
    arms_root: str | None = None

    @property
    def interpreter(self) -> str:
        return self.python or sys.executable

    def probe_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of the arm's own processes: inherited + ``extra`` + arm env + PYTHONPATH first."""
        env = {**os.environ, **{k: str(v) for k, v in (extra or {}).items()},
               **{k: str(v) for k, v in self.env.items()}}
        if self.pythonpath:
            inherited = env.get("PYTHONPATH", "")
            env["PYTHONPATH"] = os.pathsep.join([*self.pythonpath, *([inherited] if inherited else [])])
        return env

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["env"] = redact_env(self.env)
        d["args"] = redact_argv(self.args)
        d["interpreter"] = self.interpreter
        return d


def _arm_config(arm_cfg: Any) -> ArmConfig:
    if isinstance(arm_cfg, ArmConfig):
        return arm_cfg
    node = arm_cfg
    if not OmegaConf.is_config(node):
        node = OmegaConf.create(dataclasses.asdict(node) if dataclasses.is_dataclass(node) else dict(node))
    else:
        node = OmegaConf.create(OmegaConf.to_container(node, resolve=True, throw_on_missing=False))
    try:
        merged = OmegaConf.merge(OmegaConf.structured(ArmConfig), node)
        return OmegaConf.to_object(merged)  # type: ignore[return-value]
    except Exception as e:  # noqa: BLE001 - omegaconf raises several types
        raise ArmError(f"bad arm config: {e}") from e


def _git(args: Sequence[str], cwd: str | Path | None = None, check: bool = False,
         timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise ArmError(f"git {' '.join(args)} failed: {(r.stderr or r.stdout).strip()}")
    return r


def git_state(tree: str | Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of a git checkout; (None, None) when it is not one."""
    try:
        r = _git(["-C", str(tree), "rev-parse", "HEAD"])
        if r.returncode != 0:
            return None, None
        s = _git(["-C", str(tree), "status", "--porcelain", "--untracked-files=no"])
        return r.stdout.strip(), (bool(s.stdout.strip()) if s.returncode == 0 else None)
    except (OSError, subprocess.SubprocessError):
        return None, None


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find_arm_file(rel: str, arm_dir: str | Path | None, arms_root: str | Path | None) -> Path:
    """A file an arm names (patch, probe script): absolute, else in the arm's folder, else the one match
    under ``arms_root/arms`` (or ``arms_root`` itself)."""
    p = Path(rel).expanduser()
    if p.is_absolute():
        if not p.is_file():
            raise ArmError(f"{p} does not exist")
        return p
    if arm_dir is not None and (Path(arm_dir) / p).is_file():
        return (Path(arm_dir) / p).resolve()
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
        raise ArmError(f"{rel} not found (looked in {arm_dir or 'the arm folder'} and under "
                       f"{Path(arms_root or '.') / 'arms'})")
    raise ArmError(f"{rel} is ambiguous: {', '.join(map(str, matches))}; give a path relative to arms/ or "
                   f"an absolute one")


def _make_worktree(key: str, repo: Path, ref: str, run_dir: Path) -> tuple[Path, str]:
    if _git(["-C", str(repo), "rev-parse", "--git-dir"]).returncode != 0:
        raise ArmError(f"arm {key!r}: source.path {repo} is not a git repository")
    want = ref or "HEAD"
    r = _git(["-C", str(repo), "rev-parse", "--verify", "--quiet", f"{want}^{{commit}}"])
    if r.returncode != 0:
        raise ArmError(f"arm {key!r}: git ref {want!r} not found in {repo}")
    commit = r.stdout.strip()
    wt = (run_dir / "worktrees" / key).resolve()
    if wt.exists():  # a rerun of the same run directory: start from a clean worktree again
        if _git(["-C", str(repo), "worktree", "remove", "--force", str(wt)]).returncode != 0:
            shutil.rmtree(wt, ignore_errors=True)
    _git(["-C", str(repo), "worktree", "prune"])
    wt.parent.mkdir(parents=True, exist_ok=True)
    _git(["-C", str(repo), "worktree", "add", "--detach", str(wt), commit], check=True)
    return wt, commit


def _apply_patches(key: str, wt: Path, patches: Iterable[str], arm_dir: str | None,
                   arms_root: str | None) -> list[dict[str, str]]:
    applied: list[dict[str, str]] = []
    for rel in patches:
        try:
            patch = find_arm_file(rel, arm_dir, arms_root)
        except ArmError as e:
            raise ArmError(f"arm {key!r}: patch {e}") from None
        r = _git(["-C", str(wt), "apply", "--check", str(patch)])
        if r.returncode != 0:
            raise ArmError(f"arm {key!r}: patch {patch} does not apply to the worktree {wt}:\n"
                           f"{(r.stderr or r.stdout).strip()}")
        _git(["-C", str(wt), "apply", str(patch)], check=True)
        applied.append({"file": str(patch), "sha256": sha256_file(patch)})
    return applied


def resolve_arm(key: str, arm_cfg: Any, run_dir: str | Path, arms_root: str | Path | None = None, *,
                arm_dir: str | Path | None = None, strict: bool = True) -> ResolvedArm:
    """Prepare arm ``key`` (``cfg.arms[key]``: DictConfig, dict or ArmConfig) for a run in ``run_dir``.

    ``git`` arms get a worktree under ``run_dir/worktrees/KEY`` with their patches applied. With
    ``strict=False`` (dry runs) a missing source tree is recorded in ``source.problems`` instead of raising.
    """
    a = _arm_config(arm_cfg)
    run_dir = Path(run_dir).resolve()
    root = str(Path(arms_root).resolve()) if arms_root is not None else None
    adir = str(Path(arm_dir).resolve()) if arm_dir is not None else None
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
    if s.kind == "pythonpath":
        tree = Path(s.path).expanduser().resolve()
        src.path = str(tree)
        src.tree = str(tree)
        if not tree.is_dir():
            msg = f"arm {key!r}: source tree {tree} does not exist (source.path)"
            if strict:
                raise ArmError(msg)
            src.problems.append(msg)
        else:
            src.commit, src.dirty = git_state(tree)
    elif s.kind == "git":
        repo = Path(s.path).expanduser().resolve()
        src.path = str(repo)
        if not repo.is_dir():
            msg = f"arm {key!r}: git repository {repo} does not exist (source.path)"
            if strict:
                raise ArmError(msg)
            src.problems.append(msg)
        else:
            wt, _commit = _make_worktree(key, repo, s.ref, run_dir)
            src.worktree = src.tree = str(wt)
            src.patches = _apply_patches(key, wt, s.patches, adir, root)
            src.commit, src.dirty = git_state(wt)
    if src.tree:
        entry = Path(src.tree) / s.subdir if s.subdir else Path(src.tree)
        if strict and not entry.is_dir():
            raise ArmError(f"arm {key!r}: {entry} does not exist (source.subdir)")
        src.pythonpath = [str(entry)]
    return ResolvedArm(key=key, name=a.name, side=a.side, description=a.description, python=a.python,
                       pythonpath=list(src.pythonpath), env={k: str(v) for k, v in a.env.items()},
                       args=[str(x) for x in a.args], engine_overrides=dict(a.engine), source=src,
                       checks=list(a.checks), arm_dir=adir, arms_root=root)


def remove_worktree(arm: ResolvedArm) -> None:
    """Remove the worktree a ``git`` arm got (optional: keeping it keeps the run reproducible)."""
    if arm.source.kind == "git" and arm.source.worktree:
        if _git(["-C", arm.source.path, "worktree", "remove", "--force", arm.source.worktree]).returncode != 0:
            shutil.rmtree(arm.source.worktree, ignore_errors=True)
        _git(["-C", arm.source.path, "worktree", "prune"])


# ------------------------------------------------------------------------------------ check results
@dataclass
class CheckResult:
    """One side assertion's outcome. ``expected`` / ``found`` are the raw values where the check compares
    one value (http / fingerprint ``equals``: e.g. ``'fix'`` and ``'baseline'``), else short descriptions;
    ``what`` says what was looked at (``GET /get_server_info -> build``)."""

    name: str
    kind: str
    passed: bool
    expected: Any
    found: Any
    evidence: dict[str, Any] = field(default_factory=dict)
    arm: str = ""
    what: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        what = f"{self.kind}: {self.what}" if self.what else self.kind
        return f"check {self.name!r} ({what}): expected {_short(self.expected, 300)}; found {_short(self.found, 300)}"

    def line(self) -> str:
        return ("[PASS] " if self.passed else "[FAIL] ") + self.describe()


class SideAssertionError(RuntimeError):
    """A side assertion failed: the arm's server is not on the side of the fix it claims."""

    def __init__(self, failures: Sequence[CheckResult] | str, arm: str = ""):
        if isinstance(failures, str):  # a ready-made message
            self.failures: list[CheckResult] = []
            self.arm = arm
            super().__init__(failures)
            return
        self.failures = list(failures)
        self.arm = arm
        who = f" for arm {arm!r}" if arm else ""
        lines = [f.describe() for f in self.failures]
        super().__init__(f"side assertion failed{who}: " + "\n  ".join(lines))


def assert_checks(results: Sequence[CheckResult], arm: str = "") -> None:
    """Raise :class:`SideAssertionError` if any check failed."""
    failed = [r for r in results if not r.passed]
    if failed:
        raise SideAssertionError(failed, arm or failed[0].arm)


def check_name(c: CheckConfig, index: int = 0) -> str:
    if c.name:
        return c.name
    what = c.object or c.key or c.function or c.module
    return f"{c.kind}[{index}]" + (f" {what}" if what else "")


# ------------------------------------------------------------------------- dotted lookup / compare
class _Missing:
    def __repr__(self) -> str:
        return "<absent>"


MISSING = _Missing()


def lookup(obj: Any, key: str) -> Any:
    """Value at a dotted ``key``; keys that themselves contain dots (module names, file names) are matched
    longest-first. Returns :data:`MISSING` when absent. List items by index (``a.0.b``)."""
    if not key:
        return obj
    parts = key.split(".")

    def rec(o: Any, i: int) -> Any:
        if i == len(parts):
            return o
        if isinstance(o, Mapping):
            for j in range(len(parts), i, -1):
                k = ".".join(parts[i:j])
                if k in o:
                    v = rec(o[k], j)
                    if v is not MISSING:
                        return v
            return MISSING
        if isinstance(o, list) and re.fullmatch(r"-?\d+", parts[i]):
            idx = int(parts[i])
            if -len(o) <= idx < len(o):
                return rec(o[idx], i + 1)
        return MISSING

    return rec(obj, 0)


def _scalar_eq(found: Any, expected: Any) -> bool:
    if found == expected and type(found) is type(expected):
        return True
    if isinstance(found, Mapping | list) or isinstance(expected, Mapping | list):
        return found == expected
    if isinstance(found, bool) or isinstance(expected, bool):
        return str(found).lower() == str(expected).lower()
    if found == expected:
        return True
    return str(found) == str(expected)


def _contains(found: Any, needle: Any) -> bool:
    if found is MISSING or found is None:
        return False
    if isinstance(found, str):
        return str(needle) in found
    if isinstance(found, Mapping):
        return str(needle) in found or needle in found
    if isinstance(found, list | tuple | set):
        return any(_scalar_eq(x, needle) for x in found)
    return str(needle) in str(found)


def _short(v: Any, n: int = 200) -> str:
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def expand(value: Any, arm: ResolvedArm | None) -> Any:
    """``<source>`` in an expected string stands for the arm's source tree (resolved path)."""
    if isinstance(value, str) and arm is not None and "<source>" in value and arm.source.tree:
        return value.replace("<source>", arm.source.tree)
    return value


def compare(found: Any, c: CheckConfig, arm: ResolvedArm | None = None) -> tuple[bool, Any]:
    """Apply a check's equals / contains / lacks to ``found``: (passed, expected), where ``expected`` is the
    ``equals`` value itself when that is the whole check, else a description such as ``contains 'x'``."""
    parts: list[str] = []
    ok = found is not MISSING
    equals, contains, lacks = expand(c.equals, arm), expand(c.contains, arm), expand(c.lacks, arm)
    if equals is not None:
        ok = ok and _scalar_eq(found, equals)
        parts.append(f"== {_short(equals)}")
    if contains is not None:
        ok = ok and _contains(found, contains)
        parts.append(f"contains {_short(contains)}")
    if lacks is not None:
        ok = ok and not _contains(found, lacks)
        parts.append(f"lacks {_short(lacks)}")
    if equals is not None and contains is None and lacks is None:
        return ok, equals
    return ok, " and ".join(parts) or "present"


# --------------------------------------------------------------------------------- static checks
_PROBE = textwrap.dedent(r'''
    import ast, hashlib, importlib, importlib.util, inspect, json, os, sys
    req = json.loads(sys.argv[1])
    out = {"python": sys.executable, "python_version": sys.version.split()[0]}

    # The stdlib-only launcher's module lookup (the same one the live fingerprint uses), loaded by path.
    _spec = importlib.util.spec_from_file_location("abh_launcher", req["launcher"])
    _launcher = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_launcher)

    def find_file(name):
        return _launcher.find_module_file(name)[0]

    def ast_source(path, dotted):
        text = open(path, encoding="utf-8").read()
        if not dotted:
            return text, 1
        body = ast.parse(text).body
        node = None
        for part in dotted.split("."):
            node = None
            for n in body:
                names = []
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = [n.name]
                elif isinstance(n, ast.Assign):
                    names = [t.id for t in n.targets if isinstance(t, ast.Name)]
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    names = [n.target.id]
                if part in names:
                    node = n  # the last definition wins, as at import time
            if node is None:
                raise LookupError("%s has no %r (looked for %r)" % (path, part, dotted))
            body = getattr(node, "body", [])
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        lines = text.splitlines(True)
        return "".join(lines[start - 1:node.end_lineno]), start

    module, obj_path = req["module"], req.get("object") or ""
    src = None
    try:
        mod = importlib.import_module(module)
        out["mode"] = "import"
        out["module_file"] = os.path.abspath(getattr(mod, "__file__", "") or "") or None
        obj = mod
        try:
            for part in [p for p in obj_path.split(".") if p]:
                obj = getattr(obj, part)
        except AttributeError as e:
            out["error"] = "object %r not found in module %s: %s" % (obj_path, module, e)
        else:
            try:
                src = inspect.getsource(obj)
                lines, start = inspect.getsourcelines(obj)
                out["first_line"] = start
                out["object_file"] = os.path.abspath(inspect.getsourcefile(obj) or "")
            except (OSError, TypeError) as e:
                out["error"] = "no source for %s.%s: %s" % (module, obj_path, e)
    except BaseException as e:  # the module does not import here (e.g. no GPU libraries): read its file
        out["import_error"] = "%s: %s" % (type(e).__name__, e)
        path = find_file(module)
        out["module_file"] = path
        if path is None:
            out["error"] = "module %s not found on this interpreter's sys.path (import failed: %s)" % (
                module, out["import_error"])
        else:
            try:
                src, start = ast_source(path, obj_path)
                out["mode"] = "ast"
                out["first_line"] = start
                out["object_file"] = path
            except (LookupError, SyntaxError, OSError, UnicodeDecodeError) as e2:
                out["error"] = "%s: %s" % (type(e2).__name__, e2)
    if src is not None:
        out["source"] = src
        out["source_sha256"] = hashlib.sha256(src.encode()).hexdigest()
    out["sys_path_head"] = sys.path[:4]
    sys.stdout.write("\nABH-PROBE-RESULT:" + json.dumps(out) + "\n")
''')


def probe_source(arm: ResolvedArm, module: str, obj: str, env: Mapping[str, str] | None = None,
                 timeout_s: float = SOURCE_PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Run the source probe in the arm's own interpreter (with its PYTHONPATH and env)."""
    argv = [arm.interpreter, "-c", _PROBE, json.dumps({"module": module, "object": obj, "launcher": str(LAUNCHER)})]
    cwd = arm.source.tree or None
    if cwd and not Path(cwd).is_dir():
        cwd = None
    try:
        r = subprocess.run(argv, env=arm.probe_env(env), capture_output=True, text=True, timeout=timeout_s,
                           cwd=cwd)
    except FileNotFoundError:
        return {"error": f"the arm's interpreter {arm.interpreter} does not exist"}
    except subprocess.TimeoutExpired:
        return {"error": f"the source probe timed out after {timeout_s:.0f} s (importing {module})"}
    marker = "ABH-PROBE-RESULT:"
    for line in reversed(r.stdout.splitlines()):
        if line.startswith(marker):
            return json.loads(line[len(marker):])
    return {"error": f"the source probe failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}"}


def _resolve_under(arm: ResolvedArm, file_under: str) -> Path:
    p = Path(file_under).expanduser()
    if p.is_absolute():
        return p.resolve()
    base = Path(arm.source.tree) if arm.source.tree else Path.cwd()
    return (base / p).resolve()


def _is_under(path: str | None, root: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(root)
        return True
    except ValueError:
        return False


def _matching_lines(src: str, text: str, first_line: int, limit: int = 3) -> list[str]:
    out = []
    first = text.splitlines()[0] if text.strip() else text
    for i, line in enumerate(src.splitlines()):
        if first and first in line:
            out.append(f"{first_line + i}: {line.strip()}")
            if len(out) >= limit:
                break
    return out


def _source_check(arm: ResolvedArm, c: CheckConfig, index: int, env: Mapping[str, str] | None) -> CheckResult:
    name = check_name(c, index)
    target = f"{c.module}.{c.object}" if c.object else c.module
    exp: list[str] = []
    if c.contains is not None:
        exp.append(f"source of {target} contains {_short(c.contains)}")
    if c.lacks is not None:
        exp.append(f"source of {target} lacks {_short(c.lacks)}")
    under = _resolve_under(arm, c.file_under) if c.file_under else None
    if under is not None:
        exp.append(f"module file under {under}")
    expected = "; ".join(exp) or f"{target} exists"
    if not c.module:
        return CheckResult(name, c.kind, False, expected, "the check names no module", arm=arm.key, what=target)
    res = probe_source(arm, c.module, c.object, env)
    ev = {k: v for k, v in res.items() if k != "source"}
    ev["interpreter"] = arm.interpreter
    src = res.get("source")
    if src is None:
        return CheckResult(name, c.kind, False, expected, res.get("error", "no source"), ev, arm.key, target)
    found: list[str] = []
    ok = True
    first = int(res.get("first_line") or 1)
    if c.contains is not None:
        has = c.contains in src
        ok &= has
        found.append(f"contains {_short(c.contains)}: {'yes' if has else 'no'}")
        if has:
            ev["contains_at"] = _matching_lines(src, c.contains, first)
    if c.lacks is not None:
        has = c.lacks in src
        ok &= not has
        found.append(f"contains {_short(c.lacks)}: {'yes' if has else 'no'}")
        if has:
            ev["lacks_violated_at"] = _matching_lines(src, c.lacks, first)
    mfile = res.get("module_file")
    if under is not None:
        inside = _is_under(mfile, under)
        ok &= inside
        found.append(f"module file {mfile}" + ("" if inside else f" (not under {under})"))
    else:
        found.append(f"module file {mfile}")
    if res.get("mode") == "ast":
        found.append("read from the file: the module does not import in this interpreter "
                     f"({_short(res.get('import_error', ''), 120)})")
    return CheckResult(name, c.kind, ok, expected, "; ".join(found), ev, arm.key, target)


def run_static_checks(arm: ResolvedArm, env: Mapping[str, str] | None = None) -> list[CheckResult]:
    """The checks that need no server (kind ``source``), each in the arm's own interpreter.

    ``env``: extra environment (e.g. the engine's ``env``) the arm's processes get; the arm's own env and
    PYTHONPATH are always applied.
    """
    return [_source_check(arm, c, i, env) for i, c in enumerate(arm.checks) if c.kind in STATIC_KINDS]


# ----------------------------------------------------------------------------------- live checks
def load_callable(spec: str, arm: ResolvedArm | None = None) -> Callable[..., Any]:
    """``module:function`` or ``path/to/file.py:function`` (relative to the arm's folder or arms/)."""
    mod_name, sep, fn_name = spec.partition(":")
    if not sep or not mod_name or not fn_name:
        raise ArmError(f"custom check function must be 'module:function', not {spec!r}")
    module = None
    if not mod_name.endswith(".py") and "/" not in mod_name:
        try:
            module = importlib.import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name != mod_name and not mod_name.startswith(f"{e.name}."):
                raise
    if module is None:
        rel = mod_name if mod_name.endswith(".py") else mod_name.replace(".", "/") + ".py"
        path = find_arm_file(rel, arm.arm_dir if arm else None, arm.arms_root if arm else None)
        mspec = importlib.util.spec_from_file_location(f"abh_probe_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}",
                                                       path)
        if mspec is None or mspec.loader is None:
            raise ArmError(f"cannot load {path}")
        module = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(module)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ArmError(f"{mod_name} has no function {fn_name!r}")
    return fn


def _found(value: Any) -> Any:
    return "<absent>" if value is MISSING else value


def _fingerprint_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    what = f"fingerprint {c.key}"
    fp = engine.fingerprint()
    ok, exp = compare(MISSING, c, arm)
    if fp is None:
        return CheckResult(name, c.kind, False, exp, "no fingerprint (engine.fingerprint is false, or the launcher "
                           "wrote none)", {}, arm.key, what)
    found = lookup(fp, c.key)
    ok, exp = compare(found, c, arm)
    return CheckResult(name, c.kind, ok, exp, _found(found),
                       {"key": c.key, "fingerprint_path": engine.launch_spec().fingerprint_path}, arm.key, what)


def _http_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    import requests

    name = check_name(c, index)
    path = c.path or "/get_server_info"
    what = f"GET {path} -> {c.key or '(body)'}"
    url = engine.url + (path if path.startswith("/") else "/" + path)
    try:
        r = requests.get(url, timeout=30)
        status = r.status_code
        body = r.json()
    except (requests.RequestException, ValueError) as e:
        return CheckResult(name, c.kind, False, compare(MISSING, c, arm)[1], f"GET {url} failed: {e}",
                           {"url": url}, arm.key, what)
    found = lookup(body, c.key)
    ok, exp = compare(found, c, arm)
    ev = {"url": url, "status": status, "key": c.key}
    if status != 200:
        return CheckResult(name, c.kind, False, exp, f"HTTP {status}", ev, arm.key, what)
    return CheckResult(name, c.kind, ok, exp, _found(found), ev, arm.key, what)


def _custom_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    what = f"{c.function}({engine.url})"
    try:
        fn = load_callable(c.function, arm)
        out = fn(engine.url)
    except Exception as e:  # noqa: BLE001 - a probe's failure is the check's failure, with its message
        return CheckResult(name, c.kind, False, True, f"{type(e).__name__}: {e}", {"function": c.function},
                           arm.key, what)
    evidence: Any = None
    if isinstance(out, tuple) and len(out) == 2:
        out, evidence = out
    ok = bool(out)
    return CheckResult(name, c.kind, ok, True, ok, {"function": c.function, "evidence": evidence}, arm.key, what)


def run_live_checks(arm: ResolvedArm, engine: Engine) -> list[CheckResult]:
    """The checks against the running server: ``fingerprint``, ``http``, ``custom``."""
    out: list[CheckResult] = []
    for i, c in enumerate(arm.checks):
        if c.kind == "fingerprint":
            out.append(_fingerprint_check(arm, engine, c, i))
        elif c.kind == "http":
            out.append(_http_check(arm, engine, c, i))
        elif c.kind == "custom":
            out.append(_custom_check(arm, engine, c, i))
    return out


# -------------------------------------------------------------------------------------- arm diff
#: Keys (dotted prefixes) that differ per launch and never count as a difference between arms.
NOISE_PREFIXES = (
    # argv is derived from python, module, engine fields and args, which are all compared on their own
    "arm", "argv", "command", "normalize", "harness", "engine.port",
    "source.worktree", "source.problems",
    "fingerprint.pid", "fingerprint.ppid", "fingerprint.time", "fingerprint.argv", "fingerprint.argv_sha256",
    "fingerprint.cwd",
    "fingerprint.sys_path", "fingerprint.pythonpath", "fingerprint.guards", "fingerprint.error",
)
_FP_DROP = ("pid", "ppid", "time", "argv", "argv_sha256", "cwd", "sys_path", "pythonpath", "guards", "schema_version", "kind")


def parse_flags(argv: Sequence[str]) -> dict[str, Any]:
    """``["--tp", "8", "--flag", "--x=1", "pos"]`` -> ``{"--tp": "8", "--flag": True, "--x": "1",
    "_positional": ["pos"]}``; a repeated flag collects a list."""
    out: dict[str, Any] = {}
    pos: list[str] = []
    i = 0

    def is_flag(t: str) -> bool:
        return t.startswith("-") and len(t) > 1 and not re.fullmatch(r"-\d+(\.\d*)?([eE][-+]?\d+)?", t)

    while i < len(argv):
        t = str(argv[i])
        if is_flag(t):
            name, eq, val = t.partition("=")
            value: Any
            if eq:
                value = val
            elif i + 1 < len(argv) and not is_flag(str(argv[i + 1])):
                value = str(argv[i + 1])
                i += 1
            else:
                value = True
            if name in out:
                prev = out[name]
                out[name] = [*prev, value] if isinstance(prev, list) else [prev, value]
            else:
                out[name] = value
        else:
            pos.append(t)
        i += 1
    if pos:
        out["_positional"] = pos
    return out


def describe_launch(arm: ResolvedArm, engine: Engine) -> dict[str, Any]:
    """What an arm's launch is: command (for display), python, module, engine fields, flags, env (secrets
    redacted), source and the live fingerprint (None before launch). Input of :func:`arm_diff`."""
    spec = engine.launch_spec()
    cfg = engine.config_dict()
    user_args = [str(a) for a in (*cfg.get("args", []), *arm.args)]
    env = {**{str(k): str(v) for k, v in (cfg.get("env") or {}).items()}, **arm.env}
    fp = engine.fingerprint()
    fp_view = None if fp is None else {k: v for k, v in fp.items() if k not in _FP_DROP}
    launched = spec.launched
    ignore = set(getattr(engine, "diff_ignore", ()))
    return {
        "arm": {"key": arm.key, "name": arm.name, "side": arm.side},
        "argv": redact_argv(spec.server_argv),
        "engine_kind": engine.kind,
        "simulated": engine.simulated,
        "python": arm.interpreter if launched else None,
        "module": cfg.get("module") if launched else None,
        "command": {"argv": redact_argv(spec.argv), "server_argv": redact_argv(spec.server_argv),
                    "command_line": spec.command_line() if launched else "", "env_delta": redact_env(spec.env_delta),
                    "cwd": spec.cwd, "log_path": spec.log_path, "fingerprint_path": spec.fingerprint_path,
                    "url": spec.url},
        "engine": {k: v for k, v in cfg.items() if k not in ("args", "env") and k not in ignore},
        # how the harness drives the server (timeouts, simulated fault injection): not a difference of arms
        "harness": {k: v for k, v in cfg.items() if k in ignore},
        "args": parse_flags(redact_argv(user_args)),
        "env": redact_env(env),
        "source": arm.source.to_dict(),
        "fingerprint": fp_view,
        "normalize": {"<source>": arm.source.tree, "<run_dir>": str(engine.run_dir),
                      "<worktree>": arm.source.worktree},
    }


def _normalize(value: Any, roots: list[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for root, token in roots:
            value = value.replace(root, token)
        return value
    if isinstance(value, Mapping):
        return {_normalize(k, roots) if isinstance(k, str) else k: _normalize(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v, roots) for v in value]
    return value


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts -> {dotted key: leaf}; lists and scalars are leaves; an empty dict has no keys."""
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def _covered(key: str, prefixes: Iterable[str]) -> bool:
    for p in prefixes:
        p = p.rstrip(".")
        if key == p or key.startswith(p + "."):
            return True
    return False


def arm_diff(descs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Dotted keys whose values differ between arms: ``[{"key", "values": {arm: value or "<absent>"}}]``.

    Paths inside each arm's own source tree and the run directory are normalised (``<source>``,
    ``<run_dir>``) outside the ``source`` section, so two trees that hold the same files do not differ by
    their location; per-launch noise (port, log path, worktree path, pids, times) is ignored.
    """
    flat: dict[str, dict[str, Any]] = {}
    for name, d in descs.items():
        nz = d.get("normalize") or {}
        roots = sorted(((r, t) for t, r in nz.items() if r and t != "<worktree>"), key=lambda x: -len(x[0]))
        wt = [(nz["<worktree>"], "<worktree>")] if nz.get("<worktree>") else []
        norm = {k: _normalize(v, wt if k == "source" else roots) for k, v in d.items()}
        flat[name] = {k: v for k, v in flatten(norm).items() if not _covered(k, NOISE_PREFIXES)}
    keys = sorted(set().union(*[set(f) for f in flat.values()])) if flat else []
    diffs: list[dict[str, Any]] = []
    absent = "<absent>"
    for k in keys:
        vals = {name: f.get(k, absent) for name, f in flat.items()}
        if len({json.dumps(v, sort_keys=True, default=str) for v in vals.values()}) > 1:
            diffs.append({"key": k, "values": vals})
    return diffs


def disallowed(diffs: Iterable[Mapping[str, Any]], allowed: Iterable[str]) -> list[dict[str, Any]]:
    """The differences not covered by ``allowed`` (dotted prefixes: ``source``, ``env.SGLANG_X``, ``args``,
    ``engine.accuracy``, ``fingerprint.files`` ...)."""
    allowed = [str(a) for a in allowed]
    return [dict(d) for d in diffs if not _covered(str(d["key"]), allowed)]


def format_diffs(diffs: Iterable[Mapping[str, Any]], limit: int = 40) -> str:
    """Human lines: ``env.X: a='1' b=<absent>``."""
    lines = []
    for n, d in enumerate(diffs):
        if n >= limit:
            lines.append("...")
            break
        vals = " ".join(f"{k}={_short(v, 80) if v != '<absent>' else v}" for k, v in d["values"].items())
        lines.append(f"{d['key']}: {vals}")
    return "\n".join(lines)
