"""Side assertions: source checks in the arm's own interpreter, live checks (fingerprint, http, custom),
value matching, and the message a failed assertion gives."""

from __future__ import annotations

import ast
import dataclasses
import sys
import textwrap

import pytest
from conftest import TEST_JSONL
from helpers.arms import MARKER, TOPK_BASE, TOPK_FIX, make_tree, pp_arm, source_check

from harness.arms.arm import ResolvedArm, resolve_arm
from harness.checks import source_probe
from harness.checks.live import run_live_checks
from harness.checks.match import MISSING, compare, lookup
from harness.checks.result import CheckResult, SideAssertionError, assert_checks
from harness.checks.static import SOURCE_PROBE, run_static_checks
from harness.config import CheckConfig, SimulatedEngineConfig
from harness.engines import create_engine


# --------------------------------------------------------------------------------- source checks
def test_source_check_passes_and_fails_on_marker(tmp_path):
    base = make_tree(tmp_path / "base", TOPK_BASE)
    fix = make_tree(tmp_path / "fix", TOPK_FIX)
    run = tmp_path / "run"
    lacks = [source_check(name="lacks marker", lacks=MARKER)]
    contains = [source_check(name="has marker", contains=MARKER)]
    assert all(r.passed for r in run_static_checks(pp_arm("a", base, run, lacks)))
    assert all(r.passed for r in run_static_checks(pp_arm("b", fix, run, contains)))
    # the other way round fails, and the message names the arm, the check, the expected and the found value
    wrong = run_static_checks(pp_arm("a", base, run, contains))
    assert not wrong[0].passed and wrong[0].kind == "source"
    assert f"contains {MARKER!r}: no" in wrong[0].found
    with pytest.raises(SideAssertionError) as ei:
        assert_checks(wrong, "a")
    assert str(ei.value).startswith(
        "side assertion failed for arm 'a': check 'has marker' (source: abh_fake_sgl.layers.moe.topk.select_experts): "
        f"expected \"source of abh_fake_sgl.layers.moe.topk.select_experts contains {MARKER!r}; module file under ")
    assert f"found \"contains {MARKER!r}: no; module file " in str(ei.value)
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
    assert r.evidence["first_line"] == 7 and r.evidence["contains_at"][0].startswith("8: ")
    missing = run_static_checks(pp_arm("b", tree, tmp_path / "run",
                                       [source_check(object="no_such_function", contains=MARKER)]))[0]
    assert not missing.passed and "no_such_function" in missing.found


def test_source_check_missing_module(tmp_path):
    tree = make_tree(tmp_path / "t", TOPK_BASE)
    r = run_static_checks(pp_arm("a", tree, tmp_path / "run", [source_check(module="abh_nope.topk")]))[0]
    assert not r.passed and "not found" in r.found


def test_source_probe_is_a_stdlib_only_file_whose_folder_shadows_nothing(tmp_path):
    # the arm's interpreter runs it by path: it may import nothing but the standard library ...
    tree = ast.parse(SOURCE_PROBE.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported
    assert SOURCE_PROBE == __import__("pathlib").Path(source_probe.__file__).resolve()
    # ... and its own folder (harness/checks: match.py, result.py ...) must not shadow the arm's modules:
    # the working directory comes first, as with `python -c`
    tree_dir = make_tree(tmp_path / "t", TOPK_BASE)
    arm = pp_arm("a", tree_dir, tmp_path / "run", [{"kind": "source", "module": "match", "object": "compare"}])
    r = run_static_checks(arm)[0]
    assert not r.passed and "not found" in r.found, r.found
    assert r.evidence["sys_path_head"][0] == ""


# -------------------------------------------------------------------------------- value matching
def test_lookup_and_compare():
    fp = {"modules": {"sglang.srt.layers.moe.topk": {"file": "/t/topk.py"}},
          "files": {"python/a.py": {"sha256": "s"}}, "l": [{"v": 1}], "flag": True, "n": 8}
    assert lookup(fp, "modules.sglang.srt.layers.moe.topk.file") == "/t/topk.py"
    assert lookup(fp, "files.python/a.py.sha256") == "s"
    assert lookup(fp, "l.0.v") == 1 and lookup(fp, "l.-1.v") == 1 and lookup(fp, "l.1.v") is MISSING
    assert repr(lookup(fp, "modules.nope")) == "<absent>"
    # equals alone: the expected value itself; booleans and numbers compare by their text too
    assert compare(True, CheckConfig(kind="http", equals="true")) == (True, "true")
    assert compare(8, CheckConfig(kind="http", equals="8")) == (True, "8")
    assert compare("8", CheckConfig(kind="http", equals=9)) == (False, 9)
    assert compare(MISSING, CheckConfig(kind="http", equals=None)) == (False, "present")
    # <source> stands for the arm's tree
    c = CheckConfig(kind="fingerprint", equals="<source>/python/x.py")
    assert compare("/tree/python/x.py", c, "/tree") == (True, "/tree/python/x.py")
    assert compare("/tree/python/x.py", c) == (False, "<source>/python/x.py")
    both = CheckConfig(kind="http", contains="a", lacks="b")
    assert compare(["a", "c"], both) == (True, "contains 'a' and lacks 'b'")
    assert compare("ab", both)[0] is False and compare({"a": 1}, both)[0] is True


def test_side_assertion_error_names_every_failed_check():
    results = [CheckResult("ok", "http", True, "fix", "fix", arm="b"),
               CheckResult("build", "http", False, "fix", "baseline", arm="b", what="GET /get_server_info -> build"),
               CheckResult("custom", "custom", False, True, "RuntimeError: boom", arm="b", what="p:f(http://x)")]
    assert_checks(results[:1], "b")  # all passed: no error
    with pytest.raises(SideAssertionError) as ei:
        assert_checks(results)
    assert str(ei.value) == (
        "side assertion failed for arm 'b': check 'build' (http: GET /get_server_info -> build): expected 'fix'; "
        "found 'baseline'\n  check 'custom' (custom: p:f(http://x)): expected True; found 'RuntimeError: boom'")
    assert [f.name for f in ei.value.failures] == ["build", "custom"] and ei.value.arm == "b"
    assert not isinstance(ei.value, ValueError | RuntimeError)  # never mistaken for a config or engine error


def test_a_recorded_check_is_every_field_in_order_and_a_copy():
    @dataclasses.dataclass
    class Seen:  # a custom check's own evidence: recorded as the dict it is
        rows: list[int]

    r = CheckResult("custom", "custom", True, True, True, {"function": "p:f", "evidence": Seen([1])}, "b", "p:f(u)")
    doc = r.to_dict()
    assert doc == dataclasses.asdict(r) and doc["evidence"] == {"function": "p:f", "evidence": {"rows": [1]}}
    assert list(doc) == [f.name for f in dataclasses.fields(r)]
    doc["evidence"]["function"] = "changed"
    assert r.evidence["function"] == "p:f"


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
        {"kind": "fingerprint", "name": "simulator module", "key": "modules.abh_simulator.file",
         "contains": "abh_simulator/__init__.py"},
        {"kind": "fingerprint", "name": "python", "key": "python.executable", "contains": "python"},
        {"kind": "fingerprint", "name": "wrong dist", "key": "dist.abh", "equals": "0.0.0-no"},
        {"kind": "custom", "name": "custom ok", "function": "myprobe:build_is"},
        {"kind": "custom", "name": "custom no", "function": "myprobe:always_false"},
        {"kind": "custom", "name": "custom missing", "function": "nosuchprobe:f"},
        {"kind": "source", "module": "abh_simulator", "object": "SimConfig", "contains": "class SimConfig"},
    ]
    # the probe file is found under arms_root/arms
    a = resolve_arm("b", {"name": "fix", "engine": {"build": "fix"}, "checks": checks}, tmp_path, tmp_path)
    e = create_engine(SimulatedEngineConfig(data=str(TEST_JSONL)), a, tmp_path, "b-r0")
    with e:
        e.launch()
        e.wait_ready()
        res = {r.name: r for r in run_live_checks(a, e)}
    assert len(res) == 9  # the source check is static, not live
    assert res["build is fix"].passed and res["build is fix"].found == "fix"
    assert not res["build is baseline"].passed
    assert res["build is baseline"].expected == "baseline" and res["build is baseline"].found == "fix"
    assert res["build is baseline"].what == "GET /server_info -> build"  # the current name by default
    assert res["simulated"].passed
    assert res["simulator module"].passed and res["python"].passed and not res["wrong dist"].passed
    assert res["custom ok"].passed and res["custom ok"].evidence["evidence"] == {"build": "fix"}
    assert not res["custom no"].passed
    assert not res["custom missing"].passed and "nosuchprobe.py not found" in res["custom missing"].found
    with pytest.raises(SideAssertionError) as ei:
        assert_checks(list(res.values()))
    msg = str(ei.value)
    assert msg.startswith("side assertion failed for arm 'b': ")
    assert "check 'build is baseline' (http: GET /server_info -> build): expected 'baseline'; found 'fix'" in msg
    assert "'build is fix'" not in msg


def test_live_checks_without_a_fingerprint(tmp_path):
    from harness.config import SGLangEngineConfig

    arm = ResolvedArm(key="a", name="a", checks=[CheckConfig(kind="fingerprint", name="fp", key="dist.x", equals="1")])
    e = create_engine(SGLangEngineConfig(model_path="m", fingerprint=False), arm, tmp_path, "a")
    (r,) = run_live_checks(arm, e)
    assert not r.passed and r.expected == "1" and r.found.startswith("no fingerprint")
