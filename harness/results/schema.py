"""Typed, versioned models of every result abh stores, and the one loader and writer of each file kind.

Every stored JSON document carries ``kind`` and ``schema_version``:

======================  ========================  ==============================================
file                    kind                      model
======================  ========================  ==============================================
``eval.json``           ``abh.eval``              :class:`EvalMeta` (what one eval asked, of whom)
``summary.json``        ``abh.eval.summary``      :class:`EvalSummary` (in an eval directory)
``samples.jsonl``       (rows of the eval above)  :class:`SampleRecord`, one per question
``manifest.json``       ``abh.run``               :class:`Manifest` (provenance of an ``abh run``)
``summary.json``        ``abh.run.summary``       :class:`RunSummary` (in a run directory)
``comparison.json``     ``abh.comparison``        :class:`Comparison`
``sweep_summary.json``  ``abh.sweep``             :class:`SweepSummary`
======================  ========================  ==============================================

``samples.jsonl`` and ``prompts.jsonl`` rows belong to their ``eval.json``: its ``schema_version`` is
theirs. A loader refuses a document of another kind, or of a ``schema_version`` this abh does not read,
with a one-line :class:`SchemaError` (the CLI exits 2 on it): a future format is refused, never misread.

The models are ``TypedDict`` (the documents stay plain JSON objects; ``total=False`` where fields are
optional or only some writers set them), except :class:`SampleRecord`, a dataclass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypedDict, cast

from harness import __version__
from harness.results.fileio import StoreError, atomic_write_json, read_json

# ------------------------------------------------------------------------------------------ kinds
EVAL = "abh.eval"
EVAL_SUMMARY = "abh.eval.summary"
MANIFEST = "abh.run"
RUN_SUMMARY = "abh.run.summary"
COMPARISON = "abh.comparison"
SWEEP = "abh.sweep"

#: The schema_version each kind is written with, and the versions this abh reads.
SCHEMA_VERSION = 1
WRITES: dict[str, int] = {k: SCHEMA_VERSION for k in (EVAL, EVAL_SUMMARY, MANIFEST, RUN_SUMMARY, COMPARISON, SWEEP)}
#: comparison and run summary v2: the question-level statistics (``test`` and ``p`` decide the verdict; the
#: v1 keys ``p_value``, ``mcnemar_p``, ... are gone or under ``diagnostics``), ``design``, ``errors``, ``cost``
WRITES[COMPARISON] = WRITES[RUN_SUMMARY] = 2
READS: dict[str, frozenset[int]] = {k: frozenset({v}) for k, v in WRITES.items()}

# ------------------------------------------------------------------------------------------ file names
EVAL_FILE = "eval.json"
EVAL_SUMMARY_FILE = "summary.json"
SAMPLES_FILE = "samples.jsonl"
PROMPTS_FILE = "prompts.jsonl"
MANIFEST_FILE = "manifest.json"
RUN_SUMMARY_FILE = "summary.json"
COMPARISON_FILE = "comparison.json"
SWEEP_FILE = "sweep_summary.json"


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


class EvalMeta(TypedDict, total=False):
    """``eval.json``: what one eval asks (task, recipe, dataset, questions) and of which server."""

    kind: str
    schema_version: int
    task: str
    recipe: Any  # the recipe as a dict (RecipeConfig.to_dict); older writers and tests: a name
    dataset_sha256: str
    dataset_source: str
    dataset_canonical: bool
    num_questions: int
    stop: list[str]
    shots_sha256: str
    indices: list[int]
    api: str
    url: str
    parallel: int
    simulated: bool
    server: ServerFacts
    # set by abh run (extra_meta)
    arm: str
    role: str
    repeat: int
    #: which server launch served the eval (abh run: ``<arm>-<n>``; abh ab: ``url:...``); runs that share one
    #: are not independent
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
    dataset_canonical: bool
    api: str
    simulated: bool
    complete: bool
    aborted: str | None


@dataclass
class SampleRecord:
    """One row of ``samples.jsonl``: one question's answer (or its request error)."""

    index: int
    prompt_sha256: str
    output: str | None
    pred: int | None
    label: int
    correct: bool | None  # None when the request failed: an error is never a wrong answer
    invalid: bool | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float | None
    attempts: int
    error: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SampleRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ------------------------------------------------------------------------------------------ comparison
class ArmNames(TypedDict):
    a: str
    b: str


class ArmResult(TypedDict):
    accuracy: float
    wilson: list[float]
    bootstrap: list[float]
    repeats: list[float | None]
    n_runs: int
    launches: list[str]
    error_rate: float
    dirs: list[str]


class TableCounts(TypedDict):
    """The paired table of per-question arm means (question mass; whole counts for one run per arm)."""

    both: float
    a_only: float
    b_only: float
    neither: float


class Arms(TypedDict):
    a: ArmResult
    b: ArmResult


class Divergence(TypedDict, total=False):
    """``comparison.json`` ``divergence``: the reference arm's greedy texts scored teacher-forced by its own
    server, by the other arm's and by a fresh launch of its own (the A/A floor); computed by
    :func:`harness.analysis.divergence.compute_divergence`. KLD in nats per reference token; ``*_aa`` are the floor's."""

    verdict: str  # diverged | indistinguishable | not_measured
    verdict_reason: str
    #: whose greedy texts are the reference (``a`` unless ``divergence.reference`` says ``b``)
    reference: str
    alpha: float | None
    p: float | None
    p_floor: float | None
    p_at_floor: bool | None
    n_resamples: int | None
    test: str | None
    effect: float | None
    effect_ci: list[float] | None
    effect_ci_method: str | None
    effect_se: float | None
    effect_mde: float | None
    kld_mean: float | None
    kld_mean_aa: float | None
    kld_max: float | None
    kld_max_aa: float | None
    kld_percentiles: dict[str, float] | None
    kld_percentiles_aa: dict[str, float] | None
    same_top_rate: float | None
    same_top_rate_aa: float | None
    rms_dlogprob: float | None
    rms_dlogprob_aa: float | None
    text_identical_rate: float | None
    text_identical_rate_aa: float | None
    text_questions: int
    text_questions_aa: int
    first_divergence_median: float | None
    first_divergence_median_aa: float | None
    tokens: int
    questions: int
    questions_total: int | None
    questions_dropped: dict[str, int]
    top_k: int | None
    kl_method: str
    kld_histogram: dict[str, Any] | None
    top_questions: list[dict[str, Any]]
    dirs: dict[str, str | None]
    #: per pass (ref, ab, aa): wall_s, errors, questions, tokens, top_k, engine, url of its scores.json
    scoring: dict[str, dict[str, Any]]


class Comparison(TypedDict, total=False):
    """``comparison.json``: arm B against arm A over stored evals (proportions as fractions).

    ``compare_dirs`` computes the statistics; its caller (``abh compare``, ``abh run``) owns ``arm_names``
    and ``command``, and may add to ``simulated`` what it knows of the arms (the report reads these facts
    from here only).
    """

    kind: str
    schema_version: int
    # owned by the caller of compare_dirs
    arm_names: ArmNames
    command: list[str]
    simulated: bool
    # the statistics
    n: int
    n_total: int
    dropped_errors: int
    error_rate: float
    error_rate_per_run: dict[str, float]
    max_error_rate: float
    error_rate_exceeded: bool
    failures: list[str]
    alpha: float
    seed: int
    n_resamples: int
    dataset_sha256: str | None
    recipe: Any
    arms: Arms
    aa_dirs: list[str]
    hypothesis: str
    test: str | None
    p: float | None
    test_alpha: float | None
    p_floor: float | None
    errors: dict[str, Any]
    design: dict[str, Any]
    table_source: str
    both: float
    a_only: float
    b_only: float
    neither: float
    psi: float
    delta: float
    delta_se: float
    delta_ci: list[float]
    delta_ci_level: float
    delta_ci_method: str
    delta_ci_unpaired: list[float]
    psi_aa: float | None
    psi_aa_per_arm: dict[str, Any]
    psi_aa_source: str | None
    noise_band: list[float] | None
    repeats_effective: float
    mde: float | None
    mde_method: str
    mde_unpaired: float
    detectable_floor: float
    margin: float | None
    min_effect: float | None
    tost: dict[str, Any] | None
    warnings: list[str]
    verdict: str
    verdict_reason: str
    flips: list[int]
    diagnostics: dict[str, Any]
    #: present when the compared evals record scoring passes (``abh run`` with divergence enabled)
    divergence: Divergence
    # owned by abh run when experiment.sequential: the sequential decision is ``verdict``; the fixed-design
    # test of the same data is kept beside it
    sequential: SequentialRecord
    verdict_fixed: str
    verdict_reason_fixed: str


# ------------------------------------------------------------------------------------------ cost
class CostBlock(TypedDict, total=False):
    """GPU time of one role (or the total): sums over its server launches and evals (harness.analysis.cost)."""

    launches: int
    evals: int
    launch_s: float
    eval_s: float
    server_s: float
    gpus: int
    gpu_hours: float


class Cost(TypedDict, total=False):
    """``cost`` of a run summary, the manifest and a sweep summary: per role and in total. ``aa`` only when
    the A/A control had launches of its own; ``estimated`` names what was inferred from timestamps."""

    a: CostBlock
    b: CostBlock
    aa: CostBlock
    total: CostBlock
    estimated: list[str]


# ------------------------------------------------------------------------------------------ sequential
class SequentialRecord(TypedDict, total=False):
    """``sequential`` of a sequential run (experiment.sequential=true), in the manifest (as the looks happen)
    and in summary.json / comparison.json: the design, every look (LookDecision.as_dict) and the outcome."""

    design: dict[str, Any]
    estimator: str
    looks: list[dict[str, Any]]
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
class RunSummary(TypedDict, total=False):
    """``summary.json`` of a run directory: the verdict and the exit code of ``abh run``."""

    kind: str
    schema_version: int
    experiment: str
    simulated: bool
    verdict: str
    verdict_reason: str | None
    n: int | None
    delta: float | None
    delta_ci: list[float] | None
    test: str | None
    p: float | None
    mde: float | None
    accuracy: dict[str, float]
    arms: dict[str, str]
    repeats: int
    aa_control: bool
    #: the design as run: server launches per role, passes per launch, concurrency, restarts
    design: dict[str, Any]
    #: verdict, kld_mean, kld_mean_aa, p, effect of comparison.json's ``divergence`` (when scored)
    divergence: dict[str, Any]
    #: GPU time per role and in total (harness.analysis.cost)
    cost: Cost
    #: a sequential run's looks and why it stopped; its verdict is then ``verdict``
    sequential: SequentialRecord
    exit_code: int


class Manifest(TypedDict, total=False):
    """``manifest.json``: provenance of a run, rewritten at every step (see harness.orchestrate.rundir)."""

    kind: str
    schema_version: int
    experiment: str
    config: dict[str, Any]
    config_sha256: str
    config_semantic: dict[str, Any]
    provenance: dict[str, Any]
    dataset: dict[str, Any]
    sessions: list[dict[str, Any]]
    evals: dict[str, dict[str, Any]]
    arms: dict[str, dict[str, Any]]
    arm_diff: dict[str, Any]
    arm_diff_live: dict[str, Any]
    cost: Cost
    sequential: SequentialRecord
    status: dict[str, Any]


# ------------------------------------------------------------------------------------------ sweep
class SweepRow(TypedDict, total=False):
    job: str
    dir: str
    label: str
    n: int | None
    accuracy_a: float | None
    accuracy_b: float | None
    delta: float | None
    delta_ci: list[float] | None
    p: float | None
    p_value_floor: float | None
    p_value_at_floor: bool
    p_adjusted: float
    mde: float | None
    #: divergence (when the job scored): its verdict, and the mean KLD A‖B and A‖A' (nats/token)
    divergence: str | None
    kld: float | None
    kld_aa: float | None
    verdict: str
    verdict_unadjusted: str
    alpha: float
    test_alpha: float
    simulated: bool
    missing: bool
    gpu_hours: float | None


class SweepSummary(TypedDict, total=False):
    kind: str
    schema_version: int
    experiment: str | None
    correction: str
    comparisons: list[SweepRow]
    missing: list[str]
    simulated: bool
    #: the jobs' costs summed (harness.analysis.cost.sum_costs)
    cost: Cost


# ------------------------------------------------------------------------------------------ checking
_NAMES = {EVAL: "an eval (eval.json)", EVAL_SUMMARY: "an eval summary", MANIFEST: "a run manifest",
          RUN_SUMMARY: "a run summary", COMPARISON: "a comparison", SWEEP: "a sweep summary"}


def stamp(kind: str, doc: dict[str, Any] | Any) -> dict[str, Any]:
    """``doc`` with ``kind`` and the ``schema_version`` this abh writes, both first."""
    body = {k: v for k, v in dict(doc).items() if k not in ("kind", "schema_version")}
    return {"kind": kind, "schema_version": WRITES[kind], **body}


def check(doc: Any, kind: str, where: str | Path) -> dict[str, Any]:
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


def load(path: str | Path, kind: str) -> dict[str, Any]:
    """Read and check one stored document. A missing file raises FileNotFoundError; anything unreadable
    (not JSON, not UTF-8, wrong kind, unknown version) raises SchemaError."""
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


def dump(path: str | Path, kind: str, doc: dict[str, Any] | Any) -> None:
    """Write one document of ``kind`` atomically, stamped with its kind and schema_version."""
    atomic_write_json(Path(path), stamp(kind, doc))


# One loader and one writer per file kind.
def load_eval_meta(path: str | Path) -> EvalMeta:
    return cast(EvalMeta, load(path, EVAL))


def load_eval_summary(path: str | Path) -> EvalSummary:
    return cast(EvalSummary, load(path, EVAL_SUMMARY))


def load_manifest(path: str | Path) -> Manifest:
    return cast(Manifest, load(path, MANIFEST))


def load_run_summary(path: str | Path) -> RunSummary:
    return cast(RunSummary, load(path, RUN_SUMMARY))


def load_comparison(path: str | Path) -> Comparison:
    return cast(Comparison, load(path, COMPARISON))


def load_sweep_summary(path: str | Path) -> SweepSummary:
    return cast(SweepSummary, load(path, SWEEP))


def write_eval_meta(path: str | Path, doc: EvalMeta) -> None:
    dump(path, EVAL, doc)


def write_eval_summary(path: str | Path, doc: EvalSummary) -> None:
    dump(path, EVAL_SUMMARY, doc)


def write_manifest(path: str | Path, doc: Manifest) -> None:
    dump(path, MANIFEST, doc)


def run_summary(c: Comparison, *, experiment: str, repeats: int, aa_control: bool, exit_code: int) -> RunSummary:
    """``summary.json`` of a run directory (``abh run``, ``abh ab``): the verdict, the test and p that decided
    it, the accuracies and the exit code, taken from its comparison; callers add what only they know."""
    arms, names = c["arms"], c.get("arm_names")
    doc: RunSummary = {
        "experiment": experiment, "simulated": bool(c.get("simulated")),
        "verdict": c.get("verdict", "not_comparable"), "verdict_reason": c.get("verdict_reason"),
        "n": c.get("n"), "delta": c.get("delta"), "delta_ci": c.get("delta_ci"),
        "test": c.get("test"), "p": c.get("p"), "mde": c.get("mde"),
        "accuracy": {"a": arms["a"]["accuracy"], "b": arms["b"]["accuracy"]},
        "arms": {"a": names["a"], "b": names["b"]} if names else {},
        "repeats": repeats, "aa_control": aa_control, "exit_code": exit_code,
    }
    div = c.get("divergence")
    if div is not None:
        doc["divergence"] = {k: div.get(k) for k in ("verdict", "kld_mean", "kld_mean_aa", "p", "effect")}
    return doc


def write_run_summary(path: str | Path, doc: RunSummary) -> None:
    dump(path, RUN_SUMMARY, doc)


def write_comparison(path: str | Path, doc: Comparison) -> None:
    dump(path, COMPARISON, doc)


def write_sweep_summary(path: str | Path, doc: SweepSummary) -> None:
    dump(path, SWEEP, doc)

