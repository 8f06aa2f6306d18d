"""On-disk results of one eval: crash-safe and resumable (the models are in :mod:`harness.results.schema`).

One directory per eval::

    eval.json       what was asked (task, recipe, dataset hash, question indices, target); written first
    prompts.jsonl   {"index", "prompt_sha256"}: which prompt each question was sent; the texts are in the
                    run's text store, each once (:mod:`harness.results.prompt_store`); gzip'd
                    (``prompts.jsonl.gz``) once its run has finished
    samples.jsonl   one SampleRecord per question, appended as the answers arrive (an eval writes each turn
                    of its event loop's answers at once)
    summary.json    EvalSummary, written atomically at the end (and after a resume)

Rerunning into the same directory resumes: questions with an answered row are kept, rows that carry a
request error (and a torn last line from a crash) are dropped and sent again. The file is rewritten
atomically before appending, so every question appears exactly once. Rows read back are checked first
(:mod:`harness.results.integrity`): a malformed, rescored-false, relabelled or conflicting row stops the
resume (and a comparison) with one line naming the file and the line.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from harness.results import eval_schema as schema
from harness.results import fileio, integrity
from harness.results.dirlock import DirLock
from harness.results.eval_schema import EvalMeta, EvalSummary, SampleRecord
from harness.results.fileio import OutputError, StoreError, append_made_line, atomic_write_text, dumps_unicode
from harness.results.prompt_store import TEXTS, TEXTS_KEY, PromptTexts, eval_prompts, packed, relative

if TYPE_CHECKING:
    import numpy as np

__all__ = ["META", "PROMPTS", "SAMPLES", "SUMMARY", "EvalStore", "SampleRecord", "StoreError",
           "OutputError", "incomplete_reason", "load_eval", "load_samples", "summarize"]

SAMPLES = schema.SAMPLES_FILE
PROMPTS = schema.PROMPTS_FILE
SUMMARY = schema.EVAL_SUMMARY_FILE
META = schema.EVAL_FILE
#: What eval.json records of each session (a resume on another server, or with fewer sockets, shows)
SESSION_KEYS = ("url", "instance", "server", "parallel_used")


def _describe_change(old: Any, new: Any) -> str:
    """``num_questions: 1319 -> 100`` for dicts, else the two values (shortened)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:4])
    if isinstance(old, list) and isinstance(new, list):
        return f"{len(old)} questions -> {len(new)} questions" if len(old) != len(new) else "other questions"
    return f"{str(old)[:40]!r} -> {str(new)[:40]!r}"


class EvalStore:
    """Append-as-you-go storage for one eval directory."""

    def __init__(self, root: str | Path, prompt_texts: str | Path | None = None):
        """``prompt_texts``: the text store the prompts go to (a run's, shared by its evals); None: one in
        ``root``."""
        self.root = Path(root)
        #: the files every append writes (joined once: an eval appends a row per question)
        self._samples_path, self._prompts_path = self.root / SAMPLES, self.root / PROMPTS
        self.texts_path = Path(prompt_texts) if prompt_texts is not None else self.root / TEXTS
        self._texts: PromptTexts | None = None
        self.meta: dict[str, Any] = {}
        self._samples_f: IO[bytes] | None = None
        self._prompts_f: IO[bytes] | None = None
        #: the first write that failed (a full disk): every later append raises it again, so no torn line
        #: follows another and what was written stays resumable
        self.failed: OutputError | None = None
        #: prompts.jsonl's and samples.jsonl's rows queued and not yet written (:meth:`queue`)
        self._queued_prompts: list[str] = []
        self._queued_samples: list[str] = []
        self._lock = DirLock(self.root, "eval directory")

    def lock(self) -> None:
        """Hold the directory for this process (taken by :meth:`open`; earlier by a caller that wants a second
        process refused before it sends anything): DirectoryInUse naming the holder's pid otherwise."""
        if not self._lock.held:
            self._lock.acquire()

    def unlock(self) -> None:
        self._lock.release()

    # ------------------------------------------------------------------ opening / resuming
    def open(self, meta: EvalMeta | dict[str, Any], reference: integrity.Reference | None = None,
             score: integrity.Scorer | None = None) -> dict[int, SampleRecord]:
        """Create or resume the eval; return the answered samples already on disk, by index.

        ``meta`` must carry ``dataset_sha256``, ``recipe`` and ``indices``; a directory holding an eval
        of different ones is refused rather than mixed. ``reference`` and ``score``: each question's prompt hash
        and label, and the task's scorer, which every kept row must agree with
        (:func:`~harness.results.integrity.verify`).
        """
        fileio.make_dirs(self.root)
        self.lock()
        try:
            fileio.check_dir(self.root)  # every file in it is the eval's own: a link in it was planted
            return self._open(meta, reference, score)
        except BaseException:
            self.unlock()  # refused (another eval's directory, a tampered row): held no longer
            raise

    def _open(self, meta: EvalMeta | dict[str, Any], reference: integrity.Reference | None,
              score: integrity.Scorer | None) -> dict[int, SampleRecord]:
        meta_path = self.root / META
        done: dict[int, SampleRecord] = {}
        if meta_path.exists():
            old = schema.load_eval_meta(meta_path)
            for key in ("dataset_sha256", "recipe", "indices", "api"):
                if old.get(key) != meta.get(key):
                    raise StoreError(
                        f"{self.root} already holds an eval with a different {key} "
                        f"({_describe_change(old.get(key), meta.get(key))}); "
                        "use another output directory (or delete this one) instead of mixing results")
            wanted = set(meta["indices"])
            rows = integrity.read_rows(self.root / SAMPLES)
            if score is not None:
                integrity.verify(self.root / SAMPLES, rows, reference, score)
            for _, rec in rows.values():
                if rec.error is None and rec.index in wanted:
                    done[rec.index] = rec
            resumes = int(old.get("resumes", 0)) + (1 if done else 0)
            # Each session's target is kept: a resume on another server instance (new port) is recorded.
            sessions = [*old.get("sessions", []), {k: meta.get(k) for k in SESSION_KEYS}]
            new: dict[str, Any] = {**old, "resumes": resumes, "sessions": sessions,
                                   **({"parallel_used": meta["parallel_used"]} if "parallel_used" in meta else {})}
            # Rewrite without error rows, duplicates and torn lines, then append from there.
            atomic_write_text(self.root / SAMPLES,
                              "".join(json.dumps(r.to_row(), ensure_ascii=False) + "\n"
                                      for r in sorted(done.values(), key=lambda r: r.index)))
            # the prompts of the kept rows, their texts (inline in an eval of schema 1, or in the store it names)
            # moved to this session's store
            seen_prompts = {r["index"]: r for r in eval_prompts(self.root)}
            self._texts = PromptTexts(self.texts_path)
            kept = [seen_prompts[i] for i in sorted(seen_prompts) if i in done]
            for r in kept:
                self._texts.add(r["prompt_sha256"], r["prompt"])
            atomic_write_text(self.root / PROMPTS,
                              "".join(json.dumps({"index": r["index"], "prompt_sha256": r["prompt_sha256"]}) + "\n"
                                      for r in kept))
            packed(self.root / PROMPTS).unlink(missing_ok=True)  # a finished run's packed copy: plain again
        else:
            new = {"resumes": 0, **meta, "sessions": [{k: meta.get(k) for k in SESSION_KEYS}]}
        new[TEXTS_KEY] = relative(self.texts_path, self.root)
        self.meta = schema.stamp(schema.EVAL, new)
        self.save_meta()
        # unbuffered: a line is on disk (or its write failed) when append or flush returns; only queue holds rows back
        self._samples_f = fileio.open_append(self.root / SAMPLES)
        self._prompts_f = fileio.open_append(self.root / PROMPTS)
        if self._texts is None:
            self._texts = PromptTexts(self.texts_path)
        return done

    def close_files(self) -> None:
        """Stop appending, what is queued written first (the directory stays locked: the summary is still to be
        written). A write that fails here is :attr:`failed`'s (the caller's own error, if any, is the one told)."""
        with suppress(OutputError):
            self.flush()
        for f in (self._samples_f, self._prompts_f):
            if f is not None and not f.closed:
                f.close()
        self._samples_f = self._prompts_f = None
        if self._texts is not None:
            self._texts.close()

    def close(self) -> None:
        """Done with the eval: the files closed, the directory released."""
        self.close_files()
        self.unlock()

    def __enter__(self) -> EvalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing
    def append(self, rec: SampleRecord, prompt: str | None = None, head: str = "") -> None:
        """Append one sample (and its prompt), written through, so a crash loses at most the line being written;
        OutputError when it cannot be written (then for every later append too). ``head``: a prefix of
        ``prompt`` its eval's prompts share (the text store escapes it once)."""
        self.queue(rec, prompt, head)
        self.flush()

    def queue(self, rec: SampleRecord, prompt: str | None = None, head: str = "") -> None:
        """:meth:`append`, the rows held until :meth:`flush`: an eval flushes once a turn of its event loop, one
        write a file for all the answers of that turn (a crash loses that turn's answers: a resume asks them
        again)."""
        assert self._samples_f is not None, "open() first"
        if self.failed is not None:
            raise self.failed
        if prompt is not None and self._prompts_f is not None:
            if self._texts is not None:
                self._texts.queue(rec.prompt_sha256, prompt, head)
            self._queued_prompts.append(dumps_unicode({"index": rec.index, "prompt_sha256": rec.prompt_sha256}) + "\n")
        self._queued_samples.append(dumps_unicode(rec.to_row()) + "\n")

    def flush(self) -> None:
        """Write what :meth:`queue` holds: the texts, then the prompts, then the samples (a sample's row is on disk
        after its prompt's and its text's); OutputError when it cannot (then for every later append too)."""
        if self.failed is not None:
            raise self.failed
        try:
            if self._texts is not None:
                self._texts.flush()
            for f, path, rows in ((self._prompts_f, self._prompts_path, self._queued_prompts),
                                  (self._samples_f, self._samples_path, self._queued_samples)):
                if rows and f is not None:
                    append_made_line(f, path, "".join(rows))
                rows.clear()
        except OutputError as e:
            self.failed = e
            raise

    def save_meta(self) -> None:
        """Rewrite eval.json from ``self.meta`` (e.g. after adding the wall time of a session)."""
        schema.write_eval_meta(self.root / META, self.meta)  # type: ignore[arg-type]

    def write_summary(self, summary: EvalSummary | dict[str, Any]) -> None:
        schema.write_eval_summary(self.root / SUMMARY, summary)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ reading
def load_samples(root: str | Path, cached: bool = True) -> list[SampleRecord]:
    """All samples of an eval directory, one per index, sorted by index: each row type-checked, an answer
    superseding an error row; StoreError for a malformed row or two different answers to one question.
    ``cached`` False: read past :func:`load_eval`'s cache and not kept there (an eval reading its rows just
    before it writes its summary: that version of its files is never asked for again)."""
    root = Path(root)
    if cached and (root / META).exists():  # an eval's: read once per version of its files (load_eval's cache)
        try:
            return load_eval(root)[1]
        except (StoreError, OSError, ValueError):
            pass  # its eval.json or summary is unreadable: its samples may still be read alone
    rows = integrity.read_rows(root / SAMPLES)
    return [rows[i][1] for i in sorted(rows)]


def _evals_below(root: Path, most: int = 4) -> str:
    """A hint naming the eval directories under ``root`` (a run directory: ``evals/a/r1`` ...), or ''."""
    found = sorted({p.parent for p in root.glob(f"*/{META}")} | {p.parent for p in root.glob(f"*/*/{META}")}
                   | {p.parent for p in root.glob(f"*/*/*/{META}")}) if root.is_dir() else []
    if not found:
        return ""
    names = " ".join(str(p) for p in found[:most]) + (" ..." if len(found) > most else "")
    return f"; pass the eval directories it holds, e.g. {names}"


def load_eval(root: str | Path, check: integrity.RowCheck | None = None
              ) -> tuple[EvalMeta, list[SampleRecord], EvalSummary | None]:
    """(eval.json, samples, summary.json or None) of an eval directory, every row type-checked and, given the
    task's ``check``, its claims checked against its question (:func:`harness.results.integrity.verify`);
    StoreError (a SchemaError for a file of another kind or an unknown schema_version) when it cannot be read or a
    row is not what it claims. A comparison reads each eval several times (its table, report, markdown, export):
    the files are read and checked once per version of them (inode, size, mtime)."""
    root = Path(root)
    if not (root / META).exists():
        raise StoreError(f"{root} is not an eval directory (no {META}){_evals_below(root)}")
    key = (root.resolve(), _stamp(root))
    if key not in _LOADED:
        for old in [k for k in _LOADED if k[0] == key[0]]:  # an older version of its files: never asked again
            del _LOADED[old]
        if len(_LOADED) >= 32:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = _load_eval(root)
    loaded = _LOADED[key]
    if check is not None and check not in loaded.checked:  # parsed once; each check run once on the rows
        integrity.verify(root / SAMPLES, loaded.rows, *check(root, loaded.meta))
        loaded.checked.append(check)
    return _copy(loaded.meta), list(loaded.samples), _copy(loaded.summary)


#: the JSON values a copy shares (immutable)
_ATOMS = frozenset({str, int, float, bool, type(None)})


def _copy(v: Any) -> Any:
    """A deep copy of a parsed JSON value: what ``copy.deepcopy`` makes of one, without its bookkeeping (an eval's
    meta holds a list of every question index, and a comparison reads each eval several times)."""
    if type(v) is dict:
        return {k: x if type(x) in _ATOMS else _copy(x) for k, x in v.items()}
    if type(v) is list:
        return [x if type(x) in _ATOMS else _copy(x) for x in v]
    return copy.deepcopy(v)


def _stamp(root: Path) -> tuple[tuple[int, int, int], ...]:
    out = []
    for name in (META, SAMPLES, SUMMARY):
        try:
            st = (root / name).stat()
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((0, -1, 0))
    return tuple(out)


@dataclass
class _Loaded:
    """An eval directory's files as read, and the row checks its rows passed."""

    meta: EvalMeta
    rows: dict[int, tuple[int, SampleRecord]]
    samples: tuple[SampleRecord, ...]
    summary: EvalSummary | None
    checked: list[Any] = field(default_factory=list)


#: (directory, its files' stamps) -> what they hold, for the last 32 evals read
_LOADED: dict[tuple[Path, tuple[tuple[int, int, int], ...]], _Loaded] = {}


def _load_eval(root: Path) -> _Loaded:
    meta = schema.load_eval_meta(root / META)
    summary = schema.load_eval_summary(root / SUMMARY) if (root / SUMMARY).exists() else None
    rows = integrity.read_rows(root / SAMPLES)
    return _Loaded(meta, rows, tuple(rows[i][1] for i in sorted(rows)), summary)


def incomplete_reason(meta: EvalMeta, samples: list[SampleRecord], summary: EvalSummary | None) -> str | None:
    """Why an eval is not complete (None when it is): no summary (it never finished), a summary that says
    incomplete (an aborted or interrupted eval), or fewer stored rows than questions (a truncated
    samples.jsonl, whatever its summary says). Request errors do not make an eval incomplete: they are
    counted, and rerunning ``abh eval`` retries them."""
    n = len(meta.get("indices") or [])
    wanted = set(meta.get("indices") or [])
    rows = sum(1 for s in samples if s.index in wanted)
    if summary is None:
        return f"it has no {SUMMARY} (it never finished; {rows} of {n} questions stored)"
    if summary.get("complete") is not True:
        why = summary.get("aborted") or "its summary says incomplete"
        return f"{why} ({rows} of {n} questions stored)"
    if rows < n:
        return f"samples.jsonl holds {rows} of {n} questions although its summary says complete"
    return None


def summarize(samples: Iterable[SampleRecord], n_expected: int, wall_s: float) -> dict[str, Any]:
    """The summary figures of SGLang's script, with errors counted apart from wrong answers."""
    rows = list(samples)
    answered = [r for r in rows if r.error is None]
    errors = [r for r in rows if r.error is not None]
    correct = sum(1 for r in answered if r.correct)
    invalid = sum(1 for r in answered if r.invalid)
    completion = sum(int(r.completion_tokens or 0) for r in answered)
    n_ans = len(answered)
    missing = max(0, n_expected - len(rows))
    return {
        "n": n_expected,
        "answered": n_ans,
        "correct": correct,
        "invalid": invalid,
        "errors": len(errors),
        "missing": missing,
        "accuracy": (correct / n_ans) if n_ans else None,
        "invalid_rate": (invalid / n_ans) if n_ans else None,
        "error_rate": (len(errors) + missing) / n_expected if n_expected else 0.0,
        "latency_s": wall_s,
        "output_tokens": completion,
        "output_throughput": (completion / wall_s) if wall_s > 0 else None,
    }


def eval_done(eval_dir: Path) -> bool:
    """The resume rule for one eval: kept when its summary says complete and it has no error rows. An eval with
    errors is sent again (only its failed and missing questions), as ``abh eval`` does on a rerun."""
    path = eval_dir / schema.EVAL_SUMMARY_FILE
    if not path.exists():
        return False
    s = schema.load_eval_summary(path)
    return bool(s.get("complete")) and not s.get("errors")


@dataclass(frozen=True)
class ScoredEval:
    """An eval directory as the statistics read it (the one reader: comparisons, sequential looks, plans)."""

    dir: Path
    meta: EvalMeta
    summary: EvalSummary | None
    #: per question of ``meta["indices"]``: 1 right, 0 wrong, NaN errored or missing (a task whose answers score
    #: in between: that score; a task that repeats questions: the mean over each question's answered repeats)
    scores: np.ndarray
    #: the server launch that served it (``launch``, else the older ``instance``); an eval that names none is
    #: its own launch (``dir:<path>``), so it is never taken to share one with another
    launch: str
    #: per question of ``meta["indices"]``: a 16-byte fingerprint of its output (None errored or missing), for
    #: whether two passes answered alike (harness.analysis.determinism) without holding every pass's answers
    outputs: tuple[bytes | None, ...] = ()
    #: the question of each score (``meta["indices"]``, or each repeated question's row once)
    questions: np.ndarray | None = None


def _fingerprint(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def load_scored(eval_dir: str | Path, check: integrity.RowCheck | None = None) -> ScoredEval:
    """The eval in ``eval_dir`` with its per-question scores and launch id (StoreError when unreadable, or when
    a row is not what it claims by the task's ``check``)."""
    import numpy as np

    root = Path(eval_dir)
    try:
        meta, samples, summary = load_eval(root, check)
    except (OSError, json.JSONDecodeError) as e:
        raise StoreError(f"cannot read eval {root}: {e}") from None
    indices = list(meta.get("indices") or [])
    by_index = {s.index: s for s in samples}
    scores = np.full(len(indices), np.nan)
    for j, idx in enumerate(indices):
        rec = by_index.get(idx)
        if rec is not None and rec.error is None and rec.correct is not None:
            scores[j] = rec.score if rec.score is not None else (1.0 if rec.correct else 0.0)
    questions = np.asarray(indices)
    repeats = int(meta.get("repeats") or 1)
    if repeats > 1:  # the question's score: the mean over its answered repeats (NaN: none answered)
        questions = np.asarray(sorted({i // repeats for i in indices}))
        pos = {q: k for k, q in enumerate(questions.tolist())}
        total, count = np.zeros(questions.size), np.zeros(questions.size)
        for j, idx in enumerate(indices):
            if np.isfinite(scores[j]):
                total[pos[idx // repeats]] += scores[j]
                count[pos[idx // repeats]] += 1
        with np.errstate(invalid="ignore", divide="ignore"):
            scores = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    launch = meta.get("launch") or meta.get("instance") or f"dir:{root.resolve()}"
    outputs = tuple(_fingerprint(r.output) if r is not None and r.error is None and r.output is not None else None
                    for r in map(by_index.get, indices))
    return ScoredEval(root, meta, summary, scores, str(launch), outputs, questions)
