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
checked on loading; the eval's own files are ``TypedDict`` (``total=False``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any, TypedDict, TypeVar, cast

from harness import __version__
from harness.results.fileio import StoreError, atomic_write_json, read_json
from harness.results.records import JSON, JSONObject, Record, RecordError, omit_none
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

# ------------------------------------------------------------------------------------------ kinds
EVAL = "abh.eval"
EVAL_SUMMARY = "abh.eval.summary"
MANIFEST = "abh.run"
RUN_SUMMARY = "abh.run.summary"
COMPARISON = "abh.comparison"
SWEEP = "abh.sweep"
TASKS = "abh.tasks"
#: a scoring pass's ``scores.json``, ``abh power --json``'s plan and a launch's fingerprint (harness/engines/
#: launcher.py keeps its own copy of the version; a test holds them equal)
SCORES = "abh.scores"
PLAN = "abh.plan"
FINGERPRINT = "abh.fingerprint"

#: The schema_version each kind is written with, and the versions this abh reads.
SCHEMA_VERSION = 1
WRITES: dict[str, int] = {k: SCHEMA_VERSION for k in (EVAL, EVAL_SUMMARY, MANIFEST, RUN_SUMMARY, COMPARISON, SWEEP,
                                                       TASKS, SCORES, PLAN, FINGERPRINT)}
#: comparison and run summary v2: ``test`` and ``p`` decide the verdict (v1's ``p_value``, ... are gone)
WRITES[COMPARISON] = WRITES[RUN_SUMMARY] = 2
#: eval v2: ``prompts.jsonl`` rows name their prompt by hash, the text in ``prompt_texts``; v1 is still read
WRITES[EVAL] = 2
#: scores v2: a token that is its top list's first entry is stored null (an abh reading v1 only would misread
#: it); v1 is still read
WRITES[SCORES] = 2
READS: dict[str, frozenset[int]] = {k: frozenset({v}) for k, v in WRITES.items()}
READS[EVAL] = frozenset({1, 2})
READS[SCORES] = frozenset({1, 2})

# ------------------------------------------------------------------------------------------ file names
EVAL_FILE = "eval.json"
EVAL_SUMMARY_FILE = "summary.json"
SAMPLES_FILE = "samples.jsonl"
PROMPTS_FILE = "prompts.jsonl"
MANIFEST_FILE = "manifest.json"
RUN_SUMMARY_FILE = "summary.json"
COMPARISON_FILE = "comparison.json"
SWEEP_FILE = "sweep_summary.json"
TASKS_FILE = "tasks.json"
#: a multi-task run's per-task comparisons: ``tasks/<key>/comparison.json`` (and its comparison.md, report.html)
TASKS_DIR = "tasks"


R = TypeVar("R", bound=Record)


class SchemaError(StoreError):
    """A stored file is not of the kind expected, or of a schema_version this abh cannot read."""


# ------------------------------------------------------------------------------------------ eval
class ServerFacts(TypedDict, total=False):
    """What the server said about itself (``/get_server_info``), as far as it said it."""

    version: str
    build: str
    model_path: str
    engine: str


class EvalSession(TypedDict, total=False):
    url: str | None
    instance: str | None
    server: ServerFacts | None
    #: requests in flight in this session (absent in evals written before it was recorded)
    parallel_used: int | None


class EvalMeta(TypedDict, total=False):
    """``eval.json``: what one eval asks (task, recipe, dataset, questions) and of which server."""

    kind: str
    schema_version: int
    task: str
    recipe: Any  # the recipe as a dict (RecipeConfig.to_dict); older writers and tests: a name
    dataset_sha256: str
    dataset_source: str
    #: None: the task knows no canonical hash (MMLU, GPQA, MGSM, lm-eval samples)
    dataset_canonical: bool | None
    num_questions: int
    stop: list[str]
    #: the sampling temperature (absent in evals written before it was recorded: abh's recipes are greedy, 0)
    temperature: float
    shots_sha256: str
    indices: list[int]
    #: the upstream file the recipe follows (tasks other than GSM8K's bench_sglang recipes)
    upstream: str
    #: each index's group (MMLU: its subject), aligned with ``indices``
    groups: list[str]
    #: times each question is asked (GPQA; index = row * repeats + repeat; its score: the mean of its repeats)
    repeats: int
    #: the text store of the prompts, relative to the eval directory (schema 2; harness.results.prompt_store)
    prompt_texts: str
    api: str
    url: str
    #: requests in flight asked for (``client.parallel``, ``--parallel``)
    parallel: int
    #: requests in flight the last session used (fewer than ``parallel`` where the open-file limit said so)
    parallel_used: int
    simulated: bool
    server: ServerFacts
    # set by abh run (extra_meta)
    arm: str
    role: str
    repeat: int
    #: which server launch served the eval (``<arm>-<n>``, ``url:...``); evals sharing one are not independent
    launch: str
    instance: str
    # bookkeeping of resumes
    resumes: int
    sessions: list[EvalSession]
    wall_s_total: float


class EvalSummary(TypedDict, total=False):
    """``summary.json`` of an eval: SGLang's figures, errors counted apart from wrong answers."""

    kind: str
    schema_version: int
    n: int
    answered: int
    correct: int
    invalid: int
    errors: int
    missing: int
    accuracy: float | None
    invalid_rate: float | None
    error_rate: float
    latency_s: float
    output_tokens: int
    output_throughput: float | None
    wall_s_this_session: float
    resumed: bool
    recipe: Any
    dataset_sha256: str
    dataset_canonical: bool | None
    api: str
    simulated: bool
    complete: bool
    aborted: str | None


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _scalar(x: Any) -> bool:
    """What a task's extractor reads or a label is: a finite number or a string."""
    return _number(x) or isinstance(x, str)


def _checked(ok: Any, says: str, **default: Any) -> Any:
    """A ``samples.jsonl`` field with its check (``ok``) and what the refusal says when it fails."""
    return field(metadata={"ok": ok, "says": says}, **default)


def _optional_str(**default: Any) -> Any:
    return _checked(lambda x: x is None or isinstance(x, str), "a string or null", **default)


def _flag() -> Any:
    return _checked(lambda x: x is None or isinstance(x, bool), "true, false or null")


def _count() -> Any:
    return _checked(lambda x: x is None or (_whole(x) and x >= 0), "a whole number >= 0 or null")


#: what a row read back may lack (older writers; ``score`` and ``reasoning`` are written only when set)
_OPTIONAL_SAMPLE_FIELDS = frozenset({"error", "score", "reasoning"})


@dataclass
class SampleRecord:
    """One row of ``samples.jsonl``: one question's answer (or its request error), each field checked."""

    index: int = _checked(lambda x: _whole(x) and x >= 0, "a whole number >= 0")
    prompt_sha256: str = _checked(lambda x: isinstance(x, str), "a string")
    output: str | None = _optional_str()
    #: what the task's extractor read (GSM8K: a number; MMLU: a letter; None: nothing or an error)
    pred: int | float | str | None = _checked(lambda x: x is None or _scalar(x), "a number, a string or null")
    label: int | float | str = _checked(_scalar, "a number or a string")
    correct: bool | None = _flag()  # None when the request failed: an error is never a wrong answer
    invalid: bool | None = _flag()
    finish_reason: str | None = _optional_str()
    prompt_tokens: int | None = _count()
    completion_tokens: int | None = _count()
    latency_s: float | None = _checked(
        lambda x: x is None or (isinstance(x, int | float) and not isinstance(x, bool) and x >= 0),
        "a number >= 0 or null")
    attempts: int = _checked(lambda x: _whole(x) and x >= 0, "a whole number >= 0")
    error: str | None = _optional_str(default=None)
    #: the task's score in [0, 1] when it is not simply ``correct`` (written only then)
    score: float | None = _checked(lambda x: x is None or (_number(x) and 0 <= x <= 1), "a number in [0, 1] or null",
                                   default=None)
    #: a chat server's reasoning, returned apart from the answer (written only when returned)
    reasoning: str | None = _optional_str(default=None)

    @classmethod
    def from_dict(cls, d: Any) -> SampleRecord:
        """A row read back, every field checked (anyone could have edited it): ValueError naming the first
        field that is wrong; unknown keys ignored."""
        rec = usual_record(d)
        if rec is not None:
            return rec
        if not isinstance(d, dict):
            raise ValueError(f"a row is a JSON object, not {type(d).__name__}")
        for name, ok, says in _SAMPLE_CHECKS:
            if name not in d and name not in _OPTIONAL_SAMPLE_FIELDS:
                raise ValueError(f"the row has no {name!r}")
            value = d.get(name)
            if not ok(value):
                raise ValueError(f"{name} must be {says}, not {json.dumps(value, default=str)[:40]}")
        rec = cls(**{name: d[name] for name, _, _ in _SAMPLE_CHECKS if name in d})
        if rec.error is None and (rec.output is None or rec.correct is None or rec.invalid is None):
            raise ValueError("an answered row (error null) needs its output, correct and invalid")
        if rec.error is not None and rec.correct is not None:
            raise ValueError("a row with a request error has no correct value (an error is never an answer)")
        return rec

    def to_row(self) -> dict[str, Any]:
        """The ``samples.jsonl`` row: every field in order, ``score`` and ``reasoning`` only when set (a
        shallow copy: every field is a scalar, at a tenth of ``asdict``'s cost)."""
        row = {name: getattr(self, name) for name, _, _ in _SAMPLE_CHECKS}
        for key in ("score", "reasoning"):
            if row[key] is None:
                del row[key]
        return row


#: (name, check, what the check asks) of every SampleRecord field, in order: read once, used for every row
_SAMPLE_CHECKS: tuple[tuple[str, Callable[[Any], bool], str], ...] = tuple(
    (f.name, f.metadata["ok"], f.metadata["says"]) for f in fields(SampleRecord))
_SAMPLE_FIELDS = tuple(name for name, _, _ in _SAMPLE_CHECKS)
_REQUIRED_SAMPLE_FIELDS = frozenset(_SAMPLE_FIELDS) - _OPTIONAL_SAMPLE_FIELDS
_NONE = type(None)
_STR_NONE = frozenset({str, _NONE})
_FLAG = frozenset({bool, _NONE})
_PLAIN_SCALAR = frozenset({int, str})
#: a float of this size may be a whole number a JSON parser other than the stdlib's read as a float
_BIG = 2.0**63


def usual_record(d: Any) -> SampleRecord | None:
    """The record of a row whose every field is of the usual type (a few type tests, where the field-by-field
    checks call a function each: an eval has a row per question), or None, for :meth:`SampleRecord.from_dict` to
    check it field by field (and accept or refuse it). Accepts only what those checks accept."""
    if type(d) is not dict or not d.keys() >= _REQUIRED_SAMPLE_FIELDS:
        return None
    g: Callable[[str], Any] = d.get
    (index, sha, output, pred, label, correct, invalid, finish, p_tok, c_tok, lat, attempts, error, score,
     reasoning) = map(g, _SAMPLE_FIELDS)
    if not (type(index) is int and index >= 0 and type(sha) is str and type(output) in _STR_NONE
            and (type(pred) in _PLAIN_SCALAR or pred is None or (type(pred) is float and abs(pred) < _BIG))
            and (type(label) in _PLAIN_SCALAR or (type(label) is float and abs(label) < _BIG))
            and type(correct) in _FLAG and type(invalid) in _FLAG and type(finish) in _STR_NONE
            and (p_tok is None or (type(p_tok) is int and p_tok >= 0))
            and (c_tok is None or (type(c_tok) is int and c_tok >= 0))
            and (lat is None or (type(lat) in (int, float) and 0 <= lat < _BIG))
            and type(attempts) is int and attempts >= 0 and type(error) in _STR_NONE
            and (score is None or (type(score) in (int, float) and 0 <= score <= 1)) and type(reasoning) in _STR_NONE):
        return None
    if error is None and (output is None or correct is None or invalid is None) or (error is not None
                                                                                    and correct is not None):
        return None
    return SampleRecord(index, sha, output, pred, label, correct, invalid, finish, p_tok, c_tok, lat, attempts, error,
                        score, reasoning)


class PromptRow(TypedDict):
    """A prompt sent: a ``prompts.jsonl`` row with its text (inline, or from the run's text store)."""

    index: int
    prompt_sha256: str
    prompt: str


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


# ------------------------------------------------------------------------------------------ checking
_NAMES = {EVAL: "an eval (eval.json)", EVAL_SUMMARY: "an eval summary", MANIFEST: "a run manifest",
          RUN_SUMMARY: "a run summary", COMPARISON: "a comparison", SWEEP: "a sweep summary",
          TASKS: "a multi-task comparison (tasks.json)", SCORES: "a scoring pass (scores.json)",
          PLAN: "a plan (abh power --json)", FINGERPRINT: "a launch fingerprint"}


#: A document abh writes: an eval's (TypedDict), a manifest, or a result record's (:meth:`Record.to_doc`).
D = TypeVar("D", EvalMeta, EvalSummary, JSONObject)


def stamp(kind: str, doc: D) -> D:
    """``doc`` with ``kind`` and the ``schema_version`` this abh writes, both first."""
    body = doc.copy()
    body.pop("kind", None)
    body.pop("schema_version", None)
    return {"kind": kind, "schema_version": WRITES[kind], **body}


def check(doc: Any, kind: str, where: str | Path) -> JSONObject:
    """``doc`` itself if it is a document of ``kind`` in a schema_version this abh reads; else SchemaError."""
    if not isinstance(doc, dict):
        raise SchemaError(f"{where}: expected {_NAMES[kind]} (a JSON object), found {type(doc).__name__}")
    found = doc.get("kind")
    if found != kind:
        what = f"kind {found!r}" if found is not None else "no kind"
        raise SchemaError(f"{where}: expected {_NAMES[kind]} (kind {kind!r}), found {what}")
    version = doc.get("schema_version")
    if isinstance(version, bool) or version not in READS[kind]:
        reads = ", ".join(str(v) for v in sorted(READS[kind]))
        raise SchemaError(f"{where}: {kind} schema_version {version!r} is not one abh {__version__} reads "
                          f"({reads}); open it with the abh version that wrote it")
    return doc


def load(path: str | Path, kind: str) -> JSONObject:
    """Read and check one stored document: FileNotFoundError, or SchemaError for anything unreadable."""
    p = Path(path)
    try:
        doc = read_json(p)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{p}: not valid JSON (line {e.lineno}: {e.msg})") from None
    except UnicodeDecodeError:
        raise SchemaError(f"{p}: not UTF-8 text") from None
    except IsADirectoryError:
        raise SchemaError(f"{p}: is a directory, not {_NAMES[kind]}") from None
    return check(doc, kind, p)


def dump(kind: str, path: str | Path, doc: D) -> None:
    """Write one document of ``kind`` atomically, stamped with its kind and schema_version."""
    atomic_write_json(Path(path), stamp(kind, doc))


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


def load_eval_meta(path: str | Path) -> EvalMeta:
    return cast(EvalMeta, load(path, EVAL))


def load_eval_summary(path: str | Path) -> EvalSummary:
    return cast(EvalSummary, load(path, EVAL_SUMMARY))


def load_manifest(path: str | Path) -> dict[str, Any]:
    """``manifest.json``, checked for its kind and version (declared by ``harness.orchestrate.rundir``)."""
    return load(path, MANIFEST)


# One loader and one writer per file kind.
load_run_summary = partial(load_record, kind=RUN_SUMMARY, cls=RunSummary)
load_comparison = partial(load_record, kind=COMPARISON, cls=Comparison)
load_sweep_summary = partial(load_record, kind=SWEEP, cls=SweepSummary)
load_tasks = partial(load_record, kind=TASKS, cls=TasksComparison)
write_eval_meta: Callable[[str | Path, EvalMeta], None] = partial(dump, EVAL)
write_eval_summary: Callable[[str | Path, EvalSummary], None] = partial(dump, EVAL_SUMMARY)
write_manifest: Callable[[str | Path, JSONObject], None] = partial(dump, MANIFEST)
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
