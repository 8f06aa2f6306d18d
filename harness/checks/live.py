"""Side checks against the running server: ``fingerprint`` (a dotted key of the launcher's fingerprint of the
serving process), ``http`` (a dotted key of a GET endpoint's JSON), ``custom`` (a function called with the
server URL), and those of :mod:`harness.checks.processes` and :mod:`harness.checks.routed`."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

import requests

from harness.arms.arm import ArmError, ResolvedArm, find_arm_file
from harness.checks.match import MISSING, compare, lookup, shown
from harness.checks.processes import log_line_check, process_env_check
from harness.checks.result import CheckResult, check_name
from harness.checks.routed import routed_experts_check
from harness.config import CheckConfig
from harness.engines.base import Engine, refuse_redirect
from harness.results.records import JSONObject


def load_callable(spec: str, arms_root: str | None = None) -> Callable[..., Any]:
    """``module:function`` (importable), or ``path/to/file.py:function`` / ``name:function`` found as a file
    under ``arms_root/arms`` (see :func:`harness.arms.arm.find_arm_file`)."""
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
        path = find_arm_file(rel, arms_root)
        mname = f"abh_probe_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
        mspec = importlib.util.spec_from_file_location(mname, path)
        if mspec is None or mspec.loader is None:
            raise ArmError(f"cannot load {path}")
        module = importlib.util.module_from_spec(mspec)
        mspec.loader.exec_module(module)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ArmError(f"{mod_name} has no function {fn_name!r}")
    return fn


def _fingerprint_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    what = f"fingerprint {c.key}"
    fp = engine.fingerprint()
    if fp is None:
        return CheckResult(name, c.kind, False, compare(MISSING, c, arm.source.tree)[1], "no fingerprint "
                           "(engine.fingerprint is false, or the launcher wrote none)", {}, arm.key, what)
    found = lookup(fp, c.key)
    ok, exp = compare(found, c, arm.source.tree)
    return CheckResult(name, c.kind, ok, exp, shown(found),
                       {"key": c.key, "fingerprint_path": engine.launch_spec().fingerprint_path}, arm.key, what)


#: Endpoints SGLang renamed: each is tried after the other when the server answers 404.
ENDPOINT_ALIASES = {"/server_info": "/get_server_info", "/get_server_info": "/server_info",
                    "/model_info": "/get_model_info", "/get_model_info": "/model_info"}


def _http_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    path = c.path or "/server_info"
    path = path if path.startswith("/") else "/" + path
    what = f"GET {path} -> {c.key or '(body)'}"
    url = engine.url + path
    try:
        r = requests.get(url, timeout=30, headers=engine.http_headers, allow_redirects=False)
        if r.status_code == 404 and path in ENDPOINT_ALIASES:
            url = engine.url + ENDPOINT_ALIASES[path]
            r = requests.get(url, timeout=30, headers=engine.http_headers, allow_redirects=False)
        refuse_redirect(r, "GET", path)
        status = r.status_code
        body = r.json()
    except (requests.RequestException, ValueError) as e:
        return CheckResult(name, c.kind, False, compare(MISSING, c, arm.source.tree)[1], f"GET {url} failed: {e}",
                           {"url": url}, arm.key, what)
    found = lookup(body, c.key)
    ok, exp = compare(found, c, arm.source.tree)
    ev: JSONObject = {"url": url, "status": status, "key": c.key}
    if status != 200:
        return CheckResult(name, c.kind, False, exp, f"HTTP {status}", ev, arm.key, what)
    return CheckResult(name, c.kind, ok, exp, shown(found), ev, arm.key, what)


def _custom_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    what = f"{c.function}({engine.url})"
    try:
        fn = load_callable(c.function, arm.arms_root)
        out = fn(engine.url)
    except Exception as e:  # noqa: BLE001 - a probe's failure is the check's failure, with its message
        return CheckResult(name, c.kind, False, True, f"{type(e).__name__}: {e}", {"function": c.function},
                           arm.key, what)
    evidence: Any = None
    if isinstance(out, tuple) and len(out) == 2:
        out, evidence = out
    ok = bool(out)
    return CheckResult(name, c.kind, ok, True, ok, {"function": c.function, "evidence": evidence}, arm.key, what)


_CHECKS = {"fingerprint": _fingerprint_check, "http": _http_check, "custom": _custom_check,
           "process_env": process_env_check, "log_line": log_line_check, "routed_experts": routed_experts_check}


def run_live_checks(arm: ResolvedArm, engine: Engine) -> list[CheckResult]:
    """The checks against the running server, in the arm's order."""
    return [_CHECKS[c.kind](arm, engine, c, i) for i, c in enumerate(arm.checks) if c.kind in _CHECKS]
