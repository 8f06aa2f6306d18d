"""``comparison.json`` ``routing``: the MoE routed experts of the reference tokens on the run's launches, against the
A/A floor (:func:`harness.analysis.routing.compute_routing`). "Tokens" are (token, MoE layer) rows: one expert
set each."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.results.records import Record, omit_none
from harness.stats.outcomes import LaunchDivergence


@dataclass(frozen=True)
class RoutingSide(Record):
    """One side's routing (``a``: A's reference pass, ``b``: B's first pass, ``aa``: the floor's), exact counts."""

    #: the arm's side in words ("without fix"), else its name
    label: str
    launch: str | None
    top_k: int
    num_experts: int | None
    #: layers in the capture, and those the gate filled (dense and hash-routed layers stay constant)
    layers: int
    routed_layers: int
    #: routed (token, layer) rows, and how many of them hold each count of in-range ids
    rows: int
    in_range_per_row: dict[str, int]
    #: the in-range ids every routed row holds when that is one number (the gate's effective top-k)
    routed_per_token: int | None
    rows_out_of_range: int
    #: out-of-range id -> times routed
    out_of_range_ids: dict[str, int]
    #: routed layers with at least one out-of-range id / with a row of fewer than top_k in-range ids
    layers_out_of_range: int
    layers_short: int
    #: what is wrong, in words (None: every routed row holds top_k in-range ids)
    defect: str | None = None


@dataclass(frozen=True)
class RoutingLayer(Record):
    """One routed layer: B's pass and the floor's against the reference pass, and B's expert load against A's."""

    layer: int
    rows: int
    identical: float | None
    identical_aa: float | None
    jaccard: float | None
    jaccard_aa: float | None
    moved: float | None
    moved_aa: float | None
    #: half the L1 distance between B's and A's expert load shares (0: the same load)
    load_shift: float | None
    #: [expert, tokens B routed to it minus A's], most gained / most lost first
    gained: list[list[int]] = field(default_factory=list)
    lost: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True)
class RoutingQuestion(Record):
    """A question where B's routing parts from the reference pass's (the first token and layer where it does)."""

    question: int
    tokens: int
    rows: int
    parted: float
    parted_aa: float | None
    first_token: int | None
    first_layer: int | None


@dataclass(frozen=True)
class Routing(Record):
    verdict: str  # diverged | indistinguishable | not_measured
    verdict_reason: str
    #: the routing in one clause, as the headline says it
    sentence: str = ""
    alpha: float | None = None
    p: float | None = None
    #: overall shares of identical sets, mean Jaccard and ids moved per (token, layer) row: B and the floor
    identical: float | None = None
    identical_aa: float | None = None
    jaccard: float | None = None
    jaccard_aa: float | None = None
    moved: float | None = None
    moved_aa: float | None = None
    questions: int = 0
    questions_dropped: int = 0
    sides: dict[str, RoutingSide] = field(default_factory=dict)
    layers: list[RoutingLayer] = field(default_factory=list)
    top_questions: list[RoutingQuestion] = field(default_factory=list)
    launch_test: LaunchDivergence | None = omit_none()
    passes: dict[str, list[str]] = field(default_factory=dict)
