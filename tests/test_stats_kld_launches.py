"""harness.stats.kld_launches: the launch-level t-test against scipy.stats.ttest_ind, the exact
permutation p against scipy.stats.permutation_test, the planning power against statsmodels, the degenerate
designs, and size when the noise scale varies by launch (independent generator)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import indep_generator as G
from scipy import stats as ss

from harness.stats import kld_launches as DL


def kld(rng: np.random.Generator, m: int, n: int = 30, scale: float = 1.0) -> np.ndarray:
    return scale * rng.gamma(2.0, 1e-3, (m, n)) * np.exp(rng.normal(0, 0.3, (m, 1)))


def test_t_test_matches_scipy_ttest_ind():
    rng = np.random.default_rng(1)
    for ma, mb in ((2, 3), (4, 3), (5, 5), (1, 3), (4, 1)):
        ka, kb = kld(rng, ma), kld(rng, mb, scale=1.3)
        w = rng.integers(3, 20, 30).astype(float)
        r = DL.launch_divergence_test(ka, kb, w, per_question=False)
        la, lb = np.log((ka @ w) / w.sum()), np.log((kb @ w) / w.sum())
        ref = ss.ttest_ind(lb, la, equal_var=True, alternative="greater")
        assert r.t == pytest.approx(ref.statistic, rel=1e-9) and r.p == pytest.approx(ref.pvalue, rel=1e-9)
        assert r.df == ma + mb - 2
        assert r.ratio == pytest.approx(math.exp(lb.mean() - la.mean()))
        assert r.kld_launch_a == pytest.approx(tuple((ka @ w) / w.sum()))


def test_permutation_p_matches_scipy_exact():
    rng = np.random.default_rng(2)
    for ma, mb in ((4, 3), (2, 3), (3, 3)):
        xa, xb = rng.normal(0, 1, ma), rng.normal(0.5, 1, mb)
        p, count = DL.permutation_p(xb, xa)
        ref = ss.permutation_test((xb, xa), lambda x, y: np.mean(x) - np.mean(y), permutation_type="independent",
                                  alternative="greater", n_resamples=np.inf)
        assert count == math.comb(ma + mb, mb) and p == pytest.approx(ref.pvalue, rel=1e-9)


def test_planning_power_matches_statsmodels():
    from statsmodels.stats.power import TTestIndPower

    for ratio, sd, ma, mb in ((1.5, 0.3, 4, 3), (2.0, 0.38, 5, 3), (1.25, 0.1, 3, 3)):
        ref = TTestIndPower().power(effect_size=math.log(ratio) / sd, nobs1=mb, alpha=0.05, ratio=ma / mb,
                                    alternative="larger")
        assert DL.launch_power(ratio, sd, ma, mb) == pytest.approx(ref, rel=1e-6)
    assert DL.launches_needed(2.0, 0.38, 3) is not None
    assert DL.launches_needed(1.01, 0.5, 3, most=8) is None


def test_degenerate_designs():
    rng = np.random.default_rng(3)
    r = DL.launch_divergence_test(kld(rng, 1), kld(rng, 1), n_resamples=199)
    assert r.method == DL.METHOD_QUESTION and r.qualification == DL.QUALIFICATION_ONE_EACH
    assert "noise scale is the same on every launch" in r.qualification and r.per_question is not None
    r = DL.launch_divergence_test(kld(rng, 1), kld(rng, 3), per_question=False)
    assert r.method == DL.METHOD_T and r.qualification == DL.QUALIFICATION_ONE_A and r.df == 2
    assert DL.launch_divergence_test(kld(rng, 4), kld(rng, 1), per_question=False).qualification == DL.QUALIFICATION_ONE_B
    assert DL.launch_divergence_test(kld(rng, 4), kld(rng, 3), per_question=False).qualification is None
    z = np.zeros((3, 10))
    r = DL.launch_divergence_test(z, z, per_question=False)
    assert r.verdict == "indistinguishable" and r.p == 1.0
    r = DL.launch_divergence_test(z, z + 1e-3, per_question=False)
    assert r.verdict == "diverged" and r.p == 0.0
    with pytest.raises(ValueError):
        DL.launch_divergence_test(kld(rng, 2, n=5), kld(rng, 2, n=6))


@pytest.mark.slow  # a simulation of thousands of experiments: the slow suite (.ci/run runs it)
def test_size_when_the_noise_scale_varies_quick():
    """Lognormal noise scale sd 0.3 per launch, the seed default design (A 3 launches, A/A 2, B 3, one pass
    each; reference on A's first launch: m_A = 4, m_B = 3), 200 experiments: the launch-level test at most
    5 % + 3 MC SEs; the per-question test (one A/A launch, one B launch) far above."""
    s = G.DivergenceScenario(scale_sd=0.3)
    r = G.divergence_rates(s, 200, seed=4, designs=((4, 3), (2, 3)))
    print({k: getattr(v, "rate", v) for k, v in r.items()})
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / 200)
    assert r["launch_4_3"].rate <= bound and r["launch_2_3"].rate <= bound  # type: ignore[union-attr]
    assert r["question_1_1"].rate > 0.2  # type: ignore[union-attr]


@pytest.mark.slow  # a simulation of the seed design's passes
def test_the_product_decides_with_the_launch_level_test_quick():
    """compute_divergence on the seed design's passes (in-memory score tables: floor + 3 more A launches, 3 B
    launches) decides exactly as the launch-level test on the same launches, with and without a build shift."""
    for shift, seed in ((0.0, 5), (0.05, 6)):
        s = G.DivergenceScenario(scale_sd=0.3, shift=shift)
        r = G.divergence_rates(s, 20, seed=seed, designs=((4, 3),), product=(4, 3), n_resamples=199)
        assert r["product_4_3"].k == r["launch_4_3"].k  # type: ignore[union-attr]
        assert (r["launch_4_3"].k > 8) == (shift > 0)  # type: ignore[union-attr]
