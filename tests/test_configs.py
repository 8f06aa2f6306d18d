"""Every shipped config composes with Hydra's compose API; bad keys and values fail with one clear message."""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.runs import abh_run_here
from helpers.waiting import PATIENCE_S
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf.errors import ConfigKeyError, ValidationError

import harness.config as hc
from harness import exitcodes

EXPERIMENTS = sorted(p.stem for p in (hc.CONFIG_DIR / "experiment").glob("*.yaml"))
ENGINES = sorted(p.stem for p in (hc.CONFIG_DIR / "engine").glob("*.yaml"))


def _compose(*overrides: str):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=False)


@functools.cache
def _experiment(name: str):
    """``experiment=NAME`` composed once per test process: two tests read each shipped experiment, neither
    changes it (a composition costs a third of a second)."""
    return _compose(f"experiment={name}")


def test_shipped_experiments_are_found():
    assert {"demo", "cpu_smollm2", "dsv4_pro_mi355x_shared_slot"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    cfg = _experiment(experiment)
    hc.validate(cfg)
    assert cfg.experiment.a in cfg.arms and cfg.experiment.b in cfg.arms
    assert cfg.engine.host == "127.0.0.1"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_composes(engine):
    overrides = ["experiment=cpu_smollm2", f"engine={engine}"]
    if engine == "external":
        overrides.append("engine.url=http://127.0.0.1:30000")
    cfg = _compose(*overrides)
    assert cfg.engine.kind == engine


@pytest.mark.parametrize("group,option", [("task", "gsm8k_heldout"), ("stats", "noninferiority"),
                                          ("task", "gsm8k"), ("stats", "default")])
def test_other_groups_compose(group, option):
    cfg = _compose(f"{group}={option}")
    assert cfg[group] is not None


def test_launchers_compose():
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        for launcher in ("slurm", "local"):
            cfg = compose("config", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True)
            assert "submitit" in cfg.hydra.launcher._target_
    assert (hc.CONFIG_DIR / "hydra" / "launcher" / "slurm.yaml").read_text().count("partition") >= 1


def test_demo_defaults():
    cfg = _compose()
    assert cfg.experiment.name == "demo" and cfg.engine.kind == "simulated"
    assert cfg.task.num_questions == 1319 and cfg.client.parallel == 1319
    assert cfg.experiment.aa_control
    assert cfg.arms.a.engine.accuracy < cfg.arms.b.engine.accuracy


@pytest.mark.parametrize("override,exc", [
    ("experiment.no_such_key=1", (ConfigCompositionException, ConfigKeyError)),
    ("task.num_questions=lots", (ConfigCompositionException, ValidationError)),
    ("engine.latency_s=fast", (ConfigCompositionException, ValidationError)),
])
def test_unknown_keys_and_bad_types_fail_at_composition(override, exc):
    with pytest.raises(exc):
        _compose(override)


@pytest.mark.parametrize("override,message", [
    ("experiment.repeats=0", "experiment.repeats"),
    ("experiment.order=random", "experiment.order"),
    ("experiment.b=nope", "is not an arm"),
    ("stats.alpha=2", "stats.alpha"),
    ("task.recipe=mine", "task.recipe"),
    ("client.parallel=0", "client.parallel"),
    ("engine.api=grpc", "engine.api"),
])
def test_bad_values_fail_validation_with_a_clear_message(override, message):
    cfg = _compose(override)
    with pytest.raises(hc.ConfigError, match=message):
        hc.validate(cfg)


def test_typo_in_an_arm_file_fails_at_composition(tmp_path, monkeypatch):
    arms = tmp_path / "arms" / "demo"
    arms.mkdir(parents=True)
    good = (hc.PROJECT_ROOT / "arms" / "demo" / "baseline.yaml").read_text()
    (arms / "baseline.yaml").write_text(good + "\nsied: oops\n")
    (arms / "fix.yaml").write_text((hc.PROJECT_ROOT / "arms" / "demo" / "fix.yaml").read_text())
    monkeypatch.setenv("ABH_ARMS_ROOT", str(tmp_path))
    with pytest.raises((ConfigCompositionException, ConfigKeyError), match="sied"):
        _compose()


def test_malformed_arm_yaml_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """Issue 14.5: a YAML syntax error in an arm file was a 94-line Hydra traceback."""
    from harness.cli.run import main as run_main

    arms = tmp_path / "arms" / "demo"
    arms.mkdir(parents=True)
    (arms / "baseline.yaml").write_text("name: baseline\nside: [unclosed\n  engine: {a: 1\n")
    (arms / "fix.yaml").write_text((hc.PROJECT_ROOT / "arms" / "demo" / "fix.yaml").read_text())
    monkeypatch.setenv("ABH_ARMS_ROOT", str(tmp_path))
    assert run_main([f"hydra.run.dir={tmp_path}/run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{arms / 'baseline.yaml'} line 3, column 9: not valid YAML" in err
    assert not (tmp_path / "run").exists()


def test_unknown_arm_engine_key_is_caught():
    cfg = _compose("+arms.a.engine.no_such_knob=1")
    with pytest.raises(hc.ConfigError, match="no_such_knob"):
        hc.validate(cfg)


def _abh(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli.main", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=PATIENCE_S)


def test_cfg_job_prints_the_resolved_config(capsys):
    assert abh_run_here("--cfg", "job") == 0  # in this process (test_redact.py runs --cfg as a command)
    out = capsys.readouterr().out
    assert "experiment:" in out and "name: demo" in out and "accuracy: 0.93" in out


def test_bad_config_on_the_command_line_exits_2_before_any_server(tmp_path, capsys):
    r = _abh("run", "task.num_questions=lots", f"hydra.run.dir={tmp_path}/run", cwd=tmp_path)  # the command itself
    assert r.returncode == exitcodes.BAD_CONFIG
    assert "num_questions" in r.stderr
    assert not (tmp_path / "run" / "manifest.json").exists()
    # the other kinds of bad config in this process
    assert abh_run_here("experiment.repeats=0", f"hydra.run.dir={tmp_path}/run2") == exitcodes.BAD_CONFIG
    assert "experiment.repeats" in capsys.readouterr().err
    assert not (tmp_path / "run2" / "manifest.json").exists()
    assert abh_run_here("experiment=no_such_experiment", f"hydra.run.dir={tmp_path}/run3") == exitcodes.BAD_CONFIG
    assert "no_such_experiment" in capsys.readouterr().err


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_the_typed_config_stores_as_the_composed_tree(experiment):
    """The run directory stores the config (manifest.json) and resumes by its digest: the typed objects the
    pipeline gets store exactly what Hydra composed (so a run directory written before resumes)."""
    from omegaconf import OmegaConf

    cfg = _experiment(experiment)
    assert dataclasses.asdict(hc.validate(cfg)) == OmegaConf.to_container(cfg, resolve=True)


def test_validate_returns_typed_objects():
    config = hc.validate(_compose("divergence.top_k=7", "client.parallel=3", "engine.accuracy=0.9"))
    assert isinstance(config.divergence, hc.DivergenceConfig) and config.divergence.top_k == 7
    assert config.client.parallel == 3 and isinstance(config.engine, hc.SimulatedEngineConfig)
    assert config.engine.accuracy == 0.9 and isinstance(config.engine.ready_timeout_s, float)
