"""Intervals of proportions: per-arm accuracy, the unpaired difference of two, and the exact upper bound of a
rate."""

from __future__ import annotations

import numpy as np
from scipy.special import betaincinv, ndtri

from .resample import SeedLike, bootstrap_mean_ci
from .verdict import ALPHA


def z_crit(alpha: float = ALPHA) -> float:
    """Two-sided normal critical value z_{1 - alpha/2} (1.95996 at alpha = 0.05)."""
    return float(ndtri(1 - alpha / 2))


def wilson_interval(k: np.ndarray | float, n: np.ndarray | float,
                    alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval (lower, upper) for k successes of n, vectorised; n == 0 gives (0, 1)."""
    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
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
    """Percentile bootstrap interval of mean accuracy over per-question scores (questions resampled)."""
    return bootstrap_mean_ci(scores, alpha=alpha, n_resamples=n_resamples, method="percentile", seed=seed)


def unpaired_diff_ci(k_a: float, n_a: float, k_b: float, n_b: float,
                     alpha: float = ALPHA) -> tuple[float, float]:
    """Wald interval of p_b - p_a treating the arms as independent samples (ignores the pairing; shown
    for contrast with the paired interval)."""
    pa, pb = k_a / n_a, k_b / n_b
    se = np.sqrt(pa * (1 - pa) / n_a + pb * (1 - pb) / n_b)
    z = z_crit(alpha)
    return float(pb - pa - z * se), float(pb - pa + z * se)


def upper_bound(k: int, n: int, alpha: float = 0.05) -> float:
    """The one-sided (1 - alpha) Clopper-Pearson upper bound of a rate from ``k`` events in ``n`` trials: the
    (1 - alpha) quantile of Beta(k + 1, n - k), 1 - alpha^(1/n) for k = 0. What a no-op proof can claim,
    exactly."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, not k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), not {alpha}")
    if k == n:
        return 1.0
    return float(betaincinv(k + 1, n - k, 1 - alpha))
