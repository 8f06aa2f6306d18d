"""harness.analysis.divergence (the ``divergence`` object of comparison.json) and harness.report.divergence_section, end to
end from scoring passes written with harness.results.token_store and greedy texts in samples.jsonl."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from helpers.docs import divergence_doc as compute_divergence
from scipy.special import log_softmax, rel_entr

from harness.report import divergence_section as R
from harness.results import token_store as S
from harness.results.schema import Divergence, SampleRecord

V, K = 40, 8
REQUIRED = ("verdict", "kld_mean", "kld_mean_aa", "p", "same_top_rate", "same_top_rate_aa",
            "text_identical_rate", "text_identical_rate_aa", "tokens", "kld_percentiles", "kld_percentiles_aa",
            "effect", "effect_ci", "top_questions", "verdict_reason", "rms_dlogprob", "rms_dlogprob_aa")


class World:
    def __init__(self, seed: int, questions: int = 60):
        rng = np.random.default_rng(seed)
        self.lens = rng.integers(5, 30, questions)
        self.questions = list(range(100, 100 + questions))
        n = int(self.lens.sum())
        self.offsets = np.concatenate([[0], np.cumsum(self.lens)])
        self.base = rng.normal(0, 1.5, (n, V))
        self.base[np.arange(n), rng.integers(0, V, n)] += rng.uniform(1, 6, n)
        self.ref = self.base.argmax(axis=1)
        self.build = rng.standard_normal((n, V))

    def tokens(self, i: int) -> np.ndarray:
        return self.ref[self.offsets[i]:self.offsets[i + 1]]

    def text(self, i: int, change_at: int | None = None) -> str:
        toks = [f"t{t} " for t in self.tokens(i)]
        if change_at is not None:
            toks[change_at] = "zz "
        return "".join(toks)

    def logprobs(self, rng: np.random.Generator, shift: float = 0.0, noise: float = 0.02) -> np.ndarray:
        return log_softmax(self.base + shift * self.build + noise * rng.standard_normal(self.base.shape), axis=1)


def topk(lp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ids = np.argsort(-lp, axis=1)[:, :K]
    return ids, np.take_along_axis(lp, ids, axis=1)


def write_pass(root: Path, w: World, lp: np.ndarray, *, offsets: bool = True, ref_lp: np.ndarray | None = None,
               skip: tuple[int, ...] = (), bad_tokens: tuple[int, ...] = ()) -> None:
    ids, lps = topk(lp)
    ref_ids = topk(ref_lp)[0] if ref_lp is not None else None
    with S.ScoresWriter(root, top_k=K, meta={"engine": "test", "wall_s": 1.5}) as sw:
        for i, q in enumerate(w.questions):
            if i in skip:
                sw.record_error(q, "HTTP 500")
                continue
            r = slice(w.offsets[i], w.offsets[i + 1])
            tok = w.tokens(i).copy()
            if i in bad_tokens:
                tok[0] = (tok[0] + 1) % V
            lens = [len(f"t{t} ") for t in w.tokens(i)]
            sw.add(q, tok, lp[r][np.arange(tok.size), w.tokens(i)], ids[r], lps[r],
                   ref_top_logprobs=None if ref_ids is None else np.take_along_axis(lp[r], ref_ids[r], axis=1),
                   text_offsets=np.concatenate([[0], np.cumsum(lens)[:-1]]) if offsets else None)


def write_samples(root: Path, w: World, changes: dict[int, int]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with (root / "samples.jsonl").open("w") as f:
        for i, q in enumerate(w.questions):
            rec = SampleRecord(index=q, prompt_sha256="x", output=w.text(i, changes.get(i)), pred=None, label=0,
                               correct=False, invalid=False, finish_reason="stop", prompt_tokens=1,
                               completion_tokens=int(w.lens[i]), latency_s=0.1, attempts=1)
            f.write(json.dumps(asdict(rec)) + "\n")


@pytest.fixture
def world() -> World:
    return World(1)


def three_passes(tmp_path: Path, w: World, shift: float, *, b_changes: dict[int, int] | None = None,
                 **b_kw: object) -> tuple[Path, Path, Path]:
    rng = np.random.default_rng(2)
    ref, ab, aa = tmp_path / "a", tmp_path / "b", tmp_path / "aa"
    lp_a = w.logprobs(rng)
    write_pass(ref, w, lp_a)
    write_pass(ab, w, w.logprobs(rng, shift), **b_kw)
    write_pass(aa, w, w.logprobs(rng))
    write_samples(ref, w, {})
    write_samples(ab, w, b_changes if b_changes is not None else {3: 2, 7: 0, 11: 4})
    write_samples(aa, w, {5: 1})
    return ref, ab, aa


# ------------------------------------------------------------------------------ the divergence object
def test_shifted_b_diverges_with_every_contract_key(tmp_path, world):
    ref, ab, aa = three_passes(tmp_path, world, 0.5)
    d = compute_divergence(ref, ab, aa, n_resamples=999, top_n=len(world.questions))
    for key in REQUIRED:
        assert key in d, key
    json.dumps(d, allow_nan=False)
    assert d["verdict"] == "diverged" and d["p"] == pytest.approx(1 / 1000) and d["p_at_floor"]
    assert d["kld_mean"] > 10 * d["kld_mean_aa"] > 0
    assert d["effect"] == pytest.approx(d["kld_mean"] - d["kld_mean_aa"], rel=1e-9)  # token-weighted
    assert d["effect_ci"][0] > 0 and d["same_top_rate"] < d["same_top_rate_aa"] <= 1
    assert d["rms_dlogprob"] > d["rms_dlogprob_aa"]
    assert d["tokens"] == int(world.lens.sum()) and d["questions"] == len(world.questions)
    assert d["text_identical_rate"] == pytest.approx(57 / 60) and d["text_identical_rate_aa"] == pytest.approx(59 / 60)
    assert list(d["kld_percentiles"]) == ["99.9", "99", "95", "90", "50"]
    assert d["kld_percentiles"]["99.9"] >= d["kld_percentiles"]["50"]
    assert d["scoring"]["ab"]["wall_s"] == 1.5
    by_q = {t["question"]: t for t in d["top_questions"]}
    for i, j in {3: 2, 7: 0, 11: 4}.items():
        t = by_q[world.questions[i]]
        assert t["text_identical"] is False and t["first_divergence"] == j
        assert t["first_divergence_source"] == "text_offset"
        start, end = t["first_divergence_span"]
        assert world.text(i)[start:end] == f"t{world.tokens(i)[j]} "
    assert by_q[world.questions[5]]["text_identical_aa"] is False
    assert by_q[world.questions[5]]["first_divergence_aa"] == 1
    assert d["first_divergence_median"] == 2
    ds = [t["d"] for t in d["top_questions"]]
    assert ds == sorted(ds, reverse=True)
    h = d["kld_histogram"]
    assert sum(h["token_ab"]["counts"]) + h["token_ab"]["zeros"] == d["tokens"]
    assert sum(h["question_aa"]["counts"]) + h["question_aa"]["zeros"] == d["questions"]


def test_identical_b_and_floor_are_indistinguishable(tmp_path, world):
    rng = np.random.default_rng(3)
    lp_a, lp_x = world.logprobs(rng), world.logprobs(rng)
    for name, lp in (("a", lp_a), ("b", lp_x), ("aa", lp_x)):
        write_pass(tmp_path / name, world, lp)
    d = compute_divergence(tmp_path / "a", tmp_path / "b", tmp_path / "aa", n_resamples=999,
                           texts_ref={}, texts_b={}, texts_aa={})
    assert d["verdict"] == "indistinguishable" and d["p"] == 1.0 and d["effect"] == 0.0
    assert d["kld_mean"] == d["kld_mean_aa"] > 0
    assert d["text_identical_rate"] is None and d["text_questions"] == 0


def test_deterministic_identical_servers_give_zero(tmp_path, world):
    lp = world.logprobs(np.random.default_rng(4))
    for name in ("a", "b", "aa"):
        write_pass(tmp_path / name, world, lp)
    d = compute_divergence(tmp_path / "a", tmp_path / "b", tmp_path / "aa", n_resamples=199)
    assert d["kld_mean"] == 0.0 and d["kld_mean_aa"] == 0.0 and d["same_top_rate"] == 1.0
    assert d["verdict"] == "indistinguishable" and d["kld_histogram"]["token_ab"]["zeros"] == d["tokens"]


def test_token_ids_logprob_scores_are_exact_lumped_kl(tmp_path, world):
    """B scored on A's top-k ids: kld_mean is the mean over tokens of rel_entr on [A's top-k, tail]."""
    rng = np.random.default_rng(5)
    lp_a, lp_b = world.logprobs(rng), world.logprobs(rng, 0.4)
    write_pass(tmp_path / "a", world, lp_a)
    write_pass(tmp_path / "b", world, lp_b, ref_lp=lp_a)
    write_pass(tmp_path / "aa", world, world.logprobs(rng))
    d = compute_divergence(tmp_path / "a", tmp_path / "b", tmp_path / "aa", n_resamples=199)
    ids, _ = topk(lp_a)
    pa, pb = np.exp(lp_a), np.exp(lp_b)
    want = []
    for t in range(lp_a.shape[0]):
        p = np.append(pa[t, ids[t]], 1 - pa[t, ids[t]].sum())
        q = np.append(pb[t, ids[t]], 1 - pb[t, ids[t]].sum())
        want.append(rel_entr(p, q).sum())
    assert d["kld_mean"] == pytest.approx(np.mean(want), rel=1e-4)   # float32 storage


def test_missing_and_mismatched_questions_are_dropped_and_counted(tmp_path, world):
    rng = np.random.default_rng(6)
    write_pass(tmp_path / "a", world, world.logprobs(rng))
    write_pass(tmp_path / "b", world, world.logprobs(rng, 0.3), skip=(0, 1), bad_tokens=(2,))
    write_pass(tmp_path / "aa", world, world.logprobs(rng), skip=(1, 4))
    d = compute_divergence(tmp_path / "a", tmp_path / "b", tmp_path / "aa", n_resamples=199)
    assert d["questions_dropped"] == {"missing_ab": 2, "token_mismatch_ab": 1, "missing_aa": 2,
                                      "token_mismatch_aa": 0}
    assert d["questions"] == 60 - 4 and d["questions_total"] == 60
    assert d["tokens"] == int(world.lens.sum() - world.lens[[0, 1, 2, 4]].sum())
    assert d["scoring"]["ab"]["errors"] == 2


def test_other_tokenizer_is_not_measured(tmp_path, world):
    rng = np.random.default_rng(7)
    write_pass(tmp_path / "a", world, world.logprobs(rng))
    write_pass(tmp_path / "b", world, world.logprobs(rng), bad_tokens=tuple(range(60)))
    write_pass(tmp_path / "aa", world, world.logprobs(rng))
    d = compute_divergence(tmp_path / "a", tmp_path / "b", tmp_path / "aa")
    assert d["verdict"] == "not_measured" and "tokenizer" in d["verdict_reason"] and d["kld_mean"] is None


def test_not_measured_never_a_silent_zero(tmp_path, world):
    ref, ab, aa = three_passes(tmp_path, world, 0.3)
    S.write_not_measured(ab, "llama.cpp server started without --logits_all: no prompt logprobs")
    d = compute_divergence(ref, ab, aa)
    assert d["verdict"] == "not_measured" and "logits_all" in d["verdict_reason"]
    assert d["kld_mean"] is None and d["p"] is None and d["tokens"] == 0
    assert d["text_identical_rate"] == pytest.approx(57 / 60)      # the texts are still compared
    json.dumps(d, allow_nan=False)
    d2 = compute_divergence(ref, None, aa)
    assert d2["verdict"] == "not_measured" and "B was not scored" in d2["verdict_reason"]
    d3 = compute_divergence(tmp_path / "nothing", ab, aa)
    assert d3["verdict"] == "not_measured" and "reference pass" in d3["verdict_reason"]


def test_no_floor_reports_ab_measures_but_no_verdict(tmp_path, world):
    ref, ab, _ = three_passes(tmp_path, world, 0.3)
    d = compute_divergence(ref, ab, None)
    assert d["verdict"] == "not_measured" and "A/A" in d["verdict_reason"]
    assert d["kld_mean"] > 0 and d["kld_mean_aa"] is None and d["p"] is None
    assert d["top_questions"][0]["d"] is None


def test_first_divergence_from_argmax_without_offsets(tmp_path, world):
    rng = np.random.default_rng(8)
    lp_a = world.logprobs(rng)
    write_pass(tmp_path / "a", world, lp_a, offsets=False)
    lp_b = lp_a.copy()
    i, j = 3, 2       # B prefers another token at position j of question i
    row = world.offsets[i] + j
    lp_b[row] = log_softmax(np.where(np.arange(V) == (world.ref[row] + 1) % V, 50.0, 0.0))
    write_pass(tmp_path / "b", world, lp_b)
    write_pass(tmp_path / "aa", world, lp_a)
    write_samples(tmp_path / "a", world, {})
    write_samples(tmp_path / "b", world, {i: j})
    write_samples(tmp_path / "aa", world, {})
    d = compute_divergence(tmp_path / "a", tmp_path / "b", tmp_path / "aa", n_resamples=199, top_n=1)
    t = d["top_questions"][0]
    assert t["question"] == world.questions[i] and t["first_divergence"] == j
    assert t["first_divergence_source"] == "argmax" and t["first_divergence_span"] is None


# ------------------------------------------------------------------------------ report pieces
@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_report_section_words_plot_and_marked_texts(tmp_path, world):
    ref, ab, aa = three_passes(tmp_path, world, 0.5)
    d = compute_divergence(ref, ab, aa, n_resamples=999, top_n=60)
    div = Divergence.from_doc(d)
    s = R.section(div)
    assert s["label"] == "DIVERGED"
    assert s["sentence"].startswith(f"outputs differ beyond relaunch noise: KLD {R.kld(d['kld_mean'])} vs "
                                    f"{R.kld(d['kld_mean_aa'])} nats/token (p < 0.001")
    assert s["svg"].startswith("<svg") and "</svg>" in s["svg"]
    assert [r["label"] for r in s["percentiles"]] == ["mean", "99.9 %", "99 %", "95 %", "90 %", "median", "max"]
    row = next(r for r in s["rows"] if r["question"] == world.questions[3])
    tok = f"t{world.tokens(3)[2]} "
    assert row["a"]["mark"] == tok and row["a"]["before"] == "".join(f"t{t} " for t in world.tokens(3)[:2])
    assert row["b"]["mark"] == "zz" and row["a"]["before"] == row["b"]["before"]
    assert any("same top token" in f for f in s["facts"])
    assert R.terminal_line(div).startswith("divergence: DIVERGED — KLD ")


def test_words_for_each_verdict_and_kld_formatting():
    assert R.kld(0.021) == "0.021" and R.kld(0.0003) == "0.0003" and R.kld(0) == "0"
    assert R.kld(2.1e-6) == "2.1e-6" and R.kld(None) == "n/a" and R.kld(0.1234) == "0.123"
    # just below 1e-4 ":.2g" drops the exponent (the demo's report crashed on a per-question d of -9.99e-5)
    assert R.kld(9.99e-5) == "1e-4" and R.kld(-9.99e-5) == "-1e-4" and R.kld(-1.2e-7) == "-1.2e-7"
    ind = Divergence(verdict="indistinguishable", verdict_reason="", kld_mean=0.0003, kld_mean_aa=0.0003, p=0.4,
                     p_floor=1e-4, effect_mde=2e-5)
    assert R.sentence(ind) == ("outputs within relaunch noise: KLD 0.0003 vs 0.0003 nats/token "
                               "(p = 0.4); this run could detect about 2e-5 nats/token above the floor")
    nm = Divergence(verdict="not_measured", verdict_reason="arm B was not scored: no logprobs")
    assert R.sentence(nm) == "outputs not measured: arm B was not scored: no logprobs"
    assert R.section(nm)["svg"] is None and R.section(None)["label"] == "NOT MEASURED"
    assert R.split_at("abc def", 4, None) == {"before": "abc ", "mark": "def", "after": ""}


# ------------------------------------------------------------------------------ over launches
def launch_passes(tmp_path: Path, w: World, shift: float, scales: tuple[float, ...], m_b: int,
                  scales_b: tuple[float, ...] | None = None) -> tuple[Path, list[Path], list[Path]]:
    """The reference pass and one pass per further launch of A (noise scale ``scales``) and of B (``m_b``
    launches), each recording its launch id."""
    rng = np.random.default_rng(3)

    def one(root: Path, lp: np.ndarray, launch: str) -> Path:
        write_pass(root, w, lp)
        meta = json.loads((root / S.SCORES_META).read_text())
        (root / S.SCORES_META).write_text(json.dumps({**meta, "launch": launch}))
        return root

    ref = one(tmp_path / "ref", w.logprobs(rng), "a-1")
    a = [one(tmp_path / f"a{j}", w.logprobs(rng, noise=0.02 * s), f"a-{j + 2}") for j, s in enumerate(scales)]
    sb = scales_b or (1.0,) * m_b
    b = [one(tmp_path / f"b{j}", w.logprobs(rng, shift, noise=0.02 * s), f"b-{j + 1}") for j, s in enumerate(sb)]
    return ref, a, b


def test_the_launch_level_test_decides_with_three_or_more_launches(tmp_path, world):
    """The seed design's passes (floor + 3 more A launches, 3 B launches): the verdict is the launch-level test
    (kld_launches), the per-question test a diagnostic; one pass per launch; a noise scale that differs by launch
    does not make the verdict diverge when B is A."""
    from harness.stats.kld_launches import launch_divergence_test

    ref, a, b = launch_passes(tmp_path / "null", world, 0.0, (1.0, 1.6, 0.7, 1.2), 3, (1.7, 0.8, 1.1))
    d = compute_divergence(ref, b[0], a[0], launches_a=a[1:], launches_b=b[1:], n_resamples=199)
    lt = d["launch_test"]
    assert (lt["launches_a"], lt["launches_b"]) == (4, 3) and d["test"] == lt["method"] and d["p"] == lt["p"]
    assert lt["dirs_a"] == [str(x) for x in a] and lt["dirs_b"] == [str(x) for x in b]
    assert d["per_question"]["test"].startswith("one-sided sign-flip") and "qualification" not in d
    # the same test on the per-launch KLDs it reports
    assert lt["ratio"] == pytest.approx(np.exp(np.mean(np.log(lt["kld_launch_b"])) - np.mean(np.log(lt["kld_launch_a"]))))
    assert lt["arrangements"] == 35 and lt["df"] == 5 and lt["ratio_mde"] > 1
    # B's first launch is noisier than the floor's: the per-question test (one floor, one B pass) sees it as
    # divergence; the launch-level test measures the noise scale's variation across launches
    assert d["per_question"]["p"] < 0.05 and d["verdict"] == "indistinguishable"
    assert "not above A's launches, B's 3 launch(es)" in d["verdict_reason"]
    div = Divergence.from_doc(d)
    assert "B's 3 launch(es)" in R.sentence(div) and "launch-level test: B's 3 launch(es)" in R.terminal_line(div)
    assert any(f.startswith("launch-level test (the verdict's)") for f in R.facts(div))
    assert any("(diagnostic)" in f for f in R.facts(div))
    # a real build change shows across launches too
    ref, a, b = launch_passes(tmp_path / "shift", world, 0.5, (1.0, 1.0, 1.0, 1.0), 3)
    d = compute_divergence(ref, b[0], a[0], launches_a=a[1:], launches_b=b[1:], n_resamples=199)
    assert d["verdict"] == "diverged" and d["launch_test"]["ratio"] > 10
    # the verdict is kld_launches' test on the per-launch KLDs; the per-token measures stay the first B pass's
    assert d["launch_test"]["kld_launch_b"][0] == pytest.approx(d["kld_mean"])   # token-weighted, like kld_mean
    assert launch_divergence_test(np.asarray(d["launch_test"]["kld_launch_a"])[:, None],
                                  np.asarray(d["launch_test"]["kld_launch_b"])[:, None]).p == pytest.approx(d["p"])


def test_one_a_a_launch_and_one_b_launch_say_they_assume_a_constant_noise_scale(tmp_path, world):
    ref, ab, aa = three_passes(tmp_path, world, 0.0)
    d = compute_divergence(ref, ab, aa, n_resamples=199)
    assert "launch_test" not in d and d["test"] == d["per_question"]["test"] and d["p"] == d["per_question"]["p"]
    assert d["qualification"].startswith("assumes the noise scale is the same on every launch")
    assert d["verdict_reason"].endswith(d["qualification"])
    assert d["qualification"] in R.sentence(Divergence.from_doc(d))


def test_a_launch_scored_twice_counts_once_and_divergence_of_dirs_takes_every_pass(tmp_path, world):
    from helpers.docs import divergence_of_dirs_doc

    ref, a, b = launch_passes(tmp_path, world, 0.0, (1.0, 1.0), 2)
    twin = tmp_path / "twin"
    write_pass(twin, world, world.logprobs(np.random.default_rng(9)))
    meta = json.loads((twin / S.SCORES_META).read_text())
    (twin / S.SCORES_META).write_text(json.dumps({**meta, "launch": "a-2"}))   # a[0]'s launch again
    d = compute_divergence(ref, b[0], a[0], launches_a=[twin, *a[1:]], launches_b=b[1:], n_resamples=199)
    assert d["launch_test"]["launches_a"] == 2 and "launch a-2 is scored by" in d["launches_skipped"][str(twin)]
    # abh compare: the first A directory with a pass is the reference, the A/A's the floor, the rest the launches
    via = divergence_of_dirs_doc([ref, a[1]], b, [a[0]], n_resamples=199)
    assert via["launch_test"]["dirs_a"] == [str(a[0]), str(a[1])] and via["launch_test"]["launches_b"] == 2
    assert via["p"] == d["p"]
