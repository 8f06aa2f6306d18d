"""Side checks that read the serving processes themselves, not what the HTTP process says about them:
``process_env`` (a variable in the environment of the server's processes: what their imports saw) and
``log_line`` (the server's log since this launch).
"""

from __future__ import annotations

from typing import Any

import psutil

from harness.arms.arm import ResolvedArm
from harness.checks.match import MISSING, compare, shown
from harness.checks.result import CheckResult, check_name, short
from harness.config import CheckConfig
from harness.engines.base import Engine
from harness.results.records import JSONObject

#: Lines of evidence kept per log check.
_KEEP = 5


def server_processes(root_pid: int) -> list[psutil.Process]:
    """The server's root process and all its descendants (dead ones dropped)."""
    try:
        root = psutil.Process(root_pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(x for x in p.cmdline() if x) or p.name()
    except psutil.Error:
        return ""


def _environ(p: psutil.Process) -> dict[str, str] | None:
    try:
        return dict(p.environ())
    except psutil.Error:
        return None


def process_env_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    who = f"processes matching {c.process!r}" if c.process else "server processes"
    what = f"{c.key} in the environment of the {who}"
    _ok, exp = compare(MISSING, c, arm.source.tree)
    only_equals = c.equals is not None and c.contains is None and c.lacks is None
    expected = f"{c.key} {f'== {short(exp)}' if only_equals else exp} in each of >= {c.min_count} {who}"
    pid = engine.pid
    if pid is None:
        return CheckResult(name, c.kind, False, expected, "the engine has no server process (not launched by the "
                           "harness)", {}, arm.key, what)
    procs = [p for p in server_processes(pid) if not c.process or c.process in _cmdline(p)]
    seen: list[JSONObject] = []  # one row per process: pid, cmdline, value (and error)
    bad: list[JSONObject] = []
    for p in procs:
        env = _environ(p)
        value: Any = MISSING if env is None else env.get(c.key, MISSING)
        ok, _exp = compare(value, c, arm.source.tree)
        row: JSONObject = {"pid": p.pid, "cmdline": short(_cmdline(p), 120), "value": shown(value)}
        if env is None:
            row["error"] = "environment not readable"
        seen.append(row)
        if not ok:
            bad.append(row)
    passed = len(procs) >= c.min_count and not bad
    values = sorted({str(r["value"]) for r in seen})
    found = f"{len(procs)} process(es), {c.key} = {', '.join(values) or 'n/a'}"
    if bad:
        found += f"; not as expected in pid(s) {', '.join(str(r['pid']) for r in bad[:8])}"
    if len(procs) < c.min_count:
        found += f"; fewer than {c.min_count} processes"
    return CheckResult(name, c.kind, passed, expected, found,
                       {"root_pid": pid, "processes": seen[:64], "key": c.key, "process": c.process}, arm.key, what)


def _scan_log(path: str, start: int, needle: str | None, avoid: str | None) -> tuple[list[str], list[str]]:
    """Lines from byte ``start`` on that contain ``needle`` / ``avoid``."""
    hits: list[str] = []
    bad: list[str] = []
    with open(path, "rb") as f:
        f.seek(start)
        for raw in f:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if needle and needle in line:
                hits.append(line.strip())
            if avoid and avoid in line:
                bad.append(line.strip())
    return hits, bad


def log_line_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    needle = None if c.contains is None else str(c.contains)
    avoid = None if c.lacks is None else str(c.lacks)
    parts = ([f"contains {needle!r} (>= {c.min_count}x)"] if needle else []) + ([f"lacks {avoid!r}"] if avoid else [])
    expected = "server log since this launch " + " and ".join(parts or ["exists"])
    what = "server log"
    path, start = engine.log_location()
    if not path:
        return CheckResult(name, c.kind, False, expected, "the engine writes no server log", {}, arm.key, what)
    try:
        hits, bad = _scan_log(path, start, needle, avoid)
    except OSError as e:
        return CheckResult(name, c.kind, False, expected, f"cannot read {path}: {e}", {"log_path": path}, arm.key,
                           what)
    ok = (not needle or len(hits) >= c.min_count) and not bad
    found = [f"{len(lines)} line(s) with {text!r}" for text, lines in ((needle, hits), (avoid, bad)) if text]
    ev: JSONObject = {"log_path": path, "from_byte": start, "lines": hits[:_KEEP], "unwanted_lines": bad[:_KEEP]}
    return CheckResult(name, c.kind, ok, expected, "; ".join(found) or "log readable", ev, arm.key, what)
