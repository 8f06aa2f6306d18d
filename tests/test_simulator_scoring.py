"""The simulated engine's token level: toy tokenizer, next-token model (teacher-forced scoring through SGLang's
and vLLM's wire shapes), logit_shift and logprob noise, and return_routed_experts on buggy and fixed builds."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import requests
from helpers.waiting import PATIENCE_S

from abh_simulator import experts
from abh_simulator.hashing import context_states
from abh_simulator.logprobs import NextTokenModel
from abh_simulator.state import known_texts
from abh_simulator.tokens import EOS_ID, Tokenizer, hash_id, pieces
from harness.tasks.gsm8k import read_embedded_test

ROWS = read_embedded_test()
SHOTS = "".join("Question: " + r["question"] + "\nAnswer: " + r["answer"] + "\n\n" for r in ROWS[:5])
V = 32000


def prompt(i: int) -> str:
    return SHOTS + "Question: " + ROWS[i]["question"] + "\nAnswer:"


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(V, known_texts(ROWS))


def post(url: str, path: str, body: dict, status: int = 200) -> dict:
    r = requests.post(url + path, json=body, timeout=30)
    assert r.status_code == status, r.text[:500]
    return r.json()


# ---------------------------------------------------------------------------------------- tokenizer
def test_tokenizer_is_lossless_and_gives_known_pieces_distinct_ids(tok):
    texts = [r["question"] for r in ROWS] + [r["answer"] for r in ROWS]
    assert all("".join(pieces(t)) == t for t in texts)
    assert all(tok.decode(tok.encode(t)) == t for t in texts)
    assert pieces(" 16 eggs, $2.50") == [" 1", "6", " eggs", ",", " $", "2", ".", "5", "0"]
    known = {p for t in texts for p in pieces(t)}
    ids = {tok.encode(p)[0] for p in known}
    assert len(ids) == len(known) and min(ids) >= 3 and max(ids) < V  # no collision among known pieces
    again = Tokenizer(V, known_texts(ROWS))
    assert again.encode(prompt(3)) == tok.encode(prompt(3))  # stable: a function of (vocab, data)
    assert "zzqx" not in known and tok.encode("zzqx") == [hash_id("zzqx", V)]  # unknown pieces: their hash
    assert tok.decode(tok.encode("zzqx")) == "zzqx"


# ------------------------------------------------------------------------------- next-token model
def _model(**kw) -> NextTokenModel:
    return NextTokenModel(**{"seed": 0, "vocab_size": V, "build": "", "logit_shift": 0.0,
                             "logprob_noise": 0.0, "noise": "pass", "run_seed": 1, **kw})


def test_distributions_are_normalised_over_the_whole_vocabulary(tok):
    ids = tok.encode(prompt(0))[:60]
    m = _model(build="x", logit_shift=0.3, logprob_noise=0.05)
    sc = m.score(ids, [5, 40], top_k=20, requested=list(range(V)))
    for j in range(2):
        total = math.fsum(math.exp(v) for v in sc.requested[j])
        assert total == pytest.approx(1.0, abs=1e-9)
        top = sc.top[j]
        assert [v for _, v in top] == sorted((v for _, v in top), reverse=True)
        assert top[0][1] == pytest.approx(max(sc.requested[j]))
        assert sc.requested[j][ids[sc.positions[j]]] == pytest.approx(sc.token_logprobs[j])
        assert sc.ranks[j] == 1 + sum(v > sc.token_logprobs[j] for v in sc.requested[j])


def _kl_top(a_top, b_lps) -> float:
    """KL(A||B) over A's top-k plus one tail bucket."""
    pa = np.exp([v for _, v in a_top])
    pb = np.exp(b_lps)
    ta, tb = max(1e-300, 1 - pa.sum()), max(1e-300, 1 - pb.sum())
    return float((pa * (np.log(pa) - np.log(pb))).sum() + ta * (math.log(ta) - math.log(tb)))


def _mean_kl(tok, a: NextTokenModel, b: NextTokenModel, a_pass: int = 0, b_pass: int = 0, n: int = 15) -> float:
    kls = []
    for i in range(n):
        ids = tok.encode("Question: " + ROWS[i]["question"] + "\nAnswer: " + ROWS[i]["answer"])
        pos = list(range(1, len(ids)))
        st = context_states(ids, 0)
        sa = a.score(ids, pos, top_k=20, pass_index=a_pass, states=st)
        for j, p in enumerate(pos):
            sb = b.score(ids, [p], requested=[t for t, _ in sa.top[j]], pass_index=b_pass, states=st)
            kls.append(_kl_top(sa.top[j], sb.requested[0]))
    return float(np.mean(kls))


@pytest.mark.slow  # scores 80 positions of several model builds
def test_logit_shift_separates_builds_and_zero_means_identical(tok):
    ids = tok.encode(prompt(1))
    pos = list(range(len(ids) - 80, len(ids)))
    same = [_model(build=b).score(ids, pos, top_k=5) for b in ("baseline", "fix")]
    assert same[0] == same[1]  # shift 0: builds identical
    a, b = (_model(build=x, logit_shift=0.3).score(ids, pos, top_k=5) for x in ("baseline", "fix"))
    assert a != b and a == _model(build="baseline", logit_shift=0.3).score(ids, pos, top_k=5)
    floor = _mean_kl(tok, _model(build="a", logprob_noise=0.025), _model(build="a", logprob_noise=0.025), 0, 1)
    shifted = _mean_kl(tok, _model(build="a", logit_shift=0.3, logprob_noise=0.025),
                       _model(build="b", logit_shift=0.3, logprob_noise=0.025, run_seed=2))
    assert 1e-4 < floor < 1e-3 and 0.01 < shifted < 0.1 and shifted > 20 * floor, (floor, shifted)


@pytest.mark.parametrize("noise", ["launch", "pass", "mixed"])
def test_logprob_noise_follows_the_noise_mode(tok, noise):
    ids = tok.encode(prompt(2))
    pos = list(range(len(ids) - 100, len(ids)))

    def lps(run_seed: int, k: int) -> np.ndarray:
        m = _model(noise=noise, logprob_noise=0.05, run_seed=run_seed)
        return np.array(m.score(ids, pos, pass_index=k).token_logprobs)

    within = np.abs(lps(1, 0) - lps(1, 1)).mean()
    between = np.abs(lps(1, 0) - lps(2, 0)).mean()
    if noise == "launch":
        assert within == 0 and between > 0.005
    elif noise == "pass":
        assert within > 0.005 and between > 0.005
    else:
        assert 0 < within < 0.85 * between


# ------------------------------------------------------------------------------- SGLang /generate
def test_sglang_teacher_forced_scoring_shapes(sim_server, tok):
    s = sim_server("--noise", "launch", "--logprob-noise", "0.02")
    text = prompt(4) + " " + ROWS[4]["answer"]
    t = post(s.url, "/tokenize", {"prompt": text})
    ids = t["tokens"]
    assert t["count"] == len(ids) and t["max_model_len"] > 0 and ids == tok.encode(text)
    assert post(s.url, "/detokenize", {"tokens": ids})["text"] == text
    n_prompt = post(s.url, "/v1/tokenize", {"prompt": [prompt(4)]})["count"][0]
    start = n_prompt - 1
    want = [ids[n_prompt], 3, 4, 5]
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True, "logprob_start_len": start, "top_logprobs_num": 5, "token_ids_logprob": want,
            "return_text_in_logprobs": True}
    r = post(s.url, "/generate", body)
    m = r["meta_info"]
    assert r["text"] == "" and m["prompt_tokens"] == len(ids) and m["completion_tokens"] == 0
    itl = m["input_token_logprobs"]
    assert len(itl) == len(ids) - start and m["output_token_logprobs"] == []
    assert itl[0] == [None, ids[start], tok.token_text(ids[start])]
    assert [e[1] for e in itl] == ids[start:] and all(e[0] < 0 for e in itl[1:])
    assert "".join(e[2] for e in itl[1:]) == " " + ROWS[4]["answer"]
    top, asked = m["input_top_logprobs"], m["input_token_ids_logprobs"]
    assert len(top) == len(asked) == len(itl) and top[0] is None and asked[0] is None
    for j in range(1, len(itl)):
        assert len(top[j]) == 5 and [e[0] for e in top[j]] == sorted((e[0] for e in top[j]), reverse=True)
        assert [e[1] for e in asked[j]] == want
        for lp, i, _ in top[j]:  # an id in both lists has one logprob: the same number on the wire
            if i in want:
                assert asked[j][want.index(i)][0] == lp
        if itl[j][1] in [e[1] for e in top[j]]:
            assert itl[j][0] == next(e[0] for e in top[j] if e[1] == itl[j][1])
    assert asked[1][0][0] == pytest.approx(itl[1][0])  # the reference's first token, asked by id
    # the same request as text: the same tokens, the same numbers (noise=launch: repeats are verbatim)
    r2 = post(s.url, "/generate", {**{k: v for k, v in body.items() if k != "input_ids"}, "text": text})
    assert r2["meta_info"]["input_token_logprobs"] == itl
    # without texts (the arrays written by numpy, abh_simulator.jsonfmt): the very same numbers and ids
    r3 = post(s.url, "/generate", {**body, "return_text_in_logprobs": False})["meta_info"]
    assert [e[:2] for e in r3["input_token_logprobs"]] == [e[:2] for e in itl]
    for key in ("input_top_logprobs", "input_token_ids_logprobs"):
        assert r3[key][0] is None and all(x[2] is None for e in r3[key][1:] for x in e)
        assert [[x[:2] for x in e] for e in r3[key][1:]] == [[x[:2] for x in e] for e in m[key][1:]], key
    # the default start (-1) is the last input token only; a start past the input is a 400
    d = post(s.url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 0},
                                  "return_logprob": True})["meta_info"]
    assert d["input_token_logprobs"] == [[None, ids[-1], None]] and "input_top_logprobs" not in d
    bad = requests.post(s.url + "/generate", json={"input_ids": ids, "return_logprob": True,
                                                   "sampling_params": {"max_new_tokens": 0},
                                                   "logprob_start_len": len(ids)}, timeout=PATIENCE_S)
    assert bad.status_code == 400 and "logprob_start_len" in bad.text
    assert requests.post(s.url + "/generate", json={"text": "a", "input_ids": [5]}, timeout=10).status_code == 400
    assert requests.post(s.url + "/generate", json={"input_ids": [V + 5]}, timeout=10).status_code == 400


def test_generation_logprobs_cover_every_generated_token(sim_server, tok):
    s = sim_server("--noise", "launch")
    r = post(s.url, "/generate", {"text": prompt(6), "return_logprob": True, "top_logprobs_num": 2,
                                  "sampling_params": {"max_new_tokens": 512, "stop": ["Question"]}})
    m = r["meta_info"]
    out = m["output_token_logprobs"]
    assert len(out) == m["completion_tokens"] == len(m["output_top_logprobs"]) > 5
    gen_text = tok.decode([e[1] for e in out])
    assert gen_text.startswith(r["text"]) and gen_text[len(r["text"]):].strip() == "Question"  # stop tokens count
    assert all(e[0] is not None for e in out)
    e = post(s.url, "/generate", {"text": prompt(6), "return_logprob": True,
                                  "sampling_params": {"max_new_tokens": 4096}})["meta_info"]
    assert e["output_token_logprobs"][-1][1] == EOS_ID and e["finish_reason"] == {"type": "stop", "matched": EOS_ID}
    # batch: a list of prompts gets a list back, per-prompt options allowed
    b = post(s.url, "/generate", {"text": [prompt(1), prompt(2)], "return_logprob": [True, False],
                                  "sampling_params": {"max_new_tokens": 0}})
    assert isinstance(b, list) and "input_token_logprobs" in b[0]["meta_info"]
    assert "input_token_logprobs" not in b[1]["meta_info"]


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_logit_shift_and_noise_on_the_wire_without_touching_accuracy(sim_server, tok):
    common = ["--flip-rate", "0.05", "--run-seed", "3", "--accuracy", "0.8"]
    a = sim_server(*common, "--build", "baseline", "--logit-shift", "0.3", "--logprob-noise", "0")
    a_same = sim_server(*common, "--build", "baseline", "--logit-shift", "0.3", "--logprob-noise", "0")
    b = sim_server(*common, "--build", "fix", "--logit-shift", "0.3", "--logprob-noise", "0")
    plain = sim_server(*common, "--build", "fix")
    sp = {"max_new_tokens": 512, "stop": ["Question"], "temperature": 0}
    texts = {k: [post(x.url, "/generate", {"text": prompt(i), "sampling_params": sp})["text"] for i in range(8)]
             for k, x in (("a", a), ("b", b), ("plain", plain))}
    assert texts["a"] == texts["b"] == texts["plain"]  # the build's logits never change the answers
    ids = tok.encode(prompt(7) + " " + ROWS[7]["answer"])
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
            "logprob_start_len": 10}

    def lps(x) -> list:
        return [e[0] for e in post(x.url, "/generate", body)["meta_info"]["input_token_logprobs"]]

    assert lps(a) == lps(a_same) != lps(b)  # same build: identical; other build: moved
    launch = sim_server("--noise", "launch", "--logprob-noise", "0.05")
    per_pass = sim_server("--noise", "pass", "--logprob-noise", "0.05")
    assert lps(launch) == lps(launch)  # repeated scoring on one launch is verbatim
    assert lps(per_pass) != lps(per_pass)  # ... or re-drawn on every pass


# -------------------------------------------------------------------------------- OpenAI (vLLM)
def test_openai_echo_logprobs_score_the_prompt(sim_server, tok):
    s = sim_server("--noise", "launch")
    text = prompt(8) + " " + ROWS[8]["answer"]
    ids = tok.encode(text)
    o = post(s.url, "/v1/completions", {"model": "m", "prompt": text, "max_tokens": 0, "echo": True,
                                        "logprobs": 3, "prompt_logprobs": 2, "temperature": 0})
    c = o["choices"][0]
    lp = c["logprobs"]
    assert c["text"] == text and c["finish_reason"] == "length" and o["usage"]["completion_tokens"] == 0
    assert "".join(lp["tokens"]) == text and len(lp["tokens"]) == len(ids) == o["usage"]["prompt_tokens"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:j]) for j in range(len(ids))]
    for j in range(1, len(ids)):
        d = lp["top_logprobs"][j]
        assert lp["tokens"][j] in d and 3 <= len(d) <= 4
        assert d[lp["tokens"][j]] == pytest.approx(lp["token_logprobs"][j])
    # the same numbers as SGLang's /generate on the same ids
    g = post(s.url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": 0},
                                  "return_logprob": True, "logprob_start_len": 0})["meta_info"]
    assert [e[0] for e in g["input_token_logprobs"]] == lp["token_logprobs"]
    pl = c["prompt_logprobs"]
    assert len(pl) == len(ids) and pl[0] is None
    entry = pl[5][str(ids[5])]
    assert entry["logprob"] == pytest.approx(lp["token_logprobs"][5]) and entry["decoded_token"] == lp["tokens"][5]
    assert entry["rank"] >= 1 and all(set(v) == {"logprob", "rank", "decoded_token"} for v in pl[5].values())
    # max_tokens 1: the prompt plus one generated token; token ids work as the prompt too
    one = post(s.url, "/v1/completions", {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 0})
    assert len(one["choices"][0]["logprobs"]["tokens"]) == len(ids) + 1
    assert one["choices"][0]["text"].startswith(text)
    plain = post(s.url, "/v1/completions", {"prompt": prompt(8), "max_tokens": 64, "logprobs": 1})["choices"][0]
    assert "".join(plain["logprobs"]["tokens"]) == plain["text"] and plain["logprobs"]["text_offset"][0] == 0
    assert requests.post(s.url + "/v1/completions", json={"prompt": "x", "logprobs": 21}, timeout=10).status_code == 400


# -------------------------------------------------------------------------------- routed experts
@pytest.mark.slow
def test_routed_experts_on_buggy_and_fixed_builds(sim_server, tok):
    fixed = sim_server("--build", "fix", "--routing-noise", "0")  # no near-tie flips: one router, one lost slot
    buggy = sim_server("--build", "base", "--routed-experts-bug", "--routing-noise", "0")
    off = sim_server("--no-enable-return-routed-experts")
    ids = tok.encode(prompt(9))
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 8}, "return_routed_experts": True}
    shapes = {}
    for name, s in (("fixed", fixed), ("buggy", buggy)):
        m = post(s.url, "/generate", body)["meta_info"]
        arr = experts.decode(m["routed_experts"], num_layers=4, topk=6)
        seqlen = m["prompt_tokens"] + m["completion_tokens"]
        assert arr.shape == (seqlen - 1, 4, 6) and arr.dtype == np.int32
        shapes[name] = arr
    f, b = shapes["fixed"], shapes["buggy"]
    assert (f >= 0).all() and (f < 256).all()
    assert all(len(set(row)) == 6 for row in f.reshape(-1, 6).tolist())  # 6 distinct routed experts
    assert (b[:, :, -1] == 256).all() and (b[:, :, :5] < 256).all()  # 5 routed + the gate's shared marker
    assert (b[:, :, :5] == f[:, :, :5]).all()  # same router, one slot lost
    raw = json.loads(requests.post(buggy.url + "/generate", json={**body, "routed_experts_start_len": 10},
                                   timeout=PATIENCE_S).text)["meta_info"]["routed_experts"]
    assert experts.decode(raw, 4, 6).shape[0] == b.shape[0] - 10
    assert "routed_experts" not in post(off.url, "/generate", body)["meta_info"]
    assert "routed_experts" not in post(fixed.url, "/generate", {**body, "return_routed_experts": False})["meta_info"]
    o = post(buggy.url, "/v1/completions", {"prompt": prompt(9), "max_tokens": 4, "return_routed_experts": True})
    assert (experts.decode(o["sglext"]["routed_experts"], 4, 6)[:, :, -1] == 256).all()
    bad = requests.post(fixed.url + "/generate", json={**body, "routed_experts_start_len": len(ids) + 1}, timeout=10)
    assert bad.status_code == 400


def test_the_in_place_hashes_draw_the_very_same_numbers():
    """mix_np, uniform and normal computed in place give the plain formulas' values bit for bit (every simulated
    logprob depends on them), and leave their input unchanged."""
    from abh_simulator.hashing import mix_np, normal, uniform

    def mix_ref(x):
        with np.errstate(over="ignore"):
            x = x ^ (x >> np.uint64(30))
            x = x * np.uint64(0xBF58476D1CE4E5B9)
            x = x ^ (x >> np.uint64(27))
            x = x * np.uint64(0x94D049BB133111EB)
            return x ^ (x >> np.uint64(31))

    def uniform_ref(k):
        return ((mix_ref(k) >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)

    keys = np.random.default_rng(11).integers(0, 2 ** 63, (300, 7), dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    keys[0, :3] = [0, 1, 2 ** 64 - 1]
    before = keys.copy()
    assert np.array_equal(mix_np(keys), mix_ref(keys)) and np.array_equal(keys, before)
    assert uniform(keys).tobytes() == uniform_ref(keys).tobytes()
    u1, u2 = uniform_ref(keys ^ np.uint64(0x5851F42D4C957F2D)), uniform_ref(keys ^ np.uint64(0x14057B7EF767814F))
    assert normal(keys).tobytes() == (np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)).tobytes()
    assert np.array_equal(keys, before)


def test_best_columns_and_duplicates_are_those_of_a_stable_sort():
    """The top-k picked by successive maxima and the duplicates found by one sort are exactly what stable argsorts
    give: ties by column, dropped candidates (-inf) never before a kept one, a short row sorted."""
    from abh_simulator.logprobs import _best, _duplicates

    rng = np.random.default_rng(5)
    lp = np.round(rng.normal(-3, 1, (400, 48)), 1)  # coarse: many ties
    lp[rng.random((400, 48)) < 0.05] = -np.inf
    lp[:3, 2:] = -np.inf  # rows with fewer than k finite values
    for k in (1, 5, 8, 20, 48):
        assert np.array_equal(_best(lp, k), np.argsort(-lp, axis=1, kind="stable")[:, :k]), k

    cand = rng.integers(3, 60, (400, 48))  # a small vocabulary: most rows hold duplicates
    cand[:50] = np.arange(3, 51)  # rows without any
    order = np.argsort(cand, axis=1, kind="stable")
    srt = np.take_along_axis(cand, order, axis=1)
    ref = np.zeros(cand.shape, dtype=bool)
    np.put_along_axis(ref, order, np.concatenate([np.zeros((400, 1), bool), srt[:, 1:] == srt[:, :-1]], axis=1), 1)
    assert np.array_equal(_duplicates(cand), ref)


def test_asked_ids_read_the_first_equal_candidate_or_the_tail():
    """An asked id that is a candidate has its logprob (the kept one of equal candidates), else the tail's: in a tiny
    vocabulary, where candidates repeat, as by the token's own score and its top-k."""
    m = NextTokenModel(seed=3, vocab_size=12, logprob_noise=0.1)
    ids = [5, 7, 3, 9, 4, 11, 6, 8]
    want = list(range(12))
    sc = m.score(ids, range(1, len(ids)), top_k=4, requested=want)
    req = np.asarray(sc.requested)
    for row, p in enumerate(sc.positions):
        assert req[row, ids[p]] == sc.token_logprobs[row]
        for i, v in sc.top[row]:
            assert req[row, i] == v
        tail = [req[row, i] for i in want if i not in {j for j, _ in sc.top[row]} and i != ids[p]]
        assert len(set(tail)) >= 1


def test_scoring_many_sequences_at_once_gives_each_ones_scores():
    """score_many: the very values of scoring each sequence alone (tops, asked ids, ranks), whatever each asks (its
    own top-k, asked ids, pass), and an empty one in between."""
    from abh_simulator.logprobs import Ask

    m = NextTokenModel(seed=1, vocab_size=500, logit_shift=0.2, logprob_noise=0.05, noise="mixed", build="x")
    rng = np.random.default_rng(2)
    asks = [Ask([int(x) for x in rng.integers(3, 500, n)], range(1 + n // 3, n), k, req, p)
            for n, k, req, p in ((40, 5, (), 0), (2, 0, (7, 9), 3), (30, 20, (5, 5, 400), 1), (1, 5, (), 0),
                                 (60, 1, (11,), 2))]
    asks.insert(3, Ask([4, 5], [], 5))
    many = m.score_many(asks)
    for a, got in zip(asks, many, strict=True):
        alone = m.score(a.ids, a.positions, a.top_k, a.requested, a.pass_index)
        assert got == alone
        assert (got.top_logprobs is None) == (alone.top_logprobs is None)
        if got.top_logprobs is not None:
            assert got.top_logprobs.tobytes() == alone.top_logprobs.tobytes()


def test_a_scoring_batch_answers_as_its_items_one_by_one(tok):
    """A /generate batch that only scores is scored in one pass: each answer the one its item gets alone on a fresh
    launch (pass noise included: each sequence's first pass)."""
    from abh_simulator import server
    from abh_simulator.sim_config import SimConfig
    from abh_simulator.state import SimState

    def answers(bodies):
        h = server.Handlers(SimState(SimConfig(run_seed=4, logprob_noise=0.03, noise="pass")))
        out = []
        for body in bodies:
            got = h._sglang(body, prepared=h._sglang(body, validate_only=True))
            out += got if isinstance(got, list) else [got]
        return [json.loads(server._dumps({k: v for k, v in a["meta_info"].items() if k not in ("id", "e2e_latency")}))
                for a in out]

    rows = ROWS[:6]
    seqs = [tok.encode(f"Question: {r['question']}\nAnswer:") + tok.encode(" " + r["answer"]) for r in rows]
    starts = [len(s) // 2 for s in seqs]
    asked = [[5, 9, int(s[-1])] for s in seqs]
    base = {"sampling_params": {"max_new_tokens": 0}, "return_logprob": True, "top_logprobs_num": 5}
    batch = {**base, "input_ids": seqs, "logprob_start_len": starts, "token_ids_logprob": asked}
    alone = [{**base, "input_ids": s, "logprob_start_len": b, "token_ids_logprob": a}
             for s, b, a in zip(seqs, starts, asked, strict=True)]
    assert answers([batch]) == answers(alone)


def test_context_states_are_the_rolling_hash_whatever_was_hashed_before():
    """The inline rolling hash (and its reuse of the last sequence's prefix) gives mix's fold of the ids."""
    from abh_simulator.hashing import GOLDEN, M64, key_of, mix

    def ref(ids, seed):
        out = [mix(key_of("abh-sim/ctx", seed))]
        for t in ids:
            out.append(mix(out[-1] ^ ((t + GOLDEN) & M64)))
        return out

    rng = np.random.default_rng(9)
    head = [int(x) for x in rng.integers(0, 32000, 50)]
    for n in (0, 1, 30, 80):
        ids = head[:n % 50] + [int(x) for x in rng.integers(0, 2 ** 40, n)]
        assert context_states(ids, 77) == ref(ids, 77)


def test_context_states_of_many_sequences_side_by_side_are_each_ones_own():
    """context_states_many (a request's sequences hashed side by side, as lanes of one int) gives every sequence's
    context_states: sequences sharing a prefix or not, shorter, longer, equal or empty, big ids, whatever the
    cache held before; and the cache it leaves serves the next call right."""
    from abh_simulator import hashing
    from abh_simulator.hashing import context_states_many

    rng = np.random.default_rng(11)
    for trial in range(200):
        base = [int(x) for x in rng.integers(0, 50, int(rng.integers(0, 12)))]
        seqs = [base[:int(rng.integers(0, len(base) + 1))] + [int(x) for x in rng.integers(0, 2 ** 40, int(rng.integers(0, 9)))]
                for _ in range(int(rng.integers(0, 7)))]
        if seqs and trial % 3 == 0:
            seqs += [list(seqs[0]), seqs[0][:max(0, len(seqs[0]) - 2)]]
        for before in (None, base):
            hashing._LAST.clear()
            if before is not None:
                context_states(before, 5)
            got = context_states_many(seqs, 5)
            hashing._LAST.clear()
            assert got == [context_states(s, 5) for s in seqs]
            if before is not None:
                context_states_many(seqs, 5)
                assert context_states(base + [7, 8], 5) == (hashing._LAST.clear() or context_states(base + [7, 8], 5))


def test_scoring_many_sequences_asking_as_many_ids_each_gives_each_ones_scores():
    """Sequences that each ask the same number of ids (a scoring batch's shape: their asked ids looked up at once) and
    ask a different top-k each: every one's scores are those it gets alone."""
    from abh_simulator.logprobs import Ask

    m = NextTokenModel(seed=4, vocab_size=60, logprob_noise=0.05, noise="pass")  # small: duplicates, asked hits
    rng = np.random.default_rng(8)
    asks = [Ask([int(x) for x in rng.integers(3, 60, n)], range(1, n), k, [int(x) for x in rng.integers(0, 60, 6)], p)
            for n, k, p in ((30, 5, 0), (12, 3, 1), (50, 8, 0), (2, 20, 2))]
    for a, got in zip(asks, m.score_many(asks), strict=True):
        alone = m.score(a.ids, a.positions, a.top_k, a.requested, a.pass_index)
        assert got == alone
        assert got.requested_logprobs.tobytes() == alone.requested_logprobs.tobytes()
