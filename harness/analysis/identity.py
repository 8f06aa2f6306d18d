"""The no-op proof (``stats.hypothesis=identical``): is arm B's output bit-identical to arm A's, on an engine
whose A/A floor is exactly zero? ``not_deterministic`` when the floor is not zero, else ``identical`` with the
exact upper bound on the per-question difference rate, or ``differs``, each parting classified a near-tie or a
divergence by the reference pass's logprob gap (docs/statistics.md, "The no-op proof")."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from harness.analysis.divergence import PassSource, pass_table
from harness.results.eval_store import load_samples
from harness.results.fileio import StoreError
from harness.results.schema import Comparison, Identity, Parting, PartingCounts
from harness.results.score_blocks import pass_questions
from harness.results.token_store import PAD_ID, ScoresError, ScoreTable
from harness.stats import kld as dv
from harness.stats.proportions import upper_bound

#: one pass's outputs by question index (None: errored or missing)
Texts = Mapping[int, str | None]
#: characters of a side's word shown at a parting
WORD_CHARS = 24
TEST = "exact identity of the outputs, with the one-sided Clopper-Pearson bound on the per-question difference rate"


def texts_of(d: str | Path) -> dict[int, str | None]:
    """One eval directory's outputs by question index (None where the request failed)."""
    return {s.index: (s.output if s.error is None else None) for s in load_samples(d)}


def _word(text: str, c: int) -> str:
    """The word of ``text`` that holds character ``c`` (from its start: both texts share what precedes)."""
    start = c
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    m = re.match(r"\s*\S*", text[start:])
    word = m.group(0) if m else ""
    return word[:WORD_CHARS] if word else "(end of output)"


def _table(src: PassSource | None) -> ScoreTable | None:
    if src is None:
        return None
    try:
        return pass_table(src)
    except (ScoresError, OSError, ValueError):  # not scored, or unreadable: the proof uses the outputs alone
        return None


def _classify(q: int, c: int, ta: str, tb: str, ref: ScoreTable | None, other: ScoreTable | None,
              near_tie: float) -> Parting:
    """The parting of question ``q`` at character ``c``, with its token and gap where the passes show them."""
    base = Parting(question=q, char=c, text_a=_word(ta, c), text_b=_word(tb, c))
    if ref is None or other is None:
        return base
    r, o = ref.rows(q), other.rows(q)
    n = r.stop - r.start
    if n == 0 or o.stop - o.start != n or not np.array_equal(ref.token_id[r], other.token_id[o]):
        return base  # the other pass scored other tokens (or none): no position to read
    other_top = dv.top_id(other.top_ids[o], other.top_logprobs[o])
    if ref.text_offset is not None and np.all(ref.text_offset[r] >= 0):
        pos = dv.char_to_token(c, ref.text_offset[r])
    else:
        pos = dv.first_argmax_miss(ref.token_id[r], other_top)
    if pos is None or pos >= n:
        return base
    tok_a, tok_b = int(ref.token_id[r][pos]), int(other_top[pos])
    base = replace(base, position=int(pos), token_a=tok_a)
    if tok_b == PAD_ID or tok_b == tok_a:  # the other side's pass does not show its own token there
        return base
    ids, lps = ref.top_ids[r][pos], ref.top_logprobs[r][pos].astype(float)
    lp_a = float(ref.logprob[r][pos])
    hit = np.flatnonzero(ids == tok_b)
    if hit.size:
        gap, bound = lp_a - float(lps[hit[0]]), False
    else:  # outside the reference's top-k: its logprob is at most the k-th's
        finite = lps[np.isfinite(lps)]
        if finite.size == 0:
            return replace(base, token_b=tok_b)
        gap, bound = lp_a - float(finite.min()), True
    # within near_tie of each other either way (teacher-forced scoring can rank B's token above A's own greedy
    # choice); a bound (B's token outside A's top-k) only shows a divergence
    kind = "divergence" if abs(gap) > near_tie else ("near_tie" if not bound else None)
    return replace(base, token_b=tok_b, gap=gap, gap_is_bound=bound, kind=kind)


def _partings(ref_texts: Texts, others: Sequence[Texts], questions: Sequence[int], ref: ScoreTable | None,
              other: ScoreTable | None, near_tie: float) -> list[Parting]:
    """Every question whose output parts between the reference and any of ``others`` (the first such pass's;
    the token classification from ``other``, the pass scored on the first of ``others``' side)."""
    out = []
    for q in questions:
        ta = ref_texts[q]
        assert ta is not None
        for k, t in enumerate(others):
            tb = t[q]
            assert tb is not None
            c = dv.first_divergence(ta, tb)
            if c is not None:
                out.append(_classify(q, int(c), ta, tb, ref, other if k == 0 else None, near_tie))
                break
    return out


def _counts(ps: Sequence[Parting]) -> PartingCounts:
    kinds = [p.kind for p in ps]
    return PartingCounts(parted=len(ps), near_tie=kinds.count("near_tie"), divergence=kinds.count("divergence"),
                         unclassified=kinds.count(None))


def _scores_difference(ref: ScoreTable, other: ScoreTable) -> str | None:
    """Where two scoring passes of the same text first differ bit for bit (tokens, logprobs, top-k), in words;
    None when they are identical on every question both scored."""
    for q in np.intersect1d(ref.questions, other.questions):
        r, o = ref.rows(int(q)), other.rows(int(q))
        if r.stop - r.start != o.stop - o.start:
            return f"question {int(q)}: {r.stop - r.start} vs {o.stop - o.start} scored tokens"
        same = ((ref.token_id[r] == other.token_id[o]) & (ref.logprob[r] == other.logprob[o])
                & np.all(ref.top_ids[r] == other.top_ids[o], axis=1)
                & np.all((ref.top_logprobs[r] == other.top_logprobs[o])
                         | (np.isneginf(ref.top_logprobs[r]) & np.isneginf(other.top_logprobs[o])), axis=1))
        bad = np.flatnonzero(~same)
        if bad.size:
            i = int(bad[0])
            return (f"question {int(q)}, position {i}: token {int(ref.token_id[r][i])} logprob "
                    f"{float(ref.logprob[r][i])!r} vs token {int(other.token_id[o][i])} logprob "
                    f"{float(other.logprob[o][i])!r} (or their top-{ref.top_k})")
    return None


def _parting_words(p: Parting, other: str) -> str:
    where = f"token position {p.position}" if p.position is not None else f"character {p.char}"
    toks = (f" (token ids {p.token_a} vs {p.token_b})" if p.token_b is not None else
            f" (A's token id {p.token_a})" if p.token_a is not None else "")
    return f"question {p.question}, {where}: A {p.text_a!r} vs {other} {p.text_b!r}{toks}"


def prove(a: Sequence[Texts], b: Sequence[Texts], aa: Sequence[Texts] = (), *, ref: PassSource | None = None,
          ab: PassSource | None = None, floor: PassSource | None = None, alpha: float = 0.05,
          near_tie_nats: float = 0.5, logprobs: bool = True) -> Identity:
    """The no-op proof over the passes' outputs (arm A's first the reference) and, where scored, the reference
    pass, B's pass of the same text and the A/A floor pass. ``logprobs=False``: the passes' scores are not
    compared bit for bit (they may hold only the parted questions)."""
    others_a = [*aa, *a[1:]]  # the A/A control's first: the floor pass scored its launch
    passes = [*a, *aa, *b]
    questions = sorted(q for q in a[0] if all(p.get(q) is not None for p in passes))
    t_ref, t_ab, t_floor = _table(ref), _table(ab), _table(floor)
    floor_parts = _partings(a[0], others_a, questions, t_ref, t_floor if aa else None, near_tie_nats)
    floor_lp = "not_scored"
    lp_diff = None
    if logprobs and t_ref is not None and t_floor is not None:
        lp_diff = _scores_difference(t_ref, t_floor)
        floor_lp = "differ" if lp_diff else "identical"
    ab_lp = "not_scored" if not logprobs or t_ref is None or t_ab is None else (
        "differ" if _scores_difference(t_ref, t_ab) else "identical")
    parts = _partings(a[0], b, questions, t_ref, t_ab, near_tie_nats)
    n = len(questions)
    base = Identity(verdict="not_measured", reason="", questions=n, differing=len(parts), upper_bound=None,
                    alpha=alpha, near_tie_nats=near_tie_nats, floor_passes=len(others_a), floor_logprobs=floor_lp,
                    floor_difference=None, differing_questions=[p.question for p in parts], partings=parts,
                    partings_aa=floor_parts, counts=_counts(parts), counts_aa=_counts(floor_parts), logprobs_ab=ab_lp)
    if not others_a:
        return replace(base, reason="no A/A floor: arm A ran once, so whether the engine repeats itself is unknown "
                                    "(experiment.aa_control=true)")
    if n == 0:
        return replace(base, reason="no question was answered by every pass")
    if floor_parts or lp_diff:
        first = _parting_words(floor_parts[0], "A/A") if floor_parts else f"logprobs, {lp_diff}"
        what = (f"{len(floor_parts)} of {n} questions' outputs differ between A's passes" if floor_parts
                else "the outputs repeat but the A/A scoring pass's logprobs do not")
        return replace(base, verdict="not_deterministic", floor_difference=first,
                       reason=f"the A/A floor is not zero: {what}; first: {first}. The engine is not deterministic "
                              "here, so a difference between A and B cannot be pinned on the change (not a failure "
                              "of the change)")
    bound = upper_bound(len(parts), n, alpha)
    floor_txt = (f"the A/A floor is exactly zero ({len(others_a)} further pass(es) of A identical"
                 + (", logprobs too" if floor_lp == "identical" else "") + ")")
    conf = f"{100 * (1 - alpha):g} %"
    if not parts:
        lp = "; B's logprobs differ from A's" if ab_lp == "differ" else (
            "; B's logprobs identical too" if ab_lp == "identical" else "")
        return replace(base, verdict="identical", upper_bound=bound,
                       reason=f"B's outputs are bit-identical to A's on all {n} questions: the per-question "
                              f"difference rate is at most {100 * bound:.2f} % at {conf} (exact one-sided bound); "
                              f"{floor_txt}{lp}")
    c = _counts(parts)
    return replace(base, verdict="differs", upper_bound=bound,
                   reason=f"B's outputs differ from A's on {len(parts)} of {n} questions ({c.near_tie} at a near-tie, "
                          f"{c.divergence} real divergences, {c.unclassified} unclassified); {floor_txt}, so the "
                          f"difference is the change; first: {_parting_words(parts[0], 'B')}")


def apply(c: Comparison, ident: Identity) -> Comparison:
    """The comparison with the proof as its verdict (a not_comparable comparison stays one)."""
    if c.verdict == "not_comparable":
        return replace(c, identity=ident)
    return replace(c, identity=ident, verdict=ident.verdict, verdict_reason=ident.reason, test=TEST, p=None,
                   test_alpha=c.alpha, p_floor=None)


def prove_dirs(a_dirs: Sequence[str | Path], b_dirs: Sequence[str | Path], aa_dirs: Sequence[str | Path] = (),
               passes: tuple[PassSource | None, PassSource | None, PassSource | None] = (None, None, None),
               alpha: float = 0.05, near_tie_nats: float = 0.5, texts: Mapping[str, Texts] | None = None,
               partings_only: bool = False) -> Identity:
    """:func:`prove` of eval directories (``texts``: outputs already loaded); ``passes``: (reference, B's, the
    floor). ``partings_only``: of the passes only the parted questions' rows are read (not compared)."""
    a, b, aa = ([texts[str(d)] if texts is not None and str(d) in texts else texts_of(d) for d in dirs]
                for dirs in (a_dirs, b_dirs, aa_dirs))
    ref, ab, floor = passes
    if partings_only:
        parted = _parted(a, [*a[1:], *aa, *b])
        ref, ab, floor = (_few(p, parted) for p in passes)
    return prove(a, b, aa, ref=ref, ab=ab, floor=floor, alpha=alpha, near_tie_nats=near_tie_nats,
                 logprobs=not partings_only)


def with_passes(c: Comparison, a_dirs: Sequence[str | Path], b_dirs: Sequence[str | Path],
                aa_dirs: Sequence[str | Path], passes: tuple[PassSource | None, PassSource | None, PassSource | None],
                near_tie_nats: float = 0.5) -> Comparison:
    """A no-op comparison's proof again, now with its scoring passes (reference, B's, the floor): the floor's
    logprobs and the first diverging tokens classified. Any other comparison is returned as it is."""
    if c.identity is None:
        return c
    return apply(c, prove_dirs(a_dirs, b_dirs, aa_dirs, passes, alpha=c.alpha, near_tie_nats=near_tie_nats))


def first_divergences(c: Comparison, a_dirs: Sequence[str | Path], b_dirs: Sequence[str | Path],
                      aa_dirs: Sequence[str | Path],
                      passes: tuple[PassSource | None, PassSource | None, PassSource | None],
                      near_tie_nats: float = 0.5, texts: Mapping[str, Texts] | None = None) -> Comparison:
    """Any comparison with a measured divergence: the questions whose greedy texts part, A vs B and A vs A',
    by their first diverging token, as the no-op proof counts them (``texts``: outputs already loaded)."""
    div = c.divergence
    if (div is None or div.verdict not in ("diverged", "indistinguishable") or div.reference != "a" or not a_dirs
            or not b_dirs):  # the passes classify A's texts: with B's as the reference they would not
        return c
    try:
        ident = prove_dirs(a_dirs, b_dirs, aa_dirs, passes, alpha=c.alpha, near_tie_nats=near_tie_nats, texts=texts,
                           partings_only=True)
    except (StoreError, OSError, ValueError, KeyError, IndexError) as e:  # a count beside the verdict, said
        return replace(c, warnings=[*c.warnings, f"first diverging tokens not counted: {e}"])
    return replace(c, divergence=replace(div, partings=ident.counts, partings_aa=ident.counts_aa,
                                         near_tie_nats=near_tie_nats))


def _parted(a: Sequence[Texts], others: Sequence[Texts]) -> list[int]:
    """The questions whose reference output differs from any other pass's (a superset of the partings)."""
    ref = a[0]
    return [q for q, t in ref.items() if t is not None and any(o.get(q) not in (None, t) for o in others)]


def _few(src: PassSource | None, questions: Sequence[int]) -> ScoreTable | None:
    """The rows of ``questions`` of a pass (None when it was not scored or cannot be read)."""
    if src is None:
        return None
    try:
        return pass_questions(src, questions)
    except (ScoresError, OSError, ValueError):
        return None


# ------------------------------------------------------------------ in words (terminal, report)
def counts_text(c: PartingCounts) -> str:
    """``3 parted: 1 near-tie, 2 real divergences, 0 unclassified``."""
    return (f"{c.parted} parted: {c.near_tie} near-tie, {c.divergence} real "
            f"divergence{'s' if c.divergence != 1 else ''}, {c.unclassified} unclassified")


def bound_text(i: Identity) -> str:
    return (f"per-question difference rate ≤ {100 * i.upper_bound:.2f} % ({100 * (1 - i.alpha):g} %, exact)"
            if i.upper_bound is not None else "no bound")


def detail(i: Identity) -> list[str]:
    """The proof's lines under the verdict."""
    out = [f"no-op proof over {i.questions} questions: {i.differing} differ between A and B; {bound_text(i)}",
           f"first diverging token (near-tie: a logprob gap of at most {i.near_tie_nats:g} nats in the reference "
           f"pass): A/B {counts_text(i.counts)}; A/A {counts_text(i.counts_aa)}",
           f"floor: {i.floor_passes} further pass(es) of A compared; logprobs {i.floor_logprobs.replace('_', ' ')}"
           + (f"; first difference: {i.floor_difference}" if i.floor_difference else "")]
    if i.logprobs_ab != "not_scored":
        out.append(f"B's scoring pass against A's reference pass: logprobs {i.logprobs_ab}")
    return out
