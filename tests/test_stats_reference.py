"""Cross-checks of harness.stats against independent references on many random tables."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest, bootstrap
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from harness import stats as S


def random_tables(rng: np.random.Generator, m: int) -> np.ndarray:
    """m random 2x2 tables (both, a_only, b_only, neither) of varied sizes and discordance."""
    n = rng.integers(5, 2000, m)
    p = rng.dirichlet(np.ones(4) * 0.7, m)
    return np.array([rng.multinomial(k, q) for k, q in zip(n, p, strict=True)])


def test_mcnemar_exact_matches_binomtest_and_statsmodels():
    rng = np.random.default_rng(1)
    t = random_tables(rng, 400)
    ours = S.mcnemar_exact(t[:, 1], t[:, 2])
    ours_mid = S.mcnemar_midp(t[:, 1], t[:, 2])
    for (both, b, c, neither), p, pmid in zip(t, ours, ours_mid, strict=True):
        if b + c == 0:
            assert p == 1.0
            continue
        ref = binomtest(int(c), int(b + c), 0.5).pvalue
        assert p == pytest.approx(ref, rel=1e-9, abs=1e-12)
        sm = mcnemar(np.array([[both, b], [c, neither]]), exact=True).pvalue
        assert p == pytest.approx(sm, rel=1e-9, abs=1e-12)
        # mid-p: 2 * (P(X < k) + P(X = k) / 2), capped at 1
        k, m = min(b, c), b + c
        from scipy.stats import binom
        ref_mid = min(1.0, 2 * (binom.cdf(k - 1, m, 0.5) + 0.5 * binom.pmf(k, m, 0.5)))
        assert pmid == pytest.approx(ref_mid, rel=1e-9, abs=1e-12)
        assert pmid <= p + 1e-12


def test_mcnemar_asymptotic_matches_statsmodels():
    rng = np.random.default_rng(2)
    t = random_tables(rng, 300)
    for corr in (False, True):
        ours = S.mcnemar_asymptotic(t[:, 1], t[:, 2], correction=corr)
        for (both, b, c, neither), p in zip(t, ours, strict=True):
            if b + c == 0:
                continue
            sm = mcnemar(np.array([[both, b], [c, neither]]), exact=False, correction=corr).pvalue
            assert p == pytest.approx(sm, rel=1e-9, abs=1e-12)


def test_wilson_matches_statsmodels():
    rng = np.random.default_rng(3)
    n = rng.integers(1, 3000, 500)
    k = rng.binomial(n, rng.uniform(0, 1, 500))
    k[:20] = 0
    k[20:40] = n[20:40]
    for alpha in (0.05, 0.1, 0.01):
        lo, hi = S.wilson_interval(k, n, alpha)
        rlo, rhi = proportion_confint(k, n, alpha=alpha, method="wilson")
        np.testing.assert_allclose(lo, rlo, atol=1e-12)
        np.testing.assert_allclose(hi, rhi, atol=1e-12)


def test_holm_and_bh_match_statsmodels():
    rng = np.random.default_rng(4)
    for it in range(200):
        m = int(rng.integers(1, 30))
        p = rng.uniform(0, 1, m) ** rng.uniform(0.5, 4)
        if m > 3:
            p[1] = p[0]  # ties
        if it < 40:  # statsmodels' holm is slow (~50 ms a call)
            np.testing.assert_allclose(S.holm(p), multipletests(p, method="holm")[1], atol=1e-12)
        np.testing.assert_allclose(S.benjamini_hochberg(p), multipletests(p, method="fdr_bh")[1], atol=1e-12)
        np.testing.assert_allclose(S.adjust(p, "bh"), S.benjamini_hochberg(p))


def test_two_proportion_z_matches_statsmodels():
    from statsmodels.stats.proportion import proportions_ztest
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = rng.integers(20, 2000, 2)
        k = rng.binomial(n, rng.uniform(0.05, 0.95))
        ours = float(S.two_proportion_z_test(k[0], n[0], k[1], n[1]))
        ref = proportions_ztest(k[::-1], n[::-1])[1]
        assert ours == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("case", range(6))
def test_paired_bootstrap_matches_scipy(case: int):
    """Our chunked paired bootstrap (percentile and BCa) agrees with scipy.stats.bootstrap(paired=True)
    up to Monte-Carlo error, on binary tables and on repeat-mean scores."""
    rng = np.random.default_rng(100 + case)
    n = int(rng.integers(150, 600))
    if case % 2 == 0:   # single run, 0/1 scores
        p = rng.dirichlet([6, 1, 1.5, 2])
        cells = rng.choice(4, size=n, p=p)
        a = np.isin(cells, (0, 1)).astype(float)
        b = np.isin(cells, (0, 2)).astype(float)
    else:               # 5 repeats: per-question means
        q = rng.beta(0.6, 0.4, n)
        a = rng.binomial(5, q) / 5
        b = rng.binomial(5, np.clip(q + 0.03, 0, 1)) / 5
    for method, sm in (("percentile", "percentile"), ("bca", "BCa")):
        ours = S.paired_bootstrap_ci(a, b, method=method, n_resamples=20_000, seed=case)
        ref = bootstrap((a, b), lambda x, y, axis=-1: y.mean(axis) - x.mean(axis), paired=True,
                        vectorized=True, n_resamples=20_000, method=sm, rng=np.random.default_rng(case))
        se = ref.standard_error
        assert ours[0] == pytest.approx(ref.confidence_interval.low, abs=0.25 * se + 1.5 / n)
        assert ours[1] == pytest.approx(ref.confidence_interval.high, abs=0.25 * se + 1.5 / n)


def test_bca_matches_scipy_on_same_resamples():
    """Given the same bootstrap distribution, our BCa endpoints equal scipy's BCa formula (exactly)."""
    import inspect

    from scipy.stats import _resampling

    rng = np.random.default_rng(7)
    x = rng.gamma(1.0, size=80)
    theta_b = S.bootstrap_means(x, 5000, seed=1)
    ours = S.bca_interval(theta_b, float(x.mean()), S.jackknife_means(x), alpha=0.1)
    kw = {"xp": np} if "xp" in inspect.signature(_resampling._bca_interval).parameters else {}
    alphas = _resampling._bca_interval((x,), lambda v, axis=-1: v.mean(axis), axis=-1, alpha=0.05,
                                       theta_hat_b=theta_b, batch=None, **kw)[:2]
    ref = np.percentile(theta_b, [100 * alphas[0], 100 * alphas[1]])
    np.testing.assert_allclose(ours, ref, rtol=1e-9)


def test_bootstrap_is_seeded_and_chunking_invariant_in_distribution():
    x = np.random.default_rng(0).integers(0, 2, 300).astype(float)
    a = S.bootstrap_means(x, 3000, seed=5)
    b = S.bootstrap_means(x, 3000, seed=5)
    np.testing.assert_array_equal(a, b)
    c = S.bootstrap_means(x, 3000, seed=5, max_elems=1000)   # many small chunks
    assert c.shape == a.shape
    assert abs(c.std() - a.std()) < 0.1 * a.std()
    two = S.bootstrap_means(np.column_stack([x, 1 - x]), 500, seed=1)
    np.testing.assert_allclose(two.sum(axis=1), 1.0)


def _newcombe_scalar(n11: int, n12: int, n21: int, n22: int, alpha: float = 0.05) -> tuple[float, float]:
    """Scalar transcription of Fagerland et al.'s Newcombe_square_and_add_CI_paired_2x2 (R package
    contingencytables): Δ = p_1+ - p_+1, rows = variable 1."""
    lo1, hi1 = proportion_confint(n11 + n12, n11 + n12 + n21 + n22, alpha=alpha, method="wilson")
    lo2, hi2 = proportion_confint(n11 + n21, n11 + n12 + n21 + n22, alpha=alpha, method="wilson")
    N = n11 + n12 + n21 + n22
    p1, p2 = (n11 + n12) / N, (n11 + n21) / N
    nip, npi = (n11 + n12, n21 + n22), (n11 + n21, n12 + n22)
    if 0 in nip or 0 in npi:
        psi = 0.0
    else:
        A = n11 * n22 - n12 * n21
        nprod = nip[0] * nip[1] * npi[0] * npi[1]
        psi = (A - N / 2) / nprod**0.5 if A > N / 2 else (0.0 if A >= 0 else A / nprod**0.5)
    L = (p1 - p2) - ((p1 - lo1) ** 2 + (hi2 - p2) ** 2 - 2 * psi * (p1 - lo1) * (hi2 - p2)) ** 0.5
    U = (p1 - p2) + ((p2 - lo2) ** 2 + (hi1 - p1) ** 2 - 2 * psi * (p2 - lo2) * (hi1 - p1)) ** 0.5
    return L, U


def test_newcombe_paired_matches_reference_transcription():
    rng = np.random.default_rng(8)
    t = random_tables(rng, 300)
    t = t[t.sum(axis=1) > 0]
    lo, hi = S.newcombe_paired_ci(t[:, 0], t[:, 1], t[:, 2], t[:, 3])
    for (both, a_only, b_only, neither), l_, h_ in zip(t, lo, hi, strict=True):
        # variable 1 = arm B (right = row 1), variable 2 = arm A
        rl, rh = _newcombe_scalar(both, b_only, a_only, neither)
        assert l_ == pytest.approx(max(rl, -1), abs=1e-12)
        assert h_ == pytest.approx(min(rh, 1), abs=1e-12)
