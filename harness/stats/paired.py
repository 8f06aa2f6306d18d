"""Paired comparison of two arms on the same questions: the 2x2 table, McNemar, paired intervals.

Notation (as in the brief): n questions, ``both`` = a, ``a_only`` = b, ``b_only`` = c, ``neither`` = d;
Δ = (b_only - a_only) / n (positive when arm B is better); ψ = (a_only + b_only) / n is the discordance.
All functions taking counts are vectorised over numpy arrays of tables.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ._rng import SeedLike
from .dist import binom_cdf, binom_pmf, chi2_sf
from .proportions import wilson_interval, z_crit
from .resample import DEFAULT_MAX_ELEMS, bca_interval, bootstrap_means, jackknife_means, percentile_interval
from .verdict import ALPHA


@dataclass(frozen=True)
class PairedTable:
    """Counts of the paired 2x2 table."""

    both: int
    a_only: int
    b_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    @property
    def delta(self) -> float:
        """Δ = (b_only - a_only) / n."""
        return (self.b_only - self.a_only) / self.n if self.n else 0.0

    @property
    def psi(self) -> float:
        """Discordance ψ = (a_only + b_only) / n."""
        return (self.a_only + self.b_only) / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def paired_table(a: np.ndarray, b: np.ndarray) -> PairedTable:
    """The 2x2 table of two aligned 0/1 (bool) correctness vectors."""
    a = np.asarray(a, dtype=bool)
    b = np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"arms are not aligned: {a.shape} vs {b.shape}")
    return PairedTable(both=int(np.sum(a & b)), a_only=int(np.sum(a & ~b)),
                       b_only=int(np.sum(~a & b)), neither=int(np.sum(~a & ~b)))


def mcnemar_exact(a_only: np.ndarray | int, b_only: np.ndarray | int) -> np.ndarray:
    """Exact two-sided McNemar p-value: binomial test of min(b, c) among b + c discordant pairs at 1/2.

    Equal to ``scipy.stats.binomtest(c, b + c, 0.5).pvalue``; 1 when there is no discordant pair.
    """
    b = np.asarray(a_only)
    c = np.asarray(b_only)
    m = b + c
    k = np.minimum(b, c)
    return np.minimum(1.0, 2 * binom_cdf(k, m, 0.5))


def mcnemar_midp(a_only: np.ndarray | int, b_only: np.ndarray | int) -> np.ndarray:
    """Mid-p McNemar: the exact p-value minus the probability of the observed split (less conservative)."""
    b = np.asarray(a_only)
    c = np.asarray(b_only)
    m = b + c
    k = np.minimum(b, c)
    return np.minimum(1.0, 2 * binom_cdf(k, m, 0.5) - binom_pmf(k, m, 0.5))


def mcnemar_asymptotic(a_only: np.ndarray | int, b_only: np.ndarray | int,
                       correction: bool = False) -> np.ndarray:
    """Asymptotic McNemar chi-square p-value (optionally with continuity correction); 1 when b + c = 0."""
    b = np.asarray(a_only, dtype=float)
    c = np.asarray(b_only, dtype=float)
    m = b + c
    num = np.abs(c - b) - (1.0 if correction else 0.0)
    num = np.maximum(num, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.where(m > 0, num**2 / np.where(m > 0, m, 1), 0.0)
    return chi2_sf(stat, 1)


def paired_se(a_only: np.ndarray | int, b_only: np.ndarray | int, n: np.ndarray | int) -> np.ndarray:
    """Standard error of Δ from the table: sqrt((ψ - Δ²) / n)."""
    b = np.asarray(a_only, dtype=float)
    c = np.asarray(b_only, dtype=float)
    n = np.asarray(n, dtype=float)
    psi = (b + c) / n
    d = (c - b) / n
    return np.sqrt(np.maximum(psi - d**2, 0.0) / n)


def paired_wald_ci(a_only: np.ndarray | int, b_only: np.ndarray | int, n: np.ndarray | int,
                   alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Wald interval Δ ± z·SE for the paired difference (vectorised)."""
    d = (np.asarray(b_only, dtype=float) - np.asarray(a_only, dtype=float)) / np.asarray(n, dtype=float)
    half = z_crit(alpha) * paired_se(a_only, b_only, n)
    return d - half, d + half


def newcombe_paired_ci(both: np.ndarray | int, a_only: np.ndarray | int, b_only: np.ndarray | int,
                       neither: np.ndarray | int, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe's (1998, method 10) square-and-add hybrid score interval for the paired Δ = p_B - p_A.

    Combines the Wilson intervals of the two marginal accuracies with the (corrected) phi correlation of
    the table, as in Newcombe (1998) and Fagerland, Lydersen & Laake (2017, ch. 8).
    Vectorised over arrays of tables.
    """
    e = np.asarray(both, dtype=float)       # both right
    f = np.asarray(b_only, dtype=float)     # B right only
    g = np.asarray(a_only, dtype=float)     # A right only
    h = np.asarray(neither, dtype=float)
    n = e + f + g + h
    p1 = (e + f) / n    # accuracy of B
    p2 = (e + g) / n    # accuracy of A
    l1, u1 = wilson_interval(e + f, n, alpha)
    l2, u2 = wilson_interval(e + g, n, alpha)
    den = (e + f) * (g + h) * (e + g) * (f + h)
    cross = e * h - f * g
    # Newcombe's phi: shrunk towards 0 by n/2 when positive (as in Newcombe 1998 and Fagerland et al. 2017)
    num = np.where(cross > n / 2, cross - n / 2, np.where(cross < 0, cross, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(den > 0, num / np.sqrt(np.where(den > 0, den, 1)), 0.0)
    theta = p1 - p2
    dl = np.sqrt(np.maximum((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    du = np.sqrt(np.maximum((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    return np.maximum(theta - dl, -1.0), np.minimum(theta + du, 1.0)


def paired_bootstrap_ci(a: np.ndarray, b: np.ndarray, alpha: float = ALPHA, n_resamples: int = 10_000,
                        method: str = "bca", seed: SeedLike = None,
                        max_elems: int = DEFAULT_MAX_ELEMS) -> tuple[float, float]:
    """Paired bootstrap interval of mean(b) - mean(a): questions are resampled, keeping each question's
    A and B scores together. ``a``/``b`` are per-question scores (0/1, or means over repeats, which makes
    this the question-level cluster bootstrap). ``method``: ``percentile`` or ``bca``."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    theta_b = bootstrap_means(d, n_resamples, seed, max_elems)
    if method == "percentile":
        return percentile_interval(theta_b, alpha)
    if method == "bca":
        return bca_interval(theta_b, float(d.mean()), jackknife_means(d), alpha)
    raise ValueError(f"unknown bootstrap method {method!r} (percentile or bca)")

