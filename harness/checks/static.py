"""Side checks that need no server (kind ``source``), each run in the arm's OWN interpreter with the arm's
environment (``source_probe.py``, by path).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path

from harness.arms.arm import ResolvedArm, run_probe
from harness.checks import source_probe
from harness.checks.result import CheckResult, check_name, short
from harness.config import CheckConfig
from harness.engines.base import LAUNCHER
from harness.results.records import JSONObject

STATIC_KINDS = ("source",)
#: Seconds allowed for a source probe (importing a large package such as SGLang can take a while).
SOURCE_PROBE_TIMEOUT_S = 300.0
#: The probe program, run by file path with the arm's interpreter.
SOURCE_PROBE = Path(source_probe.__file__).resolve()


def probe_source(arm: ResolvedArm, module: str, obj: str, env: Mapping[str, str] | None = None,
                 timeout_s: float = SOURCE_PROBE_TIMEOUT_S) -> JSONObject:
    """What the source probe prints in the arm's own interpreter (with its env, in its tree), or an error."""
    cwd = arm.source.tree if arm.source.tree and Path(arm.source.tree).is_dir() else None
    return run_probe(arm, SOURCE_PROBE, [json.dumps({"module": module, "object": obj, "launcher": str(LAUNCHER)})],
                     env=arm.process_env(env), marker=source_probe.MARKER, timeout_s=timeout_s,
                     what="source probe", cwd=cwd, timeout_hint=f" (importing {module})")


def _resolve_under(arm: ResolvedArm, file_under: str) -> Path:
    """``file_under`` as given when absolute, else under the arm's source tree (or the working directory)."""
    return (Path(arm.source.tree or Path.cwd()) / Path(file_under).expanduser()).resolve()


def _matching_lines(src: str, text: str, first_line: int, limit: int = 3) -> list[str]:
    first = text.splitlines()[0] if text.strip() else text
    hits = (f"{first_line + i}: {line.strip()}" for i, line in enumerate(src.splitlines())
            if first and first in line)
    return list(itertools.islice(hits, limit))


def _source_check(arm: ResolvedArm, c: CheckConfig, index: int, env: Mapping[str, str] | None) -> CheckResult:
    name = check_name(c, index)
    target = f"{c.module}.{c.object}" if c.object else c.module
    exp = [f"source of {target} {verb} {short(text)}"
           for verb, text in (("contains", c.contains), ("lacks", c.lacks)) if text is not None]
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
    if not isinstance(src, str):
        return CheckResult(name, c.kind, False, expected, res.get("error", "no source"), ev, arm.key, target)
    found: list[str] = []
    ok = True
    line = res.get("first_line")
    first = line if isinstance(line, int) and line else 1
    for text, wanted, where in ((c.contains, True, "contains_at"), (c.lacks, False, "lacks_violated_at")):
        if text is not None:
            has = text in src
            ok &= has == wanted
            found.append(f"contains {short(text)}: {'yes' if has else 'no'}")
            if has:
                ev[where] = _matching_lines(src, text, first)
    mfile = res.get("module_file")
    mfile = mfile if isinstance(mfile, str) else None
    inside = under is None or bool(mfile and Path(mfile).resolve().is_relative_to(under))
    ok &= inside
    found.append(f"module file {mfile}" + ("" if inside else f" (not under {under})"))
    if res.get("mode") == "ast":
        found.append("read from the file: the module does not import in this interpreter "
                     f"({short(res.get('import_error', ''), 120)})")
    return CheckResult(name, c.kind, ok, expected, "; ".join(found), ev, arm.key, target)


def run_static_checks(arm: ResolvedArm, env: Mapping[str, str] | None = None) -> list[CheckResult]:
    """The checks that need no server, each in the arm's own interpreter; ``env``: extra environment (the
    engine's ``env``) on top of the arm's own env and PYTHONPATH."""
    return [_source_check(arm, c, i, env) for i, c in enumerate(arm.checks) if c.kind in STATIC_KINDS]
