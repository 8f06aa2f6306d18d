"""Paired sign-flip (randomisation) test over questions: the verdict's test of Δ = mean_i d_i (B - A).

Under H0 each d_i is as likely + as -; questions are the unit, so verbatim repeats add no evidence. The d_i
lie on a lattice, so the distribution is exact by convolution; the p is two-sided and mid-p by default (with
one run per arm the mid-p McNemar test). A lattice too fine falls back to Monte Carlo, with a floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .dist import binom_pmf
from .resample import DEFAULT_MAX_ELEMS, SeedLike, as_rng

#: largest support (2 Σ K|d_i| + 1 points) convolved exactly; finer lattices fall back to Monte Carlo
MAX_SUPPORT = 4_000_000
#: largest denominator tried when putting the d_i on an integer lattice
MAX_DENOMINATOR = 10_000


def lattice_scale(values: np.ndarray) -> int | None:
    """Smallest integer K with K·v integral for every value (to 1e-9), or None when K would exceed
    ``MAX_DENOMINATOR`` (the values are not differences of means of few 0/1 scores)."""
    k = 1
    for v in np.unique(np.round(np.abs(np.asarray(values, dtype=float)), 12)):
        f = Fraction(float(v)).limit_denominator(MAX_DENOMINATOR)
        if abs(float(f) - v) > 1e-9:
            return None
        k = k * f.denominator // math.gcd(k, f.denominator)
        if k > MAX_DENOMINATOR:
            return None
    return k


def _convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Full convolution of two pmfs: direct when small, by FFT when large (what ``scipy.signal.fftconvolve``
    does, without its import cost); FFT round-off can leave tiny negatives, which the caller clips."""
    if a.size * b.size <= 1 << 16:
        return np.convolve(a, b)
    n = a.size + b.size - 1
    nfft = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(a, nfft) * np.fft.rfft(b, nfft), nfft)[:n]


def null_distribution(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Exact distribution of Σ ±x_i for non-negative integers ``x``, (pmf, offset) with pmf[j] = P(T = j -
    offset): each distinct value v with multiplicity c contributes v·(2·Binomial(c, ½) - c)."""
    x = np.asarray(x, dtype=np.int64)
    x = x[x > 0]
    pmf = np.ones(1)
    for v, c in zip(*np.unique(x, return_counts=True), strict=True):
        g = np.zeros(2 * int(v) * int(c) + 1)
        g[:: 2 * int(v)] = binom_pmf(np.arange(c + 1), c, 0.5)
        pmf = _convolve(pmf, g)
    pmf = np.clip(pmf, 0.0, None)
    return pmf / pmf.sum(), int(x.sum())


def _tail_p(pmf: np.ndarray, offset: int, t: int, mid_p: bool) -> float:
    """Two-sided p: twice the one-sided P(T > |t|) + (½ or 1)·P(T = |t|), capped at 1 (the McNemar
    convention: 1 when t = 0)."""
    values = np.arange(pmf.size) - offset
    more, equal = float(pmf[values > abs(t)].sum()), float(pmf[values == abs(t)].sum())
    return min(1.0, 2 * (more + (0.5 if mid_p else 1.0) * equal))


@dataclass(frozen=True)
class SignFlip:
    """A sign-flip test's outcome; ``p_floor``: None when the distribution was enumerated (``exact``), else
    the Monte Carlo p's smallest possible value."""

    p: float
    statistic: float
    n: int
    n_nonzero: int
    exact: bool
    p_floor: float | None
    mid_p: bool
    alternative: str = "two-sided"
    n_resamples: int | None = None

    @property
    def at_floor(self) -> bool:
        """The p-value is only bounded: no resample reached the observed statistic."""
        from .verdict import at_floor

        return at_floor(self.p, self.p_floor)


def signflip_test(d: np.ndarray, mid_p: bool = True, n_resamples: int = 100_000,
                  seed: SeedLike = 0) -> SignFlip:
    """Two-sided paired sign-flip test of mean(d) = 0 (NaN entries are skipped): mid-p by default, exact
    on the lattice of the d_i, Monte Carlo (``n_resamples``, with a floor) when the lattice is too fine."""
    d = np.asarray(d, dtype=float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        raise ValueError("no question to test")
    delta = float(d.mean())
    nz = d[d != 0]

    def out(p: float, exact: bool, floor: float | None) -> SignFlip:
        return SignFlip(p=p, statistic=delta, n=int(d.size), n_nonzero=int(nz.size), exact=exact,
                        p_floor=floor, mid_p=mid_p, n_resamples=None if exact else n_resamples)

    if nz.size == 0:
        return out(1.0, True, None)
    k = lattice_scale(nz)
    if k is not None and 2 * k * float(np.abs(nz).sum()) + 1 <= MAX_SUPPORT:
        x = np.rint(np.abs(nz) * k).astype(np.int64)
        t_lattice = int(np.rint(nz.sum() * k))
        pmf, offset = null_distribution(x)
        return out(_tail_p(pmf, offset, t_lattice, mid_p), True, None)
    rng = as_rng(seed)
    a = np.abs(nz)
    t = abs(float(nz.sum()))
    tol = 1e-9 * max(1.0, float(a.sum()))
    more = equal = 0
    chunk = max(1, (1 << 20) // a.size)
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        s = (rng.integers(0, 2, size=(m, a.size)) * 2 - 1) @ a
        more += int(np.sum(s > t + tol))
        equal += int(np.sum(np.abs(s - t) <= tol))
    p = 2 * (1 + more + (0.5 if mid_p else 1.0) * equal) / (n_resamples + 1)
    return out(float(min(1.0, p)), False, 2.0 / (n_resamples + 1))


def signflip_weighted(d: np.ndarray, weights: np.ndarray | None = None, n_resamples: int = 9_999,
                      seed: SeedLike = None, max_elems: int = DEFAULT_MAX_ELEMS) -> SignFlip:
    """One-sided randomisation test of H0 "each d_i is symmetric about 0" against T = Σ w_i d_i / Σ w_i > 0:
    p = (1 + #{T* >= T}) / (R + 1) over R random sign flips."""
    d = np.asarray(d, dtype=float)
    n = d.size
    if n == 0:
        raise ValueError("sign-flip test of an empty sample")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != d.shape or np.any(w < 0) or not np.sum(w) > 0:
        raise ValueError("weights must be non-negative, of the shape of d, and not all zero")
    wd = w * d / np.sum(w)
    total = float(wd.sum())
    tol = 1e-12 * max(float(np.abs(wd).sum()), 1e-300)
    rng = as_rng(seed)
    chunk = max(1, min(n_resamples, max_elems // n))
    ge = 0
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        flip = rng.random((m, n)) < 0.5
        t_b = total - 2.0 * (flip @ wd)
        ge += int(np.count_nonzero(t_b >= total - tol))
    return SignFlip(p=(1 + ge) / (n_resamples + 1), statistic=total, n=n, n_nonzero=int(np.count_nonzero(d)),
                    exact=False, p_floor=1 / (n_resamples + 1), mid_p=False, alternative="greater",
                    n_resamples=n_resamples)
