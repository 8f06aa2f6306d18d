"""harness.results.token_store: the per-token Parquet store of a scoring pass (round trip, order, padding, crash safety)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.results import token_store as S
from harness.results.score_blocks import load_scores


def test_round_trip_sorted_padded_and_columnar(tmp_path):
    rng = np.random.default_rng(0)
    qs = [7, 3, 11, 5]                       # answers arrive in any order
    data = {}
    with S.ScoresWriter(tmp_path, top_k=4, meta={"engine": "sim", "reference": "evals/a/r1"},
                        row_group_rows=10) as w:
        for q in qs:
            t = int(rng.integers(1, 9))
            tok = rng.integers(0, 1000, t)
            lp = -rng.exponential(size=t)
            ids = rng.integers(0, 1000, (t, 4))
            tlp = -rng.exponential(size=(t, 4))
            data[q] = (tok, lp, ids, tlp)
            w.add(q, tok, lp, ids, tlp, text_offsets=np.arange(t) * 3 if q == 3 else None)
        w.add(1, [], [], np.zeros((0, 4)), np.zeros((0, 4)))    # an empty completion: no rows
        w.record_error(9, "HTTP 500")
    meta = json.loads((tmp_path / S.SCORES_META).read_text())
    assert meta["status"] == "ok" and meta["top_k"] == 4 and meta["engine"] == "sim" and meta["errors"] == 1
    assert meta["questions"] == 5 and meta["error_examples"] == {"9": "HTTP 500"}
    pf = pq.ParquetFile(tmp_path / S.SCORES)
    assert pf.num_row_groups >= 2                       # streamed in row groups, not one blob
    assert [f.name for f in pf.schema_arrow] == ["question", "position", "token_id", "logprob", "top_ids",
                                                 "top_logprobs", "ref_top_logprobs", "text_offset"]
    t = load_scores(tmp_path)
    assert list(t.questions) == sorted(qs) and t.tokens == sum(len(v[0]) for v in data.values())
    assert t.top_k == 4 and t.ref_top_logprobs is None and t.text_offset is not None
    for q, (tok, lp, ids, tlp) in data.items():
        r = t.rows(q)
        np.testing.assert_array_equal(t.token_id[r], tok)
        np.testing.assert_allclose(t.logprob[r], lp.astype(np.float32))
        np.testing.assert_array_equal(t.top_ids[r], ids)
        np.testing.assert_allclose(t.top_logprobs[r], tlp.astype(np.float32))
        np.testing.assert_array_equal(t.position[r], np.arange(len(tok)))
        assert np.all(t.text_offset[r] == (np.arange(len(tok)) * 3 if q == 3 else -1))
    assert t.rows(1) == slice(0, 0) and t.rows(42) == slice(0, 0)


def test_ragged_top_k_and_ref_top_logprobs_are_padded(tmp_path):
    with S.ScoresWriter(tmp_path, top_k=3) as w:
        w.add(0, [5, 6], [-0.1, -0.2], [[5, 1, 2], [6]], [[-0.1, -2.0, -3.0], [-0.2]],
              ref_top_logprobs=[[-0.1, np.nan, -3.5], [-0.3, -1.0, -2.0]])
    t = load_scores(tmp_path)
    np.testing.assert_array_equal(t.top_ids, [[5, 1, 2], [6, S.PAD_ID, S.PAD_ID]])
    assert np.isneginf(t.top_logprobs[1, 1:]).all()
    assert np.isnan(t.ref_top_logprobs[0, 1]) and t.ref_top_logprobs[1, 2] == pytest.approx(-2.0)
    assert t.text_offset is None


def test_duplicates_and_shape_errors_are_refused(tmp_path):
    with S.ScoresWriter(tmp_path, top_k=2) as w:
        w.add(1, [1], [-0.1], [[1, 2]], [[-0.1, -3.0]])
        with pytest.raises(S.ScoresError, match="twice"):
            w.add(1, [1], [-0.1], [[1, 2]], [[-0.1, -3.0]])
        with pytest.raises(S.ScoresError, match="tokens"):
            w.add(2, [1, 2], [-0.1], [[1, 2]], [[-0.1, -3.0]])


def test_crash_leaves_no_scores_and_no_ok_status(tmp_path):
    with pytest.raises(RuntimeError), S.ScoresWriter(tmp_path, top_k=2) as w:
        w.add(1, [1], [-0.1], [[1, 2]], [[-0.1, -3.0]])
        raise RuntimeError("server died")
    assert not (tmp_path / S.SCORES).exists() and not (tmp_path / S.SCORES_META).exists()
    assert list(tmp_path.iterdir()) == []
    assert S.scores_status(tmp_path)[0] == "not_measured"
    with pytest.raises(S.NotMeasured, match="no scoring pass"):
        load_scores(tmp_path)


def test_not_measured_is_recorded_with_its_reason(tmp_path):
    with S.ScoresWriter(tmp_path, top_k=2) as w:
        w.add(1, [1], [-0.1], [[1, 2]], [[-0.1, -3.0]])
    S.write_not_measured(tmp_path, "engine returns no prompt logprobs (start llama.cpp with --logits_all)",
                         {"engine": "llamacpp"})
    assert not (tmp_path / S.SCORES).exists()
    status, reason = S.scores_status(tmp_path)
    assert status == "not_measured" and "logits_all" in reason
    with pytest.raises(S.NotMeasured) as e:
        load_scores(tmp_path)
    assert "logits_all" in e.value.reason


def test_inconsistent_positions_are_an_error(tmp_path):
    import pyarrow as pa

    with S.ScoresWriter(tmp_path, top_k=1) as w:
        w.add(1, [1, 2], [-0.1, -0.2], [[1], [2]], [[-0.1], [-0.2]])
    t = pq.read_table(tmp_path / S.SCORES)
    t = t.set_column(1, "position", pa.array(np.array([0, 2], np.int32)))
    pq.write_table(t, tmp_path / S.SCORES)
    with pytest.raises(S.ScoresError, match="positions"):
        load_scores(tmp_path)


def test_reader_scans_widths_when_scores_json_lacks_them(tmp_path):
    with S.ScoresWriter(tmp_path, top_k=3) as w:
        w.add(0, [5, 6], [-0.1, -0.2], [[5, 1, 2], [6]], [[-0.1, -2.0, -3.0], [-0.2]],
              ref_top_logprobs=[[-0.1, -0.2], [-0.3, -1.0]], text_offsets=[0, 2])
    meta = json.loads((tmp_path / S.SCORES_META).read_text())
    assert (meta["top_width"], meta["ref_width"], meta["text_offsets"]) == (3, 2, True)
    fast = load_scores(tmp_path)
    for key in ("top_width", "ref_width", "text_offsets"):
        del meta[key]
    (tmp_path / S.SCORES_META).write_text(json.dumps(meta))
    slow = load_scores(tmp_path)
    for col in ("top_ids", "top_logprobs", "ref_top_logprobs", "text_offset"):
        np.testing.assert_array_equal(getattr(fast, col), getattr(slow, col))


def test_logprobs_and_ids_are_stored_byte_stream_split_and_read_back_bit_for_bit(tmp_path):
    """The compact encoding is lossless: every float32 (the no-op proof compares them bit for bit: -0.0, a
    subnormal, -inf, NaN included) and every id comes back as written."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    t, k = 300, 4
    lp = (-rng.exponential(3.0, t)).astype(np.float32)
    lp[:4] = [-0.0, -1e-42, -np.inf, -3.4e38]
    tops = (-rng.exponential(5.0, (t, k))).astype(np.float32)
    tops[0] = [np.nan, -np.inf, -1e-45, -0.0]
    ids = rng.integers(0, 200_000, (t, k)).astype(np.int32)
    ref = (-rng.exponential(5.0, (t, 3))).astype(np.float32)
    with S.ScoresWriter(tmp_path, top_k=k) as w:
        w.add(3, ids[:, 0], lp, ids, tops, ref)
    table = load_scores(tmp_path)
    for got, want in ((table.logprob, lp), (table.top_logprobs, tops), (table.ref_top_logprobs, ref)):
        assert got is not None and got.tobytes() == want.tobytes()
    assert np.array_equal(table.top_ids, ids) and np.array_equal(table.token_id, ids[:, 0])
    md = pq.ParquetFile(tmp_path / S.SCORES).metadata
    encodings = {md.row_group(0).column(c).path_in_schema: md.row_group(0).column(c).encodings
                 for c in range(md.num_columns)}
    for path in S.BYTE_STREAM_SPLIT:
        assert "BYTE_STREAM_SPLIT" in encodings[path], (path, encodings[path])


def test_a_token_that_is_its_top_lists_first_entry_is_stored_once_and_read_back_by_every_reader(tmp_path):
    """A greedy token is nearly always its top list's first entry: its id and logprob are stored null (the list
    holds them) and both readers give them back bit for bit; a token that differs (another id, or the same id
    with another logprob, -0.0 against 0.0 included) is stored as it is; a file of an older writer (no nulls)
    reads as it did."""
    import pyarrow as pa

    from harness.results.score_blocks import PassReader

    rng = np.random.default_rng(3)
    t, k = 200, 4
    ids = rng.integers(0, 50_000, (t, k)).astype(np.int32)
    tops = np.sort(-rng.exponential(3.0, (t, k)).astype(np.float32), axis=1)[:, ::-1].copy()
    tok, lp = ids[:, 0].copy(), tops[:, 0].copy()
    tok[5], lp[6] = 7, lp[6] - 1.0  # another token; the same token with another logprob
    tops[7, 0], lp[7] = 0.0, -0.0
    with S.ScoresWriter(tmp_path / "new", top_k=k) as w:
        w.add(0, tok, lp, ids, tops)
    stored = pq.read_table(tmp_path / "new" / S.SCORES)
    assert stored.column("token_id").null_count == t - 3 == stored.column("logprob").null_count
    for table in (load_scores(tmp_path / "new"), PassReader(tmp_path / "new").upto(0)):
        assert table.token_id.tobytes() == tok.tobytes() and table.logprob.tobytes() == lp.tobytes()
    logprob_only = PassReader(tmp_path / "new", columns=["logprob"]).upto(0)  # its lists read all the same
    assert logprob_only.token_id.tobytes() == tok.tobytes() and logprob_only.logprob.tobytes() == lp.tobytes()
    # an older writer's file: every token stored
    (tmp_path / "old").mkdir()
    meta = json.loads((tmp_path / "new" / S.SCORES_META).read_text())
    assert meta["schema_version"] == 2  # an abh that reads v1 only refuses it instead of taking the nulls as values
    (tmp_path / "old" / S.SCORES_META).write_text(json.dumps({**meta, "schema_version": 1}))
    old = stored.set_column(2, "token_id", pa.array(tok)).set_column(3, "logprob", pa.array(lp))
    pq.write_table(old, tmp_path / "old" / S.SCORES)
    for table in (load_scores(tmp_path / "old"), PassReader(tmp_path / "old").upto(0)):
        assert table.token_id.tobytes() == tok.tobytes() and table.logprob.tobytes() == lp.tobytes()
