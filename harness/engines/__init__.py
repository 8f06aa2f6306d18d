"""Engines: what serves an arm. ``engine.kind`` names the module here that exposes ``ENGINE`` (an
:class:`~harness.engines.base.Engine` subclass); its schema is ``harness.config.ENGINE_SCHEMAS``'s (else
:class:`~harness.config.EngineConfig`). Adding an engine is one module here, its schema and
``configs/engine/NAME.yaml``."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path
from typing import Any

from harness.arms.arm import ResolvedArm
from harness.config import ENGINE_SCHEMAS, MISSING, ConfigError, EngineConfig, typed
from harness.engines.base import Engine, EngineError, LaunchedEngine, LaunchSpec
from harness.engines.process import PortInUseError
from harness.results.records import JSONObject

__all__ = ["Engine", "EngineError", "LaunchSpec", "LaunchedEngine", "PortInUseError", "create_engine",
           "engine_class", "engine_config", "known_engines"]

_NOT_ENGINES = {"base", "process", "launcher", "vram", "gpu", "preflight", "args_probe"}


def known_engines() -> list[str]:
    here = Path(__file__).resolve().parent
    return sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_") and p.stem not in _NOT_ENGINES)


def engine_class(kind: str) -> type[Engine]:
    if not re.match(r"^[a-z][a-z0-9_]*$", kind or "") or kind in _NOT_ENGINES:
        raise EngineError(f"unknown engine kind {kind!r} (known: {', '.join(known_engines())})")
    try:
        mod = importlib.import_module(f"harness.engines.{kind}")
    except ModuleNotFoundError as e:
        if e.name == f"harness.engines.{kind}":
            raise EngineError(f"unknown engine kind {kind!r} (known: {', '.join(known_engines())})") from None
        raise
    cls = getattr(mod, "ENGINE", None)
    if not (isinstance(cls, type) and issubclass(cls, Engine)):
        raise EngineError(f"harness/engines/{kind}.py defines no ENGINE class")
    return cls


def engine_config(engine_cfg: Any, overrides: JSONObject | None = None) -> Any:
    """The engine's schema dataclass from a mapping or a dataclass, plus per-arm overrides (typed)."""
    values = dict(dataclasses.asdict(engine_cfg) if isinstance(engine_cfg, EngineConfig) else engine_cfg.items())
    kind = str(values.get("kind", ""))
    engine_class(kind)  # clear error for an unknown kind first
    try:
        cfg = typed(ENGINE_SCHEMAS.get(kind, EngineConfig), {**values, **(overrides or {})})
    except ConfigError as e:
        raise EngineError(f"bad {kind} engine config: {e}") from e
    missing = sorted(f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) == MISSING)
    if missing:
        raise EngineError(f"the {kind} engine needs {', '.join('engine.' + m for m in missing)}")
    return cfg


def create_engine(engine_cfg: Any, arm: ResolvedArm, run_dir: str | Path, label: str) -> Engine:
    """The engine serving ``arm`` (``engine_cfg``: ``cfg.engine`` or its dataclass; overrides applied)."""
    cfg = engine_config(engine_cfg, arm.engine_overrides)
    return engine_class(cfg.kind)(cfg, arm, run_dir, label)
