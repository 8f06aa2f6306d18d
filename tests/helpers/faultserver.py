"""A hostile HTTP server for the fault matrix (issue 22): it speaks just enough HTTP/1.1 by hand (asyncio streams,
no framework) to send what a well-behaved server never would.

Every fault is a *mode* applied to the generation requests it selects (``every``: each k-th one, 1 = all;
``limit``: at most that many); the others get an ordinary SGLang or OpenAI answer. The health, model and server
info endpoints always answer (``model_path`` is what ``/get_model_info`` reports), unless the mode is about them.

========================  ==============================================================================
mode                      what a selected request gets
========================  ==============================================================================
``ok``                    a normal answer (``answer`` text, ``#### 42`` by default)
``random``                a different answer every time (``#### <random>``): nondeterminism at temperature 0
``bad_chunk``             ``Transfer-Encoding: chunked`` with a chunk size that is not hex
``truncated``             ``Content-Length: 1000`` and 10 bytes, then the connection closes
``meta``                  ``meta_info`` set to ``value`` (e.g. ``7`` or ``[1]``)
``tokens``                ``meta_info.completion_tokens`` set to ``value`` (e.g. ``"12"``, ``1.5``, ``-3``)
``finish``                ``meta_info.finish_reason`` set to ``value``
``deep``                  a 200 whose body is JSON nested ``depth`` (100 000) levels deep
``huge``                  a valid answer whose text is ``size`` bytes (50 MB); ``chunked``: no Content-Length
``trickle``               headers at once, then the body at ``rate`` bytes/s, forever
``hang``                  nothing at all (the health endpoint still answers)
``status``                HTTP ``status`` with ``body`` and extra ``headers`` (429 + Retry-After, an ANSI
                          error page, 404 with a hostile ``Server`` header ...)
``auth``                  401 unless the request's ``Authorization`` header is ``expect``
========================  ==============================================================================

Use it in a thread (``with FaultServer("huge", every=20) as srv: srv.url``) or as a process
(``python tests/helpers/faultserver.py --mode huge --every 20 --port N``). It binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from helpers.waiting import PATIENCE_S

MODES = ("ok", "random", "bad_chunk", "truncated", "meta", "tokens", "finish", "deep", "huge", "trickle", "hang",
         "status", "auth")
GENERATE_PATHS = ("/generate", "/v1/completions")
HEALTH_PATHS = ("/health", "/health_generate")
#: ANSI/OSC sequences a hostile page may carry: a window title, a screen clear, an OSC-8 link, a C1 CSI
ANSI = "\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m \x1b]8;;http://evil.example/\x07click\x1b]8;;\x07 \x9b31m"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body or b"null")
        except ValueError:
            return None


@dataclass
class FaultServer:
    """See the module docstring. ``requests``: every request line seen; ``auth_seen``: the Authorization headers
    of the generation requests, in order."""

    mode: str = "ok"
    every: int = 1
    limit: int | None = None
    value: Any = None
    status: int = 500
    body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    size: int = 50 * 1024 * 1024
    chunked: bool = False
    depth: int = 100_000
    rate: float = 10.0
    expect: str = ""
    answer: str = "The answer is 42.\n#### 42"
    model_path: str = "fault/model"
    port: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        self.port = self.port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.requests: list[str] = []
        self.auth_seen: list[str | None] = []
        self.generations = 0
        self.faults = 0
        self._huge: bytes | None = None
        self._rng = random.Random()

    # ------------------------------------------------------------------ selection
    def _selected(self) -> bool:
        self.generations += 1
        if (self.generations - 1) % max(1, self.every) != 0:
            return False
        if self.limit is not None and self.faults >= self.limit:
            return False
        self.faults += 1
        return True

    # ------------------------------------------------------------------ answers
    @staticmethod
    def _head(status: int, headers: dict[str, str]) -> bytes:
        reason = {200: "OK", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
                  500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")

    async def _send(self, w: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str] | None = None,
                    ctype: str = "application/json") -> None:
        h = {"Content-Type": ctype, "Content-Length": str(len(body)), "Server": "faultserver", **(headers or {})}
        w.write(self._head(status, h) + body)
        await w.drain()

    def _answer(self, req: Request, text: str, meta: dict[str, Any] | None = None) -> bytes:
        if req.path == "/v1/completions":
            usage = {"prompt_tokens": 100, "completion_tokens": 5}
            return json.dumps({"choices": [{"text": text, "finish_reason": "stop", "index": 0}],
                               "usage": usage}).encode()
        m = {"prompt_tokens": 100, "completion_tokens": 5, "finish_reason": {"type": "stop"}} if meta is None else meta
        return json.dumps({"text": text, "meta_info": m}).encode()

    def _huge_body(self, req: Request) -> bytes:
        if self._huge is None:
            self._huge = self._answer(req, "9" * self.size)
        return self._huge

    async def _generate(self, req: Request, w: asyncio.StreamWriter) -> bool:
        """Answer one generation request; False when the connection must close afterwards."""
        self.auth_seen.append(req.headers.get("authorization"))
        mode = self.mode
        if mode == "auth":
            if req.headers.get("authorization") != self.expect:
                await self._send(w, 401, b'{"error": "unauthorized"}')
                return True
            mode = "ok"
        if mode != "ok" and not self._selected():
            mode = "ok"
        if mode == "ok":
            await self._send(w, 200, self._answer(req, self.answer))
        elif mode == "random":
            await self._send(w, 200, self._answer(req, f"Let me think.\n#### {self._rng.randrange(10**9)}"))
        elif mode == "bad_chunk":
            w.write(self._head(200, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
                    + b"zz\r\n{\"text\": \"x\"}\r\n0\r\n\r\n")
            await w.drain()
            return False
        elif mode == "truncated":
            w.write(self._head(200, {"Content-Type": "application/json", "Content-Length": "1000"}) + b'{"text": "')
            await w.drain()
            return False
        elif mode == "meta":
            await self._send(w, 200, json.dumps({"text": self.answer, "meta_info": self.value}).encode())
        elif mode in ("tokens", "finish"):
            meta: dict[str, Any] = {"prompt_tokens": 100, "completion_tokens": 5, "finish_reason": {"type": "stop"}}
            meta["completion_tokens" if mode == "tokens" else "finish_reason"] = self.value
            if req.path == "/v1/completions":
                finish = self.value if mode == "finish" else "stop"
                body = {"choices": [{"text": self.answer, "finish_reason": finish}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": meta["completion_tokens"]}}
                await self._send(w, 200, json.dumps(body).encode())
            else:
                await self._send(w, 200, self._answer(req, self.answer, meta))
        elif mode == "deep":
            await self._send(w, 200, b"[" * self.depth + b"]" * self.depth)
        elif mode == "huge":
            await self._huge_answer(req, w)
        elif mode == "trickle":
            w.write(self._head(200, {"Content-Type": "application/json", "Content-Length": "100000"}))
            await w.drain()
            while True:
                w.write(b" ")
                await w.drain()
                await asyncio.sleep(1.0 / self.rate)
        elif mode == "hang":
            await asyncio.Event().wait()
        elif mode == "status":
            await self._send(w, self.status, self.body.encode("utf-8", "surrogateescape"), self.headers,
                             ctype="text/html")
        return True

    async def _huge_answer(self, req: Request, w: asyncio.StreamWriter) -> None:
        body = self._huge_body(req)
        if not self.chunked:
            await self._send(w, 200, body)
            return
        w.write(self._head(200, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}))
        step = 1 << 20
        for i in range(0, len(body), step):
            part = body[i:i + step]
            w.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()

    async def _route(self, req: Request, w: asyncio.StreamWriter) -> bool:
        path = req.path.split("?", 1)[0]
        if req.method == "POST" and path in GENERATE_PATHS:
            return await self._generate(req, w)
        if path in HEALTH_PATHS:
            await self._send(w, 200, b"{}")
        elif path in ("/get_model_info", "/model_info"):
            await self._send(w, 200, json.dumps({"model_path": self.model_path}).encode())
        elif path in ("/get_server_info", "/server_info"):
            await self._send(w, 200, json.dumps({"version": "fault-0", "model_path": self.model_path}).encode())
        elif path == "/v1/models":
            await self._send(w, 200, json.dumps({"data": [{"id": self.model_path}]}).encode())
        else:
            await self._send(w, 404, b'{"error": "no such route"}')
        return True

    # ------------------------------------------------------------------ HTTP/1.1, by hand
    @staticmethod
    async def _read(r: asyncio.StreamReader) -> Request | None:
        try:
            head = await r.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, path = (lines[0].split(" ") + ["", ""])[:2]
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length") or 0)
        try:
            body = await r.readexactly(n) if n else b""
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        return Request(method, path, headers, body)

    async def _conn(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                req = await self._read(r)
                if req is None:
                    break
                self.requests.append(f"{req.method} {req.path}")
                if not await self._route(req, w):
                    break
        except (ConnectionError, OSError):
            pass  # the client gave up on us: that is the point of most modes
        except asyncio.CancelledError:
            pass  # the server is closing (a hanging or trickling connection ends here)
        finally:
            w.close()

    async def serve(self) -> None:
        """Serve until cancelled (the process entry point)."""
        server = await asyncio.start_server(self._conn, "127.0.0.1", self.port, backlog=4096, limit=1 << 20)
        async with server:
            await server.serve_forever()

    # ------------------------------------------------------------------ in a thread
    def __enter__(self) -> FaultServer:
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._conn, "127.0.0.1", self.port, backlog=4096, limit=1 << 20))
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(PATIENCE_S):
            raise RuntimeError("fault server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            self._server.close()
            for t in asyncio.all_tasks():
                if t is not asyncio.current_task():
                    t.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def main() -> None:
    ap = argparse.ArgumentParser(description="A hostile HTTP server for abh's fault tests (127.0.0.1 only).")
    ap.add_argument("--mode", choices=MODES, default="ok")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--every", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--size", type=int, default=50 * 1024 * 1024)
    ap.add_argument("--chunked", action="store_true")
    ap.add_argument("--status", type=int, default=500)
    ap.add_argument("--body", default="")
    ap.add_argument("--value", default=None, help="JSON value for the meta / tokens / finish modes")
    ap.add_argument("--model-path", default="fault/model")
    a = ap.parse_args()
    srv = FaultServer(a.mode, every=a.every, limit=a.limit, size=a.size, chunked=a.chunked, status=a.status,
                      body=a.body, value=None if a.value is None else json.loads(a.value),
                      model_path=a.model_path, port=a.port)
    print(f"faultserver {srv.mode} listening on {srv.url}", flush=True)
    asyncio.run(srv.serve())


if __name__ == "__main__":
    main()
