"""Per-arm accuracy intervals and the unpaired difference of two proportions."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtri

from ._rng import SeedLike
from .resample import bootstrap_mean_ci
from .verdict import ALPHA


def z_crit(alpha: float = ALPHA) -> float:
    """Two-sided normal critical value z_{1 - alpha/2} (1.95996 at alpha = 0.05)."""
    return float(ndtri(1 - alpha / 2))


def wilson_interval(k: np.ndarray | float, n: np.ndarray | float,
                    alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for k successes of n (vectorised over arrays; k may be fractional).

    Returns (lower, upper) as fractions; n == 0 gives (0, 1).
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    z = z_crit(alpha)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(n > 0, k / n, 0.5)
        denom = 1 + z**2 / n
        centre = (p + z**2 / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / denom
        lo = np.where((n > 0) & (k > 0), np.clip(centre - half, 0.0, 1.0), 0.0)
        hi = np.where((n > 0) & (k < n), np.clip(centre + half, 0.0, 1.0), 1.0)
    return lo, hi


def accuracy_bootstrap_ci(scores: np.ndarray, alpha: float = ALPHA, n_resamples: int = 10_000,
                          seed: SeedLike = None) -> tuple[float, float]:
    """Percentile bootstrap interval of mean accuracy over questions (``scores``: per-question 0/1 or
    per-question mean over repeats, so questions, not runs, are resampled)."""
    return bootstrap_mean_ci(scores, alpha=alpha, n_resamples=n_resamples, method="percentile", seed=seed)


def unpaired_diff_ci(k_a: float, n_a: float, k_b: float, n_b: float,
                     alpha: float = ALPHA) -> tuple[float, float]:
    """Wald interval of p_b - p_a treating the arms as independent samples (ignores the pairing; shown
    for contrast with the paired interval)."""
    pa, pb = k_a / n_a, k_b / n_b
    se = np.sqrt(pa * (1 - pa) / n_a + pb * (1 - pb) / n_b)
    z = z_crit(alpha)
    return float(pb - pa - z * se), float(pb - pa + z * se)
