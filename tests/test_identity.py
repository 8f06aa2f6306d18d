"""The no-op proof (harness.analysis.identity): the floor, A vs B with its exact bound, the first diverging token
classified; on hand-built outputs and scoring passes (no simulator)."""

import numpy as np
import pytest
from scipy import stats as sps

from harness.analysis.identity import prove
from harness.results.token_store import PAD_ID, ScoreTable

TEXTS = {0: " 2 + 2 = 4\n#### 4", 1: " She has 3 apples.\n#### 3", 2: " The answer is 10.\n#### 10"}


def _with(q: int, text: str) -> dict[int, str | None]:
    return {**TEXTS, q: text}


def test_identical_on_a_zero_floor_with_the_exact_bound():
    i = prove([TEXTS], [dict(TEXTS)], [dict(TEXTS), dict(TEXTS)])
    assert i.verdict == "identical" and i.questions == 3 and i.differing == 0 and i.floor_passes == 2
    assert i.upper_bound == pytest.approx(sps.beta.ppf(0.95, 1, 3))  # 1 - 0.05 ** (1/3)
    assert "at most 63.16 %" in i.reason and i.floor_logprobs == "not_scored"


def test_differs_lists_every_differing_question_with_where_it_parts():
    b = _with(2, " The answer is 12.\n#### 12")
    i = prove([TEXTS], [b], [dict(TEXTS)])
    assert i.verdict == "differs" and i.differing_questions == [2] and i.differing == 1
    p = i.partings[0]
    assert (p.question, p.char, p.text_a, p.text_b) == (2, len(" The answer is 1"), "10.", "12.")
    assert p.kind is None and i.counts.unclassified == 1 and i.counts_aa.parted == 0
    assert i.upper_bound == pytest.approx(sps.beta.ppf(0.95, 2, 2))


def test_a_floor_that_is_not_zero_is_not_deterministic_never_identical():
    aa = _with(1, " She has 4 apples.\n#### 4")
    i = prove([TEXTS], [dict(TEXTS)], [aa])
    assert i.verdict == "not_deterministic" and i.upper_bound is None
    assert i.floor_difference == "question 1, character 9: A '3' vs A/A '4'"
    assert i.partings_aa[0].question == 1 and i.counts_aa.parted == 1


def test_a_repeat_of_a_counts_for_the_floor_and_none_is_not_measured():
    assert prove([TEXTS, _with(0, " 5")], [dict(TEXTS)]).verdict == "not_deterministic"
    assert prove([TEXTS], [dict(TEXTS)]).verdict == "not_measured"


def test_errored_questions_are_left_out_of_n():
    b = _with(0, None)  # type: ignore[arg-type]
    i = prove([TEXTS], [b], [dict(TEXTS)])
    assert i.verdict == "identical" and i.questions == 2


# ------------------------------------------------------------------ scoring passes
TEXT_A = "ab cd"
TEXT_B = "ab ce"


def _table(questions, rows, offsets_text=True) -> ScoreTable:
    """rows per question: [(token, logprob, [(id, logprob), ...]), ...]."""
    k = max(len(t) for q in rows for _, _, t in q)
    tok, lp, ids, lps, offs, qs, off = [], [], [], [], [], [], [0]
    for q, toks in zip(questions, rows, strict=True):
        for pos, (t, logp, top) in enumerate(toks):
            tok.append(t)
            lp.append(logp)
            ids.append([i for i, _ in top] + [PAD_ID] * (k - len(top)))
            lps.append([v for _, v in top] + [-np.inf] * (k - len(top)))
            offs.append([0, 2, 3, 4][pos])
        qs.append(q)
        off.append(off[-1] + len(toks))
    return ScoreTable(questions=np.array(qs), offsets=np.array(off), position=np.zeros(len(tok), np.int32),
                      token_id=np.array(tok, np.int32), logprob=np.array(lp, np.float32),
                      top_ids=np.array(ids, np.int32), top_logprobs=np.array(lps, np.float32),
                      ref_top_logprobs=None, text_offset=np.array(offs, np.int32) if offsets_text else None)


# "ab" " " "c" "d": A's reference pass; B's argmax at position 3 is "e" (id 9)
REF_NEAR = [[(1, -0.1, [(1, -0.1)]), (2, -0.1, [(2, -0.1)]), (3, -0.1, [(3, -0.1)]),
             (4, -0.6, [(4, -0.6), (9, -0.9)])]]
REF_FAR = [[(1, -0.1, [(1, -0.1)]), (2, -0.1, [(2, -0.1)]), (3, -0.1, [(3, -0.1)]),
            (4, -0.2, [(4, -0.2), (9, -3.0)])]]
REF_OUT = [[(1, -0.1, [(1, -0.1)]), (2, -0.1, [(2, -0.1)]), (3, -0.1, [(3, -0.1)]),
            (4, -0.1, [(4, -0.1), (7, -0.3)])]]  # B's token 9 is not in A's top-2: the gap is a bound (>= 0.2)
REF_ABOVE = [[(1, -0.1, [(1, -0.1)]), (2, -0.1, [(2, -0.1)]), (3, -0.1, [(3, -0.1)]),
              (4, -1.5, [(9, -0.3), (4, -1.5)])]]  # teacher-forced, A ranks B's token above its own greedy one
B_PASS = [[(1, -0.1, [(1, -0.1)]), (2, -0.1, [(2, -0.1)]), (3, -0.1, [(3, -0.1)]),
           (4, -0.9, [(9, -0.5), (4, -0.9)])]]


@pytest.mark.parametrize("ref,kind,gap,bound", [(REF_NEAR, "near_tie", 0.3, False), (REF_FAR, "divergence", 2.8, False),
                                                (REF_OUT, None, 0.2, True), (REF_ABOVE, "divergence", -1.2, False)])
def test_first_diverging_token_is_classified_by_the_reference_logprob_gap(ref, kind, gap, bound):
    i = prove([{0: TEXT_A}], [{0: TEXT_B}], [{0: TEXT_A}], ref=_table([0], ref), ab=_table([0], B_PASS),
              floor=_table([0], ref))
    p = i.partings[0]
    assert i.verdict == "differs" and i.floor_logprobs == "identical" and i.logprobs_ab == "differ"
    assert (p.position, p.token_a, p.token_b, p.kind, p.gap_is_bound) == (3, 4, 9, kind, bound)
    assert p.gap == pytest.approx(gap, abs=1e-6)
    assert (i.counts.near_tie, i.counts.divergence) == (int(kind == "near_tie"), int(kind == "divergence"))


def test_the_position_comes_from_the_argmax_without_text_offsets():
    i = prove([{0: TEXT_A}], [{0: TEXT_B}], [{0: TEXT_A}], ref=_table([0], REF_FAR, False),
              ab=_table([0], B_PASS, False), floor=_table([0], REF_FAR, False))
    assert (i.partings[0].position, i.partings[0].kind) == (3, "divergence")


def test_a_threshold_is_a_setting():
    i = prove([{0: TEXT_A}], [{0: TEXT_B}], [{0: TEXT_A}], ref=_table([0], REF_FAR), ab=_table([0], B_PASS),
              floor=_table([0], REF_FAR), near_tie_nats=3.0)
    assert i.partings[0].kind == "near_tie" and i.near_tie_nats == 3.0


def test_identical_outputs_with_floor_logprobs_that_differ_are_not_deterministic():
    wobble = [[*REF_FAR[0][:3], (4, -0.2000001, [(4, -0.2000001), (9, -3.0)])]]
    i = prove([{0: TEXT_A}], [{0: TEXT_A}], [{0: TEXT_A}], ref=_table([0], REF_FAR), ab=_table([0], REF_FAR),
              floor=_table([0], wobble))
    assert i.verdict == "not_deterministic" and i.floor_logprobs == "differ"
    assert i.floor_difference is not None and i.floor_difference.startswith("logprobs, question 0, position 3")


@pytest.mark.parametrize("verdict,regressed,not_noninferior,any_difference", [
    ("identical", False, False, False), ("differs", False, True, True), ("not_deterministic", False, True, False)])
def test_the_gate_reads_the_proofs_verdicts(verdict, regressed, not_noninferior, any_difference):
    from harness.analysis.gate import gate_fails

    assert gate_fails(verdict, "regressed") is regressed
    assert gate_fails(verdict, "not-noninferior") is not_noninferior
    assert gate_fails(verdict, "any-difference") is any_difference


def test_first_divergences_are_counted_or_the_comparison_says_why(tmp_path, monkeypatch):
    """An ordinary comparison with a measured divergence gets the counts; one that cannot be read keeps its verdict
    and says why in its warnings (the counts sit beside the verdict, never in place of it)."""
    from dataclasses import replace

    from helpers.docs import comparison

    from harness.analysis import identity
    from harness.results.schema import Divergence

    c = replace(comparison(), divergence=Divergence(verdict="indistinguishable", verdict_reason="", reference="a"))
    monkeypatch.setattr(identity, "prove_dirs", lambda *a, **k: prove([{0: "x y"}], [{0: "x z"}], [{0: "x y"}]))
    got = identity.first_divergences(c, ["a"], ["b"], ["aa"], (None, None, None), near_tie_nats=0.25)
    assert got.divergence is not None and got.divergence.partings is not None
    assert (got.divergence.partings.parted, got.divergence.partings.unclassified) == (1, 1)
    assert got.divergence.partings_aa is not None and got.divergence.partings_aa.parted == 0
    assert got.divergence.near_tie_nats == 0.25 and got.warnings == c.warnings

    def unreadable(*a, **k):
        raise ValueError("samples.jsonl: line 3 is not JSON")

    monkeypatch.setattr(identity, "prove_dirs", unreadable)
    bad = identity.first_divergences(c, ["a"], ["b"], ["aa"], (None, None, None))
    assert bad.divergence == c.divergence
    assert bad.warnings[-1] == "first diverging tokens not counted: samples.jsonl: line 3 is not JSON"
    # B's texts as the reference, or no measured divergence: nothing to count
    for div in (replace(c.divergence, reference="b"), Divergence(verdict="not_measured", verdict_reason="off")):
        assert identity.first_divergences(replace(c, divergence=div), ["a"], ["b"], ["aa"], (None, None, None)) \
            == replace(c, divergence=div)
