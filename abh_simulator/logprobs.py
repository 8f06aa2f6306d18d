"""The simulated engine's next-token model, for teacher-forced scoring (the divergence measures).

For a token sequence ``ids`` the model gives, at every position ``p >= 1``, a distribution over the whole
vocabulary for the token at ``p`` given ``ids[:p]``. It is built so that the measures a client computes mean
something, cheaply (numpy, no per-vocabulary work):

* The context is a rolling 64-bit hash of ``ids[:p]`` (seeded by ``seed``, shared by all arms), so the
  distribution is a pure function of (seed, the tokens before p, the token at p).
* ``CANDIDATES`` candidate ids get explicit logits: the token actually at ``p`` (the text being scored, as a
  confident model would rate its own greedy output: it leads by a random margin, mean ``MARGIN_MEAN``
  nats, sometimes near 0) and ``CANDIDATES - 1`` alternatives drawn from the context hash. Every other id
  shares one tail logit (``TAIL_LOGIT``); the probabilities sum to 1 over the whole vocabulary.
* Build perturbation: ``logit_shift * z`` added to each candidate's logit, with ``z ~ N(0, 1)`` drawn from
  (build label, context, candidate id). Two servers with the same build label and shift produce identical
  distributions; a different build label (or shift) moves them apart by about ``logit_shift`` nats per
  logit. 0 = identical builds. It never touches the accuracy model (the answers stay what they were).
* Run-to-run noise ``logprob_noise * z'`` on the candidates' logits, drawn where ``engine.noise`` says:
  ``launch`` (once per server launch: repeated scoring on one launch is identical), ``pass`` (anew for
  every repeat of the same request on a launch) or ``mixed`` (both, each with ``logprob_noise / sqrt 2``).

Positions are scored in one vectorised pass; :meth:`NextTokenModel.score` returns, per position, the
logprob of the token there, the top-k (id, logprob) list and the logprobs of any requested ids.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from abh_simulator.hashing import GOLDEN, context_states, key_of, mix, mix_np, normal, pair_keys, uniform
from abh_simulator.jsonfmt import DECIMALS
from abh_simulator.tokens import N_SPECIAL

CANDIDATES = 48
MARGIN_MEAN = 2.5
TAIL_LOGIT = -14.0
@dataclass(eq=False)
class Scores:
    """Scores of positions ``positions`` (each >= 1) of one sequence (equal when every score is)."""

    positions: list[int]
    #: logprob of the token at each position
    token_logprobs: list[float]
    #: per position, the 1-based rank of the token at that position
    ranks: list[int]
    #: the top-k ids and logprobs, (n, k) each, sorted by logprob (None: k = 0, or rows of unequal length)
    top_ids: np.ndarray | None = None
    top_logprobs: np.ndarray | None = None
    #: per position, the logprob of each requested id, (n, R) (None when none were requested)
    requested_logprobs: np.ndarray | None = None
    #: the top-k as lists where the rows differ in length (a vocabulary smaller than k)
    ragged_top: list[list[tuple[int, float]]] | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Scores):
            return NotImplemented
        return (self.positions, self.token_logprobs, self.ranks, self.top, self.requested) == (
            other.positions, other.token_logprobs, other.ranks, other.top, other.requested)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    @functools.cached_property
    def top(self) -> list[list[tuple[int, float]]]:
        """Per position, the top-k [(id, logprob)] (empty when k = 0); made once, when first read."""
        if self.ragged_top is not None:
            return self.ragged_top
        if self.top_ids is None or self.top_logprobs is None:
            return [[] for _ in self.positions]
        return [list(zip(i, v, strict=True)) for i, v in zip(self.top_ids.tolist(), self.top_logprobs.tolist(),
                                                             strict=True)]

    @functools.cached_property
    def requested(self) -> list[list[float]]:
        """Per position, the logprob of each requested id (empty when none were requested); made once."""
        if self.requested_logprobs is None:
            return [[] for _ in self.positions]
        return self.requested_logprobs.tolist()


@dataclass(frozen=True)
class Ask:
    """One sequence to score (:meth:`NextTokenModel.score`'s arguments)."""

    ids: Sequence[int]
    positions: Sequence[int]
    top_k: int = 0
    requested: Sequence[int] = ()
    pass_index: int = 0
    states: Sequence[int] | None = None


class NextTokenModel:
    """The distributions one server launch serves (see the module docstring)."""

    def __init__(self, seed: int, vocab_size: int, build: str = "", logit_shift: float = 0.0,
                 logprob_noise: float = 0.0, noise: str = "pass", run_seed: int = 0):
        self.seed, self.vocab_size = seed, vocab_size
        self.logit_shift, self.logprob_noise, self.noise = logit_shift, logprob_noise, noise
        self.run_seed = run_seed
        self._build_key = key_of("abh-sim/build", build)
        self._launch_key = key_of("abh-sim/launch-noise", run_seed)
        if noise == "launch":
            self._sd_launch, self._sd_pass = logprob_noise, 0.0
        elif noise == "pass":
            self._sd_launch, self._sd_pass = 0.0, logprob_noise
        else:  # mixed: half the variance each
            self._sd_launch = self._sd_pass = logprob_noise / math.sqrt(2.0)

    def score(self, ids: Sequence[int], positions: Sequence[int], top_k: int = 0,
              requested: Sequence[int] = (), pass_index: int = 0,
              states: Sequence[int] | None = None) -> Scores:
        """Score ``positions`` (each in 1..len(ids)-1) of ``ids``; ``pass_index`` = how many times this same
        request was scored before on this launch (only ``pass``/``mixed`` noise uses it)."""
        return self.score_many([Ask(ids, positions, top_k, requested, pass_index, states)])[0]

    def score_many(self, asks: Sequence[Ask]) -> list[Scores]:
        """:meth:`score` of each of ``asks``, their positions in one vectorised pass (a scoring request holds 16
        sequences of ~80 positions: each one alone is mostly numpy's cost per call); the same values as one by one,
        every operation being per position or per row."""
        parts = []
        for a in asks:
            pos = [int(p) for p in a.positions]
            if pos and (min(pos) < 1 or max(pos) >= len(a.ids)):
                raise ValueError("positions must lie in 1..len(ids)-1")
            st = a.states if a.states is not None else context_states(a.ids, self.seed) if pos else []
            parts.append((pos, [st[p] for p in pos], [int(a.ids[p]) for p in pos]))
        counts = [len(pos) for pos, _, _ in parts]
        if not sum(counts):
            return [Scores([], [], []) for _ in asks]
        s = np.array([x for _, st, _ in parts for x in st], dtype=np.uint64)
        target = np.array([t for _, _, ts in parts for t in ts], dtype=np.int64)
        pass_salt = None
        if self._sd_pass > 0:
            keys = [key_of("abh-sim/pass-noise", self.run_seed, a.pass_index) for a in asks]
            pass_salt = np.repeat(np.array(keys, dtype=np.uint64), counts)
        cand, dup, lp, lp_tail = self._rows(s, target, pass_salt)
        k_max = max((min(a.top_k, CANDIDATES) for a in asks if a.top_k > 0), default=0)
        token_lp = lp[:, 0]
        ranks = 1 + (lp > token_lp[:, None]).sum(axis=1)
        top = None
        if k_max:  # every position's best k_max (a sequence asking fewer takes the first of them)
            best = _best(lp, k_max)
            top = (np.take_along_axis(cand, best, axis=1), np.take_along_axis(lp, best, axis=1),
                   ~np.take_along_axis(dup, best, axis=1))
        asked = _asked(cand, lp, lp_tail, asks, counts)
        out = []
        at = 0
        for j, (a, (pos, _, _), n) in enumerate(zip(asks, parts, counts, strict=True)):
            rows = slice(at, at + n)
            at += n
            if not n:
                out.append(Scores([], [], []))
                continue
            sc = Scores(pos, token_lp[rows].tolist(), ranks[rows].tolist())
            if top is not None and a.top_k > 0:
                k = min(a.top_k, CANDIDATES)
                self._top(sc, a.top_k, s[rows], cand[rows], dup[rows], lp_tail[rows],
                          *(x[rows, :k] for x in top))
            if len(a.requested):
                sc.requested_logprobs = asked[j] if asked is not None else _asked_one(
                    cand[rows], lp[rows], lp_tail[rows], a.requested)
            out.append(sc)
        return out

    def _rows(self, s: np.ndarray, target: np.ndarray,
              pass_salt: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(candidates (n, K), their duplicates, their logprobs, the tail's logprob (n,)) of positions whose
        context states are ``s`` and tokens ``target``; ``pass_salt``: per position, its pass noise's key."""
        k_c, span = CANDIDATES, self.vocab_size - N_SPECIAL
        n = s.shape[0]
        with np.errstate(over="ignore"):
            alt_keys = mix_np(s[:, None] * np.uint64(GOLDEN) + _COLS[None, :] * np.uint64(0xD1B54A32D192ED03))
        cand = np.empty((n, k_c), dtype=np.int64)
        cand[:, 0] = target
        np.remainder(alt_keys, np.uint64(span), out=cand[:, 1:], casting="unsafe")  # < span: exact as int64
        cand[:, 1:] += N_SPECIAL
        dup = _duplicates(cand)
        # base logits: alternatives decay with their column, the token at p leads by a random margin. Each step in
        # place, in the order (and so with the values) of the plain expressions: a - b + z as (a - b) + z, x + c * z
        # as x + (c * z); where a dropped candidate's -inf is set by a mask instead of np.where
        logits = np.empty((n, k_c))
        alt_logit = logits[:, 1:]
        np.add(_ALT_BASE[None, :], normal(alt_keys, 0xA5A5A5A5), out=alt_logit)
        alt_dup = dup[:, 1:]
        any_dup = bool(alt_dup.any())
        if any_dup:
            alt_logit[alt_dup] = -np.inf
        margin = -MARGIN_MEAN * np.log(uniform(s ^ np.uint64(0x3C6EF372FE94F82B)))
        np.add(alt_logit.max(axis=1), margin, out=logits[:, 0])
        for sd, salt in ((self.logit_shift, self._build_key), (self._sd_launch, self._launch_key),
                         (self._sd_pass, pass_salt)):
            if sd > 0 and salt is not None:
                z = normal(pair_keys(s, cand, salt))
                z *= sd
                logits += z
        if any_dup:
            logits[dup] = -np.inf
            n_cand = k_c - dup.sum(axis=1)
        else:
            n_cand = np.full(n, k_c)
        tail_log_mass = np.log((self.vocab_size - n_cand).astype(np.float64)) + TAIL_LOGIT
        top = logits.max(axis=1)
        e = logits - top[:, None]
        np.exp(e, out=e)
        log_z = top + np.log(e.sum(axis=1) + np.exp(tail_log_mass - top))
        # on the wire a logprob has DECIMALS decimals (abh_simulator.jsonfmt writes them so): every protocol
        # answers these same values, the server's own logprob of a token and its entry among the top-k alike
        logits -= log_z[:, None]
        lp = np.round(logits, DECIMALS, out=logits)
        lp_tail = np.round(TAIL_LOGIT - log_z, DECIMALS)
        return cand, dup, lp, lp_tail

    def _top(self, out: Scores, top_k: int, s: np.ndarray, cand: np.ndarray, dup: np.ndarray, lp_tail: np.ndarray,
             ids_b: np.ndarray, lp_b: np.ndarray, ok: np.ndarray) -> None:
        """One sequence's top-k into ``out`` from its rows' best candidates (``ids_b``, ``lp_b``, ``ok``: not a
        dropped duplicate); tail ids where a row has fewer than k candidates."""
        n = len(out.positions)
        if ok.all() and ids_b.shape[1] == top_k:  # every row: k distinct candidates (no tail ids needed)
            out.top_ids, out.top_logprobs = ids_b, lp_b
            return
        tops: list[list[tuple[int, float]]] = []
        for r in range(n):
            row = [x for x, keep in zip(zip(ids_b[r].tolist(), lp_b[r].tolist(), strict=True),
                                        ok[r].tolist(), strict=True) if keep]
            if len(row) < top_k:  # past the candidates: tail ids, all with the tail logprob
                row += self._tail_ids(int(s[r]), set(cand[r][~dup[r]].tolist()), top_k - len(row),
                                      float(lp_tail[r]))
            tops.append(row)
        if len({len(row) for row in tops}) == 1:
            out.top_ids = np.array([[i for i, _ in row] for row in tops], dtype=np.int64).reshape(n, -1)
            out.top_logprobs = np.array([[v for _, v in row] for row in tops], dtype=np.float64).reshape(n, -1)
        else:
            out.ragged_top = tops

    def _tail_ids(self, state: int, taken: set[int], count: int, lp_tail: float) -> list[tuple[int, float]]:
        out: list[tuple[int, float]] = []
        j = 0
        span = self.vocab_size - N_SPECIAL
        while len(out) < count and j < 4 * count + 64:
            i = N_SPECIAL + mix(state ^ key_of("abh-sim/tail", j)) % span
            j += 1
            if i not in taken:
                taken.add(i)
                out.append((i, lp_tail))
        return out


#: The alternatives' columns 1..K-1 (their hash keys' salt) and their base logits, decaying with the column
_COLS = np.arange(1, CANDIDATES, dtype=np.uint64)
_ALT_BASE = -2.0 - 0.08 * np.arange(1, CANDIDATES)


def _duplicates(cand: np.ndarray) -> np.ndarray:
    """(n, K) bool: the candidates equal to one before them in their row (an alternative equal to the target or to
    an earlier alternative: dropped). Rows without any (most: 47 draws from the vocabulary) are found by one sort;
    the few others are marked by a stable sort (the first of equal ids is kept)."""
    srt = np.sort(cand, axis=1)
    rows = np.flatnonzero((srt[:, 1:] == srt[:, :-1]).any(axis=1))
    dup = np.zeros(cand.shape, dtype=bool)
    if rows.size:
        sub = cand[rows]
        order = np.argsort(sub, axis=1, kind="stable")
        ordered = np.take_along_axis(sub, order, axis=1)
        dup_sorted = np.zeros(sub.shape, dtype=bool)
        dup_sorted[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
        marks = np.zeros(sub.shape, dtype=bool)
        np.put_along_axis(marks, order, dup_sorted, axis=1)
        dup[rows] = marks
    return dup


#: Up to this many best columns are picked one maximum at a time (cheaper than sorting the row's candidates)
_PICKED = 8


def _best(lp: np.ndarray, k: int) -> np.ndarray:
    """(n, k) column indices of each row's k highest ``lp``, highest first, ties by column: the first k of a stable
    argsort of ``-lp``. Few are picked by successive maxima (the first maximum of a row is the lowest column of a
    tie); a row whose pick runs into a dropped candidate (-inf: fewer than k left) is sorted instead."""
    if k > _PICKED:
        return np.argsort(-lp, axis=1, kind="stable")[:, :k]
    work = lp.copy()
    rows = np.arange(lp.shape[0])
    best = np.empty((lp.shape[0], k), dtype=np.intp)
    picked = np.empty((lp.shape[0], k))
    for j in range(k):
        col = work.argmax(axis=1)
        best[:, j] = col
        picked[:, j] = work[rows, col]
        work[rows, col] = -np.inf
    short = np.flatnonzero(np.isneginf(picked).any(axis=1))
    if short.size:
        best[short] = np.argsort(-lp[short], axis=1, kind="stable")[:, :k]
    return best


def _asked_one(cand: np.ndarray, lp: np.ndarray, lp_tail: np.ndarray, requested: Sequence[int]) -> np.ndarray:
    """(n, R) logprobs of the ``requested`` ids at each row: the first candidate equal to one (a later one is a
    dropped duplicate), else the tail's."""
    want = np.array([int(i) for i in requested], dtype=np.int64)
    return _lookup(cand, lp, lp_tail, np.broadcast_to(want, (cand.shape[0], want.size)))


def _lookup(cand: np.ndarray, lp: np.ndarray, lp_tail: np.ndarray, want: np.ndarray) -> np.ndarray:
    """(n, R) logprobs of the ids ``want`` (n, R) among each row's candidates (:func:`_asked_one`)."""
    eq = cand[:, None, :] == want[:, :, None]  # (n, R, K)
    at = eq.argmax(axis=2)
    # found: the first match's own mark (one element per id where eq.any read all K of them)
    found = np.take_along_axis(eq, at[:, :, None], axis=2)[:, :, 0]
    return np.where(found, np.take_along_axis(lp, at, axis=1), lp_tail[:, None])


def _asked(cand: np.ndarray, lp: np.ndarray, lp_tail: np.ndarray, asks: Sequence[Ask],
           counts: list[int]) -> list[np.ndarray] | None:
    """Each sequence's asked ids' logprobs (:func:`_asked_one`), all looked up at once where every sequence asks the
    same number of ids (a scoring batch asks each the reference's best ones); None otherwise (each alone)."""
    widths = {len(a.requested) for a in asks}
    if len(widths) != 1 or not widths.pop() or not sum(counts):
        return None
    want = np.repeat(np.array([[int(i) for i in a.requested] for a in asks], dtype=np.int64), counts, axis=0)
    got = _lookup(cand, lp, lp_tail, want)
    return np.split(got, np.cumsum(counts)[:-1])
