"""Vectorised bootstrap of a mean over the rows of ``x`` (questions), with percentile and BCa intervals: the
resamples are drawn in chunks as index matrices, so memory stays bounded whatever their number.
"""

from __future__ import annotations

import hashlib

import numpy as np
from scipy.special import ndtr, ndtri

from .verdict import ALPHA

SeedLike = int | np.random.Generator | None


def as_rng(seed: SeedLike) -> np.random.Generator:
    """A numpy Generator from an int seed, an existing Generator (used as is) or None (fresh entropy)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


#: indices drawn per chunk (rows x resamples); ~1M int32 + 1M float64 gathered = ~12 MB peak per chunk
DEFAULT_MAX_ELEMS = 1 << 20


def bootstrap_means(x: np.ndarray, n_resamples: int = 10_000, seed: SeedLike = None,
                    max_elems: int = DEFAULT_MAX_ELEMS) -> np.ndarray:
    """Means of ``n_resamples`` bootstrap resamples of the rows of ``x`` (``(n,)``, or ``(n, k)``: k
    statistics resampled with the same row indices)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
        return _bootstrap_means(x, n_resamples, as_rng(seed), max_elems)
    # a function of (x, resamples, seed): the same resamples asked twice (a paired interval by BCa and by
    # percentile) are drawn once
    key = (hashlib.blake2b(x.tobytes(), digest_size=16).digest(), x.shape, n_resamples, int(seed), max_elems)
    if key not in _DRAWN:
        if len(_DRAWN) >= 4:
            _DRAWN.pop(next(iter(_DRAWN)))
        _DRAWN[key] = _bootstrap_means(x, n_resamples, as_rng(seed), max_elems)
    return _DRAWN[key].copy()


#: the last few results of :func:`bootstrap_means` for an int seed, by (x's bytes, shape, resamples, seed, chunking)
_DRAWN: dict[tuple[bytes, tuple[int, ...], int, int, int], np.ndarray] = {}


#: elements of one gathered block (questions x resamples): the gather is summed while it is still in cache, and
#: its buffers are reused (a fresh few-MB temporary per chunk costs more than the arithmetic on it)
BLOCK_ELEMS = 1 << 16


def _bootstrap_means(x: np.ndarray, n_resamples: int, rng: np.random.Generator, max_elems: int) -> np.ndarray:
    n = x.shape[0]
    k = int(np.prod(x.shape[1:], dtype=int)) if x.ndim > 1 else 1
    # how many resamples are drawn at a time changes no draw (one stream, row after row) and no sum (each
    # resample's own): only the memory and the cost
    chunk = max(1, min(n_resamples, max_elems // n, BLOCK_ELEMS // n))
    out = np.empty((n_resamples, k))
    dtype = np.int32 if n < 2**31 else np.int64
    cols = np.ascontiguousarray(x.reshape(n, k).T)
    sums = _Sums(cols, chunk, pairwise=k == 1)
    for start in range(0, n_resamples, chunk):  # loop over chunks of resamples, not resamples
        m = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n), dtype=dtype)
        if m == 1:  # one resample: numpy's own summation order is the rule
            out[start] = np.take(x, idx, axis=0).mean(axis=1).ravel()
        else:
            sums.means(idx, out[start:start + m])
    return out.reshape((n_resamples,) + x.shape[1:])


class _Sums:
    """Means of each column of ``cols.T`` (``cols``: (k, n)) over the rows that index matrices (m, n) draw,
    with the summation order of the plain gather-and-mean over the (m, n, k) array: a column of one statistic
    (``pairwise``) is summed as numpy sums a contiguous row (pairwise), several statistics question by
    question (the reduced axis is not the last one). A column on a grid (:func:`_on_grid`) is summed as exact
    integers, which is the same in any order; the other columns are gathered together as an (n, m, f) block
    and summed over its first axis (question by question), in buffers allocated once."""

    def __init__(self, cols: np.ndarray, chunk: int, pairwise: bool):
        self.cols, self.n, self.pairwise = cols, cols.shape[1], pairwise
        self.grids = [_on_grid(c) for c in cols]
        self.small = [None if g is None else g[0].astype(np.int8) if np.abs(g[0]).max(initial=0) < 128 else g[0]
                      for g in self.grids]
        # an int32 sum holds n values of at most 2**15 exactly while n < 2**16
        self.acc = np.int32 if self.n < 2**16 else np.int64
        self.floats = [c for c, g in enumerate(self.grids) if g is None]
        self.rows = np.ascontiguousarray(cols[self.floats].T)  # (n, f): a question's float statistics side by side
        self.at = np.empty((self.n, chunk), dtype=np.int64 if self.n >= 2**31 else np.int32)
        self.block = np.empty((self.n, chunk, len(self.floats))) if self.floats and not pairwise else None

    def means(self, idx: np.ndarray, out: np.ndarray) -> None:
        m, n = idx.shape
        for c, (grid, ints) in enumerate(zip(self.grids, self.small, strict=True)):
            if grid is not None and ints is not None:
                out[:, c] = np.add.reduce(ints.take(idx), axis=1, dtype=self.acc) * grid[1] / n
            elif self.pairwise:
                out[:, c] = np.add.reduce(self.cols[c].take(idx), axis=1) / n
        if self.block is not None:
            at, block = self.at[:, :m], self.block[:, :m]
            np.copyto(at, idx.T)
            self.rows.take(at, axis=0, out=block, mode="clip")  # every index is in range: no bounds copy
            out[:, self.floats] = np.add.reduce(block, axis=0) / n


def _on_grid(x: np.ndarray) -> tuple[np.ndarray, float] | None:
    """``x`` as small integers and the power of two they are multiples of (``x = ints * step``), when it is
    one (0/1 outcomes, the means of two runs, their differences), else None.

    On such a grid every partial sum of a resample is exact, whatever the order of the additions: its mean
    (the exact sum over n) is the same bits as the float sum's, and the sum is taken over small integers at
    half the cost. A negative zero keeps the float path (an all-zero resample's sum keeps its sign there)."""
    if x.size == 0 or not np.isfinite(x).all() or np.signbit(x[x == 0]).any():
        return None
    for j in range(9):
        scaled = x * 2.0**j
        if np.abs(scaled).max() >= 2**15:
            return None
        if np.array_equal(scaled, np.round(scaled)):
            return scaled.astype(np.int16).ravel(), 2.0**-j
    return None


def jackknife_means(x: np.ndarray) -> np.ndarray:
    """Leave-one-row-out means of ``x`` (closed form), shape ``(n,)`` or ``(n, k)``."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    if n < 2:
        raise ValueError("jackknife needs at least two rows")
    return (x.sum(axis=0) - x) / (n - 1)


def percentile_interval(theta_b: np.ndarray, alpha: float = ALPHA) -> tuple[float, float]:
    """Equal-tailed (1 - alpha) percentile interval of a bootstrap distribution."""
    lo, hi = np.quantile(theta_b, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def bca_interval(theta_b: np.ndarray, theta_hat: float, jack: np.ndarray,
                 alpha: float = ALPHA) -> tuple[float, float]:
    """Bias-corrected and accelerated (BCa) interval (Efron 1987), as ``scipy.stats.bootstrap`` computes it;
    the percentile interval when the distribution is degenerate."""
    theta_b = np.asarray(theta_b, dtype=float)
    below, below_eq = np.mean(theta_b < theta_hat), np.mean(theta_b <= theta_hat)
    prop = (below + below_eq) / 2
    if not 0 < prop < 1 or np.ptp(theta_b) == 0:
        return percentile_interval(theta_b, alpha)
    z0 = ndtri(prop)
    dev = jack.mean() - jack
    den = 6.0 * np.sum(dev**2) ** 1.5
    acc = float(np.sum(dev**3) / den) if den > 0 else 0.0
    zs = ndtri(np.array([alpha / 2, 1 - alpha / 2]))
    q = ndtr(z0 + (z0 + zs) / (1 - acc * (z0 + zs)))
    lo, hi = np.quantile(theta_b, q)
    return float(lo), float(hi)


def bootstrap_mean_ci(x: np.ndarray, alpha: float = ALPHA, n_resamples: int = 10_000,
                      method: str = "percentile", seed: SeedLike = None,
                      max_elems: int = DEFAULT_MAX_ELEMS) -> tuple[float, float]:
    """(1 - alpha) bootstrap interval for the mean of a 1-D sample (``method``: percentile or bca)."""
    x = np.asarray(x, dtype=float)
    theta_b = bootstrap_means(x, n_resamples, seed, max_elems)
    if method == "percentile":
        return percentile_interval(theta_b, alpha)
    if method == "bca":
        return bca_interval(theta_b, float(x.mean()), jackknife_means(x), alpha)
    raise ValueError(f"unknown bootstrap method {method!r} (percentile or bca)")
