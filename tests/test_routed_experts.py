"""The ``routed_experts`` side check against current SGLang's fields: every DP attention rank asked
(``routed_dp_rank``, or the older ``data_parallel_rank``), the wire dtype (``meta_info.routed_experts_dtype`` /
``SGLANG_ROUTED_EXPERTS_DTYPE``), physical ids read through the physical -> logical map, the row count against
``routed_experts_start_len`` — on the SGLang stand-in (a real HTTP server process)."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest
from test_seed_checks import fake_engine

from harness.checks.live import run_live_checks
from harness.checks.routed import decode_routed_experts, expert_map_for, wire_dtype
from harness.config import CheckConfig

FIXED = dict(kind="routed_experts", name="fixed", num_experts=384, top_k=6, routed_per_token=6, out_of_range=False)
BUGGY = dict(kind="routed_experts", name="buggy", num_experts=384, top_k=6, routed_per_token=5, out_of_range=True,
             min_share=0.5)


def _run(tmp_path: Path, label: str, checks: list[CheckConfig], args: list[str] | None = None, **env: str):
    arm, e = fake_engine(tmp_path, checks, label, **env)
    e.cfg.args = list(args or [])
    with e:
        e.launch()
        e.wait_ready()
        return {r.name: r for r in run_live_checks(arm, e)}


def test_every_dp_rank_is_asked_and_one_bad_rank_fails_the_check(tmp_path):
    dp = ["--tp", "4", "--dp", "4", "--enable-dp-attention"]
    res = _run(tmp_path, "ranks", [CheckConfig(**FIXED)], dp, FAKE_BAD_RANK="2")
    r = res["fixed"]
    assert not r.passed and r.found.startswith("rank 2:") and "ids outside 0..383: [384]" in r.found
    assert r.evidence["dp_ranks"] == [0, 1, 2, 3]
    assert {k: v["passed"] for k, v in r.evidence["ranks"].items()} == {
        "rank 0": True, "rank 1": True, "rank 2": False, "rank 3": True}
    # pinned to the good ranks only, or a server without DP attention (one unpinned request): passes
    res = _run(tmp_path, "pinned", [CheckConfig(**FIXED, dp_ranks=[0, 1])], dp, FAKE_BAD_RANK="2")
    assert res["fixed"].passed and res["fixed"].found.startswith("every one of 2 DP rank(s)")
    res = _run(tmp_path, "nodp", [CheckConfig(**FIXED)], [], FAKE_BAD_RANK="2")
    assert res["fixed"].passed and res["fixed"].evidence["dp_ranks"] is None
    # current SGLang's spelling of DP attention
    res = _run(tmp_path, "attn", [CheckConfig(**FIXED)], ["--attn-dp-size", "3"], FAKE_BAD_RANK="1")
    assert not res["fixed"].passed and set(res["fixed"].evidence["ranks"]) == {"rank 0", "rank 1", "rank 2"}


def test_an_sglang_without_routed_dp_rank_is_asked_with_data_parallel_rank(tmp_path):
    res = _run(tmp_path, "old", [CheckConfig(**FIXED)], ["--dp", "2", "--enable-dp-attention"],
               FAKE_DP_FIELD="data_parallel_rank", FAKE_BAD_RANK="1")
    r = res["fixed"]
    assert not r.passed and r.found.startswith("rank 1:") and r.evidence["rank_field"] == "data_parallel_rank"


@pytest.mark.parametrize("dtype, advertise, ok", [
    ("uint16", "1", True),   # advertised: decoded as uint16
    ("uint16", "0", True),   # not advertised: the server's SGLANG_ROUTED_EXPERTS_DTYPE at launch
    ("uint8", "1", True),    # 384 does not fit: the server sends int32 and says so
])
def test_the_wire_dtype_is_read_from_the_answer_or_the_launch_env(tmp_path, dtype, advertise, ok):
    res = _run(tmp_path, f"{dtype}{advertise}", [CheckConfig(**BUGGY)], [], FAKE_BUILD="buggy",
               FAKE_ROUTED_DTYPE=dtype, FAKE_ADVERTISE_DTYPE=advertise, SGLANG_ROUTED_EXPERTS_DTYPE=dtype)
    r = res["buggy"]
    assert r.passed is ok, r.found
    want = "int32" if dtype == "uint8" else dtype
    assert r.evidence["dtype"].startswith(want)
    assert ("meta_info" in r.evidence["dtype"]) is (advertise == "1")
    assert r.evidence["rows"] == 24 and r.evidence["positions"] == 8 and r.evidence["layers"] == 3


def test_a_uint16_payload_misread_as_int32_is_caught(tmp_path):
    """Without the advertised dtype and without the launch variable (the server was started with it, the check
    was not told), the bytes read as int32 are nonsense ids: the check fails rather than passing."""
    res = _run(tmp_path, "mis", [CheckConfig(**FIXED)], [], FAKE_ROUTED_DTYPE="uint16", FAKE_ADVERTISE_DTYPE="0")
    assert not res["fixed"].passed


def test_physical_ids_are_read_through_the_expert_map(tmp_path):
    redundant = ["--ep-size", "8", "--ep-num-redundant-experts", "8"]
    res = _run(tmp_path, "nomap", [CheckConfig(**FIXED)], redundant, FAKE_REDUNDANT="8")
    assert not res["fixed"].passed and "redundant expert(s)" in res["fixed"].found and "expert_map" in res["fixed"].found
    emap = tmp_path / "p2l.json"
    emap.write_text(json.dumps({"physical_to_logical_map": [[p % 384 for p in range(392)]] * 3}))
    res = _run(tmp_path, "map", [CheckConfig(**FIXED, expert_map=str(emap))], redundant, FAKE_REDUNDANT="8")
    assert res["fixed"].passed, res["fixed"].found
    # the server's own --init-expert-location JSON is the map when the check names none
    res = _run(tmp_path, "init", [CheckConfig(**FIXED)], [*redundant, "--init-expert-location", str(emap)],
               FAKE_REDUNDANT="8")
    assert res["fixed"].passed and res["fixed"].evidence["expert_map"] == str(emap)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"physical_to_logical_map": [[0, 1]] * 2}))
    res = _run(tmp_path, "badmap", [CheckConfig(**FIXED, expert_map=str(bad))], redundant, FAKE_REDUNDANT="8")
    assert not res["fixed"].passed and "the expert map has 2 layers, the answer 3" in res["fixed"].found


def test_start_len_is_sent_and_the_rows_must_match_the_positions(tmp_path):
    # the stand-in always answers 8 positions: asked to start at 3, its 24 rows are no whole number of layers of 5
    res = _run(tmp_path, "start", [CheckConfig(**FIXED, routed_experts_start_len=3)], [])
    r = res["fixed"]
    assert not r.passed and "not a whole number of layers of the 5 position(s)" in r.found


def test_decode_and_dtype_helpers():
    ids = [1, 2, 383, 384, 0, 7]
    for name, fmt in (("uint16", "H"), ("int32", "i")):
        b64 = base64.b64encode(struct.pack(f"<6{fmt}", *ids)).decode()
        assert decode_routed_experts(b64, name) == ids
    assert decode_routed_experts(base64.b64encode(bytes([1, 2, 3])).decode(), "uint8") == [1, 2, 3]
    with pytest.raises(ValueError, match="not a whole number of uint16"):
        decode_routed_experts(base64.b64encode(b"abc").decode(), "uint16")
    with pytest.raises(ValueError, match="not one of int32, uint16, uint8"):
        decode_routed_experts("AAAA", "int64")
    assert wire_dtype({"routed_experts_dtype": "UINT8"}, {"SGLANG_ROUTED_EXPERTS_DTYPE": "uint16"})[0] == "uint8"
    assert wire_dtype({}, {"SGLANG_ROUTED_EXPERTS_DTYPE": "uint16"}) == ("uint16", "the server's "
                                                                            "SGLANG_ROUTED_EXPERTS_DTYPE")
    assert wire_dtype({}, {}) == ("int32", "default")
    c = CheckConfig(**FIXED)
    assert expert_map_for(c, [], None) == (None, None)
    m, why = expert_map_for(c, ["--init-expert-location", "/nonexistent.json"], None)
    assert m is None and "cannot read the expert map" in (why or "")
