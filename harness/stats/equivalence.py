"""Non-inferiority and equivalence (TOST) with a declared margin: by Tango's score test on the (effective)
table, questions the unit, or by a t statistic, launches the unit.
"""

from __future__ import annotations

from .dist import t_cdf, t_ppf, t_sf
from .outcomes import Tost
from .tango import score_interval, score_p
from .verdict import ALPHA


def _result(method: str, margin: float, alpha: float, p_lower: float, p_upper: float,
            ci_tost: list[float], ci: list[float], degenerate: bool = False) -> Tost:
    shown = not degenerate and ci_tost[1] > ci_tost[0]
    return Tost(method=method, margin=float(margin), alpha=float(alpha), p_noninferiority=float(p_lower),
                p_nonsuperiority=float(p_upper), p_equivalence=float(max(p_lower, p_upper)),
                ci=[float(ci_tost[0]), float(ci_tost[1])], ci_level=float(1 - 2 * alpha),
                noninferiority_alpha=float(alpha / 2), noninferior=bool(shown and ci[0] > -margin),
                equivalent=bool(shown and -margin < ci_tost[0] and ci_tost[1] < margin))


def score_tost(b: float, c: float, n: float, margin: float, alpha: float = ALPHA) -> Tost:
    """TOST and non-inferiority of Δ = (c - b)/n by Tango's score test (counts possibly effective)."""
    if margin <= 0:
        raise ValueError("margin must be positive")
    p_lower = float(score_p(b, c, n, -margin, "greater"))   # H0: Δ <= -margin
    p_upper = float(score_p(b, c, n, margin, "less"))       # H0: Δ >= +margin
    tost_ci = [float(x) for x in score_interval(b, c, n, 2 * alpha)]
    ci = [float(x) for x in score_interval(b, c, n, alpha)]
    return _result("Tango score test", margin, alpha, p_lower, p_upper, tost_ci, ci)


def t_tost(delta: float, se: float, df: float, margin: float, alpha: float = ALPHA) -> Tost:
    """TOST and non-inferiority of an estimate by t statistics; with ``se`` 0 nothing is shown (p's 1)."""
    if margin <= 0:
        raise ValueError("margin must be positive")
    if not se > 0:
        return _result("t-test", margin, alpha, 1.0, 1.0, [delta, delta], [delta, delta], degenerate=True)
    p_lower, p_upper = float(t_sf((delta + margin) / se, df)), float(t_cdf((delta - margin) / se, df))
    t1, t2 = float(t_ppf(1 - alpha, df)), float(t_ppf(1 - alpha / 2, df))
    return _result("t-test", margin, alpha, p_lower, p_upper, [delta - t1 * se, delta + t1 * se],
                   [delta - t2 * se, delta + t2 * se])
