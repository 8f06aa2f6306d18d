"""The wire protocols a server speaks: SGLang's native API, the OpenAI completions API and the OpenAI chat API.

One object per protocol (:class:`SGLangApi`, :class:`OpenAIApi`, :class:`ChatApi`), chosen once by :func:`for_api`. It knows
the endpoints, builds the request bodies (a generation from a prompt and SGLang-style sampling params, the
warm-up, a teacher-forced scoring request) and parses the responses. It does no I/O: the client sends what
it builds and hands back what came back. Nothing else in the harness tests the protocol's name.

Sampling params are always given in SGLang's vocabulary (the task's recipe, every field SGLang's frontend
sends); :class:`OpenAIApi` and :class:`ChatApi` map the fields their API has, and pass on the OpenAI-only
fields a recipe may set (:data:`OPENAI_EXTRAS`: ``seed``, ``min_p``, ``repetition_penalty``) when it sets them.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any, ClassVar


class MalformedResponse(ValueError):
    """A 2xx response body without the protocol's shape (a proxy's error page, a torn body, ...)."""


@dataclass(frozen=True)
class Generation:
    """What one generation request returned."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    #: the reasoning a chat server returned apart from the answer (``reasoning_content`` / ``reasoning``)
    reasoning: str | None = None


# ---------------------------------------------------------------------------------------- scoring
#: Alternatives per reference token a scoring pass asks each server for (``divergence.top_k``).
DEFAULT_TOP_K = 20


@dataclass(frozen=True)
class ScoreRequest:
    """Teacher-forced scoring of ``reference`` after ``prompt``: the server generates nothing new and
    returns, per reference token, its logprob and the ``top_k`` most likely tokens at that position.

    ``prompt`` and ``reference`` are both text or both token ids; ids make two servers score exactly the
    same tokens (SGLang ``input_ids``, vLLM ``prompt`` as a list; llama-cpp-python takes text only).
    ``prompt_tokens``: SGLang with text only, and required there: how many tokens the server makes of
    ``prompt`` (``meta_info.prompt_tokens`` of the eval's own generation), so logprobs start at the reference.
    ``token_ids``: SGLang only: also the logprob of each of these ids at every reference position
    (``token_ids_logprob``), e.g. the other arm's top-k ids. ``texts``: SGLang: also each token's text
    (``return_text_in_logprobs``; off makes the answer smaller where ids are enough).
    """

    prompt: str | Sequence[int]
    reference: str | Sequence[int]
    top_k: int = DEFAULT_TOP_K
    prompt_tokens: int | None = None
    token_ids: Sequence[int] | None = None
    texts: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.prompt, str) != isinstance(self.reference, str):
            raise ValueError("prompt and reference must both be text or both be token ids")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")
        if self.prompt_tokens is not None and self.prompt_tokens < 0:
            raise ValueError("prompt_tokens must be >= 0")

    @property
    def by_ids(self) -> bool:
        return not isinstance(self.prompt, str)


@dataclass
class TokenScores:
    """Scores of the reference tokens; every list has one entry per reference token ``i``.

    ``ids[i]`` / ``texts[i]``: the token (None where the API does not give it); ``logprobs[i]``: logprob of
    that token given everything before it (None where the server gives none, e.g. the very first token of
    the input, or a realigned llama-cpp-python token outside the top-k); ``top_ids[i]`` / ``top_texts[i]`` /
    ``top_logprobs[i]``: the top-k alternatives at that position, most likely first, at most k of them;
    ``id_logprobs[i]``: SGLang ``token_ids_logprob`` answers, {id: logprob} (empty otherwise);
    ``text_offsets[i]``: where the token starts, in characters from the start of the reference text (None
    where unknown; a first offset other than 0 means a token straddles the prompt/reference boundary);
    ``input_tokens``: tokens the server counted in the whole input (prompt + reference), when it says.
    """

    ids: list[int | None] = field(default_factory=list)
    texts: list[str | None] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    top_ids: list[list[int | None]] = field(default_factory=list)
    top_texts: list[list[str | None]] = field(default_factory=list)
    top_logprobs: list[list[float]] = field(default_factory=list)
    id_logprobs: list[dict[int, float]] = field(default_factory=list)
    text_offsets: list[int | None] = field(default_factory=list)
    input_tokens: int | None = None

    def __len__(self) -> int:
        return len(self.logprobs)

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
    """One wire protocol. Instances are immutable; :meth:`with_model_listing` returns a new one."""

    name: ClassVar[str]
    #: POST: one generation.
    generate_path: ClassVar[str]
    #: POST: one teacher-forced scoring request.
    score_path: ClassVar[str]
    #: GET: 200 when the server serves (probed by the stall watchdog and the readiness wait).
    health_path: ClassVar[str]
    #: GET: the served models, when the protocol needs a model name in each request.
    models_path: ClassVar[str | None] = None
    #: ``health_path`` answers 200 only once the server can generate (SGLang's /health_generate runs a 1-token
    #: generation); otherwise readiness is shown by a 1-token completion.
    health_means_ready: ClassVar[bool] = False
    #: The server's own generation endpoint takes SGLang's request fields (e.g. ``return_routed_experts``).
    native_sglang: ClassVar[bool] = False
    #: POST ``{"prompt", "add_special_tokens"}`` -> ``{"tokens": [...]}``: text to token ids (tried in order;
    #: a server that serves none of them is scored by text).
    tokenize_paths: ClassVar[tuple[str, ...]] = ("/tokenize", "/v1/tokenize")
    #: A scoring request can also ask for the logprobs of given ids at every position (SGLang's
    #: ``token_ids_logprob``; :attr:`ScoreRequest.token_ids`).
    scores_given_ids: ClassVar[bool] = False
    #: The prompt is sent as a chat message (the server applies its chat template), not as raw text.
    chat: ClassVar[bool] = False

    @property
    def model(self) -> str | None:
        """The model name sent in requests (None: the protocol sends none)."""
        return None

    @property
    def needs_model(self) -> bool:
        """True until a model name is known, for a protocol that sends one (see :attr:`models_path`)."""
        return False

    def with_model_listing(self, listing: Any) -> Api:
        """This protocol with the model taken from the ``models_path`` response."""
        return self

    @abstractmethod
    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
        """The request for one generation of ``prompt`` with SGLang-style ``sampling`` params."""

    @abstractmethod
    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
        """The request sent once before a batch, to prime the prefix cache with the few-shot block."""

    @abstractmethod
    def parse_generation(self, obj: Any) -> Generation:
        """The generation in a 2xx response body (raises :class:`MalformedResponse`)."""

    @abstractmethod
    def scoring_body(self, req: ScoreRequest) -> dict[str, Any]:
        """The teacher-forced scoring request for ``req`` (ValueError if this protocol cannot ask it)."""

    @abstractmethod
    def parse_scores(self, obj: Any, req: ScoreRequest) -> TokenScores:
        """The reference tokens' scores in a 2xx answer to :meth:`scoring_body` (raises
        :class:`MalformedResponse`)."""

    def scoring_probe(self, text: str) -> dict[str, Any] | None:
        """A greedy one-token generation of ``text`` with its logprob, to learn how this server aligns
        echoed logprobs (see :meth:`with_scoring_probe`); None when the protocol needs no probe."""
        return None

    def with_scoring_probe(self, text: str, generation: Any, scoring: Any) -> Api:
        """This protocol, aligned by the answers to :meth:`scoring_probe` and to the scoring of ``text``
        followed by the generated token."""
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

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
        return {"text": prompt, "sampling_params": {k: v for k, v in sampling.items() if k != "openai_extras"}}

    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
        # SGLang's frontend: the few-shot block alone, zero new tokens.
        return self.generation_body(shots, {**sampling, "max_new_tokens": 0})

    def parse_generation(self, obj: Any) -> Generation:
        if isinstance(obj, list) and obj:  # n > 1 or batched: we always send one
            obj = obj[0]
        if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
            raise MalformedResponse("response has no 'text' field")
        meta = obj.get("meta_info") or {}
        fr = meta.get("finish_reason")
        finish = fr.get("type") if isinstance(fr, dict) else fr
        return Generation(obj["text"], finish, meta.get("prompt_tokens"), meta.get("completion_tokens"))

    @staticmethod
    def _start(req: ScoreRequest) -> tuple[int, int]:
        """(``logprob_start_len``, entries to skip). SGLang's entry 0 is always ``null`` (the scheduler pads
        the first input position and drops the last), so scoring the reference after a P-token prompt starts
        at P - 1 and skips that entry; with an empty prompt the first reference token has no logprob."""
        if req.by_ids:
            p = len(req.prompt)
        elif req.prompt_tokens is None:
            raise ValueError("SGLang scoring of text needs prompt_tokens (the prompt's length in tokens)")
        else:
            p = req.prompt_tokens
        return (p - 1, 1) if p > 0 else (0, 0)

    def scoring_body(self, req: ScoreRequest) -> dict[str, Any]:
        """``input_ids`` (or ``text``), ``max_new_tokens: 0``, logprobs from the first reference token on
        (``logprob_start_len`` = prompt tokens - 1: see :meth:`_start`)."""
        start, _ = self._start(req)
        body: dict[str, Any] = ({"input_ids": [*req.prompt, *req.reference]} if req.by_ids
                                else {"text": str(req.prompt) + str(req.reference)})
        body.update({"sampling_params": {"max_new_tokens": 0}, "return_logprob": True,
                     "logprob_start_len": start, "top_logprobs_num": req.top_k,
                     "return_text_in_logprobs": req.texts})
        if req.token_ids is not None:
            body["token_ids_logprob"] = list(req.token_ids)
        return body

    def parse_scores(self, obj: Any, req: ScoreRequest) -> TokenScores:
        """``meta_info.input_token_logprobs``: ``[[logprob|null, id, text|null], ...]``, one per input
        position from ``logprob_start_len`` on (the first always ``null``, skipped: it is the prompt's last
        token); ``input_top_logprobs`` and ``input_token_ids_logprobs``: per position ``null`` or
        ``[[logprob, id, text|null], ...]``; ``prompt_tokens``: the whole input."""
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
        rows, tops, by_id = rows[skip:], tops[skip:], by_id[skip:]
        if req.by_ids and len(rows) != len(req.reference):
            raise MalformedResponse(f"{len(rows)} input logprobs for a reference of {len(req.reference)} tokens")
        total = meta.get("prompt_tokens")
        out = TokenScores(input_tokens=total if isinstance(total, int) else None)
        for row, top, asked in zip(rows, tops, by_id, strict=True):
            lp, tid, text = _triple(row)
            alts = _alternatives(top)
            alts.sort(key=itemgetter(2), reverse=True)  # by logprob; stable: ties keep the server's order
            out.add(tid, text, lp, alts[:req.top_k],
                    {i: v for (i, _, v), e in zip(_alternatives(asked), asked or [], strict=True)
                     if i is not None and e[0] is not None})
        return out


@dataclass(frozen=True)
class OpenAIApi(Api):
    """The OpenAI completions API (vLLM, llama.cpp servers): ``POST /v1/completions``."""

    name: ClassVar[str] = "openai"
    generate_path: ClassVar[str] = "/v1/completions"
    score_path: ClassVar[str] = "/v1/completions"
    health_path: ClassVar[str] = "/health"
    models_path: ClassVar[str | None] = "/v1/models"
    #: Scored by text: the echoed tokens and their alternatives come back as text (llama-cpp-python takes no
    #: ids at all), so the passes are keyed by token text, and the text is what every pass sends.
    tokenize_paths: ClassVar[tuple[str, ...]] = ()
    model_name: str = ""
    #: 0: echo entry i holds token i's logprob and distribution (OpenAI, vLLM); 1: entry i holds the
    #: distribution of token i+1 (llama-cpp-python without BOS). Learnt by :meth:`with_scoring_probe`.
    echo_shift: int = 0

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

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
        """The same request as SGLang's (greedy, same stops and length) in the fields this API has: those the
        sampling params give, then the OpenAI-only ones a recipe sets (:data:`OPENAI_EXTRAS`)."""
        return {"model": self.model_name, "prompt": prompt, **_openai_fields(sampling, COMPLETION_FIELDS),
                "stream": False}

    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
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
        usage = obj.get("usage") or {}
        return Generation(text, choice.get("finish_reason"), usage.get("prompt_tokens"),
                          usage.get("completion_tokens"))

    def scoring_body(self, req: ScoreRequest) -> dict[str, Any]:
        """``echo`` returns the input's tokens with their logprobs. One token is generated and ignored:
        llama-cpp-python reads ``max_tokens: 0`` as "no limit" (and older vLLM refuses it)."""
        prompt: str | list[int] = ([*req.prompt, *req.reference] if req.by_ids
                                   else str(req.prompt) + str(req.reference))
        return {"model": self.model_name, "prompt": prompt, "max_tokens": 1, "temperature": 0.0,
                "echo": True, "logprobs": req.top_k, "stream": False}

    def parse_scores(self, obj: Any, req: ScoreRequest) -> TokenScores:
        """``choices[0].logprobs``: ``tokens`` (text), ``token_logprobs`` (float|null), ``top_logprobs`` (per
        entry null or {token text: logprob}, k or k+1 of them), ``text_offset`` (characters into the echoed
        text), one entry per input token (plus the generated one on some servers); ``usage.prompt_tokens``.
        Reference tokens are picked by position (ids) or by text offset (text)."""
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
        usage = obj.get("usage") or {}
        n_in = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        out = TokenScores(input_tokens=n_in if isinstance(n_in, int) else None)
        for i in range(first, end):
            tid, text = _token_id_or_text(tokens[i])
            j = i - self.echo_shift  # the entry holding this token's distribution
            dist = tops[j] if j >= 0 and isinstance(tops[j], dict) else {}
            if self.echo_shift:
                value = dist.get(tokens[i])
                logprob = None if value is None else float(value)
            else:
                logprob = None if values[i] is None else float(values[i])
            alts = sorted(dist.items(), key=lambda kv: -_num(kv[1]))[:req.top_k]
            top = [(*_token_id_or_text(k), _num(v)) for k, v in alts]
            off = offsets[i] - start if not req.by_ids and isinstance(offsets, list) else None
            out.add(tid, text, logprob, top, None, off)
        return out

    def scoring_probe(self, text: str) -> dict[str, Any]:
        return {"model": self.model_name, "prompt": text, "max_tokens": 1, "temperature": 0.0, "logprobs": 1,
                "stream": False}

    def with_scoring_probe(self, text: str, generation: Any, scoring: Any) -> OpenAIApi:
        """Which echo entry holds a token's distribution: the generated token's logprob must reappear when
        ``text`` + that token is scored, at the token's own entry (OpenAI's semantics) or at the entry before
        it (llama-cpp-python with a model that adds no BOS token: abetlen/llama-cpp-python#1983)."""
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
class ChatApi(OpenAIApi):
    """The OpenAI chat API (vLLM, SGLang's OpenAI server, llama.cpp): ``POST /v1/chat/completions``; the prompt is
    one user message and the server applies its own chat template. A reasoning model's reasoning, when the
    server returns it apart (``message.reasoning_content``, or vLLM's ``message.reasoning``), is kept apart
    from the answer. Scoring (teacher-forced logprobs) is the completions API's: this one has no echo."""

    name: ClassVar[str] = "chat"
    generate_path: ClassVar[str] = "/v1/chat/completions"
    chat: ClassVar[bool] = True

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
        """``messages`` (one user message), ``model``, then the sampling fields the recipe gives (an empty stop
        list is left out: chat recipes send none)."""
        fields = _openai_fields(sampling, CHAT_FIELDS)
        if not fields.get("stop"):
            fields.pop("stop", None)
        return {"messages": [{"role": "user", "content": prompt}], "model": self.model_name, **fields}

    def warmup_body(self, shots: str, first_prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
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
        usage = obj.get("usage") or {}
        return Generation(text, choice.get("finish_reason"), usage.get("prompt_tokens"),
                          usage.get("completion_tokens"), reasoning or None)

    def scoring_body(self, req: ScoreRequest) -> dict[str, Any]:
        raise ValueError("the chat API has no teacher-forced scoring (run the divergence with engine.api=openai)")

    def scoring_probe(self, text: str) -> dict[str, Any]:
        raise ValueError("the chat API has no teacher-forced scoring (run the divergence with engine.api=openai)")


_FACTORIES: dict[str, Callable[[str], Api]] = {
    SGLangApi.name: lambda model: SGLangApi(),
    OpenAIApi.name: lambda model: OpenAIApi(model_name=model),
    ChatApi.name: lambda model: ChatApi(model_name=model),
}
#: The protocol names a config may give.
API_NAMES: tuple[str, ...] = tuple(_FACTORIES)


def for_api(name: str, model: str = "") -> Api:
    """The protocol object for ``name`` (one of :data:`API_NAMES`); ``model``: OpenAI model name, when known."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"api must be one of {', '.join(API_NAMES)}, not {name!r}") from None
    return factory(model)


# ---------------------------------------------------------------------------------------- helpers
#: (OpenAI field, SGLang sampling-param name) in the order the completions body sends them.
COMPLETION_FIELDS: tuple[tuple[str, str], ...] = (
    ("max_tokens", "max_new_tokens"), ("temperature", "temperature"), ("top_p", "top_p"), ("n", "n"),
    ("stop", "stop"), ("frequency_penalty", "frequency_penalty"), ("presence_penalty", "presence_penalty"))
#: The same for the chat body (what upstream chat recipes send: length, temperature, top_p, stops).
CHAT_FIELDS: tuple[tuple[str, str], ...] = (
    ("max_tokens", "max_new_tokens"), ("temperature", "temperature"), ("top_p", "top_p"), ("stop", "stop"))
#: OpenAI-only request fields a recipe may set (vLLM's gsm8k_eval sends ``seed``, sgl-eval ``min_p`` and
#: ``repetition_penalty``); sent only when the sampling params hold them.
OPENAI_EXTRAS: tuple[str, ...] = ("seed", "min_p", "repetition_penalty")


def _openai_fields(sampling: Mapping[str, Any], table: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """The OpenAI body fields of SGLang-style ``sampling``: those of ``table`` it holds, then the extras it holds
    under ``openai_extras`` (a recipe's OpenAI-only fields)."""
    out = {field_: sampling[key] for field_, key in table if key in sampling}
    extras = sampling.get("openai_extras") or {}
    out.update({k: extras[k] for k in OPENAI_EXTRAS if k in extras})
    return out


def _num(x: Any) -> float:
    """A logprob as a float (null: -inf, the bottom of any ordering)."""
    return -math.inf if x is None else float(x)


def _triple(x: Any) -> tuple[float | None, int | None, str | None]:
    """SGLang's ``[logprob, token_id, text]`` (text null unless ``return_text_in_logprobs``)."""
    if not isinstance(x, list | tuple) or len(x) < 2:
        raise MalformedResponse(f"logprob entry is not [logprob, id, text]: {x!r:.80}")
    try:
        lp = None if x[0] is None else float(x[0])
        tid = None if x[1] is None else int(x[1])
    except (TypeError, ValueError):
        raise MalformedResponse(f"logprob entry is not [logprob, id, text]: {x!r:.80}") from None
    text = x[2] if len(x) > 2 and isinstance(x[2], str) else None
    return lp, tid, text


def _alternatives(entries: Any) -> list[tuple[int | None, str | None, float]]:
    """A list of SGLang ``[logprob, token_id, text]`` entries as ``(id, text, logprob)`` (a null logprob: -inf),
    in the server's order: :func:`_triple`'s checks, in one pass (a scoring pass parses ~40 per token)."""
    if not entries:
        return []
    try:
        if not isinstance(entries, list) or not all(isinstance(e, list | tuple) and len(e) >= 2 for e in entries):
            raise TypeError
        return [(None if e[1] is None else int(e[1]), e[2] if len(e) > 2 and isinstance(e[2], str) else None,
                 -math.inf if e[0] is None else float(e[0])) for e in entries]
    except (TypeError, ValueError):
        for e in entries if isinstance(entries, list) else [entries]:
            _triple(e)  # names the entry that is not [logprob, id, text]
        raise MalformedResponse(f"logprob entries are not a list of [logprob, id, text]: {entries!r:.80}") from None


_TOKEN_ID = re.compile(r"token_id:(\d+)")


def _token_id_or_text(token: Any) -> tuple[int | None, str | None]:
    """vLLM's ``return_tokens_as_token_ids`` spells tokens ``token_id:123``; others give the text."""
    if not isinstance(token, str):
        raise MalformedResponse(f"token is not a string: {token!r:.40}")
    m = _TOKEN_ID.fullmatch(token)
    return (int(m.group(1)), None) if m else (None, token)
