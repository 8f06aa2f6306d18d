"""Scoring by token ids on OpenAI-compatible servers that take them (vLLM: ids as the prompt, ``prompt_logprobs``
keyed by id), detected by the reference pass, with the text path as the fallback and its reason recorded; on a
model whose tokenizer adds a BOS token, where vLLM's ``text_offset`` misaligns the text path (the real vLLM:
tests/test_vllm_real.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import TEST_JSONL
from helpers.fake_vllm import BOS_ID, BOS_TEXT, FakeVLLM

from harness.measure.divergence_pass import INPUTS, ScoringOptions, score_pass
from harness.measure.evaluation import EvalOptions, run_eval
from harness.results.score_blocks import load_scores
from harness.serving.client import ClientConfig
from harness.serving.wire import MalformedResponse, OpenAIApi, ScoreRequest, VLLMApi
from harness.tasks import gsm8k

N = 3


def _eval(srv: FakeVLLM, out: Path, api: str = "vllm") -> Path:
    run_eval(gsm8k.load(TEST_JSONL, "test"), gsm8k.RecipeConfig(num_questions=N),
             ClientConfig(url=srv.url, api=api, parallel=2), out, None, EvalOptions(progress=False))
    return out


def _score(srv: FakeVLLM, ev: Path, out: Path, api: str = "vllm", ref: Path | None = None) -> dict:
    return score_pass(ev, ClientConfig(url=srv.url, api=api, parallel=2), out,
                      ScoringOptions(progress=False, reference_scores=ref))


def test_the_text_path_misaligns_on_a_bos_model_where_ids_do_not():
    """The wire alone, on vLLM's answer for a BOS-adding tokenizer: the offset rule takes prompt tokens as the
    reference (their offsets count the BOS text), the id path takes exactly the ids sent."""
    with FakeVLLM(bos=True) as srv:
        prompt, ref = "Question: how many?\nAnswer:", " 3 + 4 = 7 apples"
        text_req = ScoreRequest(prompt, ref, top_k=3)
        obj = srv.complete(OpenAIApi("fake").scoring_body(text_req))
        assert obj["choices"][0]["logprobs"]["tokens"][0] == BOS_TEXT  # echoed, while "text" lacks it
        assert not obj["choices"][0]["text"].startswith(BOS_TEXT)
        by_text = OpenAIApi("fake").parse_scores(obj, text_req)
        assert "".join(t or "" for t in by_text.texts) != ref  # misaligned: not the reference's tokens
        p_ids, r_ids = srv.encode(prompt), srv.encode(ref, special=False)
        assert p_ids[0] == BOS_ID
        id_req = ScoreRequest(p_ids, r_ids, top_k=3)
        api = VLLMApi("fake").scoring_by_ids()
        body = api.scoring_body(id_req)
        assert body["prompt"] == p_ids + r_ids and body["prompt_logprobs"] == 3 and "echo" not in body
        by_ids = api.parse_scores(srv.complete(body), id_req)
        api.confirm_id_scores(by_ids, id_req)
        assert by_ids.ids == r_ids and "".join(t or "" for t in by_ids.texts) == ref
        full = p_ids + r_ids
        want = [srv.logprob(full[i - 1], full[i]) for i in range(len(p_ids), len(full))]
        assert by_ids.logprobs == pytest.approx(want)
        for row_ids, row_lps in zip(by_ids.top_ids, by_ids.top_logprobs, strict=True):  # top-k only, best first
            assert len(row_ids) == 3 and row_lps == sorted(row_lps, reverse=True)


def test_prompt_logprobs_answers_are_checked():
    api, req = VLLMApi("m").scoring_by_ids(), ScoreRequest([5, 6], [7, 8], top_k=2)

    def answer(rows):
        return {"choices": [{"prompt_logprobs": rows}], "usage": {"prompt_tokens": 4}}

    good = [None, {"6": {"logprob": -1.0, "rank": 1}, "3": {"logprob": -1.5, "rank": 2}},  # k = 2 at each
            {"7": {"logprob": -0.5, "rank": 2, "decoded_token": " x"}, "9": {"logprob": -0.1, "rank": 1}},
            {"8": {"logprob": -3.0, "rank": 40, "decoded_token": "y"}, "1": {"logprob": -0.2, "rank": 1},
             "2": {"logprob": -0.9, "rank": 2}}]
    s = api.parse_scores(answer(good), req)
    assert s.ids == [7, 8] and s.logprobs == [-0.5, -3.0] and s.texts == [" x", "y"] and s.input_tokens == 4
    assert s.top_ids == [[9, 7], [1, 2]]  # rank 40 is not in the top 2
    for bad, why in ((answer(good[:3]), "3 prompt_logprobs entries for an input of 4"),
                     ({"choices": [{"text": "x"}]}, "no choices"),
                     (answer([None, None, "x", None]), "not an object"),
                     (answer([None, None, {"7": {"rank": 1}}, good[3]]), "is not {id"),
                     (answer([None, None, {"9": {"logprob": -0.1, "rank": 1}}, good[3]]), "lacks the input token 7")):
        with pytest.raises(MalformedResponse, match=why):
            api.parse_scores(bad, req)
    with pytest.raises(MalformedResponse, match="for a reference of 2 ids"):
        api.confirm_id_scores(api.parse_scores(answer(good), ScoreRequest([5], [6, 7, 8], top_k=2)),
                              ScoreRequest([5, 6], [7, 9], top_k=2))


def test_a_bos_model_is_scored_by_ids_and_every_pass_sends_the_same_ids(tmp_path):
    with FakeVLLM(bos=True) as srv:
        ev = _eval(srv, tmp_path / "a")
        m = _score(srv, ev, ev)
        m2 = _score(srv, ev, tmp_path / "b", ref=ev)
        sent = [r for r in srv.requests if "prompt_logprobs" in r]
    assert m["status"] == m2["status"] == "ok", (m.get("reason"), m2.get("reason"))
    assert m["by_ids"] is True and m["by_text_reason"] is None and (ev / INPUTS).exists()
    assert all(isinstance(r["prompt"], list) and r["prompt"][0] == BOS_ID for r in sent)
    ref, b = load_scores(ev), load_scores(tmp_path / "b")
    assert (ref.token_id == b.token_id).all() and (ref.logprob == b.logprob).all()
    # exactly the answer's tokens, one per reference id, and the model's own logprobs
    answer_ids = srv.encode(srv.answer, special=False)
    for q in ref.questions:
        got = list(ref.token_id[ref.rows(q)])
        assert got and got == answer_ids[:len(got)]
    assert not any(r.get("echo") for r in sent)


@pytest.mark.parametrize("bos", [True, False])
def test_without_tokenize_the_pass_falls_back_to_text_and_says_why(tmp_path, bos):
    with FakeVLLM(bos=bos, tokenize=False) as srv:
        ev = _eval(srv, tmp_path / "a")
        m = _score(srv, ev, ev)
    if bos:  # the echo alignment probe catches the shifted offsets: not measured, never misaligned silently
        assert m["status"] == "not_measured"
        assert "cannot score" in m["reason"] and "not by token ids either" in m["reason"]
        assert "POST /tokenize" in m["reason"]
    else:
        assert m["status"] == "ok" and m["by_ids"] is False and not (ev / INPUTS).exists()
        assert "does not tokenize" in m["by_text_reason"] and "POST /tokenize" in m["by_text_reason"]


def test_a_server_that_ignores_prompt_logprobs_is_scored_by_text(tmp_path):
    with FakeVLLM(bos=False, prompt_logprobs=False) as srv:
        ev = _eval(srv, tmp_path / "a", api="openai")
        m = _score(srv, ev, ev, api="openai")
    assert m["status"] == "ok" and m["by_ids"] is False
    assert "not answered per id" in m["by_text_reason"] and "prompt_logprobs" in m["by_text_reason"]
