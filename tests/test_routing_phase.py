"""Where a run's routing pass gets the model's routing shape, and the engines that cannot return routed experts
(harness.orchestrate.routing_phase)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from harness.config import ArmConfig, CheckConfig
from harness.orchestrate.routing_phase import route_launch, routing_shape
from harness.results.routing_store import routing_status
from harness.serving.wire import for_api


def engine(api: str = "sglang", simulated: bool = False, **cfg: Any) -> Any:
    return SimpleNamespace(cfg=SimpleNamespace(**cfg), simulated=simulated, api=api, wire=for_api(api))


def test_the_shape_comes_from_the_side_check_then_the_simulator_then_config_json(tmp_path: Path):
    arm = ArmConfig(name="x", checks=[CheckConfig(kind="routed_experts", name="c", num_experts=384, top_k=6)])
    assert routing_shape(engine(), arm)[:2] == (6, 384)
    sim = engine(simulated=True, topk=8, num_experts=256, enable_return_routed_experts=True)
    assert routing_shape(sim, ArmConfig(name="x")) == (8, 256, "the simulated engine's knobs")
    off = engine(simulated=True, topk=8, num_experts=256, enable_return_routed_experts=False)
    assert "without --enable-return-routed-experts" in str(routing_shape(off, None))
    (tmp_path / "config.json").write_text(json.dumps({"num_experts_per_tok": 2, "num_local_experts": 8}))
    assert routing_shape(engine(model_path=str(tmp_path)), None)[:2] == (2, 8)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 576}))  # a dense model
    assert routing_shape(engine(model_path=str(tmp_path)), None) is None


def test_an_engine_whose_api_cannot_return_routed_experts_is_not_measured_with_the_reason(tmp_path: Path):
    said: list[str] = []
    log = SimpleNamespace(say=said.append)
    arm = ArmConfig(name="x", checks=[CheckConfig(kind="routed_experts", name="c", num_experts=8, top_k=2)])
    out = route_launch(SimpleNamespace(arms={"a": arm}), engine("openai"), "a", tmp_path, tmp_path,
                       {"launch": "a-1"}, SimpleNamespace(), log)  # type: ignore[arg-type]
    assert out["status"] == "not_measured" and "openai API does not return routed experts" in out["reason"]
    assert routing_status(tmp_path) == ("not_measured", out["reason"])


def test_a_dense_model_is_not_applicable_on_any_api(tmp_path: Path):
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 576}))
    for api in ("openai", "sglang"):
        out = route_launch(SimpleNamespace(arms={}), engine(api, model_path=str(tmp_path)), "a", tmp_path / api,
                           tmp_path, {"launch": "a-1"}, SimpleNamespace(), SimpleNamespace(say=print))  # type: ignore[arg-type]
        assert out["status"] == "not_applicable" and "no routed experts known" in out["reason"]
        assert routing_status(tmp_path / api)[0] == "not_applicable"
