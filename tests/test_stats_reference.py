"""Cross-checks of harness.stats against independent references on many random tables."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import textbook_stats as TS
from scipy.stats import binomtest, bootstrap
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from harness import stats as S
from harness.stats import tango
from harness.stats.equivalence import t_tost
from harness.stats.launches import heterogeneity_q
from harness.stats.mde import mde_paired_exact, mde_t, power_paired_exact
from harness.stats.multiple import benjamini_hochberg, holm
from harness.stats.resample import bca_interval, bootstrap_means, jackknife_means
from harness.stats.tango import effective_table, score_interval, score_p, score_z


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
        ours = TS.mcnemar_asymptotic(t[:, 1], t[:, 2], correction=corr)
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


@pytest.mark.parametrize("holm_cases", [10, pytest.param(40, marks=pytest.mark.slow)])
def test_holm_and_bh_match_statsmodels(holm_cases: int):
    rng = np.random.default_rng(4)
    for it in range(200):
        m = int(rng.integers(1, 30))
        p = rng.uniform(0, 1, m) ** rng.uniform(0.5, 4)
        if m > 3:
            p[1] = p[0]  # ties
        if it < holm_cases:  # statsmodels' holm is slow (~50 ms a call): 10 cases in the default run, 40 slow
            np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1], atol=1e-12)
        np.testing.assert_allclose(benjamini_hochberg(p), multipletests(p, method="fdr_bh")[1], atol=1e-12)
        np.testing.assert_allclose(S.adjust(p, "bh"), benjamini_hochberg(p))


def test_two_proportion_z_matches_statsmodels():
    from statsmodels.stats.proportion import proportions_ztest
    rng = np.random.default_rng(5)
    for _ in range(100):
        n = rng.integers(20, 2000, 2)
        k = rng.binomial(n, rng.uniform(0.05, 0.95))
        ours = float(TS.two_proportion_z_test(k[0], n[0], k[1], n[1]))
        ref = proportions_ztest(k[::-1], n[::-1])[1]
        assert ours == pytest.approx(ref, rel=1e-9)


@pytest.mark.parametrize("case", [0, 1, *(pytest.param(c, marks=pytest.mark.slow) for c in range(2, 6))])
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
    theta_b = bootstrap_means(x, 5000, seed=1)
    ours = bca_interval(theta_b, float(x.mean()), jackknife_means(x), alpha=0.1)
    kw = {"xp": np} if "xp" in inspect.signature(_resampling._bca_interval).parameters else {}
    alphas = _resampling._bca_interval((x,), lambda v, axis=-1: v.mean(axis), axis=-1, alpha=0.05,
                                       theta_hat_b=theta_b, batch=None, **kw)[:2]
    ref = np.percentile(theta_b, [100 * alphas[0], 100 * alphas[1]])
    np.testing.assert_allclose(ours, ref, rtol=1e-9)


def test_bootstrap_is_seeded_and_chunking_invariant_in_distribution():
    x = np.random.default_rng(0).integers(0, 2, 300).astype(float)
    a = bootstrap_means(x, 3000, seed=5)
    b = bootstrap_means(x, 3000, seed=5)
    np.testing.assert_array_equal(a, b)
    c = bootstrap_means(x, 3000, seed=5, max_elems=1000)   # many small chunks
    assert c.shape == a.shape
    assert abs(c.std() - a.std()) < 0.1 * a.std()
    two = bootstrap_means(np.column_stack([x, 1 - x]), 500, seed=1)
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
    lo, hi = TS.newcombe_paired_ci(t[:, 0], t[:, 1], t[:, 2], t[:, 3])
    for (both, a_only, b_only, neither), l_, h_ in zip(t, lo, hi, strict=True):
        # variable 1 = arm B (right = row 1), variable 2 = arm A
        rl, rh = _newcombe_scalar(both, b_only, a_only, neither)
        assert l_ == pytest.approx(max(rl, -1), abs=1e-12)
        assert h_ == pytest.approx(min(rh, 1), abs=1e-12)


# ------------------------------------------------------------------------------ sign-flip test
def test_signflip_on_one_run_per_arm_is_the_mcnemar_test():
    rng = np.random.default_rng(11)
    for both, b, c, neither in random_tables(rng, 150):
        d = np.r_[np.zeros(both + neither), -np.ones(b), np.ones(c)]
        mid = S.signflip_test(d)
        exact = S.signflip_test(d, mid_p=False)
        assert mid.exact and mid.p_floor is None
        assert mid.p == pytest.approx(float(S.mcnemar_midp(b, c)), rel=1e-9, abs=1e-12)
        ref = binomtest(int(c), int(b + c), 0.5).pvalue if b + c else 1.0
        assert exact.p == pytest.approx(ref, rel=1e-9, abs=1e-12)


def _brute_signflip(d: np.ndarray, mid_p: bool) -> float:
    """All 2^k sign patterns of the non-zero differences (independent of the lattice convolution)."""
    from itertools import product

    x = d[d != 0]
    t = abs(x.sum())
    sums = np.array([np.dot(s, np.abs(x)) for s in product((-1, 1), repeat=x.size)])
    more, equal = np.mean(sums > t + 1e-9), np.mean(np.abs(sums - t) <= 1e-9)
    return min(1.0, 2 * (more + (0.5 if mid_p else 1.0) * equal))


def test_signflip_exact_distribution_matches_enumeration():
    rng = np.random.default_rng(12)
    for _ in range(40):
        k = int(rng.integers(1, 13))
        ra, rb = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        d = rng.integers(0, rb + 1, k) / rb - rng.integers(0, ra + 1, k) / ra     # differences of run means
        d = np.r_[d, np.zeros(5)]
        for mid in (True, False):
            r = S.signflip_test(d, mid_p=mid)
            assert r.exact
            assert r.p == pytest.approx(_brute_signflip(d, mid), abs=1e-10)


def test_signflip_monte_carlo_fallback_matches_enumeration():
    d = np.array([np.sqrt(2) / 3, np.pi / 10, -0.1234567, np.e / 7, 0.3, 0.5, np.sqrt(3) / 5, 0.11, 0.21])
    r = S.signflip_test(d, n_resamples=200_000, seed=1)
    assert not r.exact and r.p_floor == pytest.approx(2 / 200_001)
    assert r.p == pytest.approx(_brute_signflip(d, True), abs=0.004)


# ------------------------------------------------------------------------------ Tango score test / interval
def test_tango_restricted_mle_matches_numerical_maximisation():
    from scipy.optimize import minimize_scalar

    rng = np.random.default_rng(13)
    for _ in range(100):
        n = int(rng.integers(10, 2000))
        b, c = (int(x) for x in rng.multinomial(n, [0.05, 0.07, 0.88])[:2])
        if b == 0:
            b = 1
        d0 = float(rng.uniform(-0.3, 0.3))
        lo, hi = max(0.0, -d0) + 1e-12, (1 - d0) / 2 - 1e-12

        def nll(q: float, b: int = b, c: int = c, n: int = n, d0: float = d0) -> float:
            return -(b * np.log(q) + c * np.log(q + d0) + (n - b - c) * np.log(1 - 2 * q - d0))

        ref = minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-13}).x
        assert float(tango.restricted_q(b, c, n, d0)) == pytest.approx(ref, rel=1e-5, abs=1e-9)


def test_tango_at_zero_is_mcnemar_and_interval_inverts_the_test():
    from scipy.special import ndtri

    rng = np.random.default_rng(14)
    for both, b, c, neither in random_tables(rng, 120):
        n = both + b + c + neither
        if b + c:
            z = float(score_z(b, c, n, 0.0))
            sm = mcnemar(np.array([[both, b], [c, neither]]), exact=False, correction=False).statistic
            assert z**2 == pytest.approx(sm, rel=1e-9)
        lo, hi = (float(x) for x in score_interval(b, c, n, 0.05))
        assert lo <= (c - b) / n <= hi
        for bound in (lo, hi):
            if -1 < bound < 1:
                assert float(score_p(b, c, n, bound)) == pytest.approx(0.05, abs=1e-6)
    # closed form with no discordant pair: ±z²/(n + z²)
    z2 = float(ndtri(0.975)) ** 2
    lo, hi = score_interval(0, 0, 1319)
    assert float(hi) == pytest.approx(z2 / (1319 + z2), rel=1e-9) and float(lo) == pytest.approx(-float(hi))


def test_effective_table_of_one_run_is_the_table_and_deff_matches_the_variance():
    d = np.r_[np.zeros(100), -np.ones(7), np.ones(12)]
    t = effective_table(d)
    assert (t["b"], t["c"], t["n"], t["deff"]) == (pytest.approx(7), pytest.approx(12), pytest.approx(119), pytest.approx(1))
    rng = np.random.default_rng(15)
    d = (rng.integers(0, 4, 500) - rng.integers(0, 4, 500)) / 3
    t = effective_table(d)
    # the effective table's binomial variance of Δ equals the sample variance of the mean of d
    var_tab = (t["b"] + t["c"] - (t["c"] - t["b"]) ** 2 / t["n"]) / t["n"] ** 2
    assert var_tab == pytest.approx(np.var(d) / d.size, rel=1e-9)
    assert (t["c"] - t["b"]) / t["n"] == pytest.approx(d.mean())


# ------------------------------------------------------------------------------ launches, power, t forms
def test_cochrans_q_matches_statsmodels():
    from statsmodels.stats.contingency_tables import cochrans_q

    rng = np.random.default_rng(16)
    for _ in range(30):
        L, n = int(rng.integers(2, 6)), int(rng.integers(20, 400))
        p = rng.uniform(0.2, 0.9, n)
        y = (rng.random((L, n)) < p + rng.normal(0, 0.05, (L, 1))).astype(float)
        q, df, used = heterogeneity_q(y)
        ref = cochrans_q(y.T)
        assert q == pytest.approx(ref.statistic, rel=1e-9) and df == ref.df and used == n


def _power_by_enumeration(n: int, psi_noise: float, effect: float, alpha: float) -> float:
    """Power of the mid-p McNemar test summed over every (b, c) of the trinomial (independent of the
    conditional-binomial decomposition in power_paired_exact)."""
    from scipy.stats import multinomial

    pb, pc = psi_noise / 2, psi_noise / 2 + effect
    total = 0.0
    for b in range(n + 1):
        c = np.arange(n - b + 1)
        probs = multinomial.pmf(np.c_[np.full(c.size, b), c, n - b - c], n, [pb, pc, 1 - pb - pc])
        total += float(np.sum(probs * (S.mcnemar_midp(b, c) < alpha)))
    return total


def test_exact_power_matches_trinomial_enumeration_and_simulation():
    for n, psi, eff in ((60, 0.1, 0.08), (120, 0.03, 0.05), (200, 0.0, 0.04)):
        assert power_paired_exact(n, psi, eff) == pytest.approx(_power_by_enumeration(n, psi, eff, 0.05), abs=1e-9)
    n, psi = 1319, 0.02
    mde = mde_paired_exact(n, psi)
    assert power_paired_exact(n, psi, mde) == pytest.approx(0.8, abs=2e-4)
    rng = np.random.default_rng(17)
    t = rng.multinomial(n, [psi / 2, psi / 2 + mde, 1 - psi - mde], size=20000)
    sim = np.mean(S.mcnemar_midp(t[:, 0], t[:, 1]) < 0.05)
    assert sim == pytest.approx(0.8, abs=0.012)
    # the normal formula's MDE at a total discordance of 2 %: the exact test has 76.6 % power there (the
    # issue's figure), which is why the MDE is computed for the test used
    d = S.mde_paired(n, 0.02)
    assert power_paired_exact(n, 0.02 - d, d, mid_p=False) == pytest.approx(0.766, abs=0.002)


def test_mde_t_and_t_tost_match_statsmodels():
    from statsmodels.stats.power import TTestPower
    from statsmodels.stats.weightstats import ttost_paired

    for nobs in (10, 30, 200):
        es = TTestPower().solve_power(effect_size=None, nobs=nobs, alpha=0.05, power=0.8)
        assert mde_t(1 / np.sqrt(nobs), nobs - 1) == pytest.approx(es, rel=0.03)
    rng = np.random.default_rng(18)
    for _ in range(20):
        x = rng.normal(rng.uniform(-0.01, 0.01), 0.01, int(rng.integers(5, 40)))
        se = x.std(ddof=1) / np.sqrt(x.size)
        r = t_tost(float(x.mean()), float(se), x.size - 1, margin=0.01)
        p_ref = ttost_paired(x, np.zeros(x.size), -0.01, 0.01)[0]
        assert r.p_equivalence == pytest.approx(p_ref, rel=1e-9)


def test_compare_arms_launch_test_matches_scipy_student_t_over_launches():
    """The comparison's test (compare_arms, launch-aware) is Welch's t on launch accuracies
    (scipy.stats.ttest_ind, unequal variances: each arm's launch variance from its own launches) whenever the
    launch terms carry all of Var(Δ̂) (no question x arm interaction is estimated): same p, df and interval.
    (It was the pooled-variance t before B's launch variance came from B's launches.)"""
    from scipy.stats import t as t_dist
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(19)
    checked = 0
    for _ in range(30):
        accs: list[list[np.ndarray]] = [[], []]
        for arm, la in ((0, 3), (1, 4)):
            for _ in range(la):
                accs[arm].append(rng.random(500) < rng.uniform(0.8, 0.9))
        A = S.ArmRuns(np.array(accs[0], float), ("a1", "a2", "a3"))
        B = S.ArmRuns(np.array(accs[1], float), ("b1", "b2", "b3", "b4"))
        r = S.compare_arms(A, B, compute_mde=False).analysis
        assert r.unit == "launch-aware" and r.launch is not None and r.launch.df_launch == 5
        if r.launch.var_heterogeneity > 0:
            continue
        ref = ttest_ind(B.scores.mean(axis=1), A.scores.mean(axis=1), equal_var=False)
        c = r.launch.components
        assert c is not None
        floors = [e / 500 for e in c.ms_resid_by_group]
        va, vb = np.var(A.scores.mean(axis=1), ddof=1), np.var(B.scores.mean(axis=1), ddof=1)
        if ref.df < 2 or va < floors[0] or vb < floors[1]:
            continue   # the df's floors (one arm's df; each launch term at its within-launch noise) apply
        # beyond 4x its noise a launch variance enters the df at its upper 95 % limit (launchvar.df_weight):
        # Welch's df where neither is, else Satterthwaite's on those terms
        from scipy.stats import chi2
        wa, wb = ((v + (df / chi2.ppf(0.05, df) - 1) * max(v - 4 * f, 0)) / L
                  for v, f, df, L in ((va, floors[0], 2, 3), (vb, floors[1], 3, 4)))
        df = min(max((wa + wb) ** 2 / (wa**2 / 2 + wb**2 / 3), 2.0), 5.0)
        if va <= 4 * floors[0] and vb <= 4 * floors[1]:
            assert df == pytest.approx(ref.df, rel=1e-9)
        assert r.df == pytest.approx(df, rel=1e-9)
        assert r.p == pytest.approx(2 * t_dist.sf(abs(ref.statistic), df), rel=1e-9)
        half = t_dist.ppf(0.975, df) * abs(r.delta / ref.statistic)
        assert r.ci == pytest.approx([r.delta - half, r.delta + half], rel=1e-9)
        checked += 1
    assert checked >= 5


def test_score_interval_array_and_scalar_paths_agree():
    rng = np.random.default_rng(20)
    t = random_tables(rng, 200)
    n = t.sum(axis=1)
    lo, hi = score_interval(t[:, 1], t[:, 2], n)
    for i in range(0, 200, 7):
        lo1, hi1 = score_interval(int(t[i, 1]), int(t[i, 2]), int(n[i]))
        assert float(lo1) == pytest.approx(lo[i], abs=1e-12) and float(hi1) == pytest.approx(hi[i], abs=1e-12)
