"""The divergence streamed block by block (harness.results.score_blocks) gives the whole-array result to the last
digit, reads every question of a pass exactly once, and holds about a row group of a nearly ordered pass."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_softmax

from harness.analysis.divergence import compute_divergence
from harness.results import token_store as S
from harness.results.score_blocks import PassReader, load_scores, pass_blocks, pass_questions

V, K = 30, 6


def _write(root: Path, lens: np.ndarray, lp: np.ndarray, ref_tok: np.ndarray, order: np.ndarray, *,
           rows_per_group: int, ref_ids: np.ndarray | None = None, drop: tuple[int, ...] = ()) -> None:
    off = np.concatenate([[0], np.cumsum(lens)])
    ids = np.argsort(-lp, axis=1)[:, :K]
    lps = np.take_along_axis(lp, ids, axis=1)
    with S.ScoresWriter(root, top_k=K, meta={"engine": "test", "launch": root.name},
                        row_group_rows=rows_per_group) as w:
        for q in order:
            if q in drop:
                continue
            r = slice(off[q], off[q + 1])
            w.add(int(q), ref_tok[r], lp[r][np.arange(lens[q]), ref_tok[r]], ids[r], lps[r],
                  ref_top_logprobs=None if ref_ids is None else np.take_along_axis(lp[r], ref_ids[r], axis=1),
                  text_offsets=np.arange(lens[q]) * 3)


def _passes(tmp: Path, order: str, questions: int = 120) -> dict[str, Path]:
    rng = np.random.default_rng(7)
    lens = rng.integers(1, 25, questions)
    n = int(lens.sum())
    base = rng.normal(0, 1.5, (n, V))
    ref_tok = base.argmax(axis=1)
    build = rng.standard_normal((n, V))
    ref_lp = log_softmax(base, axis=1)
    ref_ids = np.argsort(-ref_lp, axis=1)[:, :K]
    # answers arrive nearly in order (a window of requests in flight) or in any order
    window = rng.permutation(questions) if order == "random" else \
        np.argsort(np.arange(questions) + rng.uniform(0, 12, questions), kind="stable")
    dirs = {}
    for name, shift, drop in (("a", 0.0, ()), ("b", 0.3, (5,)), ("aa", 0.0, ()), ("aa2", 0.0, (40,)),
                              ("b2", 0.3, ())):
        lp = log_softmax(base + shift * build + 0.05 * rng.standard_normal(base.shape), axis=1)
        dirs[name] = tmp / name
        _write(tmp / name, lens, lp, ref_tok, window, rows_per_group=97,
               ref_ids=None if name == "a" else ref_ids, drop=drop)
    return dirs


@pytest.mark.parametrize("order", ["nearly", "random"])
def test_streamed_equals_whole_arrays(tmp_path: Path, order: str) -> None:
    d = _passes(tmp_path, order)
    texts = {q: "x" for q in range(120)}
    kw = {"texts_ref": texts, "texts_b": texts, "texts_aa": texts, "n_resamples": 999}
    streamed = compute_divergence(d["a"], d["b"], d["aa"], launches_a=[d["aa2"]], launches_b=[d["b2"]],
                                  block_tokens=7, **kw)
    tables = {k: load_scores(v) for k, v in d.items()}
    whole = compute_divergence(tables["a"], tables["b"], tables["aa"], launches_a=[tables["aa2"]],
                               launches_b=[tables["b2"]], block_tokens=10**9, **kw)
    a, b = asdict(streamed), asdict(whole)
    a.pop("dirs"), b.pop("dirs")
    # the passes' names differ (directories vs in-memory tables), not what was computed
    assert sorted(map(str, a.pop("scoring").values())) == sorted(map(str, b.pop("scoring").values()))
    for lt in (a["launch_test"], b["launch_test"]):
        lt.pop("dirs_a"), lt.pop("dirs_b")
    assert streamed.verdict in ("diverged", "indistinguishable")
    assert streamed.questions_dropped == {"missing_ab": 1, "token_mismatch_ab": 0, "missing_aa": 0,
                                          "token_mismatch_aa": 0, "missing_other_launches": 1}
    assert a == b  # every number to the last digit


@pytest.mark.parametrize("order", ["nearly", "random"])
def test_blocks_cover_every_question_once_in_order(tmp_path: Path, order: str) -> None:
    d = _passes(tmp_path, order)
    whole = load_scores(d["b"])
    reader = PassReader(d["b"])
    blocks = list(pass_blocks(reader, block_tokens=50))
    qs = np.concatenate([b.questions for b in blocks])
    assert np.array_equal(qs, whole.questions)  # each once, ascending
    for name in ("token_id", "logprob", "top_ids", "top_logprobs", "ref_top_logprobs", "text_offset"):
        assert np.array_equal(np.concatenate([getattr(b, name) for b in blocks]), getattr(whole, name)), name
    assert all(b.offsets[-1] == b.token_id.size for b in blocks)


def test_nearly_ordered_pass_holds_about_a_row_group(tmp_path: Path) -> None:
    d = _passes(tmp_path, "nearly", questions=400)
    reader = PassReader(d["a"])
    groups = len(reader._order)
    held = []
    for _ in pass_blocks(reader, block_tokens=50):
        held.append(len(reader._buf))
    assert groups > 20
    assert max(held) <= 2  # the rows read but not handed out: never the whole pass


def test_a_few_questions_only(tmp_path: Path) -> None:
    d = _passes(tmp_path, "random")
    whole = load_scores(d["aa"])
    few = pass_questions(d["aa"], [3, 77, 119, 500])
    assert list(few.questions) == [3, 77, 119]
    for q in (3, 77, 119):
        assert np.array_equal(few.top_ids[few.rows(q)], whole.top_ids[whole.rows(q)])
        assert np.array_equal(few.text_offset[few.rows(q)], whole.text_offset[whole.rows(q)])


def test_partings_from_the_parted_rows_only_match_the_whole_passes(tmp_path: Path) -> None:
    from harness.analysis import identity

    d = _passes(tmp_path, "nearly")
    lens = np.random.default_rng(7).integers(1, 25, 120)  # as _passes draws them
    ref = {q: "abc" * int(n) for q, n in enumerate(lens)}

    def parted(every: int, at: int) -> dict[int, str | None]:
        out: dict[int, str | None] = dict(ref)
        for q in range(0, 120, every):
            t = ref[q]
            c = min(3 * at + 1, len(t) - 1)
            out[q] = t[:c] + "Z" + t[c + 1:]
        return out

    b, aa = parted(4, 2), parted(9, 0)
    whole = identity.prove([ref], [b], [aa], ref=load_scores(d["a"]), ab=load_scores(d["b"]),
                           floor=load_scores(d["aa"]))
    few = identity.prove_dirs(["A"], ["B"], ["AA"], (d["a"], d["b"], d["aa"]), texts={"A": ref, "B": b, "AA": aa},
                              partings_only=True)
    assert whole.counts.parted == 30 and whole.counts.unclassified < 30  # tokens were classified
    assert (few.partings, few.partings_aa, few.counts, few.counts_aa) == \
        (whole.partings, whole.partings_aa, whole.counts, whole.counts_aa)
    assert few.floor_logprobs == "not_scored" and whole.floor_logprobs != "not_scored"


def test_a_pass_with_an_empty_row_group_streams(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    d = _passes(tmp_path, "nearly", questions=30)
    path = d["b"] / S.SCORES
    t = pq.read_table(path)
    with pq.ParquetWriter(path, t.schema) as w:  # a writer that flushed an empty row group first
        w.write_table(t.slice(0, 0))
        w.write_table(t, row_group_size=50)
    assert pq.ParquetFile(path).metadata.row_group(0).num_rows == 0
    qs = np.concatenate([b.questions for b in pass_blocks(PassReader(d["b"]), block_tokens=40)])
    assert np.array_equal(qs, load_scores(d["b"]).questions)


def test_the_readers_hold_nothing_when_the_statistics_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the passes are streamed, their readers let go of their rows and files before the tests' resampling
    arrays are made (which otherwise come on top of them at the peak)."""
    import gc

    from harness.stats import kld

    d = _passes(tmp_path, "nearly")
    seen: list[list[tuple[int, bool]]] = []
    test = kld.divergence_test

    def looking(*args, **kwargs):  # type: ignore[no-untyped-def]
        readers = [o for o in gc.get_objects() if isinstance(o, PassReader)]
        seen.append([(len(r._buf), r._pf is None) for r in readers])
        return test(*args, **kwargs)

    monkeypatch.setattr(kld, "divergence_test", looking)
    div = compute_divergence(d["a"], d["b"], d["aa"], launches_a=[d["aa2"]], launches_b=[d["b2"]], n_resamples=99)
    assert div.questions and len(seen) == 1 and len(seen[0]) == 5
    assert all(n == 0 and closed for n, closed in seen[0])


def test_a_row_group_is_read_sorted_by_question(tmp_path: Path) -> None:
    """A row group's rows are sorted by question once when read; each block then takes a prefix of them, a view:
    no copy of the rows kept back is made per block."""
    d = _passes(tmp_path, "random", questions=60)
    reader = PassReader(d["a"])
    for g in range(len(reader._order)):
        part = reader._read_group(reader._order[g])
        assert np.all(np.diff(part["question"]) >= 0)
