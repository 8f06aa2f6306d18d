"""Routing: which experts an MoE gate picked, per token and layer, in one pass and between two passes.

A pass's routing is an array ``(tokens, layers, top_k)`` of expert ids; a row (one token in one layer) is
*routed* when it holds more than one distinct id (rows of dense or hash-routed layers are constant and
skipped). :class:`PassTally` counts one pass (an id out of range is a defect), :class:`PairTally` two passes
of the same tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .kld_launches import launch_divergence_test
from .outcomes import LaunchDivergence
from .resample import SeedLike
from .verdict import ALPHA

#: at most this many distinct out-of-range ids are listed per pass (their count is exact)
MAX_LISTED_IDS = 32


def routed_rows(ids: np.ndarray) -> np.ndarray:
    """``(tokens, layers)`` bool: the rows holding more than one distinct id (the gate filled them)."""
    a = np.asarray(ids)
    return (a != a[..., :1]).any(axis=-1)


def _distinct(sorted_ids: np.ndarray) -> np.ndarray:
    """Per row of ids sorted along the last axis, True at each id's first occurrence."""
    first = np.ones(sorted_ids.shape, bool)
    first[..., 1:] = sorted_ids[..., 1:] != sorted_ids[..., :-1]
    return first


def overlap(ref: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row of two routings of the same tokens ``(tokens, layers, k)``: (|S_ref|, |S|, |S_ref ∩ S|), as
    sets (a repeated id counts once)."""
    a, b = np.sort(np.asarray(ref), axis=-1), np.sort(np.asarray(other), axis=-1)
    if a.shape[:-1] != b.shape[:-1]:
        raise ValueError(f"routings of different tokens or layers: {a.shape} and {b.shape}")
    fa, fb = _distinct(a), _distinct(b)
    hit = (a[..., :, None] == b[..., None, :]).any(axis=-1) & fa
    return fa.sum(axis=-1), fb.sum(axis=-1), hit.sum(axis=-1)


@dataclass
class PassTally:
    """One pass's routing, tallied as it streams in (``num_experts`` None: nothing is out of range)."""

    top_k: int
    layers: int
    num_experts: int | None
    rows: np.ndarray = field(init=False)
    routed: np.ndarray = field(init=False)
    #: (layers, top_k + 1): routed rows by their count of in-range ids
    in_range: np.ndarray = field(init=False)
    rows_out_of_range: np.ndarray = field(init=False)
    #: out-of-range id -> how many times it was routed (every layer)
    out_of_range_ids: dict[int, int] = field(default_factory=dict)
    load: np.ndarray = field(init=False)
    questions: int = 0

    def __post_init__(self) -> None:
        L, k = self.layers, self.top_k  # noqa: N806 - the shape's letters
        self.rows, self.routed = np.zeros(L, np.int64), np.zeros(L, np.int64)
        self.in_range = np.zeros((L, k + 1), np.int64)
        self.rows_out_of_range = np.zeros(L, np.int64)
        self.load = np.zeros((L, self.num_experts or 1), np.int64)

    def add(self, ids: np.ndarray) -> None:
        """Tally one question's routing ``(tokens, layers, top_k)``."""
        a = np.asarray(ids, dtype=np.int64)
        if a.ndim != 3 or a.shape[1:] != (self.layers, self.top_k):
            raise ValueError(f"routing of shape {a.shape}, not (tokens, {self.layers}, {self.top_k})")
        self.questions += 1
        routed = routed_rows(a)
        self.rows += a.shape[0]
        self.routed += routed.sum(axis=0)
        n = self.num_experts
        inside = (a >= 0) & (a < n) if n is not None else np.ones(a.shape, bool)
        counts = np.where(routed[..., None], inside, False).sum(axis=-1)  # (tokens, layers)
        for layer in range(self.layers):
            self.in_range[layer] += np.bincount(counts[routed[:, layer], layer], minlength=self.top_k + 1)
        outside = ~inside & routed[..., None]
        self.rows_out_of_range += outside.any(axis=-1).sum(axis=0)
        if outside.any():
            vals, cnt = np.unique(a[outside], return_counts=True)
            for v, c in zip(vals.tolist(), cnt.tolist(), strict=True):
                if v in self.out_of_range_ids or len(self.out_of_range_ids) < MAX_LISTED_IDS:
                    self.out_of_range_ids[v] = self.out_of_range_ids.get(v, 0) + c
        self._add_load(a, routed, inside)

    def _add_load(self, a: np.ndarray, routed: np.ndarray, inside: np.ndarray) -> None:
        keep = routed[..., None] & inside & (a >= 0)
        width = self.load.shape[1]
        top = int(a[keep].max()) + 1 if keep.any() else 0
        if top > width:  # unknown expert count: grow to the largest id seen
            self.load = np.pad(self.load, ((0, 0), (0, top - width)))
            width = top
        layer = np.broadcast_to(np.arange(self.layers)[None, :, None], a.shape)
        flat = np.bincount((layer[keep] * width + a[keep]).ravel(), minlength=self.layers * width)
        self.load += flat.reshape(self.layers, width)

    def routed_per_row(self) -> int | None:
        """The in-range ids every routed row holds when that is one number (the gate's effective top-k), else
        None (rows differ, or no routed row)."""
        seen = np.flatnonzero(self.in_range.sum(axis=0))
        return int(seen[0]) if seen.size == 1 else None


@dataclass
class PairTally:
    """Another launch's routing of the reference tokens against the reference pass's, tallied per question;
    rows the reference left unrouted are skipped."""

    layers: int
    rows: np.ndarray = field(init=False)
    identical: np.ndarray = field(init=False)
    jaccard: np.ndarray = field(init=False)
    moved: np.ndarray = field(init=False)
    #: per question: routed rows and ids moved (the launch-level test's unit)
    question_rows: list[int] = field(default_factory=list)
    question_moved: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rows = np.zeros(self.layers, np.int64)
        self.identical = np.zeros(self.layers, np.int64)
        self.jaccard = np.zeros(self.layers, np.float64)
        self.moved = np.zeros(self.layers, np.int64)

    def add(self, ref: np.ndarray, other: np.ndarray) -> np.ndarray:
        """Tally one question; the ids moved per token and layer ``(tokens, layers)``, 0 on skipped rows."""
        na, nb, inter = overlap(ref, other)
        keep = routed_rows(ref)
        moved = np.where(keep, nb - inter, 0)
        union = na + nb - inter
        self.rows += keep.sum(axis=0)
        self.identical += (keep & (inter == na) & (inter == nb)).sum(axis=0)
        self.jaccard += np.where(keep, inter / np.maximum(union, 1), 0.0).sum(axis=0)
        self.moved += moved.sum(axis=0)
        self.question_rows.append(int(keep.sum()))
        self.question_moved.append(int(moved.sum()))
        return moved

    def per_question(self) -> np.ndarray:
        """Mean ids moved per routed row, per question (NaN for a question without a routed row)."""
        r, m = np.asarray(self.question_rows, dtype=float), np.asarray(self.question_moved, dtype=float)
        return np.divide(m, r, out=np.full(r.shape, np.nan), where=r > 0)


def share(num: np.ndarray | int, den: np.ndarray | int) -> float | None:
    """Σ num / Σ den, None when nothing was counted."""
    d = float(np.sum(den))
    return float(np.sum(num)) / d if d > 0 else None


def launch_test(moved_a: Sequence[np.ndarray], moved_b: Sequence[np.ndarray], rows: np.ndarray, *,
                alpha: float = ALPHA, seed: SeedLike = 0, n_resamples: int = 9_999) -> LaunchDivergence:
    """B's launches against A's other launches on the mean ids moved per routed row, per question weighted by
    its routed ``rows``."""
    return launch_divergence_test(np.vstack(moved_a), np.vstack(moved_b), rows, alpha=alpha,
                                  n_resamples=n_resamples, seed=seed)
