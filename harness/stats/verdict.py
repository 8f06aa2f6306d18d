"""The one-word verdict of a comparison, the reason behind it and the test that decided it, for the question
``hypothesis`` asks (superiority, non-inferiority, equivalence). A declared ``min_effect`` is judged on the
interval, not the point estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: the level of the tests when none is given (stats.alpha)
ALPHA = 0.05
#: share of questions lost to request errors above which an arm is not comparable (stats.max_error_rate)
DEFAULT_MAX_ERROR_RATE = 0.02
#: the least share of the reference pass's questions every scoring pass must have scored for a divergence
#: verdict (divergence.min_scored_share)
DEFAULT_MIN_SCORED_SHARE = 0.95
#: the no-op question (``stats.hypothesis=identical``): are B's outputs bit-identical to A's, on an engine whose
#: A/A floor is exactly zero? (:mod:`harness.analysis.identity`; the accuracy test beside it: superiority's)
IDENTICAL = "identical"
IDENTITY_VERDICTS = ("identical", "differs", "not_deterministic")
VERDICTS = ("improved", "regressed", "equivalent", "noninferior", "inconclusive", "not_comparable",
            *IDENTITY_VERDICTS)
HYPOTHESES = ("superiority", "noninferiority", "equivalence")
#: every question a comparison can ask (``stats.hypothesis``)
QUESTIONS = (*HYPOTHESES, IDENTICAL)
#: the questions that need a margin
NEEDS_MARGIN = ("noninferiority", "equivalence")


@dataclass(frozen=True)
class Verdict:
    word: str
    reason: str
    #: what decided the verdict: the test of superiority | equivalence | noninferiority, or ``errors`` (the
    #: verdict changes when errored answers are counted wrong for one arm); None for not_comparable
    basis: str | None = None


@dataclass(frozen=True)
class Evidence:
    """What the verdict is decided from (proportions as fractions)."""

    delta: float
    #: two-sided test of Δ = 0 and its name
    p: float
    test: str
    #: two-sided (1 - α) interval of Δ and its method
    ci: Sequence[float]
    ci_method: str
    #: (1 - 2α) interval (TOST) and the TOST p, when a margin is set
    ci_tost: Sequence[float] | None = None
    p_equivalence: float | None = None
    #: one-sided p of H0 Δ <= -margin, when a margin is set
    p_noninferiority: float | None = None
    mde: float | None = None
    p_floor: float | None = None


def _pp(x: float) -> str:
    return f"{100 * x:+.2f} pp"


def _ci(ci: Sequence[float], level: float, method: str) -> str:
    return f"{100 * level:g} % {method} [{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}] pp"


def at_floor(p: float | None, floor: float | None) -> bool:
    """A resampling p-value at its floor ``1/(R + 1)`` (R resamples): none reached the observed statistic, so
    the p-value is only bounded (the one rule; every report of "p < ..." follows it)."""
    return p is not None and floor is not None and 0 < floor < 1 and p <= floor * (1 + 1e-9)


def format_p(p: float, floor: float | None = None) -> str:
    """``p = 0.0123``; ``p < 1/R`` when a resampling p-value sits at its floor (:func:`at_floor`);
    ``p < 1e-300`` for an underflow."""
    if floor is not None and at_floor(p, floor):
        return f"p < {floor / (1 - floor):.3g}"
    if p <= 0:
        return "p < 1e-300"
    return f"p = {p:.3g}"


def not_comparable(failures: Sequence[str], error_rate: float, max_error_rate: float) -> Verdict | None:
    """``not_comparable`` when an arm failed, a side check failed or errors exceed the limit."""
    problems = list(failures)
    if error_rate > max_error_rate:
        problems.append(f"request errors {100 * error_rate:.2f} % exceed {100 * max_error_rate:.2f} %")
    return Verdict("not_comparable", "; ".join(problems)) if problems else None


def decide(e: Evidence, *, hypothesis: str = "superiority", alpha: float = ALPHA, margin: float | None = None,
           min_effect: float | None = None, failures: Sequence[str] = (), error_rate: float = 0.0,
           max_error_rate: float = DEFAULT_MAX_ERROR_RATE) -> Verdict:
    """Verdict of B against A: ``improved`` / ``regressed`` when the two-sided test rejects at α
    (``regressed`` under non-inferiority only when not non-inferior); ``noninferior`` when the (1 - α)
    interval's lower bound is above -margin; ``equivalent`` when the (1 - 2α) interval lies inside ±margin
    (TOST); else ``inconclusive``."""
    if hypothesis not in HYPOTHESES:
        raise ValueError(f"unknown hypothesis {hypothesis!r} ({' | '.join(HYPOTHESES)})")
    if hypothesis != "superiority" and margin is None:
        raise ValueError(f"hypothesis {hypothesis} needs a margin")
    nc = not_comparable(failures, error_rate, max_error_rate)
    if nc is not None:
        return nc
    level = 1 - alpha
    p_txt = f"{e.test} {format_p(e.p, e.p_floor)}"
    ci_txt = _ci(e.ci, level, e.ci_method)
    sig = e.p < alpha
    lo, hi = float(e.ci[0]), float(e.ci[1])
    bar = min_effect or 0.0
    up = sig and e.delta > 0 and lo > bar
    down = sig and e.delta < 0 and hi < -bar
    eff_txt = f", beyond the declared effect ±{100 * bar:.2f} pp" if min_effect is not None else ""

    def directional() -> Verdict:
        word = "improved" if up else "regressed"
        return Verdict(word, f"Δ = {_pp(e.delta)}, {p_txt} < α = {alpha:g}; {ci_txt}{eff_txt}", "superiority")

    eq = (margin is not None and e.ci_tost is not None and e.p_equivalence is not None
          and e.ci_tost[1] > e.ci_tost[0] and -margin < e.ci_tost[0] and e.ci_tost[1] < margin)
    ni = margin is not None and e.p_noninferiority is not None and lo > -margin
    m_txt = f"±{100 * margin:.2f} pp" if margin is not None else ""

    def equivalent() -> Verdict:
        assert e.ci_tost is not None and e.p_equivalence is not None
        return Verdict("equivalent", f"Δ = {_pp(e.delta)} within {m_txt}: "
                                     f"{_ci(e.ci_tost, 1 - 2 * alpha, e.ci_method)} inside the margin "
                                     f"(TOST {format_p(e.p_equivalence)} < α = {alpha:g})", "equivalence")

    if hypothesis == "equivalence" and eq:
        return equivalent()
    if up:
        return directional()
    if hypothesis == "noninferiority" and ni:
        assert margin is not None and e.p_noninferiority is not None
        extra = ("; B is significantly lower than A (the interval excludes 0) but by less than the margin"
                 if sig and e.delta < 0 else "")
        return Verdict("noninferior", f"B is not worse than A by {100 * margin:.2f} pp or more: lower bound of the "
                                      f"{ci_txt} is above −{100 * margin:.2f} pp (one-sided "
                                      f"{format_p(e.p_noninferiority)} < {alpha / 2:g}){extra}", "noninferiority")
    if down:
        return directional()
    if hypothesis == "superiority" and eq:
        return equivalent()

    mde_txt = f"; detectable effect (80 % power) {100 * e.mde:.2f} pp" if e.mde is not None and e.mde < 1 else ""
    # Only the p of the claim the question asks is quoted: the superiority test's, or the TOST's, or the
    # one-sided non-inferiority test's.
    basis = hypothesis
    if basis == "noninferiority":
        assert margin is not None
        why = (f"non-inferiority not shown: Δ = {_pp(e.delta)}, the lower bound of the {ci_txt} is not above "
               f"−{100 * margin:.2f} pp (one-sided {format_p(e.p_noninferiority or 1.0)} >= {alpha / 2:g})")
        return Verdict("inconclusive", why + mde_txt, basis)
    if basis == "equivalence":
        assert margin is not None
        tci = f"{_ci(e.ci_tost, 1 - 2 * alpha, e.ci_method)} " if e.ci_tost is not None else "the interval "
        why = (f"equivalence not shown: Δ = {_pp(e.delta)}, {tci}not inside {m_txt} "
               f"(TOST {format_p(e.p_equivalence if e.p_equivalence is not None else 1.0)} >= α = {alpha:g})")
        return Verdict("inconclusive", why + mde_txt, basis)
    if sig and min_effect is not None and e.delta != 0:
        why = (f"Δ = {_pp(e.delta)} is significant ({p_txt}) but the {ci_txt} does not exclude effects "
               f"smaller than the declared effect {100 * min_effect:.2f} pp")
    elif sig:   # the test rejects but the interval includes 0 (they are different methods)
        why = f"the test rejects ({p_txt}) but the {ci_txt} includes 0: not shown which way Δ = {_pp(e.delta)} goes"
    else:
        why = f"no detectable difference: Δ = {_pp(e.delta)}, {p_txt} >= α = {alpha:g}; {ci_txt}"
    if margin is not None:
        tci = f" ({_ci(e.ci_tost, 1 - 2 * alpha, e.ci_method)})" if e.ci_tost is not None else ""
        why += f"; not shown within {m_txt}{tci}"
    return Verdict("inconclusive", why + mde_txt, basis)
