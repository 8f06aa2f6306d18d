"""The routing passes of ``abh run``: right after each divergence scoring pass, on the same launch and into
the same directory, the routed experts of the same reference tokens. The routing's shape comes from the arm's
``routed_experts`` check, the simulated engine or the model's ``config.json`` (first found wins); no ``top_k``
anywhere: a dense model, ``not_applicable``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.config import ArmConfig, Config
from harness.engines.base import Engine
from harness.measure.routing_pass import RoutingOptions, routing_pass_async
from harness.orchestrate.interrupts import Interrupts
from harness.orchestrate.rundir import RunLog
from harness.results.records import JSONObject
from harness.results.routing_store import write_not_measured
from harness.serving.client import ClientConfig

#: where a model's config.json keeps its routed-expert count, in the order tried
EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")


def routing_shape(engine: Engine, arm: ArmConfig | None) -> tuple[int, int | None, str] | str | None:
    """(top_k, num_experts or None, where they come from), why an MoE's routing cannot be read, or None where
    nothing the run knows names routed experts (a dense model)."""
    for c in (arm.checks if arm is not None else []):
        if c.kind == "routed_experts" and int(c.top_k) > 0:
            return int(c.top_k), int(c.num_experts) or None, f"the arm's routed_experts check {c.name!r}".replace(
                " ''", "")
    cfg = engine.cfg
    if engine.simulated and hasattr(cfg, "topk"):
        if not getattr(cfg, "enable_return_routed_experts", True):
            return "the simulated server runs without --enable-return-routed-experts"
        return int(cfg.topk), int(cfg.num_experts), "the simulated engine's knobs"
    model = Path(str(getattr(cfg, "model_path", "") or "")).expanduser()
    doc: Any
    try:
        doc = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict):
        doc = doc.get("text_config") if isinstance(doc.get("text_config"), dict) else doc
        k = doc.get("num_experts_per_tok")
        n = next((doc[key] for key in EXPERT_KEYS if isinstance(doc.get(key), int)), None)
        if isinstance(k, int) and k > 0:
            return k, n, f"{model / 'config.json'}"
    return None


def route_launch(cfg: Config, engine: Engine, arm_key: str, out: Path, reference_pass: Path, meta: Mapping[str, Any],
                 interrupts: Interrupts, log: RunLog) -> JSONObject:
    """The routing pass of ``engine``'s launch into ``out`` (beside that launch's scoring pass)."""
    what: dict[str, Any] = {k: meta.get(k) for k in ("pass", "arm", "role", "launch", "engine", "simulated")}

    def skipped(why: str, status: str = "not_measured") -> JSONObject:
        write_not_measured(out, why, what, status=status)
        return {**what, "status": status, "reason": why}

    shape = routing_shape(engine, cfg.arms.get(arm_key))
    if shape is None:
        return skipped("no routed experts known for this model: no routed_experts side check with top_k, and "
                       "no config.json with num_experts_per_tok in the model directory", "not_applicable")
    if not engine.wire.native_sglang and engine.api != "vllm":
        return skipped(f"the {engine.api} API does not return routed experts (SGLang's native /generate and "
                       "vLLM's /v1/completions with --enable-return-routed-experts do)")
    if isinstance(shape, str):
        return skipped(shape)
    top_k, num_experts, source = shape
    log.say(f"routing {out.parent.name}/{out.name} (launch {meta.get('launch')}): top_k {top_k}, "
            f"{num_experts or 'unknown'} experts ({source})")
    ccfg = ClientConfig.of(cfg.client, url=engine.url, api=engine.api)
    opts = RoutingOptions(top_k=top_k, num_experts=num_experts, progress=cfg.progress,
                          meta={**what, "shape_source": source})
    result = interrupts.run_async(routing_pass_async(reference_pass, ccfg, out, opts))
    if result.get("status") == "ok":
        wall, size = result.get("wall_s"), result.get("bytes")
        log.say(f"  routing: {result.get('tokens')} tokens x {result.get('layers')} layers of "
                f"{result.get('questions')} questions in {wall if isinstance(wall, float) else 0.0:.1f} s "
                f"({size / 1e6 if isinstance(size, int) else 0.0:.0f} MB), errors {result.get('errors')}")
    else:
        log.say(f"  routing: not measured: {result.get('reason')}")
    return result
