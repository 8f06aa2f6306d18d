"""The statistics settings are checked when the config is read, in their unit (issue 23, item 1), and a
comparison that still fails for a settings reason is a bad config (exit 2, "fix stats.X and rerun: the evals
are kept"), not "too many request errors" with advice to retry."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.runs import abh_run_here
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness import exitcodes
from harness.analysis.compare_settings import settings_problem


def _cfg(*overrides: str):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("args,setting", [
    (("superiority", -0.01, None, 0.05, 0.05), "margin"),
    (("superiority", float("nan"), None, 0.05, 0.05), "margin"),
    (("noninferiority", None, None, 0.05, 0.05), "margin"),
    (("superiority", None, -0.02, 0.05, 0.05), "min_effect"),
    (("superiority", None, None, 0.0, 0.05), "alpha"),
    (("superiority", None, None, 0.05, 2.0), "max_error_rate"),
    (("better", None, None, 0.05, 0.05), "hypothesis"),
])
def test_each_out_of_range_setting_is_named(args: tuple, setting: str) -> None:
    wrong = settings_problem(*args)
    assert wrong is not None and wrong.setting == setting


def test_sane_settings_pass() -> None:
    assert settings_problem("equivalence", 0.01, 0.02, 0.05, 0.05) is None
    assert settings_problem("superiority", None, None, 0.05, 0.0) is None


@pytest.mark.parametrize("overrides,message", [
    (["stats.margin_pp=0.01"], "stats.margin_pp=0.01 is in percentage points (1.0 = 1 pp)"),
    (["stats.min_effect_pp=0.02"], "did you mean 2?"),
    (["stats.margin_pp=1.0", "stats.min_effect_pp=0.5"], "stats.min_effect_pp: the minimum effect 0.5 pp is below the margin 1 pp"),
    (["stats.margin_pp=-1"], "stats.margin_pp: the margin must be in (0, 100] pp, not -1"),
    (["stats.alpha=0"], "stats.alpha: alpha must be in (0, 1), not 0"),
    (["stats.max_error_rate=2"], "stats.max_error_rate: the error limit must be in [0, 1], not 2"),
    (["stats.min_effect_pp=-2"], "stats.min_effect_pp: the minimum effect must be in [0, 100] pp, not -2"),
])
def test_units_and_the_margin_against_the_effect_are_checked(overrides: list[str], message: str) -> None:
    with pytest.raises(hc.ConfigError, match=re.escape(message)):
        hc.validate(_cfg(*overrides))


def test_min_effect_at_or_above_the_margin_is_fine() -> None:
    hc.validate(_cfg("stats.margin_pp=1.0", "stats.min_effect_pp=1.0"))


@pytest.mark.parametrize("dry", [True, False])
def test_a_bad_margin_exits_2_before_any_server(tmp_path: Path, capsys: pytest.CaptureFixture[str], dry: bool) -> None:
    run_dir = tmp_path / "run"
    code = abh_run_here(f"hydra.run.dir={run_dir}", "stats.margin_pp=-1", f"dry_run={str(dry).lower()}")
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_CONFIG and "stats.margin_pp" in err
    assert "launching" not in err and not (run_dir / "manifest.json").exists() and not (run_dir / "evals").exists()


def test_abh_compare_refuses_a_min_effect_below_the_margin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers.evals import make_eval

    from harness.cli.compare import compare_main

    da, db = make_eval(tmp_path / "a", [True, False, True]), make_eval(tmp_path / "b", [True, True, True])
    code = compare_main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "o"), "--margin", "1",
                         "--min-effect", "0.5"])
    assert code == exitcodes.BAD_CONFIG and "below the margin 1 pp" in capsys.readouterr().err
    assert not (tmp_path / "o" / "comparison.json").exists()


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_comparison_failing_on_a_setting_exits_2_and_keeps_the_evals(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting the config check lets through (here: the check is turned off) still ends as a bad config."""
    monkeypatch.setattr(hc, "_stats_problems", lambda stats: [])
    run_dir = tmp_path / "run"
    code = abh_run_here(f"hydra.run.dir={run_dir}", "stats.margin_pp=-1", "task.num_questions=20",
                        "experiment.repeats=1", "experiment.aa_control=false", "divergence.enabled=false",
                        "progress=false", "report=false")
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_CONFIG, err[-2000:]
    assert "fix stats.margin_pp and rerun: the evals are kept" in err and "retry the failed requests" not in err
    assert (run_dir / "evals" / "a" / "r1" / "eval.json").exists() and (run_dir / "evals" / "b" / "r1" / "eval.json").exists()
