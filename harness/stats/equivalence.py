"""Non-inferiority and equivalence (TOST) of arm B against arm A with a declared margin.

Two forms, returning the same keys:

- :func:`score_tost` (one run per arm): inverts Newcombe's paired score interval. Equivalence is shown
  when the (1 - 2α) Newcombe interval lies strictly inside (-margin, +margin); non-inferiority when its
  lower bound exceeds -margin. The interval never has zero width, so a table with no (or few) discordant
  pairs cannot claim equivalence on a small sample.
- :func:`tost` (per-question differences, e.g. means over repeats, or an estimate with its SE): two
  one-sided z-tests. A standard error of 0 carries no information, so then nothing is claimed (all
  p-values 1, ``degenerate`` true).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from .paired import newcombe_paired_ci, paired_se

#: smallest one-sided level searched when inverting the score interval; smaller p-values are reported as it
P_MIN = 1e-12


def tost(d: np.ndarray | None = None, margin: float = 0.01, alpha: float = 0.05, *,
         delta: float | None = None, se: float | None = None) -> dict[str, Any]:
    """Two one-sided z-tests of Δ against ±margin.

    Either per-question differences ``d`` (B score - A score, or per-question mean differences with
    repeats; SE = sd(d)/sqrt(n)) or an estimate ``delta`` with its standard error ``se``.

    - non-inferiority: H0 Δ <= -margin vs H1 Δ > -margin, p = ``p_noninferiority``;
    - equivalence: both H0 Δ <= -margin and H0 Δ >= +margin rejected, p = max of the two one-sided p's,
      equivalently the (1 - 2α) interval ``ci`` lies inside (-margin, +margin).

    When the SE is 0 (or not finite) the z-tests are undefined: ``degenerate`` is true, every p-value is 1
    and neither non-inferiority nor equivalence is claimed.
    """
    if margin <= 0:
        raise ValueError("margin must be positive")
    if d is not None:
        d = np.asarray(d, dtype=float)
        delta = float(d.mean())
        se = float(np.std(d, ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
    if delta is None or se is None:
        raise ValueError("give d, or delta and se")
    degenerate = not (np.isfinite(se) and se > 0)
    if degenerate:
        p_lower = p_upper = 1.0
    else:
        p_lower = float(ndtr(-(delta + margin) / se))   # H0: Δ <= -margin
        p_upper = float(ndtr((delta - margin) / se))    # H0: Δ >= +margin
    z = float(ndtri(1 - alpha))
    lo, hi = float(delta - z * se), float(delta + z * se)
    return _result("z-test on the standard error of Δ", margin, alpha, delta, se, p_lower, p_upper,
                   (lo, hi), degenerate)


def _result(method: str, margin: float, alpha: float, delta: float, se: float, p_lower: float,
            p_upper: float, ci: tuple[float, float], degenerate: bool) -> dict[str, Any]:
    lo, hi = ci
    noninferior = not degenerate and lo > -margin
    return {
        "method": method,
        "margin": float(margin),
        "alpha": float(alpha),
        "delta": float(delta),
        "se": float(se),
        "p_noninferiority": float(p_lower),
        "p_nonsuperiority": float(p_upper),
        "p_equivalence": float(max(p_lower, p_upper)),
        "ci": [float(lo), float(hi)],
        "ci_level": float(1 - 2 * alpha),
        "degenerate": bool(degenerate),
        "noninferior": bool(noninferior),
        "equivalent": bool(noninferior and hi < margin),
    }


def _p_greater(both: int, first: int, second: int, neither: int, m: float) -> float:
    """p-value of H0 Δ <= m against H1 Δ > m (Δ = (second - first) / n) by inverting the Newcombe
    interval: the one-sided level at which the interval's bound reaches m."""
    def bounds(a: float) -> tuple[float, float]:
        lo, hi = newcombe_paired_ci(both, first, second, neither, 2 * a)
        return float(lo), float(hi)

    theta = (second - first) / (both + first + second + neither)
    if theta > m:   # lower bound rises from bounds(P_MIN)[0] to theta as the level a goes to 1/2
        if bounds(P_MIN)[0] > m:
            return P_MIN
        return float(brentq(lambda a: bounds(a)[0] - m, P_MIN, 0.5, xtol=1e-15))
    if theta == m:
        return 0.5
    if bounds(P_MIN)[1] < m:
        return 1 - P_MIN
    return 1 - float(brentq(lambda a: bounds(a)[1] - m, P_MIN, 0.5, xtol=1e-15))


def score_tost(both: int, a_only: int, b_only: int, neither: int, margin: float = 0.01,
               alpha: float = 0.05) -> dict[str, Any]:
    """TOST of the paired Δ = (b_only - a_only) / n of one run per arm, by Newcombe's score interval.

    ``ci`` is the (1 - 2α) Newcombe interval (:func:`~harness.stats.paired.newcombe_paired_ci`);
    equivalence is shown iff it lies inside (-margin, +margin), non-inferiority iff its lower bound exceeds
    -margin. The p-values invert the interval (the one-sided level at which a bound reaches ∓margin; at
    least ``P_MIN``), so ``p_equivalence < alpha`` agrees with the interval. ``se`` is the table's
    sqrt((ψ - Δ²)/n), for reading only (it is 0 when there is no discordant pair; the interval is not).
    """
    if margin <= 0:
        raise ValueError("margin must be positive")
    n = both + a_only + b_only + neither
    if n <= 0:
        raise ValueError("empty table")
    p_lower = _p_greater(both, a_only, b_only, neither, -margin)        # H0: Δ <= -margin
    p_upper = _p_greater(both, b_only, a_only, neither, -margin)        # H0: -Δ <= -margin, i.e. Δ >= margin
    lo, hi = newcombe_paired_ci(both, a_only, b_only, neither, 2 * alpha)
    return _result("Newcombe paired score interval", margin, alpha, (b_only - a_only) / n,
                   float(paired_se(a_only, b_only, n)), p_lower, p_upper, (float(lo), float(hi)), False)
