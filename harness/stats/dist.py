"""The binomial, chi-square and Student t distributions from ``scipy.special``'s ufuncs: ``scipy.stats`` gives
the same numbers but costs about a second to import in every ``abh`` command that compares.
"""

from __future__ import annotations

import numpy as np
from scipy.special import bdtr, bdtrc, chdtrc, gammaln, stdtr, stdtrit, xlog1py, xlogy

ArrayLike = np.ndarray | float | int


def binom_pmf(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """P(X = k) for X ~ Binomial(n, p); 0 off the support 0..n (``scipy.stats.binom.pmf``)."""
    k, n, p = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float),
                                  np.asarray(p, dtype=float))
    inside = (k >= 0) & (k <= n) & (k == np.floor(k))
    ks = np.where(inside, k, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = (gammaln(n + 1) - gammaln(ks + 1) - gammaln(n - ks + 1)
                   + xlogy(ks, p) + xlog1py(n - ks, -p))
    return np.where(inside, np.exp(log_pmf), 0.0)[()]


def _binom_tail(ufunc: np.ufunc, k: ArrayLike, n: ArrayLike, p: ArrayLike, below: float, above: float) -> np.ndarray:
    """``ufunc`` (bdtr or bdtrc) at floor(k) inside 0 <= k < n, ``below`` for k < 0, ``above`` for k >= n."""
    k, n, p = np.broadcast_arrays(np.floor(np.asarray(k, dtype=float)), np.asarray(n, dtype=float),
                                  np.asarray(p, dtype=float))
    inside = (k >= 0) & (k < n)
    with np.errstate(invalid="ignore"):
        mid = ufunc(np.where(inside, k, 0.0), np.where(inside, n, 1.0).astype(np.int64), p)
    return np.where(k < 0, below, np.where(k >= n, above, mid))[()]


def binom_cdf(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """P(X <= k) for X ~ Binomial(n, p): 0 below 0, 1 from n on (``scipy.stats.binom.cdf``)."""
    return _binom_tail(bdtr, k, n, p, below=0.0, above=1.0)


def binom_sf(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """P(X > k) for X ~ Binomial(n, p): 1 below 0, 0 from n on (``scipy.stats.binom.sf``)."""
    return _binom_tail(bdtrc, k, n, p, below=1.0, above=0.0)


def chi2_sf(x: ArrayLike, df: ArrayLike) -> np.ndarray:
    """P(X > x) for X ~ chi-square with ``df`` degrees of freedom (``scipy.stats.chi2.sf``)."""
    x = np.asarray(x, dtype=float)
    return np.where(x <= 0, 1.0, chdtrc(df, np.maximum(x, 0.0)))[()]


def t_cdf(x: ArrayLike, df: ArrayLike) -> np.ndarray:
    """P(T <= x) for Student's t with ``df`` degrees of freedom (``scipy.stats.t.cdf``)."""
    return np.asarray(stdtr(df, x))[()]


def t_sf(x: ArrayLike, df: ArrayLike) -> np.ndarray:
    """P(T > x) for Student's t (``scipy.stats.t.sf``); the t distribution is symmetric."""
    return np.asarray(stdtr(df, -np.asarray(x, dtype=float)))[()]


def t_ppf(q: ArrayLike, df: ArrayLike) -> np.ndarray:
    """The q-quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``)."""
    q = np.asarray(q, dtype=float)
    return np.where(q == 0, -np.inf, stdtrit(df, q))[()]  # stdtrit gives +inf at 0
