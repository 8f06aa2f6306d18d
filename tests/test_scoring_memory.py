"""What a scoring pass and its readers hold in memory: the stored columns go to and from numpy through their
buffers (no pandas import, no Python object per value), and the token ids the passes send are lists whose equal
ids share one int object."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import TEST_JSONL
from helpers.ids import shared_ids

import harness.measure.divergence_pass as dp
from harness.results import arrow_buffers as ab
from harness.results import score_inputs
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------ buffers
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float64])
def test_numbers_read_as_pyarrow_converts_them(dtype):
    rng = np.random.default_rng(1)
    x = (rng.normal(0, 1e3, 50)).astype(dtype)
    null = rng.random(50) < 0.3
    arr = pa.array(x, mask=null)
    for a in (arr, arr.slice(7, 30), pa.chunked_array([arr.slice(0, 5), arr.slice(5)])):
        want = np.asarray(a.to_numpy(zero_copy_only=False))
        ok = ~np.asarray(a.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        got = ab.numbers(a, np.float64, fill=-7)
        assert np.array_equal(got[ok], want[ok].astype(np.float64)) and np.all(got[~ok] == -7)
        assert np.array_equal(ab.valid(a), ok)
    assert ab.valid(pa.array(x)) is None and ab.numbers(pa.array(x[:0]), dtype).size == 0
    assert np.array_equal(ab.valid(pa.nulls(3, pa.int32())), np.zeros(3, bool))


def test_lists_read_and_built_as_pyarrow_does():
    rows = [[1, 2, 3], None, [], [4], None, [5, 6]]
    arr = pa.array(rows, type=pa.list_(pa.int32()))
    for a in (arr, arr.slice(2)):
        off, vals, ok = ab.list_offsets(a), ab.list_values(a, np.int64), ab.valid(a)
        back = [None if not ok[i] else vals[off[i]:off[i + 1]].tolist() for i in range(len(a))]
        assert back == a.to_pylist()
    null = np.array([r is None for r in rows])
    lens = np.array([0 if r is None else len(r) for r in rows])
    built = ab.list_array(np.concatenate([[0], np.cumsum(lens)]), ab.array(np.arange(1, 7, dtype=np.int32)), null)
    assert built.equals(arr)
    assert ab.array(np.array([1.5, 2.5], np.float32), np.array([False, True])).equals(
        pa.array([1.5, None], type=pa.float32()))


def test_scores_and_score_inputs_are_read_and_written_without_importing_pandas(tmp_path):
    """pyarrow's own conversions import pandas on first use (44 MiB of the process for the rest of the run)."""
    code = f"""
import sys
from pathlib import Path
import numpy as np
from harness.results.token_store import ScoresWriter
from harness.results.score_blocks import PassReader, load_scores, pass_blocks
from harness.measure.divergence_pass import _read_inputs, _write_inputs
root = Path({str(tmp_path)!r})
with ScoresWriter(root / "p", top_k=3, row_group_rows=4) as w:
    for q in range(6):
        ids = np.array([[q, 1, 2], [3, 4, 5]])
        w.add(q, [q, 9], [-0.5, -1.0], ids, -np.ones((2, 3)), None if q % 2 else np.zeros((2, 3)),
              None if q == 3 else [0, 2])
t = load_scores(root / "p")
blocks = list(pass_blocks(PassReader(root / "p"), 3))
_write_inputs(root / "in.parquet", {{0: ([1, 2, 300], [300]), 1: ([], [7])}})
got = _read_inputs(root / "in.parquet")
assert t.questions.tolist() == list(range(6)) and sum(b.questions.size for b in blocks) == 6
assert np.isnan(t.ref_top_logprobs[t.rows(1)]).all() and (t.text_offset[t.rows(3)] == -1).all()
assert got == {{0: ([1, 2, 300], [300]), 1: ([], [7])}}
print("pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------ shared ids
@pytest.mark.parametrize("big", [False, True])
def test_score_inputs_read_back_with_one_int_object_per_id(tmp_path, big):
    """Equal ids of every question are one int object (8 bytes an id, not 36), with ids in a tokenizer's range
    (a table) and beyond it (a dict)."""
    base = score_inputs.ID_TABLE_MAX + 5 if big else 1000
    rows = {q: ([base + i for i in range(q, q + 50)], [base + 7] * (q % 3)) for q in range(0, 30, 3)}
    rows[99] = ([], [])
    dp._write_inputs(tmp_path / "in.parquet", rows)
    got = dp._read_inputs(tmp_path / "in.parquet")
    assert got == rows
    seen: dict[int, int] = {}
    for p, r in got.values():
        for x in p + r:
            assert seen.setdefault(x, id(x)) == id(x)


def test_shared_ids_keep_the_values_and_share_their_objects():
    pool: dict[int, int] = {}
    a = shared_ids([int("100000"), 5, int("100000")], pool)
    b = shared_ids([int("100000")], pool)
    assert a == [100000, 5, 100000] and a[0] is a[2] is b[0] and shared_ids([], pool) == []


def test_the_reference_pass_tokenizes_in_chunks_with_the_same_ids(sim_server, tmp_path, monkeypatch):
    """The prompts are tokenized a chunk at a time (the answer's ints made shared before the next is asked): the
    ids sent and stored are those of one request for every prompt."""
    from harness.measure.evaluation import EvalOptions, run_eval

    s = sim_server("--build", "a", "--noise", "launch")
    cfg = ClientConfig(url=s.url, api="sglang", parallel=8, retries=1, backoff_s=0.01)
    ev = tmp_path / "a"
    run_eval(gsm8k.load(TEST_JSONL, "test"), gsm8k.RecipeConfig(num_questions=11), cfg, ev, None,
             EvalOptions(progress=False))
    sizes: list[int] = []

    class Counting(dp.Client):  # type: ignore[misc,valid-type]
        async def tokenize_all(self, texts, special):  # type: ignore[no-untyped-def]
            sizes.append(len(texts))
            return await super().tokenize_all(texts, special)

    monkeypatch.setattr(dp, "Client", Counting)
    stored = {}
    for chunk in (4, 10_000):
        monkeypatch.setattr(dp, "TOKENIZE_CHUNK", chunk)
        out = tmp_path / f"pass{chunk}"
        meta = dp.score_pass(ev, cfg, out, dp.ScoringOptions(progress=False, top_k=3))
        assert meta["status"] == "ok" and meta["by_ids"] and meta["questions"] == 11
        stored[chunk] = dp._read_inputs(out / dp.INPUTS)
    assert stored[4] == stored[10_000] and len(stored[4]) == 11
    assert max(sizes[:6]) == 4 and sizes[6:] == [11, 11]  # prompts and references, 3 chunks each, then at once


def test_a_pass_and_the_divergence_hand_pyarrow_memory_back(sim_server, tmp_path, monkeypatch):
    """pyarrow's pool keeps what a pass's reads and writes freed: each scoring pass and each divergence computation
    releases it when done."""
    from harness.analysis import divergence
    from harness.measure.evaluation import EvalOptions, run_eval

    calls: list[str] = []
    monkeypatch.setattr(dp, "release", lambda: calls.append("pass"))
    monkeypatch.setattr(divergence, "release", lambda: calls.append("divergence"))
    s = sim_server("--build", "a", "--noise", "launch")
    cfg = ClientConfig(url=s.url, api="sglang", parallel=8, retries=1, backoff_s=0.01)
    ev = tmp_path / "a"
    run_eval(gsm8k.load(TEST_JSONL, "test"), gsm8k.RecipeConfig(num_questions=5), cfg, ev, None,
             EvalOptions(progress=False))
    assert dp.score_pass(ev, cfg, tmp_path / "ref", dp.ScoringOptions(progress=False, top_k=3))["status"] == "ok"
    assert dp.score_pass(ev, cfg, tmp_path / "ab", dp.ScoringOptions(
        progress=False, top_k=3, reference_scores=tmp_path / "ref"))["status"] == "ok"
    assert calls == ["pass", "pass"]
    d = divergence.compute_divergence(tmp_path / "ref", tmp_path / "ab", None)
    assert d.questions_total == 5 and calls == ["pass", "pass", "divergence"]


def test_pyarrow_allocates_from_the_c_heap_unless_a_pool_is_named() -> None:
    """Through harness.results.arrow pyarrow's buffers, its parquet writer's included, come from the system
    allocator, whose freed memory the numpy arrays that follow reuse (mimalloc kept it apart: the demo peaked
    ~35 MiB higher); the environment the servers inherit is left as it was; a pool the user names is kept."""
    code = ("import io, os; from harness.results.arrow import pa, pq; "
            "t = pa.table({'x': pa.array(range(100_000))}); pq.write_table(t, io.BytesIO()); "
            "print(pa.default_memory_pool().backend_name, pa.mimalloc_memory_pool().max_memory(), "
            "os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    run = functools.partial(subprocess.run, [sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT)
    assert run(env=env).stdout.split() == ["system", "0", "None"]
    named = run(env={**env, "ARROW_DEFAULT_MEMORY_POOL": "mimalloc"}).stdout.split()
    assert named[0] == "mimalloc" and int(named[1]) > 0 and named[2] == "mimalloc"


# ------------------------------------------------------------------------------------------ bounded passes
def _inputs_rows(n: int, shared: int = 600, own: int = 40, ref: int = 100) -> dict[int, tuple[list[int], list[int]]]:
    """``n`` questions whose prompts repeat one ``shared``-id few-shot block, as a task's prompts do."""
    block = [(7 * i) % 30_000 for i in range(shared)]
    return {q: (block + [(q * 13 + i) % 30_000 for i in range(own)], [(q + 5 * i) % 30_000 for i in range(ref)])
            for q in range(n)}


def test_score_inputs_read_back_hold_the_shared_prompt_block_once(tmp_path):
    """The ids read back cost about 4 bytes per id that differs between prompts, not 8 bytes per id sent (the
    lists of shared ints held 1.4 MB for these 200 questions): the few-shot block every prompt repeats is held
    once, and nothing keeps the file's column buffers alive."""
    import gc
    import tracemalloc

    rows = _inputs_rows(200)
    dp._write_inputs(tmp_path / "in.parquet", rows)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        got = dp._read_inputs(tmp_path / "in.parquet")
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    sent = sum(len(p) + len(r) for p, r in rows.values())
    assert got == rows and sent == 148_000
    assert held < 300_000, held  # 200 x 140 own ids x 4 bytes + a row's bookkeeping


def test_score_inputs_make_lists_of_shared_ints_on_demand():
    inputs = score_inputs.ScoreInputs(_inputs_rows(3, shared=5, own=2, ref=3))
    inputs[9] = ([], [score_inputs.ID_TABLE_MAX + 3, -1, score_inputs.ID_TABLE_MAX + 3])
    assert inputs.sizes(1) == (7, 3) and inputs.sizes(9) == (0, 3) and len(inputs) == 4 and 9 in inputs
    a, b = inputs[0][0], inputs[1][0]
    assert a[:5] == b[:5] and all(x is y for x, y in zip(a[:5], b[:5], strict=True))
    big = inputs[9][1]
    assert big == [score_inputs.ID_TABLE_MAX + 3, -1, score_inputs.ID_TABLE_MAX + 3] and big[0] is big[2]
    p, r = inputs.arrays(2)
    assert p.dtype == np.int32 and p.tolist() == inputs[2][0] and r.tolist() == inputs[2][1]


def test_question_rows_hold_a_few_blocks_of_a_pass_never_the_pass(tmp_path):
    """A compared pass takes the reference pass's rows a question at a time, in about question order: what is
    held is the row groups read and not yet taken (a few), whatever the pass's size; a question asked again or
    out of order is read anew, with the same rows."""
    from harness.results.score_blocks import PassReader, QuestionRows, load_scores
    from harness.results.token_store import ScoresWriter

    with ScoresWriter(tmp_path / "p", top_k=3, row_group_rows=40) as w:
        for q in range(300):
            n = 3 + q % 5
            w.add(q, np.arange(n) + q, -np.ones(n) / (q + 1), np.tile([q, 1, 2], (n, 1)), -np.ones((n, 3)))
    whole = load_scores(tmp_path / "p")
    order = [q for q in range(300) if q != 17]
    rows = QuestionRows(PassReader(tmp_path / "p", ("top_ids", "top_logprobs")), order)
    held = []
    for q in [0, 2, 1, *range(3, 300)]:
        got = rows.take(q)
        want = whole.rows(q)
        assert got.questions.tolist() == [q]
        assert np.array_equal(got.top_ids, whole.top_ids[want]) and np.array_equal(got.token_id, whole.token_id[want])
        held.append(sum(b.token_id.size for b in rows._blocks) + sum(p["question"].size for p in rows._reader._buf))
    assert max(held) <= 3 * 40 and whole.tokens > 1000
    again = rows.take(5)
    assert np.array_equal(again.top_ids, whole.top_ids[whole.rows(5)])


def test_a_pass_builds_a_request_only_when_it_may_be_sent(sim_server, tmp_path, monkeypatch):
    """Each request's ids are made lists when it is built: a pass builds only the requests it may send (its
    ``parallel``), not every question's up front (13k questions' lists held ~100 MiB)."""
    from harness.measure.evaluation import EvalOptions, run_eval

    s = sim_server("--build", "a", "--noise", "launch")
    cfg = ClientConfig(url=s.url, api="sglang", parallel=2, retries=1, backoff_s=0.01)
    ev = tmp_path / "a"
    run_eval(gsm8k.load(TEST_JSONL, "test"), gsm8k.RecipeConfig(num_questions=24), cfg, ev, None,
             EvalOptions(progress=False))
    built, stored, peaks = [0], [0], []
    request, store = dp._Asker.request, dp._store

    async def counting_request(self, ref):  # type: ignore[no-untyped-def]
        built[0] += 1
        peaks.append(built[0] - stored[0])
        return await request(self, ref)

    def counting_store(*args):  # type: ignore[no-untyped-def]
        stored[0] += 1
        return store(*args)

    monkeypatch.setattr(dp._Asker, "request", counting_request)
    monkeypatch.setattr(dp, "_store", counting_store)
    ref = tmp_path / "ref"
    for name, opts, cap, most in (
            ("ref", dp.ScoringOptions(progress=False, top_k=3, batch=1), 256, 2),  # parallel requests of 1
            ("ab", dp.ScoringOptions(progress=False, top_k=3, batch=4, reference_scores=ref), 256, 8),  # ... of 4
            ("ab3", dp.ScoringOptions(progress=False, top_k=3, batch=1, parallel=8, reference_scores=ref), 3, 3)):
        built[0], stored[0] = 0, 0
        peaks.clear()
        monkeypatch.setattr(dp, "MAX_QUESTIONS_IN_FLIGHT", cap)
        wide = replace(cfg, parallel=8) if name == "ab3" else cfg
        meta = dp.score_pass(ev, wide, tmp_path / name, opts)
        assert meta["status"] == "ok" and meta["questions"] == 24 and built[0] == 24
        assert max(peaks) <= most, (name, peaks)  # and the questions in flight at most MAX_QUESTIONS_IN_FLIGHT


def test_questions_in_flight_are_capped_whatever_parallel_and_batch():
    assert dp.in_flight(128, 16) == dp.MAX_QUESTIONS_IN_FLIGHT // 16 and dp.in_flight(3, 16) == 3
    assert dp.in_flight(128, 1000) == 1 and dp.in_flight(1000, 1) == dp.MAX_QUESTIONS_IN_FLIGHT


def test_score_inputs_are_read_a_batch_of_questions_at_a_time(tmp_path):
    """Reading the ids never decodes the whole file at once (13k questions' ids as int64 copies and pyarrow's
    buffers peaked at +317 MiB): numpy's temporaries stay about a batch's."""
    import tracemalloc

    rows = _inputs_rows(2000, shared=700, own=60, ref=100)
    dp._write_inputs(tmp_path / "in.parquet", rows)
    tracemalloc.start()
    try:
        got = dp._read_inputs(tmp_path / "in.parquet")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(got) == 2000 and got[1999] == rows[1999]
    ids = sum(len(p) + len(r) for p, r in rows.values())
    assert peak < ids * 8 // 4, (peak, ids)  # the ids as int64 at once: 14 MB; held (4 bytes an own id): ~1.3 MB


def test_release_hands_the_heaps_free_pages_back(monkeypatch):
    """After a pass (and the divergence), glibc's heap keeps the freed arrays' pages: release() trims it too."""
    import platform

    assert ab.trim_heap() is (platform.system() == "Linux" and platform.libc_ver()[0] == "glibc")
    calls: list[int] = []
    monkeypatch.setattr(ab, "trim_heap", lambda: calls.append(1) or True)
    ab.release()
    assert calls == [1]
