"""The wire protocols a server speaks (SGLang's native API, OpenAI completions, vLLM's superset of it, OpenAI
chat): one object per protocol, chosen once by :func:`for_api`, builds the request bodies and parses the
answers; no I/O.

Sampling params are always in SGLang's vocabulary (the recipe); :class:`OpenAIApi` and :class:`ChatApi` map
the fields their API has plus the recipe's :data:`OPENAI_EXTRAS`; :class:`VLLMApi` sends every field vLLM
takes (it fills an omitted one from the model's ``generation_config.json``).
"""

from __future__ import annotations

import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any, ClassVar, cast

import orjson

from harness.results.records import JSONObject
from harness.serving.plausible import (
    LOGPROB_ROUNDOFF,
    array_problem,
    asked_problem,
    dense_problem,
    logprob_problem,
    top_problem,
)
from harness.util.ranges import problems, ranged

if TYPE_CHECKING:  # numpy is imported where answers are parsed: a simulator or an eval need not load it
    import numpy as np


class MalformedResponse(ValueError):
    """A 2xx response body without the protocol's shape (a proxy's error page, a torn body, ...)."""


#: How every error begins for an answer to another request (a server or proxy that mixes answers up)
NOT_THIS_REQUEST = "not the answer to this request"


@dataclass(frozen=True)
class Generation:
    """What one generation request returned."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    #: a chat server's ``reasoning_content`` / ``reasoning``, apart from the answer
    reasoning: str | None = None


#: Alternatives per reference token a scoring pass asks each server for (``divergence.top_k``).
DEFAULT_TOP_K = 20
#: Scoring requests in flight at once (``divergence.parallel``; at most the client's ``parallel``).
SCORING_PARALLEL = 128
#: Questions per scoring request where the protocol takes a batch (``divergence.batch``).
SCORING_BATCH = 16


@dataclass(frozen=True)
class ScoreRequest:
    """Teacher-forced scoring of ``reference`` after ``prompt``: per reference token, its logprob and the
    ``top_k`` most likely tokens there. ``prompt`` and ``reference`` are both text or both token ids (ids make
    two servers score exactly the same tokens). SGLang only: ``prompt_tokens`` (required with text: the
    server's token count of ``prompt``, so logprobs start at the reference), ``token_ids`` (also these ids'
    logprobs at every position) and ``texts`` (also each token's text)."""

    prompt: str | Sequence[int]
    reference: str | Sequence[int]
    #: 0 asks for no alternatives (a valid request; the divergence asks for at least 1: ``divergence.top_k``)
    top_k: int = ranged(DEFAULT_TOP_K, 0, whole=True)
    prompt_tokens: int | None = ranged(None, 0, whole=True)
    token_ids: Sequence[int] | None = None
    texts: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.prompt, str) != isinstance(self.reference, str):
            raise ValueError("prompt and reference must both be text or both be token ids")
        wrong = problems(self)
        if wrong:
            raise ValueError(wrong[0])

    @property
    def by_ids(self) -> bool:
        return not isinstance(self.prompt, str)


@dataclass
class TokenScores:
    """Scores of the reference tokens, one entry per token in every list: the token (None where not given),
    its logprob given all before it (None where none is given), the top-k alternatives most likely first,
    SGLang's asked ids' ``{id: logprob}``, where it starts in the reference text (``input_tokens``: the
    whole input's count)."""

    ids: list[int | None] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    top_texts: list[list[str | None]] = field(default_factory=list)
    id_logprobs: list[dict[int, float]] = field(default_factory=list)
    text_offsets: list[int | None] = field(default_factory=list)
    input_tokens: int | None = None
    #: ``top_ids`` and ``top_logprobs`` as (T, k) arrays, when the parser built them so (lists made on demand)
    dense_top: tuple[np.ndarray, np.ndarray] | None = None
    #: the asked ids' logprobs as (T, m), column j for ``asked_ids[j]``, when so read (``id_logprobs`` empty)
    dense_asked: np.ndarray | None = None
    asked_ids: tuple[int, ...] = ()
    _top_ids: list[list[int | None]] | None = field(default=None, repr=False)
    _top_logprobs: list[list[float]] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.logprobs)

    @property
    def top_ids(self) -> list[list[int | None]]:
        if self._top_ids is None:
            self._top_ids = self.dense_top[0].tolist() if self.dense_top is not None else []
        return self._top_ids

    @property
    def top_logprobs(self) -> list[list[float]]:
        if self._top_logprobs is None:
            self._top_logprobs = self.dense_top[1].tolist() if self.dense_top is not None else []
        return self._top_logprobs

    def add(self, token_id: int | None, text: str | None, logprob: float | None,
            top: Sequence[tuple[int | None, str | None, float]], id_logprobs: dict[int, float] | None = None,
            offset: int | None = None) -> None:
        self.ids.append(token_id)
        self.texts.append(text)
        self.logprobs.append(logprob)
        self.top_ids.append([t[0] for t in top])
        self.top_texts.append([t[1] for t in top])
        self.top_logprobs.append([t[2] for t in top])
        self.id_logprobs.append(id_logprobs or {})
        self.text_offsets.append(offset)


# ---------------------------------------------------------------------------------------- protocols
class Api(ABC):
    """One wire protocol (immutable): POST ``generate_path`` / ``score_path``; GET ``health_path`` answers 200
    when the server serves."""

    name: ClassVar[str]
    generate_path: ClassVar[str]
    score_path: ClassVar[str]
    health_path: ClassVar[str]
    #: GET: the served models, when the protocol needs a model name in each request.
    models_path: ClassVar[str | None] = None
    #: ``health_path`` answers 200 only once the server can generate (else a 1-token completion shows it)
    health_means_ready: ClassVar[bool] = False
    #: The server's own generation endpoint takes SGLang's request fields (e.g. ``return_routed_experts``).
    native_sglang: ClassVar[bool] = False
    #: POST ``{"prompt", "add_special_tokens"}`` -> ``{"tokens": [...]}``, tried in order (none: by text)
    tokenize_paths: ClassVar[tuple[str, ...]] = ("/tokenize", "/v1/tokenize")
    #: POST ``{"tokens": [[id], ...], "skip_special_tokens": false}`` -> ``{"text": [...]}``, tried in order
    detokenize_paths: ClassVar[tuple[str, ...]] = ()
    #: A scoring request can ask for given ids' logprobs at every position (:attr:`ScoreRequest.token_ids`)
    scores_given_ids: ClassVar[bool] = False
    #: The prompt is sent as a chat message (the server applies its chat template), not as raw text.
    chat: ClassVar[bool] = False
    #: Several scoring requests by ids go in one body, answered in order (:meth:`batch_scoring_body`).
    scores_in_batches: ClassVar[bool] = False

    @property
    def model(self) -> str | None:
        """The model name sent in requests (None: none)."""
        return None

    @property
    def needs_model(self) -> bool:
        """True until a model name is known, for a protocol that sends one."""
        return False

    def with_model_listing(self, listing: Any) -> Api:
        """This protocol with the model taken from the ``models_path`` response."""
        return self

    @abstractmethod
    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        """The request for one generation of ``prompt`` with SGLang-style ``sampling`` params."""

    @abstractmethod
    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        """The request sent once before a batch, to prime the prefix cache with the few-shot block."""

    @abstractmethod
    def parse_generation(self, obj: Any) -> Generation:
        """The generation in a 2xx response body (raises :class:`MalformedResponse`)."""

    @abstractmethod
    def scoring_body(self, req: ScoreRequest) -> JSONObject:
        """The teacher-forced scoring request for ``req`` (ValueError if this protocol cannot ask it)."""

    def decode_scores(self, raw: bytes, req: ScoreRequest) -> TokenScores | None:
        """The scores read straight from the answer's bytes, where faster; None: :meth:`parse_scores`."""
        return None

    def batch_scoring_body(self, reqs: Sequence[ScoreRequest]) -> JSONObject:
        """Several scoring requests in one body (ValueError where the protocol takes one per body)."""
        raise ValueError(f"the {self.name} protocol takes one scoring request per body")

    def decode_batch_scores(self, raw: bytes, reqs: Sequence[ScoreRequest]) -> list[TokenScores] | None:
        """:meth:`decode_scores` of a batch's answer; None: :meth:`parse_batch_scores`."""
        return None

    def parse_batch_scores(self, obj: Any, reqs: Sequence[ScoreRequest]) -> list[TokenScores]:
        """The scores of each request of a batch, in order (raises :class:`MalformedResponse`)."""
        raise MalformedResponse(f"the {self.name} protocol takes one scoring request per body")

    @abstractmethod
    def parse_scores(self, obj: Any, req: ScoreRequest) -> TokenScores:
        """The reference tokens' scores in a 2xx answer to :meth:`scoring_body` (or MalformedResponse)."""

    def scoring_by_ids(self) -> Api:
        """This protocol asking id scoring requests so the answers are per id (OpenAI servers: vLLM's
        ``prompt_logprobs``), to be confirmed by one request (:meth:`confirm_id_scores`)."""
        return self

    @staticmethod
    def confirm_id_scores(scores: TokenScores, req: ScoreRequest) -> None:
        """MalformedResponse unless ``scores`` answer the id request ``req`` token for token: the same ids, a
        logprob for each (but a first token that has no context)."""
        want = [int(x) for x in req.reference]
        if scores.ids != want:
            got = scores.ids[:8]
            raise MalformedResponse(f"the answer scores {len(scores)} token(s) {got}... for a reference of "
                                    f"{len(want)} ids {want[:8]}...")
        missing = [i for i, v in enumerate(scores.logprobs) if v is None and (i or len(req.prompt))]
        if missing:
            raise MalformedResponse(f"no logprob for {len(missing)} of {len(want)} reference ids (first at "
                                    f"{missing[0]})")

    def reply_tokens(self, body: Mapping[str, Any]) -> int:
        """The most token entries (a token, or a listed alternative) an answer to ``body`` can hold: what
        bounds its size. Here a request that generates nothing (``/tokenize``, ``/detokenize``)."""
        return _length(body.get("prompt", body.get("text", body.get("tokens"))))

    def scoring_probe(self, text: str) -> JSONObject | None:
        """A greedy one-token generation of ``text`` to learn how this server aligns echoed logprobs
        (:meth:`with_scoring_probe`); None when the protocol needs no probe."""
        return None

    def with_scoring_probe(self, text: str, generation: Any, scoring: Any) -> Api:
        """This protocol, aligned by the answers to :meth:`scoring_probe` and to the scoring of its text."""
        return self


@dataclass(frozen=True)
class SGLangApi(Api):
    """SGLang's native API: ``POST /generate`` with ``text`` and ``sampling_params``."""

    name: ClassVar[str] = "sglang"
    generate_path: ClassVar[str] = "/generate"
    score_path: ClassVar[str] = "/generate"
    health_path: ClassVar[str] = "/health_generate"
    health_means_ready: ClassVar[bool] = True
    native_sglang: ClassVar[bool] = True
    scores_given_ids: ClassVar[bool] = True
    scores_in_batches: ClassVar[bool] = True
    #: ``POST /detokenize`` takes a list of id lists and returns one text each (``OpenAIServingDetokenize``)
    detokenize_paths: ClassVar[tuple[str, ...]] = ("/detokenize", "/v1/detokenize")

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        return {"text": prompt, "sampling_params": {k: v for k, v in sampling.items() if k != "openai_extras"}}

    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        """SGLang's frontend byte for byte (``RuntimeEndpoint.cache_prefix``): the shots, no new token."""
        return {"text": shots, "sampling_params": {"max_new_tokens": 0}}

    def parse_generation(self, obj: Any) -> Generation:
        if isinstance(obj, list) and obj:  # n > 1 or batched: we always send one
            obj = obj[0]
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise MalformedResponse("response has no 'text' field")
        meta = _object(obj.get("meta_info"), "meta_info")
        fr = meta.get("finish_reason")
        finish = _finish(fr.get("type") if isinstance(fr, dict) else fr, "meta_info.finish_reason")
        return Generation(obj["text"], finish, _count(meta.get("prompt_tokens"), "meta_info.prompt_tokens"),
                          _count(meta.get("completion_tokens"), "meta_info.completion_tokens"))

    def reply_tokens(self, body: Mapping[str, Any]) -> int:
        """``max_new_tokens``; with ``return_logprob`` each input and output token, with its top-k and asked ids."""
        sampling = body.get("sampling_params")
        if not isinstance(sampling, Mapping):
            return super().reply_tokens(body)
        new = _int(sampling.get("max_new_tokens"), 128)  # SGLang's default
        if not body.get("return_logprob"):
            return new
        ids = body.get("input_ids")
        if isinstance(ids, list) and ids and isinstance(ids[0], list):  # a batch: the sum of its requests
            return sum(self.reply_tokens({**body, "input_ids": x, "top_logprobs_num": _nth(body, "top_logprobs_num", i),
                                          "token_ids_logprob": _nth(body, "token_ids_logprob", i)})
                       for i, x in enumerate(ids))
        per = 1 + _int(body.get("top_logprobs_num"), 0) + _length(body.get("token_ids_logprob"))
        return (_length(body.get("input_ids", body.get("text"))) + new) * per

    @staticmethod
    def _start(req: ScoreRequest) -> tuple[int, int]:
        """(``logprob_start_len``, entries to skip). SGLang's entry 0 is always ``null``, so scoring after a
        P-token prompt starts at P - 1 and skips it; with an empty prompt the first token has no logprob."""
        if req.by_ids:
            p = len(req.prompt)
        elif req.prompt_tokens is None:
            raise ValueError("SGLang scoring of text needs prompt_tokens (the prompt's length in tokens)")
        else:
            p = req.prompt_tokens
        return (p - 1, 1) if p > 0 else (0, 0)

    def scoring_body(self, req: ScoreRequest) -> JSONObject:
        """``input_ids`` (or ``text``), no new token, logprobs from the first reference token on."""
        start, _ = self._start(req)
        body: JSONObject = ({"input_ids": [*req.prompt, *req.reference]} if req.by_ids
                                else {"text": str(req.prompt) + str(req.reference)})
        body.update({"sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                     "logprob_start_len": start, "top_logprobs_num": req.top_k,
                     "return_text_in_logprobs": req.texts})
        if req.token_ids is not None:
            body["token_ids_logprob"] = list(req.token_ids)
        return body

    def batch_scoring_body(self, reqs: Sequence[ScoreRequest]) -> JSONObject:
        """Several scoring requests in one ``/generate`` body, answered by a JSON list in order (SGLang's
        ``GenerateReqInput``: a value per item, one ``sampling_params`` and ``return_text_in_logprobs``)."""
        if not reqs or any(not r.by_ids for r in reqs) or len({r.texts for r in reqs}) != 1:
            raise ValueError("a scoring batch is one or more requests by token ids, all with or all without texts")
        asked = [r.token_ids is not None for r in reqs]
        if any(asked) and not all(asked):
            raise ValueError("a scoring batch asks ids of every request or of none")
        body: JSONObject = {"input_ids": [[*r.prompt, *r.reference] for r in reqs],
                            "sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                            "logprob_start_len": [self._start(r)[0] for r in reqs],
                            "top_logprobs_num": [r.top_k for r in reqs],
                            "return_text_in_logprobs": reqs[0].texts}
        if all(asked):
            body["token_ids_logprob"] = [list(r.token_ids or []) for r in reqs]
        return body

    def decode_scores(self, raw: bytes, req: ScoreRequest) -> TokenScores | None:
        """An answer without token texts read by numpy: the three logprob arrays cut out and parsed as flat
        numbers, the rest as JSON; None unless every check of :meth:`_decode` holds."""
        got = self._decode(raw, [req], batched=False)
        return None if got is None else got[0]

    def decode_batch_scores(self, raw: bytes, reqs: Sequence[ScoreRequest]) -> list[TokenScores] | None:
        """:meth:`decode_scores` of a batch's answer (a JSON list in order); MalformedResponse when an answer
        is not its request's: the error of every request of the batch."""
        return self._decode(raw, reqs, batched=True)

    def parse_batch_scores(self, obj: Any, reqs: Sequence[ScoreRequest]) -> list[TokenScores]:
        """:meth:`parse_scores` of a batch's answer: a list of exactly one answer per request, in order."""
        if not isinstance(obj, list) or len(obj) != len(reqs):
            n = len(obj) if isinstance(obj, list) else "not a list of"
            raise MalformedResponse(f"{NOT_THIS_REQUEST}: {n} answers to a batch of {len(reqs)} scoring requests")
        out = []
        for i, (item, req) in enumerate(zip(obj, reqs, strict=True)):
            if not isinstance(item, dict):
                raise MalformedResponse(f"answer {i} of a scoring batch is not an object")
            try:
                out.append(self.parse_scores(item, req))
            except MalformedResponse as e:
                raise MalformedResponse(f"answer {i} of a scoring batch: {e}") from None
        return out

    def _decode(self, raw: bytes, reqs: Sequence[ScoreRequest], batched: bool) -> list[TokenScores] | None:
        if any(r.texts or not r.by_ids for r in reqs):
            return None
        n = len(reqs)
        cuts: dict[str, list[tuple[int, int]]] = {}
        for key, depth in _SGLANG_ARRAYS:
            needle, at = b'"' + key.encode() + b'":', 0
            found: list[tuple[int, int]] = []
            while (span := _array_extent(raw, needle, depth, at)) is not None and len(found) <= n:
                found.append(span)
                at = span[1]
            if found:
                cuts[key] = found
        if any(len(v) != n for v in cuts.values()) or "input_token_logprobs" not in cuts \
                or "input_top_logprobs" not in cuts:
            return None
        spans = sorted(x for v in cuts.values() for x in v)
        rest, at = [], 0
        for a, b in spans:
            if a < at:
                return None
            rest += [raw[at:a], b"null"]
            at = b
        rest.append(raw[at:])
        body = b"".join(rest)  # small: the arrays are out
        if any(body.count(b'"' + key.encode() + b'":') != n for key in cuts):
            return None  # a key twice: the careful path reads what the JSON says
        try:
            obj = loads_body(body)
        except ValueError:
            return None
        if batched:
            if not isinstance(obj, list):
                return None
            if len(obj) != n:
                raise MalformedResponse(f"{NOT_THIS_REQUEST}: {len(obj)} answers to a batch of {n} scoring requests")
        items = obj if batched else [obj]
        got_metas = [x.get("meta_info") if isinstance(x, dict) else None for x in items]
        if any(not isinstance(m, dict) or any(m.get(k, 0) is not None for k in cuts) for m in got_metas):
            return None  # the arrays were not meta_info's own
        metas = cast(list[dict[str, Any]], got_metas)
        # each answer holds each key once and the spans are in order: the i-th span of a key is the i-th answer's
        flat = bytearray(raw.translate(_NULL_TO_NUMBER))
        together = _decode_together(raw, flat, reqs, metas, cuts, [self._start(r) for r in reqs])
        if together is not None:
            return together
        out = []
        for i, (req, meta) in enumerate(zip(reqs, metas, strict=True)):
            got = self._decode_one(raw, flat, req, meta, {k: v[i] for k, v in cuts.items()})
            if isinstance(got, str):
                raise MalformedResponse(got if not batched else f"answer {i} of a scoring batch: {got}")
            if got is None:
                return None
            out.append(got)
        return out

    def _decode_one(self, raw: bytes, flat: bytearray, req: ScoreRequest, meta: dict[str, Any],
                    cut: dict[str, tuple[int, int]]) -> TokenScores | str | None:
        """One answer's arrays at ``cut`` read by numpy; a problem (the answer is impossible or not this
        request's), or None when the careful path must read it."""
        import numpy as np
        _, skip = self._start(req)
        rows = _pairs(raw, flat, cut["input_token_logprobs"], skip)
        if rows is None or rows.shape[0] != skip + len(req.reference):
            return None
        n_rows, t = rows.shape[0], rows.shape[0] - skip
        rows = rows[skip:]
        tops = _triples(raw, flat, cut["input_top_logprobs"], skip, t)
        if tops is None or not _ids_ok(rows[:, 1]):
            return None
        asked = None
        if "input_token_ids_logprobs" in cut:
            asked = _triples(raw, flat, cut["input_token_ids_logprobs"], skip, t)
            want = np.asarray(list(req.token_ids or []), dtype=np.float64)
            if asked is None or asked.shape[1] != want.size or not (asked[:, :, 1] == want).all():
                return None  # the careful path names what is wrong
        elif req.token_ids:
            return None
        lp, ids = rows[:, 0], rows[:, 1].astype(np.int64)
        top_lp, top_ids = tops[:, :, 0], tops[:, :, 1].astype(np.int64)
        total, id_list = meta.get("prompt_tokens"), ids.tolist()
        problem = (self._not_this_request(req, id_list, total, n_rows)
                   or dense_problem(lp, top_lp, top_ids, req.top_k, None if asked is None else asked[:, :, 0]))
        if problem is not None:
            return problem
        return TokenScores(ids=id_list, texts=[None] * t, logprobs=lp.tolist(),
                           top_texts=[[None] * top_ids.shape[1]] * t, id_logprobs=[], text_offsets=[None] * t,
                           input_tokens=total if isinstance(total, int) and not isinstance(total, bool) else None,
                           dense_top=(top_ids, top_lp),
                           dense_asked=None if asked is None else asked[:, :, 0],
                           asked_ids=tuple(int(x) for x in (req.token_ids or [])))

    def parse_scores(self, obj: Any, req: ScoreRequest) -> TokenScores:
        """``meta_info.input_token_logprobs`` (``[logprob|null, id, text|null]`` per input position from
        ``logprob_start_len`` on), ``input_top_logprobs`` and ``input_token_ids_logprobs`` (per position
        ``null`` or a list of such entries), ``prompt_tokens`` (the whole input)."""
        if isinstance(obj, list) and obj:
            obj = obj[0]
        meta = obj.get("meta_info") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("input_token_logprobs"), list):
            raise MalformedResponse("response has no meta_info.input_token_logprobs")
        rows = meta["input_token_logprobs"]
        tops = meta.get("input_top_logprobs") or [None] * len(rows)
        by_id = meta.get("input_token_ids_logprobs") or [None] * len(rows)
        if not isinstance(tops, list) or not isinstance(by_id, list) or not len(tops) == len(by_id) == len(rows):
            raise MalformedResponse("meta_info input logprob arrays differ in length")
        _, skip = self._start(req)
        if len(rows) < skip:
            raise MalformedResponse("meta_info.input_token_logprobs is empty")
        n_rows = len(rows)
        rows, tops, by_id = rows[skip:], tops[skip:], by_id[skip:]
        if req.by_ids and len(rows) != len(req.reference):
            raise MalformedResponse(f"{len(rows)} input logprobs for a reference of {len(req.reference)} tokens")
        total = meta.get("prompt_tokens")
        out = _dense_sglang(rows, tops, by_id, req, total if isinstance(total, int) else None)
        if out is None:
            out = _sglang_entries(rows, tops, by_id, req, total if isinstance(total, int) else None)
        problem = self._not_this_request(req, out.ids, total, n_rows)
        if problem is not None:
            raise MalformedResponse(problem)
        return out

    def _not_this_request(self, req: ScoreRequest, ids: Sequence[int | None], total: Any,
                          n_rows: int) -> str | None:
        """Why a scoring answer cannot be the answer to ``req``, or None: one entry (``n_rows``) per input
        position from ``logprob_start_len`` on; by ids, it counts the ids sent and scores the reference's."""
        start, _ = self._start(req)
        counted = isinstance(total, int) and not isinstance(total, bool)
        if counted and n_rows != total - start:
            return (f"{NOT_THIS_REQUEST}: {n_rows} logprob entries from input position {start}, but "
                    f"prompt_tokens {total}")
        if not req.by_ids:
            return None
        sent = len(req.prompt) + len(req.reference)
        if counted and total != sent:
            return f"{NOT_THIS_REQUEST}: prompt_tokens {total} for an input of {sent} token ids"
        want = [int(x) for x in req.reference]
        if list(ids) != want:
            at = next(i for i, (a, b) in enumerate(zip(ids, want, strict=True)) if a != b)
            return (f"{NOT_THIS_REQUEST}: it scores token {ids[at]} at reference position {at}, where "
                    f"{want[at]} was sent")
        return None


@dataclass(frozen=True)
class OpenAIApi(Api):
    """The OpenAI completions API (vLLM, llama.cpp servers): ``POST /v1/completions``."""

    name: ClassVar[str] = "openai"
    generate_path: ClassVar[str] = "/v1/completions"
    score_path: ClassVar[str] = "/v1/completions"
    health_path: ClassVar[str] = "/health"
    models_path: ClassVar[str | None] = "/v1/models"
    #: vLLM's; llama-cpp-python has none there (it is scored by text)
    tokenize_paths: ClassVar[tuple[str, ...]] = ("/tokenize",)
    model_name: str = ""
    #: 0: echo entry i holds token i's distribution (OpenAI, vLLM); 1: token i+1's (llama-cpp-python, no BOS)
    echo_shift: int = 0
    #: Id requests ask for vLLM's ``prompt_logprobs`` (per input position a dict keyed by token id), set by
    #: :meth:`scoring_by_ids`. Otherwise an id request is echoed and read by position, a text request by text
    #: offset (which a BOS token shifts on vLLM).
    ids_scoring: bool = False

    @property
    def model(self) -> str | None:
        return self.model_name

    @property
    def needs_model(self) -> bool:
        return not self.model_name

    def with_model_listing(self, listing: Any) -> OpenAIApi:
        try:
            name = listing["data"][0]["id"]
        except (KeyError, IndexError, TypeError):
            raise MalformedResponse(f"{self.models_path} lists no model") from None
        if not isinstance(name, str) or not name:
            raise MalformedResponse(f"{self.models_path} lists a model without an id")
        return replace(self, model_name=name)

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        """SGLang's request in the fields this API has, then the recipe's :data:`OPENAI_EXTRAS`."""
        return {"model": self.model_name, "prompt": prompt, **_openai_fields(sampling, COMPLETION_FIELDS),
                "stream": False}

    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        # One token: not every OpenAI server accepts max_tokens 0.
        return self.generation_body(shots or first_prompt, {**sampling, "max_new_tokens": 1})

    def parse_generation(self, obj: Any) -> Generation:
        try:
            choice = obj["choices"][0]
            text = choice["text"]
        except (KeyError, IndexError, TypeError):
            raise MalformedResponse("response has no choices[0].text") from None
        if not isinstance(text, str):
            raise MalformedResponse("choices[0].text is not a string")
        if not isinstance(choice, dict):
            raise MalformedResponse("choices[0] is not an object")
        return _choice_generation(obj, choice, text)

    def reply_tokens(self, body: Mapping[str, Any]) -> int:
        """``max_tokens`` with their ``logprobs`` alternatives; with ``echo`` or vLLM's ``prompt_logprobs`` the
        input's tokens too, each with its alternatives."""
        if "max_tokens" not in body:
            return super().reply_tokens(body)
        new = _int(body.get("max_tokens"), 16)  # OpenAI's default
        alternatives = _int(body.get("logprobs"), 0)
        prompt_k = body.get("prompt_logprobs")
        inputs = _length(body.get("prompt")) if body.get("echo") or prompt_k is not None else 0
        return new * (1 + alternatives) + inputs * (1 + max(alternatives, _int(prompt_k, 0)))

    def scoring_by_ids(self) -> OpenAIApi:
        return replace(self, ids_scoring=True)

    def scoring_body(self, req: ScoreRequest) -> JSONObject:
        """``echo`` (or, by ids with :attr:`ids_scoring`, ``prompt_logprobs``); one token is generated and
        ignored: llama-cpp-python reads ``max_tokens: 0`` as "no limit" (and older vLLM refuses it)."""
        if req.by_ids and self.ids_scoring:
            return {"model": self.model_name, "prompt": [*req.prompt, *req.reference], "max_tokens": 1,
                    "temperature": 0.0, "prompt_logprobs": req.top_k, "stream": False}
        prompt: str | list[int] = ([*req.prompt, *req.reference] if req.by_ids
                                   else str(req.prompt) + str(req.reference))
        return {"model": self.model_name, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                "echo": True, "logprobs": req.top_k, "stream": False}

    def _parse_prompt_logprobs(self, obj: Any, req: ScoreRequest) -> TokenScores:
        """``choices[0].prompt_logprobs``: per input token ``null`` (the first) or ``{"<id>": {"logprob",
        "rank", "decoded_token"}}`` holding the top-k and the input token itself (``rank`` 1-based)."""
        try:
            rows = obj["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise MalformedResponse("response has no choices[0].prompt_logprobs") from None
        ids = [int(x) for x in (*req.prompt, *req.reference)]
        if not isinstance(rows, list) or len(rows) != len(ids):
            n = len(rows) if isinstance(rows, list) else "no"
            raise MalformedResponse(f"{n} prompt_logprobs entries for an input of {len(ids)} tokens")
        out = _counted_input(obj, req)
        k = req.top_k
        for i in range(len(req.prompt), len(ids)):
            tid, entry = ids[i], rows[i]
            where = f"at reference token {i - len(req.prompt)}"
            if entry is None:
                out.add(tid, None, None, [])
                continue
            if not isinstance(entry, dict):
                raise MalformedResponse(f"prompt_logprobs[{i}] is not an object: {entry!r:.80}")
            own: float | None = None
            text: str | None = None
            alts: list[tuple[int | None, str | None, float]] = []
            for key, v in entry.items():
                try:
                    j, value = int(key), v["logprob"]
                    lp = _num(value, where)
                    rank, dec = v.get("rank"), v.get("decoded_token")
                except MalformedResponse:
                    raise
                except (KeyError, TypeError, ValueError, AttributeError):
                    raise MalformedResponse(f"prompt_logprobs[{i}] entry is not {{id: {{logprob, rank}}}}: "
                                            f"{key!r:.20}: {v!r:.60}") from None
                dec = dec if isinstance(dec, str) else None
                if j == tid:
                    own, text = (None if value is None else lp), dec
                if not isinstance(rank, int) or rank <= k:
                    alts.append((j, dec, lp))
            if own is None:
                raise MalformedResponse(f"prompt_logprobs[{i}] lacks the input token {tid}")
            alts.sort(key=itemgetter(2), reverse=True)  # by logprob (a dict's order is no promise); stable
            # the top-k (and the input token unless its rank says otherwise), each id once however spelt
            problem = top_problem([a[0] for a in alts], [a[2] for a in alts], k, where, spare=1)
            if problem is not None:
                raise MalformedResponse(problem)
            out.add(tid, text, own, alts[:k])
        return out

    def parse_scores(self, obj: Any, req: ScoreRequest) -> TokenScores:
        """``choices[0].logprobs``: ``tokens``, ``token_logprobs``, ``top_logprobs`` (per entry null or {token
        text: logprob}), ``text_offset``, one entry per input token (plus the generated one on some servers).
        Reference tokens are picked by position (ids) or by text offset (text)."""
        if req.by_ids and self.ids_scoring:
            return self._parse_prompt_logprobs(obj, req)
        try:
            lp = obj["choices"][0]["logprobs"]
            tokens, values = lp["tokens"], lp["token_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise MalformedResponse("response has no choices[0].logprobs.tokens/token_logprobs") from None
        tops = lp.get("top_logprobs") or [None] * len(tokens)
        offsets = lp.get("text_offset")
        if not isinstance(tokens, list) or not isinstance(values, list) or not len(values) == len(tops) == len(tokens):
            raise MalformedResponse("choices[0].logprobs arrays differ in length")
        start = len(str(req.prompt))
        if req.by_ids:
            first, end = len(req.prompt), len(req.prompt) + len(req.reference)
        else:
            if not isinstance(offsets, list) or len(offsets) != len(tokens):
                raise MalformedResponse("choices[0].logprobs.text_offset is missing")
            stop = start + len(str(req.reference))
            picked = [i for i, o in enumerate(offsets) if start <= o < stop]
            first, end = (picked[0], picked[-1] + 1) if picked else (0, 0)
        if end > len(tokens):
            raise MalformedResponse(f"{len(tokens)} echoed tokens for a reference ending at token {end}")
        out = _counted_input(obj, req)
        for i in range(first, end):
            where = f"at reference token {i - first}"
            tid, text = _token_id_or_text(tokens[i])
            j = i - self.echo_shift  # the entry holding this token's distribution
            dist = tops[j] if j >= 0 and isinstance(tops[j], dict) else {}
            logprob = _logprob(dist.get(tokens[i]) if self.echo_shift else values[i], where)
            if len(dist) > req.top_k + 1:  # the top-k and the token itself
                raise MalformedResponse(f"{len(dist)} alternatives {where} where {req.top_k} were asked")
            top = sorted(((*_token_id_or_text(key), _num(v, where)) for key, v in dist.items()),
                         key=lambda e: -e[2])[:req.top_k]
            off = offsets[i] - start if not req.by_ids and isinstance(offsets, list) else None
            out.add(tid, text, logprob, top, None, off)
        return out

    def scoring_probe(self, text: str) -> JSONObject:
        return {"model": self.model_name, "prompt": text, "max_tokens": 1, "temperature": 0.0, "logprobs": 1,
                "stream": False}

    def with_scoring_probe(self, text: str, generation: Any, scoring: Any) -> OpenAIApi:
        """Which echo entry holds a token's distribution: the generated token's logprob reappears at its own
        entry (OpenAI) or at the one before (llama-cpp-python without BOS: abetlen/llama-cpp-python#1983)."""
        try:
            choice = generation["choices"][0]
            token, target = choice["logprobs"]["tokens"][0], float(choice["logprobs"]["token_logprobs"][0])
            reference = choice["text"]
        except (KeyError, IndexError, TypeError, ValueError):
            raise MalformedResponse("the probe generation has no choices[0].logprobs") from None
        if not reference:
            raise MalformedResponse("the probe generation is empty: cannot check the echo alignment")
        req = ScoreRequest(text, reference, top_k=1)
        misses = []
        for shift in (0, 1):
            got = replace(self, echo_shift=shift).parse_scores(scoring, req)
            value = got.logprobs[0] if len(got) and got.texts[0] == token else None
            if value is not None and abs(value - target) <= 0.05 + 0.01 * abs(target):
                return replace(self, echo_shift=shift)
            misses.append(f"shift {shift}: {value}")
        raise MalformedResponse(f"echoed logprobs do not reproduce the generated token's ({token!r}: {target:.4f}; "
                                f"{', '.join(misses)}): this server cannot score")


@dataclass(frozen=True)
class VLLMApi(OpenAIApi):
    """vLLM's completions API with every ``SamplingParams`` field set as SGLang's recipe means it (vLLM fills
    an omitted one from ``generation_config.json``, whose ``repetition_penalty`` applies even greedy)."""

    name: ClassVar[str] = "vllm"

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        """SGLang's sampling params in vLLM's names, SGLang's defaults where the recipe has none, ``seed`` 0
        (repeatable draws above temperature 0), the matched stop string trimmed as SGLang does."""
        return {"model": self.model_name, "prompt": prompt, "max_tokens": sampling["max_new_tokens"],
                "min_tokens": sampling.get("min_new_tokens", 0), "n": sampling["n"],
                "temperature": sampling["temperature"], "top_p": sampling["top_p"],
                "top_k": sampling.get("top_k", -1), "min_p": sampling.get("min_p", 0.0),
                "repetition_penalty": sampling.get("repetition_penalty", 1.0),
                "frequency_penalty": sampling["frequency_penalty"], "presence_penalty": sampling["presence_penalty"],
                "seed": sampling.get("sampling_seed", 0), "stop": sampling["stop"],
                "stop_token_ids": list(sampling.get("stop_token_ids") or []),
                "include_stop_str_in_output": False, "ignore_eos": sampling.get("ignore_eos", False),
                "skip_special_tokens": sampling.get("skip_special_tokens", True),
                "spaces_between_special_tokens": sampling.get("spaces_between_special_tokens", True),
                "stream": False, **_extras(sampling)}


class ChatApi(OpenAIApi):
    """The OpenAI chat API, no scoring: the prompt is one user message under the server's chat template; a
    reasoning model's reasoning, returned apart (``reasoning_content``, vLLM's ``reasoning``), stays apart."""

    name: ClassVar[str] = "chat"
    generate_path: ClassVar[str] = "/v1/chat/completions"
    chat: ClassVar[bool] = True

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        """One user message, then the recipe's sampling fields (an empty stop list left out)."""
        fields = _openai_fields(sampling, CHAT_FIELDS)
        if not fields.get("stop"):
            fields.pop("stop", None)
        return {"messages": [{"role": "user", "content": prompt}], "model": self.model_name, **fields}

    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> JSONObject:
        return self.generation_body(first_prompt or shots, {**sampling, "max_new_tokens": 1})

    def parse_generation(self, obj: Any) -> Generation:
        try:
            choice = obj["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise MalformedResponse("response has no choices[0].message") from None
        if not isinstance(message, dict):
            raise MalformedResponse("choices[0].message is not an object")
        text = message.get("content")
        if text is None:  # a reasoning model that spent its whole budget thinking: no answer, not a bad body
            text = ""
        if not isinstance(text, str):
            raise MalformedResponse("choices[0].message.content is not a string")
        reasoning = message.get("reasoning_content")
        if not isinstance(reasoning, str):
            reasoning = message.get("reasoning") if isinstance(message.get("reasoning"), str) else None
        return _choice_generation(obj, choice, text, reasoning or None)

    def scoring_body(self, req: ScoreRequest) -> JSONObject:
        raise ValueError("the chat API has no teacher-forced scoring (run the divergence with engine.api=openai)")

    def scoring_probe(self, text: str) -> JSONObject:
        raise ValueError("the chat API has no teacher-forced scoring (run the divergence with engine.api=openai)")


_APIS: dict[str, type[Api]] = {api.name: api for api in (SGLangApi, OpenAIApi, VLLMApi, ChatApi)}
#: The protocol names a config may give.
API_NAMES: tuple[str, ...] = tuple(_APIS)


def can_send(api: str, recipe_apis: Sequence[str]) -> bool:
    """Whether a recipe for ``recipe_apis`` can be sent by ``api``: its own, or vllm for a completions one."""
    return api in recipe_apis or (api == VLLMApi.name and OpenAIApi.name in recipe_apis)


def for_api(name: str, model: str = "") -> Api:
    """The protocol object for ``name`` (one of :data:`API_NAMES`); ``model``: OpenAI model name, when known."""
    api = _APIS.get(name)
    if api is None:
        raise ValueError(f"api must be one of {', '.join(API_NAMES)}, not {name!r}")
    return api(model_name=model) if issubclass(api, OpenAIApi) else api()


# ---------------------------------------------------------------------------------------- helpers
def _choice_generation(obj: dict[str, Any], choice: dict[str, Any], text: str,
                       reasoning: str | None = None) -> Generation:
    """An OpenAI answer's generation: ``text``, and the finish reason and token counts it gives."""
    usage = _object(obj.get("usage"), "usage")
    return Generation(text, _finish(choice.get("finish_reason"), "choices[0].finish_reason"),
                      _count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
                      _count(usage.get("completion_tokens"), "usage.completion_tokens"), reasoning)


def _object(x: Any, what: str) -> dict[str, Any]:
    """An optional JSON object of a reply (absent or null: empty); anything else is a malformed reply."""
    if x is None:
        return {}
    if not isinstance(x, dict):
        raise MalformedResponse(f"{what} is not an object: {x!r:.40}")
    return x


def _finish(x: Any, what: str) -> str | None:
    """A finish reason: a string or null (a server-supplied value is stored only once its type is known)."""
    if x is None or isinstance(x, str):
        return x
    raise MalformedResponse(f"{what} is not a string: {x!r:.40}")


def _count(x: Any, what: str) -> int | None:
    """A token count: null, or a whole number >= 0 (``12.0`` is 12); anything else is a malformed reply."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x < 0 or x != int(x):
        raise MalformedResponse(f"{what} is not a whole number >= 0: {x!r:.40}")
    return int(x)


def _nth(body: Mapping[str, Any], key: str, i: int) -> Any:
    """A batch body's ``key`` for its ``i``-th request (one per request where it is a list, else shared)."""
    v = body.get(key)
    if isinstance(v, list) and len(v) > i and (key != "token_ids_logprob" or isinstance(v[i], list)):
        return v[i]
    return v


def _int(x: Any, default: int) -> int:
    """A count in a request body we built (``default`` when unset)."""
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else default


def _length(x: Any) -> int:
    """Tokens a request's text or id list can make at most (its characters, or ids); a batch's: their sum."""
    if isinstance(x, str):
        return len(x)
    if isinstance(x, list | tuple):
        if not x or not isinstance(x[0], str | list | tuple):  # ids (a scoring request's input_ids)
            return len(x)
        return sum(len(m) if isinstance(m, str | list | tuple) else 1 for m in x)
    return 0


#: (OpenAI field, SGLang sampling-param name) in the order the completions body sends them.
COMPLETION_FIELDS: tuple[tuple[str, str], ...] = (
    ("max_tokens", "max_new_tokens"), ("temperature", "temperature"), ("top_p", "top_p"), ("n", "n"),
    ("stop", "stop"), ("frequency_penalty", "frequency_penalty"), ("presence_penalty", "presence_penalty"))
#: The same for the chat body (what upstream chat recipes send: length, temperature, top_p, stops).
CHAT_FIELDS: tuple[tuple[str, str], ...] = (
    ("max_tokens", "max_new_tokens"), ("temperature", "temperature"), ("top_p", "top_p"), ("stop", "stop"))
#: OpenAI-only request fields a recipe may set (vLLM's gsm8k_eval sends ``seed``, sgl-eval ``min_p`` and
#: ``repetition_penalty``)
OPENAI_EXTRAS: tuple[str, ...] = ("seed", "min_p", "repetition_penalty")


def _openai_fields(sampling: Mapping[str, Any], table: tuple[tuple[str, str], ...]) -> JSONObject:
    """The OpenAI body fields of ``sampling``: those of ``table`` it holds, then its :func:`_extras`."""
    return {**{field_: sampling[key] for field_, key in table if key in sampling}, **_extras(sampling)}


def _extras(sampling: Mapping[str, Any]) -> JSONObject:
    """The OpenAI-only fields of ``sampling`` (under ``openai_extras``: a recipe's own) that it holds."""
    extras = sampling.get("openai_extras") or {}
    return {k: extras[k] for k in OPENAI_EXTRAS if k in extras}


def loads_body(raw: bytes) -> Any:
    """A response body's JSON by orjson (bodies run to ~100 MiB), by the stdlib's what orjson refuses
    (``NaN``); ValueError for anything that is not JSON, nested too deep included."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            return json.loads(raw)
        except RecursionError:  # orjson stops at 1024 levels; the stdlib's recursion limit is no better
            raise ValueError("JSON nested too deep") from None


#: SGLang's per-position logprob arrays in ``meta_info`` (what :meth:`SGLangApi.decode_scores` cuts out)
_SGLANG_ARRAYS = (("input_token_logprobs", 2), ("input_top_logprobs", 3), ("input_token_ids_logprobs", 3))
_OPEN, _CLOSE = ord("["), ord("]")


def _array_extent(raw: bytes, key: bytes, depth: int, start: int = 0) -> tuple[int, int] | None:
    """Where the JSON array of ``depth`` levels after ``key`` (``"name":``) starts and ends in ``raw``, from
    ``start`` on; None when absent. A key inside a string cannot match (its quotes would be escaped); a string
    inside, a wrong end or the key twice are caught by the caller's checks."""
    i = raw.find(key, start)
    if i < 0:
        return None
    start = i + len(key)
    while start < len(raw) and raw[start] in b" \t\r\n":
        start += 1
    if start >= len(raw) or raw[start] != _OPEN:
        return None
    close = raw.find(b"]" * depth, start)
    if close < 0:
        return None
    return start, close + depth


#: ``null`` becomes ``9`` by one byte translation (n -> 9, u and l -> spaces), which also blanks the brackets: a
#: small int the JSON parser makes without an allocation. A stray u or l is a space then (it cannot join or
#: change a number); a null is told from a written 9 by counting the n's (:func:`_numbers`).
_NULL_TO_NUMBER = bytes.maketrans(b"nul[]", b"9    ")
#: what a null reads as (:data:`_NULL_TO_NUMBER`)
_NULL = 9.0


def _numbers(raw: bytes, flat: bytearray, span: tuple[int, int]) -> tuple[np.ndarray, int] | None:
    """Every number of the string-free JSON array (of arrays) at ``span`` of ``raw``, flat, a ``null`` as
    :data:`_NULL`, and how many nulls it holds (the caller checks where); None when anything else is in it.
    ``flat``: ``raw`` translated by :data:`_NULL_TO_NUMBER`, read by orjson as a flat list without a copy."""
    import numpy as np
    a, b = span
    if raw.find(b'"', a, b) >= 0:  # a string (the only JSON value orjson reads that numpy would take)
        return None
    flat[a], flat[b - 1] = _OPEN, _CLOSE
    try:
        values = orjson.loads(memoryview(flat)[a:b])
        return np.fromiter(values, dtype=np.float64, count=len(values)), raw.count(b"n", a, b)
    except (orjson.JSONDecodeError, TypeError, ValueError, OverflowError):  # an object, a word, a bool left
        return None


def _pairs(raw: bytes, flat: bytearray, span: tuple[int, int], skip: int) -> np.ndarray | None:
    """Every ``[logprob, id, null]`` entry at ``span`` as a (logprob, id) row; None when anything else is in
    it, or a null but in the text place and the first ``skip`` entries' logprob place."""
    got = _numbers(raw, flat, span)
    if got is None or got[0].size % 3:
        return None
    out, nulls = got[0].reshape(-1, 3), got[1]
    if not (_all_null(out[:, 2]) and nulls == out.shape[0] + int((out[:skip, 0] == _NULL).sum())):
        return None
    return out[:, :2]


def _all_null(x: np.ndarray) -> bool:
    return bool((x == _NULL).all())


def _triples(raw: bytes, flat: bytearray, span: tuple[int, int], skip: int, t: int) -> np.ndarray | None:
    """The per-position lists of ``[logprob, id, null]`` at ``span``, the first ``skip`` positions null, as
    (t, k, 2); None unless every later position holds k >= 1 such entries."""
    got = _numbers(raw, flat, span)
    if got is None or t < 1 or got[0].size <= skip or not _all_null(got[0][:skip]):
        return None
    values, nulls = got[0][skip:], got[1]
    if values.size % (3 * t):
        return None
    out = values.reshape(t, -1, 3)
    if not (nulls == skip + out.shape[0] * out.shape[1] and _all_null(out[:, :, 2]) and _ids_ok(out[:, :, 1])):
        return None
    return out[:, :, :2]


def _ids_ok(x: np.ndarray) -> bool:
    """Token ids read as floats: whole numbers >= 0 (below 2**53, exact in a float; a NaN or a null is not)."""
    import numpy as np
    return bool(((x >= 0) & (x < 2 ** 53)).all() and (x == np.floor(x)).all())


def _joined(raw: bytes, flat: bytearray, spans: Sequence[tuple[int, int]]) -> tuple[Any, list[int], list[int]] | None:
    """Every number of the string-free arrays at ``spans`` (:func:`_numbers` of each, end to end) by one
    parse, with how many numbers and nulls each holds (its commas tell how many numbers: the parse checks the
    total); None when anything else is in them."""
    import numpy as np
    parts, counts, nulls = [], [], []
    for a, b in spans:
        if raw.find(b'"', a, b) >= 0:
            return None
        inner = flat[a + 1:b - 1]
        n = inner.count(b",") + 1 if inner.strip() else 0
        if n:
            parts.append(inner)
        counts.append(n)
        nulls.append(raw.count(b"n", a, b))
    try:
        values = orjson.loads(b"[" + b",".join(parts) + b"]")
        if len(values) != sum(counts):
            return None
        return np.fromiter(values, dtype=np.float64, count=len(values)), counts, nulls
    except (orjson.JSONDecodeError, TypeError, ValueError, OverflowError):
        return None


def _entry_lists(got: tuple[Any, list[int], list[int]], skips: Any, ts: Any) -> Any:
    """The per-position lists of ``[logprob, id, null]`` of every answer (:func:`_triples` of each), their
    first ``skips`` positions null, as one (sum t, k, 3) array; None unless every answer holds the same
    k >= 1 at each."""
    import numpy as np
    values, counts, nulls = got
    rest = np.asarray(counts) - skips
    if (rest <= 0).any() or (rest % (3 * ts)).any():
        return None
    ks = rest // (3 * ts)
    k = int(ks[0])
    if (ks != k).any() or not np.array_equal(nulls, skips + ts * k):
        return None
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    keep = np.ones(values.size, dtype=bool)
    keep[starts[skips > 0]] = False
    if not _all_null(values[~keep]):
        return None
    out = values[keep].reshape(-1, k, 3)
    if not (_all_null(out[:, :, 2]) and _ids_ok(out[:, :, 1])):
        return None
    return out


def _decode_together(raw: bytes, flat: bytearray, reqs: Sequence[ScoreRequest], metas: Sequence[dict[str, Any]],
                     cuts: dict[str, list[tuple[int, int]]],
                     starts: Sequence[tuple[int, int]]) -> list[TokenScores] | None:
    """Every answer of a scoring body read at once: each array kind parsed once over all the answers and
    checked once (a question at a time, a batch of 16 cost ~25 numpy calls an answer, as much as the parse).
    None unless every answer passes every check of :meth:`SGLangApi._decode_one` with the same widths: then
    each is read alone, which says what is wrong. ``starts``: each request's (``logprob_start_len``, entries
    to skip)."""
    import numpy as np
    if not reqs:
        return None
    ts = np.array([len(r.reference) for r in reqs], dtype=np.int64)
    skips = np.array([s for _, s in starts], dtype=np.int64)
    asks = [list(r.token_ids or []) for r in reqs]
    asked_cut = cuts.get("input_token_ids_logprobs")
    if not ts.all() or (asked_cut is None) != (not any(asks)) or (asked_cut is not None and not all(asks)):
        return None
    own, top = (_joined(raw, flat, cuts[key]) for key in ("input_token_logprobs", "input_top_logprobs"))
    asked_got = _joined(raw, flat, asked_cut) if asked_cut is not None else None
    if own is None or top is None or (asked_cut is not None and asked_got is None):
        return None
    values, counts, nulls = own
    if not np.array_equal(counts, 3 * (skips + ts)):
        return None
    rows = values.reshape(-1, 3)
    first = np.concatenate([[0], np.cumsum(skips + ts)[:-1]])  # each answer's first row
    extra = (skips > 0) & (rows[first, 0] == _NULL)  # its null logprob, where it skips one
    if not (_all_null(rows[:, 2]) and np.array_equal(nulls, skips + ts + extra)):
        return None
    keep = np.ones(rows.shape[0], dtype=bool)
    keep[first[skips > 0]] = False
    rows = rows[keep]
    tops = _entry_lists(top, skips, ts)
    if tops is None or not _ids_ok(rows[:, 1]):
        return None
    asked = None
    if asked_got is not None:
        asked = _entry_lists(asked_got, skips, ts)
        m = {len(w) for w in asks}
        if asked is None or len(m) != 1 or asked.shape[1] != m.pop():
            return None
        if not (asked[:, :, 1] == np.repeat(np.asarray(asks, dtype=np.float64), ts, axis=0)).all():
            return None
    lp, ids = rows[:, 0], rows[:, 1].astype(np.int64)
    top_lp, top_ids = tops[:, :, 0], tops[:, :, 1].astype(np.int64)
    asked_lp = None if asked is None else asked[:, :, 0]
    k = {r.top_k for r in reqs}
    sent = np.concatenate([np.asarray(r.reference, dtype=np.int64) for r in reqs])
    if len(k) != 1 or not np.array_equal(ids, sent) or dense_problem(lp, top_lp, top_ids, k.pop(), asked_lp):
        return None
    out = []
    at = 0
    for i, (req, meta) in enumerate(zip(reqs, metas, strict=True)):
        total, t = meta.get("prompt_tokens"), int(ts[i])
        counted = isinstance(total, int) and not isinstance(total, bool)
        if isinstance(total, int) and counted and (int(skips[i]) + t != total - starts[i][0]
                                                   or total != len(req.prompt) + t):
            return None  # (:meth:`SGLangApi._not_this_request`'s counts)
        rows_i = slice(at, at + t)
        at += t
        out.append(TokenScores(ids=ids[rows_i].tolist(), texts=[None] * t, logprobs=lp[rows_i].tolist(),
                               top_texts=[[None] * top_ids.shape[1]] * t, id_logprobs=[], text_offsets=[None] * t,
                               input_tokens=total if counted else None, dense_top=(top_ids[rows_i], top_lp[rows_i]),
                               dense_asked=None if asked_lp is None else asked_lp[rows_i],
                               asked_ids=tuple(int(x) for x in (req.token_ids or []))))
    return out


def _entries(x: Any, width: int | None = None) -> np.ndarray | None:
    """Per-position lists of SGLang ``[logprob, id, text]`` entries as one (T, k, 3) object array; None when
    not that regular."""
    import numpy as np
    if not x:
        return None
    try:
        arr = np.array(x, dtype=object)
    except ValueError:  # ragged
        return None
    if arr.ndim != 3 or arr.shape[2] != 3 or (width is not None and arr.shape[1] < 1):
        return None
    return arr


def _dense_sglang(rows: list[Any], tops: list[Any], by_id: list[Any], req: ScoreRequest,
                  total: int | None) -> TokenScores | None:
    """:meth:`SGLangApi.parse_scores` of a regular answer (k alternatives everywhere, no null) by numpy; None
    when it is not regular."""
    import numpy as np
    if not rows:
        return None
    own, top = _entries([rows]), _entries(tops)
    if own is None or top is None or top.shape[0] != len(rows):
        return None
    try:
        lp = own[0, :, 0].astype(np.float64)
        ids = own[0, :, 1].astype(np.int64)
        top_lp = top[:, :, 0].astype(np.float64)
        top_ids = top[:, :, 1].astype(np.int64)
    except (TypeError, ValueError):  # a null, a string where a number belongs: the careful path
        return None
    # a null (numpy reads it as NaN) where a number belongs: the careful path reads it as the protocol means it
    if (own[0, :, :2] == None).any() or (top[:, :, :2] == None).any():  # noqa: E711
        return None
    problem = dense_problem(lp, top_lp, top_ids, req.top_k)
    if problem is not None:
        raise MalformedResponse(problem)
    texts = [x if isinstance(x, str) else None for x in own[0, :, 2].tolist()]
    top_texts = top[:, :, 2].tolist()
    want = None if req.token_ids is None else [int(x) for x in req.token_ids]
    asked: list[dict[int, float]] = []
    for i, entry in enumerate(by_id):
        if not entry and not want:
            asked.append({})
            continue
        got = _entries([entry]) if entry else None
        if got is None:
            return None
        try:
            a_lp, a_ids = got[0, :, 0].astype(np.float64), got[0, :, 1].astype(np.int64)
        except (TypeError, ValueError):
            return None
        problem = (asked_problem(a_ids.tolist(), want, f"at reference token {i}")
                   or array_problem(a_lp[None, :], "of an asked id ", i))
        if problem is not None:
            raise MalformedResponse(problem)
        asked.append(dict(zip(a_ids.tolist(), a_lp.tolist(), strict=True)))
    return TokenScores(ids=ids.tolist(), texts=texts, logprobs=lp.tolist(),
                       top_texts=[[t if isinstance(t, str) else None for t in row] for row in top_texts],
                       id_logprobs=asked, text_offsets=[None] * len(rows),
                       input_tokens=total, dense_top=(top_ids, top_lp))


def _num(x: Any, where: str = "") -> float:
    """A logprob as a float (null: -inf, the bottom of any ordering), checked (:func:`_logprob`)."""
    v = _logprob(x, where)
    return -math.inf if v is None else v


def _counted_input(obj: Any, req: ScoreRequest) -> TokenScores:
    """No scores yet, with the input tokens an OpenAI answer counts (``usage.prompt_tokens``);
    MalformedResponse when an answer to the id request ``req`` counts another input length."""
    usage = obj.get("usage") if isinstance(obj, dict) else None
    counted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    sent = len(req.prompt) + len(req.reference)
    if req.by_ids and isinstance(counted, int) and counted != sent:
        raise MalformedResponse(f"{NOT_THIS_REQUEST}: prompt_tokens {counted} for an input of {sent} "
                                "token ids")
    return TokenScores(input_tokens=counted if isinstance(counted, int) else None)


def _logprob(x: Any, where: str) -> float | None:
    """A logprob a server wrote (null: None), checked (:func:`~harness.serving.plausible.logprob_problem`)."""
    if x is None:
        return None
    try:
        problem = logprob_problem(x, where)
    except (TypeError, ValueError):
        raise MalformedResponse(f"logprob {x!r:.40} {where} is not a number") from None
    if problem is not None:
        raise MalformedResponse(problem)
    return float(x)


def _triple(x: Any, where: str = "") -> tuple[float | None, int | None, str | None]:
    """SGLang's ``[logprob, token_id, text]`` (text null unless ``return_text_in_logprobs``)."""
    if not isinstance(x, list | tuple) or len(x) < 2:
        raise MalformedResponse(f"logprob entry is not [logprob, id, text]: {x!r:.80}")
    try:
        tid = None if x[1] is None else int(x[1])
    except (TypeError, ValueError):
        raise MalformedResponse(f"logprob entry is not [logprob, id, text]: {x!r:.80}") from None
    lp = _logprob(x[0], where)
    text = x[2] if len(x) > 2 and isinstance(x[2], str) else None
    return lp, tid, text


def _alternatives(entries: Any, where: str = "") -> list[tuple[int | None, str | None, float]]:
    """SGLang ``[logprob, token_id, text]`` entries as ``(id, text, logprob)`` (a null logprob: -inf), with
    :func:`_triple`'s checks in one pass."""
    if not entries:
        return []
    try:
        if not isinstance(entries, list) or not all(isinstance(e, list | tuple) and len(e) >= 2 for e in entries):
            raise TypeError
        out = [(None if e[1] is None else int(e[1]), e[2] if len(e) > 2 and isinstance(e[2], str) else None,
                -math.inf if e[0] is None else float(e[0])) for e in entries]
    except (TypeError, ValueError):
        for e in entries if isinstance(entries, list) else [entries]:
            _triple(e)  # names the entry that is not [logprob, id, text]
        raise MalformedResponse(f"logprob entries are not a list of [logprob, id, text]: {entries!r:.80}") from None
    for (_, _, v), e in zip(out, entries, strict=True):
        if e[0] is not None and not (-math.inf < v <= LOGPROB_ROUNDOFF):
            _logprob(e[0], where)  # raises, naming the value
    return out


def _sglang_entries(rows: list[Any], tops: list[Any], by_id: list[Any], req: ScoreRequest,
                    total: int | None) -> TokenScores:
    """:meth:`SGLangApi.parse_scores` entry by entry, each checked, naming the first that is wrong."""
    out = TokenScores(input_tokens=total)
    want = None if req.token_ids is None else [int(x) for x in req.token_ids]
    for i, (row, top, asked) in enumerate(zip(rows, tops, by_id, strict=True)):
        where = f"at reference token {i}"
        lp, tid, text = _triple(row, where)
        alts = _alternatives(top, where)
        # the first input token (an empty prompt) has no context: no logprob, no alternatives
        problem = top_problem([a[0] for a in alts], [a[2] for a in alts], req.top_k, where,
                              exact=lp is not None or bool(alts))
        given = _alternatives(asked, where)
        problem = problem or asked_problem([a[0] for a in given], want if asked or lp is not None else None, where)
        if problem is not None:
            raise MalformedResponse(problem)
        out.add(tid, text, lp, alts, {j: v for (j, _, v), e in zip(given, asked or [], strict=True)
                                      if j is not None and e[0] is not None})
    return out


_TOKEN_ID = re.compile(r"token_id:(\d+)")


def _token_id_or_text(token: Any) -> tuple[int | None, str | None]:
    """vLLM's ``return_tokens_as_token_ids`` spells tokens ``token_id:123``; others give the text."""
    if not isinstance(token, str):
        raise MalformedResponse(f"token is not a string: {token!r:.40}")
    m = _TOKEN_ID.fullmatch(token)
    return (int(m.group(1)), None) if m else (None, token)
