"""The routing comparison of a run (harness.analysis.routing) from routing stores written here with numpy (not the
simulator), its verdict, and its clause on every surface (headline, comparison.md, report.html)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.docs import comparison
from helpers.rundirs import build_run_dir

from harness.analysis.routing import compute_routing, share_words
from harness.report.headline import headline
from harness.report.html import render_comparison
from harness.report.markdown import render as render_markdown
from harness.results import schema
from harness.results.records import to_doc
from harness.results.routing_record import Routing
from harness.results.routing_store import RoutingWriter, write_not_measured

E, K, L, HASH = 384, 6, 6, 2
LABELS = {"a": "without the fix", "b": "with the fix"}


def base_routing(n: int, seed: int = 0) -> list[np.ndarray]:
    """Per question, (tokens, layers, k + 1) candidates, best first (the (k+1)-th is the near-tied one)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        t = int(rng.integers(5, 30))
        out.append(np.argsort(rng.random((t, L, E)), axis=2)[:, :, :K + 1])
    return out


def launch(base: list[np.ndarray], rng: np.random.Generator, flip: float, buggy: bool = False) -> list[np.ndarray]:
    out = []
    for cand in base:
        kept = K - 1 if buggy else K
        r = cand[:, :, :K].copy()
        swap = rng.random(cand.shape[:2]) < flip
        r[:, :, kept - 1] = np.where(swap, cand[:, :, kept], cand[:, :, kept - 1])
        if buggy:
            r[:, :, -1] = E
        r[:, :HASH] = 0  # hash-routed layers: not captured
        out.append(r)
    return out


def write(d: Path, routing: list[np.ndarray], launch_id: str) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    with RoutingWriter(d, K, L, E, {"launch": launch_id}) as w:
        for q, r in enumerate(routing):
            w.add(q, r)
    return d


def run(tmp: Path, *, ref_bug: bool, b_bug: bool, b_shift: float, noise: float = 0.002, floor: int = 4,
        n: int = 40, seed: int = 1) -> Routing:
    base = base_routing(n, seed)
    rng = np.random.default_rng(seed + 100)
    ref = write(tmp / "evals/a/r1", launch(base, rng, noise, ref_bug), "a-1")
    same = [write(tmp / f"evals/aa/r{i}", launch(base, rng, noise, ref_bug), f"a-{i + 1}") for i in range(1, floor + 1)]
    other = []
    for i in range(1, 4):
        lau = launch(base, rng, noise, b_bug)
        if b_shift:  # the build's own flips, the same on every launch of it
            shift = launch(base, np.random.default_rng(seed + 999), b_shift, b_bug)
            changed = launch(base, np.random.default_rng(seed + 999), 0.0, b_bug)
            lau = [np.where((s != c).any(axis=2, keepdims=True), s, x) for s, c, x in zip(shift, changed, lau, strict=True)]
        other.append(write(tmp / f"evals/b/r{i}", lau, f"b-{i}"))
    return compute_routing(ref, other, same, labels=LABELS, seed=0)


def test_the_seed_defect_is_named_on_every_moe_layer_and_diverges_from_the_floor(tmp_path):
    r = run(tmp_path, ref_bug=True, b_bug=False, b_shift=0.0)
    assert r.verdict == "diverged" and r.launch_test is not None and r.launch_test.launches_a == 4
    assert "mean ids moved per routed row" in r.launch_test.method
    a, b = r.sides["a"], r.sides["b"]
    assert a.routed_per_token == 5 and a.out_of_range_ids == {"384": a.rows} and a.layers_out_of_range == L - HASH
    assert a.defect == "5 routed experts per token instead of 6 and an id out of range (384) on 100 % of tokens in " \
                       "every MoE layer"
    assert b.defect is None and b.routed_per_token == 6 and b.rows_out_of_range == 0
    assert r.sentence.startswith("routing diverged: without the fix 5 routed experts per token instead of 6 and an id "
                                 "out of range (384) on 100 % of tokens in every MoE layer; with the fix 6 in range; "
                                 "B vs A: identical sets on 0 % of tokens; A/A: identical sets on ")
    assert r.identical == 0.0 and r.moved == 1.0 and 0.99 < (r.identical_aa or 0) < 1.0
    assert [x.layer for x in r.layers] == list(range(HASH, L))
    assert r.top_questions and r.top_questions[0].parted == 1.0 and r.top_questions[0].first_token == 0
    assert r.passes["compared"] == ["evals/b/r1", "evals/b/r2", "evals/b/r3"]
    assert Routing.from_doc(to_doc(r)) == r  # the record round-trips through its stored form


def test_another_launch_of_the_same_build_is_indistinguishable(tmp_path):
    r = run(tmp_path, ref_bug=False, b_bug=False, b_shift=0.0)
    assert r.verdict == "indistinguishable", r.verdict_reason
    assert all(s.defect is None for s in r.sides.values())
    assert r.sentence.startswith("routing indistinguishable: B vs A: identical sets on ")


def test_a_kernel_change_flipping_near_ties_on_2_percent_of_rows_is_found(tmp_path):
    r = run(tmp_path, ref_bug=False, b_bug=False, b_shift=0.02)
    assert r.verdict == "diverged", r.verdict_reason
    assert r.moved is not None and r.moved_aa is not None and r.moved > 0.015 > 0.005 > r.moved_aa


def test_without_a_floor_or_a_reference_routing_is_not_measured_with_the_reason(tmp_path):
    r = run(tmp_path, ref_bug=True, b_bug=False, b_shift=0.0, floor=0)
    assert r.verdict == "not_measured" and "A/A" in r.verdict_reason
    assert r.sides["a"].defect is not None  # a defect is exact: named without a floor
    assert "5 routed experts per token instead of 6" in r.sentence
    write_not_measured(tmp_path / "x", "the openai API does not return routed experts")
    none = compute_routing(tmp_path / "x", [], [], labels=LABELS)
    assert none.verdict == "not_measured" and "openai API does not return routed experts" in none.verdict_reason
    assert "routing not measured (" in none.sentence
    assert headline(replace(comparison(verdict="inconclusive"), routing=none)).endswith(" · routing not measured")


def test_a_dense_model_has_no_routing_to_report(tmp_path):
    write_not_measured(tmp_path / "ref", "no routed experts known for this model", status="not_applicable")
    b = write(tmp_path / "b", launch(base_routing(3), np.random.default_rng(0), 0.0), "b-1")
    none = compute_routing(tmp_path / "ref", [b], [], labels=LABELS)
    assert none is None
    assert "routing" not in headline(replace(comparison(verdict="inconclusive"), routing=none))


@pytest.mark.parametrize(("x", "text"), [(1.0, "100 %"), (0.0, "0 %"), (0.99984, "99.98 %"), (None, "n/a")])
def test_shares_are_written_as_the_seed_writes_them(x, text):
    assert share_words(x) == text


def test_the_routing_clause_is_on_the_headline_comparison_md_and_report(tmp_path):
    r = run(tmp_path / "r", ref_bug=True, b_bug=False, b_shift=0.0, n=12)
    c = comparison(verdict="inconclusive", margin=0.01)
    assert headline(replace(c, routing=r)).endswith(" · " + r.sentence)
    run_dir = build_run_dir(tmp_path / "run", n=30)
    doc = schema.load_comparison(run_dir / "comparison.json")
    schema.write_comparison(run_dir / "comparison.json", replace(doc, routing=r))
    assert schema.load_comparison(run_dir / "comparison.json").routing == r
    md = render_markdown(run_dir)
    assert f"**Routing:** {r.sentence}" in md and "- without the fix (launch a-1): top-6 rows of 384 experts" in md
    html = render_comparison(run_dir)
    assert 'id="routing"' in html and 'class="qlink" href="#questions" data-q="' in html and "<svg" in html
    assert "5 routed experts per token instead of 6" in html
