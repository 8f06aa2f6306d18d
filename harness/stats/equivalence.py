"""Non-inferiority and equivalence (TOST) of arm B against arm A with a declared margin."""

from __future__ import annotations

import numpy as np
from scipy.special import ndtr, ndtri


def tost(d: np.ndarray | None = None, margin: float = 0.01, alpha: float = 0.05, *,
         delta: float | None = None, se: float | None = None) -> dict[str, float | bool | list[float]]:
    """Two one-sided z-tests of Δ against ±margin.

    Either per-question differences ``d`` (B score - A score, or per-question mean differences with
    repeats; SE = sd(d)/sqrt(n)) or an estimate ``delta`` with its standard error ``se``.

    - non-inferiority: H0 Δ <= -margin vs H1 Δ > -margin, p = ``p_noninferiority``;
    - equivalence: both H0 Δ <= -margin and H0 Δ >= +margin rejected, p = max of the two one-sided p's,
      equivalently the (1 - 2α) interval lies inside (-margin, +margin).
    """
    if margin <= 0:
        raise ValueError("margin must be positive")
    if d is not None:
        d = np.asarray(d, dtype=float)
        delta = float(d.mean())
        se = float(np.std(d, ddof=1) / np.sqrt(d.size)) if d.size > 1 else 0.0
    if delta is None or se is None:
        raise ValueError("give d, or delta and se")
    if se > 0:
        p_lower = float(ndtr(-(delta + margin) / se))   # H0: Δ <= -margin
        p_upper = float(ndtr((delta - margin) / se))    # H0: Δ >= +margin
    else:
        p_lower = 0.0 if delta > -margin else 1.0
        p_upper = 0.0 if delta < margin else 1.0
    p_eq = max(p_lower, p_upper)
    z = float(ndtri(1 - alpha))
    return {
        "margin": float(margin),
        "alpha": float(alpha),
        "delta": float(delta),
        "se": float(se),
        "p_noninferiority": p_lower,
        "p_nonsuperiority": p_upper,
        "p_equivalence": p_eq,
        "ci_90": [float(delta - z * se), float(delta + z * se)],
        "noninferior": bool(p_lower < alpha),
        "equivalent": bool(p_eq < alpha),
    }
