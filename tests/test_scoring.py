"""The scoring pass (harness/measure/divergence_pass.py) against real simulator processes and fake servers: what it sends, what it
stores, the SGLang logprob_start_len of a P-token prompt, ids sent the same in every pass, the reference top-k
ids asked of the others, text-keyed OpenAI passes, and an engine that cannot score (not_measured)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TEST_JSONL
from helpers.aioserver import FakeServer
from helpers.docs import divergence_doc as compute_divergence

from harness.measure.divergence_pass import (
    INPUTS,
    ScoringOptions,
    _read_inputs,
    asked_cap,
    asked_ids,
    load_references,
    score_pass,
    text_key,
)
from harness.measure.evaluation import EvalOptions, run_eval
from harness.results.fileio import read_json
from harness.results.score_blocks import load_scores
from harness.results.token_store import scores_status
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k

N = 40


def _eval(url: str, out: Path, api: str = "sglang", n: int = N) -> Path:
    test = gsm8k.load(TEST_JSONL, "test")
    run_eval(test, gsm8k.RecipeConfig(num_questions=n), ClientConfig(url=url, api=api, parallel=32), out, None,
             EvalOptions(progress=False))
    return out


def _cfg(url: str, api: str = "sglang") -> ClientConfig:
    return ClientConfig(url=url, api=api, parallel=32, retries=1, backoff_s=0.01)


# ------------------------------------------------------------------------------------------ units
def test_asked_ids_unions_the_likeliest_ids_without_the_reference_token():
    top = np.array([[5, 7, 9, -1], [7, 8, 5, 6]])
    lps = np.array([[-0.1, -2.0, -6.0, -np.inf], [-0.2, -1.0, -3.0, -9.0]])
    assert asked_ids(top, lps, 10) == [5, 7, 8, 9, 6]
    assert asked_ids(top, lps, 2) == [5, 7]
    # each position's own reference token is not asked there (every pass returns its logprob anyway)
    assert asked_ids(top, lps, 10, np.array([5, 7])) == [8, 7, 5, 9, 6]
    assert asked_ids(top, lps, 0) == [] and asked_ids(np.full((2, 3), -1), np.zeros((2, 3)), 5) == []


def test_the_ids_asked_scale_with_top_k_up_to_the_default_cap():
    """Every asked id is an entry at every position of an answer: a smaller top_k asks proportionally fewer."""
    assert asked_cap(20) == 32 and asked_cap(50) == 32  # the default top_k asks the default cap, never more
    assert (asked_cap(5), asked_cap(10), asked_cap(1)) == (8, 16, 2)
    assert ScoringOptions(top_k=5).asked == 8 and ScoringOptions(top_k=5, max_asked_ids=3).asked == 3
    assert ScoringOptions().asked == 32


def test_asked_ids_from_the_best_entries_are_those_of_all_entries() -> None:
    """The union is taken from the best entries alone when they hold enough distinct ids: the same ids, in the
    same order, as ordering every entry (ties, repeats, NaN-free logprobs on a coarse grid to force ties)."""
    rng = np.random.default_rng(3)

    def by_all(top: np.ndarray, lps: np.ndarray, cap: int, ref: np.ndarray) -> list[int]:
        keep = (top >= 0) & (top != ref[:, None])
        pairs = sorted(zip((-lps[keep]).tolist(), top[keep].tolist(), strict=True))
        out: list[int] = []
        for _, i in pairs:
            if i not in out:
                out.append(i)
        return out[:cap]

    for _ in range(300):
        t, k, cap = int(rng.integers(1, 60)), int(rng.integers(1, 25)), int(rng.integers(1, 40))
        top = rng.integers(-1, int(rng.integers(2, 400)), (t, k))
        lps = np.round(rng.normal(-3, 2, (t, k)), int(rng.integers(0, 3)))
        ref = rng.integers(0, 50, t)
        assert asked_ids(top, lps, cap, ref) == by_all(top, lps, cap, ref)


def test_text_key_is_stable_non_negative_int32():
    keys = [text_key(t) for t in (" 18", "\n\n", "<tok_7>", "é", "")]
    assert all(0 <= k < 2**31 for k in keys) and len(set(keys)) == len(keys)
    other = subprocess.run([sys.executable, "-c", "from harness.measure.divergence_pass import text_key; print(text_key(' 18'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert int(other) == keys[0]  # the same in every process (no per-process hash seed)
    assert text_key(None) == -1


def test_references_are_the_answered_questions_with_the_prompts_sent(sim_server, tmp_path):
    s = sim_server("--invalid-rate", "0")
    ev = _eval(s.url, tmp_path / "a", n=8)
    refs = load_references(ev)
    assert [r.question for r in refs] == list(range(8))
    assert all(r.prompt.endswith("Answer:") and r.text and r.prompt_tokens for r in refs)


def test_a_pass_sends_at_most_its_own_parallel_requests_at_once(sim_server, tmp_path, monkeypatch):
    """``divergence.parallel`` caps a pass's requests in flight below the client's ``parallel`` (never above it),
    and scores.json says what was used."""
    import harness.measure.divergence_pass as lp

    s = sim_server("--build", "a", "--noise", "launch")
    ev = _eval(s.url, tmp_path / "a", n=12)
    peaks: list[int] = []

    class Counting(lp.Client):  # type: ignore[misc,valid-type]
        async def post_json(self, path, body):  # type: ignore[no-untyped-def]
            peaks.append(self.in_flight)
            return await super().post_json(path, body)

        async def score(self, req):  # type: ignore[no-untyped-def]
            reply = await super().score(req)
            peaks.append(self.in_flight)
            return reply

    monkeypatch.setattr(lp, "Client", Counting)
    meta = score_pass(ev, _cfg(s.url), ev, ScoringOptions(progress=False, parallel=3))
    assert meta["status"] == "ok" and meta["parallel"] == 3 and meta["questions"] == 12
    assert peaks and max(peaks) <= 3
    meta = score_pass(ev, _cfg(s.url), ev, ScoringOptions(progress=False, parallel=1000))
    assert meta["status"] == "ok" and meta["parallel"] == 32  # the client's own, when it is the lower


# ------------------------------------------------------------------------------------------ SGLang, by ids
def test_reference_pass_scores_every_reference_token_by_ids(sim_server, tmp_path):
    s = sim_server("--build", "a", "--noise", "launch")
    ev = _eval(s.url, tmp_path / "a")
    meta = score_pass(ev, _cfg(s.url), ev, ScoringOptions(progress=False, meta={"engine": "simulated"}))
    assert meta["status"] == "ok" and meta["by_ids"] is True and meta["api"] == "sglang"
    assert meta["questions"] == N and meta["errors"] == 0 and meta["wall_s"] > 0 and meta["engine"] == "simulated"
    t = load_scores(ev)
    inputs = _read_inputs(ev / INPUTS)
    assert sorted(inputs) == list(range(N))
    for q in (0, 7, N - 1):
        rows = t.rows(q)
        assert list(t.token_id[rows]) == inputs[q][1]  # the ids tokenized once, in order
    # logprob_start_len = P - 1: the FIRST reference token has its logprob too (SGLang's entry 0 is null)
    assert np.isfinite(t.logprob).all()
    first = t.offsets[:-1]
    assert np.isfinite(t.logprob[first]).all() and (t.top_ids[first, 0] >= 0).all()
    # a greedy text: its token is (nearly always) this server's own argmax, with the top-1 logprob
    own = t.top_ids[:, 0] == t.token_id
    assert own.mean() > 0.95
    assert np.allclose(t.logprob[own], t.top_logprobs[own, 0], atol=1e-5)
    # text offsets from the tokens' texts (where the first diverging token starts)
    assert t.text_offset is not None and (t.text_offset[first] == 0).all()


def test_reference_pass_takes_token_texts_from_detokenize_and_asks_answers_for_none(sim_server, tmp_path,
                                                                                    monkeypatch):
    """The texts come from one /detokenize request, so the scoring answers carry none (3x less to parse); a
    server without /detokenize is asked for texts in its answers instead: the same offsets and scores either way."""
    from harness.serving.wire import SGLangApi

    s = sim_server("--build", "a", "--noise", "launch")
    ev = _eval(s.url, tmp_path / "a", n=12)
    asked_texts: list[bool] = []
    body = SGLangApi.scoring_body
    monkeypatch.setattr(SGLangApi, "scoring_body", lambda self, req: (asked_texts.append(req.texts), body(self, req))[1])
    import harness.measure.divergence_pass as lp_pass

    passes = {}
    for name, paths, chunk in (("detokenized", SGLangApi.detokenize_paths, lp_pass.DETOKENIZE_CHUNK),
                               ("in chunks of 7 ids", SGLangApi.detokenize_paths, 7),
                               ("texts in answers", (), lp_pass.DETOKENIZE_CHUNK)):
        monkeypatch.setattr(SGLangApi, "detokenize_paths", paths)
        monkeypatch.setattr(lp_pass, "DETOKENIZE_CHUNK", chunk)
        asked_texts.clear()
        out = tmp_path / name
        assert score_pass(ev, _cfg(s.url), out, ScoringOptions(progress=False))["status"] == "ok"
        passes[name] = (load_scores(out), set(asked_texts))
    (t1, texts1), (t2, texts2) = passes["detokenized"], passes["texts in answers"]
    assert texts1 == {False} and True in texts2 and passes["in chunks of 7 ids"][1] == {False}
    assert np.array_equal(passes["in chunks of 7 ids"][0].text_offset, t1.text_offset)
    # an answer's size bound counts one text per id asked
    assert SGLangApi().reply_tokens({"tokens": [[5]] * 3, "skip_special_tokens": False}) == 3
    assert t1.text_offset is not None and np.array_equal(t1.text_offset, t2.text_offset)
    assert np.array_equal(t1.token_id, t2.token_id) and np.allclose(t1.top_logprobs, t2.top_logprobs, atol=1e-11)
    assert np.array_equal(t1.top_ids, t2.top_ids)


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_compared_pass_sends_the_same_ids_and_asks_for_the_reference_top_ids(sim_server, tmp_path):
    a = sim_server("--build", "a", "--noise", "launch")
    b = sim_server("--build", "b", "--logit-shift", "0.3", "--noise", "launch")
    ev = _eval(a.url, tmp_path / "a")
    score_pass(ev, _cfg(a.url), ev, ScoringOptions(progress=False))
    meta = score_pass(ev, _cfg(b.url), tmp_path / "b", ScoringOptions(progress=False, reference_scores=ev))
    assert meta["status"] == "ok" and meta["asked_ids"] == 32 and meta["reference_scores"] == str(ev)
    ref, cmp = load_scores(ev), load_scores(tmp_path / "b")
    assert np.array_equal(ref.token_id, cmp.token_id) and np.array_equal(ref.questions, cmp.questions)
    assert cmp.ref_top_logprobs is not None and cmp.ref_top_logprobs.shape == ref.top_ids.shape
    got = ~np.isnan(cmp.ref_top_logprobs)
    assert got[:, 0].mean() > 0.95 and got[:, 1:].sum() > 0.5 * N  # the reference token itself; asked ids
    # where B also lists the id in its own top-k, the asked logprob is that same number
    j = np.flatnonzero(got[:, 1])[:200]
    for i in j:
        hit = np.flatnonzero(cmp.top_ids[i] == ref.top_ids[i, 1])
        if hit.size:
            assert cmp.ref_top_logprobs[i, 1] == pytest.approx(cmp.top_logprobs[i, hit[0]], abs=1e-5)
    # the reference token's column holds B's logprob of it
    col0 = ref.top_ids[:, 0] == ref.token_id
    assert np.allclose(cmp.ref_top_logprobs[col0, 0], cmp.logprob[col0], atol=1e-6)


# ------------------------------------------------------------------------------------------ OpenAI: ids (vLLM's)
@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_openai_passes_of_a_server_that_takes_ids_are_scored_by_ids(sim_server, tmp_path):
    """The simulator speaks vLLM's extensions (/tokenize, ids as the prompt, prompt_logprobs keyed by id): the
    reference pass finds that out and every pass sends the same ids (the text path and the BOS model it
    misaligns on: test_openai_ids.py)."""
    a = sim_server("--build", "a", "--noise", "launch")
    a2 = sim_server("--build", "a", "--noise", "launch")
    ev = _eval(a.url, tmp_path / "a", api="openai", n=12)
    m = score_pass(ev, _cfg(a.url, "openai"), ev, ScoringOptions(progress=False))
    m2 = score_pass(ev, _cfg(a2.url, "openai"), tmp_path / "aa", ScoringOptions(progress=False, reference_scores=ev))
    assert m["status"] == m2["status"] == "ok" and m["by_ids"] is True and m2["by_ids"] is True
    assert m["by_text_reason"] is None and (ev / INPUTS).exists()
    ref, aa = load_scores(ev), load_scores(tmp_path / "aa")
    assert np.array_equal(ref.token_id, aa.token_id)  # the same ids on another launch
    assert ref.text_offset is not None and (ref.text_offset >= 0).all()
    assert (np.diff(ref.text_offset)[np.diff(ref.position) == 1] > 0).all()
    d = compute_divergence(ev, tmp_path / "aa", None)
    assert d["verdict"] == "not_measured" and d["kld_mean"] < 0.01  # A/A': launch noise only; no floor given


# ------------------------------------------------------------------------------------------ cannot score
@pytest.mark.parametrize("api, refuse, why", [
    ("sglang", False, "without per-token logprobs"),
    ("sglang", True, "HTTP 400"),
    ("openai", False, "cannot score"),
])
def test_an_engine_that_cannot_score_is_not_measured(tmp_path, api, refuse, why):
    with FakeServer(refuse=refuse) as srv:
        ev = _eval(srv.url, tmp_path / "a", api=api, n=6)
        meta = score_pass(ev, _cfg(srv.url, api), ev, ScoringOptions(progress=False))
        later = score_pass(ev, _cfg(srv.url, api), tmp_path / "b", ScoringOptions(progress=False, reference_scores=ev))
    assert meta["status"] == "not_measured" and why in meta["reason"], meta["reason"]
    status, reason = scores_status(ev)
    assert status == "not_measured" and why in (reason or "")
    assert not (ev / "scores.parquet").exists() and not (ev / INPUTS).exists()
    assert read_json(ev / "scores.json")["wall_s"] >= 0
    assert later["status"] == "not_measured" and "reference pass was not scored" in later["reason"]
    d = compute_divergence(ev, tmp_path / "b", None)
    assert d["verdict"] == "not_measured" and why in d["verdict_reason"] and d["kld_mean"] is None


def test_a_reference_eval_without_answers_is_not_measured(tmp_path):
    from helpers.evals import make_eval

    ev = make_eval(tmp_path / "a", [True, False], errors=(0, 1))
    meta = score_pass(ev, _cfg("http://127.0.0.1:9"), ev, ScoringOptions(progress=False))
    assert meta["status"] == "not_measured" and "no answered question" in meta["reason"]


def test_tokens_without_a_logprob_leave_no_nan_in_the_divergence(tmp_path):
    """llama-cpp-python realigned (echo one entry off) gives no logprob for a token outside its top-k: NaN in the
    pass, left out of the RMS Δlogprob; the divergence object stays strict JSON."""
    import json

    from harness.results.token_store import ScoresWriter

    rng = np.random.default_rng(0)
    for name in ("ref", "ab", "aa"):
        with ScoresWriter(tmp_path / name, top_k=3) as w:
            for q in range(6):
                t = 5
                lps = np.sort(np.log(rng.dirichlet(np.ones(3), t)), axis=1)[:, ::-1]
                lp = lps[:, 0].copy()
                if name == "ab":
                    lp[1] = np.nan
                w.add(q, np.arange(t) + 10, lp, np.tile([10, 11, 12], (t, 1)), lps)
    d = compute_divergence(tmp_path / "ref", tmp_path / "ab", tmp_path / "aa")
    json.dumps(d, allow_nan=False)
    assert d["rms_dlogprob"] is not None and np.isfinite(d["rms_dlogprob"])
    assert all(q["rms_dlogprob"] is None or np.isfinite(q["rms_dlogprob"]) for q in d["top_questions"])
