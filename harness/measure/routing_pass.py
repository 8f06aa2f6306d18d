"""The routing pass: which experts one server's gate routes the reference tokens to, teacher-forced, streamed
to the routing store, right after the launch's scoring pass and with its inputs (``score_inputs.parquet``).

A pass of its own rather than a field of the scoring request: the scoring answer is read by a byte-level fast
path that another field would slow, and the routing answer is as large as the scores; the price is one more
prefill of the references a launch. A server that cannot answer writes ``status: not_measured`` with the
reason; a malformed answer is that question's error.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.measure.divergence_pass import INPUTS, _read_inputs
from harness.measure.runner import Progress, run
from harness.results.records import JSONObject
from harness.results.routing_store import RoutingWriter, write_not_measured
from harness.results.score_inputs import ScoreInputs
from harness.serving.client import Client, ClientConfig
from harness.serving.routed_wire import (
    RoutedAnswerError,
    parse_routed,
    parse_vllm_routed,
    routing_body,
    vllm_routing_body,
)

#: the most MoE layers an answer is allowed bytes for (the answer's size cap; DeepSeek-V3/V4: 61)
MAX_LAYERS = 128
#: routing requests in flight at once (each answer is up to a few MB)
ROUTING_PARALLEL = 32


@dataclass
class RoutingOptions:
    top_k: int
    num_experts: int | None
    parallel: int = ROUTING_PARALLEL
    progress: bool = True
    meta: JSONObject = field(default_factory=dict)


class _RoutingClient(Client):
    """The client with an answer cap that fits base64 int32 ids of every input token, layer and slot."""

    top_k = 8

    def reply_cap(self, body: Any) -> int:
        n = len(body.get("input_ids") or []) if isinstance(body, dict) else 0
        return super().reply_cap(body) + (n * self.top_k * MAX_LAYERS * 4 * 4) // 3 + 4096


@dataclass
class _RoutingAsker:
    """One question's routing request and answer (SGLang's ``/generate``, or vLLM's ``/v1/completions``)."""

    client: Client
    api: Any
    top_k: int

    async def __call__(self, ids: tuple[list[int], list[int]], layers: int | None) -> Any:
        p, r = ids
        if self.api.name == "vllm":
            obj = await self.client.post_json("/v1/completions", vllm_routing_body(self.api.model or "", p, r))
            return parse_vllm_routed(obj, len(r), self.top_k, layers)
        obj = await self.client.post_json("/generate", routing_body(p, r))
        return parse_routed(obj, len(r), self.top_k, layers)


def read_inputs(reference_pass: Path) -> ScoreInputs:
    """The reference pass's ``(prompt ids, reference ids)`` per question (empty when it scored by text)."""
    path = reference_pass / INPUTS
    return _read_inputs(path) if path.exists() else ScoreInputs()


async def routing_pass_async(reference_pass: str | Path, ccfg: ClientConfig, out: str | Path,
                             opts: RoutingOptions) -> JSONObject:
    """Route every reference of ``reference_pass`` on the server of ``ccfg`` into ``out``; what ``routing.json``
    holds. ServerGone when the server dies on the way (nothing published)."""
    out, t0 = Path(out), time.perf_counter()
    meta: JSONObject = {**opts.meta, "top_k": opts.top_k, "num_experts": opts.num_experts}
    inputs = read_inputs(Path(reference_pass))
    todo = sorted(q for q in inputs if all(inputs.sizes(q)))
    if not todo:
        why = ("the reference pass scored by text (no token ids to send)" if not inputs
               else "no reference has a token to route")
        write_not_measured(out, why, meta)
        return {**meta, "status": "not_measured", "reason": why}
    cfg = replace(ccfg, parallel=max(1, min(int(ccfg.parallel), int(opts.parallel))))
    client = _RoutingClient(cfg)
    client.top_k = opts.top_k
    async with client:
        first = todo[0]
        try:
            ask = _RoutingAsker(client, await client.prepare(), opts.top_k)
            ids = await ask(inputs[first], None)
        except (ValueError, RoutedAnswerError) as e:  # a 4xx, or an answer without routed experts
            why = f"{ccfg.url} does not return routed experts: {e}"
            write_not_measured(out, why, meta)
            return {**meta, "status": "not_measured", "reason": why}
        progress = Progress(len(todo), opts.progress, f"routing {out.parent.name}/{out.name}")
        with RoutingWriter(out, opts.top_k, ids.shape[1], opts.num_experts, meta) as writer:
            writer.add(first, ids)
            progress.update(error=False)
            admitted = asyncio.Semaphore(cfg.parallel)

            async def one(q: int) -> None:
                try:
                    async with admitted:  # the ids become lists once the request may be sent
                        got = await ask(inputs[q], writer.tally.layers)
                except (ValueError, RoutedAnswerError) as e:
                    writer.record_error(q, str(e)[:300])
                    progress.update(error=True)
                    return
                writer.add(q, got)  # one event loop: the answers are written one at a time
                progress.update(error=False)

            try:
                await asyncio.gather(*(one(q) for q in todo[1:]))
            finally:
                progress.close()
            writer.meta["wall_s"] = time.perf_counter() - t0
            return writer.close()


def routing_pass(*args: Any, **kwargs: Any) -> JSONObject:
    """Synchronous wrapper of :func:`routing_pass_async`."""
    return run(routing_pass_async(*args, **kwargs))
