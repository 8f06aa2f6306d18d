"""A launch's evals share its connections (an eval at parallel 1319 opens 1319, a fifth of the client's CPU): the
next eval on the launch sends on the connections the last one left open, in the launch's own event loop, and
stopping the launch closes them; an engine whose server may drop an idle connection keeps none."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiohttp import web
from helpers.aioserver import ThreadedApp
from helpers.waiting import wait_until

from harness.arms.arm import ResolvedArm
from harness.engines import LaunchSpec
from harness.orchestrate.interrupts import Interrupts
from harness.orchestrate.rundir import Manifest
from harness.orchestrate.servers import ServerPool
from harness.serving.client import Client, ClientConfig


class _Engine:
    kind = "fake"

    def __init__(self, url: str, keepalive: float | None):
        self.url, self.pooled_keepalive_s = url, keepalive

    def prepare_launch(self) -> None: ...

    def launch_spec(self) -> LaunchSpec:
        return LaunchSpec(argv=[], server_argv=[], env_delta={}, env={}, launched=True)

    def launch(self) -> None: ...

    def wait_ready(self, on_status: Any = None) -> float:
        return 0.0

    def probe(self) -> dict[str, Any]:
        return {}

    def alive(self) -> str | None:
        return None

    def launch_identity(self) -> None:
        return None

    def stop(self, on_status: Any = None, settle: bool = True) -> dict[str, Any]:
        return {"how": "SIGTERM"}

    def log_tail(self, lines: int = 20) -> str:
        return ""


class _Server(ThreadedApp):
    """Answers /get_model_info, noting each request's client port under the current eval."""

    def __init__(self) -> None:
        super().__init__()
        self.peers: list[set[int]] = []

    def routes(self, app: web.Application) -> None:
        async def info(request: web.Request) -> web.Response:
            self.peers[-1].add(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
            await asyncio.sleep(0)
            return web.json_response({"model_path": "x"})

        app.router.add_get("/get_model_info", info)


def _pool(tmp_path: Path, url: str, keepalive: float | None) -> ServerPool:
    return ServerPool({"a": _Engine(url, keepalive)}, {"a": ResolvedArm(key="a", name="a")},  # type: ignore[dict-item]
                      Manifest(tmp_path, enabled=False), Interrupts(), lambda s: None, concurrent=True)


def test_a_launch_keeps_its_connections_for_its_next_eval_and_closes_them_when_it_stops(tmp_path: Path) -> None:
    with _Server() as srv:
        pool = _pool(tmp_path, srv.url, 60.0)
        launch = pool.acquire("a", "a")
        assert launch.connections is not None

        async def burst() -> None:  # 20 requests in flight at once, as an eval's
            async with Client(ClientConfig(url=srv.url, parallel=20), launch.connections) as c:
                await asyncio.gather(*(c.get_json("/get_model_info") for _ in range(20)))

        for _ in range(2):  # two evals on the launch, each in its own run of the launch's loop
            srv.peers.append(set())
            launch.loop.run(burst())
        assert srv.peers[0] and srv.peers[1] <= srv.peers[0]  # the second opened no connection
        server = srv.runner.server
        assert server is not None and server.connections
        pool.stop("a")
        wait_until(lambda: not server.connections, "the server sees the launch's connections closed")

        pool = _pool(tmp_path / "b", srv.url, None)  # a server that may drop an idle connection: none kept
        assert pool.acquire("a", "a").connections is None
