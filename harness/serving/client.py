"""High-concurrency HTTP client for one eval: one aiohttp session, `parallel` requests in flight, sending what
its :class:`harness.serving.wire.Api` builds.

Connection errors, timeouts, 429, 5xx (but 501) and unparsable bodies are retried with exponential backoff (or
after ``Retry-After``), other 4xx never. A request that still fails is a :class:`Reply` with ``error`` set (an
error, never a wrong answer): whatever a server sends (a torn body, JSON nested 100 000 deep, a body too large
or trickled, a field of the wrong type) is that one request's error, never the eval's.

Credentials: a URL's userinfo is sent as basic auth, removed from the URL the client records; ``api_key`` (or
the variable ``api_key_env`` names) is sent as ``Authorization: Bearer`` (winning over userinfo), never kept.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import random
import re
import resource
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from email.utils import parsedate_to_datetime
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import aiohttp.http_exceptions
import orjson

from harness.results.records import JSONObject
from harness.serving.settings import ClientSettings
from harness.serving.untrusted import printable
from harness.serving.wire import (
    API_NAMES,
    Api,
    Generation,
    MalformedResponse,
    ScoreRequest,
    TokenScores,
    for_api,
)
from harness.serving.wire import loads_body as _loads

#: HTTP statuses that say "this URL does not serve that API" (no route, no such method, not implemented).
NOT_SERVED = (404, 405, 501)
#: Every answer may be this large whatever it asks for (headers of the JSON, an error page, model listings).
BODY_FLOOR_BYTES = 1 << 20
#: File descriptors kept free of sockets when the parallelism is fitted to the open-file limit
RESERVED_FDS = 64


class ServerGone(RuntimeError):
    """The server stopped serving mid-eval (its process died, or it hung); answers so far are on disk."""


class ServerStalled(ServerGone):
    """No answer for ``stall_timeout_s`` while requests were in flight, and the health probe failed."""


class WrongServer(ServerGone):
    """The URL serves something else than the API asked for (404/405/501 on the API's own endpoint)."""


class Redirected(Exception):  # noqa: N818 - what the server did, as ServerGone
    """The server answered a 3xx: abh follows no redirect (the request's credentials would follow it)."""


def redirect_error(method: str, path: str, status: int, location: str | None) -> str:
    """One line for a 3xx answer: what redirected where (the Location is the server's text: escaped, cut)."""
    where = printable(location, one_line=True)[:200] if location else "no Location"
    return (f"{method} {path} answered HTTP {status}, a redirect to {where}: abh follows no redirect from an "
            "inference server (its credentials would follow); give the server's own URL")


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
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))
        # the credentials leave the URL here: what the client records and prints is the bare URL
        self.url, self._auth = without_userinfo(check_url(self.url))
        self._auth = bearer_headers(self).get("Authorization", self._auth)

    @property
    def auth_headers(self) -> dict[str, str]:
        """The ``Authorization`` header the requests carry (empty without credentials): never recorded."""
        return {"Authorization": self._auth} if self._auth else {}


def _dumps_body(obj: Any) -> str:
    """A request body's JSON by orjson (a scoring pass sends ~1 M token ids); what orjson refuses (a NaN, an
    int too large) by the stdlib's."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        import json

        return json.dumps(obj)


def bearer_headers(settings: ClientSettings) -> dict[str, str]:
    """``Authorization: Bearer`` with ``api_key``, else the variable ``api_key_env`` names; never recorded."""
    key = settings.api_key or (os.environ.get(settings.api_key_env, "") if settings.api_key_env else "")
    return {"Authorization": f"Bearer {key}"} if key else {}


def check_url(url: str) -> str:
    """``url`` without a trailing slash; ValueError (never repeating a password) unless it is a server's base
    URL, ``http(s)://[user:password@]host[:port][/path]``."""
    shown = printable(redact_userinfo(url), one_line=True)
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a bad port
    except ValueError as e:
        raise ValueError(f"{shown!r} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{shown!r} is not an http(s) URL with a host, e.g. http://127.0.0.1:30000")
    if parts.query or parts.fragment:
        raise ValueError(f"{shown!r}: give the server's base URL, without a query or fragment")
    del port
    return url.rstrip("/")


def without_userinfo(url: str) -> tuple[str, str]:
    """(``url`` without ``user:password@``, the ``Authorization`` value those make as basic auth, or "")."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, ""
    host = parts.netloc.rpartition("@")[2]
    user, password = parts.username or "", parts.password or ""
    from urllib.parse import unquote

    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), f"Basic {token}"


def redact_userinfo(url: str) -> str:
    """``url`` with its userinfo removed (for a message about a URL that may not even parse)."""
    return re.sub(r"(?<=://)[^/@\s]*@", "", url)


def _open(url: str, path: str, headers: Mapping[str, str], timeout_s: float) -> Any:
    """GET ``path`` of ``url`` by the stdlib (no proxy, userinfo as basic auth); 3xx: :class:`Redirected`."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # the 3xx comes back as an HTTPError, below

    bare, auth = without_userinfo(url)
    h = {**({"Authorization": auth} if auth else {}), **headers}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
    try:
        return opener.open(urllib.request.Request(bare + path, headers=h), timeout=timeout_s)
    except urllib.error.HTTPError as e:
        if 300 <= e.code < 400:
            location = e.headers.get("Location") if e.headers else None
            e.close()
            raise Redirected(redirect_error("GET", path, e.code, location)) from None
        raise


def unreachable(url: str, timeout_s: float = 10.0, headers: Mapping[str, str] | None = None) -> str | None:
    """None when something answers HTTP at ``url`` (a redirect: :class:`Redirected`), else why not."""
    import urllib.error

    try:
        with _open(url, "/health", headers or {}, timeout_s):
            return None
    except urllib.error.HTTPError:
        return None  # it answers HTTP; whether it serves the API is the eval's business
    except urllib.error.URLError as e:
        return printable(str(e.reason), one_line=True)
    except (OSError, ValueError) as e:  # timeouts, resets, a malformed answer
        return printable(f"{type(e).__name__}: {e}", one_line=True)


def served_model(url: str, headers: Mapping[str, str] | None = None, timeout_s: float = 10.0) -> str | None:
    """The model the server at ``url`` says it serves (``/model_info``, else ``/v1/models``); None when it
    says none (best effort; a redirect is :class:`Redirected`)."""
    for path, pick in (("/model_info", lambda o: o.get("model_path")), ("/get_model_info", lambda o: o.get("model_path")),
                       ("/v1/models", lambda o: ((o.get("data") or [{}])[0] or {}).get("id"))):
        try:
            with _open(url, path, headers or {}, timeout_s) as r:
                obj = _loads(r.read(BODY_FLOOR_BYTES))
            value = pick(obj) if isinstance(obj, dict) else None
        except (OSError, ValueError, TypeError, AttributeError, IndexError):
            continue
        if isinstance(value, str) and value:
            return printable(value, one_line=True)
    return None


def retry_after_s(value: str | None) -> float | None:
    """A ``Retry-After`` header in seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, IndexError):
            return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


@dataclass
class Outcome:
    """How one request went, after its retries (``error`` None: it succeeded). ``refused``: nothing listened
    at the last attempt; ``lost``: it got no HTTP answer at all; ``server``: the last ``Server`` header."""

    latency_s: float = 0.0
    attempts: int = 0
    error: str | None = None
    status: int | None = None
    refused: bool = False
    lost: bool = False
    server: str | None = None

    @property
    def not_served(self) -> bool:
        """The server answered that it does not serve this endpoint (404, 405 or 501)."""
        return self.status in NOT_SERVED


@dataclass
class Reply(Outcome):
    """One generation request's outcome (``reasoning``: a chat server's, returned apart from the answer)."""

    text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning: str | None = None


@dataclass
class ScoreReply(Outcome):
    """One scoring request's outcome: the reference tokens' scores, or ``error``."""

    scores: TokenScores | None = None


class _Retryable(Exception):
    """One attempt failed in a way worth another (the message is printable: server text is escaped)."""

    def __init__(self, msg: str, refused: bool = False, server: str | None = None,
                 retry_after: float | None = None, lost: bool = False):
        super().__init__(printable(msg, one_line=True))
        self.refused, self.server, self.retry_after = refused, server, retry_after
        self.lost = lost or refused


class _Fatal(Exception):
    def __init__(self, msg: str, status: int, server: str | None = None):
        super().__init__(printable(msg, one_line=True))
        self.status, self.server = status, server


def raise_nofile_limit() -> int:
    """The soft open-file limit, raised to the hard one (parallel 1319 needs over 1024 sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
        except (ValueError, OSError):
            pass
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fit_parallelism(parallel: int) -> tuple[int, str | None]:
    """(``parallel`` as the open-file limit allows it, a warning when it had to be capped)."""
    soft = raise_nofile_limit()
    if soft == resource.RLIM_INFINITY or parallel + RESERVED_FDS <= soft:
        return parallel, None
    capped = max(1, soft - RESERVED_FDS)
    return capped, (f"the open-file limit is {soft} (its hard limit too): parallel {parallel} capped at {capped} "
                    f"requests in flight; raise it (ulimit -n {parallel + RESERVED_FDS}) to send them all at once")


_TAGS = re.compile(rb"<(script|style)[^>]*>.*?</\1>|<[^>]+>", re.S | re.I)


def snippet(raw: bytes, limit: int) -> str:
    """A response body on one line: HTML tags dropped, whitespace collapsed, control characters escaped."""
    text = _TAGS.sub(b" ", raw) if raw.lstrip()[:1] == b"<" else raw
    return printable(" ".join(text.decode(errors="replace").split())[:limit], one_line=True)


def _refuse_redirect(r: aiohttp.ClientResponse, method: str, path: str) -> None:
    """:class:`Redirected` for a 3xx answer (aiohttp is told not to follow it)."""
    if 300 <= r.status < 400:
        r.close()
        raise Redirected(redirect_error(method, path, r.status, r.headers.get("Location")))


def _server_header(r: aiohttp.ClientResponse) -> str | None:
    value = r.headers.get("Server")
    return None if value is None else printable(value, one_line=True)[:100]


class Client:
    """Async client: ``async with Client(cfg) as c: await c.generate(body)``."""

    def __init__(self, cfg: ClientConfig):
        self.cfg = cfg
        self.api: Api = for_api(cfg.api, cfg.model)  # the one place the protocol's name is read
        self._session: aiohttp.ClientSession | None = None
        #: ``cfg.parallel``, unless the open-file limit allows fewer sockets
        self.parallel, warning = fit_parallelism(cfg.parallel)
        #: what the caller should tell its user (also passed to ``on_notice`` as it happens)
        self.notices: list[str] = [warning] if warning else []
        self.on_notice: Callable[[str], None] | None = None
        self._sem = asyncio.Semaphore(self.parallel)
        self._in_flight = 0
        self._last_answer = time.monotonic()
        #: requests now waiting out a server's Retry-After, and the longest wait asked
        self._waiting = 0
        self._retry_after_seen: float | None = None

    async def __aenter__(self) -> Client:
        # limit=0: no hidden cap below `parallel`; the semaphore is the only limit.
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.cfg.request_timeout_s, sock_connect=self.cfg.connect_timeout_s)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, json_serialize=_dumps_body,
                                              headers={**self.cfg.headers, **self.cfg.auth_headers})
        return self

    def _notice(self, text: str) -> None:
        self.notices.append(text)
        if self.on_notice is not None:
            self.on_notice(text)

    def status(self) -> str | None:
        """For the progress line: requests waiting out the server's Retry-After (None when none is)."""
        if not self._waiting or self._retry_after_seen is None:
            return None
        return f"{self._waiting} waiting {self._retry_after_seen:g} s (Retry-After)"

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
        async with self.session.get(self.cfg.url + path, timeout=aiohttp.ClientTimeout(total=timeout_s),
                                    allow_redirects=False) as r:
            _refuse_redirect(r, "GET", path)
            raw = await self._body(r, BODY_FLOOR_BYTES)
            r.raise_for_status()
            return _loads(raw)

    async def _body(self, r: aiohttp.ClientResponse, cap: int) -> bytes:
        """The body of ``r``, read within ``read_timeout_s`` of its headers and never past ``cap`` bytes."""
        length = r.content_length
        if length is not None and length > cap:
            r.close()
            raise _Retryable(f"response too large ({length} bytes; this request's answer is at most {cap})",
                             server=_server_header(r))
        buf = bytearray()
        try:
            async with asyncio.timeout(self.cfg.read_timeout_s):
                async for chunk in r.content.iter_any():
                    buf += chunk
                    if len(buf) > cap:
                        r.close()  # the rest is never read: the connection goes
                        raise _Retryable(f"response too large (over {cap} bytes, the most this request's answer "
                                         "can need)", server=_server_header(r))
        except TimeoutError:
            r.close()
            raise _Retryable(f"the body was not complete {self.cfg.read_timeout_s:g} s after the headers "
                             f"({len(buf)} bytes received): the server trickles it", server=_server_header(r)) from None
        return bytes(buf)

    async def prepare(self) -> Api:
        """Learn the OpenAI model name before the first request; :class:`WrongServer` when the URL does not
        serve the endpoint, :class:`ServerGone` when it cannot be asked."""
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
                found = f" (Server: {printable(server, one_line=True)[:100]})" if server else ""
                raise WrongServer(f"{self.cfg.url} does not serve the {self.api.name} API: GET {path} answered "
                                  f"HTTP {e.status}{found}; check the URL and the API") from None
            raise ServerGone(printable(f"cannot list models at {url}: HTTP {e.status} {e.message}",
                                       one_line=True)) from None
        except Redirected as e:
            raise WrongServer(f"{self.cfg.url}: {e}") from None
        except (aiohttp.ClientError, TimeoutError, ValueError, _Retryable) as e:
            raise ServerGone(printable(f"cannot list models at {url}: {type(e).__name__}: {e}".rstrip(": "),
                                       one_line=True)) from None
        return self.api

    async def probe_health(self, timeout_s: float) -> str | None:
        """None when the health endpoint answers (200, or 404/405: there is none), else what went wrong."""
        try:
            return await self._health(timeout_s)
        except Redirected as e:
            return str(e)

    async def _health(self, timeout_s: float) -> str | None:
        """:meth:`probe_health`, but :class:`Redirected` for a redirect (never followed)."""
        path = self.api.health_path
        try:
            async with self.session.get(self.cfg.url + path, timeout=aiohttp.ClientTimeout(total=timeout_s),
                                        allow_redirects=False) as r:
                _refuse_redirect(r, "GET", path)
                await self._body(r, BODY_FLOOR_BYTES)
                if r.status == 200 or r.status in (404, 405):
                    return None
                return f"GET {path} answered HTTP {r.status}"
        except _Retryable as e:
            return f"GET {path}: {e}"
        except TimeoutError:
            return f"GET {path} did not answer within {timeout_s:g} s"
        except aiohttp.ClientConnectorError:
            return f"GET {path} found nothing listening (connection refused)"
        except aiohttp.ClientError as e:
            return f"GET {path} failed ({type(e).__name__})"

    async def wait_ready(self, timeout_s: float, on_status: Callable[[str], None] | None = None,
                         every_s: float = 10.0) -> None:
        """Poll the health endpoint until it answers 200; ServerGone after ``timeout_s``, :class:`WrongServer` at
        once for a redirect. ``on_status`` gets a line about every ``every_s`` seconds."""
        t0 = time.monotonic()
        last = t0 - every_s
        while True:
            try:
                problem = await self._health(min(10.0, max(1.0, timeout_s)))
            except Redirected as e:
                raise WrongServer(f"{self.cfg.url}: {e}") from None
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
        """A reason, once the server looks hung: no answer for ``stall_timeout_s`` with requests in flight and
        no health answer, or none for ``progress_timeout_s`` whatever /health says (a server that drops every
        request is not serving). Runs until cancelled otherwise."""
        limit, most = self.cfg.stall_timeout_s, self.cfg.progress_timeout_s
        periods = [x for x in (limit, most) if x > 0]
        if not periods:
            await asyncio.Event().wait()  # watchdog off: never returns
        probed = self._last_answer  # the quiet period the health probe last vouched for
        while True:
            await asyncio.sleep(min(1.0, min(periods) / 4))
            now = time.monotonic()
            quiet = now - self._last_answer
            if self._in_flight == 0:
                continue
            if most > 0 and quiet >= most:
                return (f"no answer from {self.cfg.url} for {quiet:.0f} s with {self._in_flight} request(s) in "
                        f"flight, although its health endpoint answers: the server is not serving requests")
            if limit <= 0 or quiet < limit or now - max(probed, self._last_answer) < limit:
                continue
            in_flight = self._in_flight
            problem = await self.probe_health(min(self.cfg.health_timeout_s, limit))
            if problem is None:
                probed = time.monotonic()  # alive, only slow: probe again a period later (the clock runs on)
                continue
            return (f"no answer from {self.cfg.url} for {quiet:.0f} s with {in_flight} request(s) in flight, "
                    f"and {problem}: the server is hung")

    # ------------------------------------------------------------------ generation
    def reply_cap(self, body: Mapping[str, Any]) -> int:
        """The most bytes an answer to ``body`` may have: 1 MiB plus ``max_bytes_per_token`` a token entry."""
        return BODY_FLOOR_BYTES + self.api.reply_tokens(body) * self.cfg.max_bytes_per_token

    async def _post(self, path: str, body: JSONObject, decode: Callable[[bytes], Any] | None = None) -> Any:
        """One attempt: the parsed JSON of a 2xx answer (or what ``decode`` makes of its bytes); _Retryable or
        _Fatal otherwise, whatever the server sends."""
        if self._in_flight == 0:
            self._last_answer = time.monotonic()  # the stall clock starts when something is asked
        self._in_flight += 1
        try:
            async with self.session.post(self.cfg.url + path, json=body, allow_redirects=False) as r:
                if 300 <= r.status < 400:  # never followed: that request's error, not retried
                    raise _Fatal(redirect_error("POST", path, r.status, r.headers.get("Location")), r.status,
                                 _server_header(r))
                raw = await self._body(r, self.reply_cap(body))
                self._last_answer = time.monotonic()
                if r.status == 429 or (r.status >= 500 and r.status not in NOT_SERVED):
                    raise _Retryable(f"HTTP {r.status}: {snippet(raw, 200)}", server=_server_header(r),
                                     retry_after=retry_after_s(r.headers.get("Retry-After")))
                if r.status >= 400:
                    raise _Fatal(f"HTTP {r.status}: {snippet(raw, 500)}", r.status, _server_header(r))
                try:
                    decoded = decode(raw) if decode is not None else None
                    return _loads(raw) if decoded is None else decoded
                except MalformedResponse as e:  # read, and impossible (a NaN logprob, another request's answer)
                    raise _Retryable(str(e), server=_server_header(r)) from None
                except ValueError as e:  # not JSON, not UTF-8, nested too deep
                    raise _Retryable(f"malformed JSON body ({len(raw)} bytes; {type(e).__name__}: "
                                     f"{str(e)[:60]}): {raw[:80]!r}", server=_server_header(r)) from None
        except aiohttp.ClientConnectorError as e:  # nothing listens there (any more)
            raise _Retryable(f"{type(e).__name__}: {e}".rstrip(": "), refused=True) from None
        except (TimeoutError, aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, OSError) as e:
            # a bad chunk size, a torn body, a reset: this attempt's error (aiohttp raises several kinds for them)
            raise _Retryable(f"{type(e).__name__}: {e}".rstrip(": "), lost=True) from None
        finally:
            self._in_flight -= 1

    async def _once(self, body: JSONObject, check: Callable[[Generation], str | None] | None) -> Generation:
        obj = await self._post(self.api.generate_path, body)
        try:
            gen = self.api.parse_generation(obj)
        except MalformedResponse as e:
            raise _Retryable(str(e)) from None
        problem = check(gen) if check is not None else None
        if problem is not None:
            raise _Retryable(problem)
        return gen

    async def _with_retries(self, reply: Outcome, attempt_once: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``attempt_once`` with retries under the semaphore, filling ``reply``; the result (None on failure)."""
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
                    reply.error, reply.refused, reply.lost, reply.server = str(e), e.refused, e.lost, e.server
                    if attempt > self.cfg.retries:
                        break
                    await self._back_off(attempt, e.retry_after)
                    continue
                except Exception as e:  # noqa: BLE001 - whatever one answer does, it is that request's error
                    reply.error = printable(f"unexpected error reading the answer: {type(e).__name__}: {e}"[:300],
                                            one_line=True)
                    break
                reply.error, reply.refused, reply.lost, reply.status = None, False, False, None
                break
            reply.latency_s = time.perf_counter() - t0
            return result

    async def _back_off(self, attempt: int, retry_after: float | None) -> None:
        """Wait the server's ``Retry-After`` (capped by the request timeout), else back off exponentially."""
        if retry_after is None:
            delay = min(self.cfg.backoff_max_s, self.cfg.backoff_s * 2 ** (attempt - 1))
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            return
        wait = min(retry_after, self.cfg.request_timeout_s)
        if self._retry_after_seen is None or wait > self._retry_after_seen:
            self._notice(f"{self.cfg.url} asked to retry after {retry_after:g} s (HTTP Retry-After); waiting "
                         f"{wait:g} s before retrying" + (" (capped by the request timeout)" if wait < retry_after
                                                          else ""))
            self._retry_after_seen = wait
        self._waiting += 1
        try:
            await asyncio.sleep(wait)
        finally:
            self._waiting -= 1

    async def generate(self, body: JSONObject, check: Callable[[Generation], str | None] | None = None) -> Reply:
        """Send one generation request with retries; never raises for HTTP. ``check``: why a parsed answer is
        not this request's (an attempt's error, retried), or None."""
        reply = Reply()
        gen: Generation | None = await self._with_retries(reply, lambda: self._once(body, check))
        return reply if gen is None else replace(reply, **vars(gen))

    # ------------------------------------------------------------------ teacher-forced scoring
    #: The text of the alignment probe (:meth:`prepare_scoring`).
    PROBE_TEXT = "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:"

    async def prepare_scoring(self) -> Api:
        """Learn how this server aligns echoed logprobs (OpenAI: one greedy token, then the text scored with
        it). :class:`ServerGone` when it cannot be asked, ``ValueError`` when it cannot score."""
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

    async def post_json(self, path: str, body: JSONObject) -> Any:
        """POST ``body`` with retries: the answer; ServerGone if it still fails, ValueError on a 4xx/501."""
        out = Outcome()
        obj = await self._with_retries(out, lambda: self._post(path, body))
        if out.error is not None:
            if (out.status is not None and out.status < 500) or out.not_served:
                raise ValueError(f"POST {path} answered {out.error[:200]}: this server cannot score")
            raise ServerGone(f"POST {self.cfg.url}{path} failed: {out.error}")
        return obj

    async def _tokens(self, prompt: str | list[str], special: bool, good: Callable[[list[Any]], bool]) -> Any:
        """``tokens`` of the first tokenize endpoint whose answer to ``prompt`` is ``good``; None: none is."""
        body: JSONObject = {"prompt": prompt, "add_special_tokens": special}
        if self.api.model:
            body["model"] = self.api.model
        for path in self.api.tokenize_paths:
            try:
                obj = await self.post_json(path, body)
            except ValueError:  # 4xx: not this path (or not this server)
                continue
            tokens = obj.get("tokens") if isinstance(obj, dict) else None
            if isinstance(tokens, list) and good(tokens):
                return tokens
        return None

    async def tokenize(self, text: str, special: bool) -> list[int] | None:
        """``text`` as ids by the server's tokenizer; None when it serves none."""
        got = await self._tokens(text, special, lambda t: all(isinstance(x, int) for x in t))
        return None if got is None else [int(x) for x in got]

    async def tokenize_all(self, texts: list[str], special: bool) -> list[list[int]] | None:
        """Every text as ids by the server's tokenizer, in one request; None when it takes no list."""
        def good(tokens: list[Any]) -> bool:  # lists of ints (not bools) as parsed
            return len(tokens) == len(texts) and all(isinstance(t, list) and set(map(type, t)) <= {int}
                                                     for t in tokens)

        return cast(list[list[int]] | None, await self._tokens(texts, special, good))

    async def score(self, req: ScoreRequest) -> ScoreReply:
        """Score one reference teacher-forced, as :meth:`generate` (after :meth:`prepare_scoring`)."""
        reply = ScoreReply()
        body = self.api.scoring_body(req)

        async def once() -> TokenScores:
            obj = await self._post(self.api.score_path, body, lambda raw: self.api.decode_scores(raw, req))
            if isinstance(obj, TokenScores):  # read from the bytes: no JSON objects made
                return obj
            try:
                return self.api.parse_scores(obj, req)
            except MalformedResponse as e:
                raise _Retryable(str(e)) from None

        reply.scores = await self._with_retries(reply, once)
        return reply

    async def score_batch(self, reqs: Sequence[ScoreRequest]) -> list[ScoreReply]:
        """Score several references in one request (SGLang): one reply per request, in order, sharing its
        outcome (``status`` 4xx: the server refuses batches)."""
        outcome = Outcome()
        body = self.api.batch_scoring_body(reqs)

        async def once() -> list[TokenScores]:
            obj = await self._post(self.api.score_path, body, lambda raw: self.api.decode_batch_scores(raw, reqs))
            if isinstance(obj, list) and all(isinstance(x, TokenScores) for x in obj) and obj:
                return obj  # read from the bytes: no JSON objects made
            try:
                return self.api.parse_batch_scores(obj, reqs)
            except MalformedResponse as e:
                raise _Retryable(str(e)) from None

        got: list[TokenScores] | None = await self._with_retries(outcome, once)
        return [ScoreReply(**{f.name: getattr(outcome, f.name) for f in fields(Outcome)},
                           scores=None if got is None else got[i]) for i in range(len(reqs))]

