"""Small in-process HTTP servers for client tests: an aiohttp app on its own event loop in a daemon thread.

Subclass :class:`ThreadedApp`, add routes in :meth:`ThreadedApp.routes`, use it as a context manager."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web
from conftest import free_port

from helpers.waiting import PATIENCE_S


class ThreadedApp:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        app = web.Application()
        self.routes(app)
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app)
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            ready.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        ready.wait(PATIENCE_S)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)


class FakeServer(ThreadedApp):
    """Answers generations (SGLang and OpenAI) but scoring requests without per-token logprobs, like a server
    that ignores return_logprob; no /tokenize; ``refuse``: scoring requests get HTTP 400."""

    def __init__(self, refuse: bool = False) -> None:
        super().__init__()
        self.refuse = refuse

    def routes(self, app: web.Application) -> None:
        async def generate(request: web.Request) -> web.Response:
            body = await request.json()
            if body.get("return_logprob") and self.refuse:
                return web.json_response({"error": "logprobs are not supported"}, status=400)
            meta: dict[str, Any] = {"prompt_tokens": 100, "completion_tokens": 5, "finish_reason": {"type": "stop"}}
            return web.json_response({"text": " 3 + 4 = 7.\n#### 7", "meta_info": meta})

        async def completions(request: web.Request) -> web.Response:
            return web.json_response({"choices": [{"text": " 7", "finish_reason": "length", "logprobs": None}],
                                      "usage": {"prompt_tokens": 100, "completion_tokens": 1}})

        async def ok(request: web.Request) -> web.Response:
            return web.json_response({"data": [{"id": "fake"}]})

        app.router.add_post("/generate", generate)
        app.router.add_post("/v1/completions", completions)
        for path in ("/health", "/health_generate", "/v1/models"):
            app.router.add_get(path, ok)
