"""Where results go (issue 22, item 7): a name that leaves results/ is refused before Hydra makes any directory;
`--out /`, a system directory, or a path under a regular file is one line and exit 2, never a write or a
traceback."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import pytest
from helpers.evals import make_eval, seed_vectors

from harness import exitcodes
from harness.cli.main import main as abh_main
from harness.util.paths import output_problem


def abh(*args: str) -> subprocess.CompletedProcess:
    """``abh ARGS`` in this process (exit code, stdout, stderr); every refusal here comes before any work."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = abh_main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("override,words", [
    ("experiment.name=../../escaped", "experiment.name '../../escaped' must be"),
    ("experiment.name=..", "experiment.name '..' must be"),
    ("hydra.run.dir=/", "refusing to write results into / itself"),
    ("hydra.run.dir=/proc/abh", "under /proc, a system directory"),
])
def test_abh_run_refuses_a_directory_before_hydra_makes_it(override, words, tmp_path, monkeypatch):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    r = abh("run", override, "dry_run=true")
    assert r.returncode == exitcodes.BAD_CONFIG
    assert words in one_line(r)
    assert tree(tmp_path) == ["a", "a/b"]  # no results/.., no escaped/


def test_output_problems():
    assert output_problem("/") and output_problem("/etc/abh") and output_problem("/proc/self/x")
    assert "a system directory" in output_problem("/sys/kernel/abh")


def test_a_symlink_to_the_root_is_the_root(tmp_path):
    (tmp_path / "root").symlink_to("/")
    assert "into / itself" in output_problem(tmp_path / "root")
    assert output_problem(tmp_path / "fine" / "sub") is None


@pytest.mark.parametrize("where", ["root", "proc", "under_file"])
def test_abh_compare_out(where, tmp_path):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:50]), make_eval(tmp_path / "b", b[:50])
    (tmp_path / "file").write_text("keep me")
    out = {"root": "/", "proc": "/proc/abh", "under_file": str(tmp_path / "file" / "sub")}[where]
    r = abh("compare", "--a", str(da), "--b", str(db), "--out", out, "--resamples", "100")
    assert r.returncode == exitcodes.BAD_CONFIG
    line = one_line(r)
    assert {"root": "into / itself", "proc": "under /proc", "under_file": "is a file, so nothing"}[where] in line
    assert not Path("/comparison.json").exists() and (tmp_path / "file").read_text() == "keep me"


@pytest.mark.parametrize("out", ["/", "/proc/abh"])
def test_abh_eval_and_ab_out(out, tmp_path):
    r = abh("eval", "--url", "http://127.0.0.1:9", "--out", out)
    assert r.returncode == exitcodes.BAD_CONFIG and "--out" in one_line(r)
    r = abh("ab", "http://127.0.0.1:9", "http://127.0.0.1:8", "--out", out)
    assert r.returncode == exitcodes.BAD_CONFIG and "--out" in one_line(r)
    (tmp_path / "f").write_text("")
    r = abh("eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "f" / "ev"))
    assert r.returncode == exitcodes.BAD_CONFIG and "is a file" in one_line(r)
