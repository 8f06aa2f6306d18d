"""Repeated runs per arm: the question-level and two-level (launches, then questions) bootstraps, discordance
and the A/A noise band. Runs of one question are correlated, so inference resamples questions, never runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from .dist import t_ppf
from .launches import ArmRuns, launch_means, question_means
from .proportions import z_crit
from .resample import DEFAULT_MAX_ELEMS, SeedLike, as_rng, bootstrap_means, percentile_interval
from .verdict import ALPHA


def launch_deviations(table: np.ndarray) -> np.ndarray | None:
    """``(L, n)`` launch means of one configuration as deviations from each question's mean over the
    launches, scaled by sqrt(L / (L - 1)) so that a launch drawn from them has the launch variance's unbiased
    size (resampling L values underestimates it by (L - 1) / L); a question some launch did not answer
    contributes no launch variation. None for fewer than two launches."""
    y = np.atleast_2d(np.asarray(table, dtype=float))
    L = y.shape[0]
    if L < 2:
        return None
    dev = np.sqrt(L / (L - 1)) * (y - np.nanmean(y, axis=0))
    return np.nan_to_num(dev, nan=0.0)


def two_level_bootstrap_ci(center: np.ndarray, pools: list[tuple[np.ndarray, int, float]], df: float,
                           alpha: float = ALPHA, n_resamples: int = 10_000, seed: SeedLike = None,
                           max_elems: int = DEFAULT_MAX_ELEMS) -> tuple[float, float]:
    """Interval of mean(center) resampling questions (each with all of its runs, the arms paired) and, in each
    resample, adding for every ``(deviations (P, n), L, sign)`` pool ``sign`` x the mean of L launches drawn
    from its P launch deviations. A few launches' mean has Student's tails where the bootstrap has the
    normal's: the percentile interval is widened about the estimate by t_{1-α/2, df} / z_{1-α/2}."""
    center = np.asarray(center, dtype=float)
    cols = [center[:, None]] + [np.asarray(d, dtype=float).T for d, _, _ in pools]
    x = np.hstack(cols)
    rng = as_rng(seed)
    means = bootstrap_means(x, n_resamples, rng, max_elems)
    stat = means[:, 0].copy()
    at = 1
    for dev, L, sign in pools:
        P = dev.shape[0]
        counts = rng.multinomial(L, np.full(P, 1.0 / P), size=n_resamples) / L
        stat += sign * np.sum(counts * means[:, at:at + P], axis=1)
        at += P
    est = float(center.mean())
    lo, hi = percentile_interval(stat, alpha)
    c = 1.0 if not np.isfinite(df) else float(t_ppf(1 - alpha / 2, df) / ndtri(1 - alpha / 2))
    return est + c * (lo - est), est + c * (hi - est)


@dataclass(frozen=True)
class LaunchBootstrap:
    """Two-level (launches, then questions) bootstrap intervals: of Δ, and of each arm's accuracy (None where
    the arm's configuration has one launch: its question-level interval is all there is)."""

    delta: tuple[float, float]
    a: tuple[float, float] | None
    b: tuple[float, float] | None
    #: whose launches were resampled for each arm
    source: str


def launch_bootstrap(a: ArmRuns, b: ArmRuns, aa: ArmRuns | None, keep: np.ndarray, df: float,
                     alpha: float = ALPHA, n_resamples: int = 10_000,
                     seed: SeedLike = None) -> LaunchBootstrap | None:
    """:func:`two_level_bootstrap_ci` of Δ and of each arm's accuracy, A's launches drawn from its
    configuration's (arm A's and the A/A control's); a configuration with one launch borrows the other's
    deviations for Δ (the verdict's assumption). None when no configuration has two launches."""
    keep = np.asarray(keep, dtype=bool)
    cfg, dev_a, dev_b = _configuration_deviations(a, b, aa, keep)
    if dev_a is None and dev_b is None:
        return None
    la, lb = len(a.launch_ids()), len(b.launch_ids())
    am, bm = question_means(a)[keep], question_means(b)[keep]
    rng = as_rng(seed)
    delta = _delta_interval(am, bm, dev_a, dev_b, la, lb, df, alpha, n_resamples, rng)

    def arm(center: np.ndarray, dev: np.ndarray | None, L: int, launches: int) -> tuple[float, float] | None:
        if dev is None:
            return None
        # Satterthwaite's df of the arm's accuracy: its launch part on launches - 1 df, its question part on n - 1
        v_l = float(np.mean(dev.mean(axis=1) ** 2)) / L
        v_q = float(np.var(center, ddof=1)) / center.size
        den = v_l**2 / (launches - 1) + v_q**2 / (center.size - 1)
        df_arm = (v_l + v_q) ** 2 / den if den > 0 else float("inf")
        return two_level_bootstrap_ci(center, [(dev, L, 1.0)], df_arm, alpha, n_resamples, rng)

    n_cfg = len(cfg.launch_ids())
    src_a = f"A's {n_cfg} launches" + (" (with the A/A control's)" if aa is not None else "")
    src_b = f"B's {lb} launches" if dev_b is not None else "A's launches for B (B has one)"
    if dev_a is None:
        src_a = "B's launches for A (A has one)"
    return LaunchBootstrap(delta, arm(am, dev_a, la, n_cfg), arm(bm, dev_b, lb, lb), f"{src_a}; {src_b}")


def _configuration_deviations(a: ArmRuns, b: ArmRuns, aa: ArmRuns | None, keep: np.ndarray
                              ) -> tuple[ArmRuns, np.ndarray | None, np.ndarray | None]:
    """A's configuration (arm A's runs and the A/A control's) and each configuration's launch deviations."""
    cfg = a if aa is None else a.concat(aa)
    return cfg, launch_deviations(launch_means(cfg)[:, keep]), launch_deviations(launch_means(b)[:, keep])


def _delta_interval(am: np.ndarray, bm: np.ndarray, dev_a: np.ndarray | None, dev_b: np.ndarray | None, la: int,
                    lb: int, df: float, alpha: float, n_resamples: int,
                    rng: np.random.Generator) -> tuple[float, float]:
    """The two-level interval of Δ; a configuration with one launch borrows the other's deviations."""
    pa, pb = dev_a if dev_a is not None else dev_b, dev_b if dev_b is not None else dev_a
    assert pa is not None and pb is not None
    return two_level_bootstrap_ci(bm - am, [(pb, lb, 1.0), (pa, la, -1.0)], df, alpha, n_resamples, rng)


def discordance(x: np.ndarray, y: np.ndarray) -> float:
    """Share of questions answered differently (right vs wrong) by two runs; NaN entries are skipped."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = ~(np.isnan(x) | np.isnan(y))
    if not ok.any():
        return float("nan")
    return float(np.mean(x[ok] != y[ok]))


def effective_repeats(r_a: int, r_b: int) -> float:
    """Repeats per arm R giving the same variance as R_A and R_B: the harmonic mean 2 / (1/R_A + 1/R_B)."""
    return 2.0 / (1.0 / r_a + 1.0 / r_b)


def noise_band(psi_aa_value: float, n: int, r_a: int = 1, r_b: int = 1, alpha: float = ALPHA) -> float:
    """Half-width of the band of Δ that run-to-run noise alone gives: z_{1-α/2}·sqrt(ψ_AA / (n R)), with R
    the effective repeats per arm (Var Δ = ψ_AA (1/R_A + 1/R_B) / (2n) for identical arms)."""
    return z_crit(alpha) * float(np.sqrt(psi_aa_value / (n * effective_repeats(r_a, r_b))))
