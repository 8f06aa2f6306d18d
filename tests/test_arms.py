"""Arms: source kinds, side assertions (source, fingerprint, http, custom), arm diff, redaction."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import TEST_JSONL
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness.arms import (
    ArmError,
    ResolvedArm,
    SideAssertionError,
    arm_diff,
    assert_checks,
    describe_launch,
    disallowed,
    lookup,
    parse_flags,
    resolve_arm,
    run_live_checks,
    run_static_checks,
)
from harness.config import SGLangEngineConfig, SimulatedEngineConfig
from harness.engines import create_engine
from harness.redact import REDACTED, is_secret_name, redact_argv, redact_env

MARKER = "has_per_rank_fused_shared_slots("

TOPK_BASE = '''
def has_per_rank_fused_shared_slots(n):
    return n > 0


def select_experts(top_k, num_fused_shared_experts):
    return gate(top_k=top_k, num_fused_shared_experts=num_fused_shared_experts)
'''
TOPK_FIX = '''
def has_per_rank_fused_shared_slots(n):
    return n > 0


def select_experts(top_k, num_fused_shared_experts):
    gate_shared = 0 if has_per_rank_fused_shared_slots(num_fused_shared_experts) else num_fused_shared_experts
    return gate(top_k=top_k, num_fused_shared_experts=gate_shared)
'''


def make_tree(root: Path, topk: str, pkg: str = "abh_fake_sgl", extra_import: str = "") -> Path:
    """A miniature source tree: ROOT/python/PKG/layers/moe/topk.py."""
    moe = root / "python" / pkg / "layers" / "moe"
    moe.mkdir(parents=True)
    for d in (moe.parent.parent, moe.parent, moe):
        (d / "__init__.py").write_text("")
    (moe / "topk.py").write_text(extra_import + topk)
    return root


def source_check(**kw) -> dict:
    return {"kind": "source", "module": "abh_fake_sgl.layers.moe.topk", "object": "select_experts",
            "file_under": "python/abh_fake_sgl", **kw}


def pp_arm(key: str, tree: Path, run_dir: Path, checks: list[dict], **kw) -> ResolvedArm:
    cfg = {"name": key, "source": {"kind": "pythonpath", "path": str(tree), "subdir": "python"}, "checks": checks,
           **kw}
    return resolve_arm(key, cfg, run_dir, None)


# --------------------------------------------------------------------------------- source checks
def test_source_check_passes_and_fails_on_marker(tmp_path):
    base = make_tree(tmp_path / "base", TOPK_BASE)
    fix = make_tree(tmp_path / "fix", TOPK_FIX)
    run = tmp_path / "run"
    lacks = [source_check(name="lacks marker", lacks=MARKER)]
    contains = [source_check(name="has marker", contains=MARKER)]
    assert all(r.passed for r in run_static_checks(pp_arm("a", base, run, lacks)))
    assert all(r.passed for r in run_static_checks(pp_arm("b", fix, run, contains)))
    # the other way round fails, and the message names the check, the expected and the found value
    wrong = run_static_checks(pp_arm("a", base, run, contains))
    assert not wrong[0].passed and wrong[0].kind == "source"
    assert f"contains {MARKER!r}: no" in wrong[0].found
    with pytest.raises(SideAssertionError) as ei:
        assert_checks(wrong)
    msg = str(ei.value)
    assert "'has marker'" in msg and f"contains {MARKER!r}" in msg and "found" in msg and "arm 'a'" in msg
    bad = run_static_checks(pp_arm("b", fix, run, lacks))[0]
    assert not bad.passed and bad.evidence["lacks_violated_at"][0].startswith("7: ")  # line 7 of topk.py
    ok = run_static_checks(pp_arm("b", fix, run, contains))[0]
    assert ok.evidence["mode"] == "import" and ok.evidence["module_file"].startswith(str(fix))


def test_source_check_file_under_must_be_the_arms_tree(tmp_path):
    base = make_tree(tmp_path / "base", TOPK_BASE)
    other = make_tree(tmp_path / "other", TOPK_BASE)
    # arm tree = base, but the check insists the module comes from `other`
    r = run_static_checks(pp_arm("a", base, tmp_path / "run", [source_check(file_under=str(other / "python"))]))[0]
    assert not r.passed and "not under" in r.found


def test_source_check_without_importable_module_reads_the_file(tmp_path):
    # like SGLang on a machine without GPU libraries: the import fails, the source is still checkable
    tree = make_tree(tmp_path / "t", TOPK_FIX, extra_import="import abh_no_such_gpu_library\n")
    r = run_static_checks(pp_arm("b", tree, tmp_path / "run", [source_check(contains=MARKER)]))[0]
    assert r.passed and r.evidence["mode"] == "ast" and "abh_no_such_gpu_library" in r.evidence["import_error"]
    missing = run_static_checks(pp_arm("b", tree, tmp_path / "run",
                                       [source_check(object="no_such_function", contains=MARKER)]))[0]
    assert not missing.passed and "no_such_function" in missing.found


def test_source_check_missing_module(tmp_path):
    tree = make_tree(tmp_path / "t", TOPK_BASE)
    r = run_static_checks(pp_arm("a", tree, tmp_path / "run", [source_check(module="abh_nope.topk")]))[0]
    assert not r.passed and "not found" in r.found


def test_pythonpath_puts_the_tree_first(tmp_path):
    # a tree that shadows an installed package (requests) wins: it is FIRST on PYTHONPATH
    tree = tmp_path / "tree"
    (tree / "python" / "requests").mkdir(parents=True)
    (tree / "python" / "requests" / "__init__.py").write_text("def marker():\n    return 'from the tree'\n")
    a = pp_arm("a", tree, tmp_path / "run", [{"kind": "source", "module": "requests", "object": "marker",
                                               "contains": "from the tree", "file_under": "python"}])
    assert a.pythonpath == [str(tree.resolve() / "python")] == a.source.pythonpath
    assert a.probe_env()["PYTHONPATH"].split(":")[0] == str(tree.resolve() / "python")
    r = run_static_checks(a)[0]
    assert r.passed, r.found
    spec = create_engine(SGLangEngineConfig(model_path="m", port=30001, env={"PYTHONPATH": "/x"}), a, tmp_path,
                         "a").launch_spec()
    assert spec.env["PYTHONPATH"].split(":") == [str(tree.resolve() / "python"), "/x"]


def test_pythonpath_missing_tree(tmp_path):
    cfg = {"name": "a", "source": {"kind": "pythonpath", "path": str(tmp_path / "nope")}}
    with pytest.raises(ArmError, match="does not exist"):
        resolve_arm("a", cfg, tmp_path, None)
    a = resolve_arm("a", cfg, tmp_path, None, strict=False)
    assert a.source.problems and "does not exist" in a.source.problems[0]


# ------------------------------------------------------------------------------------------- git
def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_worktree_with_patch(tmp_path):
    repo = make_tree(tmp_path / "repo", TOPK_BASE)
    git("init", "-q", cwd=repo)
    git("add", "-A", cwd=repo)
    git("commit", "-q", "-m", "base", cwd=repo)
    base_commit = git("rev-parse", "HEAD", cwd=repo).strip()
    topk = repo / "python" / "abh_fake_sgl" / "layers" / "moe" / "topk.py"
    topk.write_text(TOPK_FIX)
    arm_dir = tmp_path / "arms" / "exp"
    arm_dir.mkdir(parents=True)
    (arm_dir / "fix.patch").write_text(git("diff", cwd=repo))
    git("checkout", "-q", "--", ".", cwd=repo)  # the repository itself stays at the base
    run = tmp_path / "run"
    cfg = {"name": "fix", "source": {"kind": "git", "path": str(repo), "ref": "HEAD", "subdir": "python",
                                     "patches": ["fix.patch"]},
           "checks": [source_check(contains=MARKER)]}
    a = resolve_arm("b", cfg, run, tmp_path, arm_dir=arm_dir)
    wt = run.resolve() / "worktrees" / "b"
    assert a.source.worktree == a.source.tree == str(wt) and a.pythonpath == [str(wt / "python")]
    assert a.source.commit == base_commit and a.source.dirty is True
    assert a.source.patches[0]["file"] == str(arm_dir / "fix.patch") and len(a.source.patches[0]["sha256"]) == 64
    assert "gate_shared = 0" in (wt / "python/abh_fake_sgl/layers/moe/topk.py").read_text()
    assert "gate_shared = 0" not in topk.read_text()
    assert run_static_checks(a)[0].passed
    # found by searching arms/ when the arm's folder is not given; a rerun recreates the worktree
    a2 = resolve_arm("b", cfg, run, tmp_path)
    assert a2.source.patches[0]["file"] == str(arm_dir / "fix.patch")
    # a patch that does not apply is a clear error
    good = (arm_dir / "fix.patch").read_text()
    (arm_dir / "bad.patch").write_text(good.replace(" def select_experts(top_k,", " def select_experts(k,"))
    bad = {**cfg, "source": {**cfg["source"], "patches": ["bad.patch"]}}
    with pytest.raises(ArmError, match=r"patch .*bad.patch does not apply"):
        resolve_arm("c", bad, run, tmp_path, arm_dir=arm_dir)
    with pytest.raises(ArmError, match="git ref 'no-such-ref' not found"):
        resolve_arm("d", {**cfg, "source": {**cfg["source"], "ref": "no-such-ref"}}, run, tmp_path)


# -------------------------------------------------------------------------------- live checks
pytest_sim = pytest.mark.skipif(not TEST_JSONL.exists(), reason="GSM8K test set not found")


@pytest_sim
def test_http_fingerprint_custom_checks_on_the_simulated_engine(tmp_path):
    probe_dir = tmp_path / "arms" / "sim"
    probe_dir.mkdir(parents=True)
    (probe_dir / "myprobe.py").write_text(textwrap.dedent("""
        import json, urllib.request
        def build_is(url, want="fix"):
            info = json.load(urllib.request.urlopen(url + "/get_server_info"))
            return info["build"] == want, {"build": info["build"]}
        def always_false(url):
            return False
    """))
    checks = [
        {"kind": "http", "name": "build is fix", "key": "build", "equals": "fix"},
        {"kind": "http", "name": "build is baseline", "key": "build", "equals": "baseline"},
        {"kind": "http", "name": "simulated", "path": "/get_model_info", "key": "simulated", "equals": True},
        {"kind": "fingerprint", "name": "simulator module", "key": "modules.harness.file",
         "contains": "harness/__init__.py"},
        {"kind": "fingerprint", "name": "python", "key": "python.executable", "contains": "python"},
        {"kind": "fingerprint", "name": "wrong dist", "key": "dist.abh", "equals": "0.0.0-no"},
        {"kind": "custom", "name": "custom ok", "function": "myprobe:build_is"},
        {"kind": "custom", "name": "custom no", "function": "myprobe:always_false"},
        {"kind": "source", "module": "harness.simulator", "object": "SimConfig", "contains": "class SimConfig"},
    ]
    a = resolve_arm("b", {"name": "fix", "engine": {"build": "fix"}, "checks": checks}, tmp_path, tmp_path,
                    arm_dir=probe_dir)
    e = create_engine(SimulatedEngineConfig(data=str(TEST_JSONL)), a, tmp_path, "b-r0")
    with e:
        e.launch()
        e.wait_ready()
        res = {r.name: r for r in run_live_checks(a, e)}
    assert len(res) == 8  # the source check is static, not live
    assert res["build is fix"].passed and res["build is fix"].found == "fix"
    assert not res["build is baseline"].passed
    assert res["build is baseline"].expected == "baseline" and res["build is baseline"].found == "fix"
    assert res["build is baseline"].what == "GET /get_server_info -> build"
    assert res["simulated"].passed
    assert res["simulator module"].passed and res["python"].passed and not res["wrong dist"].passed
    assert res["custom ok"].passed and res["custom ok"].evidence["evidence"] == {"build": "fix"}
    assert not res["custom no"].passed
    with pytest.raises(SideAssertionError) as ei:
        assert_checks(list(res.values()))
    msg = str(ei.value)
    assert "check 'build is baseline' (http: GET /get_server_info -> build): expected 'baseline'; found 'fix'" in msg
    assert "'build is fix'" not in msg


# ------------------------------------------------------------------------------------- arm diff
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


def test_parse_flags_and_lookup():
    assert parse_flags(["--tp", "8", "--flag", "--x=1", "--n", "-5", "pos", "--tp", "4"]) == {
        "--tp": ["8", "4"], "--flag": True, "--x": "1", "--n": "-5", "_positional": ["pos"]}
    fp = {"modules": {"sglang.srt.layers.moe.topk": {"file": "/t/topk.py"}},
          "files": {"python/a.py": {"sha256": "s"}}, "l": [{"v": 1}]}
    assert lookup(fp, "modules.sglang.srt.layers.moe.topk.file") == "/t/topk.py"
    assert lookup(fp, "files.python/a.py.sha256") == "s"
    assert lookup(fp, "l.0.v") == 1
    assert repr(lookup(fp, "modules.nope")) == "<absent>"


# ------------------------------------------------------------------------------------- redaction
def test_redaction_of_env_and_argv():
    env = {"HF_TOKEN": "t", "OPENAI_API_KEY": "k", "my_secret": "s", "DB_PASSWORD": "p", "AWS_SECRET_ACCESS_KEY": "a",
           "TOKENIZER_PATH": "/tok", "SGLANG_MAX_TOKENS": "5", "SGLANG_USE_AITER": "1"}
    out = redact_env(env)
    for k in ("HF_TOKEN", "OPENAI_API_KEY", "my_secret", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY"):
        assert out[k] == REDACTED
    assert out["TOKENIZER_PATH"] == "/tok" and out["SGLANG_MAX_TOKENS"] == "5" and out["SGLANG_USE_AITER"] == "1"
    argv = ["python", "-m", "x", "--api-key", "sk-1", "--api-key=sk-2", "--hf-token", "hf_x", "--password=p",
            "--tokenizer-path", "/tok", "--max-new-tokens", "5", "--skip-tokenizer-init", "--secret-flag",
            "--tp", "8"]
    r = redact_argv(argv)
    assert r == ["python", "-m", "x", "--api-key", REDACTED, f"--api-key={REDACTED}", "--hf-token", REDACTED,
                 f"--password={REDACTED}", "--tokenizer-path", "/tok", "--max-new-tokens", "5",
                 "--skip-tokenizer-init", "--secret-flag", "--tp", "8"]
    assert "sk-1" not in " ".join(r) and "sk-2" not in " ".join(r)
    assert is_secret_name("x-api-key") and not is_secret_name("stop_token_ids")


def test_describe_launch_redacts_secrets(tmp_path):
    cfg = SGLangEngineConfig(model_path="m", args=["--api-key", "sk-live"], env={"HF_TOKEN": "hf_live"})
    arm = ResolvedArm(key="a", name="a")
    d = describe_launch(arm, create_engine(cfg, arm, tmp_path, "a"))
    text = repr(d)
    assert "sk-live" not in text and "hf_live" not in text
    assert d["args"]["--api-key"] == REDACTED and d["env"]["HF_TOKEN"] == REDACTED


def test_redact_tree_covers_config_argv_overrides_and_server_info():
    from harness.redact import REDACTED, redact_tree

    tree = {
        "config": {"engine": {"env": {"HF_TOKEN": "hf_abc", "SGLANG_USE_AITER": "1"}, "args": ["--api-key", "s3"]},
                   "arms": {"a": {"checks": [{"kind": "http", "key": "build", "equals": "fix"}]}},
                   "task": {"max_new_tokens": 512}},
        "argv": ["abh run", "engine.env.OPENAI_API_KEY=sk-1", "experiment.repeats=3"],
        "probe": {"server_info": {"api_key": "topsecret", "tp_size": 8, "admin_api_key": None}},
    }
    out = redact_tree(tree)
    text = repr(out)
    for secret in ("hf_abc", "s3", "sk-1", "topsecret"):
        assert secret not in text
    assert out["config"]["engine"]["env"]["HF_TOKEN"] == REDACTED
    assert out["config"]["engine"]["env"]["SGLANG_USE_AITER"] == "1"
    assert out["config"]["arms"]["a"]["checks"][0]["key"] == "build"
    assert out["config"]["task"]["max_new_tokens"] == 512
    assert out["argv"][2] == "experiment.repeats=3"
    assert out["probe"]["server_info"]["tp_size"] == 8


def test_secrets_never_reach_the_run_manifest(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", f"hydra.run.dir={tmp_path}/run", "progress=false",
                        "task.num_questions=20", "client.parallel=20", "experiment.repeats=1",
                        "experiment.aa_control=false", "+engine.env.HF_TOKEN=hf_leak123",
                        "+arms.a.env.MY_SECRET=leak456", "+arms.b.env.MY_SECRET=leak456", "report=true"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file() and f.suffix in (".json", ".jsonl", ".html"):
            text = f.read_text(errors="replace")
            assert "hf_leak123" not in text and "leak456" not in text, f
    assert "hf_leak123" not in r.stdout + r.stderr


def test_redact_text_in_logs_and_overrides():
    from harness.redact import REDACTED, redact_text

    cases = {
        "ServerArgs(model_path='m', api_key='sk-123', tp_size=8)": "api_key='***REDACTED***'",
        "+engine.args=[--api-key,sk-abcdef]": "--api-key,***REDACTED***",
        "override_dirname: +engine.env.HF_TOKEN=hf_x,engine.flip_rate=0.01": "HF_TOKEN=***REDACTED***,engine",
        "Authorization: Bearer sk-abcdef123": "Bearer ***REDACTED***",
        "export OPENAI_API_KEY=sk-9": "OPENAI_API_KEY=***REDACTED***",
    }
    for text, want in cases.items():
        assert want in redact_text(text), text
    for benign in ("--max-new-tokens 512", "tokenizer_path=/m", "key: build", "api_key=None", "a basic test"):
        assert REDACTED not in redact_text(benign), benign
