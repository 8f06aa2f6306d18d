"""Teacher-forced scoring requests and their parsing: real llama-cpp-python answers (recorded, and live in a
slow test), hand-made answers in SGLang's and vLLM's shapes, and the client's scoring path."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from conftest import free_port
from helpers.aioserver import ThreadedApp
from helpers.llamacpp import needs_llamacpp

from harness.serving.client import Client, ClientConfig
from harness.serving.wire import MalformedResponse, OpenAIApi, ScoreRequest, SGLangApi

RECORD = json.loads((Path(__file__).parent / "data" / "llamacpp_scoring.json").read_text())


# ------------------------------------------------------------------------------------------ llama-cpp-python
def test_llamacpp_echo_is_shifted_and_the_probe_finds_it():
    p = RECORD["probe"]
    api = OpenAIApi("m").with_scoring_probe(p["text"], p["generation"], p["scoring"])
    assert api.echo_shift == 1 and api.model == "m"


def test_llamacpp_scores_reproduce_the_servers_own_generation_logprobs():
    """Scoring the server's greedy completion teacher-forced must give the logprobs and top-k it reported
    while generating it: the realigned echo does, the echo taken at face value does not."""
    gen = RECORD["generation"]["choices"][0]["logprobs"]
    req = ScoreRequest(RECORD["prompt"], RECORD["reference"], top_k=5)
    s = OpenAIApi("m", echo_shift=1).parse_scores(RECORD["scoring"], req)
    assert len(s) == len(gen["tokens"]) == 13
    assert s.texts == gen["tokens"] and "".join(s.texts) == RECORD["reference"]
    assert s.ids == [None] * 13  # llama-cpp-python gives texts, not ids
    assert s.logprobs == pytest.approx(gen["token_logprobs"], abs=1e-5)
    for i, top in enumerate(gen["top_logprobs"]):
        best = sorted(top.items(), key=lambda kv: -kv[1])[:5]
        assert s.top_texts[i] == [k for k, _ in best]
        assert s.top_logprobs[i] == pytest.approx([v for _, v in best], abs=1e-5)
        assert s.top_logprobs[i] == sorted(s.top_logprobs[i], reverse=True)
    assert s.text_offsets[0] == 0 and s.text_offsets == sorted(s.text_offsets)
    assert [RECORD["reference"][o:o + len(t)] for o, t in zip(s.text_offsets, s.texts, strict=True)] == s.texts
    assert s.input_tokens == RECORD["scoring"]["usage"]["prompt_tokens"]
    assert s.id_logprobs == [{}] * 13
    naive = OpenAIApi("m").parse_scores(RECORD["scoring"], req)
    assert naive.texts == s.texts
    assert max(abs(a - b) for a, b in zip(naive.logprobs, gen["token_logprobs"], strict=True)) > 1.0


def test_openai_scoring_body():
    req = ScoreRequest("P:", " x", top_k=20)
    assert OpenAIApi("m").scoring_body(req) == {"model": "m", "prompt": "P: x", "max_tokens": 1,
                                                "temperature": 0.0, "echo": True, "logprobs": 20,
                                                "stream": False}
    assert OpenAIApi("m").scoring_body(ScoreRequest([1, 2], [3], top_k=2))["prompt"] == [1, 2, 3]


# ------------------------------------------------------------------------------------------ vLLM's shape
def _vllm_echo(tokens: list[str], lps: list[float | None], tops: list[dict[str, float] | None],
               offsets: list[int]) -> dict[str, Any]:
    return {"id": "cmpl-1", "object": "text_completion", "model": "m",
            "choices": [{"index": 0, "text": "".join(tokens), "finish_reason": "length",
                         "logprobs": {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens,
                                      "top_logprobs": tops}}],
            "usage": {"prompt_tokens": len(tokens) - 1, "completion_tokens": 1, "total_tokens": len(tokens)}}


def test_openai_text_mode_picks_the_reference_by_offset_and_keeps_k():
    # echo of "Q:" + " 5." then one generated token ("\n"), as vLLM answers max_tokens 1
    obj = _vllm_echo(["Q", ":", " 5", ".", "\n"], [None, -3.0, -0.5, -0.25, -1.0],
                     [None, {":": -3.0, "A": -0.1}, {" 5": -0.5, " 4": -1.2, " 6": -2.0},
                      {".": -0.25, "\n": -1.5, "!": -3.5}, {"\n": -1.0, "Q": -0.9}], [0, 1, 2, 4, 5])
    s = OpenAIApi("m").parse_scores(obj, ScoreRequest("Q:", " 5.", top_k=2))
    assert s.texts == [" 5", "."] and s.logprobs == [-0.5, -0.25] and s.text_offsets == [0, 2]
    assert s.top_texts == [[" 5", " 4"], [".", "\n"]] and s.top_logprobs == [[-0.5, -1.2], [-0.25, -1.5]]
    assert s.input_tokens == 4


def test_openai_token_id_mode_takes_positions_and_ids():
    tokens = ["token_id:1", "token_id:50", "token_id:7", "token_id:9", "token_id:2"]
    obj = _vllm_echo(tokens, [None, -1.0, -0.5, -0.75, -2.0],
                     [None, {"token_id:50": -1.0}, {"token_id:7": -0.5, "token_id:8": -1.0},
                      {"token_id:9": -0.75, "token_id:3": -0.8}, {"token_id:2": -2.0}], [0, 10, 20, 29, 38])
    s = OpenAIApi("m").parse_scores(obj, ScoreRequest([1, 50], [7, 9], top_k=5))
    assert s.ids == [7, 9] and s.texts == [None, None] and s.logprobs == [-0.5, -0.75]
    assert s.top_ids == [[7, 8], [9, 3]] and s.text_offsets == [None, None]


def test_openai_scoring_malformed():
    api, req = OpenAIApi("m"), ScoreRequest("a", "b")
    for bad in ({"choices": [{"text": "x"}]}, {"choices": []}, {"error": "x"},
                _vllm_echo(["a", "b"], [None], [None, None], [0, 1]),
                {"choices": [{"logprobs": {"tokens": ["a", "b"], "token_logprobs": [None, -1.0]}}]}):
        with pytest.raises(MalformedResponse):
            api.parse_scores(bad, req)
    with pytest.raises(MalformedResponse):  # fewer echoed tokens than the ids sent
        api.parse_scores(_vllm_echo(["token_id:1"], [None], [None], [0]), ScoreRequest([1], [2, 3]))
    with pytest.raises(ValueError, match="both be text or both"):
        ScoreRequest("a", [1])


# ------------------------------------------------------------------------------------------ SGLang's shape
def _sglang_answer(ids: list[int], start: int, top_k: int, asked: list[int] | None) -> dict[str, Any]:
    """What SGLang's /generate returns for return_logprob with max_new_tokens 0 (tokenizer_manager's
    add_logprob_to_meta_info): [logprob, id, text] triples from position logprob_start_len on, the first
    always null (the scheduler pads entry 0 with None and pops the last)."""
    rows, tops, by_id = [], [], []
    for pos in range(start, len(ids)):
        lp = None if pos == start else -0.1 * pos
        rows.append([lp, ids[pos], f"t{ids[pos]}"])
        tops.append(None if pos == start else [[-0.1 * pos + 0.05 * (r == 0) - 0.5 * r, 100 + r, f"a{r}"]
                                               for r in range(top_k)])  # sorted, as engines promise
        by_id.append(None if pos == start else [[-1.0 - 0.01 * t, t, f"t{t}"] for t in (asked or [])])
    meta: dict[str, Any] = {"id": "x", "finish_reason": {"type": "length", "length": 0}, "prompt_tokens": len(ids),
                            "completion_tokens": 0, "cached_tokens": 0, "e2e_latency": 0.01,
                            "input_token_logprobs": rows, "output_token_logprobs": []}
    if top_k:
        meta["input_top_logprobs"], meta["output_top_logprobs"] = tops, []
    if asked is not None:
        meta["input_token_ids_logprobs"], meta["output_token_ids_logprobs"] = by_id, []
    return {"text": "", "output_ids": [], "meta_info": meta}


def test_sglang_scoring_body_by_ids_and_by_text():
    req = ScoreRequest([11, 12, 13], [14, 15], top_k=20, token_ids=[100, 101])
    assert json.dumps(SGLangApi().scoring_body(req)) == json.dumps(
        {"input_ids": [11, 12, 13, 14, 15], "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
         "logprob_start_len": 2, "top_logprobs_num": 20, "return_text_in_logprobs": True,
         "token_ids_logprob": [100, 101]})
    body = SGLangApi().scoring_body(ScoreRequest("Q: x\nAnswer:", " 5", top_k=3, prompt_tokens=7))
    assert body["text"] == "Q: x\nAnswer: 5" and body["logprob_start_len"] == 6 and "input_ids" not in body
    assert "token_ids_logprob" not in body
    with pytest.raises(ValueError, match="needs prompt_tokens"):
        SGLangApi().scoring_body(ScoreRequest("Q", " 5"))


def test_sglang_scores_parse():
    ids = [11, 12, 13, 14, 15]
    req = ScoreRequest(ids[:3], ids[3:], top_k=3, token_ids=[100, 7])
    s = SGLangApi().parse_scores(_sglang_answer(ids, 2, 3, [100, 7]), req)
    assert s.ids == [14, 15] and s.texts == ["t14", "t15"] and s.logprobs == pytest.approx([-0.3, -0.4])
    assert s.top_ids == [[100, 101, 102]] * 2 and s.top_texts == [["a0", "a1", "a2"]] * 2
    assert s.top_logprobs[0] == pytest.approx([-0.25, -0.8, -1.3])
    assert s.id_logprobs == [{100: -2.0, 7: pytest.approx(-1.07)}] * 2
    assert s.input_tokens == 5 and s.text_offsets == [None, None]
    # from position 0: the first token has no logprob and no alternatives
    s = SGLangApi().parse_scores(_sglang_answer([5, 6], 0, 2, None), ScoreRequest([], [5, 6], top_k=2))
    assert s.logprobs == [None, pytest.approx(-0.1)] and s.top_ids[0] == [] and s.id_logprobs == [{}, {}]
    # batched answer (a list) and text mode
    s = SGLangApi().parse_scores([_sglang_answer(ids, 2, 0, None)], ScoreRequest("a", "b", top_k=0, prompt_tokens=3))
    assert s.ids == [14, 15] and s.top_ids == [[], []]


def test_sglang_scores_malformed():
    req = ScoreRequest([1, 2], [3, 4], top_k=1)
    good = _sglang_answer([1, 2, 3, 4], 1, 1, None)
    assert SGLangApi().parse_scores(good, req).ids == [3, 4]
    short = json.loads(json.dumps(good))
    short["meta_info"]["input_token_logprobs"].pop()
    uneven = json.loads(json.dumps(good))
    uneven["meta_info"]["input_top_logprobs"].pop()
    bad_tops = []
    for top in ([["x", 5, None]], [[-0.1]], [-0.1, 5], {"-0.1": 5}, "ab", [[-0.1, "five", None]]):
        for field in ("input_top_logprobs", "input_token_ids_logprobs"):  # the alternatives and the asked ids
            b = json.loads(json.dumps(good))
            b["meta_info"][field] = [None, None, top]
            bad_tops.append(b)
    for bad in ({"text": "x", "meta_info": {}}, {"error": "x"}, short, uneven, [],
                {"meta_info": {"input_token_logprobs": [["x", 1, None], [0.0, 2, None]]}}, *bad_tops):
        with pytest.raises(MalformedResponse):
            SGLangApi().parse_scores(bad, req)


# ------------------------------------------------------------------------------------------ the client's path
class Replay(ThreadedApp):
    """Serves the recorded llama-cpp-python answers; the first scoring request gets a torn body."""

    def __init__(self) -> None:
        super().__init__()
        self.posts: list[dict[str, Any]] = []
        self.torn = False

    def routes(self, app: web.Application) -> None:
        async def completions(request: web.Request) -> web.Response:
            body = await request.json()
            self.posts.append(body)
            if not body.get("echo"):
                return web.json_response(RECORD["probe"]["generation"])
            if body["prompt"] == RECORD["probe"]["text"] + RECORD["probe"]["generation"]["choices"][0]["text"]:
                return web.json_response(RECORD["probe"]["scoring"])
            if not self.torn:
                self.torn = True
                return web.Response(text='{"choices": [{"logp', content_type="application/json")
            return web.json_response(RECORD["scoring"])

        app.router.add_post("/v1/completions", completions)


def test_client_prepares_and_scores_with_retries():
    async def go(url: str):
        cfg = ClientConfig(url=url, api="openai", model="m", retries=2, backoff_s=0.001)
        async with Client(cfg) as c:
            api = await c.prepare_scoring()
            reply = await c.score(ScoreRequest(RECORD["prompt"], RECORD["reference"], top_k=5))
            return api, reply

    with Replay() as srv:
        api, reply = asyncio.run(go(f"http://127.0.0.1:{srv.port}"))
    assert api.echo_shift == 1
    assert reply.error is None and reply.attempts == 2  # the torn body was retried
    gen = RECORD["generation"]["choices"][0]["logprobs"]
    assert reply.scores is not None and reply.scores.logprobs == pytest.approx(gen["token_logprobs"], abs=1e-5)
    assert [p.get("echo", False) for p in srv.posts] == [False, True, True, True]


# ------------------------------------------------------------------------------------------ the real server
@pytest.mark.slow
@pytest.mark.real_model
@needs_llamacpp()
def test_real_llamacpp_scores_its_own_greedy_text(tmp_path):
    from harness.engines.llamacpp import default_gguf

    port = free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(default_gguf()),
                             "--logits_all", "true", "--n_ctx", "2048", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    async def go():
        async with Client(ClientConfig(url=url, api="openai", parallel=1)) as c:
            await c.wait_ready(120)
            await c.prepare()
            api = await c.prepare_scoring()
            prompt = "Question: A farmer has 7 cows and buys 5 more. How many cows does he have?\nAnswer:"
            gen = await c.post_json(api.generate_path, {"model": api.model, "prompt": prompt, "max_tokens": 10,
                                                         "temperature": 0.0, "logprobs": 3, "stream": False})
            reply = await c.score(ScoreRequest(prompt, gen["choices"][0]["text"], top_k=3))
            return api, gen, reply

    try:
        deadline = time.monotonic() + 120
        while True:  # the port opens only once the model is loaded
            try:
                api, gen, reply = asyncio.run(go())
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    assert api.echo_shift == 1  # SmolLM2 adds no BOS: llama-cpp-python's echo is one entry off
    lp = gen["choices"][0]["logprobs"]
    assert reply.error is None and reply.scores is not None
    assert reply.scores.texts == lp["tokens"]
    assert reply.scores.logprobs == pytest.approx(lp["token_logprobs"], abs=1e-3)


@pytest.mark.parametrize("texts, asked", [(True, False), (False, True)])
def test_the_array_parser_of_sglang_scores_agrees_with_the_entry_by_entry_one(monkeypatch: pytest.MonkeyPatch,
                                                                             texts: bool, asked: bool) -> None:
    """A regular SGLang answer is parsed by numpy (no Python object per alternative); the careful parser gives
    the same scores on it, ties in logprob kept in the server's order."""
    import numpy as np

    from harness.serving import wire

    rng = np.random.default_rng(3)
    t, k, m = 40, 8, 5
    # sorted as engines send them, at most 0; rounded: ties
    lps = -np.sort(-np.minimum(np.round(rng.normal(-3, 1, (t, k)), 1), 0.0), axis=1)
    ids = np.stack([rng.choice(50_000, k, replace=False) for _ in range(t)])  # distinct at each position
    text = (lambda i: f"w{i}") if texts else (lambda i: None)
    tops = [None] + [[[float(lps[i, j]), int(ids[i, j]), text(ids[i, j])] for j in range(k)] for i in range(t)]
    rows = [[None, 1, None]] + [[float(lps[i, 0]), int(ids[i, 0]), text(ids[i, 0])] for i in range(t)]
    ask = [int(x) for x in ids[0, :m]]
    by_id = [None] + [[[float(-i - j / 10), a, None] for j, a in enumerate(ask)] for i in range(t)] if asked else None
    obj = {"meta_info": {"input_token_logprobs": rows, "input_top_logprobs": tops, "prompt_tokens": t + 4,
                         **({"input_token_ids_logprobs": by_id} if asked else {})}}
    req = ScoreRequest(list(range(1, 5)), [int(x) for x in ids[:, 0]], top_k=k)
    fast = SGLangApi().parse_scores(obj, req)
    assert fast.dense_top is not None
    monkeypatch.setattr(wire, "_dense_sglang", lambda *a: None)
    slow = SGLangApi().parse_scores(obj, req)
    assert slow.dense_top is None
    for name in ("ids", "texts", "logprobs", "top_ids", "top_texts", "top_logprobs", "id_logprobs", "input_tokens"):
        assert getattr(fast, name) == getattr(slow, name), name
    np.testing.assert_array_equal(fast.dense_top[0], np.asarray(slow.top_ids))
    # an irregular answer (a null logprob among the alternatives: -inf, last) is left to the careful parser
    monkeypatch.undo()
    assert SGLangApi().parse_scores(obj, req).dense_top is not None
    tops[3][-1][0] = None
    assert SGLangApi().parse_scores(obj, req).dense_top is None


@pytest.mark.parametrize("asked", [False, True])
def test_an_answer_without_texts_read_from_its_bytes_is_the_json_parsers(asked: bool) -> None:
    """The compared and floor passes' answers (no token texts) are read by numpy from the body's bytes; the
    scores are those the JSON parser gives, and anything irregular is left to it."""
    import numpy as np

    rng = np.random.default_rng(5)
    t, k, m = 30, 6, 4
    lps = -np.sort(-np.minimum(np.round(rng.normal(-3, 1, (t, k)), 1), 0.0), axis=1)  # as engines send them
    ids = np.stack([rng.choice(50_000, k, replace=False) for _ in range(t)])
    ask = [int(x) for x in ids[0, :m]]
    meta = {"prompt_tokens": t + 4, "input_token_logprobs": [[None, 1, None]] + [
                [float(lps[i, 0]), int(ids[i, 0]), None] for i in range(t)],
            "input_top_logprobs": [None] + [[[float(lps[i, j]), int(ids[i, j]), None] for j in range(k)]
                                            for i in range(t)]}
    if asked:
        meta["input_token_ids_logprobs"] = [None] + [[[float(-i - j / 10), a, None] for j, a in enumerate(ask)]
                                                     for i in range(t)]
    obj = {"text": "", "meta_info": {"id": "x", **meta, "e2e_latency": 0.1}}
    req = ScoreRequest(list(range(1, 5)), [int(x) for x in ids[:, 0]], top_k=k, token_ids=ask if asked else None,
                       texts=False)
    raw = json.dumps(obj).encode()
    fast, slow = SGLangApi().decode_scores(raw, req), SGLangApi().parse_scores(obj, req)
    assert fast is not None
    for name in ("ids", "logprobs", "top_ids", "top_logprobs", "input_tokens"):
        assert getattr(fast, name) == getattr(slow, name), name
    if asked:
        assert fast.asked_ids == tuple(ask)
        got = [{a: float(v) for a, v in zip(fast.asked_ids, row, strict=True)} for row in fast.dense_asked]
        assert got == slow.id_logprobs
    # left to the JSON parser: texts asked for, a string among the numbers, a null logprob, ragged positions,
    # a key given twice, an array that is not meta_info's
    assert SGLangApi().decode_scores(raw, ScoreRequest(req.prompt, req.reference, top_k=5, texts=True)) is None
    assert raw.count(b"[null, 1, null]") == 1
    bad = [raw.replace(b'null]]', b'"x"]]', 1), raw.replace(b"[-3", b"[null", 1),
           raw.replace(b"[null, 1, null]", b"[null, true, null]"),  # a boolean is not an id
           raw.replace(b"[-3", b"[n", 1),  # a stray n (the letter a null reads by) before a number
           re.sub(rb"(\[-?[\d.]+), \d+, null\]", rb"\1, null, null]", raw.decode().encode(), count=2),  # null ids
           re.sub(rb"\[-?[\d.]+, (\d+, null\])", rb"[null, \1", raw, count=3),  # a null logprob after the first
           raw.replace(b"[-3", b"[nil", 1), raw.replace(b"[-3", b"[None", 1), raw.replace(b"[-3", b"[-inf", 1),
           raw.replace(b"[-3", b"[{}", 1), raw.replace(b"[-3", b'[{"a": 1}', 1),
           json.dumps({**obj, "meta_info": {**meta, "input_top_logprobs": meta["input_top_logprobs"][:-1] + [
               meta["input_top_logprobs"][-1][:-1]]}}).encode(),
           raw[:-1] + b', "input_top_logprobs": []}',
           raw.replace(b'"e2e_latency"', b'"input_top_logprobs": null, "e2e_latency"'),  # twice, the last null
           json.dumps({"text": "", "meta_info": {"prompt_tokens": 3}, "x": meta}).encode()]
    for b in bad:
        assert SGLangApi().decode_scores(b, req) is None, b[:60]


def _sglang_item(rng: Any, prompt: list[int], t: int, k: int, ask: list[int] | None) -> tuple[dict, ScoreRequest]:
    """One regular SGLang answer without texts (as the compared passes get them) and the request it answers."""
    import numpy as np
    lps = -np.sort(-np.minimum(np.round(rng.normal(-3, 1, (t, k)), 2), 0.0), axis=1)
    ids = np.stack([rng.choice(50_000, k, replace=False) for _ in range(t)])
    meta: dict[str, Any] = {
        "prompt_tokens": len(prompt) + t,
        "input_token_logprobs": [[None, prompt[-1], None]] + [[float(lps[i, 0]), int(ids[i, 0]), None]
                                                              for i in range(t)],
        "input_top_logprobs": [None] + [[[float(lps[i, j]), int(ids[i, j]), None] for j in range(k)]
                                        for i in range(t)]}
    if ask is not None:
        meta["input_token_ids_logprobs"] = [None] + [[[float(-i - j / 10), a, None] for j, a in enumerate(ask)]
                                                     for i in range(t)]
    req = ScoreRequest(prompt, [int(x) for x in ids[:, 0]], top_k=k, token_ids=ask, texts=False)
    return {"text": "", "meta_info": {"id": "x", **meta, "e2e_latency": 0.1}}, req


def _hostile_batches(items: list[dict]) -> list[tuple[str, bytes]]:
    """The batch ``items`` as bodies with one answer made irregular, impossible or another request's, each way a
    server can get it wrong (answer 1 of the batch: the others stay regular)."""
    import copy

    def one(name: str, change: Any) -> tuple[str, bytes]:
        got = copy.deepcopy(items)
        change(got[1]["meta_info"], got)
        return name, json.dumps(got).encode()

    raw = json.dumps(items).encode()
    second = raw.index(b'"e2e_latency"', raw.index(b'"e2e_latency"') + 1)
    twice = raw[:second] + b'"input_top_logprobs": null, ' + raw[second:]  # JSON keeps the last: none

    def put(path: tuple[Any, ...], value: Any) -> Any:
        def change(meta: dict, _: list) -> None:
            at = meta
            for p in path[:-1]:
                at = at[p]
            at[path[-1]] = value
        return change

    return [one("positive logprob", put(("input_token_logprobs", 2, 0), 0.5)),
            one("positive alternative", put(("input_top_logprobs", 3, 0, 0), 1.5)),
            one("alternatives out of order", put(("input_top_logprobs", 2, -1, 0), 0.0)),
            one("an id twice among the alternatives",
                lambda m, _: m["input_top_logprobs"][2][1].__setitem__(1, m["input_top_logprobs"][2][0][1])),
            one("a reference token that was not sent", put(("input_token_logprobs", 1, 1), 7)),
            one("a negative id", put(("input_token_logprobs", 1, 1), -1)),
            one("a float id", put(("input_token_logprobs", 1, 1), 3.5)),
            one("a null logprob", put(("input_token_logprobs", 2, 0), None)),
            one("a string logprob", put(("input_top_logprobs", 2, 0, 0), "x")),
            one("too few alternatives", lambda m, _: m["input_top_logprobs"][2].pop()),
            one("too many alternatives",
                lambda m, _: m["input_top_logprobs"][2].append([-30.0, 49_999_999, None])),
            one("a position missing", lambda m, _: (m["input_token_logprobs"].pop(), m["input_top_logprobs"].pop())),
            one("the wrong prompt_tokens", put(("prompt_tokens",), 3)),
            one("prompt_tokens a string", put(("prompt_tokens",), "9")),
            *([one("an asked id's logprob for another id", put(("input_token_ids_logprobs", 2, 0, 1), 12345))]
              if "input_token_ids_logprobs" in items[1]["meta_info"] else []),
            one("an answer that is not an object", lambda _, b: b.__setitem__(1, [1, 2])),
            one("two answers swapped", lambda _, b: b.__setitem__(slice(0, 2), b[1::-1])),
            one("an answer missing", lambda _, b: b.pop()),
            one("an answer more", lambda _, b: b.append(b[0])),
            ("the top-k key twice in an answer", twice)]


@pytest.mark.parametrize("asked", [False, True])
def test_a_batch_read_at_once_gives_what_each_answer_read_alone_gives(monkeypatch: pytest.MonkeyPatch,
                                                                      asked: bool) -> None:
    """A regular batch answer is read at once, every answer's arrays parsed and checked together; any irregular
    answer sends the batch to the answer-by-answer reading. On a regular batch and on every hostile one the two
    readings give the same scores, or the same refusal, or both leave the body to the JSON parser."""
    import numpy as np

    from harness.serving import wire

    rng = np.random.default_rng(11)
    ask = [3, 17, 40_001] if asked else None
    pairs = [_sglang_item(rng, list(range(1, 2 + i)), t, 5, ask) for i, t in enumerate((7, 12, 3, 9))]
    items, reqs = [p[0] for p in pairs], [p[1] for p in pairs]
    api = SGLangApi()

    def outcome(body: bytes) -> Any:
        try:
            got = api.decode_batch_scores(body, reqs)
        except MalformedResponse as e:
            return "refused", str(e)
        if got is None:
            return None
        return [(s.ids, s.logprobs, s.top_ids, s.top_logprobs, s.input_tokens, s.asked_ids, s.id_logprobs)
                for s in got]

    together = []
    real = wire._decode_together

    def spy(*a: Any) -> Any:
        got = real(*a)
        together.append(got is not None)
        return got

    monkeypatch.setattr(wire, "_decode_together", spy)
    regular = json.dumps(items).encode()
    assert outcome(regular) is not None and together == [True]  # the regular batch was read at once
    for name, body in [("regular", regular), *_hostile_batches(items)]:
        monkeypatch.setattr(wire, "_decode_together", spy)
        at_once = outcome(body)
        monkeypatch.setattr(wire, "_decode_together", lambda *a: None)
        alone = outcome(body)
        assert at_once == alone, name
        if name == "a null logprob":  # kept as none given (the pass counts the position as not measured)
            assert at_once is None or at_once[1][1][1] is None
        elif name not in ("regular", "prompt_tokens a string"):  # a count that is not one is read as none given
            assert at_once is None or at_once[0] == "refused", name  # never scores from a hostile answer
    # what the numpy reading leaves to the JSON parser, the JSON parser refuses; and it does not leave everything
    monkeypatch.setattr(wire, "_decode_together", real)
    left = []
    for name, body in _hostile_batches(items):
        if name == "a null logprob":
            assert api.parse_batch_scores(json.loads(body), reqs)[1].logprobs[1] is None
        elif outcome(body) is None and name != "prompt_tokens a string":
            left.append(name)
            with pytest.raises(MalformedResponse):
                api.parse_batch_scores(json.loads(body), reqs)
    assert "positive logprob" not in left and "a reference token that was not sent" not in left, left
