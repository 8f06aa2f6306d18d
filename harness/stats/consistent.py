"""The question-level verdict: a p-value and an interval that never disagree.

The mid-p sign-flip test (:mod:`.signflip`) and Tango's score interval (:mod:`.tango`) could disagree about "p
< α" and "0 outside the interval". Here p is ``max(p_signflip, p_score(0))`` and the interval Tango's,
extended to 0 whenever the sign-flip test does not reject (``extended``): one family of tests that rejects no
more often than Tango's, so as valid. An endpoint bisection leaves within round-off of 0 is set by the
decision (``nudged``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .guards import robust_effective_table
from .signflip import signflip_test
from .tango import score_interval, score_p
from .verdict import ALPHA

TEST = "mid-p sign-flip test over questions and Tango's score test, both at α (p = the larger)"
CI_METHOD = "Tango score interval, extended to 0 when the sign-flip test does not reject"


@dataclass(frozen=True)
class ConsistentResult:
    """The question-level test and interval that share one decision."""

    delta: float
    #: the verdict's p: max(p_signflip, p_score)
    p: float
    p_signflip: float
    p_score: float
    #: Monte Carlo floor of the sign-flip p (None when exact)
    p_floor: float | None
    ci: tuple[float, float]
    ci_tango: tuple[float, float]
    #: the interval was extended to 0 because the sign-flip test does not reject
    extended: bool
    #: an endpoint was set by the decision because bisection left it within round-off of 0
    nudged: bool
    significant: bool
    alpha: float
    n: int
    table: dict[str, float]
    test: str = TEST
    ci_method: str = CI_METHOD


def _combine(delta: np.ndarray, p_sf: np.ndarray, p_sc: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             alpha: float) -> tuple[np.ndarray, ...]:
    """(p, lo, hi, significant, extended, nudged), vectorised: see the module docstring."""
    p = np.maximum(p_sf, p_sc)
    sig = p < alpha
    sf_keeps = p_sf >= alpha
    extended = sf_keeps & ((lo > 0) | (hi < 0))
    lo2, hi2 = np.where(sf_keeps, np.minimum(lo, 0.0), lo), np.where(sf_keeps, np.maximum(hi, 0.0), hi)
    # Tango rejects Δ0 = 0 (p_score < α) but bisection left an endpoint at ~0: the decision sets it
    tiny = np.nextafter(0.0, 1.0)
    up, down = sig & (delta > 0) & (lo2 <= 0), sig & (delta < 0) & (hi2 >= 0)
    lo2, hi2 = np.where(up, tiny, lo2), np.where(down, -tiny, hi2)
    return p, lo2, hi2, sig, extended, up | down


def consistent_paired(d: np.ndarray, alpha: float = ALPHA, variance: float | None = None) -> ConsistentResult:
    """The question-level decision from per-question differences ``d`` (B - A; NaN skipped); ``variance``: the
    design's V̂(Δ) for the effective table (default question-level)."""
    d = np.asarray(d, dtype=float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        raise ValueError("no question to test")
    sf = signflip_test(d)
    t = robust_effective_table(d, variance)
    p_sc = float(score_p(t["b"], t["c"], t["n"], 0.0))
    lo, hi = (float(x) for x in score_interval(t["b"], t["c"], t["n"], alpha))
    delta = float(d.mean())
    p, lo2, hi2, sig, ext, nud = _combine(np.asarray(delta), np.asarray(sf.p), np.asarray(p_sc),
                                          np.asarray(lo), np.asarray(hi), alpha)
    return ConsistentResult(delta=delta, p=float(p), p_signflip=float(sf.p), p_score=p_sc,
                            p_floor=sf.p_floor, ci=(float(lo2), float(hi2)), ci_tango=(lo, hi),
                            extended=bool(ext), nudged=bool(nud), significant=bool(sig), alpha=alpha,
                            n=int(d.size), table=t)
