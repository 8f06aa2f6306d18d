"""The comparison of two arms' score matrices: the design, the test, the interval, errors and the verdict.

Inference is at the level that is exchangeable under the design that was run:

- **questions** (default): per question, each arm's mean (passes averaged within a launch, then launches;
  errored runs skipped), d_i = B_i - A_i, and the paired sign-flip test of Δ = mean d_i
  (:mod:`.signflip`; mid-p, exact). The interval is Tango's score interval (:mod:`.score`) of the
  effective table of the d_i. Runs that repeat verbatim leave every d_i unchanged: no extra evidence.
- **launches**: when an arm's launches differ in accuracy more than question-level noise explains (Cochran's
  Q over the launches of each arm, p < α), the launch-wide shifts are the noise that matters: the test is
  Welch's t on launch accuracies (an arm with one launch borrows the other arm's launch variance) and the
  interval its t interval. One launch per arm cannot detect such a shift at all: the design says so.

Errors: each arm's error rate, a paired test of whether they differ, and the verdict recomputed with each
arm's unanswered questions (no answered run) counted wrong and the other's right, both ways; if the
verdict changes, it becomes ``inconclusive`` and the reason says why. A question with some answered runs
uses them (its errored runs are skipped), so repeats make transient errors nearly free. The MDE then
includes the adverse bound's shift of Δ (an effect must clear it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from itertools import combinations

import numpy as np

from harness.results.records import JSON
from harness.results.schema import Design, ErrorBound, ErrorBounds, Errors, Tost

from .dist import t_ppf, t_sf
from .equivalence import score_tost, t_tost
from .launches import ArmRuns, launch_accuracies, launch_heterogeneity, question_means
from .mde import mde_paired_exact, mde_t
from .repeats import discordance
from .signflip import SignFlip, signflip_test
from .tango import effective_table, score_interval
from .verdict import DEFAULT_MAX_ERROR_RATE, Evidence, Verdict, decide

SIGNFLIP = "paired sign-flip test over questions (mid-p)"
LAUNCH_T = "Welch t-test over launches"
SCORE_CI = "Tango score interval"
LAUNCH_CI = "t interval over launches"


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
class LaunchT:
    """SE and Welch-Satterthwaite df of Δ from the arms' launch accuracies, and the t test's p."""

    se: float
    df: float
    p: float
    launch_accuracies_a: list[float]
    launch_accuracies_b: list[float]


@dataclass(frozen=True)
class Analysis:
    """Statistics of B against A over the questions both arms answered at least once (no verdict): the
    paired set ``keep``, per-question means, Δ, the test that applies to the design (name, p), the (1 - α)
    interval, TOST / non-inferiority when a margin is set, the MDE and the design."""

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
    signflip: SignFlip | None = None
    launch_t: LaunchT | None = None

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
def describe_design(a: ArmRuns, b: ArmRuns, heterogeneity: dict[str, JSON] | None, unit: str) -> Design:
    """Which design was run (launches per arm, passes per launch) and what it can and cannot resolve."""
    la, lb = len(a.launch_ids()), len(b.launch_ids())
    pa, pb = a.passes_per_launch(), b.passes_per_launch()
    if la == 1 and lb == 1:
        kind = "one run per arm" if pa == [1] and pb == [1] else "one launch per arm, repeated passes"
        cannot = ("one launch per arm cannot separate a launch-wide accuracy shift (something fixed for a "
                  "server launch that moves every answer alike) from the change: run each arm on several "
                  "launches (experiment.restart_per_repeat=true) to resolve it")
    elif la >= 2 and lb >= 2:
        kind = "several launches per arm"
        cannot = (f"launch-wide shifts too small for Cochran's Q over {la} + {lb} launches to detect are treated "
                  "as absent (more launches per arm resolve smaller ones)")
    else:
        kind = "several launches for one arm only"
        cannot = ("the arm with one launch has no launch-to-launch variation of its own; it is assumed equal "
                  "to the other arm's")
    notes = []
    if max(pa + pb) > 1:
        notes.append("repeated passes on one launch add evidence only through answers that vary from pass to "
                      "pass; verbatim repeats add none")
    if unit == "launch":
        notes.append("launches differ in accuracy beyond question-level noise: launches are the unit")
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
def launch_t(a: ArmRuns, b: ArmRuns, keep: np.ndarray, delta: float, a_config: ArmRuns | None = None) -> LaunchT:
    """SE and Welch-Satterthwaite df of Δ from the arms' launch accuracies over the questions ``keep``.
    An arm with one launch borrows the pooled launch variance of the configurations with several
    (``a_config``: arm A's configuration including its A/A launches, default ``a``)."""
    ms = [m[~np.isnan(m)] for m in (launch_accuracies(a, keep), launch_accuracies(b, keep))]
    src = [m[~np.isnan(m)] for m in (launch_accuracies(a_config or a, keep), ms[1])]
    multi = [m for m in src if m.size >= 2]
    pooled_df = sum(m.size - 1 for m in multi)
    if pooled_df == 0:
        raise ValueError("launch-level inference needs a configuration with two or more launches")
    pooled = sum(float(np.var(m, ddof=1)) * (m.size - 1) for m in multi) / pooled_df
    comps = [(float(np.var(m, ddof=1)) / m.size, m.size - 1) for m in ms if m.size >= 2]
    single = [m for m in ms if m.size < 2]
    if single:   # the arms with one launch share one borrowed estimate: one component, its df once
        comps.append((pooled * sum(1.0 / max(m.size, 1) for m in single), pooled_df))
    var = sum(v for v, _ in comps)
    df = var**2 / sum(v**2 / d for v, d in comps) if var > 0 else float(pooled_df)
    se = math.sqrt(var)
    p = float(2 * t_sf(abs(delta) / se, df)) if se > 0 else 1.0
    return LaunchT(se=se, df=float(df), p=p, launch_accuracies_a=ms[0].tolist(), launch_accuracies_b=ms[1].tolist())


def analyse(a: ArmRuns, b: ArmRuns, *, aa: ArmRuns | None = None, alpha: float = 0.05,
            margin: float | None = None, compute_mde: bool = True) -> Analysis:
    """Statistics of B against A over the questions both arms answered at least once (no verdict)."""
    am, bm = question_means(a), question_means(b)
    keep = ~(np.isnan(am) | np.isnan(bm))
    n = int(keep.sum())
    if n < 2:
        raise ValueError(f"only {n} question(s) answered by both arms; nothing to compare")
    d = bm[keep] - am[keep]
    delta = float(d.mean())
    a_cfg = a if aa is None else a.concat(aa)
    het = launch_heterogeneity([a_cfg, b])
    unit = "launch" if het is not None and het["p"] < alpha else "question"
    table = effective_table(d)
    common = {"keep": keep, "n": n, "a_means": am[keep], "b_means": bm[keep], "d": d, "delta": delta,
              "table": table, "unit": unit, "design": describe_design(a, b, het, unit)}
    if unit == "question":
        sf = signflip_test(d)
        lo, hi = score_interval(table["b"], table["c"], table["n"], alpha)
        mde = None
        if compute_mde:
            # chance disagreement: the part of the (effective) discordance that is not the observed effect
            psi_noise = 2 * min(table["b"], table["c"]) / table["n"]
            mde = mde_paired_exact(table["n"], psi_noise, alpha)
        return Analysis(**common, test=SIGNFLIP, p=sf.p, p_floor=sf.p_floor, ci=[float(lo), float(hi)],
                        ci_method=SCORE_CI, se=math.sqrt(float(np.sum((d - delta) ** 2))) / n,
                        tost=None if margin is None else score_tost(table["b"], table["c"], table["n"], margin,
                                                                    alpha),
                        mde=mde, signflip=sf)
    lt = launch_t(a, b, keep, delta, a_cfg)
    tq = float(t_ppf(1 - alpha / 2, lt.df))
    return Analysis(**common, test=LAUNCH_T, p=lt.p, p_floor=None, ci=[delta - tq * lt.se, delta + tq * lt.se],
                    ci_method=LAUNCH_CI, se=lt.se,
                    tost=None if margin is None else t_tost(delta, lt.se, lt.df, margin, alpha),
                    mde=mde_t(lt.se, lt.df, alpha) if compute_mde and lt.se > 0 else None, launch_t=lt)


# ------------------------------------------------------------------------------------------ errors
def error_rates(arm: ArmRuns) -> float:
    return float(np.isnan(arm.scores).mean()) if arm.scores.size else 0.0


def unanswered(arm: ArmRuns) -> np.ndarray:
    """Questions the arm has no answer for in any run (errored or missing everywhere)."""
    return np.isnan(arm.scores).all(axis=0)


def impute_unanswered(arm: ArmRuns, value: float) -> ArmRuns:
    """The arm with its unanswered questions scored ``value`` (1 right, 0 wrong) in every run. A question
    with some answered runs keeps using those: its errored runs are skipped, not imputed."""
    return arm.with_scores(np.where(unanswered(arm)[None, :], value, arm.scores))


def error_block(a: ArmRuns, b: ArmRuns) -> Errors:
    """Per-arm error rates (share of runs x questions errored or missing), the questions each arm has no
    answer for, and the paired sign-flip test (mid-p; the mid-p McNemar test for one run per arm) over
    questions of whether the arms' error shares differ."""
    ea, eb = np.isnan(a.scores).mean(axis=0), np.isnan(b.scores).mean(axis=0)
    return Errors(rate_a=error_rates(a), rate_b=error_rates(b), unanswered_a=int(unanswered(a).sum()),
                  unanswered_b=int(unanswered(b).sum()),
                  test="paired sign-flip test over questions of the error shares (mid-p)",
                  p=signflip_test(eb - ea).p)


def compare_arms(a: ArmRuns, b: ArmRuns, *, aa: ArmRuns | None = None, hypothesis: str = "superiority",
                 alpha: float = 0.05, margin: float | None = None, min_effect: float | None = None,
                 failures: Sequence[str] = (), max_error_rate: float = DEFAULT_MAX_ERROR_RATE,
                 compute_mde: bool = True) -> ArmsComparison:
    """Analysis and verdict of B against A, with the error bounds (see the module docstring)."""
    if a.scores.shape[1] != b.scores.shape[1]:
        raise ValueError("arms are not aligned by question")
    res = analyse(a, b, aa=aa, alpha=alpha, margin=margin, compute_mde=compute_mde)
    errs = error_block(a, b)
    error_rate = max(errs.rate_a, errs.rate_b)
    verdict_of = partial(decide, hypothesis=hypothesis, alpha=alpha, margin=margin, min_effect=min_effect)
    v = verdict_of(res.evidence(), failures=failures, error_rate=error_rate, max_error_rate=max_error_rate)
    if v.word == "not_comparable" or not (errs.unanswered_a or errs.unanswered_b):
        return ArmsComparison(res, errs, v, error_rate)
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
    return ArmsComparison(res, errs, v, error_rate)
