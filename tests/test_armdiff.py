"""Arm diff: what each launch is, what differs between arms, which differences are allowed; dotted keys."""

from __future__ import annotations

from helpers.arms import TOPK_BASE, TOPK_FIX, make_tree, pp_arm
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness.arms.arm import ResolvedArm, resolve_arm
from harness.checks.armdiff import arm_diff, describe_launch, disallowed, parse_flags
from harness.config import SGLangEngineConfig
from harness.engines import create_engine
from harness.util.keys import flatten, matches
from harness.util.redact import REDACTED


def test_arm_diff_catches_an_extra_flag(tmp_path):
    cfg = SGLangEngineConfig(model_path="m", args=["--tp", "8"], env={"X": "1"})
    a = ResolvedArm(key="a", name="baseline")
    b = ResolvedArm(key="b", name="fix", args=["--enable-foo"])
    descs = {k: describe_launch(arm, create_engine(cfg, arm, tmp_path, k)) for k, arm in (("a", a), ("b", b))}
    assert descs["a"]["command"]["url"] != descs["b"]["command"]["url"]  # per-launch noise (free ports) ...
    diffs = arm_diff(descs)
    assert [d["key"] for d in diffs] == ["args.--enable-foo"]  # ... is ignored; the extra flag is not
    assert diffs[0]["values"] == {"a": "<absent>", "b": True}
    assert disallowed(diffs, ["source", "engine.accuracy"]) == diffs
    assert disallowed(diffs, ["args"]) == [] and disallowed(diffs, ["args.--enable-foo"]) == []
    assert disallowed(diffs, ["args.--enable"]) == diffs  # prefixes match whole dotted parts only


def test_arm_diff_env_and_source_and_fingerprint(tmp_path):
    base = make_tree(tmp_path / "base", TOPK_BASE)
    fix = make_tree(tmp_path / "fix", TOPK_FIX)
    a = pp_arm("a", base, tmp_path, [])
    b = pp_arm("b", fix, tmp_path, [], env={"SGLANG_X": "1", "API_KEY": "hunter2"})
    cfg = SGLangEngineConfig(model_path="m")
    descs = {arm.key: describe_launch(arm, create_engine(cfg, arm, tmp_path, arm.key)) for arm in (a, b)}
    # a launched server's fingerprint: the same files at each arm's own tree, one of them changed
    for arm, sha in ((a, "aaa"), (b, "bbb")):
        descs[arm.key]["fingerprint"] = {
            "modules": {"abh_fake_sgl.layers.moe.topk": {"file": f"{arm.source.tree}/python/x/topk.py"}},
            "files": {"python/x/topk.py": {"path": f"{arm.source.tree}/python/x/topk.py", "sha256": sha},
                      "python/x/utils.py": {"path": f"{arm.source.tree}/python/x/utils.py", "sha256": "same"}}}
    keys = {d["key"]: d["values"] for d in arm_diff(descs)}
    assert keys["env.SGLANG_X"] == {"a": "<absent>", "b": "1"}
    assert keys["env.API_KEY"]["b"] == REDACTED  # secrets never leave describe_launch
    assert "fingerprint.files.python/x/topk.py.sha256" in keys
    assert not any(k.startswith("fingerprint.modules") or "utils.py" in k for k in keys)  # paths normalised
    assert {"source.path", "source.tree", "source.pythonpath"} <= set(keys)
    left = disallowed(arm_diff(descs), ["source", "fingerprint.files.python/x/topk.py"])
    assert [d["key"] for d in left] == ["env.API_KEY", "env.SGLANG_X"]


def test_demo_arms_differ_only_in_what_the_demo_allows(tmp_path):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["experiment=demo"])
    descs = {}
    for key in ("a", "b"):
        arm = resolve_arm(key, cfg.arms[key], tmp_path, hc.arms_root())
        descs[key] = describe_launch(arm, create_engine(cfg.engine, arm, tmp_path, f"{key}-r0"))
    diffs = arm_diff(descs)
    assert {d["key"] for d in diffs} == {"engine.accuracy", "engine.build"}
    assert disallowed(diffs, cfg.experiment.allowed_differences) == []


def test_parse_flags():
    assert parse_flags(["--tp", "8", "--flag", "--x=1", "--n", "-5", "pos", "--tp", "4"]) == {
        "--tp": ["8", "4"], "--flag": True, "--x": "1", "--n": "-5", "_positional": ["pos"]}
    assert parse_flags(["--lr", "-1e-3", "-v"]) == {"--lr": "-1e-3", "-v": True}


def test_describe_launch_redacts_secrets(tmp_path):
    cfg = SGLangEngineConfig(model_path="m", args=["--api-key", "sk-live"], env={"HF_TOKEN": "hf_live"})
    arm = ResolvedArm(key="a", name="a")
    d = describe_launch(arm, create_engine(cfg, arm, tmp_path, "a"))
    text = repr(d)
    assert "sk-live" not in text and "hf_live" not in text
    assert d["args"]["--api-key"] == REDACTED and d["env"]["HF_TOKEN"] == REDACTED


def test_flatten_and_matches():
    assert flatten({"a": {"b": 1, "c": [1, {"d": 2}]}, "e": {}, "f": None, 3: "x"}) == {
        "a.b": 1, "a.c": [1, {"d": 2}], "f": None, "3": "x"}
    assert flatten(5) == {"": 5}
    assert matches("engine.port", ["engine.port"]) and matches("engine.port.x", ["engine."])
    assert matches("args.--tp", ["source", "args"]) and not matches("args.--tp", [])
    assert not matches("engine.portal", ["engine.port"]) and not matches("engine", ["engine.port"])
