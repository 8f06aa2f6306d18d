"""Typed, versioned models of every result abh stores, and the one loader and writer of each file kind.

Every stored JSON document carries ``kind`` and ``schema_version``:

======================  ========================  ==============================================
file                    kind                      model
======================  ========================  ==============================================
``eval.json``           ``abh.eval``              :class:`EvalMeta` (what one eval asked, of whom)
``summary.json``        ``abh.eval.summary``      :class:`EvalSummary` (in an eval directory)
``samples.jsonl``       (rows of the eval above)  :class:`SampleRecord`, one per question
``manifest.json``       ``abh.run``               ``harness.orchestrate.rundir.RunManifest``
``summary.json``        ``abh.run.summary``       :class:`RunSummary` (in a run directory)
``comparison.json``     ``abh.comparison``        :class:`Comparison`
``sweep_summary.json``  ``abh.sweep``             :class:`SweepSummary`
``tasks.json``          ``abh.tasks``             :class:`TasksComparison` (several tasks of one run)
======================  ========================  ==============================================

``samples.jsonl`` and ``prompts.jsonl`` rows have their ``eval.json``'s ``schema_version``. A document of
another kind, or of a ``schema_version`` this abh does not read, is a one-line :class:`SchemaError` (exit 2):
a future format is refused, never misread. Computed results are frozen ``Record`` dataclasses, every field
checked on loading; the eval's own files are ``TypedDict`` (``total=False``). The kinds, versions and checks, and
the eval's own models, are :mod:`harness.results.eval_schema`'s (named here too): an eval imports those alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypedDict, TypeVar

from harness.results.eval_schema import (  # the documents' kinds and an eval's own records, named here too
    COMPARISON,
    COMPARISON_FILE,
    EVAL,
    EVAL_FILE,
    EVAL_SUMMARY,
    EVAL_SUMMARY_FILE,
    FINGERPRINT,
    MANIFEST,
    MANIFEST_FILE,
    PLAN,
    PROMPTS_FILE,
    READS,
    RUN_SUMMARY,
    RUN_SUMMARY_FILE,
    SAMPLES_FILE,
    SCHEMA_VERSION,
    SCORES,
    SWEEP,
    SWEEP_FILE,
    TASKS,
    TASKS_DIR,
    TASKS_FILE,
    WRITES,
    EvalMeta,
    EvalSession,
    EvalSummary,
    PromptRow,
    SampleRecord,
    SchemaError,
    ServerFacts,
    check,
    dump,
    load,
    load_eval_meta,
    load_eval_summary,
    load_manifest,
    stamp,
    usual_record,
    write_eval_meta,
    write_eval_summary,
    write_manifest,
)
from harness.results.records import JSON, Record, RecordError, omit_none
from harness.results.routing_record import Routing
from harness.stats.outcomes import (
    Design,
    DivergenceTest,
    Errors,
    LaunchDivergence,
    LaunchVarianceEstimate,
    LookDecision,
    Tost,
)

R = TypeVar("R", bound=Record)


# ------------------------------------------------------------------------------------------ comparison
@dataclass(frozen=True)
class ArmNames(Record):
    a: str
    b: str


@dataclass(frozen=True)
class ArmResult(Record):
    """One arm of a comparison: its accuracy over the compared questions, intervals and runs."""

    accuracy: float
    wilson: list[float]
    bootstrap: list[float]
    #: each run's accuracy over the compared questions (None: a run with no answer among them)
    repeats: list[float | None]
    n_runs: int
    launches: list[str]
    error_rate: float
    dirs: list[str]
    #: what ``bootstrap`` resamples (questions only: not the launch-to-launch variation)
    bootstrap_kind: str | None = omit_none()
    #: the two-level (launches, then questions) bootstrap interval; absent with one launch
    bootstrap_launch: list[float] | None = omit_none()


@dataclass(frozen=True)
class Arms(Record):
    a: ArmResult
    b: ArmResult


@dataclass(frozen=True)
class TopQuestion(Record):
    """One question of the divergence's "diverge most" list: its KLD against B and against the floor, and
    where the greedy texts part."""

    question: int
    tokens: int
    kld: float
    kld_aa: float | None
    d: float | None
    same_top_rate: float
    rms_dlogprob: float | None
    text_identical: bool | None
    first_divergence: int | None
    first_divergence_char: int | None
    first_divergence_source: str | None
    first_divergence_span: list[int] | None
    text_identical_aa: bool | None
    first_divergence_aa: int | None


@dataclass(frozen=True)
class Histogram(Record):
    """Counts over log-spaced KLD bins (``KldHistogram.edges``); exact zeros apart (they have no log)."""

    zeros: int
    counts: list[int]


@dataclass(frozen=True)
class KldHistogram(Record):
    """Per-token and per-question KLD histograms of A‖B and of the A/A floor."""

    edges: list[float]
    token_ab: Histogram
    question_ab: Histogram
    token_aa: Histogram | None = omit_none()
    question_aa: Histogram | None = omit_none()


@dataclass(frozen=True)
class Divergence(Record):
    """``comparison.json`` ``divergence``: the reference arm's greedy texts scored by its own server, the
    other arm's and a fresh launch of its own (the A/A floor, ``*_aa``); KLD in nats per reference token."""

    verdict: str  # diverged | indistinguishable | not_measured
    verdict_reason: str
    alpha: float | None = None
    p: float | None = None
    p_floor: float | None = None
    p_at_floor: bool | None = None
    n_resamples: int | None = None
    test: str | None = None
    effect: float | None = None
    effect_ci: list[float] | None = None
    effect_ci_method: str | None = None
    effect_se: float | None = None
    effect_mde: float | None = None
    kld_mean: float | None = None
    kld_mean_aa: float | None = None
    kld_max: float | None = None
    kld_max_aa: float | None = None
    kld_percentiles: dict[str, float | None] | None = None
    kld_percentiles_aa: dict[str, float | None] | None = None
    same_top_rate: float | None = None
    same_top_rate_aa: float | None = None
    rms_dlogprob: float | None = None
    rms_dlogprob_aa: float | None = None
    text_identical_rate: float | None = None
    text_identical_rate_aa: float | None = None
    text_questions: int = 0
    text_questions_aa: int = 0
    first_divergence_median: float | None = None
    first_divergence_median_aa: float | None = None
    tokens: int = 0
    questions: int = 0
    questions_total: int | None = None
    questions_dropped: dict[str, int] = field(default_factory=dict)
    top_k: int | None = None
    kl_method: str = ""
    kld_histogram: KldHistogram | None = None
    top_questions: list[TopQuestion] = field(default_factory=list)
    dirs: dict[str, str | None] = field(default_factory=dict)
    #: per pass (ref, ab, aa): wall_s, errors, questions, tokens, top_k, engine, url of its scores.json
    scoring: dict[str, dict[str, JSON]] = field(default_factory=dict)
    #: whose greedy texts are the reference (``a`` unless ``divergence.reference`` says ``b``)
    reference: str = "a"
    #: the launch-level test (the verdict's with 3+ launches besides the reference's), the per-question test
    launch_test: LaunchDivergence | None = omit_none()
    per_question: DivergenceTest | None = omit_none()
    #: the assumption the verdict rests on (e.g. one A/A launch: a constant noise scale across launches)
    qualification: str | None = omit_none()
    #: passes left out of the launch-level test, and why (not scored, a launch scored twice)
    launches_skipped: dict[str, str] = field(default_factory=dict)
    #: the questions whose greedy texts part (A vs B, A vs A') by their first diverging token: a near-tie (a
    #: logprob gap within ``near_tie_nats``), a real divergence, or unclassified
    partings: PartingCounts | None = omit_none()
    partings_aa: PartingCounts | None = omit_none()
    near_tie_nats: float | None = omit_none()


@dataclass(frozen=True)
class Parting(Record):
    """Where one question's two outputs part: the first differing character and each text's word there; with
    scoring passes, the token position, both candidate tokens and the reference pass's logprob gap between
    them, classified ``near_tie`` or ``divergence``."""

    question: int
    #: first differing character of the two output texts (None: the texts are equal and the logprobs differ)
    char: int | None
    #: each side's text at the parting (the word that starts there, cut short)
    text_a: str
    text_b: str
    position: int | None = None
    token_a: int | None = None
    token_b: int | None = None
    #: nats, the reference pass's logprob of token_a minus token_b's (|gap| against near_tie_nats: the kind)
    gap: float | None = None
    #: token_b is not in the reference pass's top-k: ``gap`` is a lower bound
    gap_is_bound: bool = False
    #: near_tie | divergence | None (no scoring pass, or it does not show the other side's token)
    kind: str | None = None


@dataclass(frozen=True)
class PartingCounts(Record):
    """How many questions' outputs part, and of them how many at a near-tie, at a real divergence, unclassified."""

    parted: int = 0
    near_tie: int = 0
    divergence: int = 0
    unclassified: int = 0


@dataclass(frozen=True)
class Identity(Record):
    """``comparison.json`` ``identity`` (``stats.hypothesis=identical``): the no-op proof. First the floor
    (every other pass of arm A bit-identical to A's first), then A against B: identical on every compared
    question, with the exact upper bound on the per-question difference rate, or the differing ones listed."""

    verdict: str  # identical | differs | not_deterministic | not_measured
    reason: str
    #: questions every pass answered (the proof's n) and those of them whose outputs differ between A and B
    questions: int
    differing: int
    #: one-sided (1 - alpha) Clopper-Pearson upper bound on the per-question difference rate (None: no floor)
    upper_bound: float | None
    alpha: float
    near_tie_nats: float
    #: A's passes compared with its first (repeats and the A/A control's), and whether logprobs were compared
    floor_passes: int
    floor_logprobs: str  # identical | differ | not_scored
    #: the first difference on the floor, in words (question, position, both tokens), None when there is none
    floor_difference: str | None
    differing_questions: list[int] = field(default_factory=list)
    partings: list[Parting] = field(default_factory=list)
    partings_aa: list[Parting] = field(default_factory=list)
    counts: PartingCounts = field(default_factory=PartingCounts)
    counts_aa: PartingCounts = field(default_factory=PartingCounts)
    #: B's scoring pass against A's reference pass (identical | differ | not_scored): said, not decided on
    logprobs_ab: str = "not_scored"


class IdenticalShare(TypedDict):
    """One arm's share of outputs identical between two of its passes: overall, within, across launches."""

    share: float | None
    within_launch: float | None
    across_launches: float | None
    pairs: int
    questions: int


class IdenticalOutputs(TypedDict, total=False):
    """``comparison.json`` ``identical_outputs``: each arm's :class:`IdenticalShare`, the temperature and the
    arms flagged (no output identical across passes at temperature 0)."""

    a: IdenticalShare
    b: IdenticalShare
    #: as the evals recorded it (bench_sglang's recipes: the int 0), kept so when read back
    temperature: int | float | None
    flagged: list[str]
    note: str


@dataclass(frozen=True)
class Comparison(Record):
    """``comparison.json``: arm B against arm A over stored evals (proportions as fractions). ``compare_dirs``
    computes the statistics; its callers add what only they know (``arm_names``, ``command``, ``divergence``,
    a sequential decision). ``test`` and ``p`` are the test and p that decided the verdict."""

    simulated: bool
    hypothesis: str
    verdict: str
    verdict_reason: str
    test: str | None
    p: float | None
    test_alpha: float | None
    p_floor: float | None
    n: int
    n_total: int
    dropped_errors: int
    error_rate: float
    error_rate_per_run: dict[str, float]
    max_error_rate: float
    error_rate_exceeded: bool
    errors: Errors
    failures: list[str]
    alpha: float
    seed: int
    n_resamples: int
    dataset_sha256: str | None
    recipe: JSON
    design: Design
    arms: Arms
    aa_dirs: list[str]
    table_source: str
    #: the paired table of per-question arm means (question mass: whole counts, integers, for one run per arm)
    both: int | float
    a_only: int | float
    b_only: int | float
    neither: int | float
    psi: float
    delta: float
    delta_se: float
    delta_ci: list[float]
    delta_ci_level: float
    delta_ci_method: str
    delta_ci_unpaired: list[float]
    psi_aa: float | None
    psi_aa_per_arm: dict[str, float | None]
    psi_aa_source: str | None
    noise_band: list[float] | None
    repeats_effective: float
    mde: float | None
    mde_method: str
    mde_unpaired: float
    detectable_floor: float
    margin: float | None
    min_effect: float | None
    tost: Tost | None
    warnings: list[str]
    flips: list[int]
    #: secondary figures, for reading; none of them decided the verdict
    diagnostics: dict[str, JSON]
    #: the condition the verdict holds under (e.g. "valid only if launches do not shift accuracy"), None when
    #: it needs none; also in ``verdict_reason``
    qualification: str | None = omit_none()
    #: degrees of freedom of the t reference of ``delta_ci`` (None: the question-level test)
    delta_df: float | None = omit_none()
    #: the launch component of the test: σ²_L, its source, the parts of Var(Δ̂)
    launch_variance: LaunchVarianceEstimate | None = omit_none()
    # owned by the callers of compare_dirs
    arm_names: ArmNames | None = omit_none()
    command: list[str] | None = omit_none()
    #: present when the compared evals record scoring passes (``abh run`` with divergence enabled)
    divergence: Divergence | None = omit_none()
    #: the MoE routed experts of the divergence's launches against the A/A floor (harness.analysis.routing)
    routing: Routing | None = omit_none()
    #: a sequential run's looks and decision; its verdict is then ``verdict``, the fixed design's beside it
    sequential: SequentialRecord | None = omit_none()
    verdict_fixed: str | None = omit_none()
    verdict_reason_fixed: str | None = omit_none()
    #: per arm, the share of outputs identical across its passes; the arms with none at temperature 0
    identical_outputs: IdenticalOutputs | None = omit_none()
    #: the fixed design's test, p and interval of the same data, when the sequential decision replaced them
    test_fixed: str | None = omit_none()
    p_fixed: float | None = omit_none()
    delta_ci_fixed: list[float] | None = omit_none()
    #: the verdict is about these two server instances only (no configuration has two launches): ``--fail-on``
    #: does not act on it unless ``assumptions`` holds ``no_launch_shift``
    instances_only: bool = False
    #: what the user stated and the verdict may rest on: ``no_launch_shift`` (``--assume-no-launch-shift``)
    assumptions: list[str] = field(default_factory=list)
    #: how launches were counted for evals that record no launch id: ``per_server`` or ``per_pass``
    launch_ids_missing: str | None = omit_none()
    #: the no-op proof (``hypothesis: identical``); absent otherwise
    identity: Identity | None = omit_none()


# ------------------------------------------------------------------------------------------ cost
@dataclass(frozen=True)
class CostBlock(Record):
    """GPU time of one role (or the total): sums over its server launches and evals (harness.analysis.cost)."""

    launches: int = 0
    evals: int = 0
    launch_s: float = 0.0
    eval_s: float = 0.0
    server_s: float = 0.0
    gpus: int = 0
    gpu_hours: float = 0.0
    #: the divergence's scoring passes this role's servers ran (their GPU-hours are part of ``gpu_hours``)
    scoring_passes: int = 0
    scoring_s: float = 0.0
    scoring_gpu_hours: float = 0.0


@dataclass(frozen=True)
class Cost(Record):
    """``cost`` of a run summary, the manifest and a sweep summary: per role and in total. ``aa`` only when
    the A/A control had launches of its own; ``estimated`` names what was inferred from timestamps."""

    a: CostBlock
    b: CostBlock
    total: CostBlock
    aa: CostBlock | None = omit_none()
    estimated: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------ sequential
@dataclass(frozen=True)
class SequentialRecord(Record):
    """``sequential`` of a sequential run (experiment.sequential=true), in the manifest (as the looks happen)
    and in summary.json / comparison.json: the design, every look and the outcome."""

    design: dict[str, JSON]
    estimator: str
    looks: list[LookDecision]
    stopped: bool
    repeats_run: int
    max_repeats: int
    verdict: str | None
    reason: str | None
    sentence: str | None
    repeats_saved: int
    gpu_hours_per_repeat: float | None
    gpu_hours_saved: float | None


# ------------------------------------------------------------------------------------------ run
@dataclass(frozen=True)
class RunDivergence(Record):
    """The headline of comparison.json's ``divergence``, in a run summary."""

    verdict: str
    kld_mean: float | None
    kld_mean_aa: float | None
    p: float | None
    effect: float | None


@dataclass(frozen=True)
class RunSummary(Record):
    """``summary.json`` of a run directory: the verdict and the exit code of ``abh run`` / ``abh ab``. A run
    that stopped before its comparison has only the first four fields (its reason in ``verdict_reason``)."""

    experiment: str
    verdict: str
    verdict_reason: str | None
    exit_code: int
    simulated: bool = False
    n: int | None = None
    delta: float | None = None
    delta_ci: list[float] | None = None
    test: str | None = None
    p: float | None = None
    mde: float | None = None
    accuracy: dict[str, float] = field(default_factory=dict)
    arms: dict[str, str] = field(default_factory=dict)
    repeats: int | None = None
    aa_control: bool | None = None
    #: the design as run: server launches per role, passes per launch, concurrency, restarts
    design: dict[str, JSON] | None = omit_none()
    #: the headline of comparison.json's ``divergence`` (when scored)
    divergence: RunDivergence | None = omit_none()
    #: GPU time per role and in total (harness.analysis.cost)
    cost: Cost | None = omit_none()
    #: a sequential run's looks and why it stopped; its verdict is then ``verdict``
    sequential: SequentialRecord | None = omit_none()
    #: the verdict in the one line every surface shows (harness.report.headline)
    headline: str | None = omit_none()
    #: a run of several tasks: each task's verdict after Holm (``verdict`` is then the overall decision)
    tasks: dict[str, str] | None = omit_none()


# ------------------------------------------------------------------------------------------ several tasks
@dataclass(frozen=True)
class GroupRow(Record):
    """One group of a task's questions (MMLU: a subject or a category): both arms' accuracy on it."""

    group: str
    n: int
    accuracy_a: float
    accuracy_b: float
    delta: float


@dataclass(frozen=True)
class TaskRow(Record):
    """One task of a multi-task comparison: its own comparison's headline and its verdict after Holm."""

    key: str
    task: str
    recipe: str
    dir: str
    n: int
    accuracy_a: float
    accuracy_b: float
    delta: float
    delta_ci: list[float]
    test: str | None
    #: the two-sided superiority test's p (None: the verdict rested on another test, or none)
    p: float | None
    #: ``p`` adjusted by Holm across the run's tasks (1.0 where ``p`` is None)
    p_holm: float
    verdict: str
    verdict_holm: str
    verdict_reason: str
    error_rate: float
    simulated: bool = False
    upstream: str | None = omit_none()
    #: accuracy by group (MMLU: by subject, then by category), when the task's questions have groups
    groups: list[GroupRow] = field(default_factory=list)
    categories: list[GroupRow] = field(default_factory=list)


@dataclass(frozen=True)
class TasksComparison(Record):
    """``tasks.json``: the tasks of one run (or of one pair of lm-eval sample files), a verdict per task and one
    overall decision with the family-wise error rate controlled across the tasks (Holm)."""

    decision: str
    decision_reason: str
    alpha: float
    correction: str
    hypothesis: str
    rows: list[TaskRow]
    simulated: bool = False
    arm_names: ArmNames | None = omit_none()
    command: list[str] | None = omit_none()


# ------------------------------------------------------------------------------------------ sweep
@dataclass(frozen=True)
class SweepRow(Record):
    """One comparison of a sweep: its job, what it swept, its statistics and its Holm/BH-adjusted verdict."""

    job: str
    dir: str
    label: str
    missing: bool = False
    #: the job's own overrides (``engine.flip_rate=0.02``, secrets redacted): what its directory ``jobN`` ran
    overrides: list[str] = field(default_factory=list)
    n: int | None = None
    accuracy_a: float | None = None
    accuracy_b: float | None = None
    delta: float | None = None
    delta_ci: list[float] | None = None
    p: float | None = None
    p_value_floor: float | None = None
    p_value_at_floor: bool = False
    p_adjusted: float | None = None
    mde: float | None = None
    #: divergence (when the job scored): its verdict after the sweep's adjustment, the mean KLD A‖B and A‖A'
    divergence: str | None = None
    kld: float | None = None
    kld_aa: float | None = None
    #: the divergence test's p, adjusted across the jobs that measured it, and the verdict before adjustment
    divergence_p: float | None = omit_none()
    divergence_p_adjusted: float | None = omit_none()
    divergence_unadjusted: str | None = omit_none()
    verdict: str = "not_comparable"
    verdict_unadjusted: str | None = None
    alpha: float | None = None
    test_alpha: float | None = None
    simulated: bool = False
    gpu_hours: float | None = None
    #: the test whose p is adjusted, and the condition the comparison's verdict holds under
    test: str | None = None
    qualification: str | None = None


@dataclass(frozen=True)
class SweepSummary(Record):
    experiment: str | None
    correction: str
    comparisons: list[SweepRow]
    missing: list[str]
    simulated: bool
    #: the jobs' costs summed (harness.analysis.cost.sum_costs)
    cost: Cost | None = omit_none()


def load_record(path: str | Path, kind: str, cls: type[R]) -> R:
    """Read, check and type one stored result document (SchemaError naming the field that does not fit)."""
    doc = load(path, kind)
    try:
        return cls.from_doc({k: v for k, v in doc.items() if k not in ("kind", "schema_version")})
    except RecordError as e:
        raise SchemaError(f"{path}: {e}") from None


def dump_record(kind: str, path: str | Path, record: Record) -> None:
    """Write one result record of ``kind`` atomically (its one serialisation: :func:`Record.to_doc`)."""
    dump(kind, path, record.to_doc())


# One loader and one writer per file kind.
load_run_summary = partial(load_record, kind=RUN_SUMMARY, cls=RunSummary)
load_comparison = partial(load_record, kind=COMPARISON, cls=Comparison)
load_sweep_summary = partial(load_record, kind=SWEEP, cls=SweepSummary)
load_tasks = partial(load_record, kind=TASKS, cls=TasksComparison)
write_run_summary: Callable[[str | Path, RunSummary], None] = partial(dump_record, RUN_SUMMARY)
write_comparison: Callable[[str | Path, Comparison], None] = partial(dump_record, COMPARISON)
write_sweep_summary: Callable[[str | Path, SweepSummary], None] = partial(dump_record, SWEEP)
write_tasks: Callable[[str | Path, TasksComparison], None] = partial(dump_record, TASKS)


def run_summary(c: Comparison, *, experiment: str, repeats: int, aa_control: bool, exit_code: int,
                design: dict[str, JSON] | None = None, cost: Cost | None = None,
                sequential: SequentialRecord | None = None, headline: str | None = None) -> RunSummary:
    """A run directory's ``summary.json``: verdict, test, p, accuracies and exit code from its comparison."""
    div = c.divergence
    return RunSummary(
        experiment=experiment, simulated=c.simulated, verdict=c.verdict, verdict_reason=c.verdict_reason,
        n=c.n, delta=c.delta, delta_ci=c.delta_ci, test=c.test, p=c.p, mde=c.mde,
        accuracy={"a": c.arms.a.accuracy, "b": c.arms.b.accuracy},
        arms={"a": c.arm_names.a, "b": c.arm_names.b} if c.arm_names else {},
        repeats=repeats, aa_control=aa_control, exit_code=exit_code, design=design,
        divergence=None if div is None else RunDivergence(div.verdict, div.kld_mean, div.kld_mean_aa, div.p,
                                                          div.effect),
        cost=cost, sequential=sequential, headline=headline)
