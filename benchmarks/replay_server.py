"""A recording HTTP proxy that can replay what it recorded: a server with no scoring cost of its own.

``benchmarks/bench_scoring.py`` uses it to count the simulator's cost apart from the client's: a pass is run once
through this proxy to the simulator (``record``: every answer is kept in memory, keyed by method, path and the
request's body bytes), then run again with the simulator out of the way (``replay``: each request is answered
with the bytes recorded for it). What the replayed pass takes is the client's own time plus this server's
(aiohttp writing stored bytes; its CPU is shown beside it). A request never recorded is answered 502, so a pass
that sends anything new fails loudly.

    python benchmarks/replay_server.py --port P --upstream http://127.0.0.1:Q

``POST /__replay__/record`` and ``POST /__replay__/replay`` switch the mode (record at start);
``GET /__replay__/stats`` says how many answers are stored, served and missed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib

import aiohttp
from aiohttp import web


def build_app(upstream: str) -> web.Application:
    store: dict[tuple[str, str, bytes], tuple[int, str, bytes]] = {}
    state = {"mode": "record", "served": 0, "missed": 0}
    app = web.Application(client_max_size=256 * 1024 * 1024)

    async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                               timeout=aiohttp.ClientTimeout(total=600))
        yield
        await app["session"].close()

    app.cleanup_ctx.append(session_ctx)

    async def control(request: web.Request) -> web.Response:
        what = request.match_info["what"]
        if what in ("record", "replay"):
            state["mode"] = what
        elif what != "stats":
            return web.json_response({"error": f"unknown control {what!r}"}, status=404)
        return web.json_response({**state, "stored": len(store)})

    async def any_request(request: web.Request) -> web.Response:
        body = await request.read()
        key = (request.method, request.path_qs, hashlib.blake2b(body, digest_size=16).digest())
        if state["mode"] == "replay":
            if request.path == "/health":  # the recorded server may be gone: this one is up
                return web.json_response({})
            got = store.get(key)
            if got is None:
                state["missed"] += 1
                return web.json_response({"error": f"not recorded: {request.method} {request.path_qs}"}, status=502)
            state["served"] += 1
            status, ctype, payload = got
            return web.Response(body=payload, status=status, content_type=ctype)
        async with app["session"].request(request.method, upstream + request.path_qs, data=body,
                                          headers={"Content-Type": request.content_type}) as r:
            payload = await r.read()
            ctype = r.content_type
            status = r.status
        if request.path != "/health":  # health is asked again at any time: answered live, never stored
            store[key] = (status, ctype, payload)
        return web.Response(body=payload, status=status, content_type=ctype)

    app.router.add_route("*", "/__replay__/{what}", control)
    app.router.add_route("*", "/{tail:.*}", any_request)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True, help="the server to record, e.g. http://127.0.0.1:30000")
    args = ap.parse_args()
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run

    async def serve() -> None:
        app_runner = web.AppRunner(build_app(args.upstream.rstrip("/")), access_log=None)
        await app_runner.setup()
        await web.TCPSite(app_runner, "127.0.0.1", args.port, backlog=4096).start()
        await asyncio.Event().wait()

    runner(serve())


if __name__ == "__main__":
    main()
