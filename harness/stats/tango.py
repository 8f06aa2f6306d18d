"""Tango's score test and interval for the paired difference Δ = (c - b) / n (``b`` questions only A answers
right, ``c`` only B): Z(Δ0) = (c - b - n Δ0) / sqrt(n (2 q̃ + Δ0 - Δ0²)), q̃ the restricted MLE of P(A only)
(Tango 1998, Stat Med 17:891). Its interval covers near-nominally where Wald and Newcombe do not, and never
has zero width. With repeats :func:`effective_table` divides the discordant masses by the design effect (Korn
& Graubard's effective sample size).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

from harness.stats.roots import brentq

from .verdict import ALPHA

_EPS = 1e-12


def restricted_q(b: Any, c: Any, n: Any, delta0: Any) -> np.ndarray:
    """Restricted MLE of P(only A right) under Δ = Δ0 (vectorised)."""
    b, c, n, d0 = (np.asarray(v, dtype=float) for v in (b, c, n, delta0))
    w = b * (1 - 3 * d0) + c * (1 - d0) - 2 * (n - b - c) * d0
    return (w + np.sqrt(np.maximum(w * w + 8 * n * b * d0 * (1 - d0), 0.0))) / (4 * n)


def score_z(b: Any, c: Any, n: Any, delta0: Any) -> np.ndarray:
    """Tango's score statistic Z(Δ0) (vectorised; decreasing in Δ0; 0 where c - b = nΔ0)."""
    b, c, n, d0 = (np.asarray(v, dtype=float) for v in (b, c, n, delta0))
    num = c - b - n * d0
    var = n * (2 * restricted_q(b, c, n, d0) + d0 - d0 * d0)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = num / np.sqrt(np.maximum(var, 1e-300))
    return np.where(num == 0, 0.0, z)


def score_p(b: Any, c: Any, n: Any, delta0: Any = 0.0, alternative: str = "two-sided") -> np.ndarray:
    """p of the score test of Δ = Δ0 against Δ ≠ Δ0 (``two-sided``), Δ > Δ0 (``greater``) or Δ < Δ0."""
    z = score_z(b, c, n, delta0)
    if alternative == "two-sided":
        return np.minimum(1.0, 2 * ndtr(-np.abs(z)))
    if alternative == "greater":
        return ndtr(-z)
    if alternative == "less":
        return ndtr(z)
    raise ValueError(f"unknown alternative {alternative!r}")


def _bounds(b: float, c: float, n: float, z: float) -> tuple[float, float]:
    """(lower, upper) of one table: the Δ0 where Z(Δ0) = +z and -z (Z is decreasing in Δ0)."""
    def f(d0: float) -> float:
        return float(score_z(b, c, n, d0))

    d = (c - b) / n
    lo = -1.0 if f(-1 + _EPS) <= z else float(brentq(lambda x: f(x) - z, -1 + _EPS, d, xtol=1e-14))
    hi = 1.0 if f(1 - _EPS) >= -z else float(brentq(lambda x: f(x) + z, d, 1 - _EPS, xtol=1e-14))
    return lo, hi


def _bisect_bounds(b: np.ndarray, c: np.ndarray, n: np.ndarray, z: float,
                   iterations: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """The same bounds for arrays of tables, by vectorised bisection (60 halvings: below 1e-17)."""
    d = (c - b) / n
    lo_a, lo_b = np.full(d.shape, -1 + _EPS), d.copy()
    hi_a, hi_b = d.copy(), np.full(d.shape, 1 - _EPS)
    for _ in range(iterations):
        m = (lo_a + lo_b) / 2
        inside = score_z(b, c, n, m) <= z
        lo_b, lo_a = np.where(inside, m, lo_b), np.where(inside, lo_a, m)
        m = (hi_a + hi_b) / 2
        inside = score_z(b, c, n, m) >= -z
        hi_a, hi_b = np.where(inside, m, hi_a), np.where(inside, hi_b, m)
    lo = np.where(score_z(b, c, n, -1 + _EPS) <= z, -1.0, (lo_a + lo_b) / 2)
    hi = np.where(score_z(b, c, n, 1 - _EPS) >= -z, 1.0, (hi_a + hi_b) / 2)
    return lo, hi


def score_interval(b: Any, c: Any, n: Any, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Tango's (1 - α) score interval of Δ: the Δ0 with |Z(Δ0)| <= z_{1-α/2} (vectorised over tables:
    Brent's method for one table, bisection for many)."""
    b, c, n = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (b, c, n)))
    z = float(ndtri(1 - alpha / 2))
    if b.size > 8:
        return _bisect_bounds(b, c, n, z)
    lo, hi = np.empty(b.shape), np.empty(b.shape)
    for idx in np.ndindex(b.shape):
        lo[idx], hi[idx] = _bounds(float(b[idx]), float(c[idx]), float(n[idx]), z)
    return lo, hi


def discordant_mass(d: np.ndarray) -> tuple[np.ndarray, float, float, float]:
    """``d`` without NaN, its count n, and the mass of the differences favouring A (b) and B (c)."""
    d = np.asarray(d, dtype=float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        raise ValueError("no question")
    return d, float(d.size), float(np.sum(np.maximum(-d, 0))), float(np.sum(np.maximum(d, 0)))


def effective_table(d: np.ndarray, variance: float | None = None) -> dict[str, float]:
    """The effective table ``b``, ``c``, ``n`` (divided by ``deff``; the ``*_raw`` counts beside) of
    per-question differences ``d`` and the design's variance of Δ (default: questions independent)."""
    d, n, b, c = discordant_mass(d)
    delta, psi = (c - b) / n, (b + c) / n
    if variance is None:
        variance = float(np.sum((d - delta) ** 2)) / n**2
    table_var = (psi - delta**2) / n
    deff = variance / table_var if table_var > 1e-15 * max(psi, 1e-300) and table_var > 0 else 1.0
    if not np.isfinite(deff) or deff <= 0:
        deff = 1.0
    return {"b": b / deff, "c": c / deff, "n": n / deff, "deff": float(deff), "b_raw": b, "c_raw": c, "n_raw": n}
