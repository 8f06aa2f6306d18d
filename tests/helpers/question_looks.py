"""The question-level look of a sequential run: SE = sd(d)/sqrt(n) with the question as the unit, the
reference the launch-aware look (:mod:`harness.stats.launch_looks`) reduces to at infinite df, and a maker of
stored looks for the report's tests. A launch-wide shift is invisible to it, which is why ``abh run`` decides
with the launch-aware look."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NotRequired, TypedDict

import numpy as np
from scipy.special import ndtr

from harness.stats.group_sequential import SequentialDesign, spend
from harness.stats.outcomes import LookDecision


class LookEstimate(TypedDict):
    """The estimate a look decides on, as :class:`LookDecision` keywords."""

    repeats: int
    delta: float
    se: float
    z: float
    info_fraction: float


class LookFields(LookEstimate):
    """A look past its first repeats, as :class:`LookDecision` keywords: the estimate, the boundary and the
    repeated CI, and what the look's tests add."""

    bound: float | None
    alpha_spent: float
    repeated_ci: list[float] | None
    margin_z: NotRequired[list[float]]
    margin_bound: NotRequired[float]
    conditional_power: NotRequired[float]
    p: NotRequired[float]


def se_floor(n: int) -> float:
    """Smallest SE a look may use: one question's worth of difference, 1/n. With identical repeats
    (every d_i equal) the observed SE is 0 and would make any Δ 'significant' and any margin 'equivalent'."""
    return 1.0 / max(1, int(n))


def z_statistic(delta: float, se: float, n: int, floor: float | None = None) -> float:
    """``delta / max(se, floor)`` (floor default :func:`se_floor`); 0 when delta is 0."""
    s = max(float(se) if np.isfinite(se) else 0.0, se_floor(n) if floor is None else floor)
    return 0.0 if delta == 0 else float(delta) / s


def question_level_estimate(a_launches: Sequence[np.ndarray], b_launches: Sequence[np.ndarray]
                            ) -> tuple[float, float, int]:
    """Δ, its SE and the number of questions, with the question as the unit and launches as clusters.

    Each element of ``a_launches`` / ``b_launches`` is one launch's scores, shape ``(passes, n)`` or
    ``(n,)``, 1/0 or NaN (a request error: that pass is not counted). Per question: mean over the passes
    of a launch, then mean over the launches; questions with no answer in an arm are left out.
    ``d_i = B_i - A_i``; Δ = mean(d); SE = sd(d) / sqrt(n) (ddof 1).
    """
    def arm_means(launches: Sequence[np.ndarray]) -> np.ndarray:
        per_launch = []
        for s in launches:
            m = np.atleast_2d(np.asarray(s, dtype=float))
            with np.errstate(invalid="ignore"):
                per_launch.append(np.nanmean(m, axis=0) if m.shape[0] > 1 else m[0])
        stack = np.vstack(per_launch)
        with np.errstate(invalid="ignore"):
            cnt = np.sum(~np.isnan(stack), axis=0)
            tot = np.nansum(stack, axis=0)
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)

    a = arm_means(a_launches)
    b = arm_means(b_launches)
    d = b - a
    d = d[~np.isnan(d)]
    n = int(d.size)
    if n < 2:
        return 0.0, math.inf, n
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n


def _pp(x: float) -> str:
    return f"{100 * x:+.2f} pp"


def decide_look(design: SequentialDesign, repeats: int, delta: float, se: float, n: int,
                floor: float | None = None) -> LookDecision:
    """Decide at the look after ``repeats`` repeats of both arms, from the question-level estimate
    ``delta`` (B - A, fraction) with standard error ``se`` over ``n`` questions.

    Pure and deterministic: the boundaries depend only on the design and the look, never on the data of
    earlier looks, so a resumed run decides the same way.
    """
    d = design
    t = d.info(repeats)
    s = max(float(se) if np.isfinite(se) else 0.0, se_floor(n) if floor is None else floor)
    z = 0.0 if delta == 0 else float(delta) / s
    last = repeats >= d.max_repeats
    est: LookEstimate = {"repeats": repeats, "delta": float(delta), "se": s, "z": z, "info_fraction": t}
    if repeats < d.min_repeats:
        return LookDecision(**est, stop=False, verdict=None, reason="before_min_repeats",
                            sentence=f"no look before repeat {d.min_repeats}", bound=None, alpha_spent=0.0,
                            repeated_ci=None)
    c = d.bound_at(repeats, "efficacy")
    spent = float(spend(t, d.alpha / 2, d.spending) * 2) if not last else d.alpha
    rci = [float(delta - c * s), float(delta + c * s)]
    base: LookFields = {**est, "bound": c, "alpha_spent": spent, "repeated_ci": rci}
    saved = max(0, d.max_repeats - repeats)
    where = f"after {repeats} of at most {d.max_repeats} repeats"
    if abs(z) >= c:
        word = "improved" if z > 0 else "regressed"
        return LookDecision(**base, stop=True, verdict=word, reason="efficacy", repeats_saved=saved,
                            sentence=f"{word} {where}: Δ = {_pp(delta)}, |z| = {abs(z):.2f} >= boundary "
                                     f"{c:.2f} (α spent {spent:.3g} of {d.alpha:g})")
    margin_z = margin_bound = None
    if d.tests_margin:
        m = float(d.margin)  # type: ignore[arg-type]
        e = d.bound_at(repeats, "margin")
        z_lo, z_hi = (delta + m) / s, (m - delta) / s
        margin_z, margin_bound = [float(z_lo), float(z_hi)], e
        base["margin_z"], base["margin_bound"] = margin_z, margin_bound
        if d.hypothesis == "noninferiority" and z_lo >= e:
            return LookDecision(**base, stop=True, verdict="noninferior", reason="noninferiority",
                                repeats_saved=saved,
                                sentence=f"noninferior {where}: Δ = {_pp(delta)} > -{100 * m:.2f} pp, "
                                         f"z = {z_lo:.2f} >= boundary {e:.2f} (one-sided α {d.eq_alpha:g})")
        if d.hypothesis != "noninferiority" and min(z_lo, z_hi) >= e:
            return LookDecision(**base, stop=True, verdict="equivalent", reason="equivalence",
                                repeats_saved=saved,
                                sentence=f"equivalent {where}: Δ = {_pp(delta)} within ±{100 * m:.2f} pp, both "
                                         f"one-sided z >= boundary {e:.2f} (α {d.eq_alpha:g} per side)")
    cp = _conditional_power(d, repeats, delta, s)
    base["conditional_power"] = cp
    if last:
        return LookDecision(**base, stop=True, verdict="inconclusive", reason="max_repeats",
                            sentence=f"inconclusive after all {repeats} repeats: Δ = {_pp(delta)}, |z| = "
                                     f"{abs(z):.2f} < boundary {c:.2f}" + _margin_txt(d, margin_z, margin_bound))
    if d.futility and t >= d.futility_from and cp < d.futility_power:
        return LookDecision(**base, stop=True, verdict="inconclusive", reason="futility", repeats_saved=saved,
                            sentence=f"inconclusive (futility) {where}: Δ = {_pp(delta)}; even the remaining "
                                     f"{saved} repeat(s) would reach a verdict with probability {cp:.3f} < "
                                     f"{d.futility_power:g} at the current estimate")
    return LookDecision(**base, stop=False, verdict=None, reason="continue",
                        sentence=f"continue {where}: |z| = {abs(z):.2f} < boundary {c:.2f}")


def _margin_txt(d: SequentialDesign, margin_z: list[float] | None, bound: float | None) -> str:
    if margin_z is None or bound is None or d.margin is None:
        return ""
    what = "non-inferiority" if d.hypothesis == "noninferiority" else "equivalence"
    return f"; {what} within {100 * d.margin:.2f} pp not shown (z {min(margin_z):.2f} < {bound:.2f})"


def _conditional_power(d: SequentialDesign, repeats: int, delta: float, se: float) -> float:
    """Probability of reaching a verdict at the last look if ``delta`` were the true effect (the current
    trend): the final estimate is N(delta, se_K^2 (1 - t)) with se_K = se sqrt(t) (information grows with
    the repeats). The largest over the verdicts the design can reach."""
    t = d.info(repeats)
    if t >= 1:
        return 0.0
    se_k = max(se * math.sqrt(t), 1e-300)
    sd = se_k * math.sqrt(1 - t)
    c = d.bound_at(d.max_repeats, "efficacy")
    cps = [float(ndtr((delta - c * se_k) / sd) + ndtr((-c * se_k - delta) / sd))]
    if d.tests_margin:
        m, e = float(d.margin), d.bound_at(d.max_repeats, "margin")  # type: ignore[arg-type]
        if d.hypothesis == "noninferiority":
            cps.append(float(ndtr((delta + m - e * se_k) / sd)))
        else:
            lo, hi = -m + e * se_k, m - e * se_k
            cps.append(float(max(0.0, ndtr((hi - delta) / sd) - ndtr((lo - delta) / sd))))
    return max(cps)
