"""Arms: source kinds (installed, pythonpath, git worktree + patches), the arm's interpreter and environment."""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from helpers.arms import MARKER, TOPK_BASE, TOPK_FIX, git, make_tree, pp_arm, source_check

from harness.arms.arm import ArmError, ResolvedArm, find_arm_file, resolve_arm
from harness.checks.static import run_static_checks
from harness.config import CheckConfig, SGLangEngineConfig
from harness.engines import create_engine


def test_pythonpath_puts_the_tree_first(tmp_path):
    # a tree that shadows an installed package (requests) wins: it is FIRST on PYTHONPATH
    tree = tmp_path / "tree"
    (tree / "python" / "requests").mkdir(parents=True)
    (tree / "python" / "requests" / "__init__.py").write_text("def marker():\n    return 'from the tree'\n")
    a = pp_arm("a", tree, tmp_path / "run", [{"kind": "source", "module": "requests", "object": "marker",
                                               "contains": "from the tree", "file_under": "python"}])
    assert a.pythonpath == [str(tree.resolve() / "python")] == a.source.pythonpath
    assert a.process_env()["PYTHONPATH"].split(os.pathsep)[0] == str(tree.resolve() / "python")
    r = run_static_checks(a)[0]
    assert r.passed, r.found
    spec = create_engine(SGLangEngineConfig(model_path="m", port=30001, env={"PYTHONPATH": "/x"}), a, tmp_path,
                         "a").launch_spec()
    assert spec.env["PYTHONPATH"].split(os.pathsep) == [str(tree.resolve() / "python"), "/x"]


def test_env_delta_layers_engine_env_arm_env_and_pythonpath(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", "/inherited")
    a = ResolvedArm(key="a", name="a", env={"X": "arm", "Y": "1"}, pythonpath=["/tree/python"])
    # the arm's env wins over the engine's; its entries go first, then the engine's own, then the inherited
    assert a.env_delta({"X": "engine", "Z": 2}, ["/harness"]) == {
        "X": "arm", "Y": "1", "Z": "2", "PYTHONPATH": os.pathsep.join(["/tree/python", "/harness", "/inherited"])}
    # a PYTHONPATH the engine sets replaces the inherited one (still after the arm's entries)
    assert a.env_delta({"PYTHONPATH": "/engine"})["PYTHONPATH"] == os.pathsep.join(["/tree/python", "/engine"])
    # no entries: PYTHONPATH is not touched
    assert "PYTHONPATH" not in ResolvedArm(key="b", name="b").env_delta({"X": "1"})
    full = a.process_env()
    assert full["PYTHONPATH"].startswith("/tree/python") and full["PATH"] == os.environ["PATH"]
    assert a.interpreter == sys.executable and ResolvedArm(key="c", name="c", python="/p/python").interpreter == "/p/python"


def test_source_modules_are_the_source_checks_modules_once():
    checks = [CheckConfig(kind="source", module="m.a"), CheckConfig(kind="fingerprint", key="x"),
              CheckConfig(kind="source", module="m.a", object="f"), CheckConfig(kind="source", module="m.b")]
    assert ResolvedArm(key="a", name="a", checks=checks).source_modules() == ["m.a", "m.b"]


def test_pythonpath_missing_tree(tmp_path):
    cfg = {"name": "a", "source": {"kind": "pythonpath", "path": str(tmp_path / "nope")}}
    with pytest.raises(ArmError, match="does not exist"):
        resolve_arm("a", cfg, tmp_path, None)
    a = resolve_arm("a", cfg, tmp_path, None, strict=False)
    assert a.source.problems and "does not exist" in a.source.problems[0]


def test_bad_source_configs_are_refused(tmp_path):
    with pytest.raises(ArmError, match="source.kind must be one of installed, pythonpath, git"):
        resolve_arm("a", {"name": "a", "source": {"kind": "tarball"}}, tmp_path)
    with pytest.raises(ArmError, match="source.path is required"):
        resolve_arm("a", {"name": "a", "source": {"kind": "git"}}, tmp_path)
    with pytest.raises(ArmError, match="patches need source.kind=git"):
        resolve_arm("a", {"name": "a", "source": {"kind": "pythonpath", "path": str(tmp_path),
                                                  "patches": ["x.patch"]}}, tmp_path)


def test_find_arm_file_under_arms(tmp_path):
    (tmp_path / "arms" / "exp1").mkdir(parents=True)
    (tmp_path / "arms" / "exp2").mkdir(parents=True)
    (tmp_path / "arms" / "exp1" / "only.py").write_text("")
    (tmp_path / "arms" / "exp1" / "twice.py").write_text("")
    (tmp_path / "arms" / "exp2" / "twice.py").write_text("")
    assert find_arm_file("only.py", tmp_path) == (tmp_path / "arms" / "exp1" / "only.py").resolve()
    assert find_arm_file("exp2/twice.py", tmp_path) == (tmp_path / "arms" / "exp2" / "twice.py").resolve()
    with pytest.raises(ArmError, match="twice.py is ambiguous"):
        find_arm_file("twice.py", tmp_path)
    with pytest.raises(ArmError, match="nope.py not found"):
        find_arm_file("nope.py", tmp_path)


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
    a = resolve_arm("b", cfg, run, tmp_path)  # the patch is found under arms_root/arms
    wt = run.resolve() / "worktrees" / "b"
    assert a.source.worktree == a.source.tree == str(wt) and a.pythonpath == [str(wt / "python")]
    assert a.source.commit == base_commit and a.source.dirty is True
    assert a.source.patches[0]["file"] == str(arm_dir / "fix.patch") and len(a.source.patches[0]["sha256"]) == 64
    assert "gate_shared = 0" in (wt / "python/abh_fake_sgl/layers/moe/topk.py").read_text()
    assert "gate_shared = 0" not in topk.read_text()
    assert run_static_checks(a)[0].passed
    # a rerun recreates the worktree
    a2 = resolve_arm("b", cfg, run, tmp_path)
    assert a2.source.patches[0]["file"] == str(arm_dir / "fix.patch") and a2.source.worktree == str(wt)
    # a patch that does not apply is a clear error
    good = (arm_dir / "fix.patch").read_text()
    (arm_dir / "bad.patch").write_text(good.replace(" def select_experts(top_k,", " def select_experts(k,"))
    bad = {**cfg, "source": {**cfg["source"], "patches": ["bad.patch"]}}
    with pytest.raises(ArmError, match=r"patch .*bad.patch does not apply"):
        resolve_arm("c", bad, run, tmp_path)
    with pytest.raises(ArmError, match="git ref 'no-such-ref' not found"):
        resolve_arm("d", {**cfg, "source": {**cfg["source"], "ref": "no-such-ref"}}, run, tmp_path)


def test_a_placeholder_path_names_its_unset_variable(tmp_path, monkeypatch):
    """The door reads which environment variable an arm's source.path was to come from (the composed tree still
    holds the interpolation); the arm's missing tree then says to set it."""
    from omegaconf import OmegaConf

    from harness.cli.compose import unset_env

    monkeypatch.delenv("ABH_TEST_UNSET_REPO", raising=False)
    cfg = OmegaConf.create({"arms": {"a": {"source": {"kind": "pythonpath",
                                                      "path": "${oc.env:ABH_TEST_UNSET_REPO,/no/such/tree}"}}}})
    assert unset_env(cfg) == {"a": "ABH_TEST_UNSET_REPO"}
    arm = resolve_arm("a", {"name": "a", "source": {"kind": "pythonpath", "path": "/no/such/tree"}}, tmp_path,
                      None, strict=False, unset_env="ABH_TEST_UNSET_REPO")
    assert "set ABH_TEST_UNSET_REPO to your source tree" in arm.source.problems[0]
