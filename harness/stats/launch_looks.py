"""The look statistic of a sequential run with the launch component of :mod:`.launchvar`.

A question-level look cannot see a launch-wide accuracy shift. The launch-aware t over every launch so far is
put on the z scale of the design's boundaries by matching tail probabilities, z = Φ⁻¹(F_ν(t)) (Jennison and
Turnbull 2000, §3.8), so the repeated CI Δ̂ ± t_k SE excludes 0 exactly when the look stops. Each decision
carries the stage-wise p of the test that decided, so a sweep adjusts the p the verdict rests on.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, NotRequired, TypedDict

import numpy as np
from scipy.special import ndtr, ndtri

from .dist import t_ppf, t_sf
from .errorgate import error_gate, impute_unanswered
from .group_sequential import Z_MAX, SequentialDesign, spend, stagewise_p
from .launches import ArmRuns
from .launchvar import LaunchAwareResult, launch_aware_test
from .outcomes import LookDecision

ESTIMATOR = ("launch-aware t: per question the passes are averaged within a launch, then the launches; "
             "Var(Δ̂) = k·(pooled variance of launch accuracies) + question x arm interaction, Satterthwaite df, "
             "put on the z scale by matching tail probabilities")


class LookErrors(TypedDict):
    """A look's error gate and, with ``bound``, the verdict of each error bound."""

    action: str
    p: float
    a_only: int
    b_only: int
    both: int
    bounds: NotRequired[dict[str, str | None]]


class LookDetails(TypedDict, total=False):
    """What a launch-aware look adds to its :class:`LookDecision` (stored as ``details``)."""

    t: float
    df: float
    p: float
    estimator: str
    sigma2_launch: float
    df_launch: int
    variance_source: str
    qualification: str | None
    n: int
    bound_t: float | None
    crossed: bool
    margin_t: list[float]
    margin_bound_t: float
    p_noninferiority: float
    p_equivalence: float
    errors: LookErrors


def z_equivalent(t: float, df: float) -> float:
    """The normal deviate with the upper tail of Student's t, sign(t)·Φ⁻¹(1 - F_ν(|t|)), capped at Z_MAX."""
    if t == 0 or not math.isfinite(df):
        return float(np.clip(t, -Z_MAX, Z_MAX))
    z = -float(ndtri(float(t_sf(abs(t), df))))
    return math.copysign(min(z, Z_MAX), t)


def t_bound(c: float, df: float) -> float:
    """The t-scale boundary with the tail of the z boundary ``c``: F_ν⁻¹(Φ(c))."""
    q = float(ndtr(-c))
    if q <= 0:
        return math.inf
    return -float(t_ppf(q, df)) if math.isfinite(df) else c


def _pp(x: float) -> str:
    return f"{100 * x:+.2f} pp"


def decide_launch_look(design: SequentialDesign, repeats: int, est: LaunchAwareResult) -> LookDecision:
    """The decision at the look after ``repeats`` repeats from a launch-aware estimate: ``z`` the
    z-equivalent, ``bound`` the z-scale boundary, and the t statistic, its df and nominal two-sided p in
    ``details``."""
    d = design
    t_info = d.info(repeats)
    last = repeats >= d.max_repeats
    delta, se, df = est.delta, est.se, est.df
    t = delta / se if se > 0 else 0.0
    z = z_equivalent(t, df)
    p = min(1.0, 2 * float(t_sf(abs(t), df))) if math.isfinite(df) else est.p
    details: LookDetails = {"t": t, "df": df, "p": p, "estimator": ESTIMATOR, "sigma2_launch": est.sigma2_launch,
                            "df_launch": est.df_launch, "variance_source": est.variance_source,
                            "qualification": est.qualification, "n": est.n}
    look = LookDecision(repeats=repeats, stop=False, verdict=None, reason="before_min_repeats",
                        sentence=f"no look before repeat {d.min_repeats}", delta=float(delta), se=float(se),
                        z=z, bound=None, info_fraction=t_info, alpha_spent=0.0, repeated_ci=None,
                        details=details)
    where = f"after {repeats} of at most {d.max_repeats} repeats"
    if repeats < d.min_repeats:
        return look
    c = d.bound_at(repeats, "efficacy")
    spent = float(spend(t_info, d.alpha / 2, d.spending) * 2) if not last else d.alpha
    if est.df_launch == 0:
        details["bound_t"] = None
        if last:
            return replace(look, stop=True, verdict="inconclusive", reason="max_repeats", bound=c,
                           alpha_spent=spent, sentence=f"inconclusive after all {repeats} repeats: no launch "
                           "replication, the launch-to-launch variance could not be estimated")
        return replace(look, reason="no_launch_replication", bound=c, alpha_spent=spent,
                       sentence=f"continue {where}: one launch per configuration, no launch variance yet")
    tc = t_bound(c, df)
    details["bound_t"] = tc
    rci = [float(delta - tc * se), float(delta + tc * se)] if math.isfinite(tc) else [-1.0, 1.0]
    p_eff = stagewise_p(d, repeats, z)
    look = replace(look, bound=c, alpha_spent=spent, repeated_ci=rci, p=p_eff)
    saved = max(0, d.max_repeats - repeats)

    def decided(verdict: str | None, reason: str, sentence: str) -> LookDecision:
        return replace(look, stop=verdict is not None, verdict=verdict, reason=reason,
                       repeats_saved=saved if verdict else 0, sentence=sentence)

    bar = d.min_effect or 0.0
    crossed = abs(t) >= tc
    beyond = rci[0] > bar if t > 0 else rci[1] < -bar
    details["crossed"] = crossed
    if crossed and beyond:
        word = "improved" if t > 0 else "regressed"
        eff = f", beyond the declared effect ±{100 * bar:.2f} pp" if d.min_effect is not None else ""
        return decided(word, "efficacy",
                       f"{word} {where}: Δ = {_pp(delta)}, |t| = {abs(t):.2f} >= boundary {tc:.2f} (t, "
                       f"{df:.1f} df; z-scale {c:.2f}; stage-wise p = {p_eff:.3g}, α spent {spent:.3g} of "
                       f"{d.alpha:g}){eff}")
    short = (f"; |t| = {abs(t):.2f} crossed {tc:.2f} but the repeated CI [{100 * rci[0]:+.2f}, "
             f"{100 * rci[1]:+.2f}] pp does not exclude effects smaller than the declared "
             f"{100 * bar:.2f} pp") if crossed else ""
    if d.tests_margin:
        m = float(d.margin)  # type: ignore[arg-type]
        e = d.bound_at(repeats, "margin")
        te = t_bound(e, df)
        t_lo, t_hi = (delta + m) / se, (m - delta) / se
        margin_z = [z_equivalent(t_lo, df), z_equivalent(t_hi, df)]
        details["margin_t"], details["margin_bound_t"] = [t_lo, t_hi], te
        p_lo = stagewise_p(d, repeats, margin_z[0], "margin")
        p_eq = max(p_lo, stagewise_p(d, repeats, margin_z[1], "margin"))
        details["p_noninferiority"], details["p_equivalence"] = p_lo, p_eq
        # the p of the question asked: the margin test's under non-inferiority and equivalence
        p_asked = {"noninferiority": p_lo, "equivalence": p_eq}.get(d.hypothesis, p_eff)
        look = replace(look, margin_z=margin_z, margin_bound=e, p=p_asked)
        if d.hypothesis == "noninferiority" and t_lo >= te:
            return decided("noninferior", "noninferiority",
                           f"noninferior {where}: Δ = {_pp(delta)} > -{100 * m:.2f} pp, t = {t_lo:.2f} >= "
                           f"boundary {te:.2f} (one-sided α {d.eq_alpha:g}; stage-wise p = {p_lo:.3g})")
        if d.hypothesis != "noninferiority" and min(t_lo, t_hi) >= te:
            look = replace(look, p=p_eq)  # superiority with a margin too: the test that decided
            return decided("equivalent", "equivalence",
                           f"equivalent {where}: Δ = {_pp(delta)} within ±{100 * m:.2f} pp, both one-sided t "
                           f">= boundary {te:.2f} (α {d.eq_alpha:g} per side; stage-wise p = {p_eq:.3g})")
    if last:
        why = short or f", |t| = {abs(t):.2f} < boundary {tc:.2f}"
        return decided("inconclusive", "max_repeats",
                       f"inconclusive after all {repeats} repeats: Δ = {_pp(delta)}{why}")
    if d.futility and not d.tests_margin and t_info >= d.futility_from:
        band = float(d.futility_z()[repeats - d.min_repeats])
        if abs(z) < band:
            return decided("inconclusive", "futility",
                           f"inconclusive (futility) {where}: Δ = {_pp(delta)}, |z| = {abs(z):.2f} < "
                           f"{band:.2f}: the remaining repeats could not plausibly reach a verdict")
    return decided(None, "continue",
                   f"continue {where}" + (short or f": |t| = {abs(t):.2f} < boundary {tc:.2f}"))


#: verdicts a look stops with on a test (the error bounds must reach the same one)
CLAIMS = ("improved", "regressed", "equivalent", "noninferior")


def decide_look_arms(design: SequentialDesign, repeats: int, a: ArmRuns, b: ArmRuns, aa: ArmRuns | None = None
                     ) -> LookDecision:
    """The look after ``repeats`` repeats from the arms' runs so far, with the error gate (its bounds when the
    errors depend on the arm)."""
    gate = error_gate(a, b, design.alpha)
    dec = decide_launch_look(design, repeats, launch_aware_test(a, b, aa, alpha=design.alpha))
    errors: LookErrors = {"action": gate.action, "p": gate.p, "a_only": gate.a_only, "b_only": gate.b_only,
                          "both": gate.both}
    details: dict[str, Any] = {**dec.details, "errors": errors}
    if gate.action != "bound":
        return replace(dec, details=details)
    bounds = {name: decide_launch_look(design, repeats, launch_aware_test(
        impute_unanswered(a, va), impute_unanswered(b, vb), aa, alpha=design.alpha))
        for name, va, vb in (("against_b", 1.0, 0.0), ("against_a", 0.0, 1.0))}
    details["errors"]["bounds"] = {k: v.verdict for k, v in bounds.items()}
    if dec.verdict not in CLAIMS or all(v.verdict == dec.verdict for v in bounds.values()):
        return replace(dec, details=details)
    why = (f"request errors could change the verdict ({gate.reason}): counting B's unanswered questions wrong "
           f"and A's right the look says {bounds['against_b'].verdict or 'continue'}, the reverse "
           f"{bounds['against_a'].verdict or 'continue'}")
    last = repeats >= design.max_repeats
    return replace(dec, stop=last, verdict="inconclusive" if last else None, reason="errors", details=details,
                   repeats_saved=0, sentence=f"{'inconclusive' if last else 'continue'} after {repeats} of at most "
                   f"{design.max_repeats} repeats: {dec.verdict} without the unanswered questions, but {why}")
