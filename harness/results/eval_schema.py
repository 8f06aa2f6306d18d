"""The stored documents' kinds and versions (and their one checker, loader and writer), and what an eval directory
holds: ``eval.json`` (:class:`EvalMeta`), its ``summary.json`` (:class:`EvalSummary`) and ``samples.jsonl`` rows
(:class:`SampleRecord`). :mod:`harness.results.schema` holds the run and comparison records and names all of these
too; they live apart so that an eval (``abh eval``, the eval path of a run) imports none of those records.
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
from harness.results.records import JSONObject

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


def load_eval_meta(path: str | Path) -> EvalMeta:
    return cast(EvalMeta, load(path, EVAL))


def load_eval_summary(path: str | Path) -> EvalSummary:
    return cast(EvalSummary, load(path, EVAL_SUMMARY))


def load_manifest(path: str | Path) -> dict[str, Any]:
    """``manifest.json``, checked for its kind and version (declared by ``harness.orchestrate.rundir``)."""
    return load(path, MANIFEST)


write_eval_meta: Callable[[str | Path, EvalMeta], None] = partial(dump, EVAL)
write_eval_summary: Callable[[str | Path, EvalSummary], None] = partial(dump, EVAL_SUMMARY)
write_manifest: Callable[[str | Path, JSONObject], None] = partial(dump, MANIFEST)
