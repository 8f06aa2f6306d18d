"""The routing pass (harness.measure.routing_pass) against simulated servers, its store
(harness.results.routing_store) and the reading of SGLang's routed-experts answers (harness.serving.routed_wire)."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.measure.divergence_pass import INPUTS
from harness.measure.routing_pass import RoutingOptions, routing_pass
from harness.results.routing_store import (
    ROUTING,
    RoutingError,
    RoutingWriter,
    load_routing,
    narrowest,
    tally_of,
)
from harness.serving.client import ClientConfig
from harness.serving.routed_wire import RoutedAnswerError, parse_routed, routing_body


def write_inputs(d: Path, rows: dict[int, tuple[list[int], list[int]]]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    qs = sorted(rows)
    pq.write_table(pa.table({"question": pa.array(qs, pa.int32()),
                             "prompt_ids": pa.array([rows[q][0] for q in qs], pa.list_(pa.int32())),
                             "reference_ids": pa.array([rows[q][1] for q in qs], pa.list_(pa.int32()))}), d / INPUTS)


def inputs(n: int, seed: int = 0) -> dict[int, tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed)
    return {q: (rng.integers(5, 900, int(rng.integers(3, 40))).tolist(), rng.integers(5, 900, int(rng.integers(1, 30))).tolist())
            for q in range(n)}


def answer(arr: np.ndarray, dtype: str | None = None) -> dict:
    wire = {"int32": "<i4", "uint16": "<u2", "uint8": "u1"}[dtype or "int32"]
    meta = {"routed_experts": base64.b64encode(np.ascontiguousarray(arr, wire).tobytes()).decode()}
    if dtype:
        meta["routed_experts_dtype"] = dtype
    return {"text": "", "meta_info": meta}


# ------------------------------------------------------------------------------------------ the wire
def test_routing_body_asks_one_row_per_reference_token():
    body = routing_body([1, 2, 3], [7, 8])
    assert body == {"input_ids": [1, 2, 3, 7, 8], "sampling_params": {"max_new_tokens": 0},
                    "return_routed_experts": True, "routed_experts_start_len": 2}
    with pytest.raises(ValueError):
        routing_body([], [7])


@pytest.mark.parametrize("dtype", [None, "int32", "uint16", "uint8"])
def test_answers_are_read_in_the_dtype_they_say(dtype):
    arr = (np.arange(5 * 3 * 6).reshape(5, 3, 6) % 250).astype(np.int32)
    got = parse_routed(answer(arr, dtype), 5, 6)
    assert got.shape == (5, 3, 6) and (got == arr).all()
    assert (parse_routed({"meta_info": {"routed_experts": arr.tolist()}}, 5, 6) == arr).all()  # older builds


@pytest.mark.parametrize(("obj", "words"), [
    ({"meta_info": {}}, "--enable-return-routed-experts"),
    ({"meta_info": {"routed_experts": "!!"}}, "not base64"),
    ({"meta_info": {"routed_experts": base64.b64encode(b"\0" * 7).decode()}}, "whole number"),
    ({"meta_info": {"routed_experts": base64.b64encode(b"\0" * 4 * 30).decode()}}, "positions x layers"),
    ({"meta_info": {"routed_experts": "", "routed_experts_dtype": "float16"}}, "not one of"),
    ({"meta_info": {"routed_experts": [[1.5, 2]]}}, "other than integers"),
    ([], "no meta_info"),
])
def test_malformed_answers_are_refused_saying_how(obj, words):
    with pytest.raises(RoutedAnswerError, match=words):
        parse_routed(obj, 4, 6)


def test_an_answer_with_another_layer_count_than_the_pass_is_refused():
    with pytest.raises(RoutedAnswerError, match="first answer had 4"):
        parse_routed(answer(np.zeros((2, 3, 6), np.int32) + np.arange(6)), 2, 6, layers=4)


# ------------------------------------------------------------------------------------------ the store
def test_the_store_round_trips_each_question_in_its_narrowest_dtype(tmp_path):
    rng = np.random.default_rng(1)
    small = rng.integers(0, 256, (7, 4, 6))
    wide = rng.integers(0, 384, (5, 4, 6))
    wide[0, 0, 0] = 384
    neg = small.copy()
    neg[0, 0, 0] = -1
    with RoutingWriter(tmp_path, 6, 4, 384, {"arm": "a"}) as w:
        for q, a in ((3, small), (1, wide), (2, neg)):
            w.add(q, a)
    t = load_routing(tmp_path)
    assert t.questions == [1, 2, 3] and t.meta["arm"] == "a" and t.meta["tokens"] == 19
    assert t.meta["index"]["dtype"] == ["uint8", "uint16", "int32"]
    assert (tmp_path / ROUTING).stat().st_size == small.size + 2 * wide.size + 4 * neg.size
    for q, a in ((3, small), (1, wide), (2, neg)):
        assert (t.get(q) == a).all()
    tally = tally_of(t.meta)
    assert tally.out_of_range_ids == {-1: 1, 384: 1} and tally.rows.tolist() == [19] * 4
    assert narrowest(np.array([0, 255])) == "uint8" and narrowest(np.array([70000])) == "int32"


def test_a_writer_that_raises_publishes_nothing(tmp_path):
    with pytest.raises(RuntimeError), RoutingWriter(tmp_path, 6, 4, 384, {}) as w:
        w.add(0, np.zeros((2, 4, 6), np.int32) + np.arange(6))
        raise RuntimeError("server gone")
    assert not (tmp_path / ROUTING).exists()
    with pytest.raises(RoutingError, match="no routing pass"):
        load_routing(tmp_path)


# ------------------------------------------------------------------------------------------ the pass
def test_routing_pass_streams_a_simulated_servers_experts_and_their_defect(sim_server, tmp_path):
    ref = tmp_path / "ref"
    rows = inputs(6)
    write_inputs(ref, rows)
    buggy = sim_server("--routed-experts-bug", "--num-experts", "384", "--num-layers", "5", "--unrouted-layers", "1")
    out = tmp_path / "a"
    meta = routing_pass(ref, ClientConfig(url=buggy.url, api="sglang"), out,
                        RoutingOptions(top_k=6, num_experts=384, progress=False, meta={"arm": "a"}))
    assert meta["status"] == "ok" and meta["questions"] == 6 and meta["layers"] == 5 and meta["errors"] == 0
    t = load_routing(out)
    for q, (_, r) in rows.items():
        got = t.get(q)
        assert got.shape == (len(r), 5, 6)
        assert (got[:, 0] == 0).all() and (got[:, 1:, -1] == 384).all()  # unrouted first layer; the marker
    tally = tally_of(t.meta)
    n = sum(len(r) for _, r in rows.values())
    assert tally.in_range[1:, 5].tolist() == [n] * 4 and tally.routed[0] == 0
    assert tally.out_of_range_ids == {384: 4 * n} and tally.routed_per_row() == 5


def test_a_server_that_returns_no_routing_is_not_measured_with_the_reason(sim_server, tmp_path):
    ref = tmp_path / "ref"
    write_inputs(ref, inputs(2))
    off = sim_server("--no-enable-return-routed-experts")
    meta = routing_pass(ref, ClientConfig(url=off.url, api="sglang"), tmp_path / "x",
                        RoutingOptions(top_k=6, num_experts=256, progress=False))
    assert meta["status"] == "not_measured" and "--enable-return-routed-experts" in meta["reason"]
    with pytest.raises(RoutingError, match="enable-return-routed-experts"):
        load_routing(tmp_path / "x")
    empty = routing_pass(tmp_path / "nothing", ClientConfig(url=off.url, api="sglang"), tmp_path / "y",
                         RoutingOptions(top_k=6, num_experts=256, progress=False))
    assert empty["status"] == "not_measured" and "by text" in empty["reason"]
