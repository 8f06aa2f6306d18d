"""The software an arm's server really runs on, for the record a reviewer needs (and the arm diff compares):
the stack as the arm's own interpreter sees it, the container and the model's revision.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.arms import stack_probe
from harness.arms.arm import ResolvedArm, run_probe, sha256_file
from harness.results.records import JSONObject
from harness.util.cmdline import flag_value

#: The probe program, run by file path with the arm's interpreter.
STACK_PROBE = Path(stack_probe.__file__).resolve()
STACK_PROBE_TIMEOUT_S = 120.0
_CACHE: dict[str, JSONObject] = {}


def arm_stack(arm: ResolvedArm, env: Mapping[str, Any] | None = None,
              timeout_s: float = STACK_PROBE_TIMEOUT_S) -> JSONObject:
    """The stack probe's report in the arm's interpreter with its env and ``env`` (the engine's), cached."""
    delta = arm.env_delta(env)
    key = json.dumps([arm.interpreter, sorted(delta.items())])
    if key in _CACHE:
        return _CACHE[key]
    out = run_probe(arm, STACK_PROBE, [], env={**os.environ, **delta}, marker=stack_probe.MARKER,
                    timeout_s=timeout_s, what="stack probe")
    if "error" not in out:
        _CACHE[key] = out
    return out


def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def container(environ: Mapping[str, str] | None = None, root: str | Path = "/") -> JSONObject:
    """Whether this process runs in a container, and its image and digest where they can be known (podman's
    ``/run/.containerenv``, or ``ABH_IMAGE`` / ``ABH_IMAGE_DIGEST`` set by whoever started the container)."""
    env = os.environ if environ is None else environ
    root = Path(root)
    out: JSONObject = {"in_container": False, "runtime": None, "image": None, "digest": None}
    podman = _read(root / "run" / ".containerenv")
    if podman is not None:
        out.update(in_container=True, runtime="podman")
        fields = dict(re.findall(r'^(\w+)="(.*)"$', podman, re.M))
        out["image"] = fields.get("image") or None
        out["digest"] = fields.get("imageid") or None
    elif (root / ".dockerenv").exists():
        out.update(in_container=True, runtime="docker")
    else:
        cgroup = _read(root / "proc" / "1" / "cgroup") or ""
        for name in ("docker", "kubepods", "containerd", "libpod", "lxc"):
            if name in cgroup:
                out.update(in_container=True, runtime=name)
                break
    if env.get("ABH_IMAGE"):
        out["image"] = env["ABH_IMAGE"]
    if env.get("ABH_IMAGE_DIGEST"):
        out["digest"] = env["ABH_IMAGE_DIGEST"]
    if out["in_container"] and not out["digest"]:
        out["note"] = ("image digest unknown inside the container: export ABH_IMAGE_DIGEST (on the host: "
                       "docker inspect --format '{{.Image}}' CONTAINER) and ABH_IMAGE before running abh")
    return out


def hf_hub_cache(env: Mapping[str, str]) -> Path:
    """Where the Hugging Face hub keeps its cache under ``env`` (HF_HUB_CACHE, HF_HOME/hub, or the default)."""
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if cache:
        return Path(cache).expanduser()
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def model_revision(model_path: str, env: Mapping[str, str] | None = None,
                   requested: str | None = None) -> JSONObject:
    """The model's revision as the server will resolve it, from the local disk only (no network)."""
    env = dict(os.environ if env is None else env)
    offline = env.get("HF_HUB_OFFLINE") in ("1", "true", "True")
    out: JSONObject = {"model_path": model_path, "hf_hub_offline": offline, "requested_revision": requested,
                       "revision": None}
    if not model_path:
        return out
    p = Path(model_path).expanduser()
    if p.is_dir():
        out.update(local=True, path=str(p.resolve()))
        if p.resolve().parent.name == "snapshots":
            out["revision"] = p.resolve().name
        cfg = p / "config.json"
        if cfg.is_file():
            out["config_sha256"] = sha256_file(cfg)
        return out
    out["local"] = False
    repo_dir = hf_hub_cache(env) / f"models--{model_path.replace('/', '--')}"
    out["cache_dir"] = str(repo_dir)
    ref = requested or "main"
    commit = _read(repo_dir / "refs" / ref)
    if commit:
        out["revision"] = commit.strip()
    elif requested and re.fullmatch(r"[0-9a-f]{40}", requested) and (repo_dir / "snapshots" / requested).is_dir():
        out["revision"] = requested
    if out["revision"] is None:
        out["note"] = (f"not in the local Hugging Face cache ({repo_dir}): the server downloads it at launch "
                       "(revision recorded after the download)")
    return out


def describe(arm: ResolvedArm, engine_cfg: Mapping[str, Any]) -> JSONObject:
    """The ``stack`` section of an arm's launch description."""
    env = {str(k): str(v) for k, v in (engine_cfg.get("env") or {}).items()}
    revision = flag_value([*engine_cfg.get("args", []), *arm.args], ("--revision",))
    return {"interpreter": arm_stack(arm, env), "container": container(),
            "model": model_revision(str(engine_cfg.get("model_path") or ""), arm.process_env(env), revision)}
