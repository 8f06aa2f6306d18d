"""Unit behaviour of harness.stats: verdict rules, TOST, edge cases, bounded memory."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from harness import stats as S


def test_verdict_rules():
    d = {"alpha": 0.05, "mde": 0.011}
    assert S.decide(delta=0.02, p_value=0.001, **d).word == "improved"
    assert S.decide(delta=-0.02, p_value=0.001, **d).word == "regressed"
    v = S.decide(delta=0.003, p_value=0.54, **d)
    assert v.word == "inconclusive" and "1.10 pp" in v.reason
    assert S.decide(delta=0.003, p_value=0.54, margin=0.02, equivalence_p=0.01, **d).word == "equivalent"
    v = S.decide(delta=0.003, p_value=0.54, margin=0.002, equivalence_p=0.3, **d)
    assert v.word == "inconclusive" and "±0.20 pp" in v.reason
    # a declared practical effect is needed on top of significance
    assert S.decide(delta=0.005, p_value=0.001, min_effect=0.01, **d).word == "inconclusive"
    assert S.decide(delta=0.015, p_value=0.001, min_effect=0.01, **d).word == "improved"
    # not comparable beats everything
    v = S.decide(delta=0.05, p_value=1e-9, failures=["side check of arm B failed"], **d)
    assert v.word == "not_comparable" and "side check" in v.reason
    v = S.decide(delta=0.05, p_value=1e-9, error_rate=0.03, max_error_rate=0.02, **d)
    assert v.word == "not_comparable" and "3.00 %" in v.reason
    assert set(S.VERDICTS) == {"improved", "regressed", "equivalent", "inconclusive", "not_comparable"}


def test_tost_cases():
    r = S.tost(delta=0.001, se=0.002, margin=0.01)
    assert r["equivalent"] and r["noninferior"]
    assert r["ci"][0] > -0.01 and r["ci"][1] < 0.01 and r["ci_level"] == pytest.approx(0.9)
    r = S.tost(delta=-0.008, se=0.004, margin=0.01)
    assert not r["noninferior"] and not r["equivalent"]
    r = S.tost(delta=0.03, se=0.004, margin=0.01)
    assert r["noninferior"] and not r["equivalent"]
    # identical arms, SE 0: a zero-width interval shows nothing
    r = S.tost(np.zeros(50), 0.01)
    assert r["degenerate"] and not r["equivalent"] and not r["noninferior"]
    assert r["p_equivalence"] == 1.0 and r["p_noninferiority"] == 1.0
    with pytest.raises(ValueError):
        S.tost(delta=0.0, se=0.01, margin=0)


def test_mcnemar_edge_cases():
    assert float(S.mcnemar_exact(0, 0)) == 1.0
    assert float(S.mcnemar_midp(0, 0)) == 1.0
    assert float(S.mcnemar_asymptotic(0, 0)) == 1.0
    assert float(S.mcnemar_exact(5, 5)) == 1.0 and float(S.mcnemar_midp(5, 5)) == pytest.approx(1.0)
    assert float(S.mcnemar_exact(0, 6)) == pytest.approx(2 / 64)


def test_permutation_and_aa_edge_cases():
    a = np.ones((2, 10))
    r = S.permutation_test(a, a, n_permutations=100, seed=0)
    assert r["p_value"] == 1.0 and r["n_mixed"] == 0
    with pytest.raises(ValueError):
        S.permutation_test(np.full((1, 5), 0.5), np.ones((1, 5)))
    assert S.psi_aa(np.ones((1, 10)), np.zeros((1, 10))) is None
    assert S.psi_aa(np.array([[1, 1, 0, 0], [1, 0, 0, 1]])) == 0.5
    x = np.array([1.0, np.nan, 0.0])
    assert S.discordance(x, np.array([0.0, 1.0, 0.0])) == 0.5
    assert S.noise_band(0.02, 1319) == pytest.approx(1.96 * np.sqrt(0.02 / 1319), rel=1e-4)
    assert S.effective_repeats(1, 3) == 1.5


def test_bootstrap_memory_is_bounded_by_chunking():
    x = np.random.default_rng(0).integers(0, 6, 1319) / 5
    tracemalloc.start()
    S.bootstrap_means(x, 100_000, seed=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # 100k means (0.8 MB) + one chunk of ~1M indices and values; an unchunked draw would need > 1 GB
    assert peak < 40 * 2**20


def test_wilson_degenerate():
    lo, hi = S.wilson_interval(0, 0)
    assert (float(lo), float(hi)) == (0.0, 1.0)
    lo, hi = S.wilson_interval(10, 10)
    assert float(hi) == 1.0 and 0.6 < float(lo) < 0.8


def test_mde_floor_matches_the_exact_mcnemar_test():
    from scipy.stats import binomtest

    from harness.stats import mde_floor, min_detectable_discordant

    for alpha in (0.05, 0.01, 0.1, 0.0625):
        k = min_detectable_discordant(alpha)
        assert binomtest(k, k, 0.5).pvalue < alpha <= binomtest(k - 1, k - 1, 0.5).pvalue
    assert mde_floor(20, 0.05) == 6 / 20


def test_score_tost_never_claims_equivalence_from_zero_discordance_on_few_questions():
    # 20 questions answered identically by both arms: the paired SE is 0, the score interval is not
    r = S.score_tost(13, 0, 0, 7, margin=0.005)
    assert r["se"] == 0 and not r["degenerate"]
    assert r["ci"][0] < -0.05 and r["ci"][1] > 0.05
    assert not r["equivalent"] and not r["noninferior"] and r["p_equivalence"] > 0.05
    # enough questions with no discordance do show equivalence
    assert S.score_tost(130, 0, 0, 70, margin=0.02)["equivalent"]
    # the seed's worked example, margin 2 pp
    r = S.score_tost(1237, 10, 14, 58, margin=0.02)
    assert r["equivalent"] and -0.02 < r["ci"][0] < 0 < r["ci"][1] < 0.02
    lo, hi = S.newcombe_paired_ci(1237, 10, 14, 58, alpha=0.10)
    assert r["ci"] == [pytest.approx(float(lo)), pytest.approx(float(hi))]
    with pytest.raises(ValueError):
        S.score_tost(1, 0, 0, 1, margin=0)


def test_score_tost_p_values_agree_with_the_interval():
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(5, 500))
        t = [int(x) for x in rng.multinomial(n, rng.dirichlet([3, 0.5, 0.5, 1]))]
        margin = float(rng.uniform(0.002, 0.2))
        alpha = float(rng.choice([0.01, 0.05, 0.1]))
        r = S.score_tost(*t, margin=margin, alpha=alpha)
        assert (r["p_noninferiority"] < alpha) == r["noninferior"] == (r["ci"][0] > -margin)
        assert (r["p_equivalence"] < alpha) == r["equivalent"]
        assert 0 < r["p_noninferiority"] < 1 and 0 < r["p_nonsuperiority"] < 1
    # mirror image: swapping the arms swaps the one-sided p-values
    r, m = S.score_tost(50, 3, 7, 40, 0.05), S.score_tost(50, 7, 3, 40, 0.05)
    assert r["p_noninferiority"] == pytest.approx(m["p_nonsuperiority"])


def test_verdict_refuses_equivalence_on_a_zero_width_interval():
    kw = {"delta": 0.0, "p_value": 1.0, "margin": 0.005, "equivalence_p": 0.0}
    assert S.decide(**kw).word == "equivalent"      # bare p-value: trusted (callers give the interval)
    v = S.decide(**kw, equivalence_ci=(0.0, 0.0))
    assert v.word == "inconclusive" and "[+0.00, +0.00] pp" in v.reason
    v = S.decide(**{**kw, "equivalence_p": 0.01}, equivalence_ci=(-0.004, 0.003), equivalence_method="Newcombe")
    assert v.word == "equivalent" and "90 % Newcombe interval [-0.40, +0.30] pp" in v.reason


def test_p_value_at_permutation_floor_is_a_bound():
    floor = 1 / 10_001
    assert S.format_p(floor, floor) == "p < 0.0001"
    assert S.format_p(0.5413, floor) == "p = 0.541"
    assert S.format_p(floor) == "p = 0.0001"
    assert S.format_p(0.0) == "p < 1e-300"
    v = S.decide(delta=0.1, p_value=floor, p_floor=floor)
    assert v.word == "improved" and "p < 0.0001" in v.reason and "p = " not in v.reason
    v = S.decide(delta=0.001, p_value=floor, min_effect=0.01, p_floor=floor)
    assert "(p < 0.0001)" in v.reason


def test_unused_paired_z_pvalue_is_gone():
    import harness.stats.paired as P

    assert not hasattr(S, "paired_z_pvalue") and not hasattr(P, "paired_z_pvalue")
    assert "paired_z_pvalue" not in S.__all__
