"""Hydra's composition errors as one line (issue 23, item 9): the key as typed, the closest key that exists,
never a redacted key name or Hydra's ``+key`` advice for a typo, never the config search path."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.runs import abh_run_here
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness import exitcodes
from harness.cli.hydra_errors import one_line


def _error(*overrides: str) -> BaseException:
    try:
        with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
            compose("config", overrides=list(overrides))
    except Exception as e:  # noqa: BLE001 - the exception Hydra raises is what is tested
        return e
    raise AssertionError(f"{overrides} composed")


@pytest.mark.parametrize("overrides,line", [
    (["task.num_question=10"], "unknown config key task.num_question (did you mean task.num_questions?)"),
    (["arms.b.engine.acuracy=0.9"], "unknown config key arms.b.engine.acuracy (did you mean arms.b.engine.accuracy?)"),
    (["experiment.repeatz=3"], "did you mean experiment.repeats?"),
    (["experiment=dem0"], "no experiment 'dem0' (did you mean demo? options: ab, cpu_sglang_smollm2, cpu_smollm2, "),
    (["engine=vlm"], "no engine 'vlm' (did you mean vllm? options: external, llamacpp, sglang, simulated, vllm)"),
    (["stats.alpha=abc"], "stats.alpha: Value 'abc' of type 'str' could not be converted to Float"),
    (["stats.alpha"], "cannot read the override 'stats.alpha': missing EQUAL at '<EOF>' (write KEY=VALUE"),
    (["+stats.alpha=0.1"], "stats.alpha exists already: set it without the + (stats.alpha=VALUE)"),
    (["arms.a.env.HF_HOME=/x"], "arms.a.env.HF_HOME is not set yet: add it with +arms.a.env.HF_HOME=VALUE"),
])
def test_each_composition_error_is_one_line_naming_the_key(overrides: list[str], line: str) -> None:
    text = one_line(_error(*overrides))
    assert text is not None and line in text and "\n" not in text
    assert "+task" not in text and "REDACTED" not in text and "search path" not in text
    assert "_schema" not in text  # the structured schemas are not options a user picks


def test_an_exception_that_is_not_hydras_is_left_alone() -> None:
    assert one_line(ValueError("x")) is None


def test_the_close_key_keeps_the_arm_name() -> None:
    assert hc.did_you_mean("arms.fixed.engine.flip_rat") == "arms.fixed.engine.flip_rate"
    assert hc.did_you_mean("nothing.like.it") is None


def test_abh_run_prints_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = abh_run_here("task.num_question=10", "dry_run=true")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == exitcodes.BAD_CONFIG
    assert err == ["abh run: error: unknown config key task.num_question (did you mean task.num_questions?)"]


def test_an_unknown_added_key_is_named_with_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    code = abh_run_here("+experiment.repeatz=3", "dry_run=true")
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_CONFIG and "experiment.repeatz (did you mean experiment.repeats?)" in err


def _composes(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """How many times ``abh run ARGS`` composes the whole config."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    count = [0]
    load = ConfigLoaderImpl.load_configuration

    def counted(self: ConfigLoaderImpl, *a: object, **k: object) -> object:
        count[0] += 1
        return load(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    assert abh_run_here(*args) == exitcodes.OK
    return count[0]


def test_the_run_mode_is_read_from_abhs_own_composition(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The early value check's composition also tells Hydra the run mode, so Hydra does not compose the config once
    more just to read it (a plain run composes twice, not three times): ``hydra.mode=MULTIRUN`` without ``-m`` is
    Hydra's sweep all the same, its one job composing four times, not five."""
    composes = _composes(monkeypatch, "dry_run=true", "hydra.mode=MULTIRUN", f"hydra.sweep.dir={tmp_path / 's'}",
                         f"hydra.run.dir={tmp_path / 'r'}")
    assert (tmp_path / "s" / "multirun.yaml").is_file() and not (tmp_path / "r").exists()
    assert composes == 4 and "dry run: no server started" in capsys.readouterr().out
