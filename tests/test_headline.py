"""The verdict in one line, the same on every surface (issue 23, items 2 and 3): hypothesis-aware wording, so an
inconclusive superiority result that is non-inferior cannot read as two verdicts; the terminal's last line,
run.log, summary.json, comparison.md and the report all carry the same line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers.docs import comparison, tost

from harness.report.headline import coloured, headline
from harness.results.fileio import read_json

DIV = {"verdict": "indistinguishable", "verdict_reason": "", "kld_mean": 0.00033, "kld_mean_aa": 0.00033}


def test_improved_with_its_interval_p_margin_and_outputs() -> None:
    c = comparison(verdict="improved", delta=0.0133, delta_ci=[0.0052, 0.0221], p=0.0014, test="sign-flip",
                   margin=0.01, tost=tost(noninferior=True), divergence=DIV)
    assert headline(c) == ("IMPROVED +1.33 pp [+0.52, +2.21], p = 0.0014 · non-inferior within 1 pp · outputs "
                           "indistinguishable from A/A (KLD 0.00033 nats/token vs A/A 0.00033)")


def test_inconclusive_but_non_inferior_under_superiority_is_one_statement() -> None:
    c = comparison(verdict="inconclusive", delta=0.002, delta_ci=[-0.009, 0.013], p=0.71, margin=0.01,
                   tost=tost(noninferior=True, p_noninferiority=0.004))
    line = headline(c)
    assert line.startswith("INCONCLUSIVE +0.20 pp [−0.90, +1.30], p = 0.71 · no improvement shown; "
                           "non-inferior within 1 pp")
    assert line.count("INCONCLUSIVE") == 1 and "NON-INFERIOR" not in line


@pytest.mark.parametrize("over,expected", [
    ({"verdict": "inconclusive", "mde": 0.0663, "margin": 0.01, "tost": tost()},
     "INCONCLUSIVE +0.00 pp [+0.00, +0.00], p = n/a · no difference shown (MDE 6.63 pp); not shown within ±1 pp"),
    ({"verdict": "equivalent", "margin": 0.01, "hypothesis": "equivalence", "tost": tost(equivalent=True)},
     "EQUIVALENT +0.00 pp [+0.00, +0.00], p = n/a within ±1 pp"),
    ({"verdict": "noninferior", "margin": 0.02, "hypothesis": "noninferiority", "tost": tost(noninferior=True)},
     "NON-INFERIOR +0.00 pp [+0.00, +0.00], p = n/a within 2 pp"),
    ({"verdict": "inconclusive", "margin": 0.01, "hypothesis": "noninferiority", "tost": tost()},
     "non-inferiority not shown (margin 1 pp)"),
    ({"verdict": "not_comparable", "verdict_reason": "arm B failed its side check"},
     "NOT COMPARABLE: arm B failed its side check"),
    ({"verdict": "regressed", "delta": -0.02, "delta_ci": [-0.03, -0.01], "simulated": True},
     "[SIMULATED] REGRESSED −2.00 pp [−3.00, −1.00]"),
])
def test_each_verdict_reads_as_the_question_asked(over: dict, expected: str) -> None:
    assert expected in headline(comparison(**over))


def test_colour_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert coloured("IMPROVED x", "improved", io.StringIO()) == "IMPROVED x"
    assert coloured("IMPROVED x", "improved", Tty()) == "\033[1;32mIMPROVED x\033[0m"
    monkeypatch.setenv("NO_COLOR", "1")
    assert coloured("IMPROVED x", "improved", Tty()) == "IMPROVED x"


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_library_log_lines_stay_in_run_log(tmp_path: Path) -> None:
    """A fresh matplotlib cache logs "generated new fontManager" at INFO: run.log has it, the console does not."""
    from helpers.runs import abh_run

    run_dir = tmp_path / "run"
    r = abh_run(f"hydra.run.dir={run_dir}", "task.num_questions=30", "experiment.repeats=1", "progress=false",
                "divergence.enabled=false", cwd=tmp_path, env={"MPLCONFIGDIR": str(tmp_path / "mpl")})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "matplotlib" not in r.stderr + r.stdout and "fontManager" in (run_dir / "run.log").read_text()
    assert r.stdout.strip().splitlines()[-1] == read_json(run_dir / "summary.json")["headline"]


def test_job_logging_keeps_matplotlib_warnings_in_run_log(tmp_path: Path) -> None:
    """The job logging config: matplotlib's warnings (its font-cache note after 5 s on a slow first run) go to
    run.log only; any other library's warning reaches the console too; secrets are redacted in both."""
    import io
    import logging
    import logging.config

    import yaml

    conf = yaml.safe_load((Path(__file__).parents[1] / "configs/hydra/job_logging/redacted.yaml").read_text())
    conf["handlers"]["file"]["filename"] = str(tmp_path / "run.log")
    stream = io.StringIO()
    conf["handlers"]["console"]["stream"] = stream
    root, saved = logging.getLogger(), logging.getLogger().handlers[:]
    saved_level = root.level
    try:
        logging.config.dictConfig(conf)
        # a child no earlier test's logging set-up has seen (dictConfig disables the loggers it does not name)
        logging.getLogger("matplotlib.abh_font_manager_test").warning("Matplotlib is building the font cache")
        logging.getLogger("urllib3").warning("other library api_key=sk-abcdefghijklmnopqrstuvwx")
        logging.getLogger("matplotlib").info("generated new fontManager")
        for h in logging.getLogger().handlers + logging.getLogger("matplotlib").handlers:
            h.flush()
    finally:
        for h in logging.getLogger().handlers + logging.getLogger("matplotlib").handlers:
            h.close()
        root.handlers[:] = saved
        root.setLevel(saved_level)
        logging.getLogger("matplotlib").handlers.clear()
        logging.getLogger("matplotlib").propagate = True
    console, log = stream.getvalue(), (tmp_path / "run.log").read_text()
    assert "font cache" in log and "fontManager" in log and "font" not in console
    assert "other library" in console and "other library" in log
    assert "sk-abcdefghijklmnopqrstuvwx" not in console + log
