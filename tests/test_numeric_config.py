"""Numbers checked when the config is read (issue 22, item 8): every numeric key finite and in range, exit 2
with one message before any server starts (they used to launch both servers, then fail as "a bug")."""

from __future__ import annotations

import copy

import pytest
from helpers.runs import abh_run_here
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import harness.config as hc
from harness import exitcodes
from harness.cli.main import main as abh


def _compose(*overrides: str):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=False)


BAD = [
    ("client.request_timeout_s=0", "client.request_timeout_s must be > 0, not 0"),
    ("client.request_timeout_s=nan", "client.request_timeout_s must be a finite number, not nan"),
    ("client.retries=-1", "client.retries must be >= 0, not -1"),
    ("client.stall_timeout_s=-5", "client.stall_timeout_s must be >= 0, not -5"),
    ("client.stall_timeout_s=inf", "client.stall_timeout_s must be a finite number, not inf"),
    ("client.backoff_s=-1", "client.backoff_s must be >= 0"),
    ("client.max_bytes_per_token=0", "client.max_bytes_per_token must be >= 1"),
    ("client.read_timeout_s=0", "client.read_timeout_s must be > 0"),
    ("client.progress_timeout_s=-1", "client.progress_timeout_s must be >= 0"),
    ("engine.latency_s=nan", "engine.latency_s must be a finite number, not nan"),
    ("engine.ready_timeout_s=inf", "engine.ready_timeout_s must be a finite number, not inf"),
    ("engine.poll_interval_s=0", "engine.poll_interval_s must be > 0"),
    ("engine.port=70000", "engine.port must be >= 0 and <= 65535, not 70000"),
    ("engine.flip_rate=-0.1", "engine.flip_rate must be in [0, 1]"),
    ("+arms.a.engine.latency_s=-1", "arms.a.engine.latency_s must be >= 0"),
    ("task.max_new_tokens=-1", "task.max_new_tokens must be >= 0, not -1"),
    ("stats.margin_pp=-1", "stats.margin_pp: the margin must be in (0, 100] pp, not -1"),
    ("stats.min_effect_pp=inf", "stats.min_effect_pp must be a finite number"),
    ("stats.max_error_rate=1.5", "stats.max_error_rate: the error limit must be in [0, 1], not 1.5"),
    ("stats.seed=-1", "stats.seed must be >= 0"),
    ("stats.alpha=nan", "stats.alpha must be a finite number, not nan"),
    ("divergence.top_k=0", "divergence.top_k must be >= 1, not 0"),
    ("divergence.min_scored_share=1.5", "divergence.min_scored_share must be >= 0 and <= 1, not 1.5"),
    ("divergence.min_scored_share=-0.1", "divergence.min_scored_share must be >= 0 and <= 1, not -0.1"),
    ("divergence.min_scored_share=nan", "divergence.min_scored_share must be a finite number, not nan"),
]


@pytest.fixture(scope="module")
def demo():
    return _compose()


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)  # inf, nan, 1.5


@pytest.mark.parametrize("override,message", BAD, ids=[o for o, _ in BAD])
def test_every_numeric_key_is_range_and_finiteness_checked(override, message, demo):
    key, _, value = override.lstrip("+").partition("=")
    cfg = copy.deepcopy(demo)  # composed once: the override set as Hydra would set it
    OmegaConf.update(cfg, key, _number(value), force_add=True)
    with pytest.raises(hc.ConfigError) as e:
        hc.validate(cfg)
    assert message in str(e.value)


def test_an_override_on_the_command_line_is_checked_too():
    with pytest.raises(hc.ConfigError, match="client.stall_timeout_s must be a finite number, not inf"):
        hc.validate(_compose("client.stall_timeout_s=inf"))


def test_the_shipped_defaults_are_in_range():
    for experiment in ("demo", "cpu_smollm2", "dsv4_pro_mi355x_shared_slot"):
        hc.validate(_compose(f"experiment={experiment}"))  # raises for a value out of range


def test_abh_run_refuses_before_any_server(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = abh_run_here(f"hydra.run.dir={run_dir}", "client.request_timeout_s=0", "client.retries=-1",
                        "progress=false")
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_CONFIG, err
    assert "client.request_timeout_s must be > 0" in err and "client.retries must be >= 0" in err
    assert "Traceback" not in err and "launching" not in err and "bug" not in err
    assert not (run_dir / "manifest.json").exists() and not (run_dir / "servers").exists()


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1"])
def test_abh_eval_refuses_a_request_timeout_out_of_range(value, tmp_path, capsys):
    code = abh(["eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "ev"), "--request-timeout", value])
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_CONFIG, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "--request-timeout must be" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "ev").exists()


def test_abh_eval_refuses_a_wait_ready_of_nan(tmp_path, capsys):
    code = abh(["eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "ev"), "--wait-ready", "nan"])
    assert code == exitcodes.BAD_CONFIG and "--wait-ready must be a finite number" in capsys.readouterr().err
