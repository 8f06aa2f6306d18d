"""The no-op proof's bound: the exact one-sided Clopper-Pearson upper bound, against scipy.stats and by
simulation (numpy's binomial generator, not the project's simulator)."""

import numpy as np
import pytest
from scipy import stats as sps

from harness.stats.proportions import upper_bound


def test_zero_of_1319_is_0_23_percent():
    b = upper_bound(0, 1319, 0.05)
    assert b == pytest.approx(1 - 0.05 ** (1 / 1319), rel=1e-12)
    assert round(100 * b, 2) == 0.23


@pytest.mark.parametrize("k,n,alpha", [(0, 8, 0.05), (1, 8, 0.05), (3, 100, 0.05), (0, 1319, 0.01),
                                       (7, 1319, 0.05), (12, 50, 0.1)])
def test_matches_scipy_beta_and_binomtest(k, n, alpha):
    b = upper_bound(k, n, alpha)
    assert b == pytest.approx(sps.beta.ppf(1 - alpha, k + 1, n - k), rel=1e-10)
    # binomtest's one-sided ("less") exact interval is the same bound
    ci = sps.binomtest(k, n, alternative="less").proportion_ci(confidence_level=1 - alpha, method="exact")
    assert b == pytest.approx(ci.high, rel=1e-10)
    # at the bound, k or fewer events are exactly alpha likely
    assert sps.binom.cdf(k, n, b) == pytest.approx(alpha, rel=1e-8)


def test_all_events_and_bad_input():
    assert upper_bound(5, 5) == 1.0
    for k, n, a in ((1, 0, 0.05), (-1, 5, 0.05), (6, 5, 0.05), (0, 5, 0.0), (0, 5, 1.0)):
        with pytest.raises(ValueError):
            upper_bound(k, n, a)


def test_coverage_by_simulation():
    """The bound covers the true rate in at least 1 - alpha of repeated experiments (exact: conservative)."""
    rng = np.random.default_rng(37)
    for p, n in ((0.002, 1319), (0.05, 40), (0.2, 10)):
        ks = rng.binomial(n, p, size=4000)
        covered = np.mean([p <= upper_bound(int(k), n, 0.05) for k in ks])
        assert covered >= 0.95 - 3 * np.sqrt(0.95 * 0.05 / 4000)
