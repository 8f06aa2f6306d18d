"""The token ids a scoring pass sends: every question's prompt ids and reference ids, held as int32 arrays.

Held as int32 arrays, a prompt's prefix shared with the first prompt (the few-shot block) once: about 4 bytes
an id of what differs (lists: 8 bytes an id, ~100 MiB for 13k GSM8K questions). A question's ids become lists,
with one int object per distinct id, only when its request is built (``inputs[q]``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

#: Up to this id, lists are made from a table of one int object per id (8 bytes an id up to it; a tokenizer's
#: vocabulary is far smaller); beyond, from a dict of the ids met
ID_TABLE_MAX = 1 << 20

IdSeq = Sequence[int] | np.ndarray


class ScoreInputs(Mapping[int, tuple[list[int], list[int]]]):
    """question -> (prompt ids, reference ids), in the order added; ``inputs[q]`` makes the two lists."""

    def __init__(self, rows: Mapping[int, tuple[IdSeq, IdSeq]] | None = None):
        self._base = np.empty(0, np.int32)  # the first prompt: the prefix the others share with it is kept once
        self._rows: dict[int, tuple[int, np.ndarray, np.ndarray]] = {}  # (shared prefix, own tail, reference)
        self._table = np.empty(0, dtype=object)  # id -> its one int object (filled as ids are met)
        self._known = np.zeros(0, bool)
        self._pool: dict[int, int] = {}
        self._base_ints: list[int] | None = None  # the first prompt as a list, made when first asked for
        for q, (p, r) in (rows or {}).items():
            self[q] = (p, r)

    def __setitem__(self, question: int, ids: tuple[IdSeq, IdSeq]) -> None:
        prompt, reference = (np.asarray(x, dtype=np.int64) for x in ids)
        if not self._rows:
            self._base, self._base_ints = prompt.astype(np.int32), None
        m = min(prompt.size, self._base.size)
        differ = np.flatnonzero(prompt[:m] != self._base[:m])
        shared = int(differ[0]) if differ.size else m
        self._rows[int(question)] = (shared, prompt[shared:].astype(np.int32), reference.astype(np.int32))

    def __getitem__(self, question: int) -> tuple[list[int], list[int]]:
        shared, tail, reference = self._rows[question]
        if not shared:
            return self._ints(tail), self._ints(reference)
        if self._base_ints is None:
            self._base_ints = self._ints(self._base)
        # the shared prefix (a few-shot block: most of a prompt's ids) made a list once, not once a question
        return self._base_ints[:shared] + self._ints(tail), self._ints(reference)

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, question: object) -> bool:
        return question in self._rows

    def arrays(self, question: int) -> tuple[np.ndarray, np.ndarray]:
        """(prompt ids, reference ids) of ``question`` as int32 arrays."""
        shared, tail, reference = self._rows[question]
        prompt = tail if shared == 0 else np.concatenate([self._base[:shared], tail])
        return prompt, reference

    def sizes(self, question: int) -> tuple[int, int]:
        """(prompt ids, reference ids) of ``question``: how many."""
        shared, tail, reference = self._rows[question]
        return shared + tail.size, reference.size

    def _ints(self, ids: np.ndarray) -> list[int]:
        """``ids`` as a list whose equal ids are one int object (36 bytes an id as fresh ints, 8 shared)."""
        if ids.size == 0:
            return []
        top = int(ids.max())
        if int(ids.min()) < 0 or top >= ID_TABLE_MAX:
            get = self._pool.setdefault
            return [get(x, x) for x in ids.tolist()]
        if top >= self._table.size:
            grown = np.empty(max(top + 1, 2 * self._table.size), dtype=object)
            grown[:self._table.size] = self._table
            self._table = grown
            self._known = np.concatenate([self._known, np.zeros(grown.size - self._known.size, bool)])
        fresh = ~self._known[ids]
        if fresh.any():
            new = np.unique(ids[fresh])
            self._table[new] = new.tolist()
            self._known[new] = True
        got = self._table[ids]
        return list(got.tolist())


def flat(inputs: ScoreInputs, questions: Sequence[int], which: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of the prompt (``which`` 0) or reference (1) ids of ``questions``, end to end."""
    parts = [inputs.arrays(q)[which] for q in questions]
    offsets = np.zeros(len(parts) + 1, np.int64)
    np.cumsum([p.size for p in parts], out=offsets[1:])
    values = np.concatenate(parts).astype(np.int32) if parts else np.empty(0, np.int32)
    return offsets, values


def of_columns(questions: np.ndarray, prompt: tuple[np.ndarray, np.ndarray],
               reference: tuple[np.ndarray, np.ndarray], out: ScoreInputs | None = None) -> ScoreInputs:
    """The inputs of stored columns ((offsets, values) each), added to ``out`` (else a new one)."""
    out = ScoreInputs() if out is None else out
    (po, pv), (ro, rv) = prompt, reference
    for n, q in enumerate(questions.tolist()):
        out[q] = (pv[po[n]:po[n + 1]], rv[ro[n]:ro[n + 1]])
    return out


def as_inputs(rows: Any) -> ScoreInputs:
    """``rows`` (a mapping question -> (prompt ids, reference ids)) as :class:`ScoreInputs`."""
    return rows if isinstance(rows, ScoreInputs) else ScoreInputs(rows)
