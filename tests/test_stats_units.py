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
    assert r["ci_90"][0] > -0.01 and r["ci_90"][1] < 0.01
    r = S.tost(delta=-0.008, se=0.004, margin=0.01)
    assert not r["noninferior"] and not r["equivalent"]
    r = S.tost(delta=0.03, se=0.004, margin=0.01)
    assert r["noninferior"] and not r["equivalent"]
    assert S.tost(np.zeros(50), 0.01)["equivalent"]          # identical arms, SE 0
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
