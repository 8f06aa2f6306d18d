"""A lean HTTP/1.1 server on asyncio's Protocol API: what the simulated engine needs and no more.

Request line, headers, ``Content-Length`` bodies (up to 64 MiB, else 413), keep-alive (HTTP/1.1's default;
HTTP/1.0 with ``Connection: keep-alive``), ``Connection: close``, ``Expect: 100-continue``, pipelined requests
(answered in order), ``HEAD`` on every ``GET`` route. A chunked request body is answered 411 (no client of the
simulator sends one: send ``Content-Length``); a malformed request line or header, or an HTTP/1.1 request
without ``Host``, 400; a head over 64 KiB 431; each of those closes the connection. An unknown path is 404, a
known one with another method 405 (with ``Allow``), as aiohttp answers.

A handler returns its :class:`HttpReply`, or an awaitable of it when it must wait (a simulated latency, the
concurrency limit, a hang): a reply at hand is written at once, without a task (an eval's thousands of requests
cost a parse, a call and a write each; aiohttp's per-connection and per-request machinery was most of the
simulator's CPU in one).
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
#: an idle connection (no request being read or answered) is closed after this long
IDLE_TIMEOUT_S = 75.0
#: bytes buffered past a request whose answer waits before reading pauses
PAUSE_BYTES = MAX_BODY_BYTES + MAX_HEAD_BYTES
JSON = "application/json"
JSON_UTF8 = "application/json; charset=utf-8"
TEXT_UTF8 = "text/plain; charset=utf-8"
SERVER = "abh-simulator"


class HttpRequest:
    """One parsed request: ``method``, ``path`` (without the query), lower-cased ``headers``, the ``body``."""

    __slots__ = ("method", "path", "query", "headers", "body")

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes):
        self.method, self.path, self.query, self.headers, self.body = method, path, query, headers, body


class HttpReply:
    """A whole answer: status, body, ``Content-Type``, and any other headers."""

    __slots__ = ("status", "body", "content_type", "headers")

    def __init__(self, status: int, body: bytes, content_type: str = JSON,
                 headers: tuple[tuple[str, str], ...] = ()):
        self.status, self.body, self.content_type, self.headers = status, body, content_type, headers


Handler = Callable[[HttpRequest], HttpReply | Awaitable[HttpReply]]


class Routes:
    """``(method, path) -> handler``; ``HEAD`` comes with every ``GET``."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, str], Handler] = {}
        self.methods: dict[str, list[str]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        for m in (method, "HEAD") if method == "GET" else (method,):
            self.table[(m, path)] = handler
            self.methods.setdefault(path, []).append(m)

    def find(self, method: str, path: str) -> Handler | None:
        return self.table.get((method, path))

    def not_found(self, method: str, path: str) -> HttpReply:
        allowed = self.methods.get(path)
        if allowed is None:
            return HttpReply(404, b"404: Not Found", TEXT_UTF8)
        return HttpReply(405, b"405: Method Not Allowed", TEXT_UTF8, (("Allow", ",".join(sorted(allowed))),))


_STATUS_LINES: dict[int, bytes] = {}
#: (the second, the Date and Server header lines of an answer made in it): made once a second
_date: list[tuple[int, bytes]] = [(0, b"")]


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Unknown"
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("ascii")
    return line


def _date_header() -> bytes:
    now = int(time.time())
    second, lines = _date[0]
    if now != second:
        lines = f"Date: {formatdate(now, usegmt=True)}\r\nServer: {SERVER}\r\n".encode("ascii")
        _date[0] = (now, lines)
    return lines


def head_of(reply: HttpReply, length: int, connection: bytes) -> bytes:
    """The status line and headers of ``reply`` (``length``: its Content-Length)."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in reply.headers)
    return b"".join((_status_line(reply.status), b"Content-Type: ", reply.content_type.encode("latin-1"),
                     b"\r\nContent-Length: ", str(length).encode("ascii"), b"\r\n", _date_header(),
                     extra.encode("latin-1"), connection, b"\r\n"))


class _Refused(Exception):
    """A request this server will not read: its status and message; the connection closes after the answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _parse_head(head: bytes) -> tuple[str, str, str, bool, dict[str, str]]:
    """(method, path, query, HTTP/1.1?, headers) of a request head (without its final blank line)."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        raise _Refused(400, "undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
        raise _Refused(400, f"bad request line {lines[0][:100]!r}")
    method, target, version = parts
    if version == "HTTP/1.1":
        v11 = True
    elif version == "HTTP/1.0":
        v11 = False
    else:
        raise _Refused(505 if version.startswith("HTTP/") else 400, f"unsupported HTTP version {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name:
            raise _Refused(400, f"bad header line {line[:100]!r}")
        key = name.lower()
        value = value.strip()
        if key in headers:
            if key == "content-length" and headers[key] != value:
                raise _Refused(400, "conflicting Content-Length headers")
            headers[key] = value if key == "content-length" else headers[key] + ", " + value
        else:
            headers[key] = value
    if v11 and "host" not in headers:  # RFC 9112 3.2; aiohttp refused it too
        raise _Refused(400, "HTTP/1.1 request without a Host header")
    path, _, query = target.partition("?")
    return method, path, query, v11, headers


def _body_length(headers: dict[str, str]) -> int:
    if "transfer-encoding" in headers:
        raise _Refused(411, "chunked (Transfer-Encoding) request bodies are not supported: send Content-Length")
    raw = headers.get("content-length")
    if raw is None:
        return 0
    if not raw.isdigit() or not raw.isascii():
        raise _Refused(400, f"bad Content-Length {raw[:40]!r}")
    n = int(raw)
    if n > MAX_BODY_BYTES:
        raise _Refused(413, f"request body of {n} bytes is over the limit ({MAX_BODY_BYTES})")
    return n


KEEP = b""
KEEP_1_0 = b"Connection: keep-alive\r\n"
CLOSE = b"Connection: close\r\n"


def _connection(v11: bool, headers: dict[str, str]) -> bytes:
    """The answer's Connection header: none (HTTP/1.1 keeps the connection), keep-alive (HTTP/1.0 asking to keep it)
    or close."""
    tokens = headers.get("connection", "").lower()
    if v11:
        return CLOSE if "close" in tokens else KEEP
    return KEEP_1_0 if "keep-alive" in tokens else CLOSE


class HttpConnection(asyncio.Protocol):
    """One client connection: reads requests, answers them in order."""

    def __init__(self, routes: Routes, connections: set[HttpConnection]):
        self.routes = routes
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        #: the head of a request whose body is still arriving: (method, path, query, Connection, headers, length)
        self.pending: tuple[str, str, str, bytes, dict[str, str], int] | None = None
        self.task: asyncio.Task[None] | None = None
        self.closing = False
        self.paused = False
        self.idle_timer: asyncio.TimerHandle | None = None

    # ---------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        # a request being answered runs to its end (a simulated latency then counts it done), as aiohttp's
        # handlers do when their client goes; its answer is dropped
        self.connections.discard(self)
        self.closing = True
        if self.idle_timer is not None:
            self.idle_timer.cancel()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        self.buf += data
        if self.task is None:
            self._serve_buffered()
        elif len(self.buf) > PAUSE_BYTES and not self.paused:
            # a client pipelining far ahead of an answer that waits: stop reading until it is written. (Reading
            # goes on otherwise, so a client that goes away while its answer waits is seen to.)
            self.paused = True
            self.transport.pause_reading()  # type: ignore[union-attr]

    # ---------------------------------------------------------------- requests
    @property
    def idle(self) -> bool:
        """No request is being answered or half-read."""
        return self.task is None and self.pending is None and not self.buf

    def _serve_buffered(self) -> None:
        """Answer every whole request in the buffer, in order, until one must wait."""
        while not self.closing and self.task is None:
            try:
                req = self._next_request()
            except _Refused as e:
                self._write(HttpReply(e.status, f"{e.status}: {e}".encode(), TEXT_UTF8), CLOSE, False)
                return
            if req is None:
                if self.idle:
                    self._arm_idle()
                return
            request, connection = req
            handler = self.routes.find(request.method, request.path)
            try:
                got = self.routes.not_found(request.method, request.path) if handler is None else handler(request)
            except Exception:  # noqa: BLE001 - a bug answers 500, as aiohttp did, and the server goes on
                got = _internal_error()
            head_only = request.method == "HEAD"
            if isinstance(got, HttpReply):
                self._write(got, connection, head_only)
            else:
                self.task = asyncio.get_running_loop().create_task(self._finish(got, connection, head_only))

    def _next_request(self) -> tuple[HttpRequest, bytes] | None:
        """The next whole request in the buffer and its answer's Connection header (None: not all here)."""
        if self.pending is None:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEAD_BYTES:
                    raise _Refused(431, "request head too large")
                return None
            if end > MAX_HEAD_BYTES:
                raise _Refused(431, "request head too large")
            method, path, query, v11, headers = _parse_head(bytes(self.buf[:end]))
            length = _body_length(headers)
            del self.buf[:end + 4]
            self.pending = (method, path, query, _connection(v11, headers), headers, length)
            if length > len(self.buf) and v11 and headers.get("expect", "").lower() == "100-continue":
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # type: ignore[union-attr]
        method, path, query, connection, headers, length = self.pending
        if len(self.buf) < length:
            return None
        body = bytes(self.buf[:length])
        del self.buf[:length]
        self.pending = None
        return HttpRequest(method, path, query, headers, body), connection

    async def _finish(self, got: Awaitable[HttpReply], connection: bytes, head_only: bool) -> None:
        try:
            reply = await got
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - as in _serve_buffered
            reply = _internal_error()
        self.task = None
        if self.closing:
            return
        self._write(reply, connection, head_only)
        if not self.closing:
            if self.paused:
                self.paused = False
                self.transport.resume_reading()  # type: ignore[union-attr]
            self._serve_buffered()

    def _write(self, reply: HttpReply, connection: bytes, head_only: bool) -> None:
        t = self.transport
        assert t is not None
        head = head_of(reply, len(reply.body), connection)
        if head_only or not reply.body:
            t.write(head)
        elif len(reply.body) < 65536:
            t.write(head + reply.body)
        else:
            t.writelines((head, reply.body))
        if connection is CLOSE:
            self.closing = True
            t.close()

    def _arm_idle(self) -> None:
        """Close the connection if it stays idle ``IDLE_TIMEOUT_S`` (as aiohttp's keep-alive timeout did)."""
        self.idle_timer = asyncio.get_running_loop().call_later(IDLE_TIMEOUT_S, self._close_idle)

    def _close_idle(self) -> None:
        self.idle_timer = None
        if self.idle and not self.closing:
            self.closing = True
            self.transport.close()  # type: ignore[union-attr]

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


def _internal_error() -> HttpReply:
    traceback.print_exc(file=sys.stderr)
    return HttpReply(500, b"500 Internal Server Error\n\nServer got itself in trouble", TEXT_UTF8)


async def listen(routes: Routes, host: str, port: int) -> tuple[asyncio.AbstractServer, set[HttpConnection], int]:
    """Listen on ``host:port`` (port 0: a free one): (the server, its open connections, the port it got)."""
    connections: set[HttpConnection] = set()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpConnection(routes, connections), host, port, backlog=4096,
                                      reuse_address=True)
    sockets = server.sockets or ()
    got = sockets[0].getsockname()[1] if sockets else port
    return server, connections, got


async def shut_down(server: asyncio.AbstractServer, connections: set[HttpConnection], grace_s: float = 1.0) -> None:
    """Stop listening, close idle connections, give requests being answered ``grace_s`` and drop the rest."""
    server.close()
    deadline = time.monotonic() + grace_s
    while True:
        for c in list(connections):
            if c.idle:
                c.abort()
        if not connections or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.02)
    for c in list(connections):
        c.abort()
