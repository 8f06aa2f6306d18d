"""harness.analysis.divergence_cache: a stored divergence object is reused only while every input is as it was (the
passes' scores, their greedy texts, the parameters, abh's code), and reads as a fresh computation would."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_divergence import World, three_passes, write_samples

from harness.analysis import divergence_cache as C
from harness.analysis.divergence import compute_divergence, divergence_of_dirs
from harness.results import token_store as S
from harness.results.score_blocks import load_scores


class Counted:
    """compute_divergence, counting its calls (a reuse does not call it)."""

    def __init__(self) -> None:
        self.calls = 0
        self.__signature__ = __import__("inspect").signature(compute_divergence)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return compute_divergence(*args, **kwargs)


def _stored(tmp_path: Path) -> tuple[tuple[Path, Path, Path], Counted]:
    passes = three_passes(tmp_path, World(1, questions=30), 0.5)
    f = Counted()
    C.cached(f, *passes, [], [], store=True, n_resamples=99)
    assert f.calls == 1 and (passes[0] / C.CACHE).is_file()
    return passes, f


def test_a_stored_result_is_reused_and_equals_a_fresh_one(tmp_path):
    (ref, ab, aa), f = _stored(tmp_path)
    again = C.cached(f, ref, ab, aa, [], [], store=True, n_resamples=99)
    assert f.calls == 1  # reused
    assert again.to_doc() == compute_divergence(ref, ab, aa, n_resamples=99).to_doc()
    # the defaults are part of the key as values: spelling a default out is the same key
    C.cached(f, ref, ab, aa, [], [], store=False, n_resamples=99, seed=0)
    assert f.calls == 1


@pytest.mark.parametrize("change", ["scores", "texts", "scores_json", "parameter", "roles", "code"])
def test_any_changed_input_computes_afresh(tmp_path, monkeypatch, change):
    (ref, ab, aa), f = _stored(tmp_path)
    kwargs = {"n_resamples": 99}
    roles = (ref, ab, aa)
    if change == "scores":  # one logprob of B's pass rewritten
        t = load_scores(ab)
        (ab / S.SCORES).unlink()
        with S.ScoresWriter(ab, top_k=t.top_k, meta={"engine": "test", "wall_s": 1.5}) as w:
            for i, q in enumerate(t.questions):
                r = slice(int(t.offsets[i]), int(t.offsets[i + 1]))
                lp = t.logprob[r].copy()
                if i == 0:
                    lp[0] = np.nextafter(lp[0], np.float32(0))
                w.add(int(q), t.token_id[r], lp, t.top_ids[r], t.top_logprobs[r], None, t.text_offset[r])
    elif change == "texts":  # one greedy text of B changed
        write_samples(ab, World(1, questions=30), {0: 1})
    elif change == "scores_json":
        meta = json.loads((aa / S.SCORES_META).read_text())
        (aa / S.SCORES_META).write_text(json.dumps({**meta, "launch": "another"}))
    elif change == "parameter":
        kwargs["alpha"] = 0.01
    elif change == "roles":  # the same passes, B and the floor swapped
        roles = (ref, aa, ab)
    else:
        monkeypatch.setattr(C, "_code_digest", lambda: "another version of abh")
    got = C.cached(f, *roles, [], [], store=False, **kwargs)
    assert f.calls == 2
    assert got.to_doc() == compute_divergence(*roles, **kwargs).to_doc()


def test_a_moved_run_reuses_the_result_under_its_new_names(tmp_path):
    (ref, ab, aa), f = _stored(tmp_path / "old")
    shutil.copytree(tmp_path / "old", tmp_path / "new")
    new = [tmp_path / "new" / p.name for p in (ref, ab, aa)]
    got = C.cached(f, *new, [], [], store=False, n_resamples=99)
    assert f.calls == 1
    fresh = compute_divergence(*new, n_resamples=99).to_doc()
    assert got.to_doc() == fresh and str(tmp_path / "old") not in json.dumps(got.to_doc())


def test_an_unusable_cache_file_is_ignored_and_compare_writes_nothing(tmp_path):
    (ref, ab, aa), f = _stored(tmp_path)
    (ref / C.CACHE).write_text("{not json")
    C.cached(f, ref, ab, aa, [], [], store=False, n_resamples=99)
    assert f.calls == 2 and (ref / C.CACHE).read_text() == "{not json"  # store=False: never written
    # a link planted at the cache's place is neither read nor written through
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    (ref / C.CACHE).unlink()
    (ref / C.CACHE).symlink_to(target)
    C.cached(f, ref, ab, aa, [], [], store=True, n_resamples=99)
    assert f.calls == 3 and target.read_text() == "{}"
    # divergence_of_dirs (abh compare) writes none
    (ref / C.CACHE).unlink()
    before = sorted(p.name for p in ref.iterdir())
    d = divergence_of_dirs([ref], [ab], [aa], n_resamples=99)
    assert d is not None and sorted(p.name for p in ref.iterdir()) == before


def test_compare_reuses_what_the_run_stored(tmp_path, monkeypatch):
    from harness.analysis import divergence as D

    (ref, ab, aa), f = _stored(tmp_path)
    f.calls = 0
    monkeypatch.setattr(D, "compute_divergence", f)
    d = divergence_of_dirs([ref], [ab], [aa], n_resamples=99)
    assert f.calls == 0 and d is not None and d.to_doc() == compute_divergence(ref, ab, aa, n_resamples=99).to_doc()
