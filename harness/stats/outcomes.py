"""What the statistics return that abh stores: plain frozen dataclasses and JSON blocks, no numpy (every
reader of a stored comparison imports them). ``harness.results.schema`` embeds them as they are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict


def _omit_none() -> Any:
    """A field left out of the stored document while it is None (``harness.results.records`` reads it)."""
    return field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class ErrorGate:
    """The arms' unanswered questions and whether their pattern depends on the arm (stored as comparison.json
    ``errors.gate``)."""

    unanswered_a: int
    unanswered_b: int
    #: unanswered by A only / by B only / by both
    a_only: int
    b_only: int
    both: int
    p: float
    alpha: float
    #: none | drop | bound
    action: str
    reason: str
    test: str = "exact McNemar test of the per-question unanswered indicators (A vs B)"


class LaunchHeterogeneity(TypedDict):
    """Cochran's Q over each arm's launches, summed (:func:`harness.stats.launches.launch_heterogeneity`)."""

    test: str
    q: float
    df: int
    p: float


@dataclass(frozen=True)
class Design:
    """Which design was run (launches per arm, passes per launch) and what it can and cannot resolve."""

    kind: str
    launches: dict[str, int]
    passes_per_launch: dict[str, list[int]]
    #: the unit of inference: ``launch-aware`` (question x launch, launch variance from every launch) or
    #: ``question`` (no configuration with two launches); files of abh <= 0.2 may say ``launch``
    unit: str
    #: Cochran's Q over the launches of each arm (None: no arm with two launches); a diagnostic only
    launch_heterogeneity: LaunchHeterogeneity | None
    #: what this design (or these data) cannot resolve; None when nothing
    cannot_resolve: str | None
    notes: list[str]


@dataclass(frozen=True)
class LaunchVarianceEstimate:
    """The launch component of the accuracy test: σ²_L, where it came from, and the parts of Var(Δ̂);
    ``sigma2`` None: no configuration with two launches (the question-level test, qualified)."""

    sigma2: float | None
    #: sd of a launch's accuracy shift, sqrt(sigma2) (fraction)
    sd: float | None
    df_launch: int
    source: str
    #: k σ-part, question x arm interaction, question-level paired variance S²_d/n; k = 1/L_A + 1/L_B
    var_launch: float
    var_heterogeneity: float
    var_question: float
    k: float
    #: launches of arm A, of the A/A control, of arm B
    launches: dict[str, int]
    #: questions every launch answered (the variance components are over these)
    questions: int


@dataclass(frozen=True)
class ErrorBound:
    """The comparison recomputed with one arm's unanswered questions counted wrong and the other's right."""

    delta: float
    ci: list[float]
    test: str
    p: float | None
    verdict: str


@dataclass(frozen=True)
class ErrorBounds:
    against_b: ErrorBound
    against_a: ErrorBound


@dataclass(frozen=True)
class Errors:
    """Request errors of a comparison: rates, unanswered questions, a paired test of their difference, and
    the bounds of the verdict they could move."""

    rate_a: float
    rate_b: float
    unanswered_a: int
    unanswered_b: int
    test: str
    p: float
    #: how far the adverse bound moves Δ (an effect must clear it; added to the MDE)
    mde_allowance: float | None = _omit_none()
    bounds: ErrorBounds | None = None
    changes_verdict: bool = False
    #: whether the errors depend on the arm, and what was done: drop the unanswered questions, or bound
    gate: ErrorGate | None = _omit_none()


@dataclass(frozen=True)
class Tost:
    """Equivalence (TOST at α: the 1 - 2α interval inside ±margin) and non-inferiority (one-sided at α/2)."""

    method: str
    margin: float
    alpha: float
    p_noninferiority: float
    p_nonsuperiority: float
    p_equivalence: float
    ci: list[float]
    ci_level: float
    noninferiority_alpha: float
    noninferior: bool
    equivalent: bool


@dataclass(frozen=True)
class LookDecision:
    """The outcome of one look of a sequential run (:mod:`harness.stats.group_sequential`), as made and as
    stored in the ``sequential`` record. ``stop`` false means: run another repeat of both arms."""

    repeats: int
    stop: bool
    verdict: str | None  # improved | regressed | equivalent | noninferior | inconclusive | None (continue)
    reason: str  # efficacy | equivalence | noninferiority | futility | max_repeats | before_min_repeats | continue
    sentence: str
    delta: float
    se: float
    z: float
    bound: float | None
    info_fraction: float
    alpha_spent: float
    repeated_ci: list[float] | None
    conditional_power: float | None = None
    margin_z: list[float] | None = None
    margin_bound: float | None = None
    repeats_saved: int = 0
    #: what the estimator adds (a launch-aware look: ``harness.stats.launch_looks.LookDetails``); stored with
    #: non-finite numbers as null
    details: Mapping[str, Any] = field(default_factory=dict)
    #: questions the look's estimate is over (None in looks stored before it was recorded)
    n: int | None = None
    #: the stage-wise ordering p of the test that decided (:func:`stagewise_p`): p < α exactly when it
    #: stopped with that test's verdict; None where the estimator does not compute it
    p: float | None = None


@dataclass(frozen=True)
class DivergenceTest:
    """The per-question divergence test (:func:`harness.stats.kld.divergence_test`), stored as comparison.json
    ``divergence.per_question``: the verdict's test with one A/A and one B launch, else a diagnostic."""

    test: str
    p: float
    p_floor: float | None
    p_at_floor: bool
    effect: float
    effect_ci: list[float] | None
    effect_ci_method: str
    effect_se: float | None
    effect_mde: float | None
    n_resamples: int
    #: diverged | indistinguishable, at ``alpha``, over ``questions`` (files written before them: "", None)
    verdict: str = ""
    alpha: float | None = _omit_none()
    questions: int | None = _omit_none()


@dataclass(frozen=True, kw_only=True)
class LaunchDivergence:
    """The launch-level divergence test (:func:`harness.stats.kld_launches.launch_divergence_test`), stored as
    comparison.json ``divergence.launch_test`` with what the analysis adds (``ratio_mde``, ``sd_log``, the
    dirs)."""

    method: str
    p: float
    t: float | None
    df: float | None
    #: geometric-mean ratio of B's launch KLDs over A's, its (1 - α) t interval, and the ratio this run
    #: could detect at 80 % power (from the launches' pooled sd of log KLD)
    ratio: float
    ratio_ci: tuple[float, float] | None
    ratio_mde: float | None = None
    #: mean over B's launches minus mean over A's (nats/token)
    effect: float
    sd_log: float | None = None
    #: exact permutation p over the launch labels (floor 1/arrangements)
    p_permutation: float | None
    arrangements: int | None
    launches_a: int
    launches_b: int
    #: each launch's token-weighted mean KLD against the reference (nats/token)
    kld_launch_a: tuple[float, ...]
    kld_launch_b: tuple[float, ...]
    #: the passes of each side, in order (the floor and the compared pass first)
    dirs_a: list[str] = field(default_factory=list)
    dirs_b: list[str] = field(default_factory=list)
    qualification: str | None = None
    #: diverged | indistinguishable at ``alpha`` (files written before them: "", None)
    verdict: str = ""
    alpha: float | None = _omit_none()
    #: the per-question sign-flip test on launch-averaged KLDs (diagnostic; the verdict when one launch each)
    per_question: DivergenceTest | None = _omit_none()
