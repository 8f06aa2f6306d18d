"""What each arm's launch is (:func:`describe_launch`), how two launches differ (:func:`arm_diff`), which
differences the experiment allows (:func:`disallowed`), and how the running servers' own ``/server_info``
differs (:func:`server_info_diff`: shown and recorded, not enforced).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any, NotRequired, TypedDict

from harness.arms import stack
from harness.arms.arm import ResolvedArm
from harness.engines.base import Engine
from harness.results.records import JSON, JSONObject
from harness.util.cmdline import FlagValue, parse_flags
from harness.util.keys import flatten, matches
from harness.util.redact import redact_argv, redact_env

#: Fingerprint fields left out of a launch description (per-process, or the record's own format).
_FP_DROP = ("pid", "ppid", "time", "argv", "argv_sha256", "cwd", "sys_path", "pythonpath", "guards", "schema_version",
            "kind")
#: Keys (dotted prefixes) that differ per launch and never count as a difference between arms (argv is derived
#: from python, module, engine fields and args, which are all compared on their own).
NOISE_PREFIXES = ("arm", "argv", "command", "normalize", "harness", "engine.port", "source.worktree",
                  "source.problems", "fingerprint.error", *(f"fingerprint.{k}" for k in _FP_DROP))
#: Shown for a key one arm does not have.
ABSENT = "<absent>"



class ArmIdentity(TypedDict):
    key: str
    name: str
    side: str


class LaunchCommand(TypedDict):
    """How the launch is started, for display (secrets redacted): not compared (see :data:`NOISE_PREFIXES`)."""

    argv: list[str]
    server_argv: list[str]
    command_line: str
    env_delta: dict[str, str]
    cwd: str
    log_path: str
    fingerprint_path: str | None
    url: str


class LaunchDescription(TypedDict):
    """What an arm's launch is (:func:`describe_launch`), as the manifest records it under ``arms.<key>.launch``:
    before any server without its ``fingerprint`` (:func:`static_description`), after the launch with it."""

    arm: ArmIdentity
    argv: list[str]
    engine_kind: str
    simulated: bool
    python: str | None
    module: str | None
    command: LaunchCommand
    #: the engine's config fields (args and env apart), and the ones that say how the harness drives the server
    engine: JSONObject
    harness: JSONObject
    args: dict[str, FlagValue]
    env: dict[str, str]
    source: JSONObject
    #: the serving process's own record (None before the launch, or without one)
    fingerprint: NotRequired[JSONObject | None]
    stack: JSONObject | None
    #: {placeholder: the path it stands for}: ``<source>``, ``<run_dir>``, ``<worktree>``
    normalize: dict[str, str]


class ArmDiffRow(TypedDict):
    """One difference between the arms (:func:`arm_diff`, :func:`server_info_diff`): the dotted key and each
    arm's value there (:data:`ABSENT` where it has none)."""

    key: str
    values: dict[str, JSON]


def describe_launch(arm: ResolvedArm, engine: Engine) -> LaunchDescription:
    """What an arm's launch is (secrets redacted; the live fingerprint None before launch)."""
    spec = engine.launch_spec()
    cfg = dataclasses.asdict(engine.cfg)
    user_args = [str(a) for a in (*cfg.get("args", []), *arm.args)]
    env = {**{str(k): str(v) for k, v in (cfg.get("env") or {}).items()}, **arm.env}
    fp = engine.fingerprint()
    fp_view = None if fp is None else {k: v for k, v in fp.items() if k not in _FP_DROP}
    launched = spec.launched
    ignore = set(getattr(engine, "diff_ignore", ()))
    return {
        "arm": {"key": arm.key, "name": arm.name, "side": arm.side}, "argv": redact_argv(spec.server_argv),
        "engine_kind": engine.kind, "simulated": engine.simulated,
        "python": arm.interpreter if launched else None, "module": cfg.get("module") if launched else None,
        "command": {"argv": redact_argv(spec.argv), "server_argv": redact_argv(spec.server_argv),
                    "command_line": spec.command_line() if launched else "", "env_delta": redact_env(spec.env_delta),
                    "cwd": spec.cwd, "log_path": spec.log_path, "fingerprint_path": spec.fingerprint_path,
                    "url": spec.url},
        "engine": {k: v for k, v in cfg.items() if k not in ("args", "env") and k not in ignore},
        # how the harness drives the server (timeouts, simulated fault injection): not a difference of arms
        "harness": {k: v for k, v in cfg.items() if k in ignore},
        "args": parse_flags(redact_argv(user_args)), "env": redact_env(env), "source": dataclasses.asdict(arm.source),
        "fingerprint": fp_view, "stack": stack.describe(arm, cfg) if engine.stack_probe else None,
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


def static_description(desc: LaunchDescription) -> LaunchDescription:
    """A launch description without what only the serving process knows (its live fingerprint)."""
    out = desc.copy()
    out.pop("fingerprint", None)
    return out


def arm_diff(descs: Mapping[str, LaunchDescription]) -> list[ArmDiffRow]:
    """Dotted keys whose values differ between arms. Paths inside each arm's own source tree and the run
    directory are normalised outside the ``source`` section, so two trees that hold the same files do not
    differ by their location; per-launch noise (port, log path, worktree path, pids, times) is ignored."""
    flat: dict[str, dict[str, JSON]] = {}
    for name, d in descs.items():
        nz = d.get("normalize") or {}
        roots = sorted(((r, t) for t, r in nz.items() if r and t != "<worktree>"), key=lambda x: -len(x[0]))
        wt = [(nz["<worktree>"], "<worktree>")] if nz.get("<worktree>") else []
        norm = {k: _normalize(v, wt if k == "source" else roots) for k, v in d.items()}
        flat[name] = {k: v for k, v in flatten(norm).items() if not matches(k, NOISE_PREFIXES)}
    return _differing(flat)


def _differing(flat: Mapping[str, Mapping[str, JSON]]) -> list[ArmDiffRow]:
    """The dotted keys of ``{arm: flat tree}`` whose values differ between the arms (absent counts as a value)."""
    keys = sorted(set().union(*[set(f) for f in flat.values()])) if flat else []
    diffs: list[ArmDiffRow] = []
    for k in keys:
        vals = {name: f.get(k, ABSENT) for name, f in flat.items()}
        if len({json.dumps(v, sort_keys=True, default=str) for v in vals.values()}) > 1:
            diffs.append({"key": k, "values": vals})
    return diffs


def disallowed(diffs: Iterable[ArmDiffRow], allowed: Iterable[str]) -> list[ArmDiffRow]:
    """The differences not covered by ``allowed`` (dotted prefixes: ``source``, ``env.SGLANG_X`` ...)."""
    allowed = [str(a) for a in allowed]
    return [d.copy() for d in diffs if not matches(str(d["key"]), allowed)]


#: ``/server_info`` keys that differ per launch or per port, never between arms.
SERVER_INFO_NOISE = ("port", "nccl_port", "dist_init_addr", "host", "launch_command", "pid", "start_time",
                     "metrics_port", "grpc_port", "file_storage_path", "tokenizer_worker_ipc_name")


def server_info_diff(infos: Mapping[str, JSON]) -> list[ArmDiffRow]:
    """Dotted keys of ``/server_info`` (``{arm: server_info}``) whose values differ between the arms (noise
    left out): what the servers resolved differently from the same flags (``max_total_num_tokens``)."""
    flat: dict[str, dict[str, JSON]] = {}
    for name, info in infos.items():
        tree = info if isinstance(info, Mapping) else {}
        flat[name] = {k: v for k, v in flatten(tree).items() if k.split(".")[-1] not in SERVER_INFO_NOISE}
    return _differing(flat)
