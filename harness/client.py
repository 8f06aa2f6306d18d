"""High-concurrency HTTP client for one eval: one aiohttp session, `parallel` requests in flight.

APIs: SGLang native ``POST /generate`` and OpenAI ``POST /v1/completions``. Requests that queue behind
a full batch can wait for minutes, so the read timeout is long; connection errors, timeouts, 429, 5xx
and unparsable bodies are retried with exponential backoff, other 4xx never. A request that still
fails comes back as a :class:`Reply` with ``error`` set: the caller records it as an error, never as a
wrong answer.
"""

from __future__ import annotations

import asyncio
import json
import random
import resource
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

APIS = ("sglang", "openai")


@dataclass
class ClientConfig:
    url: str
    api: str = "sglang"
    parallel: int = 1319
    #: Whole-request timeout; requests may queue for minutes behind a full batch.
    request_timeout_s: float = 3600.0
    connect_timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    #: OpenAI model name; when empty, taken from ``/v1/models``.
    model: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f"api must be one of {', '.join(APIS)}, not {self.api!r}")
        if self.parallel < 1:
            raise ValueError("parallel must be >= 1")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        self.url = self.url.rstrip("/")


@dataclass
class Reply:
    text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    attempts: int = 0
    error: str | None = None
    status: int | None = None
    #: The last attempt found nothing listening (connection refused): the server is likely gone.
    refused: bool = False


class _Retryable(Exception):
    def __init__(self, msg: str, refused: bool = False):
        super().__init__(msg)
        self.refused = refused


class _Fatal(Exception):
    def __init__(self, msg: str, status: int):
        super().__init__(msg)
        self.status = status


def raise_nofile_limit() -> None:
    """Let one process hold thousands of sockets (parallel 1319 needs more than the usual 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
        except (ValueError, OSError):
            pass


def _parse_sglang(obj: Any) -> tuple[str, str | None, int | None, int | None]:
    if isinstance(obj, list):  # n > 1 or batched: we always send one
        obj = obj[0]
    if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
        raise _Retryable("response has no 'text' field")
    meta = obj.get("meta_info") or {}
    fr = meta.get("finish_reason")
    finish = fr.get("type") if isinstance(fr, dict) else fr
    return obj["text"], finish, meta.get("prompt_tokens"), meta.get("completion_tokens")


def _parse_openai(obj: Any) -> tuple[str, str | None, int | None, int | None]:
    try:
        choice = obj["choices"][0]
        text = choice["text"]
    except (KeyError, IndexError, TypeError):
        raise _Retryable("response has no choices[0].text") from None
    usage = obj.get("usage") or {}
    return text, choice.get("finish_reason"), usage.get("prompt_tokens"), usage.get("completion_tokens")


class Client:
    """Async client; use as ``async with Client(cfg) as c: await c.generate(body)``."""

    def __init__(self, cfg: ClientConfig):
        self.cfg = cfg
        self._session: aiohttp.ClientSession | None = None
        self._sem = asyncio.Semaphore(cfg.parallel)

    async def __aenter__(self) -> Client:
        raise_nofile_limit()
        # limit=0: no hidden cap below `parallel`; the semaphore is the only limit.
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.cfg.request_timeout_s, sock_connect=self.cfg.connect_timeout_s)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self.cfg.headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use `async with Client(...)`"
        return self._session

    # ------------------------------------------------------------------ simple calls
    async def get_json(self, path: str, timeout_s: float = 30.0) -> Any:
        async with self.session.get(self.cfg.url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            r.raise_for_status()
            return json.loads(await r.text())

    async def resolve_model(self) -> str:
        """OpenAI model name: the configured one, else the first of ``/v1/models``."""
        if not self.cfg.model:
            obj = await self.get_json("/v1/models")
            self.cfg.model = obj["data"][0]["id"]
        return self.cfg.model

    # ------------------------------------------------------------------ generation
    def _endpoint(self) -> str:
        return "/generate" if self.cfg.api == "sglang" else "/v1/completions"

    async def _once(self, body: dict[str, Any]) -> tuple[str, str | None, int | None, int | None]:
        try:
            async with self.session.post(self.cfg.url + self._endpoint(), json=body) as r:
                raw = await r.read()
                if r.status == 429 or r.status >= 500:
                    raise _Retryable(f"HTTP {r.status}: {raw[:200].decode(errors='replace')}")
                if r.status >= 400:
                    raise _Fatal(f"HTTP {r.status}: {raw[:500].decode(errors='replace')}", r.status)
                try:
                    obj = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise _Retryable(f"malformed JSON body ({len(raw)} bytes): {raw[:80]!r}") from None
        except aiohttp.ClientConnectorError as e:  # nothing listens there (any more)
            raise _Retryable(f"{type(e).__name__}: {e}".rstrip(": "), refused=True) from None
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
            raise _Retryable(f"{type(e).__name__}: {e}".rstrip(": ")) from None
        return _parse_sglang(obj) if self.cfg.api == "sglang" else _parse_openai(obj)

    async def generate(self, body: dict[str, Any]) -> Reply:
        """Send one request (bounded by the concurrency semaphore) with retries; never raises for HTTP."""
        async with self._sem:
            t0 = time.perf_counter()
            reply = Reply()
            for attempt in range(1, self.cfg.retries + 2):
                reply.attempts = attempt
                try:
                    text, finish, pt, ct = await self._once(body)
                except _Fatal as e:
                    reply.error, reply.status = str(e), e.status
                    break
                except _Retryable as e:
                    reply.error, reply.refused = str(e), e.refused
                    if attempt > self.cfg.retries:
                        break
                    delay = min(self.cfg.backoff_max_s, self.cfg.backoff_s * 2 ** (attempt - 1))
                    await asyncio.sleep(delay * (0.5 + random.random() / 2))
                    continue
                reply.text, reply.finish_reason, reply.error, reply.refused = text, finish, None, False
                reply.prompt_tokens, reply.completion_tokens = pt, ct
                break
            reply.latency_s = time.perf_counter() - t0
            return reply
