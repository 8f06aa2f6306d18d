"""Paired comparison of two arms on the same questions: the 2x2 table, McNemar, the paired bootstrap interval.
Δ = (b_only - a_only) / n (positive when B is better); the count functions are vectorised over tables.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .dist import binom_cdf, binom_pmf
from .resample import DEFAULT_MAX_ELEMS, SeedLike, bootstrap_mean_ci
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
        return (self.b_only - self.a_only) / self.n if self.n else 0.0

    @property
    def psi(self) -> float:
        """Discordance ψ = (a_only + b_only) / n."""
        return (self.a_only + self.b_only) / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def paired_table(a: np.ndarray, b: np.ndarray) -> PairedTable:
    """The 2x2 table of two aligned 0/1 (bool) correctness vectors."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"arms are not aligned: {a.shape} vs {b.shape}")
    return PairedTable(both=int(np.sum(a & b)), a_only=int(np.sum(a & ~b)),
                       b_only=int(np.sum(~a & b)), neither=int(np.sum(~a & ~b)))


def mcnemar_exact(a_only: np.ndarray | int, b_only: np.ndarray | int, mid_p: bool = False) -> np.ndarray:
    """Exact two-sided McNemar p-value: binomial test of min(b, c) among b + c discordant pairs at 1/2
    (``scipy.stats.binomtest(c, b + c, 0.5).pvalue``; 1 when there is no discordant pair). ``mid_p``: minus
    the probability of the observed split (less conservative)."""
    b, c = np.asarray(a_only), np.asarray(b_only)
    m, k = b + c, np.minimum(b, c)
    return np.minimum(1.0, 2 * binom_cdf(k, m, 0.5) - (binom_pmf(k, m, 0.5) if mid_p else 0.0))


def mcnemar_midp(a_only: np.ndarray | int, b_only: np.ndarray | int) -> np.ndarray:
    """Mid-p McNemar: the exact p-value minus the probability of the observed split."""
    return mcnemar_exact(a_only, b_only, mid_p=True)


def paired_bootstrap_ci(a: np.ndarray, b: np.ndarray, alpha: float = ALPHA, n_resamples: int = 10_000,
                        method: str = "bca", seed: SeedLike = None,
                        max_elems: int = DEFAULT_MAX_ELEMS) -> tuple[float, float]:
    """Paired bootstrap interval of mean(b) - mean(a) over per-question scores: questions are resampled, each
    question's A and B scores together."""
    d = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    return bootstrap_mean_ci(d, alpha, n_resamples, method, seed, max_elems)
