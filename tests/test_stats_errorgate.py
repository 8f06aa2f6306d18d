"""harness.stats.errorgate: the gate's test against scipy / statsmodels, its three actions, the bounds
against today's compare_arms, and power / false positives with persistent errors (independent generator)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import indep_generator as G
from helpers import textbook_stats as TS
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar

from harness.stats import ArmRuns, compare_arms
from harness.stats import errorgate as EG
from harness.stats.launchvar import launch_aware_test


def arms_with_unanswered(rng: np.random.Generator, n: int, ua: np.ndarray, ub: np.ndarray,
                         runs: int = 2) -> tuple[ArmRuns, ArmRuns]:
    a = (rng.random((runs, n)) < 0.8).astype(float)
    b = (rng.random((runs, n)) < 0.8).astype(float)
    a[:, ua] = np.nan
    b[:, ub] = np.nan
    return (ArmRuns(a, tuple(f"a{i}" for i in range(runs))), ArmRuns(b, tuple(f"b{i}" for i in range(runs))))


def test_gate_p_is_the_exact_mcnemar_test_of_the_unanswered_indicators():
    rng = np.random.default_rng(1)
    for _ in range(60):
        n = 300
        ua, ub = rng.random(n) < rng.uniform(0, 0.05), rng.random(n) < rng.uniform(0, 0.05)
        a, b = arms_with_unanswered(rng, n, ua, ub)
        g = EG.error_gate(a, b)
        bo, co = int(np.sum(ua & ~ub)), int(np.sum(~ua & ub))
        assert (g.a_only, g.b_only, g.both) == (bo, co, int(np.sum(ua & ub)))
        if bo + co:
            assert g.p == pytest.approx(binomtest(co, bo + co, 0.5).pvalue, rel=1e-9)
            tab = np.array([[int(np.sum(ua & ub)), bo], [co, int(np.sum(~ua & ~ub))]])
            assert g.p == pytest.approx(mcnemar(tab, exact=True).pvalue, rel=1e-9)
        expected = "none" if not (ua.any() or ub.any()) else ("bound" if g.p < 0.05 else "drop")
        assert g.action == expected


def test_partial_errors_are_not_unanswered():
    """A question with some answered runs uses them: it is not an unanswered question."""
    rng = np.random.default_rng(2)
    a, b = arms_with_unanswered(rng, 50, np.zeros(50, bool), np.zeros(50, bool))
    s = b.scores.copy()
    s[0, :20] = np.nan
    g = EG.error_gate(a, b.with_scores(s))
    assert g.action == "none" and g.unanswered_b == 0


def test_bounds_match_compare_arms():
    """With ``bound``, the two bounds are today's: same Δ as compare_arms' error bounds (one run per arm,
    where both use the question-level paired test)."""
    rng = np.random.default_rng(3)
    n = 400
    ub = np.zeros(n, bool)
    ub[:6] = True                         # 6 vs 0: McNemar p = 0.031; 1.5 % errors (under the 2 % limit)
    a, b = arms_with_unanswered(rng, n, np.zeros(n, bool), ub, runs=1)
    r = TS.error_robust_test(a, b, lambda x, y: launch_aware_test(x, y))
    assert r.gate.action == "bound" and r.bounds is not None
    ref = compare_arms(a, b, compute_mde=False).errors.bounds
    assert ref is not None
    for k in ("against_b", "against_a"):
        want = getattr(ref, k)
        assert r.bounds[k].delta == pytest.approx(want.delta)
        assert r.bounds[k].p == pytest.approx(want.p) or r.bounds[k].significant == (want.p < 0.05)


def test_drop_leaves_out_the_questions_unanswered_in_either_arm():
    rng = np.random.default_rng(4)
    n = 400
    ua, ub = np.zeros(n, bool), np.zeros(n, bool)
    ua[:4], ub[4:8] = True, True          # 4 + 4: McNemar p = 1
    a, b = arms_with_unanswered(rng, n, ua, ub)
    r = TS.error_robust_test(a, b, lambda x, y: launch_aware_test(x, y))
    assert r.gate.action == "drop" and r.bounds is None and r.decided_by == "test"
    assert r.main.n == n - 8


@pytest.mark.slow  # a simulation of thousands of experiments: the slow suite (.ci/run runs it)
def test_power_with_errors_on_both_arms_quick():
    """1 % persistent errors on both arms, independent of the arm, Δ = +1.5 pp, 3 + 3 launches + A/A 2,
    no launch shift (the audit: the bound-always rule 13 % power against 84 % without errors): 250
    experiments through compare_arms, the gate's power within 10 points of the error-free power (bound: 10
    points + 3 MC SEs); the bound-always rule (the gate at level 1.01) far below; false positives at most
    5 % + 3 MC SEs."""
    s = G.AccuracyScenario(delta=0.015)
    clean = G.accuracy_rates(s, 250, seed=5)["reject"].rate
    err = G.accuracy_rates(s.with_(errors="both_indep"), 250, seed=6)["reject"].rate
    rng = np.random.default_rng(6)
    always = 0
    for _ in range(60):
        e = G.accuracy_experiment(s.with_(errors="both_indep"), rng)
        r = TS.error_robust_test(e.a, e.b, lambda a, b, aa=e.aa: launch_aware_test(a, b, aa), alpha_gate=1.01)
        always += r.direction == 1
    print(f"power: clean {clean:.3f}, 1 % errors {err:.3f}, bound-always rule {always / 60:.3f}")
    assert clean - err <= 0.10 + 3 * math.sqrt(2 * 0.2 * 0.8 / 250)
    assert always / 60 < 0.45
    null = G.accuracy_rates(s.with_(delta=0.0, errors="both_indep"), 250, seed=7)
    assert null["reject"].rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 250)


def test_helpers_match_analysis():
    from harness.stats import accuracy as AN
    rng = np.random.default_rng(8)
    s = (rng.random((3, 40)) < 0.7).astype(float)
    s[:, :3] = np.nan
    s[0, 5] = np.nan
    arm = ArmRuns(s, ("x", "y", "z"))
    assert np.array_equal(EG.unanswered(arm), AN.unanswered(arm))
    for v in (0.0, 1.0):
        assert np.array_equal(EG.impute_unanswered(arm, v).scores, AN.impute_unanswered(arm, v).scores, equal_nan=True)
