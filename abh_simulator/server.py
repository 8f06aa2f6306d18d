"""The simulated engine's HTTP server (aiohttp): SGLang's and OpenAI's wire protocols plus the side endpoints.

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
from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from abh_simulator import protocol
from abh_simulator.sim_config import SimConfig
from abh_simulator.state import SIM_VERSION, SimError, SimState

Work = Callable[..., Any]


def _dumps(obj: Any) -> bytes:
    """A response body by orjson (a scoring answer holds millions of numbers: several times faster than the
    stdlib's). Every float the simulator answers is finite by construction (logprobs of a softmax over finite
    logits, a finite tail), so orjson's null for a non-finite float never arises."""
    return orjson.dumps(obj)


def _err(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status, "object": "error"},
                              "object": "error", "message": message, "code": status}, status=status)


async def _read_json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
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


async def _forever() -> None:
    await asyncio.Event().wait()


class Handlers:
    def __init__(self, st: SimState):
        self.st = st

    # -------------------------------------------------------------- fault/admission wrapper
    async def _serve(self, request: web.Request, work: Work) -> web.StreamResponse:
        st, cfg = self.st, self.st.cfg
        if st.starting():
            return _err(503, "simulated server is starting (--startup-s)")
        try:
            body = await _read_json(request)
            prepared = work(body, validate_only=True)
        except SimError as e:
            return _err(e.status, str(e))
        st.received += 1
        if cfg.hang_after > 0 and st.received > cfg.hang_after:
            await _forever()  # simulated hang: never answers
        if cfg.crash_after > 0 and st.received > cfg.crash_after:
            await _forever()  # the process is about to exit
        t0 = time.perf_counter()
        try:
            if cfg.error_rate > 0 and st.fault_rng.random() < cfg.error_rate:
                status = st.fault_rng.choice([500, 503])
                resp: web.Response = _err(status, f"simulated fault (--error-rate {cfg.error_rate})")
            else:
                if st.sem is not None:
                    async with st.sem:
                        if cfg.latency_s > 0:
                            await asyncio.sleep(cfg.latency_s)
                        obj = work(body, prepared=prepared, t0=t0)
                else:
                    if cfg.latency_s > 0:
                        await asyncio.sleep(cfg.latency_s)
                    obj = work(body, prepared=prepared, t0=t0)
                payload = _dumps(obj)
                if cfg.malformed_rate > 0 and st.fault_rng.random() < cfg.malformed_rate:
                    if st.fault_rng.random() < 0.5:
                        payload = payload[: max(1, len(payload) // 2)]
                    else:
                        payload = b"<html><body>502 Bad Gateway (simulated)</body></html>"
                resp = web.Response(body=payload, content_type="application/json")
        except SimError as e:
            resp = _err(e.status, str(e))
        st.completed += 1
        if cfg.crash_after > 0 and st.completed >= cfg.crash_after and not st.exiting:
            st.exiting = True
            print(f"simulated crash: exiting after {st.completed} generate requests (--crash-after)",
                  file=sys.stderr, flush=True)
            asyncio.get_running_loop().call_later(0.05, os._exit, 1)
        return resp

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

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._sglang)

    # -------------------------------------------------------------- OpenAI /v1/completions
    def _openai(self, body: dict[str, Any], validate_only: bool = False, prepared: Any = None,
                t0: float = 0.0) -> Any:
        if validate_only:
            return protocol.parse_completions(self.st, body)
        return protocol.completions_response(self.st, prepared)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._openai)

    # -------------------------------------------------------------- OpenAI /v1/chat/completions
    def _chat(self, body: dict[str, Any], validate_only: bool = False, prepared: Any = None,
              t0: float = 0.0) -> Any:
        if validate_only:
            return protocol.parse_chat(self.st, body)
        return protocol.chat_response(self.st, prepared)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._chat)

    # -------------------------------------------------------------- tokenizer
    async def _plain(self, request: web.Request, fn: Callable[[SimState, dict[str, Any]], Any]) -> web.Response:
        if self.st.starting():
            return _err(503, "simulated server is starting (--startup-s)")
        try:
            # orjson: a tokenize answer for a whole pass holds ~1.5 million ids
            return web.Response(body=_dumps(fn(self.st, await _read_json(request))), content_type="application/json")
        except SimError as e:
            return _err(e.status, str(e))

    async def tokenize(self, request: web.Request) -> web.Response:
        return await self._plain(request, protocol.tokenize)

    async def detokenize(self, request: web.Request) -> web.Response:
        return await self._plain(request, protocol.detokenize)

    # -------------------------------------------------------------- side endpoints
    async def health(self, request: web.Request) -> web.Response:
        """``/health`` and ``/health_generate``: one handler, as in SGLang: 503 until ready, silent when hung."""
        if self.st.starting():
            return web.Response(status=503, text="starting (simulated)")
        if self.st.hung():
            await _forever()
        return web.Response(text="")

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.st.server_info())

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.st.cfg.model_path, "tokenizer_path": self.st.cfg.model_path,
                                  "is_generation": True, "simulated": True, "engine": "simulated",
                                  "build": self.st.cfg.build})

    async def flush_cache(self, request: web.Request) -> web.Response:
        self.st.prefix_cache.clear()
        return web.Response(text="Cache flushed (simulated).\n")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.st.cfg.model_path, "object": "model", "created": int(time.time()),
            "owned_by": "simulated", "root": self.st.cfg.model_path, "max_model_len": 32768}]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": SIM_VERSION, "simulated": True})


def build_app(cfg: SimConfig, argv: list[str] | None = None) -> web.Application:
    """The simulated engine as an aiohttp application (loads the data and draws this launch's outcomes)."""
    st = SimState(cfg, argv)
    h = Handlers(st)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app["sim"] = st

    async def _on_startup(app: web.Application) -> None:
        st.t0 = time.monotonic()

    app.on_startup.append(_on_startup)
    r = app.router
    r.add_post("/generate", h.generate)
    r.add_post("/v1/completions", h.completions)
    r.add_post("/v1/chat/completions", h.chat)
    r.add_get("/health", h.health)
    r.add_get("/health_generate", h.health)
    for p in ("/get_server_info", "/server_info"):
        r.add_get(p, h.server_info)
    for p in ("/get_model_info", "/model_info"):
        r.add_get(p, h.model_info)
    r.add_route("POST", "/flush_cache", h.flush_cache)
    r.add_get("/flush_cache", h.flush_cache)
    r.add_get("/v1/models", h.models)
    r.add_get("/version", h.version)
    for prefix in ("", "/v1"):
        r.add_post(prefix + "/tokenize", h.tokenize)
        r.add_post(prefix + "/detokenize", h.detokenize)
    return app


async def serve(cfg: SimConfig, argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; prints ``simulated server ready on http://HOST:PORT`` once listening."""
    app = build_app(cfg, argv)
    st: SimState = app["sim"]
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port, backlog=4096, reuse_address=True)
    await site.start()
    port = cfg.port
    server = getattr(site, "_server", None)
    if server is not None and getattr(server, "sockets", None):
        port = server.sockets[0].getsockname()[1]
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
        await runner.cleanup()
