"""The ``divergence`` object of ``comparison.json``: how far arm B's next-token distributions are from arm A's
on A's own greedy text, against the A/A floor (A scored again on fresh launches).

The scoring passes are streamed together in blocks of questions, aligned by question (a question missing from
a pass, or scored on other reference tokens, is dropped and counted). The verdict is the launch-level test
when three or more launches besides the reference's were scored, else the per-question test, qualified;
``not_measured`` (with the reason) whenever the data cannot support one: nothing is reported as a silent zero.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.results.arrow_buffers import release, trim_heap
from harness.results.eval_store import load_samples
from harness.results.records import JSON, finite_or_none
from harness.results.schema import Divergence, Histogram, KldHistogram, TopQuestion
from harness.results.score_blocks import BLOCK_TOKENS, PassReader, load_scores, pass_blocks
from harness.results.token_store import SCORES_META, NotMeasured, ScoresError, ScoreTable
from harness.stats import kld as dv
from harness.stats import kld_launches as kl
from harness.stats.outcomes import DivergenceTest
from harness.stats.verdict import ALPHA, DEFAULT_MIN_SCORED_SHARE

#: tokens per chunk of the per-token computation (bounds the (chunk, k, k) id-matching temporaries)
CHUNK_TOKENS = 8_192
#: per-token and per-question KLD histogram: log-spaced bins, 4 per decade, 1e-8 .. 1e2 nats
HIST_EDGES = [float(x) for x in 10.0 ** np.arange(-8.0, 2.0001, 0.25)]
KL_METHOD = ("KL(A||B) per token over A's top-k ids that B also reported, all other mass lumped into one "
             "tail bucket on each side (a lower bound of the full-vocabulary KL)")
DEFAULT_TOP_N = 10
#: the columns each pass is streamed with: the reference's, the compared passes' (B, A/A), the further launches'
REF_COLUMNS = ("logprob", "top_ids", "top_logprobs", "text_offset")
CMP_COLUMNS = ("logprob", "top_ids", "top_logprobs", "ref_top_logprobs")
LAUNCH_COLUMNS = ("top_ids", "top_logprobs", "ref_top_logprobs")
#: what ``scoring`` copies from each pass's scores.json
SCORING_KEYS = ("wall_s", "errors", "questions", "tokens", "top_k", "engine", "url", "launch")
#: the assumption of each design the launch-level test cannot cover (one clause of the verdict)
QUALIFIED_ONE_EACH = "assumes the noise scale is the same on every launch (one A/A launch, one B launch)"
QUALIFIED_ONE_A = "one A launch besides the reference's: the launch-to-launch variance comes from B's launches"
QUALIFIED_ONE_B = ("one B launch: the test leans on log KLD being normal across launches (slightly liberal when "
                   "the noise scale varies)")


# ------------------------------------------------------------------------------------------ alignment
def _ranges(offsets: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of questions ``idx`` (positions into ``offsets``), concatenated, and their new offsets."""
    starts = offsets[idx]
    lens = offsets[idx + 1] - starts
    new_off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rows = np.repeat(starts - new_off[:-1], lens) + np.arange(new_off[-1])
    return rows.astype(np.int64), new_off


def _match(ref: ScoreTable, cmp: ScoreTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per reference question: (present in cmp, same reference tokens, position of the question in cmp)."""
    pos = np.searchsorted(cmp.questions, ref.questions)
    pos_c = np.minimum(pos, max(cmp.questions.size - 1, 0))
    present = (pos < cmp.questions.size) & (cmp.questions[pos_c] == ref.questions) if cmp.questions.size \
        else np.zeros(ref.questions.size, bool)
    len_ref = np.diff(ref.offsets)
    len_cmp = np.where(present, cmp.offsets[pos_c + 1] - cmp.offsets[pos_c], -1) if cmp.questions.size \
        else np.full(ref.questions.size, -1)
    cand = np.flatnonzero(present & (len_ref == len_cmp))
    same = np.zeros(ref.questions.size, bool)
    if cand.size:
        r_rows, off = _ranges(ref.offsets, cand)
        c_rows, _ = _ranges(cmp.offsets, pos_c[cand])
        mism = (ref.token_id[r_rows] != cmp.token_id[c_rows]).astype(float)
        bad = dv.segment_means(mism, off)
        same[cand] = ~(np.nan_to_num(bad, nan=0.0) > 0)
    return present, same, pos_c


def _pair_measures(ref: ScoreTable, cmp: ScoreTable, r_rows: np.ndarray, c_rows: np.ndarray,
                   kl_only: bool = False) -> dict[str, np.ndarray]:
    """Per-token KL and, unless ``kl_only``, same-top, Δlogprob and the compared side's argmax id, over
    aligned rows (chunked)."""
    m = r_rows.size
    out = {"kl": np.empty(m)}
    if not kl_only:
        out.update(same=np.empty(m, bool), dlp=np.empty(m), cmp_top=np.empty(m, np.int64))
    k = ref.top_k
    for s in range(0, m, CHUNK_TOKENS):
        r, c = r_rows[s:s + CHUNK_TOKENS], c_rows[s:s + CHUNK_TOKENS]
        cor = None
        if cmp.ref_top_logprobs is not None:
            cor = np.full((r.size, k), np.nan)
            w = min(k, cmp.ref_top_logprobs.shape[1])
            cor[:, :w] = cmp.ref_top_logprobs[c, :w]
        r_ids, r_lps = ref.top_ids[r], ref.top_logprobs[r]
        c_ids, c_lps = cmp.top_ids[c], cmp.top_logprobs[c]
        out["kl"][s:s + r.size] = dv.token_kl(r_ids, r_lps, c_ids, c_lps, cor)
        if kl_only:
            continue
        out["same"][s:s + r.size] = dv.same_top(r_ids, r_lps, c_ids, c_lps)
        out["dlp"][s:s + r.size] = cmp.logprob[c].astype(float) - ref.logprob[r].astype(float)
        out["cmp_top"][s:s + r.size] = dv.top_id(c_ids, c_lps)
    return out


def _question_kld(ref: ScoreTable, cmp: ScoreTable) -> np.ndarray:
    """Per reference question, the mean per-token KL(ref‖cmp); NaN where ``cmp`` lacks the question or scored
    other reference tokens."""
    present, same, pos = _match(ref, cmp)
    idx = np.flatnonzero(present & same)
    out = np.full(ref.questions.size, np.nan)
    if idx.size:
        r_rows, off = _ranges(ref.offsets, idx)
        kl_tok = _pair_measures(ref, cmp, r_rows, _ranges(cmp.offsets, pos[idx])[0], kl_only=True)["kl"]
        out[idx] = dv.segment_means(kl_tok, off)
    return out


#: a pass: the directory that holds it, or the pass already loaded (calibration builds them in memory)
PassSource = str | Path | ScoreTable


def pass_table(d: PassSource) -> ScoreTable:
    """A pass as its table (read from its directory unless already loaded)."""
    return d if isinstance(d, ScoreTable) else load_scores(d)


def _name(d: PassSource | None) -> str | None:
    if isinstance(d, ScoreTable):
        return str(d.meta.get("dir") or f"(in memory: launch {d.meta.get('launch')})")
    return None if d is None else str(d)


def _launch_readers(dirs: Sequence[PassSource], used: dict[str, str], skipped: dict[str, str],
                    broken: Mapping[str, str]) -> tuple[list[_Pass], dict[str, dict[str, JSON]]]:
    """The further passes in ``dirs`` that were scored on a launch no other pass used (``used``: launch id ->
    directory, updated), opened for streaming; the others go to ``skipped`` with why."""
    out, scoring = [], {}
    for d in dirs:
        name = str(_name(d))
        try:
            p = _Pass.open(d, LAUNCH_COLUMNS, broken)
        except NotMeasured as e:
            skipped[name] = f"not scored: {e.reason}"
            continue
        except (ScoresError, OSError, ValueError) as e:
            skipped[name] = f"unreadable: {e}"
            continue
        launch = p.meta.get("launch")
        if launch is not None and str(launch) in used:
            skipped[name] = f"launch {launch} is scored by {used[str(launch)]} already"
            continue
        if launch is not None:
            used[str(launch)] = name
        out.append(p)
        scoring[name] = _scoring(p.meta)
    return out, scoring


def _scoring(meta: Mapping[str, Any]) -> dict[str, JSON]:
    """What ``divergence.scoring`` copies from a pass's scores.json (:data:`SCORING_KEYS` it holds)."""
    return {k: meta[k] for k in SCORING_KEYS if k in meta}


class _Broken(Exception):
    """A pass that turned out unreadable while streaming: the divergence is computed again without it."""

    def __init__(self, name: str, why: str):
        super().__init__(why)
        self.name, self.why = name, why


@dataclass
class _Pass:
    """One pass being streamed: its name (directory) and reader."""

    name: str
    reader: PassReader

    @classmethod
    def open(cls, d: PassSource, columns: Sequence[str], broken: Mapping[str, str]) -> _Pass:
        name = str(_name(d))
        if name in broken:
            raise ScoresError(broken[name])
        return cls(name, PassReader(d, columns))

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.reader.meta

    def upto(self, last: int) -> ScoreTable:
        try:
            return self.reader.upto(last)
        except ScoresError as e:
            raise _Broken(self.name, str(e)) from None

# ------------------------------------------------------------------------------------------ texts
def _texts(d: Path | None) -> dict[int, str | None]:
    if d is None:
        return {}
    try:
        return {s.index: (s.output if s.error is None else None) for s in load_samples(d)}
    except (OSError, ValueError):
        return {}


def _text_rate(ref: Mapping[int, str | None], other: Mapping[int, str | None]) -> tuple[float | None, int]:
    both = [q for q in ref if ref.get(q) is not None and other.get(q) is not None]
    if not both:
        return None, 0
    return sum(ref[q] == other[q] for q in both) / len(both), len(both)


@dataclass(frozen=True)
class FirstDivergence:
    """Where two greedy texts of one question part: identical or not, the token index (and how it was found),
    the character index, and the diverging reference token's character span."""

    text_identical: bool | None = None
    first_divergence: int | None = None
    first_divergence_char: int | None = None
    first_divergence_source: str | None = None
    first_divergence_span: list[int] | None = None


def _first_div(q: int, row: slice, ref: ScoreTable, cmp_top: np.ndarray | None, rows_in_pair: slice | None,
               t_ref: Mapping[int, str | None], t_cmp: Mapping[int, str | None]) -> FirstDivergence:
    """Where the two greedy texts of question q part: the character, the token (by the reference pass's
    ``text_offset`` when stored, else where the compared server's argmax leaves the reference tokens)."""
    a, b = t_ref.get(q), t_cmp.get(q)
    if a is None or b is None:
        return FirstDivergence()
    c = dv.first_divergence(a, b)
    if c is None:
        return FirstDivergence(text_identical=True)
    tok, src, span = None, None, None
    if ref.text_offset is not None and np.all(ref.text_offset[row] >= 0) and row.stop > row.start:
        offs = ref.text_offset[row]
        tok, src = dv.char_to_token(c, offs), "text_offset"
        if tok is not None:
            end = int(offs[tok + 1]) if tok + 1 < offs.size else len(a)
            span = [int(offs[tok]), max(end, c + 1)]
    elif cmp_top is not None and rows_in_pair is not None:
        tok, src = dv.first_argmax_miss(ref.token_id[row], cmp_top[rows_in_pair]), "argmax"
    return FirstDivergence(False, tok, c, src, span)


def _hist(x: np.ndarray) -> Histogram:
    x = np.asarray(x, dtype=float)
    pos = x[x > 0]
    counts, _ = np.histogram(np.clip(pos, HIST_EDGES[0], HIST_EDGES[-1] * (1 - 1e-12)), bins=HIST_EDGES)
    return Histogram(zeros=int(x.size - pos.size), counts=[int(v) for v in counts])


# ------------------------------------------------------------------------------------------ main
def compute_divergence(ref_dir: PassSource, ab_dir: PassSource | None, aa_dir: PassSource | None, *,
                       launches_a: Sequence[PassSource] = (), launches_b: Sequence[PassSource] = (),
                       texts_ref: Mapping[int, str | None] | None = None,
                       texts_b: Mapping[int, str | None] | None = None,
                       texts_aa: Mapping[int, str | None] | None = None,
                       alpha: float = ALPHA, n_resamples: int = 9_999, seed: int = 0,
                       top_n: int = DEFAULT_TOP_N, reference: str = "a",
                       min_scored_share: float = DEFAULT_MIN_SCORED_SHARE,
                       block_tokens: int = BLOCK_TOKENS) -> Divergence:
    """The ``divergence`` object of comparison.json from A's reference scoring pass (``ref_dir``), B's pass of
    the same text (``ab_dir``), the A/A floor's (``aa_dir``) and the passes on A's and B's other launches for
    the launch-level test (a launch scored already is left out). ``texts_*``: greedy outputs by question index
    (None: read from ``samples.jsonl``). The passes are streamed together in blocks of about ``block_tokens``
    reference tokens, so the memory held does not grow with the number of passes."""
    dirs = {"ref": _name(ref_dir), "ab": _name(ab_dir), "aa": _name(aa_dir)}

    def texts(d: PassSource | None, given: Mapping[int, str | None] | None) -> Mapping[int, str | None]:
        return given if given is not None else _texts(None if d is None or isinstance(d, ScoreTable) else Path(d))

    t_ref, t_b, t_aa = texts(ref_dir, texts_ref), texts(ab_dir, texts_b), texts(aa_dir, texts_aa)
    (rate_ab, n_ab), (rate_aa, n_aa) = _text_rate(t_ref, t_b), _text_rate(t_ref, t_aa)

    def fail(why: str) -> Divergence:
        return Divergence(verdict="not_measured", verdict_reason=why, text_identical_rate=rate_ab,
                          text_questions=n_ab, text_identical_rate_aa=rate_aa, text_questions_aa=n_aa,
                          kl_method=KL_METHOD, dirs=dirs, reference=reference)

    broken: dict[str, str] = {}
    while True:  # a pass found unreadable while streaming is left out as if unreadable from the start
        try:
            return _streamed(ref_dir, ab_dir, aa_dir, launches_a, launches_b, (t_ref, t_b, t_aa), fail, broken,
                             alpha=alpha, n_resamples=n_resamples, seed=seed, top_n=top_n, dirs=dirs,
                             reference=reference, min_scored_share=min_scored_share, block_tokens=block_tokens,
                             text_rates=(rate_ab, n_ab, rate_aa, n_aa))
        except _Broken as e:
            broken[e.name] = e.why
        finally:
            release()  # the passes' read buffers, freed, for the Python objects that come next


@dataclass
class _Tally:
    """What the stream keeps: the counts of the questions dropped and scored, and for the questions every pass
    scored on the same tokens, a few numbers per token (A/B and A/A) and per question, in question order."""

    questions_total: int = 0
    scored_all: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    per_token: dict[str, list[np.ndarray]] = field(default_factory=dict)
    per_question: dict[str, list[np.ndarray]] = field(default_factory=dict)
    fd_ab: list[FirstDivergence] = field(default_factory=list)
    fd_aa: list[FirstDivergence] = field(default_factory=list)

    def count(self, key: str, n: int) -> None:
        self.dropped[key] = self.dropped.get(key, 0) + int(n)

    def keep(self, kind: dict[str, list[np.ndarray]], **arrays: np.ndarray) -> None:
        for k, v in arrays.items():
            kind.setdefault(k, []).append(v)

    def joined(self, kind: dict[str, list[np.ndarray]], key: str) -> np.ndarray:
        return np.concatenate(kind[key]) if kind.get(key) else np.empty(0)


def _block(tally: _Tally, blk: ScoreTable, ab: ScoreTable, aa: ScoreTable | None, more_a: list[ScoreTable],
           more_b: list[ScoreTable], texts: tuple[Mapping[int, str | None], ...]) -> None:
    """One block of reference questions against the same questions of every other pass, into ``tally``."""
    tally.questions_total += int(blk.questions.size)
    present_ab, same_ab, pos_ab = _match(blk, ab)
    keep = present_ab & same_ab
    scored_all = present_ab.copy()
    tally.count("missing_ab", (~present_ab).sum())
    tally.count("token_mismatch_ab", (present_ab & ~same_ab).sum())
    pos_aa = None
    if aa is not None:
        present_aa, same_aa, pos_aa = _match(blk, aa)
        keep &= present_aa & same_aa
        scored_all &= present_aa
        tally.count("missing_aa", (~present_aa).sum())
        tally.count("token_mismatch_aa", (present_aa & ~same_aa).sum())
    k_a = [_question_kld(blk, t) for t in more_a]
    k_b = [_question_kld(blk, t) for t in more_b]
    if k_a or k_b:
        extra_ok = np.all([np.isfinite(k) for k in k_a + k_b], axis=0)
        tally.count("missing_other_launches", (keep & ~extra_ok).sum())
        keep &= extra_ok
        scored_all &= extra_ok
    tally.scored_all += int(scored_all.sum())
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        return
    r_rows, off = _ranges(blk.offsets, idx)
    m_ab = _pair_measures(blk, ab, r_rows, _ranges(ab.offsets, pos_ab[idx])[0])
    m_aa = None
    per_q: dict[str, np.ndarray] = {
        "questions": blk.questions[idx], "tokens": np.diff(off), "kld": dv.segment_means(m_ab["kl"], off),
        "same": dv.segment_means(m_ab["same"], off), "rms": _rms_per_question(m_ab["dlp"], off)}
    tally.keep(tally.per_token, kl_ab=m_ab["kl"], same_ab=m_ab["same"], dlp_ab=m_ab["dlp"])
    if aa is not None:
        assert pos_aa is not None
        m_aa = _pair_measures(blk, aa, r_rows, _ranges(aa.offsets, pos_aa[idx])[0])
        per_q["kld_aa"] = dv.segment_means(m_aa["kl"], off)
        tally.keep(tally.per_token, kl_aa=m_aa["kl"], same_aa=m_aa["same"], dlp_aa=m_aa["dlp"])
    for i, k in enumerate(k_a):
        per_q[f"a{i}"] = k[idx]
    for i, k in enumerate(k_b):
        per_q[f"b{i}"] = k[idx]
    tally.keep(tally.per_question, **per_q)
    fd_ab, fd_aa = _first_divergences(blk, idx, off, m_ab, m_aa, *texts)
    tally.fd_ab.extend(fd_ab)
    tally.fd_aa.extend(fd_aa)


def _streamed(ref_dir: PassSource, ab_dir: PassSource | None, aa_dir: PassSource | None,
              launches_a: Sequence[PassSource], launches_b: Sequence[PassSource],
              texts: tuple[Mapping[int, str | None], ...], fail: Any, broken: Mapping[str, str], *, alpha: float,
              n_resamples: int, seed: int, top_n: int, dirs: dict[str, str | None], reference: str,
              min_scored_share: float, block_tokens: int, text_rates: tuple[Any, ...]) -> Divergence:
    """:func:`compute_divergence` over the passes streamed together, ``broken`` ones taken as unreadable."""
    try:
        ref, ab, aa, aa_reason = _open_passes(ref_dir, ab_dir, aa_dir, broken)
    except _Unmeasured as e:
        return fail(str(e))
    scoring = {name: _scoring(p.meta) for name, p in (("ref", ref), ("ab", ab), ("aa", aa)) if p is not None}
    # the further launches: one pass per launch (the reference's, the compared pass's and the floor's taken)
    used = {str(p.meta["launch"]): p.name for p in (ref, ab, aa) if p is not None and p.meta.get("launch") is not None}
    skipped: dict[str, str] = {}
    (more_a, sc_a), (more_b, sc_b) = (
        _launch_readers([] if aa is None else launches, used, skipped, broken) for launches in (launches_a, launches_b))
    scoring.update({**sc_a, **sc_b})
    tally = _Tally(dropped={"missing_ab": 0, "token_mismatch_ab": 0,
                            **({"missing_aa": 0, "token_mismatch_aa": 0} if aa is not None else {}),
                            **({"missing_other_launches": 0} if more_a or more_b else {})})
    for blk in _ref_blocks(ref, block_tokens):
        last = int(blk.questions[-1])
        _block(tally, blk, ab.upto(last), None if aa is None else aa.upto(last), [p.upto(last) for p in more_a],
               [p.upto(last) for p in more_b], texts)
    for p in (ref, ab, aa, *more_a, *more_b):  # what the readers hold, given back before the statistics' arrays
        if p is not None:
            p.reader.close()
    trim_heap()
    nq, dropped = tally.questions_total, tally.dropped
    if (short := _too_few_scored(ref.meta, nq, tally.scored_all, min_scored_share, dropped)) is not None:
        return fail(short)
    pq_, pt = tally.per_question, tally.per_token
    questions = tally.joined(pq_, "questions").astype(np.int64)
    if questions.size < 2:
        return fail(f"only {questions.size} question(s) were scored on the same reference tokens by every pass "
                    f"(dropped: {dropped})" + ("; B scored other token ids than A (a different tokenizer?)"
                                               if dropped.get("token_mismatch_ab") else ""))
    kl_ab, same_ab, dlp_ab = (tally.joined(pt, k) for k in ("kl_ab", "same_ab", "dlp_ab"))
    tokens_q = tally.joined(pq_, "tokens").astype(np.int64)
    kld_q, same_q, rms_q = (tally.joined(pq_, k) for k in ("kld", "same", "rms"))
    histogram = KldHistogram(edges=HIST_EDGES, token_ab=_hist(kl_ab), question_ab=_hist(kld_q))
    kld_aa_q = None
    test = None
    if aa is not None:
        kld_aa_q = tally.joined(pq_, "kld_aa")
        histogram = replace(histogram, token_aa=_hist(tally.joined(pt, "kl_aa")), question_aa=_hist(kld_aa_q))
        test = dv.divergence_test(kld_q, kld_aa_q, tokens_q, alpha=alpha, n_resamples=n_resamples, seed=seed)
    rate_ab, n_ab, rate_aa, n_aa = text_rates
    fd_ab, fd_aa = tally.fd_ab, tally.fd_aa
    top = _top_questions(questions, tokens_q, kld_q, kld_aa_q, same_q, rms_q, fd_ab, fd_aa, top_n)
    div = Divergence(
        verdict="not_measured" if test is None else test.verdict,
        verdict_reason=aa_reason or "no A/A floor",
        kld_mean=float(kl_ab.mean()), kld_max=float(kl_ab.max()),
        kld_percentiles=dv.kld_percentiles(kl_ab), same_top_rate=float(same_ab.mean()),
        rms_dlogprob=dv.rms(dlp_ab), tokens=int(kl_ab.size), questions=int(questions.size), questions_total=nq,
        questions_dropped=dropped, top_k=ref.reader.top_k, kld_histogram=histogram, scoring=scoring,
        text_identical_rate=rate_ab, text_questions=n_ab, text_identical_rate_aa=rate_aa, text_questions_aa=n_aa,
        first_divergence_median=_median_first(fd_ab), first_divergence_median_aa=_median_first(fd_aa),
        top_questions=top, kl_method=KL_METHOD, dirs=dirs, reference=reference, launches_skipped=skipped)
    if aa is None or test is None or kld_aa_q is None:
        return div
    kl_aa = tally.joined(pt, "kl_aa")
    div = replace(div, kld_mean_aa=float(kl_aa.mean()), kld_max_aa=float(kl_aa.max()),
                  kld_percentiles_aa=dv.kld_percentiles(kl_aa), same_top_rate_aa=float(tally.joined(pt, "same_aa").mean()),
                  rms_dlogprob_aa=dv.rms(tally.joined(pt, "dlp_aa")), alpha=alpha, per_question=test)
    ka = np.vstack([kld_aa_q] + [tally.joined(pq_, f"a{i}") for i in range(len(more_a))])
    kb = np.vstack([kld_q] + [tally.joined(pq_, f"b{i}") for i in range(len(more_b))])
    return _decide(div, test, ka, kb, tokens_q, alpha, n_resamples,
                   [str(_name(aa_dir)), *(p.name for p in more_a)], [str(_name(ab_dir)), *(p.name for p in more_b)])


def _ref_blocks(ref: _Pass, block_tokens: int) -> Iterator[ScoreTable]:
    try:
        yield from pass_blocks(ref.reader, block_tokens)
    except ScoresError as e:
        raise _Broken(ref.name, str(e)) from None


def _decide(div: Divergence, pq: DivergenceTest, ka: np.ndarray, kb: np.ndarray, tokens_q: np.ndarray,
            alpha: float, n_resamples: int, dirs_a: list[str], dirs_b: list[str]) -> Divergence:
    """The verdict: the per-question test ``pq`` with one A/A and one B launch, else the launch-level test
    over A's launches ``ka`` and B's ``kb`` (per-question KLD, one row per launch)."""
    if ka.shape[0] + kb.shape[0] < 3:  # one A/A launch, one B launch: the per-question test decides
        div = replace(div, verdict=pq.verdict, p=pq.p, p_floor=pq.p_floor, p_at_floor=pq.p_at_floor,
                      n_resamples=n_resamples, test=pq.test, effect=pq.effect, effect_ci=pq.effect_ci,
                      effect_ci_method=pq.effect_ci_method, effect_se=pq.effect_se, effect_mde=pq.effect_mde,
                      qualification=QUALIFIED_ONE_EACH)
        return replace(div, verdict_reason=_reason(div))
    lt = kl.launch_divergence_test(ka, kb, tokens_q.astype(float), alpha=alpha, per_question=False)
    sd = kl.pooled_sd_log(np.asarray(lt.kld_launch_a), np.asarray(lt.kld_launch_b))
    qual = QUALIFIED_ONE_A if lt.launches_a == 1 else QUALIFIED_ONE_B if lt.launches_b == 1 else None
    block = replace(lt, t=finite_or_none(lt.t), ratio_mde=kl.mde_ratio(sd, lt.launches_a, lt.launches_b, alpha),
                    sd_log=finite_or_none(sd), dirs_a=dirs_a, dirs_b=dirs_b, qualification=qual)
    div = replace(div, verdict=lt.verdict, p=lt.p, p_floor=None, p_at_floor=False, n_resamples=None, test=lt.method,
                  effect=lt.effect, effect_ci=None, effect_ci_method=None, effect_se=None, effect_mde=None,
                  launch_test=block, qualification=qual)
    return replace(div, verdict_reason=_reason(div))


def _open_passes(ref_dir: PassSource, ab_dir: PassSource | None, aa_dir: PassSource | None,
                 broken: Mapping[str, str]) -> tuple[_Pass, _Pass, _Pass | None, str | None]:
    """The reference's and B's passes opened (else _Unmeasured), and the A/A pass or why there is none."""
    ref = _open_pass(ref_dir, REF_COLUMNS, broken, "arm A's reference pass was not scored", "arm A's reference scores")
    if ab_dir is None:
        raise _Unmeasured("arm B was not scored (no scoring pass)")
    ab = _open_pass(ab_dir, CMP_COLUMNS, broken, "arm B was not scored", "arm B's scores")
    if aa_dir is None:
        return ref, ab, None, "no A/A scoring pass: there is no floor to test against"
    try:
        return ref, ab, _open_pass(aa_dir, CMP_COLUMNS, broken, "the A/A pass was not scored", "the A/A scores"), None
    except _Unmeasured as e:
        return ref, ab, None, str(e)


def _rms_per_question(dlp: np.ndarray, off: np.ndarray) -> np.ndarray:
    """RMS of the logprob differences per question, over the tokens that have one (a server may give no
    logprob for a token outside its top-k)."""
    finite = np.isfinite(dlp)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt(dv.segment_means(np.where(finite, dlp, 0.0) ** 2, off) / dv.segment_means(finite, off))


def _first_divergences(ref: ScoreTable, idx: np.ndarray, off: np.ndarray, m_ab: dict[str, Any],
                       m_aa: dict[str, Any] | None, t_ref: Mapping[int, str | None], t_b: Mapping[int, str | None],
                       t_aa: Mapping[int, str | None]) -> tuple[list[FirstDivergence], list[FirstDivergence]]:
    """Where the greedy texts of B and of the A/A pass first part from the reference's, per kept question."""
    pair_rows = [slice(int(off[i]), int(off[i + 1])) for i in range(idx.size)]
    ref_rows = [slice(int(ref.offsets[j]), int(ref.offsets[j + 1])) for j in idx]
    questions = ref.questions[idx]
    fd_ab = [_first_div(int(q), ref_rows[i], ref, m_ab["cmp_top"], pair_rows[i], t_ref, t_b)
             for i, q in enumerate(questions)]
    fd_aa = [_first_div(int(q), ref_rows[i], ref, None if m_aa is None else m_aa["cmp_top"], pair_rows[i],
                        t_ref, t_aa) for i, q in enumerate(questions)]
    return fd_ab, fd_aa


def _median_first(fds: list[FirstDivergence]) -> float | None:
    vals = [f.first_divergence for f in fds if f.first_divergence is not None]
    return float(np.median(vals)) if vals else None


class _Unmeasured(Exception):
    """A scoring pass that cannot be measured: the message says which and why."""


def _open_pass(d: PassSource, columns: Sequence[str], broken: Mapping[str, str], not_scored: str,
               scores: str) -> _Pass:
    try:
        return _Pass.open(d, columns, broken)
    except NotMeasured as e:
        raise _Unmeasured(f"{not_scored}: {e.reason}") from None
    except (ScoresError, OSError, ValueError) as e:
        raise _Unmeasured(f"{scores} are unreadable: {e}") from None


def _top_questions(questions: np.ndarray, tokens_q: np.ndarray, kld_q: np.ndarray, kld_aa_q: np.ndarray | None,
                   same_q: np.ndarray, rms_q: np.ndarray, fd_ab: list[FirstDivergence], fd_aa: list[FirstDivergence],
                   top_n: int) -> list[TopQuestion]:
    """The ``top_n`` questions that diverge most (largest d_i, or KLD without a floor)."""
    d_q = kld_q - kld_aa_q if kld_aa_q is not None else kld_q
    order = np.argsort(-d_q, kind="stable")[: max(0, int(top_n))]
    return [TopQuestion(
        question=int(questions[i]), tokens=int(tokens_q[i]), kld=float(kld_q[i]),
        kld_aa=None if kld_aa_q is None else float(kld_aa_q[i]), d=None if kld_aa_q is None else float(d_q[i]),
        same_top_rate=float(same_q[i]), rms_dlogprob=float(rms_q[i]) if np.isfinite(rms_q[i]) else None,
        text_identical=fd_ab[i].text_identical, first_divergence=fd_ab[i].first_divergence,
        first_divergence_char=fd_ab[i].first_divergence_char, first_divergence_source=fd_ab[i].first_divergence_source,
        first_divergence_span=fd_ab[i].first_divergence_span, text_identical_aa=fd_aa[i].text_identical,
        first_divergence_aa=fd_aa[i].first_divergence) for i in order]


def _too_few_scored(meta: Mapping[str, Any], questions: int, scored: int, least: float,
                    dropped: dict[str, int]) -> str | None:
    """Why ``scored`` questions (scored by every pass) are too few for a verdict: under ``least`` of those the
    reference pass (``meta``, holding ``questions``) was to score; None when they are enough."""
    planned, errors = meta.get("questions_planned"), meta.get("errors")
    if not isinstance(planned, int) or isinstance(planned, bool):  # a pass that did not record it
        planned = questions + (errors if isinstance(errors, int) and not isinstance(errors, bool) else 0)
    planned = max(planned, questions)
    if planned == 0 or scored >= least * planned:
        return None
    lost = ", ".join(f"{k} {v}" for k, v in dropped.items() if v and not k.startswith("token_mismatch"))
    return (f"only {scored} of the {planned} questions the reference pass was to score were scored by every pass "
            f"({scored / planned:.1%}, under divergence.min_scored_share {least:g}; reference pass request errors "
            f"{errors or 0}{'; ' + lost if lost else ''}): too few for a verdict; rerun to score the rest")


def has_pass(d: str | Path) -> bool:
    """Whether directory ``d`` records a scoring pass (scored or not measured: it holds ``scores.json``)."""
    return (Path(d) / SCORES_META).is_file()


def pass_dirs(a_dirs: Sequence[str | Path], b_dirs: Sequence[str | Path], aa_dirs: Sequence[str | Path] = ()
              ) -> tuple[Path, Path | None, Path | None, list[Path], list[Path]]:
    """(reference, compared, floor, A's further passes, B's further passes) of these eval directories: the
    first A and B directories that record a pass (the reference: else A's first, so the verdict says it was
    not scored), the floor the first A/A one (else A's next one)."""
    a = [Path(d) for d in a_dirs if has_pass(d)]
    b = [Path(d) for d in b_dirs if has_pass(d)]
    aa = [Path(d) for d in aa_dirs if has_pass(d)]
    same = aa + a[1:]
    return (a[0] if a else Path(a_dirs[0]), b[0] if b else None, same[0] if same else None, same[1:], b[1:])


def divergence_of_dirs(a_dirs: Sequence[str | Path], b_dirs: Sequence[str | Path],
                       aa_dirs: Sequence[str | Path] = (), **kwargs: Any) -> Divergence | None:
    """The ``divergence`` object for a comparison of these eval directories (the passes :func:`pass_dirs`
    picks), or None when none of them records a scoring pass; ``kwargs`` go to :func:`compute_divergence`."""
    if not any(has_pass(d) for d in (*a_dirs, *b_dirs, *aa_dirs)):
        return None
    from harness.analysis.divergence_cache import cached

    ref, ab, floor, more_a, more_b = pass_dirs(a_dirs, b_dirs, aa_dirs)
    # the result abh run stored beside the reference pass, when every input is as it was (read only: a comparison
    # writes nothing among its inputs)
    return cached(compute_divergence, ref, ab, floor, more_a, more_b, store=False, **kwargs)


def _reason(d: Divergence) -> str:
    from harness.stats import format_p

    assert d.p is not None and d.alpha is not None and d.effect is not None
    p_txt = format_p(d.p, d.p_floor)
    kl_txt = f"KLD {d.kld_mean:.3g} vs A/A {d.kld_mean_aa:.3g} nats/token"
    qual = f"; {d.qualification}" if d.qualification else ""
    lt = d.launch_test
    if lt is not None:
        rci = f" [{lt.ratio_ci[0]:.3g}, {lt.ratio_ci[1]:.3g}]" if lt.ratio_ci else ""
        t_txt = f"t = {lt.t:.2f}, " if lt.t is not None else ""
        over = (f"B's {lt.launches_b} launch(es) {lt.ratio:.3g}x A's {lt.launches_a} (ratio of geometric-mean "
                f"launch KLDs{rci}; one-sided t-test over launches, {t_txt}{lt.df or 0:g} df, {p_txt}")
        if d.verdict == "diverged":
            return f"{kl_txt}: {over} < α = {d.alpha:g}){qual}"
        mde = f"; could detect a ratio of about {lt.ratio_mde:.2g}" if lt.ratio_mde else ""
        return f"{kl_txt}: not above A's launches, {over} >= α = {d.alpha:g}){mde}{qual}"
    ci = d.effect_ci
    ci_txt = f", {100 * (1 - d.alpha):g} % CI [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else ""
    if d.verdict == "diverged":
        return (f"{kl_txt}: {d.effect:.3g} nats/token above the A/A floor{ci_txt}, {p_txt} < α = {d.alpha:g} "
                f"(one-sided sign-flip test over {d.questions} questions){qual}")
    mde = f"; could detect about {d.effect_mde:.2g} nats/token" if d.effect_mde else ""
    return f"{kl_txt}: not above the A/A floor ({p_txt} >= α = {d.alpha:g}){ci_txt}{mde}{qual}"
