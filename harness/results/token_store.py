"""Per-token scores of one scoring pass on disk: what a server said, teacher-forced, about the reference text.

A scoring pass asks one server to score the reference completions (arm A's greedy outputs) token by token,
without generating. It is stored in the eval directory of the server's run, beside ``samples.jsonl``::

    scores.parquet   one row per (question, position) of the reference completion (columns below)
    scores.json      {"schema_version", "kind": "abh.scores", "status": "ok" | "not_measured", "reason",
                      "top_k", "questions", "tokens", "errors", "error_examples", "top_width",
                      "ref_width", "text_offsets" (list widths, whether offsets were stored),
                      "partial" (the pass stopped before every question was asked: status
                      not_measured, the questions scored so far kept for a rerun to resume),
                      ... the caller's meta (reference dir, engine, wall_s)}

``scores.parquet`` columns (Parquet via pyarrow, zstd, row groups of ``row_group_rows`` tokens):

==================  =================  ==========================================================
question            int32              dataset index of the question (``SampleRecord.index``)
position            int32              0-based token position within the reference completion
token_id            int32              the reference token at that position; null: it is
                                       ``top_ids[0]`` (stored once, :func:`with_top1`)
logprob             float32            this server's logprob of that token given prompt + prefix;
                                       null: it is ``top_logprobs[0]`` (as ``token_id``)
top_ids             list<int32>        this server's top-k ids at that position
top_logprobs        list<float32>      their logprobs (same order as ``top_ids``)
ref_top_logprobs    list<float32>      nullable: this server's logprobs of the REFERENCE pass's
                                       top-k ids, aligned with that pass's ``top_ids`` (SGLang
                                       ``token_ids_logprob``); NaN where an id was not returned
text_offset         int32              nullable: character offset of the token's start in the
                                       reference completion text (for "first diverging token")
==================  =================  ==========================================================

A question whose reference has no token has no row; one the server failed to score is left out and counted
in ``errors``. Rows arrive in any question order (:mod:`harness.results.score_blocks` reads them by question
and position). An engine that cannot score writes ``status: "not_measured"`` and a reason, never an empty
file. The writer holds one row group of numpy arrays at most: no per-token object is kept.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np

from harness.results import fileio, schema
from harness.results.arrow_buffers import array, list_array, list_offsets, list_values, numbers, valid
from harness.results.fileio import atomic_write_json, read_json

SCORES = "scores.parquet"
SCORES_META = "scores.json"
KIND = schema.SCORES
SCHEMA_VERSION = schema.WRITES[KIND]
PAD_ID = -1
#: the zstd level of abh's Parquet files (scores, score inputs)
ZSTD_LEVEL = 6
DEFAULT_ROW_GROUP_ROWS = 65_536
MAX_ERROR_EXAMPLES = 5
#: a :class:`ScoreTable`'s columns of one entry per row
ROW_COLUMNS = ("position", "token_id", "logprob", "top_ids", "top_logprobs", "ref_top_logprobs",
               "text_offset")
#: the columns stored byte stream split (:class:`ScoresWriter`), by their Parquet paths
BYTE_STREAM_SPLIT = ("token_id", "logprob", "top_ids.list.element", "top_logprobs.list.element",
                     "ref_top_logprobs.list.element")


#: ``scores.json``: the writer's own keys, then those of the caller's meta that abh's scoring passes set;
#: functional syntax, for the key ``pass``
ScoresMeta = TypedDict("ScoresMeta", {
    "schema_version": int, "kind": str, "status": str, "reason": str | None,
    # the caller's meta: which pass, of which arm and launch, against which reference, how it was asked
    "pass": str, "arm": str, "role": str, "launch": str, "engine": str, "simulated": bool, "reference": str,
    "reference_sha256": str | None, "reference_pass": str | None, "reference_eval": str, "reference_scores": str | None,
    "requested_top_k": int, "parallel": int, "url": str, "api": str, "by_ids": bool, "by_text_reason": str | None,
    "echo_shift": int | None, "asked_ids": int, "batch": int, "batch_refused": str | None, "wall_s": float, "transient": bool, "same_launch_as": str,
    # written by ScoresWriter.close (status ok)
    "top_k": int, "questions": int, "tokens": int, "top_width": int, "ref_width": int, "text_offsets": bool,
    "errors": int, "error_examples": dict[str, str], "partial": bool,
    # the caller's, for a resume: this pass's id, the reference pass's, the questions planned and missing
    "pass_id": str, "reference_pass_id": str | None, "questions_planned": int, "missing": int, "resumes": int,
    "references_digest": str,
}, total=False)


class ScoresError(RuntimeError):
    """A scores file is missing, unreadable or inconsistent."""


class NotMeasured(ScoresError):  # noqa: N818 - a state, not a failure
    """The pass was not scored (the engine cannot score, or no scoring pass ran); ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def scores_schema() -> Any:
    """The columns of ``scores.parquet`` (module docstring)."""
    from harness.results.arrow import pa

    return pa.schema([("question", pa.int32()), ("position", pa.int32()), ("token_id", pa.int32()),
                      ("logprob", pa.float32()), ("top_ids", pa.list_(pa.int32())),
                      ("top_logprobs", pa.list_(pa.float32())), ("ref_top_logprobs", pa.list_(pa.float32())),
                      ("text_offset", pa.int32())])


def _as_2d(rows: Any, dtype: Any, fill: Any) -> np.ndarray:
    """(T, k) array from a 2-D array or a list of per-token lists of varying length (padded with fill)."""
    if isinstance(rows, np.ndarray):
        if rows.ndim != 2:
            raise ValueError(f"top-k array must be 2-D (tokens, k), got shape {rows.shape}")
        return rows.astype(dtype, copy=False)
    lens = [len(r) for r in rows]
    k = max(lens, default=0)
    out = np.full((len(lens), k), fill, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


class _Chunk(TypedDict):
    """One question's columns, buffered until the next row group is written."""
    question: np.ndarray
    position: np.ndarray
    token_id: np.ndarray
    logprob: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    ref_top_logprobs: np.ndarray | None
    text_offset: np.ndarray | None


class ScoresWriter:
    """Stream one scoring pass to ``root/scores.parquet``, one question at a time, in any order: a hidden
    partial file renamed on :meth:`close`, ``scores.json`` written last, so a crash publishes nothing (as a
    context manager, an exception removes the partial file). ``carry``: a scores.parquet to keep."""

    def __init__(self, root: str | Path, *, top_k: int, meta: ScoresMeta | None = None,
                 row_group_rows: int = DEFAULT_ROW_GROUP_ROWS, carry: str | Path | None = None):
        from harness.results.arrow import pq

        self.root = fileio.make_dirs(root)
        self.top_k = int(top_k)
        self.meta = dict(meta or {})
        self.row_group_rows = int(row_group_rows)
        self._partial = self.root / f".{SCORES}.partial"
        # written through a descriptor that followed no link (pyarrow would open a planted one's target)
        self._file = fileio.open_new(self._partial)
        # dictionary encoding only where values repeat (on logprobs and ids: ~40 % of the write for 1 % of the
        # size); logprobs and ids byte stream split (7 % smaller and faster to read than plain)
        self._writer = pq.ParquetWriter(self._file, scores_schema(), compression="zstd",
                                        compression_level=ZSTD_LEVEL, use_dictionary=["question"],
                                        use_byte_stream_split=list(BYTE_STREAM_SPLIT))
        self._buf: list[_Chunk] = []
        self._buffered = 0
        self._seen: set[int] = set()
        self.errors: dict[int, str] = {}
        self._width = self._ref_width = 0
        self._offsets = False
        self.tokens = 0
        self._closed = False
        if carry is not None:
            try:
                self._carry(Path(carry))
            except BaseException:
                self.abort()
                raise

    def _carry(self, path: Path) -> None:
        """Copy the rows of ``path`` (a pass this one resumes), one row group at a time."""
        from harness.results.arrow import pq

        pf = pq.ParquetFile(path)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, use_threads=False)
            self._writer.write_table(t, row_group_size=max(t.num_rows, 1))
            self._seen.update(np.unique(numbers(t.column("question"), np.int64)).tolist())
            self.tokens += t.num_rows
            k, k_ref, offsets = _widths(t)
            self._width, self._ref_width = max(self._width, k), max(self._ref_width, k_ref)
            self._offsets = self._offsets or offsets

    @property
    def questions(self) -> set[int]:
        """The questions this pass holds rows of (carried ones included)."""
        return set(self._seen)

    def add(self, question: int, token_ids: Sequence[int] | np.ndarray, logprobs: Sequence[float] | np.ndarray,
            top_ids: Sequence[Sequence[int]] | np.ndarray, top_logprobs: Sequence[Sequence[float]] | np.ndarray,
            ref_top_logprobs: Sequence[Sequence[float]] | np.ndarray | None = None,
            text_offsets: Sequence[int] | np.ndarray | None = None) -> None:
        """Add one question's scores (T tokens). ``top_ids``/``top_logprobs``: (T, k) arrays or per-token
        lists (padded with ``PAD_ID`` and ``-inf``); ``ref_top_logprobs`` (T, k_ref) NaN-padded."""
        if self._closed:
            raise ScoresError("writer is closed")
        q = int(question)
        if q in self._seen:
            raise ScoresError(f"question {q} added twice to {self.root / SCORES}")
        tok = np.asarray(token_ids, dtype=np.int32).reshape(-1)
        t = tok.size
        lp = np.asarray(logprobs, dtype=np.float32).reshape(-1)
        ids = _as_2d(top_ids, np.int32, PAD_ID)
        tlp = _as_2d(top_logprobs, np.float32, -np.inf)
        if lp.size != t or ids.shape[0] != t or tlp.shape != ids.shape:
            raise ScoresError(f"question {q}: {t} tokens but {lp.size} logprobs, top_ids {ids.shape}, "
                              f"top_logprobs {tlp.shape}")
        ref = None if ref_top_logprobs is None else _as_2d(ref_top_logprobs, np.float32, np.nan)
        if ref is not None and ref.shape[0] != t:
            raise ScoresError(f"question {q}: ref_top_logprobs has {ref.shape[0]} rows for {t} tokens")
        off = None if text_offsets is None else np.asarray(text_offsets, dtype=np.int32).reshape(-1)
        if off is not None and off.size != t:
            raise ScoresError(f"question {q}: {off.size} text offsets for {t} tokens")
        self._seen.add(q)
        self._width = max(self._width, ids.shape[1])
        self._ref_width = max(self._ref_width, 0 if ref is None else ref.shape[1])
        self._offsets = self._offsets or off is not None
        self._buf.append({"question": np.full(t, q, dtype=np.int32), "position": np.arange(t, dtype=np.int32),
                          "token_id": tok, "logprob": lp, "top_ids": ids, "top_logprobs": tlp,
                          "ref_top_logprobs": ref, "text_offset": off})
        self._buffered += t
        self.tokens += t
        if self._buffered >= self.row_group_rows:
            self._flush()

    def record_error(self, question: int, message: str) -> None:
        """Note a question this pass could not score (request error): it is left out, and counted."""
        self.errors[int(question)] = str(message)[:500]

    def _flush(self) -> None:
        from harness.results.arrow import pa

        if not self._buf:
            return
        n = self._buffered

        def cat(key: Literal["question", "position", "token_id", "logprob"]) -> np.ndarray:
            return np.concatenate([b[key] for b in self._buf])

        def lists(key: Literal["top_ids", "top_logprobs", "ref_top_logprobs"], dtype: Any, nullable: bool) -> Any:
            parts = [b[key] for b in self._buf]
            if nullable and all(p is None for p in parts):
                return pa.nulls(n, pa.list_(pa.from_numpy_dtype(np.dtype(dtype))))
            rows = np.array([b["token_id"].size for b in self._buf], dtype=np.int64)
            widths = np.array([0 if p is None else p.shape[1] for p in parts], dtype=np.int64)
            offsets = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.repeat(widths, rows), out=offsets[1:])
            values = np.concatenate([p.reshape(-1) for p in parts if p is not None] or [np.empty(0, dtype)])
            null = np.repeat(np.array([p is None for p in parts]), rows)
            return list_array(offsets, array(values.astype(dtype, copy=False)), null)

        offs = [b["text_offset"] for b in self._buf]
        if all(o is None for o in offs):
            text_offset = pa.nulls(n, pa.int32())
        else:
            vals = np.concatenate([o if o is not None else np.zeros(b["token_id"].size, np.int32)
                                   for o, b in zip(offs, self._buf, strict=True)])
            mask = np.concatenate([np.full(b["token_id"].size, o is None)
                                   for o, b in zip(offs, self._buf, strict=True)])
            text_offset = array(vals.astype(np.int32, copy=False), mask)
        top1 = np.concatenate([_is_top1(b["token_id"], b["logprob"], b["top_ids"], b["top_logprobs"])
                               for b in self._buf])
        table = pa.Table.from_arrays([
            array(cat("question")), array(cat("position")), array(cat("token_id"), top1), array(cat("logprob"), top1),
            lists("top_ids", np.int32, False), lists("top_logprobs", np.float32, False),
            lists("ref_top_logprobs", np.float32, True), text_offset,
        ], schema=scores_schema())
        self._writer.write_table(table, row_group_size=max(n, 1))
        self._buf.clear()
        self._buffered = 0

    def close(self, partial: str | None = None) -> Path:
        """Flush, publish ``scores.parquet`` and write ``scores.json`` (status ok). ``partial``: why the
        pass stopped before every question was asked (then not_measured, ``partial: true``, for a resume)."""
        if self._closed:
            return self.root / SCORES
        self._flush()
        self._writer.close()
        self._closed = True
        os.fsync(self._file.fileno())
        self._file.close()
        fileio.replace(self._partial, self.root / SCORES)
        atomic_write_json(self.root / SCORES_META, {
            "schema_version": SCHEMA_VERSION, "kind": KIND, **self.meta,
            "status": "ok" if partial is None else "not_measured", "reason": partial, "partial": partial is not None,
            "top_k": self.top_k, "questions": len(self._seen), "tokens": self.tokens,
            "top_width": self._width, "ref_width": self._ref_width, "text_offsets": self._offsets,
            "errors": len(self.errors),
            "error_examples": {str(q): m for q, m in sorted(self.errors.items())[:MAX_ERROR_EXAMPLES]}})
        return self.root / SCORES

    def abort(self) -> None:
        """Drop what was written (no scores.parquet, no scores.json)."""
        if not self._closed:
            self._closed = True
            try:
                self._writer.close()
            finally:
                self._file.close()
                self._partial.unlink(missing_ok=True)

    def __enter__(self) -> ScoresWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_not_measured(root: str | Path, reason: str, meta: ScoresMeta | None = None) -> None:
    """Record that this pass could not be scored (e.g. the engine returns no prompt logprobs), and why."""
    root = Path(root)
    (root / SCORES).unlink(missing_ok=True)
    atomic_write_json(root / SCORES_META, {"schema_version": SCHEMA_VERSION, "kind": KIND, **(meta or {}),
                                           "status": "not_measured", "reason": reason})


def scores_status(root: str | Path) -> tuple[str, str | None]:
    """("ok", None) when ``root`` holds a usable scoring pass, else ("not_measured", reason)."""
    root = Path(root)
    meta_path = root / SCORES_META
    if not meta_path.exists():
        return "not_measured", f"no scoring pass in {root} (no {SCORES_META})"
    try:
        meta = read_json(meta_path)
    except (OSError, ValueError) as e:
        return "not_measured", f"{meta_path} is unreadable: {e}"
    try:
        schema.check(meta, KIND, meta_path)  # a kind or version this abh does not read is no pass to use
    except schema.SchemaError as e:
        return "not_measured", str(e)
    if meta.get("status") != "ok":
        return "not_measured", str(meta.get("reason") or f"{meta_path} status {meta.get('status')!r}")
    if not (root / SCORES).exists():
        return "not_measured", f"{root / SCORES} is missing although {SCORES_META} says ok"
    return "ok", None


@dataclass
class ScoreTable:
    """One scoring pass as numpy columns, tokens sorted by (question, position): ``questions[i]`` owns rows
    ``offsets[i]:offsets[i+1]``; ``top_ids`` / ``top_logprobs`` (N, k) padded with ``PAD_ID`` / -inf;
    ``ref_top_logprobs`` (N, k_ref) NaN, ``text_offset`` -1 where missing (None: the pass has none)."""

    questions: np.ndarray
    offsets: np.ndarray
    position: np.ndarray
    token_id: np.ndarray
    logprob: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    ref_top_logprobs: np.ndarray | None
    text_offset: np.ndarray | None
    meta: ScoresMeta = field(default_factory=ScoresMeta)

    @property
    def tokens(self) -> int:
        return int(self.token_id.size)

    @property
    def top_k(self) -> int:
        return int(self.top_ids.shape[1])

    def rows(self, question: int) -> slice:
        """The row slice of one question (empty slice when absent)."""
        i = int(np.searchsorted(self.questions, question))
        if i < self.questions.size and self.questions[i] == question:
            return slice(int(self.offsets[i]), int(self.offsets[i + 1]))
        return slice(0, 0)

    def select(self, questions: np.ndarray, offsets: np.ndarray, rows: slice | np.ndarray) -> ScoreTable:
        """The table of ``questions`` (``offsets`` into their rows), its rows this one's ``rows`` (a column
        without rows, one not read, stays as it is)."""
        def take(v: Any) -> Any:
            return None if v is None else (v[rows] if v.shape[0] == self.token_id.size else v)

        rows_of = {c: take(getattr(self, c)) for c in ROW_COLUMNS}
        return replace(self, questions=questions, offsets=offsets, **rows_of)


def pass_widths(meta: ScoresMeta, pf: Any) -> tuple[int, int, bool]:
    """(top-k width, reference width, whether text offsets are stored) of a pass: its ``scores.json``'s, else
    (written by another tool) one read of the list columns of its Parquet file ``pf``."""
    if all(isinstance(meta.get(key), int | bool) for key in ("top_width", "ref_width", "text_offsets")):
        return int(meta["top_width"]), int(meta["ref_width"]), bool(meta["text_offsets"])
    k, k_ref, has_off = 0, 0, False
    for g in range(pf.num_row_groups):
        w = _widths(pf.read_row_group(g, columns=["top_ids", "ref_top_logprobs", "text_offset"]))
        k, k_ref, has_off = max(k, w[0]), max(k_ref, w[1]), has_off or w[2]
    return k, k_ref, has_off


def _widths(t: Any) -> tuple[int, int, bool]:
    return (_list_width(t.column("top_ids")), _list_width(t.column("ref_top_logprobs")),
            t.column("text_offset").null_count < t.num_rows)


def _list_width(col: Any) -> int:
    """The longest list of a list column (0 when every entry is null or empty)."""
    lens = np.diff(list_offsets(col))
    ok = valid(col)
    if ok is not None:
        lens = lens[ok]
    return int(lens.max()) if lens.size else 0


def _is_top1(tok: np.ndarray, lp: np.ndarray, ids: np.ndarray, tlp: np.ndarray) -> np.ndarray:
    """The tokens that are their top list's first entry, id and logprob bit for bit: stored null (the fact once)."""
    if ids.shape[1] == 0:
        return np.zeros(tok.size, dtype=bool)
    return (tok == ids[:, 0]) & (lp.view(np.int32) == tlp[:, 0].view(np.int32))


def with_top1(col: Any, first: np.ndarray, dtype: Any) -> np.ndarray:
    """A ``token_id`` or ``logprob`` column as an array, a null (the token is its top list's first entry)
    taken from ``first``; a file without nulls (an older writer's) reads as it is."""
    vals = numbers(col, dtype)
    ok = valid(col)
    return vals if ok is None else np.where(ok, vals, first).astype(dtype, copy=False)


def _fill_lists(dst: np.ndarray, col: Any) -> None:
    """Copy a list column into ``dst``, filled beforehand (rows shorter than its width keep their fill)."""
    n = len(col)
    if n == 0:
        return
    k = dst.shape[1]
    offsets = list_offsets(col)
    base = int(offsets[0])
    values = list_values(col, dst.dtype)[base:int(offsets[-1])]
    lens = np.diff(offsets)
    ok = valid(col)
    if ok is not None:
        lens = np.where(ok, lens, 0)
    if np.all(lens == k):
        dst[:] = values.reshape(n, k)
        return
    rows = np.repeat(np.arange(n), lens)
    cols = np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
    dst[rows, cols] = values[np.repeat(offsets[:-1] - base, lens) + cols]


def sort_rows(rows: dict[str, Any], where: Path) -> tuple[np.ndarray, np.ndarray]:
    """Sort the columns ``rows`` (None: one the pass lacks) by (question, position) in place, a column at a
    time; the questions and their row offsets. ScoresError unless a question's positions are 0..T-1."""
    order = np.lexsort((rows["position"], rows["question"]))
    if not np.all(order[1:] > order[:-1]):
        for c, v in rows.items():
            rows[c] = None if v is None else v[order]
    del order
    n = rows["question"].size
    qs, first = np.unique(rows["question"], return_index=True)
    offsets = np.append(first, n).astype(np.int64)
    if not np.array_equal(rows["position"], np.arange(n) - np.repeat(first, np.diff(offsets))):
        raise ScoresError(f"{where}: positions are not 0..T-1 within each question "
                          "(a question written twice, or rows lost)")
    return qs.astype(np.int64), offsets
