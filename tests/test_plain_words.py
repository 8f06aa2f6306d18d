"""Nothing on a surface contradicts or puzzles (issue 38, item 2): each pair the first-time reviewer saw has its
test here; the headline's own wording is in test_headline.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.docs import comparison
from helpers.rundirs import build_run_dir

from harness.analysis import planning as P
from harness.analysis.comparison import format_summary
from harness.analysis.cost import gpu_hours
from harness.report import words, write_markdown, write_report
from harness.report.divergence_section import terminal_line
from harness.report.terminal import result_lines
from harness.results import schema

LV = {"sigma2": 0.0, "sd": 0.0, "df_launch": 2, "source": "σ²_L from the A/A control's launches, pooled, df 2",
      "var_launch": 0.0, "var_heterogeneity": 0.0, "var_question": 1e-5, "k": 2.0,
      "launches": {"a": 1, "aa": 2, "b": 1}, "questions": 100}


def test_one_detectable_effect_on_every_surface(tmp_path: Path) -> None:
    """"MDE at 80 % power 0.97 pp" beside "smallest effect the test can detect at all 0.38 pp": one detectable
    effect, named alike in the terminal (both layers), the markdown and the report."""
    c = comparison(verdict="inconclusive", mde=0.0097, detectable_floor=0.0038, mde_method="exact power",
                   test="sign-flip", p=0.4, test_alpha=0.05)
    text = "\n".join([format_summary(c), *words.how_decided(c), *words.verdict_facts(c), *result_lines(c, "t")])
    assert "detectable effect" in text and "0.97 pp" in text
    assert "0.38" not in text and "MDE" not in text and "smallest effect" not in text
    root = build_run_dir(tmp_path / "run", n=120, repeats=2, aa=True)
    for page in (write_report(root).read_text(), write_markdown(root).read_text()):
        assert "etectable effect" in page
        assert "MDE" not in page and "detectable at all" not in page and "smallest effect" not in page


def test_a_launch_variance_of_zero_is_said_beside_its_t_test() -> None:
    """"launch-aware t-test (4.2 df)" under "launch variance: sd 0.00 pp": the zero is said as "none measurable",
    and why the t reference still has its df."""
    c = comparison(verdict="improved", launch_variance=LV, delta_df=4.2, test="launch-aware t-test", p=0.001,
                   test_alpha=0.05)
    line = words.launch_variance_line(c)
    assert line is not None and line.startswith("launch variance: none measurable") and "4.2 df" in line
    assert "none measurable" in format_summary(c) and "sd 0.00 pp per launch;" not in format_summary(c)


def test_counts_are_whole_questions_with_repeats() -> None:
    """``abh ab`` with repeats printed "A only 9.66667, B only 34.3333": whole questions, the per-question means
    explained once."""
    c = comparison(verdict="improved", a_only=29 / 3, b_only=103 / 3, both=1200.0, neither=1319 - 1200 - 44.0,
                   table_source="per-question means over each arm's runs (counts are question mass)",
                   diagnostics={"questions_better": {"a": 12, "b": 38, "same": 1269}}, test="t", p=0.01,
                   test_alpha=0.05)
    for text in (format_summary(c), words.questions_line(c), "\n".join(result_lines(c, "t"))):
        assert "9.66667" not in text and "34.3333" not in text and "9.7" not in text, text
        assert "B on 38" in text or "on 38" in text
    assert words.questions_line(c).count("share of right answers") == 1


def test_counts_of_a_run_with_repeats_are_whole_in_its_comparison(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=90, repeats=3, aa=True)
    c = schema.load_comparison(root / "comparison.json")
    better = c.diagnostics["questions_better"]
    assert isinstance(better, dict) and better["a"] + better["b"] + better["same"] == c.n
    assert f"on {better['b']}" in words.questions_line(c)


def test_a_kld_difference_is_rounded_to_its_interval() -> None:
    """"-1.8e-7 above the floor": a difference far inside its interval's resolution is 0."""
    div = {"verdict": "indistinguishable", "verdict_reason": "", "kld_mean": 0.00033, "kld_mean_aa": 0.00033,
           "effect": -1.8e-7, "effect_ci": [-2.1e-5, 2.4e-5], "p": 0.5, "text_identical_rate": 0.965,
           "text_identical_rate_aa": None, "tokens": 1000, "questions": 10}
    line = terminal_line(comparison(divergence=div).divergence)
    assert "e-7" not in line and "0 above the floor" in line
    assert "n/a" not in line and "96.5 % (A/A: no second text of A to compare)" in line  # not "96.5 % vs n/a"


@pytest.mark.parametrize("x,text", [(0.0, "0"), (0.0042, "0.0042"), (1.234, "1.23")])
def test_gpu_hours_to_the_digits_that_tell_them_apart(x: float, text: str) -> None:
    assert gpu_hours(x) == text


def test_the_plan_does_not_compare_two_equal_costs() -> None:
    """`abh power`: "costs 0.00 GPU-hours instead of 0.00" on a CPU box: nothing to compare, nothing said."""
    free = P.per_repeat_cost({"a": 10, "b": 10}, {"a": 5, "b": 5}, {"a": 1, "b": 1}, {"a": 0, "b": 0}, "run")
    p = P.make_plan(0.01, 1319, 0.03, per_repeat=free, launch_sigma2=0.0001, noise_per_launch=0.0)
    assert not [n for n in p["notes"] if "instead of" in n], p["notes"]
    paid = P.per_repeat_cost({"a": 600, "b": 600}, {"a": 300, "b": 300}, {"a": 30, "b": 30}, {"a": 8, "b": 8}, "run")
    p = P.make_plan(0.01, 1319, 0.03, per_repeat=paid, launch_sigma2=0.0001, noise_per_launch=0.0)
    assert [n for n in p["notes"] if "instead of" in n and "0.00 " not in n]


def test_improved_never_sits_above_not_shown_equivalent(tmp_path: Path) -> None:
    """The markdown and the report of an improvement with a margin: no "equivalent" statement anywhere."""
    root = build_run_dir(tmp_path / "run", n=400, p_a=0.80, p_b=0.92, margin=0.01)
    c = schema.load_comparison(root / "comparison.json")
    assert c.verdict == "improved" and c.tost is not None
    md = write_markdown(root).read_text()
    assert "not shown equivalent" not in md and "non-inferior" not in md.split("<details>")[0]
    text = format_summary(c)
    assert "equivalen" not in text and "non-inferior" not in text


def test_a_bad_value_makes_no_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`task.num_questions=-3` is refused before Hydra makes the run directory, with the prefix of every abh run
    error."""
    from helpers.runs import abh_run_here

    run_dir = tmp_path / "run"
    assert abh_run_here(f"hydra.run.dir={run_dir}", "task.num_questions=-3") == 2
    err = capsys.readouterr().err
    assert err.startswith("abh run: error: ") and "task.num_questions must be >= 1, not -3" in err
    assert not run_dir.exists()


def test_comparison_md_carries_no_path_of_this_machine(tmp_path: Path) -> None:
    """The server commands in comparison.md: the checkout as $ABH_REPO, home as $HOME, a venv's interpreter as
    python, any other absolute path as a placeholder; URLs untouched."""
    from harness.report.markdown import CHECKOUT, portable

    home = str(Path.home())
    cmd = (f"/opt/venv/bin/python3.11 -m abh_simulator --data {CHECKOUT}/harness/tasks/data/x.jsonl "
           f"--model {home}/models/m --out /tmp/pytest-1/run --url http://127.0.0.1:30000/generate")
    assert portable(cmd) == ("python -m abh_simulator --data $ABH_REPO/harness/tasks/data/x.jsonl --model "
                             "$HOME/models/m --out <path>/run --url http://127.0.0.1:30000/generate")
    root = build_run_dir(tmp_path / "run", n=60)
    md = write_markdown(root).read_text()
    assert str(tmp_path) not in md and str(CHECKOUT) not in md and "/tmp/" not in md
