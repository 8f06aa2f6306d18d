"""Answers no honest server sends, refused at the wire as that request's error with the reason: impossible logprobs
(NaN, infinities, positive values), a token id twice among one position's alternatives, alternatives out of order
or not as many as asked, and answers to another request (other token ids scored, another prompt's token count).
Every protocol's parser is tried: SGLang's entry-by-entry and array parsers and its reader of raw bytes, the
OpenAI echo, vLLM's ``prompt_logprobs``; then the client (retried, counted) and the eval's prompt-token check."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from aiohttp import web
from helpers.aioserver import ThreadedApp

from harness.measure.prompt_tokens import BY_FIRST_ANSWER, BY_TOKENIZER, PromptTokens
from harness.serving.client import Client, ClientConfig
from harness.serving.plausible import LOGPROB_ROUNDOFF, dense_problem, top_problem
from harness.serving.wire import (
    NOT_THIS_REQUEST,
    MalformedResponse,
    OpenAIApi,
    ScoreRequest,
    SGLangApi,
    VLLMApi,
)

PROMPT, REFERENCE = [1, 2, 3], [7, 8, 9]
K = 3


def sglang_answer(texts: bool = False, asked: list[int] | None = None) -> dict[str, Any]:
    """An honest SGLang answer to :func:`request`: logprob_start_len 2 (its entry null), then the reference, each
    position with K sorted alternatives of distinct ids."""
    text = (lambda i: f"t{i}") if texts else (lambda i: None)
    rows = [[None, PROMPT[-1], text(PROMPT[-1])]] + [[-0.5 - i, t, text(t)] for i, t in enumerate(REFERENCE)]
    tops = [None] + [[[-0.5 - i - j, t + 10 * j, text(t + 10 * j)] for j in range(K)]
                     for i, t in enumerate(REFERENCE)]
    meta: dict[str, Any] = {"id": "r", "prompt_tokens": len(PROMPT) + len(REFERENCE), "input_token_logprobs": rows,
                            "input_top_logprobs": tops}
    if asked is not None:
        meta["input_token_ids_logprobs"] = [None] + [[[-2.0 - j, a, None] for j, a in enumerate(asked)]
                                                     for _ in REFERENCE]
    return {"text": "", "meta_info": meta}


def request(texts: bool = False, asked: list[int] | None = None) -> ScoreRequest:
    return ScoreRequest(PROMPT, REFERENCE, top_k=K, texts=texts, token_ids=asked)


def parsers(obj: Any, req: ScoreRequest) -> dict[str, Any]:
    """What each SGLang reader makes of ``obj``: the scores, or the MalformedResponse it raised (the bytes reader
    may also decline, None, and leave the answer to the JSON parsers)."""
    from harness.serving import wire

    got: dict[str, Any] = {}
    raw = json.dumps(obj).encode()  # Python's json: NaN and Infinity written as such
    for name, parse in (("bytes", lambda: SGLangApi().decode_scores(raw, req)),
                        ("arrays", lambda: SGLangApi().parse_scores(json.loads(raw), req)),
                        ("entries", lambda: _entries_only(wire, json.loads(raw), req))):
        try:
            got[name] = parse()
        except MalformedResponse as e:
            got[name] = e
    return got


def _entries_only(wire: Any, obj: Any, req: ScoreRequest) -> Any:
    dense, wire._dense_sglang = wire._dense_sglang, lambda *a: None
    try:
        return SGLangApi().parse_scores(obj, req)
    finally:
        wire._dense_sglang = dense


def _tamper(where: str, value: Any, position: int = 1, entry: int = 0) -> dict[str, Any]:
    obj = sglang_answer(texts=False, asked=[5, 6])
    meta = obj["meta_info"]
    if where == "own":
        meta["input_token_logprobs"][position][0] = value
    elif where == "top":
        meta["input_top_logprobs"][position][entry][0] = value
    else:
        meta["input_token_ids_logprobs"][position][entry][0] = value
    return obj


# ------------------------------------------------------------------------------------------ the rules
def test_an_honest_answer_is_read_alike_by_every_parser():
    for texts in (False, True):
        got = parsers(sglang_answer(texts, [5, 6]), request(texts, [5, 6]))
        scores = [g for g in got.values() if g is not None]
        assert len(scores) >= 2 and not any(isinstance(g, Exception) for g in scores)
        for s in scores:
            assert s.ids == REFERENCE and s.logprobs == [-0.5, -1.5, -2.5]
            assert s.top_ids == [[7, 17, 27], [8, 18, 28], [9, 19, 29]]
            assert s.top_logprobs[0] == [-0.5, -1.5, -2.5]
    assert parsers(sglang_answer(), request())["bytes"] is not None  # the fast path takes an honest answer


@pytest.mark.parametrize("where", ["own", "top", "asked"])
@pytest.mark.parametrize("value, shown", [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"), (0.5, "0.5"),
                                          (1e-3, "0.001")])
def test_an_impossible_logprob_is_the_answers_error_in_every_parser(where: str, value: float, shown: str):
    got = parsers(_tamper(where, value), request(asked=[5, 6]))
    for name, g in got.items():
        if name == "bytes" and g is None:
            continue  # orjson refuses NaN and infinities: the JSON parsers read those
        assert isinstance(g, MalformedResponse), (name, g)
        assert "impossible logprob" in str(g) and shown in str(g) and "at reference token 0" in str(g), str(g)
        assert "finite and <= 0" in str(g)


def test_round_off_above_zero_and_a_null_alternative_are_still_data():
    for value in (LOGPROB_ROUNDOFF / 2, 0.0):
        obj = _tamper("own", value)
        obj["meta_info"]["input_top_logprobs"][1][0][0] = value
        for name, g in parsers(obj, request(asked=[5, 6])).items():
            assert not isinstance(g, Exception), (name, g)
    obj = sglang_answer(texts=True)
    obj["meta_info"]["input_top_logprobs"][1][-1][0] = None  # orjson writes -inf as null: the bottom
    s = SGLangApi().parse_scores(obj, request(texts=True))
    assert s.top_logprobs[0][-1] == -math.inf


@pytest.mark.parametrize("texts", [False, True])
def test_a_token_id_twice_among_the_alternatives_is_refused(texts: bool):
    obj = sglang_answer(texts)
    obj["meta_info"]["input_top_logprobs"][2][2][1] = 8  # position 1's best id again, last
    for name, g in parsers(obj, request(texts)).items():
        if g is None:
            continue
        assert isinstance(g, MalformedResponse) and "token id 8 twice among the alternatives at reference token 1" \
            in str(g), (name, g)


@pytest.mark.parametrize("texts", [False, True])
def test_alternatives_out_of_order_or_not_k_are_refused(texts: bool):
    unsorted = sglang_answer(texts)
    unsorted["meta_info"]["input_top_logprobs"][3].reverse()
    short = sglang_answer(texts)
    for top in short["meta_info"]["input_top_logprobs"][1:]:
        top.pop()
    long = sglang_answer(texts)
    for i, top in enumerate(long["meta_info"]["input_top_logprobs"][1:]):
        top.append([-9.0, 99 + i, None])
    for obj, words in ((unsorted, "not sorted by logprob"), (short, "2 alternatives"), (long, "4 alternatives")):
        for name, g in parsers(obj, request(texts)).items():
            if g is None:
                continue
            assert isinstance(g, MalformedResponse) and words in str(g), (name, g)
    ties = sglang_answer(texts)
    ties["meta_info"]["input_top_logprobs"][1][1][0] = -0.5  # a tie with the first: allowed, order kept
    s = SGLangApi().parse_scores(ties, request(texts))
    assert s.top_ids[0] == [7, 17, 27]


def test_asked_ids_must_come_back_one_each_in_the_order_asked():
    obj = sglang_answer(asked=[5, 6])
    obj["meta_info"]["input_token_ids_logprobs"][2] = [[-2.0, 6, None], [-3.0, 5, None]]
    for name, g in parsers(obj, request(asked=[5, 6])).items():
        if g is None:
            continue
        assert isinstance(g, MalformedResponse) and "asked-id entries at reference token 1" in str(g), (name, g)


def test_the_vectorised_rules_agree_with_the_per_position_ones():
    import numpy as np

    rng = np.random.default_rng(1)
    for _ in range(300):
        lp = -rng.exponential(1, (4, 3))
        ids = rng.integers(0, 5, (4, 3))
        top = np.sort(lp, axis=1)[:, ::-1] if rng.random() < 0.5 else lp
        if rng.random() < 0.2:
            top[rng.integers(4), rng.integers(3)] = rng.choice([np.nan, np.inf, 0.3])
        dense = dense_problem(np.full(4, -1.0), top, ids, 3)
        rows = [top_problem(ids[i].tolist(), top[i].tolist(), 3, "") for i in range(4)]
        finite = bool((np.isfinite(top) & (top <= LOGPROB_ROUNDOFF)).all())
        assert (dense is None) == (finite and all(r is None for r in rows))


# ------------------------------------------------------------------------------------------ another request's answer
def test_an_answer_that_scores_other_ids_or_counts_another_input_is_not_this_requests():
    swapped = sglang_answer()
    for row in swapped["meta_info"]["input_token_logprobs"][1:]:
        row[1] += 1
    for top in swapped["meta_info"]["input_top_logprobs"][1:]:
        for e in top:
            e[1] += 1
    counted = sglang_answer()
    counted["meta_info"]["prompt_tokens"] = 9
    for obj, words in ((swapped, "it scores token 8 at reference position 0, where 7 was sent"),
                       (counted, "logprob entries from input position 2, but prompt_tokens 9")):
        for name, g in parsers(obj, request()).items():
            assert isinstance(g, MalformedResponse) and str(g).startswith(NOT_THIS_REQUEST) and words in str(g), \
                (name, g)
    # by text: the entries from logprob_start_len on must be the input prompt_tokens counts
    text_req = ScoreRequest("Q", " a b c", top_k=K, prompt_tokens=3)
    assert SGLangApi().parse_scores(sglang_answer(texts=True), text_req).input_tokens == 6
    with pytest.raises(MalformedResponse, match=NOT_THIS_REQUEST):
        SGLangApi().parse_scores(counted, text_req)


def _echo(tokens: list[str], lps: list[float | None], tops: list[dict[str, Any] | None],
          prompt_tokens: int) -> dict[str, Any]:
    return {"choices": [{"text": "", "logprobs": {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops,
                                                  "text_offset": list(range(len(tokens)))}}],
            "usage": {"prompt_tokens": prompt_tokens}}


@pytest.mark.parametrize("value", [math.nan, math.inf, 0.5, "x"])
def test_openai_echo_refuses_impossible_logprobs_and_another_inputs_count(value: Any):
    tokens = ["token_id:1", "token_id:7", "token_id:8"]
    req = ScoreRequest([1], [7, 8], top_k=2)
    good = _echo(tokens, [None, -1.0, -0.5], [None, {"token_id:7": -1.0, "token_id:3": -1.5},
                                              {"token_id:8": -0.5, "token_id:4": -2.0}], 3)
    assert OpenAIApi("m").parse_scores(good, req).top_ids == [[7, 3], [8, 4]]
    for path in (("token_logprobs", 2), ("top_logprobs", 1, "token_id:3")):
        bad = json.loads(json.dumps(good))
        node = bad["choices"][0]["logprobs"]
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        with pytest.raises(MalformedResponse, match="impossible logprob|is not a number"):
            OpenAIApi("m").parse_scores(bad, req)
    too_many = copy.deepcopy(good)
    too_many["choices"][0]["logprobs"]["top_logprobs"][1].update({"token_id:5": -3.0, "token_id:6": -4.0})
    with pytest.raises(MalformedResponse, match="4 alternatives at reference token 0 where 2 were asked"):
        OpenAIApi("m").parse_scores(too_many, req)
    other = copy.deepcopy(good)
    other["usage"]["prompt_tokens"] = 5
    with pytest.raises(MalformedResponse, match=f"{NOT_THIS_REQUEST}: prompt_tokens 5 for an input of 3"):
        OpenAIApi("m").parse_scores(other, req)


def test_vllm_prompt_logprobs_refuse_impossible_values_and_one_id_spelt_twice():
    req = ScoreRequest([1], [7], top_k=2)

    def answer(entry: dict[str, Any]) -> dict[str, Any]:
        return {"choices": [{"prompt_logprobs": [None, entry]}], "usage": {"prompt_tokens": 2}}

    good = {"7": {"logprob": -0.5, "rank": 1}, "3": {"logprob": -1.0, "rank": 2}}
    api = VLLMApi("m").scoring_by_ids()
    assert api.parse_scores(answer(good), req).top_ids == [[7, 3]]
    for bad, words in (({**good, "3": {"logprob": float("nan"), "rank": 2}}, "impossible logprob"),
                       ({**good, "7": {"logprob": 0.25, "rank": 1}}, "impossible logprob 0.25"),
                       ({**good, "03": {"logprob": -1.0, "rank": 2}}, "token id 3 twice"),
                       ({"7": {"logprob": -0.5, "rank": 1}}, "1 alternatives at reference token 0 where 2")):
        with pytest.raises(MalformedResponse, match=words):
            api.parse_scores(answer(bad), req)


# ------------------------------------------------------------------------------------------ the client and the eval
class Answers(ThreadedApp):
    """SGLang's /generate answering scoring requests with NaN logprobs the first ``bad`` times, then honestly;
    generation requests with ``prompt_tokens`` from ``counts`` in turn."""

    def __init__(self, bad: int = 0, counts: tuple[int, ...] = (5,)) -> None:
        super().__init__()
        self.bad, self.counts, self.seen = bad, counts, 0

    def routes(self, app: web.Application) -> None:
        async def generate(request: web.Request) -> web.Response:
            body = await request.json()
            self.seen += 1
            if body.get("return_logprob"):
                obj = _tamper("top", math.nan) if self.seen <= self.bad else sglang_answer(asked=[5, 6])
                return web.Response(body=json.dumps(obj), content_type="application/json")
            n = self.counts[(self.seen - 1) % len(self.counts)]
            return web.json_response({"text": "x", "meta_info": {"prompt_tokens": n, "completion_tokens": 1,
                                                                 "finish_reason": {"type": "stop"}}})

        app.router.add_post("/generate", generate)


def _client(srv: Answers, retries: int) -> Client:
    return Client(ClientConfig(url=srv.url, api="sglang", retries=retries, backoff_s=0.001, parallel=2))


def test_the_client_retries_an_impossible_answer_and_gives_its_reason():
    import asyncio

    async def score(srv: Answers, retries: int) -> Any:
        async with _client(srv, retries) as c:
            return await c.score(request(asked=[5, 6]))

    with Answers(bad=1) as srv:
        reply = asyncio.run(score(srv, 1))
    assert reply.error is None and reply.attempts == 2 and reply.scores.ids == REFERENCE
    with Answers(bad=5) as srv:
        reply = asyncio.run(score(srv, 2))
    assert reply.scores is None and reply.attempts == 3
    assert reply.error.startswith("impossible logprob of an alternative nan at reference token 0")


def test_a_generation_counting_another_prompt_is_retried_then_an_error():
    import asyncio

    counts = PromptTokens()
    counts.learn(["sglang:p"], [5])

    async def ask(srv: Answers, retries: int) -> Any:
        async with _client(srv, retries) as c:
            return await c.generate({"text": "p"}, lambda g: counts.check("sglang:p", g.prompt_tokens))

    with Answers(counts=(9, 5)) as srv:
        reply = asyncio.run(ask(srv, 1))
    assert reply.error is None and reply.attempts == 2 and reply.prompt_tokens == 5
    with Answers(counts=(9,)) as srv:
        reply = asyncio.run(ask(srv, 1))
    assert reply.text is None and reply.attempts == 2
    assert reply.error == (f"{NOT_THIS_REQUEST}: prompt_tokens 9, but this prompt is 5 tokens on this server "
                           f"({BY_TOKENIZER})")


def test_the_first_answer_to_a_prompt_sets_its_count_and_the_tokenizer_overrides_it():
    counts = PromptTokens()
    assert counts.check("k", None) is None and counts.check("k", 7) is None and counts.check("k", 7) is None
    assert counts.check("k", 8) == f"{NOT_THIS_REQUEST}: prompt_tokens 8, but this prompt is 7 tokens on this " \
                                   f"server ({BY_FIRST_ANSWER})"
    counts.learn(["k"], [8])
    assert counts.check("k", 8) is None and BY_TOKENIZER in (counts.check("k", 7) or "")
    assert PromptTokens.key("chat", "ab") != PromptTokens.key("sglang", "ab")
