"""High-concurrency HTTP client for one eval: one aiohttp session, `parallel` requests in flight.

The protocol (SGLang native ``POST /generate`` or OpenAI ``POST /v1/completions``) is a
:class:`harness.serving.wire.Api` object chosen once, here; the client sends what it builds and parses with it.
Requests that queue behind a full batch can wait for minutes, so the read timeout is long; connection
errors, timeouts, 429, 5xx (but 501) and unparsable bodies are retried with exponential backoff, other
4xx and 501 never. A request that still fails comes back as a :class:`Reply` with ``error`` set: the
caller records it as an error, never as a wrong answer.

A hung server is caught by :meth:`Client.watch_stall`: no answer for ``stall_timeout_s`` while requests
are in flight, and its health endpoint does not answer either.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson

from harness.serving.wire import (
    API_NAMES,
    Api,
    Generation,
    MalformedResponse,
    ScoreRequest,
    TokenScores,
    for_api,
)

#: HTTP statuses that say "this URL does not serve that API" (no route, no such method, not implemented).
NOT_SERVED = (404, 405, 501)


def _loads(raw: bytes) -> Any:
    """A response body's JSON: orjson (a scoring pass's bodies run to ~100 MiB: 1.6x faster than the stdlib's,
    ``benchmarks/bench_json.py``), the stdlib's for what orjson refuses (``NaN``/``-Infinity``, which Python's own
    json writes)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


class ServerGone(RuntimeError):
    """The server stopped serving mid-eval (its process died, or it hung); answers so far are on disk."""


class ServerStalled(ServerGone):
    """No answer for ``stall_timeout_s`` while requests were in flight, and the health probe failed."""


class WrongServer(ServerGone):
    """The URL serves something else than the API asked for (404/405/501 on the API's own endpoint)."""


#: Requests in flight by default: SGLang's GSM8K run (``bench_sglang.py --parallel 1319``) sends every question at once.
DEFAULT_PARALLEL = 1319


@dataclass
class ClientSettings:
    """How the client talks to a server, whichever server it is: the ``client:`` config group's schema."""

    #: requests in flight
    parallel: int = DEFAULT_PARALLEL
    #: whole-request timeout; requests may queue for minutes behind a full batch
    request_timeout_s: float = 3600.0
    #: retries of a request after a timeout, 429, 5xx or a dropped connection
    retries: int = 3
    #: first backoff between retries (doubling, with jitter)
    backoff_s: float = 1.0
    #: no answer for this long while requests are in flight: probe the server's health; if it does not answer,
    #: the server is hung (:class:`ServerStalled`: stop it, exit 4). 0 turns the watchdog off.
    stall_timeout_s: float = 180.0
    #: OpenAI model name; empty: the first of ``/v1/models``
    model: str = ""


@dataclass(kw_only=True)
class ClientConfig(ClientSettings):
    """The client of one server: the settings, the server's URL and its API."""

    url: str
    api: str = "sglang"
    connect_timeout_s: float = 60.0
    backoff_max_s: float = 30.0
    #: Timeout of the stall watchdog's health probe (capped at ``stall_timeout_s``).
    health_timeout_s: float = 20.0
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: ClientSettings, *, url: str, api: str) -> ClientConfig:
        """The client of the server at ``url`` with the run's ``settings``."""
        return cls(url=url, api=api, **{f.name: getattr(settings, f.name) for f in fields(ClientSettings)})

    def __post_init__(self) -> None:
        if self.api not in API_NAMES:
            raise ValueError(f"api must be one of {', '.join(API_NAMES)}, not {self.api!r}")
        if self.parallel < 1:
            raise ValueError("parallel must be >= 1")
        if self.retries < 0:
            raise ValueError("retries must be >= 0")
        if self.stall_timeout_s < 0:
            raise ValueError("stall_timeout_s must be >= 0 (0: no stall watchdog)")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout_s must be > 0")
        self.url = check_url(self.url)


def check_url(url: str) -> str:
    """``url`` without a trailing slash; ValueError unless it is a server's base URL, ``http(s)://host[:port][/path]``
    (no query, no fragment)."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a bad port
    except ValueError as e:
        raise ValueError(f"{url!r} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:30000")
    if parts.query or parts.fragment:
        raise ValueError(f"{url!r}: give the server's base URL, without a query or fragment")
    del port
    return url.rstrip("/")


def url_identity(url: str) -> str:
    """A stable id of the server at ``url`` (one URL is one launch of a server abh did not start): ``url:`` and
    the URL's scheme, host (lower case), port and path, without credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"url:{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def unreachable(url: str, timeout_s: float = 10.0) -> str | None:
    """None when something answers HTTP at ``url`` (any status), else why not (refused, no route, timeout)."""
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # as the client: no proxy
    try:
        with opener.open(url + "/health", timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None  # it answers HTTP; whether it serves the API is the eval's business
    except urllib.error.URLError as e:
        return str(e.reason)
    except (OSError, ValueError) as e:  # timeouts, resets, a malformed answer
        return f"{type(e).__name__}: {e}"


@dataclass
class Outcome:
    """How one request went, after its retries (``error`` None: it succeeded)."""

    latency_s: float = 0.0
    attempts: int = 0
    error: str | None = None
    status: int | None = None
    #: The last attempt found nothing listening (connection refused): the server is likely gone.
    refused: bool = False
    #: The ``Server`` header of the last HTTP response, if any (says what answered).
    server: str | None = None

    @property
    def not_served(self) -> bool:
        """The server answered that it does not serve this endpoint (404, 405 or 501)."""
        return self.status in NOT_SERVED


@dataclass
class Reply(Outcome):
    """One generation request's outcome."""

    text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: a chat server's reasoning, returned apart from the answer (None: none returned)
    reasoning: str | None = None


@dataclass
class ScoreReply(Outcome):
    """One scoring request's outcome: the reference tokens' scores, or ``error``."""

    scores: TokenScores | None = None


class _Retryable(Exception):
    def __init__(self, msg: str, refused: bool = False, server: str | None = None):
        super().__init__(msg)
        self.refused, self.server = refused, server


class _Fatal(Exception):
    def __init__(self, msg: str, status: int, server: str | None = None):
        super().__init__(msg)
        self.status, self.server = status, server


def raise_nofile_limit() -> None:
    """Let one process hold thousands of sockets (parallel 1319 needs more than the usual 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
        except (ValueError, OSError):
            pass


_TAGS = re.compile(rb"<(script|style)[^>]*>.*?</\1>|<[^>]+>", re.S | re.I)


def snippet(raw: bytes, limit: int) -> str:
    """A response body shortened for one line: HTML tags dropped, whitespace collapsed."""
    text = _TAGS.sub(b" ", raw) if raw.lstrip()[:1] == b"<" else raw
    return " ".join(text.decode(errors="replace").split())[:limit]


class Client:
    """Async client; use as ``async with Client(cfg) as c: await c.generate(body)``.

    ``api`` is the protocol object (:mod:`harness.serving.wire`) chosen from ``cfg.api``; after :meth:`prepare` it
    carries the OpenAI model name.
    """

    def __init__(self, cfg: ClientConfig):
        self.cfg = cfg
        self.api: Api = for_api(cfg.api, cfg.model)  # the one place the protocol's name is read
        self._session: aiohttp.ClientSession | None = None
        self._sem = asyncio.Semaphore(cfg.parallel)
        self._in_flight = 0
        self._last_answer = time.monotonic()

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
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return self._in_flight

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use `async with Client(...)`"
        return self._session

    # ------------------------------------------------------------------ simple calls
    async def get_json(self, path: str, timeout_s: float = 30.0) -> Any:
        async with self.session.get(self.cfg.url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
            r.raise_for_status()
            return json.loads(await r.text())

    async def prepare(self) -> Api:
        """Learn what the protocol needs before the first request (the OpenAI model name, from
        ``/v1/models``). Raises :class:`WrongServer` when the URL does not serve that endpoint and
        :class:`ServerGone` when it cannot be asked."""
        path = self.api.models_path
        if not self.api.needs_model or path is None:
            return self.api
        url = self.cfg.url + path
        try:
            listing = await self.get_json(path)
            self.api = self.api.with_model_listing(listing)
        except aiohttp.ClientResponseError as e:
            if e.status in NOT_SERVED:
                server = e.headers.get("Server") if e.headers else None
                raise WrongServer(f"{self.cfg.url} does not serve the {self.api.name} API: GET {path} answered "
                                  f"HTTP {e.status}{f' (Server: {server})' if server else ''}; "
                                  "check the URL and the API") from None
            raise ServerGone(f"cannot list models at {url}: HTTP {e.status} {e.message}") from None
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise ServerGone(f"cannot list models at {url}: {type(e).__name__}: {e}".rstrip(": ")) from None
        return self.api

    async def probe_health(self, timeout_s: float) -> str | None:
        """None when the health endpoint answers (200, or 404/405: it has none but the server answers
        HTTP); else what went wrong, for a message."""
        path = self.api.health_path
        try:
            async with self.session.get(self.cfg.url + path,
                                        timeout=aiohttp.ClientTimeout(total=timeout_s)) as r:
                await r.read()
                if r.status == 200 or r.status in (404, 405):
                    return None
                return f"GET {path} answered HTTP {r.status}"
        except TimeoutError:
            return f"GET {path} did not answer within {timeout_s:g} s"
        except aiohttp.ClientConnectorError:
            return f"GET {path} found nothing listening (connection refused)"
        except aiohttp.ClientError as e:
            return f"GET {path} failed ({type(e).__name__})"

    async def wait_ready(self, timeout_s: float, on_status: Callable[[str], None] | None = None,
                         every_s: float = 10.0) -> None:
        """Poll the health endpoint until it answers 200; ServerGone after ``timeout_s``.
        ``on_status`` gets a "waiting for the server to load" line about every ``every_s`` seconds."""
        t0 = time.monotonic()
        last = t0 - every_s
        while True:
            problem = await self.probe_health(min(10.0, max(1.0, timeout_s)))
            if problem is None:
                return
            now = time.monotonic()
            if now - t0 >= timeout_s:
                raise ServerGone(f"{self.cfg.url} did not become ready within {timeout_s:g} s ({problem})")
            if on_status is not None and now - last >= every_s:
                on_status(f"waiting for the server to load ({now - t0:.0f}/{timeout_s:g} s)")
                last = now
            await asyncio.sleep(0.5)

    # ------------------------------------------------------------------ stall watchdog
    async def watch_stall(self) -> str:
        """Return (a reason) only when the server looks hung: no answer for ``stall_timeout_s`` while
        requests are in flight, and its health endpoint does not answer. Runs until cancelled otherwise."""
        limit = self.cfg.stall_timeout_s
        if limit <= 0:
            await asyncio.Event().wait()  # watchdog off: never returns
        while True:
            await asyncio.sleep(min(1.0, limit / 4))
            quiet = time.monotonic() - self._last_answer
            if self._in_flight == 0 or quiet < limit:
                continue
            in_flight = self._in_flight
            problem = await self.probe_health(min(self.cfg.health_timeout_s, limit))
            if problem is None:
                self._last_answer = time.monotonic()  # alive, only slow: give it another period
                continue
            return (f"no answer from {self.cfg.url} for {quiet:.0f} s with {in_flight} request(s) in flight, "
                    f"and {problem}: the server is hung")

    # ------------------------------------------------------------------ generation
    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        """One attempt: the parsed JSON of a 2xx answer; _Retryable or _Fatal otherwise."""
        if self._in_flight == 0:
            self._last_answer = time.monotonic()  # the stall clock starts when something is asked
        self._in_flight += 1
        try:
            async with self.session.post(self.cfg.url + path, json=body) as r:
                raw = await r.read()
                self._last_answer = time.monotonic()
                server = r.headers.get("Server")
                if r.status == 429 or (r.status >= 500 and r.status not in NOT_SERVED):
                    raise _Retryable(f"HTTP {r.status}: {snippet(raw, 200)}", server=server)
                if r.status >= 400:
                    raise _Fatal(f"HTTP {r.status}: {snippet(raw, 500)}", r.status, server)
                try:
                    return _loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    raise _Retryable(f"malformed JSON body ({len(raw)} bytes): {raw[:80]!r}",
                                     server=server) from None
        except aiohttp.ClientConnectorError as e:  # nothing listens there (any more)
            raise _Retryable(f"{type(e).__name__}: {e}".rstrip(": "), refused=True) from None
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as e:
            raise _Retryable(f"{type(e).__name__}: {e}".rstrip(": ")) from None
        finally:
            self._in_flight -= 1

    async def _once(self, body: dict[str, Any]) -> Generation:
        obj = await self._post(self.api.generate_path, body)
        try:
            return self.api.parse_generation(obj)
        except MalformedResponse as e:
            raise _Retryable(str(e)) from None

    async def _with_retries(self, reply: Outcome, attempt_once: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``attempt_once`` with retries, bounded by the concurrency semaphore; fill ``reply``'s
        attempts, error, status, refused, server and latency; return the result (None on failure)."""
        async with self._sem:
            t0 = time.perf_counter()
            result = None
            for attempt in range(1, self.cfg.retries + 2):
                reply.attempts = attempt
                try:
                    result = await attempt_once()
                except _Fatal as e:
                    reply.error, reply.status, reply.server = str(e), e.status, e.server
                    break
                except _Retryable as e:
                    reply.error, reply.refused, reply.server = str(e), e.refused, e.server
                    if attempt > self.cfg.retries:
                        break
                    delay = min(self.cfg.backoff_max_s, self.cfg.backoff_s * 2 ** (attempt - 1))
                    await asyncio.sleep(delay * (0.5 + random.random() / 2))
                    continue
                reply.error, reply.refused, reply.status = None, False, None
                break
            reply.latency_s = time.perf_counter() - t0
            return result

    async def generate(self, body: dict[str, Any]) -> Reply:
        """Send one generation request (``body`` from ``self.api``) with retries; never raises for HTTP."""
        reply = Reply()
        gen: Generation | None = await self._with_retries(reply, lambda: self._once(body))
        if gen is not None:
            reply.text, reply.finish_reason = gen.text, gen.finish_reason
            reply.prompt_tokens, reply.completion_tokens = gen.prompt_tokens, gen.completion_tokens
            reply.reasoning = gen.reasoning
        return reply

    # ------------------------------------------------------------------ teacher-forced scoring
    #: The text of the alignment probe (:meth:`prepare_scoring`).
    PROBE_TEXT = "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:"

    async def prepare_scoring(self) -> Api:
        """Learn how this server aligns echoed logprobs, where the protocol needs to (OpenAI: one greedy
        token, then the scoring of the text followed by it). Raises :class:`ServerGone` when the server
        cannot be asked and ``ValueError`` when it cannot score (e.g. llama-cpp-python without
        ``--logits_all true``): the caller reports divergence as not measured."""
        probe = self.api.scoring_probe(self.PROBE_TEXT)
        if probe is None:
            return self.api
        gen = await self.post_json(self.api.generate_path, probe)
        try:
            reference = gen["choices"][0]["text"]
        except (KeyError, IndexError, TypeError):
            reference = None
        if not isinstance(reference, str) or not reference:
            raise ValueError("the scoring probe generated no token: this server cannot score")
        scored = await self.post_json(self.api.score_path,
                                       self.api.scoring_body(ScoreRequest(self.PROBE_TEXT, reference, top_k=1)))
        try:
            self.api = self.api.with_scoring_probe(self.PROBE_TEXT, gen, scored)
        except MalformedResponse as e:
            raise ValueError(str(e)) from None
        return self.api

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        """POST ``body`` as JSON with the usual retries; the parsed answer. ServerGone if it still fails,
        ValueError on a 4xx (or 501)."""
        out = Outcome()

        async def once() -> Any:
            return await self._post(path, body)

        obj = await self._with_retries(out, once)
        if out.error is not None:
            if (out.status is not None and out.status < 500) or out.not_served:
                raise ValueError(f"POST {path} answered {out.error[:200]}: this server cannot score")
            raise ServerGone(f"POST {self.cfg.url}{path} failed: {out.error}")
        return obj

    async def score(self, req: ScoreRequest) -> ScoreReply:
        """Score one reference teacher-forced (same session, concurrency and retry rules as
        :meth:`generate`); never raises for HTTP. Call :meth:`prepare_scoring` once first."""
        reply = ScoreReply()
        body = self.api.scoring_body(req)

        async def once() -> TokenScores:
            obj = await self._post(self.api.score_path, body)
            try:
                return self.api.parse_scores(obj, req)
            except MalformedResponse as e:
                raise _Retryable(str(e)) from None

        reply.scores = await self._with_retries(reply, once)
        return reply
