"""The ``routing`` object of ``comparison.json``: the experts the MoE gate routed A's reference tokens to on
B's launches and on A's other launches (the floor), streamed a question at a time; the verdict is the
launch-level test of the mean ids moved per routed row (:mod:`harness.stats.expert_sets`). A defect (an id out
of range, fewer than top_k ids) is never noise: it is named per side whatever the verdict."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from harness.results.records import finite_or_none
from harness.results.routing_record import Routing, RoutingLayer, RoutingQuestion, RoutingSide
from harness.results.routing_store import RoutingError, RoutingTable, load_routing, routing_status, tally_of
from harness.stats.expert_sets import PairTally, PassTally, launch_test, share
from harness.stats.verdict import ALPHA

DEFAULT_TOP_N = 10
#: experts listed per layer as gaining / losing the most tokens
LOAD_SHOWN = 3


def share_words(x: float | None) -> str:
    """A share in words: "100 %", "0 %", else two decimals ("99.98 %")."""
    if x is None:
        return "n/a"
    if x >= 1.0:
        return "100 %"
    if x <= 0.0:
        return "0 %"
    return f"{100 * x:.2f} %"


def defect_words(t: PassTally) -> tuple[str | None, int, int]:
    """(a pass's routing defect in words or None, layers with an id out of range, layers short of ids)."""
    routed_layers = int((t.routed > 0).sum())
    short = t.in_range[:, :t.top_k].sum(axis=1)
    layers_short = int(((short > 0) & (t.routed > 0)).sum())
    layers_out = int(((t.rows_out_of_range > 0) & (t.routed > 0)).sum())
    rows = int(t.routed.sum())
    parts = []
    m = t.routed_per_row()
    if m is not None and m < t.top_k:
        parts.append(f"{m} routed experts per token instead of {t.top_k}")
    elif layers_short:
        parts.append(f"fewer than {t.top_k} routed experts on {share_words(share(short, rows))} of tokens")
    if layers_out:
        ids = ", ".join(str(i) for i in sorted(t.out_of_range_ids)[:4]) + (", ..." if len(t.out_of_range_ids) > 4 else "")
        where = "every MoE layer" if layers_out == routed_layers else f"{layers_out} of {routed_layers} MoE layers"
        parts.append(f"{'an id' if len(t.out_of_range_ids) == 1 else 'ids'} out of range ({ids}) on "
                     f"{share_words(share(t.rows_out_of_range, rows))} of tokens in {where}")
    return (" and ".join(parts) or None), layers_out, layers_short


def side_of(table: RoutingTable, label: str) -> RoutingSide:
    t = tally_of(table.meta)
    defect, layers_out, layers_short = defect_words(t)
    counts = t.in_range.sum(axis=0)
    return RoutingSide(
        label=label, launch=table.meta.get("launch"), top_k=t.top_k, num_experts=t.num_experts, layers=t.layers,
        routed_layers=int((t.routed > 0).sum()), rows=int(t.routed.sum()),
        in_range_per_row={str(i): int(c) for i, c in enumerate(counts) if c},
        routed_per_token=t.routed_per_row(), rows_out_of_range=int(t.rows_out_of_range.sum()),
        out_of_range_ids={str(k): v for k, v in sorted(t.out_of_range_ids.items())},
        layers_out_of_range=layers_out, layers_short=layers_short, defect=defect)


def _open(dirs: Sequence[Path], role: str, why: list[str]) -> list[RoutingTable]:
    got = []
    for d in dirs:
        try:
            got.append(load_routing(d))
        except RoutingError as e:
            why.append(f"{role} ({Path(d).parent.name}/{Path(d).name}): {e}")
    return got


def _layers(ref: PassTally, b: PassTally | None, pair: PairTally, floor: PairTally | None) -> list[RoutingLayer]:
    out = []
    for layer in np.flatnonzero(pair.rows):
        rows = int(pair.rows[layer])
        gained: list[list[int]] = []
        lost: list[list[int]] = []
        load_shift = None
        if b is not None and ref.load.shape == b.load.shape:
            la, lb = ref.load[layer], b.load[layer]
            if la.sum() and lb.sum():
                load_shift = float(0.5 * np.abs(lb / lb.sum() - la / la.sum()).sum())
            d = lb - la
            order = np.argsort(-d, kind="stable")
            gained = [[int(e), int(d[e])] for e in order[:LOAD_SHOWN] if d[e] > 0]
            lost = [[int(e), int(d[e])] for e in order[::-1][:LOAD_SHOWN] if d[e] < 0]

        fl = floor
        out.append(RoutingLayer(
            layer=int(layer), rows=rows, identical=share(pair.identical[layer], rows),
            identical_aa=share(fl.identical[layer], fl.rows[layer]) if fl is not None else None,
            jaccard=share(pair.jaccard[layer], rows),
            jaccard_aa=share(fl.jaccard[layer], fl.rows[layer]) if fl is not None else None,
            moved=share(pair.moved[layer], rows),
            moved_aa=share(fl.moved[layer], fl.rows[layer]) if fl is not None else None,
            load_shift=load_shift, gained=gained, lost=lost))
    return out


def compute_routing(ref_dir: Path, other_dirs: Sequence[Path], same_dirs: Sequence[Path], *,
                    labels: dict[str, str], reference: str = "a", alpha: float = ALPHA, seed: int = 0,
                    top_n: int = DEFAULT_TOP_N) -> Routing | None:
    """The routing comparison of a run: ``other_dirs`` B's passes (the compared pass first), ``same_dirs`` A's
    other launches' (the floor first). None for a dense model."""
    if routing_status(ref_dir)[0] == "not_applicable":
        return None
    other_key = "b" if reference == "a" else "a"
    why: list[str] = []
    try:
        ref = load_routing(ref_dir)
    except RoutingError as e:
        return _finish(Routing(verdict="not_measured", verdict_reason=f"no routing on the reference launch: {e}"))
    others = _open(other_dirs, "B's launch" if reference == "a" else "A's launch", why)
    same = _open(same_dirs, "A/A launch", why)
    sides = {reference: side_of(ref, labels.get(reference, reference))}
    shape = (ref.top_k, ref.layers)
    mismatched = [t for t in (*others, *same) if (t.top_k, t.layers) != shape]
    if mismatched:
        why.append(f"{len(mismatched)} pass(es) returned another routing shape than the reference's "
                   f"(top_k {ref.top_k}, {ref.layers} layers)")
        others = [t for t in others if t not in mismatched]
        same = [t for t in same if t not in mismatched]
    if others:
        sides[other_key] = side_of(others[0], labels.get(other_key, other_key))
    if same:
        sides["aa"] = side_of(same[0], f"{reference.upper()}/{reference.upper()}")
    up = Path(ref_dir).resolve().parents
    run_dir = up[2] if len(up) > 2 else up[-1]  # <run>/evals/<role>/r<k>
    passes = {"reference": [_rel(Path(ref_dir), run_dir)], "compared": [_rel(t.root, run_dir) for t in others],
              "floor": [_rel(t.root, run_dir) for t in same]}
    if not others:
        reason = "no routing on " + ("B's" if reference == "a" else "A's") + " launches" + (
            f": {why[0]}" if why else "")
        return _finish(Routing(verdict="not_measured", verdict_reason=reason, sides=sides, passes=passes))
    common = sorted(set(ref.questions).intersection(*(t.where for t in (*others, *same))))
    dropped = len(ref.questions) - len(common)
    pairs = [PairTally(ref.layers) for _ in others]
    floors = [PairTally(ref.layers) for _ in same]
    top: list[tuple[float, int, RoutingQuestion]] = []
    for q in common:
        r = ref.get(q)
        moved_b = [p.add(r, t.get(q)) for p, t in zip(pairs, others, strict=True)][0]
        moved_f = [p.add(r, t.get(q)) for p, t in zip(floors, same, strict=True)]
        _rank(top, q, r, moved_b, moved_f[0] if moved_f else None, pairs[0], top_n)
    pair, floor = pairs[0], (floors[0] if floors else None)
    b_tally = tally_of(others[0].meta)
    out = Routing(
        verdict="not_measured", verdict_reason="", alpha=alpha, identical=share(pair.identical, pair.rows),
        identical_aa=share(floor.identical, floor.rows) if floor else None,
        jaccard=share(pair.jaccard, pair.rows), jaccard_aa=share(floor.jaccard, floor.rows) if floor else None,
        moved=share(pair.moved, pair.rows), moved_aa=share(floor.moved, floor.rows) if floor else None,
        questions=len(common), questions_dropped=dropped, sides=sides, passes=passes,
        layers=_layers(tally_of(ref.meta), b_tally, pair, floor),
        top_questions=[x[2] for x in sorted(top, key=lambda x: (-x[0], x[1]))])
    if not floors:
        reason = "no routing on an A/A launch (the floor)" + (f": {why[0]}" if why else ": the run has no A/A launch")
        return _finish(replace(out, verdict="not_measured", verdict_reason=reason))
    return _finish(_tested(out, pairs, floors, alpha, seed))


def _rel(d: Path, run_dir: Path) -> str:
    """A pass's directory as the run directory holds it (``evals/b/r1``)."""
    try:
        return Path(d).resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return str(d)


def _rank(top: list[tuple[float, int, RoutingQuestion]], q: int, ref: np.ndarray, moved_b: np.ndarray,
          moved_f: np.ndarray | None, pair: PairTally, n: int) -> None:
    """Keep the ``n`` questions whose share of parted rows most exceeds the floor's."""
    rows = pair.question_rows[-1]
    if not rows:
        return
    parted = float((moved_b > 0).sum()) / rows
    parted_aa = float((moved_f > 0).sum()) / rows if moved_f is not None else None
    key = parted - (parted_aa or 0.0)
    if parted == 0:
        return
    tok, layer = np.argwhere(moved_b > 0)[0]
    item = RoutingQuestion(question=int(q), tokens=int(ref.shape[0]), rows=int(rows), parted=parted,
                           parted_aa=parted_aa, first_token=int(tok), first_layer=int(layer))
    entry = (key, -int(q), item)
    if len(top) < n:
        heapq.heappush(top, entry)
    elif entry[:2] > top[0][:2]:
        heapq.heapreplace(top, entry)


def _tested(out: Routing, pairs: list[PairTally], floors: list[PairTally], alpha: float, seed: int) -> Routing:
    rows = np.asarray(pairs[0].question_rows, dtype=float)
    keep = rows > 0
    moved_b = [p.per_question()[keep] for p in pairs]
    moved_a = [p.per_question()[keep] for p in floors]
    if not keep.any():
        return replace(out, verdict="not_measured", verdict_reason="no routed row in the reference pass")
    res = launch_test(moved_a, moved_b, rows[keep], alpha=alpha, seed=seed)
    res = replace(res, method=res.method.replace("mean KLD", "mean ids moved per routed row"))
    verdict = res.verdict
    reason = (f"{res.method}: mean ids moved per routed row, B {_num(res.effect + _mean(res.kld_launch_a))} vs A's "
              f"other launches {_num(_mean(res.kld_launch_a))}, p = {res.p:.3g}"
              + (f"; {res.qualification}" if res.qualification else ""))
    return replace(out, verdict=verdict, verdict_reason=reason, p=finite_or_none(res.p), launch_test=res)


def _mean(x: Sequence[float]) -> float:
    return float(np.mean(x)) if len(x) else float("nan")


def _num(x: float) -> str:
    return f"{x:.4g}"


def _finish(r: Routing) -> Routing:
    return replace(r, sentence=sentence(r))


def sentence(r: Routing) -> str:
    """The routing in one clause: each side's defect (or ids in range), B's identical sets and the floor's."""
    parts = []
    defects = any(s.defect for s in r.sides.values())
    if defects:
        for key in ("a", "b"):
            s = r.sides.get(key)
            if s is not None:
                parts.append(f"{s.label} {s.defect}" if s.defect else f"{s.label} {s.top_k} in range")
    if r.identical is not None:
        parts.append(f"B vs A: identical sets on {share_words(r.identical)} of tokens")
    if r.identical_aa is not None:
        parts.append(f"A/A: identical sets on {share_words(r.identical_aa)} of tokens")
    head = "routing" + ("" if r.verdict == "not_measured" and parts else f" {r.verdict.replace('_', ' ')}")
    if not parts:
        return f"{head} ({r.verdict_reason})" if r.verdict == "not_measured" else head
    return f"{head}: " + "; ".join(parts)
