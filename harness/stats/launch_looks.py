"""The look statistic of a sequential run with the launch component of :mod:`.launchvar`.

A question-level look (SE = sd(d)/sqrt(n)) cannot see a launch-wide accuracy shift: with a fresh launch per
repeat, max 6 repeats and a log-odds shift of sd 0.1 per launch its false-positive rate is 12-13 %.

**Statistic.** At the look after r repeats, :func:`harness.stats.launchvar.launch_aware_test` over every
launch so far gives Δ̂, SE = sqrt(V) and Satterthwaite's ν. The t statistic is put on the z scale of the
design's boundaries by matching tail probabilities, z = Φ⁻¹(F_ν(t)) (Jennison and Turnbull 2000, §3.8 and
§11.4): the look stops for efficacy when |t| >= t_k = F_ν⁻¹(Φ(c_k)), and the repeated confidence interval Δ̂ ±
t_k SE excludes 0 exactly then. The margin tests use the one-sided boundaries e_k the same way; the
information fraction stays r / max_repeats (Var(Δ̂) ∝ 1/r with a launch per repeat). Futility (superiority
designs only) applies the design's |z| band to the z-equivalent. A look with no launch replication (df_L = 0)
does not stop but at the last look (``inconclusive``).

**The fixed design's safeguards** hold at every look (:func:`decide_look_arms`): an efficacy stop needs the
repeated CI beyond the declared effect (``design.min_effect``); request errors go through the gate of
:mod:`.errorgate`, and when they depend on the arm a look stops with a verdict only if both error bounds reach
it. Each decision carries the stage-wise p of the test that decided
(:func:`harness.stats.group_sequential.stagewise_p`), so a sweep adjusts the p the verdict rests on.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, NotRequired, TypedDict

import numpy as np
from scipy.special import ndtr, ndtri

from .dist import t_ppf, t_sf
from .errorgate import ErrorGate, error_gate, impute_unanswered
from .group_sequential import Z_MAX, SequentialDesign, spend, stagewise_p
from .launches import ArmRuns
from .launchvar import LaunchAwareResult, launch_aware_test
from .outcomes import LookDecision

ESTIMATOR = ("launch-aware t: per question the passes are averaged within a launch, then the launches; "
             "Var(Δ̂) = k·(pooled variance of launch accuracies) + question x arm interaction, Satterthwaite df, "
             "put on the z scale by matching tail probabilities")


class LookErrors(TypedDict):
    """A look's error gate (:func:`decide_look_arms`): its action, p and discordant
    counts, and with ``bound`` the verdict of each error bound."""

    action: str
    p: float
    a_only: int
    b_only: int
    both: int
    bounds: NotRequired[dict[str, str | None]]


class LookDetails(TypedDict, total=False):
    """What a launch-aware look adds (:func:`decide_launch_look`): the t statistic, its df and nominal p, the
    t-scale boundaries, the launch variance and where it came from, the margin tests, the error gate."""

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


def z_equivalent(t: float, df: float) -> float:
    """The normal deviate with the same upper tail as Student's t: sign(t)·Φ⁻¹(1 - F_ν(|t|)) (capped at
    Z_MAX)."""
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
    """The decision at the look after ``repeats`` repeats from a launch-aware estimate (module docstring).
    Returns :class:`LookDecision` with ``z`` the z-equivalent, ``bound`` the
    z-scale boundary and, in ``details``: ``t``, ``df``, ``p`` (the look's nominal two-sided p),
    ``bound_t``, ``estimator``, ``sigma2_launch``, ``df_launch``, ``variance_source``, ``qualification``."""
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
    look: LookEstimate = {"repeats": repeats, "delta": float(delta), "se": float(se), "z": z, "info_fraction": t_info}
    where = f"after {repeats} of at most {d.max_repeats} repeats"
    if repeats < d.min_repeats:
        return LookDecision(**look, stop=False, verdict=None, reason="before_min_repeats",
                            sentence=f"no look before repeat {d.min_repeats}", bound=None, alpha_spent=0.0,
                            repeated_ci=None, details=details)
    c = d.bound_at(repeats, "efficacy")
    spent = float(spend(t_info, d.alpha / 2, d.spending) * 2) if not last else d.alpha
    if est.df_launch == 0:
        details["bound_t"] = None
        if last:
            return LookDecision(**look, stop=True, verdict="inconclusive", reason="max_repeats", bound=c,
                                alpha_spent=spent, repeated_ci=None, details=details,
                                sentence=f"inconclusive after all {repeats} repeats: no launch replication, the "
                                         "launch-to-launch variance could not be estimated")
        return LookDecision(**look, stop=False, verdict=None, reason="no_launch_replication", bound=c,
                            alpha_spent=spent, repeated_ci=None, details=details,
                            sentence=f"continue {where}: one launch per configuration, no launch variance yet")
    tc = t_bound(c, df)
    details["bound_t"] = tc
    rci = [float(delta - tc * se), float(delta + tc * se)] if math.isfinite(tc) else [-1.0, 1.0]
    base: LookFields = {**look, "bound": c, "alpha_spent": spent, "repeated_ci": rci}
    saved = max(0, d.max_repeats - repeats)

    def decided(verdict: str | None, reason: str, sentence: str) -> LookDecision:
        return LookDecision(**base, stop=verdict is not None, verdict=verdict, reason=reason, details=details,
                            repeats_saved=saved if verdict else 0, sentence=sentence)

    base["p"] = p_eff = stagewise_p(d, repeats, z)
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
        margin_z, margin_bound = [z_equivalent(t_lo, df), z_equivalent(t_hi, df)], e
        base["margin_z"], base["margin_bound"] = margin_z, margin_bound
        details["margin_t"], details["margin_bound_t"] = [t_lo, t_hi], te
        p_lo = stagewise_p(d, repeats, margin_z[0], "margin")
        p_eq = max(p_lo, stagewise_p(d, repeats, margin_z[1], "margin"))
        details["p_noninferiority"], details["p_equivalence"] = p_lo, p_eq
        if d.hypothesis == "noninferiority" and t_lo >= te:
            base["p"] = p_lo
            return decided("noninferior", "noninferiority",
                           f"noninferior {where}: Δ = {_pp(delta)} > -{100 * m:.2f} pp, t = {t_lo:.2f} >= "
                           f"boundary {te:.2f} (one-sided α {d.eq_alpha:g}; stage-wise p = {p_lo:.3g})")
        if d.hypothesis != "noninferiority" and min(t_lo, t_hi) >= te:
            base["p"] = p_eq
            return decided("equivalent", "equivalence",
                           f"equivalent {where}: Δ = {_pp(delta)} within ±{100 * m:.2f} pp, both one-sided t "
                           f">= boundary {te:.2f} (α {d.eq_alpha:g} per side; stage-wise p = {p_eq:.3g})")
        if d.hypothesis == "noninferiority":
            base["p"] = p_lo
        elif d.hypothesis == "equivalence":
            base["p"] = p_eq
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


def _gate_details(gate: ErrorGate) -> LookErrors:
    return {"action": gate.action, "p": gate.p, "a_only": gate.a_only, "b_only": gate.b_only, "both": gate.both}


def decide_look_arms(design: SequentialDesign, repeats: int, a: ArmRuns, b: ArmRuns, aa: ArmRuns | None = None
                     ) -> LookDecision:
    """The look after ``repeats`` repeats from the arms' runs (launch ids as recorded; ``aa``: the A/A
    control's runs so far), with the fixed design's safeguards (module docstring): the launch-aware estimate,
    the declared effect, and the error gate (its bounds when the errors depend on the arm)."""
    gate = error_gate(a, b, design.alpha)
    dec = decide_launch_look(design, repeats, launch_aware_test(a, b, aa, alpha=design.alpha))
    details: dict[str, Any] = {**dec.details, "errors": _gate_details(gate)}
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
    where = f"after {repeats} of at most {design.max_repeats} repeats"
    if repeats >= design.max_repeats:
        return replace(dec, stop=True, verdict="inconclusive", reason="errors", details=details, repeats_saved=0,
                       sentence=f"inconclusive {where}: {dec.verdict} without the unanswered questions, but {why}")
    return replace(dec, stop=False, verdict=None, reason="errors", details=details, repeats_saved=0,
                   sentence=f"continue {where}: {dec.verdict} without the unanswered questions, but {why}")
