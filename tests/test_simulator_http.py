"""The simulated engine's own HTTP/1.1 server (abh_simulator.httpd), in process on a free port: framing, keep-alive,
pipelining, what it refuses, and answers in the bytes and content types aiohttp.web wrote before."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Awaitable, Callable

import pytest

from abh_simulator import httpd
from abh_simulator.server import Handlers, build_routes
from abh_simulator.sim_config import SimConfig
from abh_simulator.state import SimState


@functools.cache
def _default_state() -> SimState:
    """One launch's state for the tests that need no knob (its tokenizer is built once)."""
    return SimState(SimConfig(run_seed=1))


def _on_server(talk: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bytes]],
               cfg: SimConfig | None = None) -> bytes:
    """What ``talk`` returns, talking to a simulator served in process on a free port over one connection."""
    async def main() -> bytes:
        st = _default_state() if cfg is None else SimState(cfg)
        server, conns, port = await httpd.listen(build_routes(Handlers(st)), "127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            got = await talk(reader, writer)
            writer.close()
            return got
        finally:
            await httpd.shut_down(server, conns)
    return asyncio.run(main())


def _exchange(raw: bytes, cfg: SimConfig | None = None) -> bytes:
    """Everything the simulator answers ``raw`` until it closes the connection (a kept-alive one is ended by a
    trailing request with ``Connection: close``)."""
    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        writer.write(raw)
        await writer.drain()
        return await reader.read()
    return _on_server(talk, cfg)


CLOSE = b"GET /version HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _answers(raw: bytes, heads: tuple[int, ...] = ()) -> list[tuple[str, dict[str, str], bytes]]:
    """(status line, headers, body) of each answer in ``raw`` (those numbered in ``heads``: to HEAD, no body)."""
    out = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        n = 0 if len(out) in heads else int(headers.get("content-length", "0"))
        out.append((lines[0], headers, rest[:n]))
        raw = rest[n:]
    return out


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_kept_alive_pipelined_requests_are_answered_in_order_until_connection_close():
    gen = json.dumps({"text": "Question: 1+1?\nAnswer:", "sampling_params": {"max_new_tokens": 5}}).encode()
    got = _answers(_exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + _post("/generate", gen)
                             + b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n" + CLOSE))
    assert [a[0] for a in got] == ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK", "HTTP/1.1 404 Not Found", "HTTP/1.1 200 OK"]
    assert got[0][1]["content-type"] == "text/plain; charset=utf-8" and got[0][2] == b""
    assert got[1][1]["content-type"] == "application/json"
    assert json.loads(got[1][2])["meta_info"]["completion_tokens"] == 5
    assert got[2][2] == b"404: Not Found"
    assert "connection" not in got[0][1] and got[3][1]["connection"] == "close"
    assert got[3][2] == b'{"version": "simulated-0.1.0", "simulated": true}'  # the stdlib's json, as before


def test_a_body_in_pieces_after_100_continue():
    body = json.dumps({"prompt": "a b c"}).encode()
    req = _post("/tokenize", body, "Expect: 100-continue\r\nConnection: close\r\n")

    async def talk(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        writer.write(req[:len(req) - len(body)])
        interim = await reader.readuntil(b"\r\n\r\n")  # asked before the body is sent, as a client waits for it
        for piece in (body[:5], body[5:]):
            writer.write(piece)
            await writer.drain()
        return interim + await reader.read()

    got = _on_server(talk)
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert json.loads(_answers(got.split(b"\r\n\r\n", 1)[1])[0][2])["count"] == 3


def test_http_1_0_closes_unless_asked_to_keep_alive():
    got = _answers(_exchange(b"GET /version HTTP/1.0\r\n\r\n"))
    assert got[0][1]["connection"] == "close"
    got = _answers(_exchange(b"GET /version HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" + CLOSE))
    assert [a[1].get("connection") for a in got] == ["keep-alive", "close"]


def test_head_and_a_method_not_allowed():
    got = _answers(_exchange(b"HEAD /version HTTP/1.1\r\nHost: x\r\n\r\n" + b"DELETE /health HTTP/1.1\r\nHost: x\r\n\r\n" + CLOSE),
                   heads=(0,))
    assert got[0][0] == "HTTP/1.1 200 OK" and got[0][1]["content-length"] == "49" and got[0][2] == b""
    assert got[1][0] == "HTTP/1.1 405 Method Not Allowed" and got[1][1]["allow"] == "GET,HEAD"
    assert got[1][2] == b"405: Method Not Allowed" and got[2][0] == "HTTP/1.1 200 OK"


@pytest.mark.parametrize("raw,status", [
    (b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411),
    (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400),
    (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n", 413),
    (b"NONSENSE\r\n\r\n", 400),
    (b"GET /health HTTP/2.0\r\n\r\n", 505),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", 400),
    (b"GET /health HTTP/1.1\r\n\r\n", 400),
], ids=["chunked", "bad-length", "too-large", "bad-line", "version", "bad-header", "no-host"])
def test_what_it_does_not_read_is_refused_and_the_connection_closed(raw, status):
    got = _answers(_exchange(raw))
    assert len(got) == 1 and got[0][0].startswith(f"HTTP/1.1 {status} ")
    assert got[0][1]["connection"] == "close" and got[0][2].startswith(f"{status}: ".encode())


def test_error_bodies_are_the_json_aiohttp_wrote():
    got = _answers(_exchange(_post("/generate", b"{oops") + _post("/v1/completions", b"[1]") + CLOSE))
    msg = "request body is not valid JSON"
    assert got[0][0] == "HTTP/1.1 400 Bad Request" and got[0][1]["content-type"] == "application/json; charset=utf-8"
    assert got[0][2] == json.dumps({"error": {"message": msg, "code": 400, "object": "error"},
                                    "object": "error", "message": msg, "code": 400}).encode()
    assert json.loads(got[1][2])["message"] == "request body must be a JSON object"


def test_a_request_that_waits_is_answered_in_order_with_those_after_it():
    """With the concurrency limit a generation's answer waits for a task; a request pipelined behind it is
    answered after it."""
    gen = json.dumps({"text": "Question: 2+2?\nAnswer:", "sampling_params": {"max_new_tokens": 3}}).encode()
    got = _answers(_exchange(_post("/generate", gen) + CLOSE, SimConfig(run_seed=1, max_running_requests=1)))
    assert [a[0] for a in got] == ["HTTP/1.1 200 OK"] * 2
    assert "meta_info" in json.loads(got[0][2]) and b"version" in got[1][2]
