"""Unit behaviour of harness.stats: verdict rules, TOST, edge cases, bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from harness import stats as S
from harness.stats.equivalence import score_tost, t_tost
from harness.stats.resample import bootstrap_means
from harness.stats.tango import score_interval
from harness.stats.verdict import VERDICTS, Evidence, decide


def ev(delta: float, p: float, ci: tuple[float, float], *, tost_ci: tuple[float, float] | None = None,
       p_eq: float | None = None, p_ni: float | None = None, mde: float | None = 0.011,
       p_floor: float | None = None) -> Evidence:
    return Evidence(delta=delta, p=p, test="sign-flip", ci=ci, ci_method="score interval", ci_tost=tost_ci,
                      p_equivalence=p_eq, p_noninferiority=p_ni, mde=mde, p_floor=p_floor)


def test_verdict_rules_superiority():
    assert decide(ev(0.02, 0.001, (0.01, 0.03))).word == "improved"
    assert decide(ev(-0.02, 0.001, (-0.03, -0.01))).word == "regressed"
    v = decide(ev(0.003, 0.54, (-0.006, 0.011)))
    assert v.word == "inconclusive" and "1.10 pp" in v.reason and v.basis == "superiority"
    assert "95 % score interval" in v.reason
    # the level of the interval follows alpha
    v = decide(ev(0.003, 0.54, (-0.006, 0.011)), alpha=0.1)
    assert "90 % score interval" in v.reason and "95 %" not in v.reason
    v = decide(ev(0.003, 0.54, (-0.006, 0.011), tost_ci=(-0.004, 0.009), p_eq=0.01), margin=0.02)
    assert v.word == "equivalent" and v.basis == "equivalence" and "90 % score interval" in v.reason
    v = decide(ev(0.003, 0.54, (-0.006, 0.011), tost_ci=(-0.004, 0.009), p_eq=0.3), margin=0.002)
    assert v.word == "inconclusive" and "±0.20 pp" in v.reason
    # the test and the interval disagree: no direction claimed
    v = decide(ev(0.003, 0.04, (-0.0001, 0.011)))
    assert v.word == "inconclusive" and "includes 0" in v.reason
    # not comparable beats everything
    v = decide(ev(0.05, 1e-9, (0.04, 0.06)), failures=["side check of arm B failed"])
    assert v.word == "not_comparable" and "side check" in v.reason and v.basis is None
    v = decide(ev(0.05, 1e-9, (0.04, 0.06)), error_rate=0.03, max_error_rate=0.02)
    assert v.word == "not_comparable" and "3.00 %" in v.reason
    assert set(VERDICTS) == {"improved", "regressed", "equivalent", "noninferior", "inconclusive",
                               "not_comparable", "identical", "differs", "not_deterministic"}
    with pytest.raises(ValueError):
        decide(ev(0, 1, (-1, 1)), hypothesis="noninferiority")      # needs a margin
    with pytest.raises(ValueError):
        decide(ev(0, 1, (-1, 1)), hypothesis="bigger")


def test_declared_effect_is_judged_on_the_interval_not_the_point_estimate():
    # point estimate above the declared 1 pp, interval reaching below it: not shown
    v = decide(ev(0.015, 0.001, (0.006, 0.024)), min_effect=0.01)
    assert v.word == "inconclusive" and "declared effect" in v.reason
    assert decide(ev(0.025, 1e-6, (0.012, 0.038)), min_effect=0.01).word == "improved"
    assert decide(ev(-0.025, 1e-6, (-0.038, -0.012)), min_effect=0.01).word == "regressed"
    assert decide(ev(0.005, 0.001, (0.002, 0.008)), min_effect=0.01).word == "inconclusive"


def test_noninferiority_is_a_verdict():
    kw = {"hypothesis": "noninferiority", "margin": 0.01}
    # the table: CI [+0.04, +1.82] pp, not significant two-sided at the same level? -> noninferior
    v = decide(ev(0.0093, 0.06, (-0.0004, 0.0182), p_ni=1e-5), **kw)
    assert v.word == "noninferior" and v.basis == "noninferiority" and "0.025" in v.reason
    # a significant -0.5 pp inside a 1 pp margin is noninferior, not regressed, and says it is lower
    v = decide(ev(-0.005, 0.01, (-0.0088, -0.0012), p_ni=0.005), **kw)
    assert v.word == "noninferior" and "significantly lower" in v.reason
    # significantly better: improved (superiority implies non-inferiority)
    assert decide(ev(0.02, 1e-4, (0.01, 0.03), p_ni=1e-9), **kw).word == "improved"
    # significantly worse beyond the margin: regressed
    assert decide(ev(-0.02, 1e-4, (-0.03, -0.012), p_ni=0.9), **kw).word == "regressed"
    # neither shown
    v = decide(ev(-0.002, 0.5, (-0.012, 0.008), p_ni=0.04), **kw)
    assert v.word == "inconclusive" and "non-inferiority not shown" in v.reason and v.basis == "noninferiority"
    # superiority question with the same numbers does not say noninferior
    assert decide(ev(-0.005, 0.01, (-0.0088, -0.0012), p_ni=0.005), margin=0.01).word == "regressed"


def test_equivalence_hypothesis_puts_equivalence_first():
    e = ev(0.004, 0.01, (0.001, 0.007), tost_ci=(0.0015, 0.0065), p_eq=1e-6)
    assert decide(e, margin=0.01).word == "improved"
    assert decide(e, margin=0.01, hypothesis="equivalence").word == "equivalent"
    v = decide(ev(0.0, 0.9, (-0.02, 0.02), tost_ci=(-0.015, 0.015), p_eq=0.4), margin=0.01,
                 hypothesis="equivalence")
    assert v.word == "inconclusive" and v.basis == "equivalence"


def test_tost_cases():
    # score form: the seed's worked example, margin 2 pp
    r = score_tost(10, 14, 1319, margin=0.02)
    assert r.equivalent and r.noninferior and r.ci_level == pytest.approx(0.9)
    assert -0.02 < r.ci[0] < 0 < r.ci[1] < 0.02 and r.noninferiority_alpha == 0.025
    # a zero-discordance table of 20 questions shows nothing at 0.5 pp: the score interval is wide
    r = score_tost(0, 0, 20, margin=0.005)
    assert r.ci[0] < -0.05 and r.ci[1] > 0.05 and not r.equivalent and not r.noninferior
    assert score_tost(0, 0, 200, margin=0.02).equivalent
    # t form
    r = t_tost(0.001, 0.002, 30, margin=0.01)
    assert r.equivalent and r.noninferior
    r = t_tost(-0.008, 0.004, 30, margin=0.01)
    assert not r.noninferior and not r.equivalent
    r = t_tost(0.0, 0.0, 4, margin=0.01)                    # SE 0 over launches: nothing shown
    assert not r.equivalent and not r.noninferior and r.p_equivalence == 1.0
    with pytest.raises(ValueError):
        score_tost(1, 1, 10, margin=0)


def test_score_tost_p_values_agree_with_the_interval():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(5, 500))
        t = rng.multinomial(n, rng.dirichlet([3, 0.5, 0.5, 1]))
        margin = float(rng.uniform(0.002, 0.2))
        alpha = float(rng.choice([0.01, 0.05, 0.1]))
        r = score_tost(int(t[1]), int(t[2]), n, margin=margin, alpha=alpha)
        lo2, _ = score_interval(int(t[1]), int(t[2]), n, alpha)
        assert (r.p_noninferiority < alpha / 2) == r.noninferior == (float(lo2) > -margin)
        assert (r.p_equivalence < alpha) == r.equivalent
    r, m = score_tost(3, 7, 100, 0.05), score_tost(7, 3, 100, 0.05)
    assert r.p_noninferiority == pytest.approx(m.p_nonsuperiority)


def test_more_repeats_never_weaken_equivalence():
    """Equivalence shown on one run per arm stays shown when the runs are repeated verbatim (no new
    evidence: the same interval) or on fresh launches (a narrower interval)."""
    from tests.helpers.score_simulator import Noise, SimDesign, experiment

    rng = np.random.default_rng(4)
    a3, b3 = experiment(rng, SimDesign("3 launches", 3, 1), Noise("launch", 0.02, 0.0), n=1319)
    a1, b1 = a3.scores[0], b3.scores[0]
    kw = {"margin": 0.01, "compute_mde": False}
    one = S.compare_arms(S.ArmRuns(a1, ("A",)), S.ArmRuns(b1, ("B",)), **kw)
    verbatim = S.compare_arms(S.ArmRuns(np.vstack([a1] * 3), ("A",) * 3), S.ArmRuns(np.vstack([b1] * 3), ("B",) * 3),
                              **kw)
    assert verbatim.analysis.ci == pytest.approx(one.analysis.ci) and verbatim.analysis.p == pytest.approx(one.analysis.p)
    assert verbatim.analysis.tost.ci == pytest.approx(one.analysis.tost.ci)
    more = S.compare_arms(a3, b3, **kw)
    assert more.analysis.unit == "launch-aware" and more.analysis.df is not None
    width = lambda r: r.analysis.tost.ci[1] - r.analysis.tost.ci[0]  # noqa: E731
    assert width(more) < width(one)
    assert one.verdict.word == "equivalent" and more.verdict.word == "equivalent"
    # identical arms (SE 0) with repeats: equivalence is still shown on enough questions (never degenerate)
    same = S.compare_arms(S.ArmRuns(np.vstack([a1] * 2), ("A",) * 2), S.ArmRuns(np.vstack([a1] * 2), ("B",) * 2),
                          **kw)
    assert same.verdict.word == "equivalent" and same.analysis.ci[1] > same.analysis.ci[0]


def test_discordance_noise_band_and_within_arm_psi():
    x = np.array([1.0, np.nan, 0.0])
    assert S.discordance(x, np.array([0.0, 1.0, 0.0])) == 0.5
    assert S.noise_band(0.02, 1319) == pytest.approx(1.96 * np.sqrt(0.02 / 1319), rel=1e-4)
    assert S.effective_repeats(1, 3) == 1.5
    assert S.within_arm_psi(S.ArmRuns(np.ones((1, 10)), ("x",))) is None
    runs = np.array([[1, 1, 0, 0], [1, 0, 0, 1], [1, 0, 0, 1]], float)
    w = S.within_arm_psi(S.ArmRuns(runs, ("L1", "L2", "L2")))
    assert w.across_launches == 0.5 and w.within_launch == 0.0 and w.value == 0.5
    assert w.source == "across launches"
    w = S.within_arm_psi(S.ArmRuns(runs[1:], ("L2", "L2")))
    assert w.value == 0.0 and w.source == "within one launch"


def test_psi_aa_is_pooled_evenly_and_warns_when_repeats_share_a_launch():
    rng = np.random.default_rng(9)
    n = 1000
    base = (rng.random(n) < 0.8).astype(float)
    noisy = lambda: np.where(rng.random(n) < 0.04, 1 - base, base)  # noqa: E731
    a = S.ArmRuns(np.vstack([noisy() for _ in range(5)]), tuple(f"A{i}" for i in range(5)))   # psi ~ 0.077
    b = S.ArmRuns(np.vstack([base, base]), ("B0", "B1"))                                       # psi 0
    blk = S.psi_aa_block(a, b, 0.08, n)
    assert blk.per_arm["b"] == 0.0 and blk.per_arm["a"] > 0.05
    assert blk.psi_aa == pytest.approx((blk.per_arm["a"] + 0.0) / 2)   # even, not 10 A pairs to 1 B pair
    assert blk.warning is None
    same = S.ArmRuns(np.vstack([base] * 3), ("A0",) * 3)
    blk = S.psi_aa_block(same, S.ArmRuns(np.vstack([base] * 2), ("B0",) * 2), 0.03, n)
    assert blk.psi_aa == 0.0 and "share a launch" in blk.warning and blk.source == "within one launch"


def test_bootstrap_memory_is_bounded_by_chunking():
    x = np.random.default_rng(0).integers(0, 6, 1319) / 5
    tracemalloc.start()
    bootstrap_means(x, 20_000, seed=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # 20k means (0.16 MB) + one chunk of ~1M indices and values; an unchunked draw would need > 300 MB
    assert peak < 40 * 2**20


def test_wilson_degenerate():
    lo, hi = S.wilson_interval(0, 0)
    assert (float(lo), float(hi)) == (0.0, 1.0)
    lo, hi = S.wilson_interval(10, 10)
    assert float(hi) == 1.0 and 0.6 < float(lo) < 0.8


def test_detectable_floor_matches_the_tests():
    from scipy.stats import binomtest

    from harness.stats import mde_floor, min_detectable_discordant

    for alpha in (0.05, 0.01, 0.1, 0.0625):
        k = min_detectable_discordant(alpha, mid_p=False)
        assert binomtest(k, k, 0.5).pvalue < alpha <= binomtest(k - 1, k - 1, 0.5).pvalue
        if alpha != 0.0625:      # 0.5**4 exactly: the mid-p boundary is a floating-point tie
            k = min_detectable_discordant(alpha)
            assert float(S.mcnemar_midp(0, k)) < alpha <= float(S.mcnemar_midp(0, k - 1))
    assert mde_floor(20, 0.05, mid_p=False) == 6 / 20 and mde_floor(20, 0.05) == 5 / 20


def test_verdict_refuses_equivalence_on_a_zero_width_interval():
    e = ev(0.0, 1.0, (0.0, 0.0), tost_ci=(0.0, 0.0), p_eq=0.0)
    v = decide(e, margin=0.005)
    assert v.word == "inconclusive" and "[+0.00, +0.00] pp" in v.reason


def test_p_value_at_monte_carlo_floor_is_a_bound():
    floor = 1 / 10_001
    assert S.format_p(floor, floor) == "p < 0.0001"
    assert S.format_p(0.5413, floor) == "p = 0.541"
    assert S.format_p(floor) == "p = 0.0001"
    assert S.format_p(0.0) == "p < 1e-300"
    v = decide(ev(0.1, floor, (0.05, 0.15), p_floor=floor))
    assert v.word == "improved" and "p < 0.0001" in v.reason and "p = " not in v.reason


def test_unused_paired_z_pvalue_is_gone():
    import harness.stats.paired as P

    assert not hasattr(S, "paired_z_pvalue") and not hasattr(P, "paired_z_pvalue")
    assert "paired_z_pvalue" not in S.__all__
    # the within-question permutation test treated runs sharing a launch as independent: gone
    assert not hasattr(S, "permutation_test") and not hasattr(S, "tost")
