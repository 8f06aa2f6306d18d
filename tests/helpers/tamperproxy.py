"""A tampering proxy in front of a real server (the simulator): every request is forwarded as it is, and the
answers of the requests a mode selects are changed into what an honest server never sends, keeping their shape.

==============  ==========================================================================================
mode            what the answer to each generation or scoring request becomes
==============  ==========================================================================================
``pass``        itself (a plain proxy)
``swap``        the answer to the previous such request (the first gets its own): right shape, wrong question
``nan``         a scoring answer with one alternative's logprob NaN (``NaN``: Python's json writes it)
``inf``         a scoring answer with one reference token's logprob +Infinity
``positive``    a scoring answer with one reference token's logprob 0.5 (a probability of 1.65)
``duplicate``   a scoring answer with one position's second alternative the same token id as its first
==============  ==========================================================================================

Generation requests are POSTs to ``/generate`` (SGLang), ``/v1/completions`` and ``/v1/chat/completions``;
scoring requests are the SGLang ones that ask ``return_logprob``. ``/tokenize`` and every GET pass through, as a
proxy that mixes up only the answers of the inference endpoint would. ``skip``: the first that many answers a mode
would change pass unchanged (a scoring pass's first request probes whether the server can score at all).
``tampered``: how many answers were changed.

Use it in a thread (``with TamperProxy(upstream_url, "swap") as p: p.url``) or as a process
(``python tests/helpers/tamperproxy.py --upstream URL --mode swap``: it prints its URL). It binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.aioserver import ThreadedApp  # noqa: E402

MODES = ("pass", "swap", "nan", "inf", "positive", "duplicate", "nobatch")
GENERATION_PATHS = ("/generate", "/v1/completions", "/v1/chat/completions")


def tamper_scores(obj: Any, mode: str) -> bool:
    """Change one value of an SGLang scoring answer ``obj`` in place as ``mode`` says; False when it has no
    position to change."""
    meta = obj.get("meta_info") if isinstance(obj, dict) else None
    own = meta.get("input_token_logprobs") if isinstance(meta, dict) else None
    tops = meta.get("input_top_logprobs") if isinstance(meta, dict) else None
    at = next((i for i, t in enumerate(tops or []) if t and len(t) >= 2), None)
    if not own or at is None:
        return False
    if mode == "nan":
        tops[at][0][0] = math.nan
    elif mode == "inf":
        own[at][0] = math.inf
    elif mode == "positive":
        own[at][0] = 0.5
    elif mode == "duplicate":
        tops[at][1][1] = tops[at][0][1]
    return True


def _batched(raw: bytes) -> bool:
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        return False
    ids = body.get("input_ids") if isinstance(body, dict) else None
    return isinstance(ids, list) and bool(ids) and isinstance(ids[0], list)


class TamperProxy(ThreadedApp):
    def __init__(self, upstream: str, mode: str = "swap", skip: int = 0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        super().__init__()
        self.upstream, self.mode, self.skip = upstream.rstrip("/"), mode, skip
        self.tampered = 0
        self._previous: bytes | None = None

    def _change(self, path: str, body: Any, answer: bytes) -> bytes:
        scoring = isinstance(body, dict) and bool(body.get("return_logprob"))
        if self.mode == "pass" or (self.mode != "swap" and not scoring):
            return answer
        if self.skip > 0:
            self.skip -= 1
            return answer
        if self.mode == "swap":
            previous, self._previous = self._previous, answer
            if previous is None or previous == answer:
                return answer
            self.tampered += 1
            return previous
        obj = json.loads(answer)
        changed = sum(tamper_scores(x, self.mode) for x in (obj if isinstance(obj, list) else [obj]))
        if not changed:  # (a batch's answer: each of its answers changed)
            return answer
        self.tampered += changed
        return json.dumps(obj).encode()  # allow_nan: NaN and Infinity written as Python's json writes them

    def routes(self, app: web.Application) -> None:
        session: dict[str, aiohttp.ClientSession] = {}

        async def forward(request: web.Request) -> web.Response:
            if "s" not in session:
                session["s"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))
            raw = await request.read()
            if self.mode == "nobatch" and _batched(raw):  # a server that takes one prompt per request
                self.tampered += 1
                return web.Response(status=400, text='{"error": "batch requests are not supported"}')
            headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "authorization")}
            async with session["s"].request(request.method, self.upstream + request.path_qs, data=raw,
                                            headers=headers) as r:
                answer, status = await r.read(), r.status
                ctype = r.headers.get("Content-Type", "application/json")
            if request.method == "POST" and request.path in GENERATION_PATHS and status == 200:
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    body = None
                answer = self._change(request.path, body, answer)
            return web.Response(body=answer, status=status, headers={"Content-Type": ctype})

        async def close(_: web.Application) -> None:
            if "s" in session:
                await session["s"].close()

        app.router.add_route("*", "/{tail:.*}", forward)
        app.on_cleanup.append(close)


def main() -> None:
    ap = argparse.ArgumentParser(description="A tampering proxy for abh's fault tests (127.0.0.1 only).")
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--mode", choices=MODES, default="swap")
    ap.add_argument("--skip", type=int, default=0)
    a = ap.parse_args()
    with TamperProxy(a.upstream, a.mode, a.skip) as proxy:
        print(proxy.url, flush=True)
        try:
            asyncio.run(asyncio.Event().wait())
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
