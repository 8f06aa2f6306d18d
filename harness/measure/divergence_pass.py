"""The scoring pass: one server scores the reference completions (one arm's greedy outputs, after exactly the
prompts that eval sent) teacher-forced, per token its logprob and top-k alternatives, into ``scores.parquet``
/ ``scores.json`` of an eval directory; a server that cannot score writes ``status: not_measured`` and why.

Three passes make a divergence measurement: the **reference pass** (the reference arm's server scores its own
text; where the server tokenizes, prompt and reference become ids once, stored in ``score_inputs.parquet``),
the **compared pass** (B) and the **floor pass** (a fresh launch of the reference arm). Both send the same ids
and, where the protocol can (SGLang), the reference pass's top-k ids of the question (at most
``max_asked_ids``), so KL is computed on the same ids on both sides. A server that does not score ids (asked
once, by the reference pass: :func:`_by_ids`) is scored by text, tokens keyed by :func:`text_key` in every
pass.

A pass stopped by a dead or hung server keeps what it scored (``partial: true``, ``not_measured``) and the
next pass for the same references, reference pass and top_k resumes it; a signal keeps nothing of the session.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import orjson

from harness.measure.runner import Progress, Refusals, Stop, in_turn, run, signals_to, watchdogs
from harness.results import fileio, schema
from harness.results.arrow_buffers import array, list_array, list_offsets, list_values, numbers, release
from harness.results.eval_store import PROMPTS, load_samples
from harness.results.fileio import read_json
from harness.results.prompt_store import prompt_sources
from harness.results.records import JSONObject
from harness.results.score_blocks import PassReader, QuestionRows
from harness.results.score_inputs import ScoreInputs, as_inputs, flat, of_columns
from harness.results.token_store import (
    SCORES,
    SCORES_META,
    ZSTD_LEVEL,
    NotMeasured,
    ScoresError,
    ScoresMeta,
    ScoresWriter,
    scores_schema,
    write_not_measured,
)
from harness.serving.client import Client, ClientConfig, ScoreReply, ServerGone, ServerStalled
from harness.serving.wire import (
    DEFAULT_TOP_K,
    SCORING_BATCH,
    SCORING_PARALLEL,
    Api,
    MalformedResponse,
    ScoreRequest,
    TokenScores,
)

__all__ = ["DEFAULT_MAX_ASKED_IDS", "DEFAULT_TOP_K", "INPUTS", "Reference", "ScoringOptions", "asked_cap", "asked_ids",
           "load_references", "score_pass", "score_pass_async", "text_key"]

#: The reference pass's top-k ids asked of the other passes per question (SGLang) at the default ``top_k``
DEFAULT_MAX_ASKED_IDS = 32


def asked_cap(top_k: int) -> int:
    """:data:`DEFAULT_MAX_ASKED_IDS` scaled by ``top_k`` over the default (rounded up, never more): every
    asked id costs an entry at every position of the answer."""
    return min(DEFAULT_MAX_ASKED_IDS, -(-DEFAULT_MAX_ASKED_IDS * max(int(top_k), 1) // DEFAULT_TOP_K))
#: The reference pass's token ids of every question's prompt and reference: what the other passes send.
INPUTS = "score_inputs.parquet"
#: what the other passes read of the reference pass: its top-k ids (and their logprobs, to pick the ids to ask)
REF_COLUMNS = ("top_ids", "top_logprobs")


# ------------------------------------------------------------------------------------------ references
@dataclass(frozen=True)
class Reference:
    """One question's reference: the prompt the eval sent (``prompts[prompt_sha256]``, made when asked for: a
    pass holds every question's reference, and 13k few-shot prompts whole are ~60 MiB) and the greedy completion
    it got."""

    question: int
    text: str
    #: tokens the server counted in the prompt (the eval's ``prompt_tokens``), when it said
    prompt_tokens: int | None = None
    prompt_sha256: str = ""
    prompts: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def prompt(self) -> str:
        return self.prompts[self.prompt_sha256]


class ScoringError(RuntimeError):
    """The reference eval cannot be read (no prompts, a prompt that is not the one answered)."""


def load_references(eval_dir: str | Path) -> list[Reference]:
    """The answered questions of ``eval_dir`` as references (an empty completion kept: no token to score)."""
    root = Path(eval_dir)
    # a row without its hash (or its text) cannot be checked against the answer: as good as no prompt
    prompts = {i: (sha, texts) for i, sha, texts in prompt_sources(root)}
    out = []
    for s in load_samples(root):
        if s.error is not None or s.output is None:
            continue
        p = prompts.get(s.index)
        if p is None:
            raise ScoringError(f"{root / PROMPTS} has no prompt for question {s.index}")
        if p[0] != s.prompt_sha256:
            raise ScoringError(f"{root / PROMPTS}: the prompt of question {s.index} is not the one answered "
                               "(prompt_sha256 differs)")
        out.append(Reference(s.index, s.output, s.prompt_tokens, p[0], p[1]))
    return out


def text_key(text: str | None) -> int:
    """A token's text as a non-negative int32 key, the same in every process and pass (blake2b, 31 bits).
    Distinct texts collide with probability about 2^-31 per pair; tokens of identical text are one key."""
    if text is None:
        return -1
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).digest(),
                          "little") & 0x7FFFFFFF


# ------------------------------------------------------------------------------------------ inputs file
#: A question's ids: (prompt ids, reference ids), held as arrays
Inputs = ScoreInputs
#: Texts per ``/tokenize`` request: a chunk's ids (int objects) are made arrays before the next is asked
TOKENIZE_CHUNK = 128


def _write_inputs(path: Path, rows: Mapping[int, tuple[Sequence[int], Sequence[int]]]) -> None:
    from harness.results.arrow import pa, pq

    inputs = as_inputs(rows)
    qs = sorted(inputs)
    table = pa.table({"question": array(np.asarray(qs, dtype=np.int32)),
                      "prompt_ids": list_array(*_column(inputs, qs, 0)),
                      "reference_ids": list_array(*_column(inputs, qs, 1))})
    with fileio.atomic_output(path) as f:  # a link planted at the path is refused, never written through
        # no dictionary: the prompts' shared few-shot ids are repeats zstd finds (-17 %)
        pq.write_table(table, f, compression="zstd", compression_level=ZSTD_LEVEL, use_dictionary=["question"])


def _column(inputs: ScoreInputs, qs: list[int], which: int) -> tuple[np.ndarray, Any]:
    """Id lists as an Arrow ``list<int32>`` array's parts, from numpy buffers (pyarrow's conversion of Python lists
    holds several times the ids in its builders, and imports pandas)."""
    offsets, values = flat(inputs, qs, which)
    return offsets, array(values)


#: Questions of ``score_inputs.parquet`` decoded at a time (a whole file at once: ~200 MiB for 13k questions)
INPUTS_BATCH = 256


def _read_inputs(path: Path) -> Inputs:
    """The reference pass's ids by question, :data:`INPUTS_BATCH` questions at a time (no object per id)."""
    from harness.results.arrow import pq

    # ParquetFile, not read_table: read_table imports pyarrow.dataset (33 MiB of the process's memory, for good)
    pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    out = Inputs()
    for b in pf.iter_batches(batch_size=INPUTS_BATCH, columns=["question", "prompt_ids", "reference_ids"],
                             use_threads=False):
        qs = numbers(b.column(0), np.int64)
        prompts, refs = ((list_offsets(b.column(c)), list_values(b.column(c), np.int32)) for c in (1, 2))
        of_columns(qs, prompts, refs, out)
    return out


# ------------------------------------------------------------------------------------------ asked ids
def asked_ids(top_ids: np.ndarray, top_logprobs: np.ndarray, cap: int,
              reference: np.ndarray | None = None) -> list[int]:
    """The ids to ask at every position of one question: the union of the reference pass's top-k ids (T, k),
    at most ``cap``, highest logprob first; a position's own ``reference`` token left out."""
    top_ids = np.asarray(top_ids)
    ids = top_ids.reshape(-1)
    lps = np.asarray(top_logprobs, dtype=float).reshape(-1)
    keep = ids >= 0
    if reference is not None:
        keep &= (top_ids != np.asarray(reference).reshape(-1, 1)).reshape(-1)
    ids, lps = ids[keep], lps[keep]
    if ids.size == 0 or cap <= 0:
        return []
    if ids.size > 8 * cap:  # the best 4 * cap entries (and every tie of the last) most often hold cap distinct
        # ids: ordered alone, they give the same answer as the whole (else the whole is ordered)
        cut = -np.partition(-lps, 4 * cap - 1)[4 * cap - 1]
        head = lps >= cut
        got = _first_distinct(ids[head], lps[head], cap)
        if len(got) == cap:
            return got
    return _first_distinct(ids, lps, cap)


def _first_distinct(ids: np.ndarray, lps: np.ndarray, cap: int) -> list[int]:
    """The first ``cap`` distinct ``ids`` by ``lps`` descending, ties by id."""
    order = np.lexsort((ids, -lps))  # by logprob, descending; ties by id (deterministic)
    _, first = np.unique(ids[order], return_index=True)
    best = order[np.sort(first)][:cap]
    return [int(i) for i in ids[best]]


# ------------------------------------------------------------------------------------------ options
@dataclass
class ScoringOptions:
    top_k: int = DEFAULT_TOP_K
    #: Scoring requests in flight, at most the client's ``parallel``: a server's prefill batches are full long
    #: before 1319, and each request in flight is a connection and an answer held.
    parallel: int = SCORING_PARALLEL
    #: The reference pass's directory; None: this pass IS the reference pass (it scores its own text).
    reference_scores: Path | None = None
    #: None: :func:`asked_cap` of ``top_k``
    max_asked_ids: int | None = None
    #: Questions per scoring request where the protocol takes a batch: fewer, larger requests cost less.
    batch: int = SCORING_BATCH
    progress: bool = True
    #: Polled about twice a second; a reason (e.g. "server process exited") stops the pass (ServerGone).
    abort_check: Callable[[], str | None] | None = None
    #: Recorded in scores.json (arm, role, launch, engine, ...).
    meta: ScoresMeta = field(default_factory=lambda: ScoresMeta())
    #: Wait up to this long for the server's health endpoint first (0: do not wait).
    wait_ready_s: float = 0.0

    @property
    def asked(self) -> int:
        """The ids asked per question: ``max_asked_ids``, or :func:`asked_cap` of ``top_k``."""
        return asked_cap(self.top_k) if self.max_asked_ids is None else int(self.max_asked_ids)


# ------------------------------------------------------------------------------------------ one answer
#: one answer's arrays, in :meth:`ScoresWriter.add`'s order: token_id, logprob, top_ids, top_logprobs,
#: ref_top_logprobs, text_offsets
Rows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]


def _rows(sc: TokenScores, ref_ids: Sequence[int] | None, k: int, ref_top: np.ndarray | None,
          reference_text: str, offsets: np.ndarray | None = None) -> Rows:
    """One answer as the writer's arrays: ids where the server gave ids everywhere, else text keys; this
    server's logprobs of ``ref_top`` (the reference pass's top-k ids) lined up with it; ``offsets``: the
    tokens' text offsets where the answer has no texts."""
    t = len(sc)
    dense = sc.dense_top
    by_id = dense is not None or (all(i is not None for i in sc.ids)
                                  and all(i is not None for row in sc.top_ids for i in row))
    if by_id:
        tok = np.asarray(sc.ids if t else (ref_ids or []), dtype=np.int64)
    else:
        tok = np.asarray([text_key(x) for x in sc.texts], dtype=np.int64)
    lp = np.asarray([np.nan if v is None else v for v in sc.logprobs], dtype=np.float64)
    ids = np.full((t, k), -1, np.int64)
    tlp = np.full((t, k), -np.inf)
    if dense is not None:  # the parser's arrays: no Python object per alternative
        w = min(k, dense[0].shape[1])
        ids[:, :w], tlp[:, :w] = dense[0][:, :w], dense[1][:, :w]
    for i in range(t if dense is None else 0):
        row_ids = [int(x) if x is not None else -1 for x in sc.top_ids[i]] if by_id else [
            text_key(x) for x in sc.top_texts[i]]
        w = min(k, len(row_ids))
        ids[i, :w] = row_ids[:w]
        tlp[i, :w] = sc.top_logprobs[i][:w]
    ref_lp = None
    if ref_top is not None and ref_top.shape[0] == t:
        ref_lp = np.full(ref_top.shape, np.nan)
        if sc.dense_asked is not None and sc.asked_ids:  # the asked ids' columns, looked up by id
            asked = np.asarray(sc.asked_ids, dtype=np.int64)
            order = np.argsort(asked, kind="stable")
            col = np.searchsorted(asked[order], ref_top).clip(0, asked.size - 1)
            hit = (asked[order][col] == ref_top) & (ref_top >= 0)
            got_lp = np.take_along_axis(sc.dense_asked, order[col], axis=1)
            ref_lp = np.where(hit, got_lp, np.nan)
        for i, got in enumerate(sc.id_logprobs):
            if got:
                ref_lp[i] = [got.get(int(x), np.nan) if x >= 0 else np.nan for x in ref_top[i]]
        own = (ref_top == tok[:, None]) & ~np.isnan(lp)[:, None]
        ref_lp = np.where(own, np.broadcast_to(lp[:, None], ref_top.shape), ref_lp)
    offs = offsets if offsets is not None and offsets.size == t else None
    if offs is None and t:
        if all(o is not None for o in sc.text_offsets):
            offs = np.asarray(sc.text_offsets, dtype=np.int64)
        elif all(x is not None for x in sc.texts):
            offs = _token_offsets([str(x) for x in sc.texts], reference_text)
    return tok, lp, ids, tlp, ref_lp, offs


# ------------------------------------------------------------------------------------------ the pass
class _NotScorable(Exception):
    """The server cannot score: the pass is recorded not measured, with this reason."""


async def _tokenize_all(client: Client, texts: list[str], special: bool) -> list[np.ndarray] | None:
    """Every text as int32 ids, :data:`TOKENIZE_CHUNK` texts a request; None: no list is tokenized."""
    async def ask(chunk: list[str]) -> list[np.ndarray] | None:
        got = await client.tokenize_all(chunk, special)
        return None if got is None else [np.asarray(ids, dtype=np.int32) for ids in got]

    parts = await in_turn([texts[at:at + TOKENIZE_CHUNK] for at in range(0, len(texts), TOKENIZE_CHUNK)], ask)
    return None if parts is None else [x for part in parts for x in part]


#: Ids per ``/detokenize`` request (each a text of its own in the answer)
DETOKENIZE_CHUNK = 16_384


async def _detokenize_offsets(client: Client, refs: list[Reference], inputs: Inputs,
                              paths: Sequence[str]) -> tuple[str, dict[int, np.ndarray]] | None:
    """(the first of ``paths`` that detokenizes lists, where each token of each reference starts in its text), from
    every token detokenized alone (in requests of whole questions, about :data:`DETOKENIZE_CHUNK` ids each); None
    where none does (the answers carry the texts then). A question whose token texts do not make it up has none."""
    chunks = list(_id_chunks(refs, inputs, DETOKENIZE_CHUNK))
    for path in paths:
        offsets: dict[int, np.ndarray] = {}

        async def ask(chunk: list[Reference], path: str = path, offsets: dict[int, np.ndarray] = offsets) -> bool:
            ids = [inputs.arrays(r.question)[1] for r in chunk]
            texts = await _detokenize(client, path, ids)
            at = 0
            for r, x in zip(chunk, ids, strict=True):
                if (o := _token_offsets(texts[at:at + x.size], r.text)) is not None:
                    offsets[r.question] = o
                at += x.size
            return True

        try:
            await in_turn(chunks, ask)
        except ValueError:  # a 4xx, or not one text per id: not this path (or not this server)
            continue
        return path, offsets
    return None


async def _tokenize_into(client: Client, refs: Sequence[Reference], inputs: Inputs) -> bool:
    """Each of ``refs``' prompt and reference as ids into ``inputs``; False (none stored) when the server does not
    tokenize lists."""
    prompts = await _tokenize_all(client, [r.prompt for r in refs], True)
    texts = await _tokenize_all(client, [r.text for r in refs], False) if prompts is not None else None
    if prompts is None or texts is None:
        return False
    for r, p, t in zip(refs, prompts, texts, strict=True):
        inputs[r.question] = (p, t)
    return True


#: chunks of :class:`_Feed` asked at once: ahead of the scoring requests that wait for them (two at a time fell
#: behind, each answer queued after the scoring requests in flight; eight at a time, the client read their answers
#: while the server waited for scoring requests), their ids made arrays as they come
FEED_IN_FLIGHT = 4


@dataclass
class _Feed:
    """The reference pass's ids of the questions past its first :data:`TOKENIZE_CHUNK`, asked while the first are
    scored (the server tokenizes a chunk while the client reads an answer, and the other way round: with all of
    them asked first, each side waited for the other for a fifth of the pass), a chunk and then its tokens' texts
    (``paths``: the detokenize endpoints still to try; none: the answers carry the texts)."""

    chunks: list[list[Reference]]
    todo: set[int]
    paths: tuple[str, ...]
    #: per question of ``chunks``, set once its ids are asked (not in the inputs after: it is tokenized alone)
    ready: dict[int, asyncio.Event] = field(default_factory=dict)
    #: set by the first request that waits for the feed: the requests of the first chunk go out before it (the
    #: client reading every chunk's answer at once held them back while the server had nothing to do)
    wanted: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.ready = {r.question: asyncio.Event() for chunk in self.chunks for r in chunk}

    async def wait(self, question: int) -> None:
        event = self.ready.get(question)
        if event is not None and not event.is_set():
            self.wanted.set()
            await event.wait()

    async def run(self, client: Client, plan: _Plan, stop: Stop) -> None:
        """Every chunk, :data:`FEED_IN_FLIGHT` at a time in order. The server gone stops the pass as it stops its
        scoring requests (what it scored is kept); any other error as it stopped its preparation (nothing kept)."""
        await self.wanted.wait()
        admitted = asyncio.Semaphore(FEED_IN_FLIGHT)

        async def one(chunk: list[Reference]) -> None:
            async with admitted:
                await self._chunk(client, plan, chunk)
            for r in chunk:
                self.ready[r.question].set()

        tasks = [asyncio.ensure_future(one(c)) for c in self.chunks]
        try:
            await asyncio.gather(*tasks)
        except ServerGone as e:
            stop.trip(str(e), stalled=isinstance(e, ServerStalled))
        except Exception as e:  # noqa: BLE001 - raised by the pass, as it was before its first scoring request
            stop.fail(e)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _chunk(self, client: Client, plan: _Plan, chunk: list[Reference]) -> None:
        assert plan.inputs is not None
        if not await _tokenize_into(client, chunk, plan.inputs):
            return
        asked = [r for r in chunk if r.question in self.todo]
        if not (asked and self.paths):
            return
        try:
            got = await _detokenize_offsets(client, asked, plan.inputs, self.paths)
        except ValueError:  # not one text per id of this chunk: its answers carry the texts
            return
        if got is not None:
            self.paths = (got[0],)
            plan.offsets.update(got[1])
            plan.detokenized.update(r.question for r in asked)


def _id_chunks(refs: list[Reference], inputs: Inputs, most: int) -> Iterator[list[Reference]]:
    """``refs`` in runs of whole questions of about ``most`` reference ids each (at least one question)."""
    chunk: list[Reference] = []
    n = 0
    for r in refs:
        size = inputs.sizes(r.question)[1]
        if chunk and n + size > most:
            yield chunk
            chunk, n = [], 0
        chunk.append(r)
        n += size
    if chunk:
        yield chunk


async def _detokenize(client: Client, path: str, id_lists: list[np.ndarray]) -> list[str]:
    """Every id of ``id_lists`` as its own text, by one request to ``path``; ValueError when not answered so."""
    flat_ids = [[i] for ids in id_lists for i in ids.tolist()]
    body: JSONObject = {"tokens": flat_ids, "skip_special_tokens": False}
    if client.api.model:
        body["model"] = client.api.model
    obj = await client.post_json(path, body)
    got = obj.get("text") if isinstance(obj, dict) else None
    if not (isinstance(got, list) and len(got) == len(flat_ids) and all(isinstance(x, str) for x in got)):
        raise ValueError(f"POST {path} answered no text per id")
    return got


def _token_offsets(texts: list[str], reference: str) -> np.ndarray | None:
    """Where each token's text starts in ``reference``; None unless the texts make it up exactly (a token that
    is part of a character decodes to a replacement character)."""
    if not texts or "".join(texts) != reference:
        return None
    lens = np.fromiter((len(x) for x in texts), dtype=np.int64, count=len(texts))
    return np.concatenate([[0], np.cumsum(lens)[:-1]])


async def _by_ids(client: Client, api: Api, ref: Reference, k: int) -> tuple[Api, str | None]:
    """(the protocol to score with, None) when this server tokenizes and answers one request of ``ref``'s ids
    per id; else (``api``, why the pass is scored by text). Sets ``client.api``."""
    p_ids = await client.tokenize(ref.prompt, True)
    r_ids = await client.tokenize(ref.text, False) if p_ids is not None else None
    if p_ids is None or r_ids is None:
        paths = ", ".join(f"POST {p}" for p in api.tokenize_paths) or "none"
        return api, f"the server does not tokenize (tokenize endpoints tried: {paths})"
    if not r_ids:
        return api, "the reference text of the probe question tokenizes to no token"
    cand = api.scoring_by_ids()
    req = ScoreRequest(p_ids, r_ids, top_k=k, texts=False)
    try:
        obj = await client.post_json(cand.score_path, cand.scoring_body(req))
        cand.confirm_id_scores(cand.parse_scores(obj, req), req)
    except ValueError as e:  # a 4xx, or MalformedResponse: the answer is not per id
        why = str(e).removesuffix(": this server cannot score")
        return api, f"a scoring request of token ids was not answered per id ({why})"
    client.api = cand
    return cand, None


def _digest(refs: list[Reference]) -> str:
    """What a resumed pass must have scored: the reference texts after their prompts, by question."""
    h = hashlib.sha256()
    for r in refs:
        h.update(orjson.dumps([r.question, r.prompt, r.text, r.prompt_tokens]))
    return h.hexdigest()


#: scores.json keys a resumed pass shares with the pass on disk (the reference pass by id: directories move)
_RESUME_KEYS = ("requested_top_k", "reference_pass_id", "references_digest")


@dataclass
class _Carried:
    """A pass on disk this one resumes: its scores.json, the questions it holds rows of, the ids it sent."""

    meta: ScoresMeta
    questions: set[int]
    inputs: Inputs | None


def _carried(out: Path, meta: ScoresMeta, max_asked_ids: int) -> _Carried | None:
    """The pass in ``out`` this one continues (for the same references, reference pass and top_k, with its
    rows and ids on disk); None: score afresh."""
    from harness.results.arrow import pq

    try:
        old = cast(ScoresMeta, schema.check(read_json(out / SCORES_META), schema.SCORES, out / SCORES_META))
        if (not isinstance(old.get("pass_id"), str) or any(old.get(key) != meta.get(key) for key in _RESUME_KEYS)
                or (old.get("reference_scores") is None) != (meta.get("reference_scores") is None)):
            return None
        if old.get("asked_ids", 0) not in (0, max_asked_ids) or not (out / SCORES).is_file():
            return None
        pf = pq.ParquetFile(out / SCORES)
        if not pf.schema_arrow.equals(scores_schema()):
            return None
        questions = set(np.unique(numbers(pf.read(columns=["question"]).column("question"), np.int64)).tolist())
        inputs = _read_inputs(out / INPUTS) if old.get("by_ids") and old.get("reference_scores") is None else None
    except (OSError, ValueError, schema.SchemaError):
        return None
    if inputs is not None and not questions <= set(inputs):
        return None
    return _Carried(old, questions, inputs)


async def score_pass_async(reference_eval: str | Path, client_cfg: ClientConfig, out_dir: str | Path,
                           opts: ScoringOptions | None = None) -> ScoresMeta:
    """Score the reference completions of ``reference_eval`` on the server of ``client_cfg`` into ``out_dir``
    (resuming a pass there for the same references, reference pass and top_k); what ``scores.json`` says.

    :class:`~harness.serving.client.ServerGone` when the server dies or hangs (``out_dir`` then holds a
    partial pass); :class:`~harness.measure.runner.Interrupted` on SIGINT/SIGTERM (``out_dir`` as it was
    before).
    """
    opts = opts or ScoringOptions()
    if opts.parallel < client_cfg.parallel:
        client_cfg = replace(client_cfg, parallel=max(1, int(opts.parallel)))
    out = Path(out_dir)
    ref_eval = Path(reference_eval)
    meta: ScoresMeta = {**opts.meta, "reference_eval": str(ref_eval),
                            "reference_scores": None if opts.reference_scores is None else str(opts.reference_scores),
                            "requested_top_k": int(opts.top_k), "parallel": int(client_cfg.parallel),
                            "url": client_cfg.url, "reference_pass_id": None}
    t0 = time.perf_counter()

    def not_measured(reason: str) -> ScoresMeta:
        (out / INPUTS).unlink(missing_ok=True)
        write_not_measured(out, reason, {**meta, "wall_s": time.perf_counter() - t0})
        return {**meta, "status": "not_measured", "reason": reason}

    try:
        refs = load_references(ref_eval)
    except (OSError, ValueError, ScoringError) as e:
        return not_measured(f"the reference eval {ref_eval} cannot be read: {e}")
    meta["references_digest"] = _digest(refs)
    ref_table = None  # the reference pass, read a block of questions at a time as the requests are built
    inputs: Inputs | None = None
    if opts.reference_scores is not None:
        try:
            ref_table = PassReader(opts.reference_scores, REF_COLUMNS)
            scored = set(ref_table.questions().tolist())
        except NotMeasured as e:
            return not_measured(f"the reference pass was not scored: {e.reason}")
        except (ScoresError, OSError, ValueError) as e:
            return not_measured(f"the reference pass {opts.reference_scores} is unreadable: {e}")
        meta["reference_pass_id"] = ref_table.meta.get("pass_id")
        refs = [r for r in refs if r.question in scored]
        if (Path(opts.reference_scores) / INPUTS).exists():
            inputs = _read_inputs(Path(opts.reference_scores) / INPUTS)
    if not any(r.text for r in refs):
        return not_measured(f"the reference eval {ref_eval} has no answered question with a completion to score")
    carried = _carried(out, meta, opts.asked)
    if carried is None:  # a pass is redone whole: no stale file may outlive it
        for name in (SCORES_META, SCORES, INPUTS):
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    stop = Stop()
    try:
        with signals_to(stop):
            async with Client(client_cfg) as client:
                try:
                    with watchdogs(client, stop, opts.abort_check):
                        done = await _score(client, refs, out, opts, meta, t0, ref_table, inputs, stop, carried)
                except _NotScorable as e:
                    return not_measured(str(e))
    finally:
        del ref_table, inputs
        release()  # what the pass's reads and writes freed, for the next phase's Python objects
    stop.raise_for_reason()
    assert done is not None
    return done


Result = tuple[Reference, ScoreReply | None, list[int] | None, np.ndarray | None, str | None]


@dataclass
class _Plan:
    """How a pass asks its server, learnt before its first scoring request (:func:`_prepare`)."""

    api: Api
    by_ids: bool
    inputs: Inputs | None
    #: questions whose tokens' texts came from the detokenizer, and where each of their tokens starts
    detokenized: set[int]
    offsets: dict[int, np.ndarray]
    carried: _Carried | None
    #: the reference pass's ids still to ask, while it scores
    feed: _Feed | None = None


async def _prepare(client: Client, refs: list[Reference], opts: ScoringOptions, meta: ScoresMeta,
                   ref_table: PassReader | None, inputs: Inputs | None,
                   carried: _Carried | None) -> _Plan:
    """Ask the server what the pass needs (ids or text); drop ``carried`` when it was asked otherwise."""
    if opts.wait_ready_s > 0:
        await client.wait_ready(opts.wait_ready_s)
    api = await client.prepare()
    is_reference = opts.reference_scores is None
    todo = [r for r in refs if carried is None or r.question not in carried.questions]
    probe_ref = next((r for r in todo if r.text), None) or next(r for r in refs if r.text)
    k = int(opts.top_k)
    text_reason: str | None = None
    feed: _Feed | None = None
    detokenized: set[int] = set()
    offsets: dict[int, np.ndarray] = {}
    if is_reference:
        api, text_reason = await _by_ids(client, api, probe_ref, k)
        if carried is not None and carried.meta.get("by_ids") != (text_reason is None):
            carried = None
        if text_reason is None:
            inputs = carried.inputs if carried is not None and carried.inputs is not None else Inputs()  # kept
            new = [r for r in refs if r.question not in inputs]
            # the first chunk alone: whether the server tokenizes lists; the others while the pass scores (_Feed)
            if await _tokenize_into(client, new[:TOKENIZE_CHUNK], inputs):
                # the tokens' texts by one request, so that the answers need none (3x the parsing with texts)
                asked = [r for r in todo if r.question in inputs]
                paths = tuple(api.detokenize_paths)
                got = await _detokenize_offsets(client, asked, inputs, paths) if asked else ("", {})
                if got is not None:
                    detokenized, offsets = {r.question for r in asked}, got[1]
                rest = new[TOKENIZE_CHUNK:]
                if rest:
                    feed = _Feed([rest[at:at + TOKENIZE_CHUNK] for at in range(0, len(rest), TOKENIZE_CHUNK)],
                                 {r.question for r in todo}, () if got is None else (got[0],) if got[0] else paths)
    elif inputs is not None:
        api = client.api = api.scoring_by_ids()  # the reference pass's ids: its probe below confirms them
    if inputs is None:  # by text: how this server aligns echoed logprobs
        try:
            api = await client.prepare_scoring()
        except ValueError as e:
            why = str(e) if "cannot score" in str(e) else f"{client.cfg.url} cannot score: {e}"
            raise _NotScorable(why + (f"; not by token ids either: {text_reason}" if text_reason else "")) from None
    by_ids = inputs is not None
    if carried is not None and (carried.meta.get("api") != api.name or carried.meta.get("by_ids") != by_ids):
        carried = None
    ask = api.scores_given_ids and ref_table is not None and opts.asked > 0
    meta.update({"api": api.name, "by_ids": by_ids, "by_text_reason": text_reason if not by_ids else None,
                 "echo_shift": getattr(api, "echo_shift", None), "asked_ids": opts.asked if ask else 0})
    return _Plan(api, by_ids, inputs, detokenized, offsets, carried, feed)


@dataclass
class _Asker:
    """How a pass asks its questions (by ids or by text, with the reference pass's top-k ids to ask about)."""

    client: Client
    plan: _Plan
    inputs: Inputs | None
    is_reference: bool
    k: int
    #: the reference pass's rows, a question at a time (None: this is the reference pass)
    ref_rows: QuestionRows | None
    opts: ScoringOptions
    ask: bool
    #: why the server refused a batch of scoring requests (then every later question is asked alone)
    batch_refused: str | None = None

    @property
    def batches(self) -> bool:
        return (self.plan.by_ids and self.plan.api.scores_in_batches and self.opts.batch > 1
                and self.batch_refused is None)

    async def many(self, refs: Sequence[Reference]) -> list[Result]:
        """Several questions' results in order, in one request where the server takes a batch (a 4xx refusal:
        one question per request from then on, ``batch_refused`` saying why)."""
        out: dict[int, Result] = {}
        asked: list[tuple[int, ScoreRequest, list[int] | None, np.ndarray | None]] = []
        for i, ref in enumerate(refs):
            try:
                req, ref_ids, top = await self.request(ref)
            except ValueError as e:
                out[i] = (ref, None, None, None, str(e))
                continue
            if req is None:
                out[i] = (ref, None, ref_ids, None, None)
            else:
                asked.append((i, req, ref_ids, top))
        if asked:
            reqs = [a[1] for a in asked]
            replies = await self._score(reqs)
            for (i, _, ref_ids, top), reply in zip(asked, replies, strict=True):
                out[i] = (refs[i], reply, ref_ids, top, None)
        return [out[i] for i in range(len(refs))]

    async def request(self, ref: Reference) -> tuple[ScoreRequest | None, list[int] | None, np.ndarray | None]:
        """The scoring request of one question (None: an empty reference), the reference ids it sends and the
        reference pass's top-k ids at its positions; ValueError when it cannot be asked."""
        ref_ids = None
        if self.plan.feed is not None:  # its ids asked first
            await self.plan.feed.wait(ref.question)
        try:  # taken first, whatever follows: a block of the reference pass is let go once all its questions were
            table = None if self.ref_rows is None else self.ref_rows.take(ref.question)
        except ScoresError as e:
            raise ValueError(f"the reference pass is unreadable: {e}") from None
        if self.plan.by_ids:
            assert self.inputs is not None
            if self.is_reference and ref.question not in self.inputs:
                p_ids = await self.client.tokenize(ref.prompt, True)
                r_ids = await self.client.tokenize(ref.text, False)
                if p_ids is None or r_ids is None:
                    raise ValueError("the server stopped tokenizing")
                self.inputs[ref.question] = (p_ids, r_ids)
            p_ids, r_ids = self.inputs[ref.question]  # lists only while the request is in flight
            ref_ids = r_ids
            if not r_ids:
                return None, [], None
            prompt: str | list[int] = p_ids
            reference: str | list[int] = r_ids
            prompt_tokens = None
        else:
            if not ref.text:
                return None, [], None
            prompt, reference, prompt_tokens = ref.prompt, ref.text, ref.prompt_tokens
        top, want = None, None
        if table is not None:
            top = table.top_ids
            want = asked_ids(top, table.top_logprobs, self.opts.asked, table.token_id) if self.ask else None
        # only the reference pass needs the tokens' texts (where the first diverging token starts); the request is
        # made once (each one checks its fields)
        texts = table is None and (not self.plan.by_ids or ref.question not in self.plan.detokenized)
        req = ScoreRequest(prompt, reference, top_k=self.k, prompt_tokens=prompt_tokens, token_ids=want, texts=texts)
        self.plan.api.scoring_body(req)  # raises ValueError now if this request cannot be asked
        return req, ref_ids, top

    async def _score(self, reqs: list[ScoreRequest]) -> list[ScoreReply]:
        if len(reqs) > 1 and self.batches:
            try:
                replies = await self.client.score_batch(reqs)
            except ValueError:  # not one batch (some ask for texts, some not): each alone
                return list(await asyncio.gather(*(self.client.score(r) for r in reqs)))
            status = replies[0].status
            if status is None or not 400 <= status < 500:
                return replies
            self.batch_refused = (f"{self.client.cfg.url} refused a batch of {len(reqs)} scoring requests "
                                  f"({replies[0].error}): one question per request")
        return list(await asyncio.gather(*(self.client.score(r) for r in reqs)))

    async def probe(self, ref: Reference) -> Result:
        """One question alone, first: a server that cannot score says so here (not measured)."""
        try:
            req, ref_ids, top = await self.request(ref)
        except ValueError as e:
            raise _NotScorable(f"cannot ask {self.client.cfg.url} to score: {e}") from None
        assert req is not None
        t = time.perf_counter()
        try:
            obj = await self.client.post_json(self.plan.api.score_path, self.plan.api.scoring_body(req))
        except ValueError as e:  # a 4xx: the server refuses scoring requests
            raise _NotScorable(str(e)) from None
        try:
            scores = self.plan.api.parse_scores(obj, req)
        except MalformedResponse as e:
            raise _NotScorable(f"{self.client.cfg.url} answers a scoring request without per-token logprobs "
                               f"({e}): this server cannot score") from None
        return ref, ScoreReply(latency_s=time.perf_counter() - t, attempts=1, scores=scores), ref_ids, top, None


async def _score(client: Client, refs: list[Reference], out: Path, opts: ScoringOptions, meta: ScoresMeta,
                 t0: float, ref_table: PassReader | None, inputs: Inputs | None,
                 stop: Stop, carried: _Carried | None) -> ScoresMeta | None:
    """The pass; None when stopped before its first scoring request or by a signal (nothing changed on
    disk)."""
    plan = await stop.race(_prepare(client, refs, opts, meta, ref_table, inputs, carried))
    if plan is None:
        return None
    by_ids, inputs, carried = plan.by_ids, plan.inputs, plan.carried
    if carried is None:
        for name in (SCORES_META, SCORES):  # asked otherwise than the pass on disk: redone whole
            (out / name).unlink(missing_ok=True)
    is_reference = opts.reference_scores is None
    if by_ids and not is_reference:
        assert inputs is not None
        refs = [r for r in refs if r.question in inputs]
    k = int(opts.top_k)
    ask = bool(meta.get("asked_ids"))
    meta.update({"pass_id": uuid.uuid4().hex if carried is None else str(carried.meta.get("pass_id")),
                 "resumes": 0 if carried is None else int(carried.meta.get("resumes") or 0) + 1})
    feeding = None if plan.feed is None else asyncio.ensure_future(plan.feed.run(client, plan, stop))

    def scorable(r: Reference) -> bool:  # a question with a reference token: one the pass is to score
        return bool(inputs.sizes(r.question)[1] if by_ids and inputs is not None and r.question in inputs else r.text)

    planned = {r.question for r in refs if scorable(r)}  # (made again once every question's ids are in)
    meta["questions_planned"] = len(planned)

    todo = [r for r in refs if carried is None or r.question not in carried.questions]
    ref_rows = None if ref_table is None else QuestionRows(ref_table, (r.question for r in todo))
    asker = _Asker(client, plan, inputs, is_reference, k, ref_rows, opts, ask)
    try:
        probe_ref = await stop.race(_probe_ref(todo, plan.feed, scorable))
        return await _scored_pass(client, refs, todo, out, opts, meta, t0, plan, asker, probe_ref, planned, stop,
                                  carried, scorable, feeding)
    finally:
        if feeding is not None:
            feeding.cancel()
            await asyncio.gather(feeding, return_exceptions=True)


async def _probe_ref(todo: list[Reference], feed: _Feed | None,
                     scorable: Callable[[Reference], bool]) -> Reference | None:
    """The first question of ``todo`` with a reference token (its ids asked first, where they are still to come)."""
    for r in todo:
        if r.text:
            if feed is not None:
                await feed.wait(r.question)
            if scorable(r):
                return r
    return None


async def _scored_pass(client: Client, refs: list[Reference], todo: list[Reference], out: Path, opts: ScoringOptions,
                       meta: ScoresMeta, t0: float, plan: _Plan, asker: _Asker, probe_ref: Reference | None,
                       planned: set[int], stop: Stop, carried: _Carried | None, scorable: Callable[[Reference], bool],
                       feeding: asyncio.Future[None] | None) -> ScoresMeta | None:
    """:func:`_score`'s requests and what they store, from its probe on."""
    k = int(opts.top_k)
    progress = Progress(len(refs), opts.progress, f"scoring {out.parent.name}/{out.name}",
                        initial=len(refs) - len(todo), in_flight=lambda: client.in_flight)
    refusals: Refusals[Result] = Refusals(client.cfg.url, stop)  # unanswered: errors if the server lives
    unanswered: set[int] = set()  # released as errors: missing after all if the server turns out gone
    previous_wall = float(carried.meta.get("wall_s") or 0.0) if carried is not None else 0.0
    try:
        with ScoresWriter(out, top_k=k, meta=meta,
                          carry=None if carried is None else out / SCORES) as writer:

            async def scored(chunk: Sequence[Reference]) -> None:
                # stored by the task that got the answers: what waits is compact arrays, not parsed JSON
                async with admitted:
                    got = await asker.many(chunk)
                for res in got:
                    keep(res)

            def keep(res: Result) -> None:
                reply, problem = res[1], res[4]
                if (problem is not None or (reply is not None and reply.error is not None)) \
                        and stop.after_failure(opts.abort_check):
                    return  # failed because the pass stops: missing (asked again by a resume), not an error
                if reply is not None and reply.lost:
                    refusals.hold(res, reply.refused)
                    return
                if not stop.tripped:  # the server answers again: the unanswered ones were request errors
                    for held in refusals.release():
                        unanswered.add(held[0].question)
                        _store(writer, held, progress, k, plan.offsets)
                _store(writer, res, progress, k, plan.offsets)

            first = None if probe_ref is None else await stop.race(asker.probe(probe_ref))
            if first is not None:
                _store(writer, first, progress, k, plan.offsets)
            rest = [r for r in todo if r is not probe_ref]
            size = max(1, int(opts.batch)) if asker.batches else 1
            admitted = asyncio.Semaphore(in_flight(int(client.cfg.parallel), size))  # requests built when sendable
            tasks = [] if stop.tripped else [asyncio.ensure_future(scored(rest[at:at + size]))
                                             for at in range(0, len(rest), size)]

            async def every() -> bool:  # a task of its own: cancelled by a stop, as a gathering future is not
                await asyncio.gather(*tasks)
                return True

            try:
                with progress.ticking():
                    finished = await stop.race(every()) is not None
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            if stop.signum is not None or stop.error is not None:
                writer.abort()  # a signal keeps nothing of this session: the pass on disk stays as it was
                return None
            if finished and not stop.tripped:  # (the last request may be the one that tripped it)
                for held in refusals.release():
                    _store(writer, held, progress, k, plan.offsets)
            if feeding is not None and finished and not stop.tripped:
                await feeding  # done: every question's request was made
                planned = {r.question for r in refs if scorable(r)}
                writer.meta["questions_planned"] = len(planned)
            if opts.reference_scores is None and plan.inputs is not None:
                _write_inputs(out / INPUTS, plan.inputs)
            if stop.tripped:  # no HTTP answer while the server was dying: missing, asked again by a resume
                for q in unanswered:
                    writer.errors.pop(q, None)
            missing = planned - writer.questions - set(writer.errors)
            writer.meta.update({"wall_s": previous_wall + time.perf_counter() - t0, "missing": len(missing),
                                "batch": size, "batch_refused": asker.batch_refused})
            writer.close(partial=_partial_reason(len(planned), len(writer.questions), len(missing), stop.reason)
                         if stop.tripped and missing else None)
    finally:
        progress.close()
    written: ScoresMeta = read_json(out / SCORES_META)  # what the writer just wrote
    return written


#: At most this many questions are asked at once whatever ``parallel`` and ``batch``: each costs ~35 KiB in
#: flight, and a server's prefill batches are full long before (256 GSM8K questions are ~250k prompt tokens)
MAX_QUESTIONS_IN_FLIGHT = 256


def in_flight(parallel: int, batch: int) -> int:
    """Requests in flight at once: ``parallel``, at most :data:`MAX_QUESTIONS_IN_FLIGHT` questions' worth."""
    return max(1, min(int(parallel), MAX_QUESTIONS_IN_FLIGHT // max(1, int(batch))))


def _partial_reason(planned: int, scored: int, missing: int, why: str | None) -> str:
    return (f"partial pass: {scored} of {planned} questions scored, {missing} missing when it stopped "
            f"({why}); rerun to score the rest")


def _store(writer: ScoresWriter, res: Result, progress: Progress, k: int, offsets: dict[int, np.ndarray]) -> None:
    ref, reply, ref_ids, top, problem = res
    if problem is not None:
        writer.record_error(ref.question, problem)
        progress.update(error=True)
        return
    if reply is None:  # an empty completion: nothing to score
        progress.update(error=False)
        return
    if reply.error is not None or reply.scores is None:
        writer.record_error(ref.question, reply.error or "no scores")
        progress.update(error=True)
        return
    rows = _rows(reply.scores, ref_ids, k, top, ref.text, offsets.get(ref.question))
    if rows[0].size:
        writer.add(ref.question, *rows)
    progress.update(error=False)


def score_pass(*args: Any, **kwargs: Any) -> ScoresMeta:
    """Synchronous wrapper of :func:`score_pass_async`."""
    return run(score_pass_async(*args, **kwargs))
