"""The simulated engine's HTTP server: SGLang's and OpenAI's wire protocols plus the side endpoints, served by
``abh_simulator.httpd`` (a lean HTTP/1.1 server on asyncio's Protocol API).

Routes: ``POST /generate`` (SGLang), ``POST /v1/completions`` (OpenAI/vLLM), ``POST /v1/chat/completions`` (the
OpenAI chat API; the last user message is the prompt), ``POST /tokenize`` and
``/detokenize`` (also under ``/v1``), ``GET /health`` and ``/health_generate`` (one handler, 503 until ready,
as SGLang), ``/get_server_info`` and ``/server_info``, ``/get_model_info`` and ``/model_info``,
``/flush_cache``, ``/v1/models``, ``/version``. Request and response shapes: ``abh_simulator.protocol``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from abh_simulator import protocol
from abh_simulator.httpd import JSON, JSON_UTF8, TEXT_UTF8, HttpReply, HttpRequest, Routes, listen, shut_down
from abh_simulator.sim_config import SimConfig
from abh_simulator.state import SIM_VERSION, SimError, SimState

Work = Callable[..., Any]
Answer = HttpReply | Awaitable[HttpReply]


def _dumps(obj: Any) -> bytes:
    """A response body by orjson (a scoring answer holds millions of numbers: several times faster than the
    stdlib's). Every float the simulator answers is finite by construction (logprobs of a softmax over finite
    logits, a finite tail), so orjson's null for a non-finite float never arises."""
    return orjson.dumps(obj)


def _json(obj: Any, status: int = 200) -> HttpReply:
    """A small answer written by the stdlib's json, as aiohttp's ``json_response`` wrote it (same bytes)."""
    return HttpReply(status, json.dumps(obj).encode(), JSON_UTF8)


def _text(text: str, status: int = 200) -> HttpReply:
    return HttpReply(status, text.encode(), TEXT_UTF8)


def _err(status: int, message: str) -> HttpReply:
    return _json({"error": {"message": message, "code": status, "object": "error"},
                  "object": "error", "message": message, "code": status}, status=status)


def _read_json(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)  # a scoring request carries ~1000 ids: 5x faster than the stdlib's parser
    except orjson.JSONDecodeError:
        try:  # what orjson refuses but Python's json reads (NaN, Infinity, lone surrogates) is read as before
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise SimError(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise SimError(400, "request body must be a JSON object")
    return body


async def _forever() -> HttpReply:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")  # pragma: no cover


class Handlers:
    def __init__(self, st: SimState):
        self.st = st

    # -------------------------------------------------------------- fault/admission wrapper
    def _serve(self, request: HttpRequest, work: Work) -> Answer:
        """The answer to a generation request, at once unless it must wait (a latency, the concurrency limit, a
        hang: then an awaitable of it)."""
        st, cfg = self.st, self.st.cfg
        if st.starting():
            return _err(503, "simulated server is starting (--startup-s)")
        try:
            body = _read_json(request.body)
            prepared = work(body, validate_only=True)
        except SimError as e:
            return _err(e.status, str(e))
        st.received += 1
        if cfg.hang_after > 0 and st.received > cfg.hang_after:
            return _forever()  # simulated hang: never answers
        if cfg.crash_after > 0 and st.received > cfg.crash_after:
            return _forever()  # the process is about to exit
        t0 = time.perf_counter()
        if cfg.error_rate > 0 and st.fault_rng.random() < cfg.error_rate:
            status = st.fault_rng.choice([500, 503])
            return self._done(_err(status, f"simulated fault (--error-rate {cfg.error_rate})"))
        if st.sem is None and cfg.latency_s <= 0:
            return self._done(self._run(work, body, prepared, t0))
        return self._waited(work, body, prepared, t0)

    async def _waited(self, work: Work, body: dict[str, Any], prepared: Any, t0: float) -> HttpReply:
        cfg = self.st.cfg
        if self.st.sem is not None:
            async with self.st.sem:
                if cfg.latency_s > 0:
                    await asyncio.sleep(cfg.latency_s)
                reply = self._run(work, body, prepared, t0)
        else:
            await asyncio.sleep(cfg.latency_s)
            reply = self._run(work, body, prepared, t0)
        return self._done(reply)

    def _run(self, work: Work, body: dict[str, Any], prepared: Any, t0: float) -> HttpReply:
        st, cfg = self.st, self.st.cfg
        try:
            payload = _dumps(work(body, prepared=prepared, t0=t0))
        except SimError as e:
            return _err(e.status, str(e))
        if cfg.malformed_rate > 0 and st.fault_rng.random() < cfg.malformed_rate:
            if st.fault_rng.random() < 0.5:
                payload = payload[: max(1, len(payload) // 2)]
            else:
                payload = b"<html><body>502 Bad Gateway (simulated)</body></html>"
        return HttpReply(200, payload, JSON)

    def _done(self, reply: HttpReply) -> HttpReply:
        st, cfg = self.st, self.st.cfg
        st.completed += 1
        if cfg.crash_after > 0 and st.completed >= cfg.crash_after and not st.exiting:
            st.exiting = True
            print(f"simulated crash: exiting after {st.completed} generate requests (--crash-after)",
                  file=sys.stderr, flush=True)
            asyncio.get_running_loop().call_later(0.05, os._exit, 1)
        return reply

    # -------------------------------------------------------------- SGLang /generate
    def _sglang(self, body: dict[str, Any], validate_only: bool = False, prepared: Any = None,
                t0: float = 0.0) -> Any:
        if validate_only:
            return protocol.parse_generate(self.st, body)
        items, n, batched, opts = prepared
        pending: list[protocol.Pending | protocol.OwnPending] = []  # the items' alternatives, written at once below
        run = {**opts, "pending": pending, "prescored": protocol.prescore(self.st, items, n)}
        out = [protocol.generate_one(self.st, it, run, t0) for it in items for _ in range(n)]
        protocol.write_pending(pending)
        return out if (batched or n > 1) else out[0]

    def generate(self, request: HttpRequest) -> Answer:
        return self._serve(request, self._sglang)

    # -------------------------------------------------------------- OpenAI /v1/completions
    def _openai(self, body: dict[str, Any], validate_only: bool = False, prepared: Any = None,
                t0: float = 0.0) -> Any:
        if validate_only:
            return protocol.parse_completions(self.st, body)
        return protocol.completions_response(self.st, prepared)

    def completions(self, request: HttpRequest) -> Answer:
        return self._serve(request, self._openai)

    # -------------------------------------------------------------- OpenAI /v1/chat/completions
    def _chat(self, body: dict[str, Any], validate_only: bool = False, prepared: Any = None,
              t0: float = 0.0) -> Any:
        if validate_only:
            return protocol.parse_chat(self.st, body)
        return protocol.chat_response(self.st, prepared)

    def chat(self, request: HttpRequest) -> Answer:
        return self._serve(request, self._chat)

    # -------------------------------------------------------------- tokenizer
    def _plain(self, request: HttpRequest, fn: Callable[[SimState, dict[str, Any]], Any]) -> HttpReply:
        if self.st.starting():
            return _err(503, "simulated server is starting (--startup-s)")
        try:
            # orjson: a tokenize answer for a whole pass holds ~1.5 million ids
            return HttpReply(200, _dumps(fn(self.st, _read_json(request.body))), JSON)
        except SimError as e:
            return _err(e.status, str(e))

    def tokenize(self, request: HttpRequest) -> HttpReply:
        return self._plain(request, protocol.tokenize)

    def detokenize(self, request: HttpRequest) -> HttpReply:
        return self._plain(request, protocol.detokenize)

    # -------------------------------------------------------------- side endpoints
    def health(self, request: HttpRequest) -> Answer:
        """``/health`` and ``/health_generate``: one handler, as in SGLang: 503 until ready, silent when hung."""
        if self.st.starting():
            return _text("starting (simulated)", 503)
        if self.st.hung():
            return _forever()
        return _text("")

    def server_info(self, request: HttpRequest) -> HttpReply:
        return _json(self.st.server_info())

    def model_info(self, request: HttpRequest) -> HttpReply:
        return _json({"model_path": self.st.cfg.model_path, "tokenizer_path": self.st.cfg.model_path,
                      "is_generation": True, "simulated": True, "engine": "simulated", "build": self.st.cfg.build})

    def flush_cache(self, request: HttpRequest) -> HttpReply:
        self.st.prefix_cache.clear()
        return _text("Cache flushed (simulated).\n")

    def models(self, request: HttpRequest) -> HttpReply:
        return _json({"object": "list", "data": [{
            "id": self.st.cfg.model_path, "object": "model", "created": int(time.time()),
            "owned_by": "simulated", "root": self.st.cfg.model_path, "max_model_len": 32768}]})

    def version(self, request: HttpRequest) -> HttpReply:
        return _json({"version": SIM_VERSION, "simulated": True})


def build_routes(h: Handlers) -> Routes:
    """Every endpoint of the simulated engine, routed to ``h``."""
    r = Routes()
    r.add("POST", "/generate", h.generate)
    r.add("POST", "/v1/completions", h.completions)
    r.add("POST", "/v1/chat/completions", h.chat)
    r.add("GET", "/health", h.health)
    r.add("GET", "/health_generate", h.health)
    for p in ("/get_server_info", "/server_info"):
        r.add("GET", p, h.server_info)
    for p in ("/get_model_info", "/model_info"):
        r.add("GET", p, h.model_info)
    r.add("POST", "/flush_cache", h.flush_cache)
    r.add("GET", "/flush_cache", h.flush_cache)
    r.add("GET", "/v1/models", h.models)
    r.add("GET", "/version", h.version)
    for prefix in ("", "/v1"):
        r.add("POST", prefix + "/tokenize", h.tokenize)
        r.add("POST", prefix + "/detokenize", h.detokenize)
    return r


async def serve(cfg: SimConfig, argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; prints ``simulated server ready on http://HOST:PORT`` once listening."""
    st = SimState(cfg, argv)  # loads the data and draws this launch's outcomes
    # the scoring model's modules (numpy, ~0.15 s) before the server says ready, as an engine loads its model: the
    # first scoring request would otherwise pay them inside a scoring pass
    from abh_simulator import jsonfmt, logprobs  # noqa: F401
    server, connections, port = await listen(build_routes(Handlers(st)), cfg.host, cfg.port)
    st.t0 = time.monotonic()
    cfg.port = port
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if cfg.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"SIMULATED engine (not a model): build={cfg.build!r} model_path={cfg.model_path!r} "
          f"ability={st.ability:.3f} expected_accuracy={st.expected_accuracy:.4f} "
          f"run_seed={st.run_seed} flip_rate={cfg.flip_rate} noise={cfg.noise} questions={len(st.rows)}",
          file=sys.stderr, flush=True)
    print(f"simulated server ready on http://{cfg.host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await shut_down(server, connections)
