"""The config's door: the schemas (:mod:`harness.config`) registered with Hydra's ConfigStore and the resolvers the
YAML uses, and the one composition of ``abh ab``. Imported by every command that composes a config; what it
composes is turned into typed objects by :func:`harness.config.validate` before the pipeline sees it."""

from __future__ import annotations

import os
import re
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from harness import config


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=config.Config)
    for name, schema in config.ENGINE_SCHEMAS.items():
        cs.store(group="engine", name=f"{name}_schema", node=schema)
    cs.store(group="task", name="task_schema", node=config.TaskSpec)
    cs.store(group="stats", name="stats_schema", node=config.StatsConfig)
    cs.store(group="divergence", name="divergence_schema", node=config.DivergenceConfig)
    cs.store(group="arms", name="arm_schema", node=config.ArmConfig)


def _run_name(name: Any) -> str:
    """``experiment.name`` where it names a directory (``hydra.run.dir``, ``hydra.sweep.dir``): checked as
    Hydra resolves the directory, before it makes it (``../../x`` would make a directory of the caller's choosing)."""
    problem = config.name_problem(name)
    if problem:
        raise config.ConfigError(problem)
    return str(name)


register()
if not OmegaConf.has_resolver("abh_run_name"):
    OmegaConf.register_new_resolver("abh_run_name", _run_name)


def compose_config(argv_overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The composed config of a run, as ``abh run experiment=ab ...`` would compose it (``with_hydra``: with its
    ``hydra`` node)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(config.CONFIG_DIR), version_base="1.3", job_name="abh_ab"):
        return compose("config", overrides=argv_overrides, return_hydra_config=with_hydra)


_ENV_DEFAULT = re.compile(r"^\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)\s*,")


def unset_env(cfg: DictConfig) -> dict[str, str]:
    """Arm key -> the environment variable its ``source.path`` comes from (``${oc.env:SGLANG_REPO,/path/to/x}``)
    when that variable is not set, so the path is the placeholder: said when the tree is missing."""
    out: dict[str, str] = {}
    for key, arm in (OmegaConf.to_container(cfg.get("arms") or {}, resolve=False) or {}).items():  # type: ignore[union-attr]
        path = ((arm or {}).get("source") or {}).get("path") if isinstance(arm, dict) else None
        m = _ENV_DEFAULT.match(path) if isinstance(path, str) else None
        if m and m.group(1) not in os.environ:
            out[str(key)] = m.group(1)
    return out
