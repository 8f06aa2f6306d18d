"""The source diff between the arms, computed from git refs or source trees and held to experiment.fix_files;
and the seed experiment's dry run against an SGLang-shaped repository (base, fix, fix + an unrelated edit)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import TEST_JSONL
from helpers.runs import abh_run_here
from helpers.sglang_repo import HTTP_SERVER, TOPK, UTILS, SGLangRepo, git, make_sglang_repo

from harness import exitcodes
from harness.arms import sourcediff
from harness.arms.arm import resolve_arm
from harness.arms.sourcediff import PREFIX, SourceDiffError, compute, enforce, outside_fix
from harness.results.fileio import read_json

FIX_FILES = [TOPK]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> SGLangRepo:
    return make_sglang_repo(tmp_path_factory.mktemp("sgl") / "sglang")


def git_arm(key: str, repo: SGLangRepo, ref: str, run_dir: Path, **source):
    return resolve_arm(key, {"name": key, "source": {"kind": "git", "path": str(repo.path), "ref": ref,
                                                     "subdir": "python", **source}}, run_dir, None)


def tree_arm(key: str, tree: Path, run_dir: Path):
    return resolve_arm(key, {"name": key, "source": {"kind": "pythonpath", "path": str(tree), "subdir": "python"}},
                       run_dir, None)


def export(repo: SGLangRepo, ref: str, dest: Path) -> Path:
    """A plain source tree (no .git) of ``ref``."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo.path), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def files_of(line: str) -> list[str]:
    assert line.startswith(PREFIX)
    return line[len(PREFIX):].split(" (")[0].strip().split(", ")


# ------------------------------------------------------------------------------------------ git arms
def test_git_refs_base_vs_fix_change_only_topk(repo, tmp_path):
    a, b = git_arm("a", repo, repo.base, tmp_path), git_arm("b", repo, repo.fix, tmp_path)
    d = compute(a, b, FIX_FILES)
    assert d.method == "git" and d.files == [TOPK] and d.outside == [] and d.error is None
    assert d.compared == {"a": repo.base, "b": repo.fix}
    assert files_of(d.line()) == [TOPK]
    assert d.line() == f"{PREFIX} {TOPK} (1 file; git diff {repo.base[:12]}..{repo.fix[:12]})"
    enforce(d)  # only the fix: nothing raised
    # swapped arms: the same one file (the side checks, not the diff, catch a swap)
    assert compute(b, a, FIX_FILES).files == [TOPK]


def test_git_refs_with_an_unrelated_change_stop_the_run(repo, tmp_path):
    a, b = git_arm("a", repo, repo.base, tmp_path), git_arm("b", repo, repo.extra, tmp_path)
    d = compute(a, b, FIX_FILES)
    assert d.files == sorted([TOPK, HTTP_SERVER]) and d.outside == [HTTP_SERVER]
    with pytest.raises(SourceDiffError) as ei:
        enforce(d)
    assert ei.value.code == exitcodes.ARMS_DIFFER == 6
    assert HTTP_SERVER in str(ei.value) and "changed outside experiment.fix_files" in str(ei.value)
    # declared as part of the fix, it passes; with nothing declared, the diff is shown but not enforced
    enforce(compute(a, b, [TOPK, "python/sglang/srt/entrypoints/*.py"]))
    enforce(compute(a, b, []))


def test_a_patch_counts_as_a_change(repo, tmp_path):
    patch = tmp_path / "extra.patch"
    patch.write_text(subprocess.run(["git", "-C", str(repo.path), "diff", repo.fix, repo.extra], check=True,
                                    capture_output=True, text=True).stdout)
    a = git_arm("a", repo, repo.base, tmp_path)
    b = git_arm("b", repo, repo.fix, tmp_path, patches=[str(patch)])
    assert b.source.dirty is True
    d = compute(a, b, FIX_FILES)
    assert d.method == "git" and d.files == sorted([TOPK, HTTP_SERVER]) and d.outside == [HTTP_SERVER]
    # the throw-away index left the worktree's own index and HEAD alone
    status = git("status", "--porcelain", "--untracked-files=no", cwd=Path(b.source.tree))
    assert status == f"M {HTTP_SERVER}"  # modified in the work tree, nothing staged
    assert git("rev-parse", "HEAD", cwd=Path(b.source.tree)) == repo.fix
    # a new file a patch adds (untracked in the worktree) counts too; caches do not
    new = Path(b.source.tree) / "python" / "sglang" / "srt" / "new_module.py"
    new.write_text("x = 1\n")
    cache = Path(b.source.tree) / "python" / "sglang" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "x.cpython-311.pyc").write_bytes(b"\0")
    assert compute(a, b, FIX_FILES).files == sorted([TOPK, HTTP_SERVER, "python/sglang/srt/new_module.py"])


# ------------------------------------------------------------------------------------- plain trees
def test_plain_trees_are_compared_file_by_file_under_the_package_dir(repo, tmp_path):
    base, fix = export(repo, repo.base, tmp_path / "base"), export(repo, repo.fix, tmp_path / "fix")
    a, b = tree_arm("a", base, tmp_path), tree_arm("b", fix, tmp_path)
    d = compute(a, b, FIX_FILES)
    assert d.method == "sha256" and d.files == [TOPK] and d.outside == []
    assert d.compared == {"a": str(base / "python"), "b": str(fix / "python")}
    assert "sha256 of every file under" in d.line() and files_of(d.line()) == [TOPK]
    # caches are not source; a file outside the package dir is not on PYTHONPATH
    (fix / "python" / "sglang" / "__pycache__").mkdir()
    (fix / "python" / "sglang" / "__pycache__" / "topk.cpython-311.pyc").write_bytes(b"\0\1")
    (fix / "README.md").write_text("changed\n")
    assert compute(a, b, FIX_FILES).files == [TOPK]
    # an edited, an added and a removed file all count
    (fix / UTILS).write_text("# edited\n")
    (fix / "python" / "sglang" / "extra.py").write_text("")
    (base / HTTP_SERVER).unlink()
    d = compute(a, b, FIX_FILES)
    assert d.files == sorted([TOPK, UTILS, "python/sglang/extra.py", HTTP_SERVER])
    assert d.outside == sorted([UTILS, "python/sglang/extra.py", HTTP_SERVER])
    with pytest.raises(SourceDiffError):
        enforce(d)


def test_a_git_arm_against_a_plain_tree_is_hashed(repo, tmp_path):
    a = git_arm("a", repo, repo.base, tmp_path)
    b = tree_arm("b", export(repo, repo.fix, tmp_path / "fix"), tmp_path)
    d = compute(a, b, FIX_FILES)
    assert d.method == "sha256" and d.files == [TOPK]


def test_no_tree_to_diff(repo, tmp_path):
    a = resolve_arm("a", {"name": "a"}, tmp_path, None)  # installed: no source tree
    b = git_arm("b", repo, repo.fix, tmp_path)
    d = compute(a, b, FIX_FILES)
    assert d.method == "none" and "installed" in d.error and d.line().startswith(f"{PREFIX} not computed (")
    with pytest.raises(SourceDiffError, match="must come from source trees or git refs"):
        enforce(d)
    enforce(compute(a, b, []))  # nothing declared: nothing to hold it to
    # a dry run's missing tree is reported by the arm itself, not here
    missing = resolve_arm("a", {"name": "a", "source": {"kind": "pythonpath", "path": str(tmp_path / "nope")}},
                          tmp_path, None, strict=False)
    d = compute(missing, b, FIX_FILES)
    assert d.missing_source and "does not exist" in d.error
    enforce(d)


def test_line_and_patterns():
    d = sourcediff.SourceDiff(method="git", a="a", b="b", files=[f"f{i:02d}.py" for i in range(15)],
                              compared={"a": "1" * 40, "b": "2" * 40})
    assert d.line() == (f"{PREFIX} " + ", ".join(f"f{i:02d}.py" for i in range(12)) + ", ... and 3 more "
                        f"(15 files; git diff {'1' * 12}..{'2' * 12})")
    assert sourcediff.SourceDiff(method="git", a="a", b="b", compared={"a": "x", "b": "x"}).line().startswith(
        f"{PREFIX} none (the a and b sources are identical")
    assert outside_fix(["a/b.py", "a/c.py", "test/t.py"], ["a/b.py", "test/*"]) == ["a/c.py"]
    assert outside_fix(["a/b.py"], ["/a/b.py"]) == []


def test_the_recorded_diff_is_every_field_in_order_then_the_line():
    d = sourcediff.SourceDiff(method="sha256", a="a", b="b", files=["x.py"], compared={"a": "/t/a", "b": "/t/b"},
                              fix_files=["y.py"], outside=["x.py"])
    doc = d.to_dict()
    assert doc == {**dataclasses.asdict(d), "line": d.line()}
    assert list(doc) == [f.name for f in dataclasses.fields(d)] + ["line"]
    doc["files"].append("z.py")  # a copy: the record does not share the diff's lists
    assert d.files == ["x.py"]


# ------------------------------------------------------------------- the seed's dry run (the CLI)
@pytest.fixture
def abh_here(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``abh run ARGS`` in this process with SGLANG_REPO set, as a CompletedProcess."""
    def run(*args: str, env_repo: Path) -> subprocess.CompletedProcess:
        monkeypatch.setenv("SGLANG_REPO", str(env_repo))
        capsys.readouterr()
        code = abh_run_here(*args)
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["abh", "run", *args], code, out, err)
    return run


@pytest.fixture
def seed_dry_run(abh_here):
    def run(repo: SGLangRepo, a_ref: str, b_ref: str, tmp_path: Path) -> subprocess.CompletedProcess:
        return abh_here("experiment=dsv4_pro_mi355x_shared_slot", "dry_run=true", f"hydra.run.dir={tmp_path}/dry",
                        f"arms.a.source.ref={a_ref}", f"arms.b.source.ref={b_ref}", env_repo=repo.path)
    return run


def source_lines(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(PREFIX)]


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_seed_dry_run_base_vs_fix_exits_0_naming_only_topk(repo, tmp_path, seed_dry_run):
    r = seed_dry_run(repo, repo.base, repo.fix, tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    lines = source_lines(r.stdout)
    assert len(lines) == 1 and files_of(lines[0]) == [TOPK]
    assert "check [a] select_experts lacks the per-rank shared-slot gate fix: PASS" in r.stdout
    assert "check [b] select_experts contains the per-rank shared-slot gate fix: PASS" in r.stdout


@pytest.mark.slow
def test_seed_dry_run_with_another_changed_file_exits_6(repo, tmp_path, seed_dry_run):
    r = seed_dry_run(repo, repo.base, repo.extra, tmp_path)
    assert r.returncode == exitcodes.ARMS_DIFFER, r.stderr[-3000:]
    assert files_of(source_lines(r.stdout)[0]) == sorted([TOPK, HTTP_SERVER])
    assert f"changed outside experiment.fix_files ({TOPK}): {HTTP_SERVER}" in r.stderr
    assert not (tmp_path / "dry" / "servers").exists()  # stopped before any server


@pytest.mark.slow  # a second dry run of the seed clone: base vs fix stays in the default run
def test_seed_dry_run_with_swapped_arms_exits_3(repo, tmp_path, seed_dry_run):
    r = seed_dry_run(repo, repo.fix, repo.base, tmp_path)
    assert r.returncode == exitcodes.SIDE_ASSERTION_FAILED, r.stderr[-3000:]
    assert files_of(source_lines(r.stdout)[0]) == [TOPK]  # the diff is fine: the sides are swapped
    assert "check [a] select_experts lacks the per-rank shared-slot gate fix: FAIL" in r.stdout
    assert "side assertion failed" in r.stderr


def test_seed_dry_run_with_the_default_refs_in_a_clone_without_them_is_bad_config(repo, tmp_path, abh_here):
    r = abh_here("experiment=dsv4_pro_mi355x_shared_slot", "dry_run=true", f"hydra.run.dir={tmp_path}/dry",
                 env_repo=repo.path)
    assert r.returncode == exitcodes.BAD_CONFIG and "fbecd75c8313" in r.stderr


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
@pytest.mark.skipif(not TEST_JSONL.exists(), reason="GSM8K test set not found")
def test_a_real_run_records_the_source_diff_and_an_extra_file_stops_it_before_any_server(repo, tmp_path, abh_here):
    """The demo (simulated) experiment with git arms from the SGLang-shaped repository."""
    common = ["experiment=demo", "progress=false", "report=false", "experiment.aa_control=false",
              "experiment.repeats=1", "task.num_questions=20", "client.parallel=20",
              f"experiment.fix_files=[{TOPK}]", "experiment.allowed_differences=[engine,source,fingerprint.git]"]
    arms = [f"arms.{k}.source.kind=git" for k in "ab"] + [f"arms.{k}.source.path={repo.path}" for k in "ab"]
    arms += [f"arms.{k}.source.subdir=python" for k in "ab"]
    ok = abh_here(*common, *arms, f"arms.a.source.ref={repo.base}", f"arms.b.source.ref={repo.fix}",
                  f"hydra.run.dir={tmp_path}/ok", env_repo=repo.path)  # in this process; its servers are processes
    assert ok.returncode == 0, ok.stderr[-3000:]
    m = read_json(tmp_path / "ok" / "manifest.json")
    assert m["source_diff"]["files"] == [TOPK] and m["source_diff"]["method"] == "git"
    assert m["source_diff"]["line"].startswith(f"{PREFIX} {TOPK} (1 file; git diff ")
    assert f"{PREFIX} {TOPK}" in ok.stderr
    bad = abh_here(*common, *arms, f"arms.a.source.ref={repo.base}", f"arms.b.source.ref={repo.extra}",
                   f"hydra.run.dir={tmp_path}/bad", env_repo=repo.path)  # stops before any server: in this process
    assert bad.returncode == exitcodes.ARMS_DIFFER, bad.stderr[-3000:]
    assert not (tmp_path / "bad" / "servers").exists() or not list((tmp_path / "bad" / "servers").glob("*.log"))
    m = read_json(tmp_path / "bad" / "manifest.json")
    assert m["source_diff"]["outside"] == [HTTP_SERVER] and m["status"]["code"] == exitcodes.ARMS_DIFFER
    shutil.rmtree(tmp_path / "bad" / "worktrees", ignore_errors=True)
