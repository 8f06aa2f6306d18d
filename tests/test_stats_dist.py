"""harness.stats.dist against scipy.stats (the reference it replaces to keep scipy.stats' import off every
`abh` command), over the supports and off them, and the sign-flip null's FFT convolution against numpy's
direct one."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from harness.stats import dist
from harness.stats.signflip import _convolve, null_distribution


@pytest.mark.parametrize("p", [0.0, 0.02, 0.5, 0.93, 1.0])
def test_binomial_matches_scipy_on_and_off_the_support(p):
    n = np.array([0, 1, 2, 7, 40, 400, 1319])[:, None]
    k = np.arange(-2, 1322)[None, :]
    np.testing.assert_allclose(dist.binom_pmf(k, n, p), stats.binom.pmf(k, n, p), rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(dist.binom_cdf(k, n, p), stats.binom.cdf(k, n, p), rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(dist.binom_sf(k, n, p), stats.binom.sf(k, n, p), rtol=1e-9, atol=1e-300)


def test_binomial_pmf_sums_to_one_and_takes_non_integers_as_off_support():
    n = 1319
    assert dist.binom_pmf(np.arange(n + 1), n, 0.37).sum() == pytest.approx(1.0, abs=1e-12)
    assert float(dist.binom_pmf(2.5, 5, 0.5)) == 0.0 == float(stats.binom.pmf(2.5, 5, 0.5))
    # the CDF and SF floor a non-integer k, as scipy.stats does
    assert float(dist.binom_cdf(2.5, 5, 0.5)) == pytest.approx(float(stats.binom.cdf(2.5, 5, 0.5)))
    assert float(dist.binom_sf(2.5, 5, 0.5)) == pytest.approx(float(stats.binom.sf(2.5, 5, 0.5)))


def test_chi_square_and_t_match_scipy():
    x = np.array([-1.0, 0.0, 1e-9, 0.3, 1.0, 3.84, 10.0, 60.0])
    for df in (1, 2, 5, 11):
        np.testing.assert_allclose(dist.chi2_sf(x, df), stats.chi2.sf(x, df), rtol=1e-10)
    t = np.array([-40.0, -3.0, -0.5, 0.0, 0.7, 2.0, 9.0])
    q = np.array([1e-6, 0.025, 0.2, 0.5, 0.8, 0.975, 0.999999])
    for df in (1, 2.5, 4, 30, 1e4):
        np.testing.assert_allclose(dist.t_cdf(t, df), stats.t.cdf(t, df), rtol=1e-10)
        np.testing.assert_allclose(dist.t_sf(t, df), stats.t.sf(t, df), rtol=1e-10)
        np.testing.assert_allclose(dist.t_ppf(q, df), stats.t.ppf(q, df), rtol=1e-9)


def test_scalars_in_give_numpy_scalars_out_and_the_quantile_ends():
    """As scipy.stats: a scalar result is a numpy scalar (json-able via float, usable as a bool), not a 0-d array."""
    for v in (dist.binom_pmf(3, 10, 0.5), dist.binom_cdf(3, 10, 0.5), dist.binom_sf(3, 10, 0.5),
              dist.chi2_sf(2.0, 1), dist.t_cdf(1.0, 5), dist.t_sf(1.0, 5), dist.t_ppf(0.9, 5)):
        assert isinstance(v, np.floating), type(v)
    assert dist.t_ppf(0.0, 5) == stats.t.ppf(0.0, 5) == -np.inf
    assert dist.t_ppf(1.0, 5) == stats.t.ppf(1.0, 5) == np.inf
    np.testing.assert_array_equal(dist.t_ppf(np.array([0.0, 1.0]), 3), [-np.inf, np.inf])


def test_fft_convolution_matches_the_direct_one():
    rng = np.random.default_rng(3)
    for na, nb in ((3, 5), (300, 400), (2000, 700)):  # below and above the FFT switch
        a, b = rng.random(na), rng.random(nb)
        np.testing.assert_allclose(_convolve(a, b), np.convolve(a, b), rtol=1e-9, atol=1e-9)
    # a null distribution big enough to go through the FFT: a valid pmf, symmetric, of the right support
    x = np.concatenate([np.full(300, 6), np.full(250, 5), np.arange(1, 40)])
    pmf, offset = null_distribution(x)
    assert pmf.size == 2 * offset + 1 and pmf.min() >= 0 and pmf.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(pmf, pmf[::-1], atol=1e-12)


def test_the_statistics_do_not_import_scipy_stats():
    """The point of this module: `abh run`, `abh compare` and the report pay for scipy.special, not scipy.stats
    (nor scipy.optimize: harness.stats.roots)."""
    code = ("import sys, harness.stats, harness.analysis.comparison, harness.cli.run; "
            "print(sorted(m for m in sys.modules if m.startswith(('scipy.stats', 'scipy.signal', 'scipy.optimize'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
