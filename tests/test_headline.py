"""The verdict in one line, the same on every surface (issue 23, items 2 and 3): hypothesis-aware wording, so an
inconclusive superiority result that is non-inferior cannot read as two verdicts; the terminal's last line,
run.log, summary.json, comparison.md and the report all carry the same line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers.docs import comparison, tost

from harness.report.headline import coloured, headline

ROOT = Path(__file__).resolve().parents[1]

DIV = {"verdict": "indistinguishable", "verdict_reason": "", "kld_mean": 0.00033, "kld_mean_aa": 0.00033}


def test_improved_in_plain_words_with_its_interval_and_outputs() -> None:
    """IMPROVED says by how much and how sure; the margin adds nothing beside it (no "non-inferior" beside a
    significant gain), the outputs' verdict is in words, not KLD numbers."""
    c = comparison(verdict="improved", delta=0.0133, delta_ci=[0.0052, 0.0221], p=0.0014, test="sign-flip",
                   margin=0.01, tost=tost(noninferior=True), divergence=DIV)
    assert headline(c) == ("IMPROVED +1.3 pp: B gets more questions right (95 % CI +0.5 to +2.2 pp) · outputs "
                           "within relaunch noise")


def test_inconclusive_but_non_inferior_under_superiority_is_one_statement() -> None:
    c = comparison(verdict="inconclusive", delta=0.002, delta_ci=[-0.009, 0.013], p=0.71, margin=0.01,
                   tost=tost(noninferior=True, p_noninferiority=0.004))
    line = headline(c)
    assert line.startswith("INCONCLUSIVE +0.2 pp (95 % CI −0.9 to +1.3 pp) · no improvement shown; "
                           "non-inferior within 1 pp")
    assert line.count("INCONCLUSIVE") == 1 and "NON-INFERIOR" not in line


@pytest.mark.parametrize("over,expected", [
    ({"verdict": "inconclusive", "mde": 0.0663, "margin": 0.01, "tost": tost()},
     "INCONCLUSIVE +0.00 pp (95 % CI +0.00 to +0.00 pp) · no accuracy difference detected (detectable effect "
     "6.63 pp); not shown within ±1 pp"),
    ({"verdict": "equivalent", "margin": 0.01, "hypothesis": "equivalence", "tost": tost(equivalent=True)},
     "EQUIVALENT +0.00 pp (95 % CI +0.00 to +0.00 pp): within ±1 pp"),
    ({"verdict": "noninferior", "margin": 0.02, "hypothesis": "noninferiority", "tost": tost(noninferior=True)},
     "NON-INFERIOR +0.00 pp (95 % CI +0.00 to +0.00 pp): no loss beyond 2 pp"),
    ({"verdict": "inconclusive", "margin": 0.01, "hypothesis": "noninferiority", "tost": tost()},
     "non-inferiority not shown (margin 1 pp)"),
    ({"verdict": "not_comparable", "verdict_reason": "arm B failed its side check"},
     "NOT COMPARABLE: arm B failed its side check"),
    ({"verdict": "regressed", "delta": -0.02, "delta_ci": [-0.03, -0.01], "simulated": True},
     "[SIMULATED] REGRESSED −2.0 pp: B gets fewer questions right (95 % CI −3.0 to −1.0 pp)"),
])
def test_each_verdict_reads_as_the_question_asked(over: dict, expected: str) -> None:
    assert expected in headline(comparison(**over))


FORBIDDEN = ("sigma", "σ", " df", "psi", "ψ", "pooled", "launch-aware", "p =", "KLD")


@pytest.mark.parametrize("over", [
    {"verdict": "improved", "delta": 0.0216, "delta_ci": [0.0144, 0.0288], "p": 0.000982, "simulated": True,
     "margin": 0.01, "tost": tost(noninferior=True), "divergence": DIV, "test": "launch-aware t-test",
     "qualification": "launch variance from the A/A control's launches: assumes B's launches vary as A's do"},
    {"verdict": "inconclusive", "delta": 0.001, "delta_ci": [-0.004, 0.006], "mde": 0.011, "divergence": DIV},
])
def test_the_headline_is_short_and_plain(over: dict) -> None:
    """Five seconds: at most 160 characters, no statistician's words; the assumption about launches stays, in
    words."""
    line = headline(comparison(**over))
    assert len(line) <= 160, line
    assert not [w for w in FORBIDDEN if w in line], line
    if "qualification" in over:
        assert "assumes B's launches vary like A's" in line and "A/A control's" not in line


def test_improved_with_a_margin_never_says_equivalent_or_not() -> None:
    """The pair "IMPROVED" / "not shown equivalent, non-inferior": beside a significant gain the margin is silent
    on every surface (headline and the terminal's details)."""
    from harness.analysis.comparison import format_summary

    c = comparison(verdict="improved", delta=0.02, delta_ci=[0.01, 0.03], p=0.001, margin=0.01,
                   tost=tost(noninferior=True, ci=[0.011, 0.028]), test="sign-flip", test_alpha=0.05)
    text = headline(c) + "\n" + format_summary(c)
    assert "equivalent" not in text and "non-inferior" not in text, text


def test_the_composer_takes_plain_sentences() -> None:
    """One more measurement is one more sentence in the list."""
    from harness.report import headline as h

    assert h.compose(["IMPROVED +1 pp: B gets more questions right", None, "routing unchanged"], True) == (
        "[SIMULATED] IMPROVED +1 pp: B gets more questions right · routing unchanged")
    assert h.SENTENCES[0] is h.accuracy and h.outputs in h.SENTENCES


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


def test_library_log_lines_stay_in_run_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under a run's logging (configs/hydra/job_logging/redacted.yaml, as Hydra applies it), a library's INFO line
    (matplotlib's "generated new fontManager" on a fresh cache, anyone's) goes to run.log and not to the console; a
    library's warning goes to both."""
    import logging
    import logging.config

    import yaml

    conf = yaml.safe_load((ROOT / "configs" / "hydra" / "job_logging" / "redacted.yaml").read_text())
    conf["handlers"]["file"]["filename"] = str(tmp_path / "run.log")
    root, mpl = logging.getLogger(), logging.getLogger("matplotlib")
    saved = (root.handlers[:], root.level, mpl.handlers[:], mpl.level, mpl.propagate)
    capsys.readouterr()
    try:
        logging.config.dictConfig(conf)
        logging.getLogger("matplotlib.font_manager").info("generated new fontManager")
        logging.getLogger("some.library").info("an INFO line of a library")
        logging.getLogger("some.library").warning("a warning of a library")
    finally:
        for h in {*root.handlers, *mpl.handlers} - {*saved[0], *saved[2]}:
            h.close()
        root.handlers[:], mpl.handlers[:] = saved[0], saved[2]
        root.setLevel(saved[1])
        mpl.setLevel(saved[3])
        mpl.propagate = saved[4]
    log, console = (tmp_path / "run.log").read_text(), capsys.readouterr().err
    assert "generated new fontManager" in log and "an INFO line of a library" in log and "a warning of" in log
    assert "fontManager" not in console and "an INFO line" not in console and "a warning of a library" in console



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
