"""engine.deterministic: what each engine adds to its launch (nothing is launched here), what the manifest and the
dry run say, and the seed experiment's off-path variant."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness.arms.arm import ResolvedArm, resolve_arm
from harness.config import LlamaCppEngineConfig, SGLangEngineConfig, SimulatedEngineConfig, VLLMEngineConfig
from harness.engines import create_engine


def _spec(cfg, tmp_path):
    e = create_engine(cfg, ResolvedArm(key="a", name="a"), tmp_path, "a-r0")
    return e, e.launch_spec()


@pytest.mark.parametrize("on", [True, False])
def test_each_engine_asks_for_it_its_own_way(tmp_path, on):
    e, s = _spec(SGLangEngineConfig(model_path="m", deterministic=on), tmp_path)
    assert ("--enable-deterministic-inference" in s.server_argv) is on
    e, s = _spec(VLLMEngineConfig(model_path="m", deterministic=on), tmp_path)
    assert (s.env_delta.get("VLLM_BATCH_INVARIANT") == "1") is on
    e, s = _spec(LlamaCppEngineConfig(model_file=__file__, n_threads=3, deterministic=on), tmp_path)
    argv = list(s.server_argv)
    assert (argv[argv.index("--n_threads_batch") + 1] == "3") if on else "--n_threads_batch" not in argv
    e, s = _spec(SimulatedEngineConfig(deterministic=on), tmp_path)
    assert ("--deterministic" in s.server_argv) is on
    assert e.deterministic_record()["requested"] is on


def test_the_user_env_wins_over_the_engines_deterministic_env(tmp_path):
    _, s = _spec(VLLMEngineConfig(model_path="m", deterministic=True, env={"VLLM_BATCH_INVARIANT": "0"}), tmp_path)
    assert s.env_delta["VLLM_BATCH_INVARIANT"] == "0"


def test_sglang_says_when_the_attention_backend_is_outside_its_promise(tmp_path):
    e, _ = _spec(SGLangEngineConfig(model_path="m", deterministic=True, args=["--attention-backend", "dsv4"]), tmp_path)
    assert "dsv4" in (e.deterministic_caveat() or "")
    e, _ = _spec(SGLangEngineConfig(model_path="m", deterministic=True, args=["--attention-backend", "fa3"]), tmp_path)
    assert e.deterministic_caveat() is None


def test_the_simulator_deterministic_mode_drops_every_noise():
    from abh_simulator.sim_config import SimConfig

    eff = SimConfig(deterministic=True, flip_rate=0.3, logprob_noise=0.1, run_seed=-1).effective()
    assert (eff.flip_rate, eff.logprob_noise, eff.run_seed) == (0.0, 0.0, 0)
    assert SimConfig(flip_rate=0.3).effective().flip_rate == 0.3  # the default keeps its noise


def test_seed_off_path_variant_drops_the_fusion_flag_and_asks_for_identical(tmp_path):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        seed = compose("config", overrides=["experiment=dsv4_pro_mi355x_shared_slot"])
        off = compose("config", overrides=["experiment=dsv4_pro_mi355x_shared_slot_offpath"])
    hc.validate(off)
    assert off.stats.hypothesis == "identical" and off.engine.deterministic is True and off.experiment.aa_control
    assert list(off.engine.args) == [a for a in seed.engine.args if a != "--enforce-shared-experts-fusion"]
    assert "--enforce-shared-experts-fusion" in seed.engine.args
    for key in ("a", "b"):
        assert off.arms[key].source.ref == seed.arms[key].source.ref  # the same two arms
        routed = [c for c in off.arms[key].checks if c.kind == "routed_experts"]
        assert [(c.routed_per_token, c.out_of_range) for c in routed] == [(6, False)]  # the path is not live
        a = resolve_arm(key, off.arms[key], tmp_path, hc.arms_root(), strict=False)
        argv = create_engine(off.engine, a, tmp_path, f"{key}-r0").launch_spec().server_argv
        assert "--enable-deterministic-inference" in argv and "--enforce-shared-experts-fusion" not in argv


def test_the_dry_run_says_where_each_engine_promises_it(tmp_path, capsys):
    from helpers.runs import abh_run_here

    assert abh_run_here(f"hydra.run.dir={tmp_path / 'd'}", "dry_run=true", "engine.deterministic=true") == 0
    out = capsys.readouterr().out
    assert "deterministic inference (engine.deterministic):" in out
    assert "arm a: requested; simulated promises it: SIMULATED: --deterministic drops" in out
