"""Paired sign-flip (randomisation) test over questions: the verdict's test of Δ = mean_i d_i.

``d_i`` is question i's difference of arm means (B - A; each arm's runs averaged, passes within a launch
first). Under H0 the sign of each d_i is as likely + as - (the arms are exchangeable on every question),
so the reference distribution of T = Σ d_i is that of Σ ±|d_i| with independent fair signs. Questions are
the unit: runs that repeat verbatim leave d_i unchanged and so add no evidence.

The distribution is computed exactly when the d_i lie on a lattice (they do: they are differences of
means of 0/1 scores, multiples of 1/K for a small K), by convolving the distributions of each distinct
|d_i| value. The p-value is two-sided and **mid-p** by default: 2 (P(T* > |t|) + ½ P(T* = |t|)). With one
run per arm this is the mid-p McNemar test (Fagerland, Lydersen & Laake 2013 recommend it over the exact
test, whose size is far below α when discordant pairs are few: 3.0 % at 26 expected pairs); ``mid_p=False``
gives the exact (conservative) test, the exact McNemar test for one run per arm. When the lattice is too
fine the distribution is drawn by Monte Carlo instead (then ``exact`` is false and the p-value has a floor).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from ._rng import SeedLike, as_rng
from .dist import binom_pmf

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
    """Exact distribution of Σ ±x_i (fair independent signs) for non-negative integers ``x``.

    Returns (pmf, offset): pmf[j] = P(T = j - offset). Each distinct value v with multiplicity c
    contributes v·(2·Binomial(c, ½) - c); the groups are convolved.
    """
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
    more = float(pmf[values > abs(t)].sum())
    equal = float(pmf[values == abs(t)].sum())
    return min(1.0, 2 * (more + (0.5 if mid_p else 1.0) * equal))


def signflip_test(d: np.ndarray, mid_p: bool = True, n_resamples: int = 100_000,
                  seed: SeedLike = 0) -> dict[str, Any]:
    """Two-sided paired sign-flip test of mean(d) = 0 (NaN entries are skipped).

    Returns ``p`` (mid-p by default), ``delta`` (mean d), ``n_nonzero`` (questions whose d differs from 0),
    ``exact`` (true when the distribution was enumerated) and ``p_floor`` (None when exact, else the Monte
    Carlo floor 2/(n_resamples + 1)).
    """
    d = np.asarray(d, dtype=float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        raise ValueError("no question to test")
    delta = float(d.mean())
    nz = d[d != 0]
    out: dict[str, Any] = {"delta": delta, "n": int(d.size), "n_nonzero": int(nz.size), "mid_p": mid_p}
    if nz.size == 0:
        return {**out, "p": 1.0, "exact": True, "p_floor": None}
    k = lattice_scale(nz)
    if k is not None and 2 * k * float(np.abs(nz).sum()) + 1 <= MAX_SUPPORT:
        x = np.rint(np.abs(nz) * k).astype(np.int64)
        t_lattice = int(np.rint(nz.sum() * k))
        pmf, offset = null_distribution(x)
        return {**out, "p": _tail_p(pmf, offset, t_lattice, mid_p), "exact": True, "p_floor": None}
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
    return {**out, "p": float(min(1.0, p)), "exact": False, "p_floor": 2.0 / (n_resamples + 1)}
