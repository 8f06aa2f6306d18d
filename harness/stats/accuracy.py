"""The comparison of two arms' score matrices: the design, the test, the interval, errors and the verdict.

Δ is the mean over the questions both arms answered of B's minus A's per-question mean (passes averaged within
a launch, then launches). The test is :mod:`.launchvar`'s, request errors pass the gate of :mod:`.errorgate`;
docs/statistics.md has the reasons and the calibration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import combinations

import numpy as np

from .consistent import consistent_paired
from .equivalence import score_tost, t_tost
from .errorgate import error_gate, impute_unanswered, unanswered
from .guards import robust_effective_table, safe_mde_paired_exact
from .launches import ArmRuns, launch_heterogeneity, question_means
from .launchvar import LaunchAwareResult, launch_aware_test
from .mde import mde_t
from .outcomes import (
    Design,
    ErrorBound,
    ErrorBounds,
    Errors,
    LaunchHeterogeneity,
    LaunchVarianceEstimate,
    Tost,
)
from .repeats import discordance
from .signflip import SignFlip, signflip_test
from .verdict import ALPHA, DEFAULT_MAX_ERROR_RATE, Evidence, Verdict, decide

LAUNCH_AWARE = "launch-aware t-test"
QUESTION_TEST = "question-level test: mid-p sign-flip and Tango score (p = the larger)"
LAUNCH_CI = "launch-aware t interval"
SCORE_CI = "Tango score interval"
SCORE_CI_EXTENDED = "Tango score interval, extended to 0 (the sign-flip test does not reject)"
#: the verdict's condition when no configuration has two launches (one clause of the verdict sentence)
QUALIFIED_NO_LAUNCHES = "valid only if launches do not shift accuracy"
#: ... and when a configuration's launch variance is borrowed from the other's (it has one launch)
QUALIFIED_AA_ONLY = "launch variance from the A/A control's launches: assumes B's launches vary as A's do"
QUALIFIED_B_ONE = "launch variance from A's launches: assumes B's launches vary as A's do"
QUALIFIED_A_ONE = "launch variance from B's launches: assumes A's launches vary as B's do"


# ------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class WithinArmPsi:
    """Mean discordance over pairs of runs of one configuration; ``value`` is the across-launch figure when
    any pair spans two launches (it includes launch noise), else the within-launch one."""

    value: float
    source: str
    across_launches: float | None
    within_launch: float | None
    pairs: int
    #: pairs of runs on two launches, and on one
    across_pairs: int = 0
    within_pairs: int = 0


@dataclass(frozen=True)
class PsiAA:
    """ψ_AA: each arm's within-arm discordance pooled evenly over the arms that have one, its source, and a
    warning when it is ~0 while the A/B discordance is clearly above 0."""

    psi_aa: float | None
    per_arm: dict[str, float | None]
    source: str | None
    warning: str | None


@dataclass(frozen=True)
class Analysis:
    """Statistics of B against A over the questions both arms answered (``keep``), no verdict."""

    keep: np.ndarray
    n: int
    a_means: np.ndarray
    b_means: np.ndarray
    d: np.ndarray
    delta: float
    table: dict[str, float]
    unit: str
    design: Design
    test: str
    p: float
    p_floor: float | None
    ci: list[float]
    ci_method: str
    se: float
    tost: Tost | None
    mde: float | None
    #: the MDE of the test alone, before the error bounds' allowance (set when errors widen ``mde``)
    mde_test: float | None = None
    #: df of the t reference (None: the question-level test)
    df: float | None = None
    #: the condition the verdict holds under (one clause of the verdict sentence), None when unqualified
    qualification: str | None = None
    #: the launch-aware test (its variance components), always computed
    launch: LaunchAwareResult | None = None
    signflip: SignFlip | None = None

    @property
    def launch_variance(self) -> LaunchVarianceEstimate | None:
        lv = self.launch
        if lv is None:
            return None
        measured = lv.df_launch > 0
        return LaunchVarianceEstimate(
            sigma2=lv.sigma2_launch if measured else None,
            sd=math.sqrt(lv.sigma2_launch) if measured else None, df_launch=lv.df_launch,
            source=lv.variance_source, var_launch=lv.var_launch, var_heterogeneity=lv.var_heterogeneity,
            var_question=lv.var_question, k=lv.k,
            launches={"a": lv.launches_a, "aa": lv.launches_aa, "b": lv.launches_b},
            questions=lv.components.questions if lv.components is not None else 0)

    def evidence(self) -> Evidence:
        t = self.tost
        return Evidence(delta=self.delta, p=self.p, test=self.test, ci=self.ci, ci_method=self.ci_method,
                        ci_tost=None if t is None else t.ci, p_equivalence=None if t is None else t.p_equivalence,
                        p_noninferiority=None if t is None else t.p_noninferiority, mde=self.mde,
                        p_floor=self.p_floor)


@dataclass(frozen=True)
class ArmsComparison:
    """:func:`compare_arms`: the analysis, the errors and the verdict."""

    analysis: Analysis
    errors: Errors
    verdict: Verdict
    error_rate: float


# ------------------------------------------------------------------------------------------ design
def describe_design(a: ArmRuns, b: ArmRuns, heterogeneity: LaunchHeterogeneity | None, lv: LaunchAwareResult) -> Design:
    """Which design was run (launches per arm, passes per launch) and what it cannot resolve."""
    la, lb = len(a.launch_ids()), len(b.launch_ids())
    pa, pb = a.passes_per_launch(), b.passes_per_launch()
    if la == 1 and lb == 1:
        kind = "one run per arm" if pa == [1] and pb == [1] else "one launch per arm, repeated passes"
    elif la >= 2 and lb >= 2:
        kind = "several launches per arm"
    else:
        kind = "several launches for one arm only"
    cannot = None  # what the verdict's qualification cannot say in one clause: why, and what resolves it
    if lv.df_launch == 0 and lv.components is None:
        cannot = ("fewer than two questions were answered by every launch: the launch-to-launch variance cannot "
                  "be estimated, and a launch-wide accuracy shift cannot be told from the change")
    elif lv.df_launch == 0:
        cannot = ("one launch per configuration cannot separate a launch-wide accuracy shift (something fixed "
                  "for a server launch that moves every answer alike) from the change: run each arm on several "
                  "launches, or the A/A control on fresh launches")
    notes = []
    if max(pa + pb) > 1:
        notes.append("repeated passes on one launch add evidence only through answers that vary from pass to "
                      "pass; verbatim repeats add none")
    unit = "launch-aware" if lv.df_launch > 0 else "question"
    return Design(kind=kind, launches={"a": la, "b": lb}, passes_per_launch={"a": pa, "b": pb}, unit=unit,
                  launch_heterogeneity=heterogeneity, cannot_resolve=cannot, notes=notes)


# ------------------------------------------------------------------------------------------ A/A noise
def within_arm_psi(arm: ArmRuns) -> WithinArmPsi | None:
    """Mean discordance over pairs of runs of one configuration, split by whether the pair shares a launch."""
    across: list[float] = []
    within: list[float] = []
    for i, j in combinations(range(arm.n_runs), 2):
        v = discordance(arm.scores[i], arm.scores[j])
        if not np.isnan(v):
            (within if arm.launches[i] == arm.launches[j] else across).append(v)
    if not across and not within:
        return None
    return WithinArmPsi(value=float(np.mean(across or within)),
                        source="across launches" if across else "within one launch",
                        across_launches=float(np.mean(across)) if across else None,
                        within_launch=float(np.mean(within)) if within else None, pairs=len(across) + len(within),
                        across_pairs=len(across), within_pairs=len(within))


def psi_aa_block(a_cfg: ArmRuns, b: ArmRuns, psi_ab: float, n: int) -> PsiAA:
    """ψ_AA of the two configurations (see :class:`PsiAA`)."""
    per = {"a": within_arm_psi(a_cfg), "b": within_arm_psi(b)}
    vals = [v.value for v in per.values() if v is not None]
    pooled = float(np.mean(vals)) if vals else None
    sources = sorted({v.source for v in per.values() if v is not None})
    warning = None
    if pooled is not None and psi_ab * n >= 10 and pooled < psi_ab / 4:
        warning = (f"A/A discordance ψ_AA = {100 * pooled:.2f} % is far below the A/B discordance ψ = "
                   f"{100 * psi_ab:.2f} %: the repeated runs probably share a launch and do not sample "
                   "launch-to-launch noise (run the A/A control on a fresh launch); the noise band is not a guide")
    return PsiAA(psi_aa=pooled, per_arm={k: (v.value if v else None) for k, v in per.items()},
                 source=" and ".join(sources) if sources else None, warning=warning)


# ------------------------------------------------------------------------------------------ core
def _qualification(lv: LaunchAwareResult) -> str | None:
    """The condition the verdict holds under: none when both configurations have launches of their own."""
    if lv.df_launch == 0:
        return QUALIFIED_NO_LAUNCHES
    if lv.launches_b == 1:
        return QUALIFIED_AA_ONLY if lv.launches_a == 1 else QUALIFIED_B_ONE
    if lv.launches_a + lv.launches_aa == 1:
        return QUALIFIED_A_ONE
    return None


def analyse(a: ArmRuns, b: ArmRuns, *, aa: ArmRuns | None = None, alpha: float = ALPHA,
            margin: float | None = None, compute_mde: bool = True) -> Analysis:
    """:class:`Analysis` of B against A (no verdict)."""
    am, bm = question_means(a), question_means(b)
    keep = ~(np.isnan(am) | np.isnan(bm))
    n = int(keep.sum())
    if n < 2:
        raise ValueError(f"only {n} question(s) answered by both arms; nothing to compare")
    d = bm[keep] - am[keep]
    delta = float(d.mean())
    lv = launch_aware_test(a, b, aa, alpha=alpha, keep=keep)
    het = launch_heterogeneity([a if aa is None else a.concat(aa), b])
    table = robust_effective_table(d)
    common = {"keep": keep, "n": n, "a_means": am[keep], "b_means": bm[keep], "d": d, "delta": delta,
              "table": table, "design": describe_design(a, b, het, lv), "qualification": _qualification(lv),
              "launch": lv}
    if lv.df_launch > 0:
        return Analysis(**common, unit="launch-aware", test=LAUNCH_AWARE, p=lv.p, p_floor=None, ci=list(lv.ci),
                        ci_method=LAUNCH_CI, se=lv.se, df=lv.df,
                        tost=None if margin is None else t_tost(delta, lv.se, lv.df, margin, alpha),
                        mde=mde_t(lv.se, lv.df, alpha) if compute_mde else None)
    c = consistent_paired(d, alpha)
    mde = None
    if compute_mde:
        # chance disagreement: the part of the (effective) discordance that is not the observed effect
        psi_noise = 2 * min(table["b"], table["c"]) / table["n"]
        mde = safe_mde_paired_exact(table["n"], psi_noise, alpha)
    return Analysis(**common, unit="question", test=QUESTION_TEST, p=c.p, p_floor=c.p_floor, ci=list(c.ci),
                    ci_method=SCORE_CI_EXTENDED if c.extended else SCORE_CI,
                    se=math.sqrt(float(np.sum((d - delta) ** 2))) / n,
                    tost=None if margin is None else score_tost(table["b"], table["c"], table["n"], margin, alpha),
                    mde=mde, signflip=signflip_test(d))


# ------------------------------------------------------------------------------------------ errors
def error_rates(arm: ArmRuns) -> float:
    return float(np.isnan(arm.scores).mean()) if arm.scores.size else 0.0


def error_block(a: ArmRuns, b: ArmRuns, alpha: float = ALPHA) -> Errors:
    """Per-arm error rates (share of runs x questions errored or missing), unanswered questions, the gate and,
    as a diagnostic, the paired sign-flip test (mid-p) over questions of the arms' error shares."""
    ea, eb = np.isnan(a.scores).mean(axis=0), np.isnan(b.scores).mean(axis=0)
    gate = error_gate(a, b, alpha)
    return Errors(rate_a=error_rates(a), rate_b=error_rates(b), unanswered_a=int(unanswered(a).sum()),
                  unanswered_b=int(unanswered(b).sum()),
                  test="paired sign-flip test over questions of the error shares (mid-p)",
                  p=signflip_test(eb - ea).p, gate=gate)


def _qualified(v: Verdict, qualification: str | None) -> Verdict:
    """The verdict with its condition as the last clause of its reason."""
    if qualification is None or v.word == "not_comparable":
        return v
    return Verdict(v.word, f"{v.reason}; {qualification}", v.basis)


def compare_arms(a: ArmRuns, b: ArmRuns, *, aa: ArmRuns | None = None, hypothesis: str = "superiority",
                 alpha: float = ALPHA, margin: float | None = None, min_effect: float | None = None,
                 failures: Sequence[str] = (), max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
                 compute_mde: bool = True) -> ArmsComparison:
    """Analysis and verdict of B against A, with the error bounds when the errors depend on the arm."""
    if a.scores.shape[1] != b.scores.shape[1]:
        raise ValueError("arms are not aligned by question")
    res = analyse(a, b, aa=aa, alpha=alpha, margin=margin, compute_mde=compute_mde)
    errs = error_block(a, b, alpha)
    error_rate = max(errs.rate_a, errs.rate_b)
    verdict_of = partial(decide, hypothesis=hypothesis, alpha=alpha, margin=margin, min_effect=min_effect)
    v = verdict_of(res.evidence(), failures=failures, error_rate=error_rate, max_error_rate=max_error_rate)
    assert errs.gate is not None
    if v.word == "not_comparable" or errs.gate.action != "bound":
        return ArmsComparison(res, errs, _qualified(v, res.qualification), error_rate)
    bound = {}
    for name, va, vb in (("against_b", 1.0, 0.0), ("against_a", 0.0, 1.0)):
        r = analyse(impute_unanswered(a, va), impute_unanswered(b, vb), aa=aa, alpha=alpha, margin=margin,
                    compute_mde=False)
        bound[name] = ErrorBound(delta=r.delta, ci=r.ci, test=r.test, p=r.p, verdict=verdict_of(r.evidence()).word)
    bounds = ErrorBounds(**bound)
    changes = {bounds.against_b.verdict, bounds.against_a.verdict} != {v.word}
    if changes:
        why = (f"request errors could change the verdict: counting B's unanswered questions wrong and A's "
               f"right gives {bounds.against_b.verdict} (Δ = {100 * bounds.against_b.delta:+.2f} pp), "
               f"the reverse {bounds.against_a.verdict} (Δ = {100 * bounds.against_a.delta:+.2f} pp); "
               f"unanswered questions A {errs.unanswered_a}, B {errs.unanswered_b} (error rates A "
               f"{100 * errs.rate_a:.2f} %, B {100 * errs.rate_b:.2f} %); without them: {v.word}, "
               f"Δ = {100 * res.delta:+.2f} pp")
        v = Verdict("inconclusive", why, "errors")
    # the bounds must agree for a verdict: an effect must also clear the adverse bound's shift
    shift = max(res.delta - bounds.against_b.delta, bounds.against_a.delta - res.delta, 0.0)
    if res.mde is not None:
        res = replace(res, mde_test=res.mde, mde=res.mde + shift)
    errs = replace(errs, mde_allowance=shift, bounds=bounds, changes_verdict=changes)
    return ArmsComparison(res, errs, _qualified(v, res.qualification), error_rate)
