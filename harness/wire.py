"""The wire protocols a server speaks: SGLang's native API and the OpenAI completions API.

One object per protocol (:class:`SGLangApi`, :class:`OpenAIApi`), chosen once by :func:`for_api`. It knows
the endpoints, builds the request bodies (a generation from a prompt and SGLang-style sampling params, the
warm-up) and parses the responses. It does no I/O: the client sends what
it builds and hands back what came back. Nothing else in the harness tests the protocol's name.

Sampling params are always given in SGLang's vocabulary (the task's recipe, every field SGLang's frontend
sends); :class:`OpenAIApi` maps the fields its API has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
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


# ---------------------------------------------------------------------------------------- protocols
class Api(ABC):
    """One wire protocol. Instances are immutable; :meth:`with_model_listing` returns a new one."""

    name: ClassVar[str]
    #: POST: one generation.
    generate_path: ClassVar[str]
    #: GET: 200 when the server serves (probed by the stall watchdog and the readiness wait).
    health_path: ClassVar[str]
    #: GET: the served models, when the protocol needs a model name in each request.
    models_path: ClassVar[str | None] = None

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


@dataclass(frozen=True)
class SGLangApi(Api):
    """SGLang's native API: ``POST /generate`` with ``text`` and ``sampling_params``."""

    name: ClassVar[str] = "sglang"
    generate_path: ClassVar[str] = "/generate"
    health_path: ClassVar[str] = "/health_generate"

    def generation_body(self, prompt: str, sampling: Mapping[str, Any]) -> dict[str, Any]:
        return {"text": prompt, "sampling_params": dict(sampling)}

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


@dataclass(frozen=True)
class OpenAIApi(Api):
    """The OpenAI completions API (vLLM, llama.cpp servers): ``POST /v1/completions``."""

    name: ClassVar[str] = "openai"
    generate_path: ClassVar[str] = "/v1/completions"
    health_path: ClassVar[str] = "/health"
    models_path: ClassVar[str | None] = "/v1/models"
    model_name: str = ""

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
        """The same request as SGLang's (greedy, same stops and length) in the fields this API has."""
        return {"model": self.model_name, "prompt": prompt, "max_tokens": sampling["max_new_tokens"],
                "temperature": sampling["temperature"], "top_p": sampling["top_p"], "n": sampling["n"],
                "stop": sampling["stop"], "frequency_penalty": sampling["frequency_penalty"],
                "presence_penalty": sampling["presence_penalty"], "stream": False}

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


_FACTORIES: dict[str, Callable[[str], Api]] = {
    SGLangApi.name: lambda model: SGLangApi(),
    OpenAIApi.name: lambda model: OpenAIApi(model_name=model),
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
