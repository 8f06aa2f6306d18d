"""Repeated runs per arm: per-question mean scores, the question-level (cluster) bootstrap, discordance and
the A/A noise band.

Runs of one arm are a matrix ``(R, n)`` of 0/1 scores (runs x questions, aligned by question). Runs of
the same question are correlated, so inference resamples questions (each with all of its runs), never
runs as if the R·n outcomes were independent (:func:`naive_run_bootstrap_ci` exists only to show why).
The verdict's inference with repeats is in :mod:`.analysis` (launches as replicates).
"""

from __future__ import annotations

import numpy as np

from ._rng import SeedLike
from .paired import paired_bootstrap_ci
from .proportions import z_crit
from .resample import DEFAULT_MAX_ELEMS, bootstrap_means, percentile_interval


def as_runs(x: np.ndarray) -> np.ndarray:
    """A ``(R, n)`` float matrix from one run ``(n,)`` or several runs ``(R, n)``."""
    x = np.asarray(x, dtype=float)
    return x[None, :] if x.ndim == 1 else x


def per_question_means(runs: np.ndarray) -> np.ndarray:
    """Per-question mean score over the runs of one arm, shape ``(n,)``."""
    return as_runs(runs).mean(axis=0)


def cluster_bootstrap_ci(a_runs: np.ndarray, b_runs: np.ndarray, alpha: float = 0.05,
                         n_resamples: int = 10_000, method: str = "bca", seed: SeedLike = None,
                         max_elems: int = DEFAULT_MAX_ELEMS) -> tuple[float, float]:
    """Interval of Δ = mean over questions of (B mean score - A mean score), resampling questions (each
    with all of its runs of both arms) — the question-level cluster bootstrap."""
    return paired_bootstrap_ci(per_question_means(a_runs), per_question_means(b_runs), alpha=alpha,
                               n_resamples=n_resamples, method=method, seed=seed, max_elems=max_elems)


def naive_run_bootstrap_ci(a_runs: np.ndarray, b_runs: np.ndarray, alpha: float = 0.05,
                           n_resamples: int = 10_000, seed: SeedLike = None,
                           max_elems: int = DEFAULT_MAX_ELEMS) -> tuple[float, float]:
    """WRONG ON PURPOSE (for demonstration and tests): treats the R·n (run, question) pairs as independent
    and resamples them. It ignores that runs of one question share that question's effect, so its interval
    is too narrow whenever the effect differs between questions."""
    a = as_runs(a_runs)
    b = as_runs(b_runs)
    if a.shape != b.shape:
        raise ValueError("naive run-level resampling needs the same number of runs per arm")
    d = (b - a).ravel()
    return percentile_interval(bootstrap_means(d, n_resamples, seed, max_elems), alpha)


def discordance(x: np.ndarray, y: np.ndarray) -> float:
    """Share of questions answered differently (right vs wrong) by two runs; NaN entries are skipped."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    if not ok.any():
        return float("nan")
    return float(np.mean(x[ok] != y[ok]))


def effective_repeats(r_a: int, r_b: int) -> float:
    """Repeats per arm R giving the same variance as R_A and R_B: the harmonic mean 2 / (1/R_A + 1/R_B)."""
    return 2.0 / (1.0 / r_a + 1.0 / r_b)


def noise_band(psi_aa_value: float, n: int, r_a: int = 1, r_b: int = 1, alpha: float = 0.05) -> float:
    """Half-width of the band of Δ that run-to-run noise alone gives: z_{1-α/2}·sqrt(ψ_AA / (n R)), with R
    the effective repeats per arm (Var Δ = ψ_AA (1/R_A + 1/R_B) / (2n) for identical arms)."""
    return z_crit(alpha) * float(np.sqrt(psi_aa_value / (n * effective_repeats(r_a, r_b))))
