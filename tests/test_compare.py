"""abh compare / abh power on eval directories written with harness.results.eval_store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.docs import compare_doc as _compare_dirs
from helpers.docs import comparison, doc
from helpers.evals import N, make_eval, seed_vectors

from harness import stats as S
from harness.analysis.compare_settings import CompareError
from harness.analysis.comparison import format_summary
from harness.cli.compare import compare_main as main
from harness.cli.power import power_main
from harness.results.schema import Comparison
from harness.stats.mde import mde_paired_exact, power_paired_exact
from harness.stats.tango import score_interval, score_p


def compare_dirs(*args, n_resamples: int = 500, **kw):
    """compare_dirs with 500 bootstrap resamples unless a test asks for more: only the reported bootstrap
    intervals depend on them (not the verdict, its test or its interval), and no test here reads those."""
    return _compare_dirs(*args, n_resamples=n_resamples, **kw)


def test_worked_example_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", b)
    rc = main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "cmp"), "--margin", "2", "--verbose"])
    assert rc == 0
    c = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert c["schema_version"] == 2 and c["kind"] == "abh.comparison"
    assert c["n"] == N and c["dropped_errors"] == 0
    assert (c["both"], c["a_only"], c["b_only"], c["neither"]) == (1237, 10, 14, 58)
    assert c["arms"]["a"]["accuracy"] == pytest.approx(1247 / N)
    assert c["arms"]["b"]["accuracy"] == pytest.approx(1251 / N)
    assert c["arms"]["a"]["repeats"] == [pytest.approx(1247 / N)]
    assert c["arms"]["a"]["dirs"] == [str(da)]
    lo, hi = c["arms"]["b"]["wilson"]
    assert lo < 1251 / N < hi
    assert c["delta"] == pytest.approx(4 / N)
    assert c["delta_ci"][0] < 0 < c["delta_ci"][1] and c["delta_ci_method"] == "Tango score interval"
    assert c["delta_ci"] == [pytest.approx(float(x)) for x in score_interval(10, 14, N)]
    assert c["design"]["kind"] == "one run per arm" and c["design"]["unit"] == "question"
    assert "cannot separate a launch-wide" in c["design"]["cannot_resolve"]
    # the verdict claims equivalence: its test is the TOST and its p the TOST p; McNemar only in diagnostics
    assert c["verdict"] == "equivalent" and c["hypothesis"] == "superiority"
    assert c["test"].startswith("TOST") and c["p"] == c["tost"]["p_equivalence"] and c["test_alpha"] == 0.05
    assert "mcnemar_p" not in c and "p_value" not in c
    assert c["diagnostics"]["mcnemar_first_runs"]["exact_p"] == pytest.approx(0.5413, abs=1e-3)
    assert c["psi"] == pytest.approx(24 / N)
    # the MDE is the exact power of the mid-p test with chance discordance 2 min(b, c) / n
    assert c["mde"] == pytest.approx(mde_paired_exact(N, 20 / N), rel=1e-6)
    assert power_paired_exact(N, 20 / N, c["mde"]) == pytest.approx(0.8, abs=1e-3)
    assert c["detectable_floor"] == pytest.approx(5 / N)
    assert c["mde_unpaired"] == pytest.approx(0.0245, abs=0.001)
    assert c["psi_aa"] is None and c["noise_band"] is None
    assert c["margin"] == pytest.approx(0.02)
    assert c["tost"]["equivalent"] is True and c["tost"]["method"] == "Tango score test"
    assert -0.02 < c["tost"]["ci"][0] < 0 < c["tost"]["ci"][1] < 0.02
    assert sorted(c["flips"]) == c["flips"] and len(c["flips"]) == 24
    assert all(a[i] != b[i] for i in c["flips"])
    assert c["simulated"] is False and c["errors"]["bounds"] is None
    out = capsys.readouterr().out
    assert "+0.30 pp" in out and "EQUIVALENT" in out and "test: TOST" in out and "95 % CI" in out
    assert "90 % Tango score interval" in c["verdict_reason"]


def test_no_margin_gives_inconclusive_with_mde_and_alpha_sets_the_level(tmp_path: Path):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", b)
    c = compare_dirs([da], [db], None, 0.05, 0)
    assert c["verdict"] == "inconclusive" and c["tost"] is None
    assert f"detectable effect (80 % power) {100 * c['mde']:.2f} pp" in c["verdict_reason"]
    # one launch per arm, no A/A control: the question-level test (mid-p McNemar and Tango's score test, p the
    # larger, so p and interval agree), qualified in the verdict itself; its p is the only top-level p
    assert c["test"] == "question-level test: mid-p sign-flip and Tango score (p = the larger)"
    assert c["p"] == pytest.approx(max(float(S.mcnemar_midp(10, 14)), float(score_p(10, 14, N, 0.0))))
    assert c["qualification"] == "valid only if launches do not shift accuracy"
    assert c["verdict_reason"].endswith("; valid only if launches do not shift accuracy")
    assert c["launch_variance"]["sigma2"] is None and c["launch_variance"]["df_launch"] == 0
    assert "delta_df" not in c and c["design"]["unit"] == "question"
    c10 = compare_dirs([da], [db], None, 0.10, 0)
    assert c10["delta_ci_level"] == 0.9 and "90 % Tango" in c10["verdict_reason"]
    text = format_summary(Comparison.from_doc(c10))
    assert "90 % CI" in text and "95 %" not in text


def test_verbatim_repeats_add_no_evidence(tmp_path: Path):
    """The issue's case: a single-run table with p ≈ 0.1 repeated verbatim (same launch) stays inconclusive
    with exactly the same p and interval."""
    rng = np.random.default_rng(3)
    cells = rng.permutation(np.r_[np.zeros(1200), np.ones(8), 2 * np.ones(17), 3 * np.ones(94)])
    a, b = np.isin(cells, (0, 1)), np.isin(cells, (0, 2))
    one = compare_dirs([make_eval(tmp_path / "a", a)], [make_eval(tmp_path / "b", b)], None, 0.05, 0)
    assert 0.05 < one["p"] < 0.2 and one["verdict"] == "inconclusive"
    a_dirs = [make_eval(tmp_path / f"a{r}", a, launch="A-launch") for r in range(2)]
    b_dirs = [make_eval(tmp_path / f"b{r}", b, launch="B-launch") for r in range(2)]
    two = compare_dirs(a_dirs, b_dirs, None, 0.05, 0)
    assert two["p"] == pytest.approx(one["p"]) and two["delta_ci"] == pytest.approx(one["delta_ci"])
    assert two["verdict"] == "inconclusive" and two["design"]["launches"] == {"a": 1, "b": 1}
    assert two["design"]["passes_per_launch"] == {"a": [2], "b": [2]}
    assert (two["a_only"], two["b_only"]) == (8, 17)
    # without launch ids each eval is its own launch: identical launches measure a launch variance of 0 (the
    # launch-aware t, n - 1 df) and are still no new evidence: the same Δ, SE and, nearly, p and interval
    three = compare_dirs([make_eval(tmp_path / f"x{r}", a, launch=f"A{r}") for r in range(3)],
                         [make_eval(tmp_path / f"y{r}", b, launch=f"B{r}") for r in range(3)], None, 0.05, 0)
    assert three["design"]["launches"] == {"a": 3, "b": 3} and three["design"]["unit"] == "launch-aware"
    assert three["launch_variance"]["sigma2"] == 0 and three["delta_df"] == pytest.approx(N - 1)
    assert three["delta_se"] == pytest.approx(one["delta_se"] * np.sqrt(N / (N - 1)))
    assert three["p"] == pytest.approx(one["p"], rel=0.1) and three["verdict"] == "inconclusive"
    assert three["delta_ci"] == pytest.approx(one["delta_ci"], abs=2e-3)
    assert "qualification" not in three and three["design"]["cannot_resolve"] is None


def test_repeats_on_fresh_launches(tmp_path: Path):
    rng = np.random.default_rng(5)
    n = 400
    q = rng.uniform(0, 1, n)
    a_dirs = [make_eval(tmp_path / f"a{r}", rng.random(n) < q, launch=f"A{r}") for r in range(3)]
    b_dirs = [make_eval(tmp_path / f"b{r}", rng.random(n) < np.clip(q + 0.12, 0, 1), launch=f"B{r}") for r in range(3)]
    aa = [make_eval(tmp_path / "aa", rng.random(n) < q, launch="AA")]
    c = compare_dirs(a_dirs, b_dirs, margin=None, alpha=0.05, seed=1, aa_dirs=aa, n_resamples=2000)
    assert c["design"]["kind"] == "several launches per arm"
    assert c["table_source"].startswith("per-question means")
    assert len(c["arms"]["a"]["repeats"]) == 3 and c["arms"]["b"]["n_runs"] == 3
    assert c["delta"] == pytest.approx(np.mean(c["arms"]["b"]["repeats"]) - np.mean(c["arms"]["a"]["repeats"]))
    assert c["delta"] == pytest.approx((c["b_only"] - c["a_only"]) / n)
    assert c["delta"] > 0.05 and c["delta_ci"][0] > 0
    assert c["p"] < 0.01 and c["verdict"] == "improved"
    assert c["psi_aa"] is not None and 0.1 < c["psi_aa"] < 0.6 and c["psi_aa_source"] == "across launches"
    assert c["psi_aa"] == pytest.approx(np.mean([c["psi_aa_per_arm"]["a"], c["psi_aa_per_arm"]["b"]]))
    assert c["noise_band"][1] == pytest.approx(1.96 * np.sqrt(c["psi_aa"] / (n * 3)), rel=1e-3)
    assert c["aa_dirs"] == [str(aa[0])]
    # deterministic for a given seed
    c2 = compare_dirs(a_dirs, b_dirs, margin=None, alpha=0.05, seed=1, aa_dirs=aa, n_resamples=2000)
    assert c2["delta_ci"] == c["delta_ci"] and c2["p"] == c["p"] and c2["diagnostics"] == c["diagnostics"]


def test_launch_wide_shifts_enter_the_launch_aware_test(tmp_path: Path):
    """Launches of each arm differ by whole-accuracy shifts: the launch-aware test measures them (σ_L about
    2.5 pp here) and its interval is as wide as they make it."""
    rng = np.random.default_rng(6)
    n = 1319
    base = rng.random(n) < 0.85
    def launch(shift: float) -> np.ndarray:
        return np.where(base, rng.random(n) >= max(0.0, -shift) / 0.85, rng.random(n) < max(0.0, shift) / 0.15)
    shifts = [0.03, -0.03, 0.0]
    a_dirs = [make_eval(tmp_path / f"a{i}", launch(s), launch=f"A{i}") for i, s in enumerate(shifts)]
    b_dirs = [make_eval(tmp_path / f"b{i}", launch(s + 0.01), launch=f"B{i}") for i, s in enumerate(shifts)]
    c = compare_dirs(a_dirs, b_dirs, None, 0.05, 0, n_resamples=500)
    assert c["design"]["unit"] == "launch-aware" and c["design"]["launch_heterogeneity"]["p"] < 1e-6
    assert c["test"] == S.accuracy.LAUNCH_AWARE and c["delta_ci_method"] == "launch-aware t interval"
    lv = c["launch_variance"]
    assert lv["df_launch"] == 4 and lv["launches"] == {"a": 3, "aa": 0, "b": 3} and 0.015 < lv["sd"] < 0.04
    assert "arm A's 3 launches and arm B's 3 launches" in lv["source"]
    # Welch-Satterthwaite: between one arm's launch df (2) and n - 1 + df_L
    assert 2 <= c["delta_df"] < 6 and c["design"]["cannot_resolve"] is None
    assert c["verdict"] == "inconclusive"   # a 1 pp shift is hidden under ±3 pp launch shifts
    assert c["delta_ci"][1] - c["delta_ci"][0] > 0.03
    # the interval is the t interval of the p: they never disagree
    assert (c["p"] < 0.05) == (c["delta_ci"][0] > 0 or c["delta_ci"][1] < 0)


def test_one_sided_errors_are_never_equivalent(tmp_path: Path):
    """The issue's case: B errors (HTTP 400) on 26 of 1319 questions A answers right, otherwise B = A."""
    rng = np.random.default_rng(0)
    a = rng.random(N) < 0.9
    errs = tuple(int(i) for i in np.flatnonzero(a)[:26])
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", a, errors=errs)
    for hyp in ("superiority", "equivalence", "noninferiority"):
        c = compare_dirs([da], [db], 0.01, 0.05, 0, hypothesis=hyp)
        assert c["verdict"] == "inconclusive", hyp
        e = c["errors"]
        assert e["rate_a"] == 0 and e["rate_b"] == pytest.approx(26 / N) and e["p"] < 1e-6
        assert e["bounds"]["against_b"]["delta"] == pytest.approx(-26 / N)
        assert e["bounds"]["against_b"]["verdict"] == "regressed" and e["changes_verdict"]
        assert "request errors could change the verdict" in c["verdict_reason"]
        assert c["test"].startswith("error bounds") and c["p"] is None
    assert e["bounds"]["against_a"]["verdict"] == "noninferior"
    # the same deterministic errors in every repeat: still unanswered, still not equivalent
    a_dirs = [make_eval(tmp_path / f"ra{r}", a, launch=f"A{r}") for r in range(2)]
    b_dirs = [make_eval(tmp_path / f"rb{r}", a, errors=errs, launch=f"B{r}") for r in range(2)]
    c = compare_dirs(a_dirs, b_dirs, 0.01, 0.05, 0, hypothesis="equivalence", n_resamples=500)
    assert c["verdict"] == "inconclusive" and c["errors"]["unanswered_b"] == 26
    assert c["mde"] > c["errors"]["mde_allowance"] == pytest.approx(26 / N)


def test_errors_use_each_questions_available_runs(tmp_path: Path):
    """An errored run does not drop its question from the other runs: the question keeps its answers."""
    rng = np.random.default_rng(2)
    n = 300
    a = rng.random(n) < 0.8
    a_dirs = [make_eval(tmp_path / "a0", a, errors=(0, 1, 2), launch="A0"), make_eval(tmp_path / "a1", a, launch="A1")]
    b_dirs = [make_eval(tmp_path / "b0", a, launch="B0"), make_eval(tmp_path / "b1", a, errors=(3, 4), launch="B1")]
    c = compare_dirs(a_dirs, b_dirs, None, 0.05, 0, n_resamples=500)
    assert c["n"] == n and c["dropped_errors"] == 0
    assert c["errors"]["rate_a"] == pytest.approx(3 / (2 * n)) and c["errors"]["rate_b"] == pytest.approx(2 / (2 * n))
    assert c["delta"] == 0 and c["verdict"] == "inconclusive"


def test_regressed(tmp_path: Path):
    rng = np.random.default_rng(6)
    a = rng.random(500) < 0.8
    b = a & (rng.random(500) < 0.85)
    c = compare_dirs([make_eval(tmp_path / "a", a)], [make_eval(tmp_path / "b", b)], None, 0.05, 0)
    assert c["verdict"] == "regressed" and c["delta"] < 0 and c["b_only"] == 0
    assert c["delta_ci"][1] < 0 and c["p"] < 0.05


def test_noninferiority_hypothesis(tmp_path: Path):
    """A significant −0.5 pp inside a 1 pp margin: regressed for a superiority question, noninferior for
    the question the seed asks."""
    a = np.ones(4000, bool)
    a[:400] = False
    b = a.copy()
    b[400:420] = False       # Δ = -0.5 pp, 20 discordant pairs all for A
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", b)
    sup = compare_dirs([da], [db], 0.01, 0.05, 0)
    assert sup["verdict"] == "regressed"
    ni = compare_dirs([da], [db], 0.01, 0.05, 0, hypothesis="noninferiority")
    assert ni["verdict"] == "noninferior" and ni["hypothesis"] == "noninferiority"
    assert ni["test"].startswith("non-inferiority") and ni["test_alpha"] == 0.025
    assert ni["p"] == ni["tost"]["p_noninferiority"] < 0.025 and ni["delta_ci"][0] > -0.01
    assert "significantly lower" in ni["verdict_reason"]
    assert "NON-INFERIOR" in format_summary(Comparison.from_doc(ni)).upper()
    with pytest.raises(CompareError, match="needs a margin"):
        compare_dirs([da], [db], None, 0.05, 0, hypothesis="noninferiority")


def test_min_effect_is_judged_on_the_interval(tmp_path: Path):
    a = np.ones(4000, bool)
    b = a.copy()
    b[:40] = False    # Δ = -1 pp, highly significant
    c = compare_dirs([make_eval(tmp_path / "a", a)], [make_eval(tmp_path / "b", b)], None, 0.05, 0,
                     min_effect=0.02)
    assert c["p"] < 1e-6
    assert c["verdict"] == "inconclusive" and "declared effect" in c["verdict_reason"]
    # point estimate beyond the declared effect, interval not: still not shown
    b[:60] = False    # Δ = -1.5 pp, 95 % CI about [-1.9, -1.2] pp
    c = compare_dirs([make_eval(tmp_path / "a2", a)], [make_eval(tmp_path / "b2", b)], None, 0.05, 0,
                     min_effect=0.014)
    assert c["delta"] < -0.014 < c["delta_ci"][1] and c["verdict"] == "inconclusive"


@pytest.mark.parametrize("key,value", [("dataset_sha256", "e" * 64), ("recipe", "heldout"), ("indices", None)])
def test_refuses_different_question_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a[:100])
    if key == "dataset_sha256":
        db = make_eval(tmp_path / "b", b[:100], sha=value)
    elif key == "recipe":
        db = make_eval(tmp_path / "b", b[:100], recipe=value)
    else:
        db = make_eval(tmp_path / "b", b[:99])
    rc = main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "cmp")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "refusing to compare" in err and key in err
    assert not (tmp_path / "cmp" / "comparison.json").exists()
    with pytest.raises(CompareError):
        compare_dirs([da], [db], None, 0.05, 0)


def test_not_an_eval_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    da = make_eval(tmp_path / "a", [True, False, True])
    (tmp_path / "empty").mkdir()
    assert main(["--a", str(da), "--b", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "not an eval directory" in capsys.readouterr().err


def test_a_run_directory_for_an_eval_names_the_evals_it_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    run = tmp_path / "run"
    da = make_eval(run / "evals" / "a" / "r1", [True, False, True])
    make_eval(run / "evals" / "b" / "r1", [True, True, True])
    assert main(["--a", str(run), "--b", str(da), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"pass the eval directories it holds, e.g. {run}/evals/a/r1 {run}/evals/b/r1" in err


def test_symmetric_errors_and_the_error_limit(tmp_path: Path):
    a, b = seed_vectors()
    # errors on questions that both arms would have answered right: the bounds agree, the verdict stands
    both_right = np.flatnonzero(a & b)
    da = make_eval(tmp_path / "a", a, errors=tuple(both_right[:5]))
    db = make_eval(tmp_path / "b", b, errors=tuple(both_right[5:10]))
    c = compare_dirs([da], [db], None, 0.05, 0)
    assert c["n"] == N - 10 and c["dropped_errors"] == 10
    assert (c["a_only"], c["b_only"]) == (10, 14) and c["both"] == 1227
    assert c["error_rate"] == pytest.approx(5 / N) and c["arms"]["b"]["error_rate"] == pytest.approx(5 / N)
    assert c["verdict"] == "inconclusive" and not c["errors"]["changes_verdict"]
    # 5 unanswered by A only, 5 by B only: the errors do not depend on the arm, so the 10 questions are left
    # out of both arms and no bound is computed
    g = c["errors"]["gate"]
    assert (g["a_only"], g["b_only"], g["both"]) == (5, 5, 0) and g["p"] == pytest.approx(1.0)
    assert g["action"] == "drop" and c["errors"]["bounds"] is None and "mde_allowance" not in c["errors"]
    assert c["errors"]["p"] == pytest.approx(1.0)
    assert "drop: errors do not depend on the arm" in format_summary(Comparison.from_doc(c))
    # above the threshold: not comparable
    db2 = make_eval(tmp_path / "b2", b, errors=tuple(both_right[5:40]))
    c2 = compare_dirs([da], [db2], None, 0.05, 0)
    assert c2["verdict"] == "not_comparable" and "request errors" in c2["verdict_reason"]
    assert c2["error_rate_exceeded"] is True and c["error_rate_exceeded"] is False
    assert c2["test"] is None and c2["p"] is None
    c3 = compare_dirs([da], [db2], None, 0.05, 0, max_error_rate=0.05)
    assert c3["verdict"] != "not_comparable"


def test_failed_arm_side_check_and_simulated_flag(tmp_path: Path):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a, simulated=True)
    db = make_eval(tmp_path / "b", b, side_check={"passed": False, "check": "marker"})
    c = compare_dirs([da], [db], None, 0.05, 0)
    assert c["simulated"] is True
    assert c["verdict"] == "not_comparable" and "side check of arm B" in c["verdict_reason"]
    assert c["failures"] and c["error_rate_exceeded"] is False
    dc = make_eval(tmp_path / "c", b, status="failed")
    c = compare_dirs([da], [dc], None, 0.05, 0)
    assert c["verdict"] == "not_comparable" and "arm B failed" in c["verdict_reason"]
    c = compare_dirs([da], [make_eval(tmp_path / "d", b)], None, 0.05, 0, failures=["arm A crashed"])
    assert c["verdict"] == "not_comparable" and "arm A crashed" in c["verdict_reason"]


def test_simulated_banner_in_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a, simulated=True)
    db = make_eval(tmp_path / "b", b, simulated=True)
    assert main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "o"), "--resamples", "500"]) == 0
    assert "SIMULATED" in capsys.readouterr().out


@pytest.mark.slow  # abh power simulates its plan: test_plan.py keeps the fast plans
def test_power_cli_json_and_text(capsys: pytest.CaptureFixture[str]):
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--effect",
                       str(400 / 1319), "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["mde_unpaired"] == pytest.approx(0.0245, abs=0.001)
    assert round(f["mde_paired"], 3) == 0.011
    assert f["repeats_needed"] == 13
    assert f["mde"] == f["mde_paired"]
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--repeats", "13",
                       "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["mde"] == f["mde_repeats"] and f["mde_repeats"] < 4 / 1319
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--effect", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "2.47 pp" in out and "1.09 pp" in out and "repeats per arm" in out
    with pytest.raises(SystemExit):
        power_main(["--n", "1319", "--p", "94.6"])


def test_identical_small_evals_are_not_equivalent(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """No discordant pair on 20 questions: SE 0, but no equivalence claim and no [0, 0] interval."""
    a = np.arange(20) % 2 == 0
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", a)
    assert main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "o"), "--margin", "0.5",
                 "--resamples", "500"]) == 0
    out = capsys.readouterr().out
    c = json.loads((tmp_path / "o" / "comparison.json").read_text())
    assert c["b_only"] + c["a_only"] == 0 and c["delta_se"] == 0
    assert c["verdict"] == "inconclusive" and "EQUIVALENT" not in out
    lo, hi = c["delta_ci"]
    assert lo < -0.05 and hi > 0.05
    t = c["tost"]
    assert not t["equivalent"] and t["p_equivalence"] > 0.05 and t["ci"][0] < -0.005 < 0.005 < t["ci"][1]
    assert "Tango score interval" in c["verdict_reason"]
    assert "[+0.00, +0.00]" not in out


def test_identical_repeats_use_the_score_interval(tmp_path: Path):
    a = np.arange(30) % 3 == 0
    a_dirs = [make_eval(tmp_path / f"a{r}", a, launch=f"A{r}") for r in range(2)]
    b_dirs = [make_eval(tmp_path / f"b{r}", a, launch=f"B{r}") for r in range(2)]
    c = compare_dirs(a_dirs, b_dirs, margin=0.01, alpha=0.05, seed=0, n_resamples=500)
    # identical runs on two launches per arm: no variance at all, and the SE is floored at one question's
    # worth (1/n), so neither an effect nor equivalence is claimed on 30 questions
    assert c["delta_se"] == pytest.approx(1 / 30) and not c["tost"]["equivalent"]
    assert c["verdict"] == "inconclusive" and c["psi_aa"] == 0.0
    assert c["delta_ci"][0] < -0.05 and c["delta_ci"][1] > 0.05 and c["delta_ci_method"] == "launch-aware t interval"


def test_refusal_names_the_differing_recipe_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a[:100], recipe={"name": "gsm8k-5shot", "num_questions": 1319, "shots": 5})
    db = make_eval(tmp_path / "b", b[:100], recipe={"name": "gsm8k-5shot", "num_questions": 100, "shots": 5})
    assert main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "o")]) == 2
    assert "recipe.num_questions: 1319 vs 100" in capsys.readouterr().err
    db2 = make_eval(tmp_path / "b2", b[:100], recipe={"name": "gsm8k-5shot", "num_questions": 1319})
    with pytest.raises(CompareError, match=r"recipe\.shots: 5 vs \(absent\)"):
        compare_dirs([da], [db2], None, 0.05, 0)
    db3 = make_eval(tmp_path / "b3", b[:99], recipe={"name": "gsm8k-5shot", "num_questions": 1319, "shots": 5})
    with pytest.raises(CompareError, match="indices: 100 vs 99 entries"):
        compare_dirs([da], [db3], None, 0.05, 0)


@pytest.mark.parametrize("layout", ["both_sides", "both_sides_other_spelling", "repeat_in_arm", "aa"])
def test_refuses_the_same_eval_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:50]), make_eval(tmp_path / "b", b[:50])
    args = {"both_sides": ["--a", str(da), "--b", str(da)],
            "both_sides_other_spelling": ["--a", str(da), "--b", str(tmp_path / "." / "a") + "/"],
            "repeat_in_arm": ["--a", str(da), "--a", str(da), "--b", str(db)],
            "aa": ["--a", str(da), "--b", str(db), "--aa", str(da)]}[layout]
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "refusing to compare" in err and "given twice" in err
    assert not (tmp_path / "o" / "comparison.json").exists()


def test_sweep_adjusts_every_verdict_that_rests_on_a_test(tmp_path: Path):
    """Equivalent and non-inferior verdicts are multiplicity-adjusted across a sweep like improved ones,
    each with the level its p was compared with (test_alpha)."""
    from harness.analysis.sweep import summarize_sweep
    from harness.results.schema import write_comparison

    def comp(p: float, verdict: str, test_alpha: float) -> Comparison:
        return comparison(n=1319, delta=0.0, delta_ci=[-0.01, 0.01], p=p, test="t", test_alpha=test_alpha, mde=0.01,
                          verdict=verdict, alpha=0.05, simulated=True)

    jobs = {"job0_x=1": (0.03, "equivalent", 0.05), "job1_x=2": (0.02, "noninferior", 0.025),
            "job2_x=3": (0.04, "equivalent", 0.05), "job3_x=4": (1e-4, "equivalent", 0.05)}
    for job, args in jobs.items():
        write_comparison(tmp_path / job / "comparison.json", comp(*args))
    rows = {r["label"]: r for r in doc(summarize_sweep(tmp_path, "holm"))["comparisons"]}
    assert rows["x=4"]["verdict"] == "equivalent"                       # 4e-4 < 0.05
    assert rows["x=1"]["p_adjusted"] == pytest.approx(0.06)
    assert rows["x=1"]["verdict"] == "inconclusive" and rows["x=1"]["verdict_unadjusted"] == "equivalent"
    assert rows["x=2"]["verdict"] == "inconclusive" and rows["x=2"]["verdict_unadjusted"] == "noninferior"


def test_launch_variation_seen_only_in_the_aa_runs_is_borrowed(tmp_path: Path):
    """One launch per arm plus A/A runs on other launches: the launch variance comes from the A/A control's
    launches (with A's one), and the verdict says so."""
    rng = np.random.default_rng(7)
    n = 1319
    base = rng.random(n) < 0.85

    def launch(shift: float) -> np.ndarray:
        return np.where(base, rng.random(n) >= max(0.0, -shift) / 0.85, rng.random(n) < max(0.0, shift) / 0.15)

    da = make_eval(tmp_path / "a", launch(0.0), launch="A0")
    db = make_eval(tmp_path / "b", launch(0.01), launch="B0")
    aa = [make_eval(tmp_path / f"aa{i}", launch(s), launch=f"A{i + 1}") for i, s in enumerate((0.04, -0.04))]
    c = compare_dirs([da], [db], None, 0.05, 0, aa_dirs=aa, n_resamples=500)
    assert c["design"]["unit"] == "launch-aware" and c["design"]["kind"] == "one run per arm"
    assert c["test"] == S.accuracy.LAUNCH_AWARE and c["verdict"] == "inconclusive"
    lv = c["launch_variance"]
    assert lv["df_launch"] == 2 and lv["launches"] == {"a": 1, "aa": 2, "b": 1} and lv["sd"] > 0.02
    assert "the A/A control's launches with arm A's one (3 launches of A)" in lv["source"]
    assert c["delta_df"] == pytest.approx(2.0, abs=0.05)
    assert c["qualification"] == S.accuracy.QUALIFIED_AA_ONLY and c["verdict_reason"].endswith(S.accuracy.QUALIFIED_AA_ONLY)
    assert c["design"]["cannot_resolve"] is None  # the qualification says it, in the verdict itself
    text = format_summary(Comparison.from_doc(c))
    assert "launch variance: sd " in text and "A/A control's launches" in text
