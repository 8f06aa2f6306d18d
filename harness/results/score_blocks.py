"""One stored scoring pass read a block of questions at a time, in question order, in bounded memory.

``scores.parquet`` rows arrive in nearly question order, never exactly. :class:`PassReader` reads the row
groups in the order of their smallest question (from the Parquet statistics) and hands out, on
:meth:`PassReader.upto`, every row of the questions up to a bound: a question is complete once no unread row
group can hold it. What stays in memory is the rows read but not yet handed out, of the columns asked for. An
in-memory ``ScoreTable`` is read the same way (sliced). :func:`pass_blocks` yields a pass as blocks of whole
questions; :func:`pass_questions` keeps the rows of given questions; :class:`QuestionRows` hands out one
question's rows at a time.

A pass that asked every question at once wrote row groups whose question ranges overlap, and reading up to a
question then reads most groups: a pass asks a bounded number of questions at a time so that its groups follow
the question order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from harness.results.arrow_buffers import numbers
from harness.results.fileio import read_json
from harness.results.token_store import (
    PAD_ID,
    ROW_COLUMNS,
    SCORES,
    SCORES_META,
    NotMeasured,
    ScoresError,
    ScoresMeta,
    ScoreTable,
    _fill_lists,
    pass_widths,
    scores_status,
    sort_rows,
    with_top1,
)

#: the columns every block holds (the rows' identity)
KEY_COLUMNS = ("question", "position", "token_id")
#: the optional columns a reader may ask for
DATA_COLUMNS = ("logprob", "top_ids", "top_logprobs", "ref_top_logprobs", "text_offset")
#: tokens per block :func:`pass_blocks` yields (whole questions: a block may exceed it by one question)
BLOCK_TOKENS = 16_384
#: rows pyarrow decodes at a time
BATCH_ROWS = 8_192


class PassReader:
    """Rows of one scoring pass (its directory, or a table already loaded), question by question in order.
    ``columns``: which of :data:`DATA_COLUMNS` the blocks carry. :class:`NotMeasured` for a pass that was not
    scored, :class:`ScoresError` for an unreadable one, here or at any later read."""

    def __init__(self, src: str | Path | ScoreTable, columns: Iterable[str] = DATA_COLUMNS):
        self.columns = tuple(c for c in DATA_COLUMNS if c in set(columns))
        self._done = -np.inf  # every question <= this one was handed out
        self._table: ScoreTable | None = None
        if isinstance(src, ScoreTable):
            self._table = src
            self.meta: ScoresMeta = src.meta
            self.top_k, self.ref_width = src.top_k, 0 if src.ref_top_logprobs is None else \
                src.ref_top_logprobs.shape[1]
            self.has_offsets = src.text_offset is not None
            return
        from harness.results.arrow import pq

        self.root = Path(src)
        status, reason = scores_status(self.root)
        if status != "ok":
            raise NotMeasured(reason or "not measured")
        try:
            self.meta = read_json(self.root / SCORES_META)
            self._pf = pq.ParquetFile(self.root / SCORES, pre_buffer=False, buffer_size=1 << 20)
            self._ranges = [self._group_range(g) for g in range(self._pf.num_row_groups)]
            self.top_k, self.ref_width, self.has_offsets = pass_widths(self.meta, self._pf)
        except ScoresError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as e:  # pyarrow's errors are ValueError/OSError
            raise ScoresError(f"{self.root / SCORES}: {e}") from None
        self._order = sorted((g for g, r in enumerate(self._ranges) if r[0] <= r[1]),  # an empty group: nothing
                             key=lambda g: (self._ranges[g][0], g))
        self._next = 0
        self._buf: list[dict[str, np.ndarray]] = []

    # -------------------------------------------------------------------------------- set-up
    def _group_range(self, g: int) -> tuple[float, float]:
        """The smallest and largest question of row group ``g`` (its statistics, else its question column)."""
        rg = self._pf.metadata.row_group(g)
        if rg.num_rows == 0:
            return np.inf, -np.inf
        st = rg.column(0).statistics
        if st is not None and st.has_min_max:
            return int(st.min), int(st.max)
        q = numbers(self._pf.read_row_group(g, columns=["question"], use_threads=False).column(0), np.int64)
        return int(q.min()), int(q.max())

    # -------------------------------------------------------------------------------- reading
    def _read_group(self, g: int) -> dict[str, np.ndarray]:
        """Row group ``g``'s asked-for columns as numpy arrays, decoded :data:`BATCH_ROWS` rows at a time (a
        whole row group at once costs pyarrow several times its size in buffers it keeps)."""
        want = list(KEY_COLUMNS) + [c for c in self.columns
                                    if not (c == "ref_top_logprobs" and not self.ref_width)
                                    and not (c == "text_offset" and not self.has_offsets)]
        # a token stored as its top list's first entry (null) is read from the list
        read = want + [c for c in ("top_ids", "top_logprobs") if c not in want and self._top1(g)]
        out: dict[str, np.ndarray] = {}
        at = 0
        for b in self._pf.iter_batches(batch_size=BATCH_ROWS, row_groups=[g], columns=read, use_threads=False):
            part = self._arrays(b, want)
            if not out:  # the group's arrays, filled batch by batch (no concatenation: its size once, not twice)
                n = self._pf.metadata.row_group(g).num_rows
                out = {c: np.empty((n, *v.shape[1:]), v.dtype) for c, v in part.items()}
            m = part["question"].size
            for c, v in part.items():
                out[c][at:at + m] = v
            at += m
        q = out["question"][:at]
        if np.all(q[1:] >= q[:-1]):
            return {c: v[:at] for c, v in out.items()}
        order = np.lexsort((out["position"][:at], q))  # by question once: upto hands out a prefix, no copy
        return {c: v[:at][order] for c, v in out.items()}

    def _top1(self, g: int) -> bool:
        """Row group ``g`` may hold tokens stored as their top list's first entry (null ``token_id``)."""
        rg = self._pf.metadata.row_group(g)
        for i in range(rg.num_columns):
            if rg.column(i).path_in_schema == "token_id":
                st = rg.column(i).statistics
                return st is None or not st.has_null_count or st.null_count > 0
        return True

    def _arrays(self, t: Any, want: list[str]) -> dict[str, np.ndarray]:
        m = t.num_rows
        names = set(t.column_names)
        out: dict[str, np.ndarray] = {}
        for c, dtype, width, fill in (("top_ids", np.int32, self.top_k, PAD_ID),
                                      ("top_logprobs", np.float32, self.top_k, -np.inf),
                                      ("ref_top_logprobs", np.float32, self.ref_width, np.nan)):
            if c in names:
                out[c] = np.full((m, width), fill, dtype)
                _fill_lists(out[c], t.column(c))
        for c in ("question", "position"):
            out[c] = numbers(t.column(c), np.int32)
        for c, top, dtype in (("token_id", "top_ids", np.int32), ("logprob", "top_logprobs", np.float32)):
            if c in want:
                first = out[top][:, 0] if top in out and self.top_k else np.zeros(m, dtype)
                out[c] = with_top1(t.column(c), first, dtype)
        for c in ("top_ids", "top_logprobs"):
            if c not in want:
                out.pop(c, None)
        if "text_offset" in want:
            out["text_offset"] = numbers(t.column("text_offset"), np.int32, fill=-1)
        return out

    def upto(self, last: int) -> ScoreTable:
        """Every row of the questions after the previous call's bound up to ``last`` (inclusive), sorted."""
        lo = self._done
        self._done = max(self._done, last)
        if self._table is not None:
            return self._slice(lo, last)
        try:
            while self._next < len(self._order) and self._ranges[self._order[self._next]][0] <= last:
                self._buf.append(self._read_group(self._order[self._next]))
                self._next += 1
        except (OSError, ValueError, KeyError) as e:
            raise ScoresError(f"{self.root / SCORES}: {e}") from None
        taken, kept = [], []
        for part in self._buf:  # each part sorted by question (_read_group): a prefix is taken, as a view
            j = int(np.searchsorted(part["question"], last, side="right"))
            if j == part["question"].size:
                taken.append(part)
            elif j:
                taken.append({c: v[:j] for c, v in part.items()})
                # once most of a part is handed out, its rest is copied: the view would keep all of it alive
                kept.append({c: v[j:].copy() if 2 * j > v.shape[0] else v[j:] for c, v in part.items()})
            else:
                kept.append(part)
        self._buf = kept
        if not taken:
            return self._empty()
        rows = taken[0] if len(taken) == 1 else {c: np.concatenate([p[c] for p in taken]) for c in taken[0]}
        del taken
        return self._table_of(rows)

    def _table_of(self, rows: dict[str, np.ndarray]) -> ScoreTable:
        """The rows as a sorted table, every question's positions checked (:func:`sort_rows`)."""
        qs, offsets = sort_rows(rows, self.root / SCORES)
        return self._assemble(qs, offsets, rows)

    def _assemble(self, qs: np.ndarray, offsets: np.ndarray, rows: dict[str, Any]) -> ScoreTable:
        def col(c: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
            v = rows.get(c)  # a column not asked for: no rows (a read of it fails loudly)
            return v if v is not None else np.empty(shape, dtype)

        return ScoreTable(
            questions=qs, offsets=offsets, position=rows["position"], token_id=rows["token_id"],
            logprob=col("logprob", (0,), np.float32), top_ids=col("top_ids", (0, self.top_k), np.int32),
            top_logprobs=col("top_logprobs", (0, self.top_k), np.float32),
            ref_top_logprobs=rows.get("ref_top_logprobs") if self.ref_width else None,
            text_offset=rows.get("text_offset") if self.has_offsets else None, meta=self.meta)

    def _slice(self, lo: float, last: int) -> ScoreTable:
        t = self._table
        assert t is not None
        i = int(np.searchsorted(t.questions, lo, side="right"))
        j = int(np.searchsorted(t.questions, last, side="right"))
        a, b = int(t.offsets[i]), int(t.offsets[j])
        rows: dict[str, Any] = {"question": np.repeat(t.questions[i:j], np.diff(t.offsets[i:j + 1])),
                                "position": t.position[a:b], "token_id": t.token_id[a:b]}
        for c in self.columns:
            v = getattr(t, c)
            rows[c] = None if v is None else v[a:b]
        return self._assemble(t.questions[i:j], t.offsets[i:j + 1] - a, rows)

    def _empty(self) -> ScoreTable:
        """No rows, of the columns asked for (the others as :meth:`_assemble` fills them)."""
        z = np.empty(0, np.int32)
        rows = {"question": z, "position": z, "token_id": z, "text_offset": z,
                "ref_top_logprobs": np.empty((0, self.ref_width), np.float32)}
        return self._assemble(np.empty(0, np.int64), np.zeros(1, np.int64),
                              {c: v for c, v in rows.items() if c in KEY_COLUMNS or c in self.columns})

    def close(self) -> None:
        """Let go of the rows read and not handed out and of the file (the metadata stays)."""
        self._buf = []
        self._pf = None
        self._next = len(getattr(self, "_order", ()))

    def questions(self) -> np.ndarray:
        """Every question the pass holds rows of, ascending (its question column alone, a row group at a time)."""
        if self._table is not None:
            return self._table.questions
        try:
            got = [np.unique(numbers(self._pf.read_row_group(g, columns=["question"], use_threads=False).column(0),
                                     np.int64)) for g in range(self._pf.num_row_groups)]
        except (OSError, ValueError, KeyError) as e:
            raise ScoresError(f"{self.root / SCORES}: {e}") from None
        return np.unique(np.concatenate(got)) if got else np.empty(0, np.int64)

    def rest(self) -> ScoreTable:
        """Every row not handed out yet."""
        return self.upto(int(np.iinfo(np.int64).max))

    @property
    def exhausted(self) -> bool:
        """Whether every row was handed out."""
        if self._table is not None:
            return self._done >= (int(self._table.questions[-1]) if self._table.questions.size else -np.inf)
        return self._next >= len(self._order) and not self._buf


def load_scores(root: str | Path) -> ScoreTable:
    """``root/scores.parquet`` whole, sorted (:class:`NotMeasured`: the pass was not scored)."""
    return PassReader(root).rest()


def pass_blocks(reader: PassReader, block_tokens: int = BLOCK_TOKENS) -> Iterator[ScoreTable]:
    """The pass as blocks of whole questions in question order, of about ``block_tokens`` tokens each."""
    while not reader.exhausted:
        big = reader.upto(_next_bound(reader))
        if big.questions.size == 0:
            continue
        yield from split_blocks(big, block_tokens)


def _next_bound(reader: PassReader) -> int:
    """A bound that hands out at least one more row group's questions (all of an in-memory table's)."""
    if reader._table is not None:
        return int(reader._table.questions[-1]) if reader._table.questions.size else 0
    if reader._next < len(reader._order):  # up to just before the next row group's first question
        nxt = reader._ranges[reader._order[reader._next]][0]
        if nxt - 1 <= reader._done:  # that group holds the next question: read it too
            return int(reader._ranges[reader._order[reader._next]][1])
        return int(nxt - 1)
    return int(np.iinfo(np.int32).max)


def split_blocks(t: ScoreTable, block_tokens: int) -> Iterator[ScoreTable]:
    """A sorted table cut into blocks of whole questions of about ``block_tokens`` tokens each."""
    nq = t.questions.size
    i = 0
    while i < nq:
        j = int(np.searchsorted(t.offsets, t.offsets[i] + max(1, block_tokens), side="left"))
        j = min(max(j, i + 1), nq)
        a, b = int(t.offsets[i]), int(t.offsets[j])
        yield t.select(t.questions[i:j], t.offsets[i:j + 1] - a, slice(a, b))
        i = j


def pass_questions(src: str | Path | ScoreTable, questions: Iterable[int],
                   columns: Iterable[str] = DATA_COLUMNS) -> ScoreTable:
    """Only the rows of ``questions`` of a pass, read block by block (without holding the pass)."""
    want = np.unique(np.fromiter((int(q) for q in questions), dtype=np.int64))
    reader = PassReader(src, columns)
    parts = []
    for blk in pass_blocks(reader):
        hit = np.flatnonzero(np.isin(blk.questions, want))
        if hit.size:
            parts.append(_pick(blk, hit))
    return _concat(parts, reader)


def _pick(t: ScoreTable, idx: np.ndarray) -> ScoreTable:
    lens = np.diff(t.offsets)[idx]
    starts = t.offsets[idx]
    off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rows = (np.repeat(starts - off[:-1], lens) + np.arange(off[-1])).astype(np.int64)
    return t.select(t.questions[idx], off, rows)


def _one(t: ScoreTable, q: int) -> ScoreTable | None:
    """The rows of question ``q`` of a sorted table (its questions unique: :func:`sort_rows`), copies; None when it
    has none. Found by bisection and cut by its two offsets: a question at a time, a scan of the block's questions
    and offsets per question cost as much as the rest of a request's building."""
    qs = t.questions
    if not qs.size or not qs[0] <= q <= qs[-1]:
        return None
    i = int(np.searchsorted(qs, q))
    if qs[i] != q:
        return None
    a, b = int(t.offsets[i]), int(t.offsets[i + 1])
    return t.select(qs[i:i + 1].copy(), np.array([0, b - a], dtype=np.int64), np.arange(a, b, dtype=np.int64))


def _concat(parts: list[ScoreTable], reader: PassReader) -> ScoreTable:
    if not parts:
        return reader._empty()
    sizes = [p.token_id.size for p in parts]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    offsets = np.concatenate([p.offsets[:-1] + s for p, s in zip(parts, starts, strict=True)]
                             + [[int(sum(sizes))]]).astype(np.int64)

    def cat(name: str) -> Any:
        vals = [getattr(p, name) for p in parts]
        return None if vals[0] is None else np.concatenate(vals)

    return ScoreTable(questions=np.concatenate([p.questions for p in parts]), offsets=offsets,
                      meta=parts[0].meta, **{c: cat(c) for c in ROW_COLUMNS})


class QuestionRows:
    """A pass's rows of one question at a time, taken in about ascending question order: the blocks read and
    not yet wholly taken are held, never the pass (a block goes once every question of ``order`` before it was
    taken). A question taken again, or far out of order, is read anew: correct, only slower."""

    def __init__(self, reader: PassReader, order: Iterable[int]):
        self._reader = reader
        self._left = sorted({int(q) for q in order})
        self._at = 0  # self._left[:self._at] were taken
        self._taken: set[int] = set()
        self._blocks: deque[ScoreTable] = deque()
        self._read = -1  # every question <= this one was asked of the reader

    def take(self, question: int) -> ScoreTable:
        """The rows of ``question``, copies (nothing keeps a block alive)."""
        q = int(question)
        while q > self._read and not self._reader.exhausted:  # a row group's questions at a time, not one's
            bound = max(q, _next_bound(self._reader))
            self._blocks.append(self._reader.upto(bound))
            self._read = bound
        got = next((r for b in self._blocks if (r := _one(b, q)) is not None), None)
        if got is None:
            src = self._reader._table if self._reader._table is not None else self._reader.root
            got = pass_questions(src, [q], self._reader.columns)
        self._taken.add(q)
        while self._at < len(self._left) and self._left[self._at] in self._taken:
            self._taken.discard(self._left[self._at])
            self._at += 1
        low = self._left[self._at] if self._at < len(self._left) else np.iinfo(np.int64).max
        while self._blocks and (not self._blocks[0].questions.size or self._blocks[0].questions[-1] < low):
            self._blocks.popleft()
        return got

