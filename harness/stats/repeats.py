"""Repeated runs per arm: per-question mean scores, question-level (cluster) inference, A/A noise floor.

Runs of one arm are a matrix ``(R, n)`` of 0/1 scores (runs x questions, aligned by question). Runs of
the same question are correlated, so inference resamples or permutes *within questions*, never runs as
if the R·n outcomes were independent (:func:`naive_run_bootstrap_ci` exists only to show why).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from ._rng import SeedLike, as_rng
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


def permutation_test(a_runs: np.ndarray, b_runs: np.ndarray, n_permutations: int = 10_000,
                     seed: SeedLike = None, max_elems: int = DEFAULT_MAX_ELEMS) -> dict[str, float]:
    """Within-question permutation test of the arm labels for 0/1 scores (two-sided).

    Null: on every question the R_A + R_B runs are exchangeable between arms. Permuting labels within a
    question gives arm B a hypergeometric number of that question's correct runs, so permutations are
    drawn directly as hypergeometric counts (questions answered identically by every run contribute 0).
    Statistic: Δ = mean over questions of (B mean - A mean). p = (1 + #{|Δ*| >= |Δ|}) / (B + 1).
    """
    a = as_runs(a_runs)
    b = as_runs(b_runs)
    if a.shape[1] != b.shape[1]:
        raise ValueError("arms are not aligned by question")
    if not (np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all()):
        raise ValueError("the permutation test needs 0/1 scores")
    ra, rb = a.shape[0], b.shape[0]
    n = a.shape[1]
    ka = a.sum(axis=0)
    kb = b.sum(axis=0)
    k = (ka + kb).astype(np.int64)
    delta = float(np.mean(kb / rb - ka / ra))
    mixed = (k > 0) & (k < ra + rb)
    km = k[mixed]
    m = km.size
    if m == 0:
        return {"delta": delta, "p_value": 1.0, "n_permutations": n_permutations, "n_mixed": 0}
    rng = as_rng(seed)
    # Δ* = (1/n) Σ_i [X_i / rb - (k_i - X_i) / ra] over mixed questions, X_i ~ Hypergeom(k_i, T - k_i, rb)
    const = -np.sum(km) / ra
    scale = 1.0 / rb + 1.0 / ra
    chunk = max(1, min(n_permutations, max_elems // m or 1))
    exceed = 0
    tol = 1e-9 / max(1, n)
    for start in range(0, n_permutations, chunk):  # chunks of permutations, not single permutations
        size = min(chunk, n_permutations - start)
        x = rng.hypergeometric(km, ra + rb - km, rb, size=(size, m))
        dstar = (scale * x.sum(axis=1) + const) / n
        exceed += int(np.sum(np.abs(dstar) >= abs(delta) - tol))
    p = (1 + exceed) / (n_permutations + 1)
    return {"delta": delta, "p_value": float(p), "n_permutations": n_permutations, "n_mixed": int(m)}


def discordance(x: np.ndarray, y: np.ndarray) -> float:
    """Share of questions answered differently (right vs wrong) by two runs; NaN entries are skipped."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    if not ok.any():
        return float("nan")
    return float(np.mean(x[ok] != y[ok]))


def psi_aa(*groups: np.ndarray) -> float | None:
    """A/A discordance ψ_AA: mean discordance over all pairs of runs *within* each group (each group is
    the ``(R, n)`` runs of one unchanged configuration). None when no group has two runs."""
    vals = [discordance(g[i], g[j]) for g in map(as_runs, groups) for i, j in combinations(range(len(g)), 2)]
    vals = [v for v in vals if not np.isnan(v)]
    return float(np.mean(vals)) if vals else None


def effective_repeats(r_a: int, r_b: int) -> float:
    """Repeats per arm R giving the same variance as R_A and R_B: the harmonic mean 2 / (1/R_A + 1/R_B)."""
    return 2.0 / (1.0 / r_a + 1.0 / r_b)


def noise_band(psi_aa_value: float, n: int, r_a: int = 1, r_b: int = 1, alpha: float = 0.05) -> float:
    """Half-width of the band of Δ that run-to-run noise alone gives: z_{1-α/2}·sqrt(ψ_AA / (n R)), with R
    the effective repeats per arm (Var Δ = ψ_AA (1/R_A + 1/R_B) / (2n) for identical arms)."""
    return z_crit(alpha) * float(np.sqrt(psi_aa_value / (n * effective_repeats(r_a, r_b))))
