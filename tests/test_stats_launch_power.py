"""The verdict's power (``abh power``'s plan) against scipy's noncentral t and against simulation of the
verdict itself; the launch-aware (two-level) bootstrap's coverage, and where comparison.json reports it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import greedy_generator as GG
from helpers.evals import make_eval
from scipy import stats as ss

from harness.analysis.comparison import compare_dirs
from harness.analysis.planning import design_power
from harness.cli.power import power_main
from harness.stats import ArmRuns, paired_bootstrap_ci
from harness.stats import launchvar as LV
from harness.stats.repeats import launch_bootstrap


def _arm(y: np.ndarray, prefix: str) -> ArmRuns:
    return ArmRuns(y, tuple(f"{prefix}{i}" for i in range(y.shape[0])))


def _normal(rng: np.random.Generator, la: int, lb: int, laa: int, n: int, su: float,
            effect: float) -> tuple[ArmRuns, ArmRuns, ArmRuns | None]:
    """y = question + launch shift (sd su) + N(0, 1) noise; B adds ``effect``."""
    q = rng.normal(0, 1, n)

    def runs(L: int, prefix: str, add: float = 0.0) -> ArmRuns:
        return _arm(q[None, :] + add + rng.normal(0, su, (L, 1)) + rng.normal(0, 1, (L, n)), prefix)

    return runs(la, "a"), runs(lb, "b", effect), runs(laa, "aa") if laa else None


def test_power_is_the_noncentral_t_when_one_estimate_serves_both_arms():
    """One launch per arm and 3 A/A launches, no interaction: V̂ = 2 τ̂² on 3 df exactly, so the power is
    scipy's noncentral t (8000 fixed draws: within 1 point)."""
    n, tau2 = 500, 4e-4
    for effect in (0.01, 0.03, 0.05):
        p = LV.power_launch_aware(effect, n, tau2 - 1e-5, 1e-5, 1, 1, 3, 0.0)
        lam = effect / math.sqrt(2 * tau2)
        c = ss.t.ppf(0.975, 3)
        ref = ss.nct.sf(c, 3, lam) + ss.nct.cdf(-c, 3, lam)
        assert p == pytest.approx(ref, abs=0.01)


@pytest.mark.parametrize("la,su,effect", [(1, 0.0, 0.45), (3, 0.0, 0.3), (3, 0.25, 0.45)])
def test_planned_power_matches_the_verdicts_simulated_power(la: int, su: float, effect: float):
    """The plan's power for L launches per arm + 2 A/A (the verdict's own t and df, the launch variance
    included) against 300 simulated verdicts of the same design: within 5 points + 3 MC SEs. The normal
    model of the old plan (no launch term, z reference) was 10-40 points above in these designs."""
    n, exps = 40, 300
    rng = np.random.default_rng(31 + la)
    hits = 0
    for _ in range(exps):
        a, b, aa = _normal(rng, la, la, 2, n, su, effect)
        hits += LV.launch_aware_test(a, b, aa).significant
    achieved = hits / exps
    planned = design_power(effect, n, su**2, 1.0 / n, la, la, 2, heterogeneity=0.0, tails="normal")
    print(f"L {la} su {su}: planned {planned:.3f} achieved {achieved:.3f}")
    assert abs(planned - achieved) <= 0.05 + 3 * math.sqrt(achieved * (1 - achieved) / exps)


@pytest.mark.slow  # abh power simulates its plan: test_plan.py keeps the fast plans
def test_abh_power_plans_with_the_launch_variance(capsys: pytest.CaptureFixture[str]):
    """The seed design (3 launches per arm, 2 A/A, n 1319) at +1.5 pp with a launch sd of 1.2 pp: the plan
    prints the assumed sd and its power for 1-6 launches; 3 launches have far less than 80 % power (the
    normal model without a launch term planned 80-89 % for 3-4 repeats)."""
    argv = ["--n", "1319", "--p", "0.9", "--discordance", "0.05", "--effect", "1.5", "--aa-launches", "2"]
    assert power_main([*argv, "--launch-sd", "1.2", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    lp = plan["launch"]
    assert lp["sd"] == pytest.approx(0.012) and "--launch-sd 1.2 pp" in lp["source"] and lp["aa_launches"] == 2
    by = {int(x["launches"]): x["power"] for x in lp["power_by_launches"]}
    assert list(by) == [1, 2, 3, 4, 5, 6] and by[3] < 0.5 and by[6] > by[3]
    assert by[3] == pytest.approx(design_power(0.015, 1319, 0.012**2, 0.05 / 2 / 1319, 3, 3, 2))
    assert plan["fixed"]["repeats"] > 6 and plan["fixed"]["power"] >= 0.8
    assert power_main([*argv, "--launch-sd", "0", "--json"]) == 0
    flat = json.loads(capsys.readouterr().out)["plan"]
    assert flat["fixed"]["repeats"] < plan["fixed"]["repeats"]
    assert power_main([*argv, "--launch-sd", "1.2"]) == 0
    assert "launch variance: sd 1.20 pp per launch (assumed: --launch-sd 1.2 pp)" in capsys.readouterr().out


def test_launch_bootstrap_covers_under_launch_shifts():
    """3 + 3 launches + A/A 2, launch shifts of sd 0.3 x the question noise (rho = 3.6 at n 40), 150
    experiments: the two-level bootstrap covers the true Δ = 0 at least 93 % - 3 MC SEs; the paired
    question-only bootstrap (resampling questions only) covers far less (about 60 %)."""
    rng = np.random.default_rng(41)
    exps, n = 100, 40
    cover = cover_q = 0
    for i in range(exps):
        a, b, aa = _normal(rng, 3, 3, 2, n, 0.3, 0.0)
        r = LV.launch_aware_test(a, b, aa)
        lb = launch_bootstrap(a, b, aa, np.ones(n, dtype=bool), r.df, n_resamples=299, seed=i)
        assert lb is not None and lb.a is not None and lb.b is not None
        cover += lb.delta[0] <= 0 <= lb.delta[1]
        q = paired_bootstrap_ci(a.scores.mean(axis=0), b.scores.mean(axis=0), n_resamples=299,
                                method="percentile", seed=i)
        cover_q += q[0] <= 0 <= q[1]
    print(f"launch bootstrap {cover / exps:.3f}, question-only {cover_q / exps:.3f}")
    assert cover / exps >= 0.93 - 3 * math.sqrt(0.06 / exps)
    assert cover_q / exps < 0.8


@pytest.mark.slow
def test_launch_bootstrap_on_the_greedy_generator():
    """The seed design (n 1319) on the greedy generator, t3 launch shifts of sd 0.3, 60 experiments: the
    two-level bootstrap covers 0 in at least 54 (the question-only one in about a third)."""
    d = GG.Design(shift="t3", shift_sd=0.3, flip_base=0.2)
    ya, yaa, yb = GG.draw(d, 60, np.random.default_rng(5))
    cover = 0
    for e in range(60):
        a, aa, b = _arm(ya[e], "a"), _arm(yaa[e], "aa"), _arm(yb[e], "b")
        r = LV.launch_aware_test(a, b, aa)
        lb = launch_bootstrap(a, b, aa, np.ones(d.n, dtype=bool), r.df, n_resamples=199, seed=e)
        assert lb is not None
        cover += lb.delta[0] <= 0 <= lb.delta[1]
    assert cover >= 54


def test_comparison_reports_the_launch_bootstrap_beside_the_question_only_one(tmp_path: Path):
    rng = np.random.default_rng(3)
    n = 200
    q = rng.uniform(0, 1, n)
    a = [make_eval(tmp_path / f"a{r}", rng.random(n) < q, launch=f"a-{r}") for r in range(3)]
    b = [make_eval(tmp_path / f"b{r}", rng.random(n) < q, launch=f"b-{r}") for r in range(3)]
    aa = make_eval(tmp_path / "aa", rng.random(n) < q, launch="aa-1")
    c = compare_dirs(a, b, aa_dirs=[aa], n_resamples=500).to_doc()
    dg = c["diagnostics"]
    lo, hi = dg["delta_ci_bootstrap_launch"]
    assert lo < c["delta"] < hi and "two-level" in dg["delta_ci_bootstrap_launch_method"]
    assert "question-only" in dg["delta_ci_bootstrap_scope"] and dg["delta_ci_bootstrap_percentile"]
    for arm in ("a", "b"):
        blk = c["arms"][arm]
        assert blk["bootstrap_kind"].startswith("question-only") and len(blk["bootstrap_launch"]) == 2
        assert blk["bootstrap_launch"][0] < blk["accuracy"] < blk["bootstrap_launch"][1]
    # one run per arm: nothing to resample at the launch level, said so
    one = compare_dirs(a[:1], b[:1], n_resamples=200).to_doc()
    assert one["diagnostics"]["delta_ci_bootstrap_launch"] is None
    assert "bootstrap_launch" not in one["arms"]["a"]


@pytest.mark.slow
@pytest.mark.parametrize("shift,launches", [("none", 3), ("t3", 3), ("t3", 6)])
def test_planned_power_on_the_greedy_generator(shift: str, launches: int):
    """The plan given the generator's population launch variance and noise against 300 simulated verdicts of
    the seed design's shape (A/A 2, n 1319, +1.5 pp), t3 shifts of sd 0.15: within 5 points + 3 MC SEs."""
    d = GG.Design(shift=shift, shift_sd=0.15, flip_base=0.2, launches_a=launches, launches_b=launches,
                  delta=0.015)
    ya, yaa, yb = GG.draw(d, 300, np.random.default_rng(17))
    res = [LV.launch_aware_test(_arm(ya[e], "a"), _arm(yb[e], "b"), _arm(yaa[e], "aa")) for e in range(300)]
    hits = sum(r.significant for r in res)
    # the plan is asked for the generator's true Δ (the mean Δ̂: A's flips get some of B's 20 questions right)
    effect = float(np.mean([r.delta for r in res]))
    big = d.with_(launches_a=8, launches_b=8, launches_aa=0, delta=0.0)
    za, _, zb = GG.draw(big, 40, np.random.default_rng(18))
    noise = float(np.mean([LV.launch_aware_test(_arm(za[e], "a"), _arm(zb[e], "b")).components.ms_resid
                           for e in range(40)])) / d.n
    planned = design_power(effect, d.n, GG.launch_accuracy_variance(d), noise, launches, launches, 2)
    achieved = hits / 300
    print(f"{shift} L {launches}: planned {planned:.3f} achieved {achieved:.3f}")
    assert abs(planned - achieved) <= 0.05 + 3 * math.sqrt(achieved * (1 - achieved) / 300)


def test_report_and_markdown_show_the_launch_bootstrap(tmp_path: Path):
    """report.html and comparison.md show the launch-aware bootstrap beside the verdict's interval."""
    from helpers.rundirs import build_run_dir

    from harness.report import write_markdown, write_report

    root = build_run_dir(tmp_path / "run", n=80, repeats=2, aa=True)
    c = json.loads((root / "comparison.json").read_text())
    boot = c["diagnostics"]["delta_ci_bootstrap_launch"]
    assert boot is not None
    html = write_report(root).read_text()
    assert "launch-aware bootstrap" in html
    lo = f"{100 * boot[0]:+.2f}".replace("-", "\u2212")
    assert lo in html
    md = write_markdown(root).read_text()
    assert "launch-aware bootstrap" in md.split("How this was decided")[1] and lo in md


def test_plan_is_for_the_benchmarks_questions_heterogeneous_effect():
    """B's effect on whole questions of a fixed benchmark (+3.85 on 13 of 130, the same questions in every
    run), 3 launches per arm + 2 A/A, no launch shift: Δ̂ varies between runs by the within-launch noise only
    while the verdict's V holds the question x arm term h = Var_i(δ_i)/n. The plan (h in V̂ only, 93 %)
    against 400 simulated verdicts: within 5 points + 3 MC SEs; the plan that also put h in Var(Δ̂) (83 %)
    is more than 5 points below them."""
    n, la, exps = 130, 3, 400
    rng = np.random.default_rng(41)
    q = rng.normal(0, 1, n)
    delta = np.zeros(n)
    delta[:13] = 3.85
    h = float(np.var(delta)) / n
    hits = 0
    for _ in range(exps):
        def runs(L: int, prefix: str, add: np.ndarray | float = 0.0) -> ArmRuns:
            return _arm(q[None, :] + add + rng.normal(0, 1, (L, n)), prefix)

        hits += LV.launch_aware_test(runs(la, "a"), runs(la, "b", delta), runs(2, "aa")).significant
    achieved = hits / exps
    effect = float(delta.mean())
    planned = design_power(effect, n, 0.0, 1.0 / n, la, la, 2, heterogeneity=h)
    # the old plan: Δ̂ ~ N(effect, τ²_A/L + τ²_B/L + h), the verdict's V̂ and df drawn as the plan draws them
    tau = 1.0 / n
    rng2 = np.random.default_rng(0)
    wa, wb = rng2.chisquare(4, 8000) / 4, rng2.chisquare(2, 8000) / 2
    cv = LV.combine_variance(tau * wa, tau * wb, tau, tau, 4, 2, la, la, 2 * tau / la + h, n, 6 * (n - 1))
    c = ss.t.ppf(0.975, cv.df) * np.sqrt(cv.var)
    sd_old = math.sqrt(2 * tau / la + h)
    old = float(np.mean(ss.norm.sf((c - effect) / sd_old) + ss.norm.cdf((-c - effect) / sd_old)))
    print(f"planned {planned:.3f} old {old:.3f} achieved {achieved:.3f}")
    assert abs(planned - achieved) <= 0.05 + 3 * math.sqrt(achieved * (1 - achieved) / exps)
    assert achieved - old > 0.05


def test_plan_with_heavy_tailed_launch_shifts():
    """Launch shifts sd·T₃/√3 on a normal model (not the generator; n 200, 3 launches per arm + 2 A/A, launch
    sd 4x the within-launch noise's): the plan with t3 tails against 600 simulated verdicts within 5 points
    + 3 MC SEs, while the plan with normal tails (τ̂² ~ τ² χ²/df) is more than 5 points below them: a few
    heavy-tailed launches usually show less variance than they have."""
    n, la, exps, su, effect = 200, 3, 600, 0.28, 0.4
    rng = np.random.default_rng(43)
    q = rng.normal(0, 1, n)
    hits = 0
    for _ in range(exps):
        def runs(L: int, prefix: str, add: float = 0.0) -> ArmRuns:
            shift = su * rng.standard_t(3, (L, 1)) / math.sqrt(3.0)
            return _arm(q[None, :] + add + shift + rng.normal(0, 1, (L, n)), prefix)

        hits += LV.launch_aware_test(runs(la, "a"), runs(la, "b", effect), runs(2, "aa")).significant
    achieved = hits / exps
    t3 = design_power(effect, n, su**2, 1.0 / n, la, la, 2, heterogeneity=0.0, tails="t3")
    normal = design_power(effect, n, su**2, 1.0 / n, la, la, 2, heterogeneity=0.0, tails="normal")
    print(f"t3 plan {t3:.3f} normal plan {normal:.3f} achieved {achieved:.3f}")
    assert abs(t3 - achieved) <= 0.05 + 3 * math.sqrt(achieved * (1 - achieved) / exps)
    assert achieved - normal > 0.05
    with pytest.raises(ValueError, match="tails"):
        design_power(effect, n, su**2, 1.0 / n, la, la, 2, tails="cauchy")
