"""Several questions per scoring request (SGLang's ``/generate`` takes a batch): the pass scores exactly what one
question per request scores, in fewer requests; a batch answer of another length or in another order is the error
of every question in it; a server that refuses a batch is asked one question per request, and the pass says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pytest
import requests
from conftest import TEST_JSONL
from helpers.tamperproxy import TamperProxy
from helpers.waiting import PATIENCE_S

from harness.measure.divergence_pass import ScoringOptions, _read_inputs, score_pass
from harness.measure.evaluation import EvalOptions, run_eval
from harness.results.score_blocks import load_scores
from harness.serving.client import ClientConfig
from harness.serving.wire import NOT_THIS_REQUEST, MalformedResponse, ScoreRequest, SGLangApi
from harness.tasks import gsm8k

N = 20
COLUMNS = ("questions", "offsets", "token_id", "logprob", "top_ids", "top_logprobs", "ref_top_logprobs")


def _cfg(url: str) -> ClientConfig:
    return ClientConfig(url=url, api="sglang", parallel=32, retries=1, backoff_s=0.01)


def _received(url: str) -> int:
    return int(requests.get(url + "/get_server_info", timeout=5).json()["requests_received"])


@pytest.fixture(scope="module")
def passes(tmp_path_factory):
    """Arm A's eval and its reference pass (one question per request) on one simulator, and B's simulator."""
    from conftest import SimServer
    a = SimServer("--build", "a", "--run-seed", "2", "--noise", "launch").wait_ready()
    b = SimServer("--build", "b", "--run-seed", "3", "--noise", "launch").wait_ready()
    try:
        ev = tmp_path_factory.mktemp("batch") / "a"
        run_eval(gsm8k.load(TEST_JSONL, "test"), gsm8k.RecipeConfig(num_questions=N),
                 ClientConfig(url=a.url, parallel=32), ev, None, EvalOptions(progress=False))
        assert score_pass(ev, _cfg(a.url), ev, ScoringOptions(progress=False, batch=1))["status"] == "ok"
        yield a, b, ev
    finally:
        a.stop()
        b.stop()


def _same(got: Path, want: Path) -> None:
    g, w = load_scores(got), load_scores(want)
    for col in COLUMNS:
        np.testing.assert_array_equal(getattr(g, col), getattr(w, col), err_msg=col)


def test_a_batched_pass_scores_what_one_question_per_request_scores_in_fewer_requests(passes, tmp_path):
    a, b, ev = passes
    single = score_pass(ev, _cfg(b.url), tmp_path / "single", ScoringOptions(progress=False, batch=1,
                                                                               reference_scores=ev))
    before = _received(b.url)
    batched = score_pass(ev, _cfg(b.url), tmp_path / "batched", ScoringOptions(progress=False, batch=8,
                                                                                 reference_scores=ev))
    asked = _received(b.url) - before
    assert single["status"] == batched["status"] == "ok" and batched["questions"] == single["questions"] == N
    assert batched["batch"] == 8 and batched["batch_refused"] is None and single["batch"] == 1
    assert asked <= 1 + 1 + -(-(N - 1) // 8)  # readiness probe, the first question alone, then batches of 8
    _same(tmp_path / "batched", tmp_path / "single")
    # the reference pass too (it also tokenizes): the same scores and ids batched
    ref = tmp_path / "ref"
    import shutil
    shutil.copytree(ev, ref)
    for name in ("scores.json", "scores.parquet", "score_inputs.parquet"):
        (ref / name).unlink()
    assert score_pass(ref, _cfg(a.url), ref, ScoringOptions(progress=False, batch=5))["batch"] == 5
    _same(ref, ev)
    assert _read_inputs(ref / "score_inputs.parquet") == _read_inputs(ev / "score_inputs.parquet")


def test_a_server_that_refuses_batches_is_asked_one_question_per_request(passes, tmp_path):
    a, b, ev = passes
    score_pass(ev, _cfg(b.url), tmp_path / "single", ScoringOptions(progress=False, batch=1, reference_scores=ev))
    with TamperProxy(b.url, "nobatch") as proxy:
        meta = score_pass(ev, _cfg(proxy.url), tmp_path / "p", ScoringOptions(progress=False, batch=8,
                                                                               reference_scores=ev))
        assert proxy.tampered >= 1
    assert meta["status"] == "ok" and meta["errors"] == 0 and meta["questions"] == N
    assert "refused a batch" in meta["batch_refused"] and "HTTP 400" in meta["batch_refused"]
    _same(tmp_path / "p", tmp_path / "single")


# ------------------------------------------------------------------------------------------ the wire
def _batch(url: str) -> tuple[list[ScoreRequest], bytes]:
    ids = requests.post(url + "/tokenize", json={"prompt": ["Tom has 3 apples.", "Two plus two is", "The sky"],
                                                 "add_special_tokens": False}, timeout=PATIENCE_S).json()["tokens"]
    reqs = [ScoreRequest(p[:2], p[2:], top_k=3, token_ids=[1, 2, 5], texts=False) for p in ids]
    raw = requests.post(url + "/generate", json=SGLangApi().batch_scoring_body(reqs), timeout=5).content
    return reqs, raw


@pytest.mark.parametrize("write", [orjson.dumps, lambda x: json.dumps(x).encode()], ids=["fast", "careful"])
def test_a_batch_answer_reads_as_its_requests_answers_and_another_order_or_length_is_refused(passes, write):
    a, _, _ = passes
    api = SGLangApi()
    reqs, raw = _batch(a.url)
    items = orjson.loads(raw)
    assert isinstance(items, list) and len(items) == 3

    def read(body: bytes, rs: list[ScoreRequest]) -> list:
        got = api.decode_batch_scores(body, rs)
        return got if got is not None else api.parse_batch_scores(orjson.loads(body), rs)

    batch = read(write(items), reqs)
    for req, item, got in zip(reqs, items, batch, strict=True):
        one = api.parse_scores(item, req)
        assert got.ids == one.ids and got.logprobs == one.logprobs and got.top_logprobs == one.top_logprobs
    with pytest.raises(MalformedResponse, match="answer 0 of a scoring batch: "):
        read(write(items[::-1]), reqs)  # the same answers in another order: none is taken for another's
    with pytest.raises(MalformedResponse, match=NOT_THIS_REQUEST):
        read(write(items[:2]), reqs)
    body = api.batch_scoring_body(reqs)
    assert body["logprob_start_len"] == [1, 1, 1] and body["token_ids_logprob"] == [[1, 2, 5]] * 3
    assert api.reply_tokens(body) == sum(api.reply_tokens(api.scoring_body(r)) for r in reqs)


def test_requests_that_cannot_share_a_body_are_not_sent_as_one_batch():
    """A batch is one shape: all by ids, all with texts or all without, ids asked of all or of none."""
    api = SGLangApi()
    plain = ScoreRequest([1, 2], [3, 4], top_k=2, texts=False)
    with pytest.raises(ValueError, match="all with or all without texts"):
        api.batch_scoring_body([plain, ScoreRequest([1, 2], [3, 4], top_k=2, texts=True)])
    with pytest.raises(ValueError, match="asks ids of every request or of none"):
        api.batch_scoring_body([plain, ScoreRequest([1, 2], [3, 4], top_k=2, token_ids=[5], texts=False)])
    with pytest.raises(ValueError, match="one scoring request per body"):
        from harness.serving.wire import for_api
        for_api("vllm", "m").batch_scoring_body([plain, plain])
