"""What abh 0.1.0 wrote (tests/data/release-0.1.0: an `abh run`, an `abh ab` and an `abh compare` directory, at
the commit before the second renovation) still loads, reports, compares and resumes: stored files are a contract."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import exitcodes
from harness.cli.main import main as abh
from harness.results import schema
from harness.results.eval_store import eval_done, load_eval
from harness.results.fileio import read_json
from harness.results.score_blocks import load_scores

RELEASE = Path(__file__).resolve().parent / "data" / "release-0.1.0"


@pytest.fixture
def release(tmp_path: Path) -> Path:
    """A copy (the tests write reports into it); its absolute paths still name where 0.1.0 wrote it."""
    shutil.copytree(RELEASE, tmp_path / "release")
    return tmp_path / "release"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = abh(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_every_stored_kind_loads(release: Path) -> None:
    for d in ("run", "ab", "compare"):
        c = schema.load_comparison(release / d / schema.COMPARISON_FILE)
        assert c.verdict in ("improved", "regressed", "inconclusive", "equivalent", "noninferior")
    for d in ("run", "ab"):
        s = schema.load_run_summary(release / d / schema.RUN_SUMMARY_FILE)
        assert s.repeats == 2 and s.exit_code == 0
    manifest = schema.load_manifest(release / "run" / "manifest.json")
    assert manifest["experiment"] == "demo"
    for ev in sorted((release / "run" / "evals").glob("*/r*")) + sorted((release / "ab" / "evals").glob("*/r*")):
        meta, samples, summary = load_eval(ev)
        assert summary is not None and summary["n"] == 24 == len(samples) and eval_done(ev)
        assert meta["indices"] == list(range(24))
    for ev in ("a/r1", "b/r1", "aa/r1"):
        table = load_scores(release / "run" / "evals" / ev)
        assert len(table.questions) > 0 and table.token_id.size > 0


@pytest.mark.parametrize("which", ["run", "ab", "compare"])
def test_abh_report_rewrites_the_report_of_each_directory(release: Path, which: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "report", str(release / which))
    assert code == 0, err
    html = (release / which / "report.html").read_text()
    assert "<html" in html and read_json(release / which / schema.COMPARISON_FILE)["verdict"].upper() in html


def test_abh_compare_of_the_stored_evals_gives_the_stored_comparison(release: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    ev = release / "run" / "evals"
    code, _, err = run(capsys, "compare", "--a", str(ev / "a/r1"), "--a", str(ev / "a/r2"), "--b", str(ev / "b/r1"),
                       "--b", str(ev / "b/r2"), "--out", str(tmp_path / "again"))
    assert code == 0, err
    old, new = read_json(release / "compare" / "comparison.json"), read_json(tmp_path / "again" / "comparison.json")
    for key in ("n", "delta", "delta_ci", "p", "verdict", "both", "a_only", "b_only", "neither"):
        assert new[key] == old[key], key


@pytest.mark.slow  # a whole run of processes: the stored kinds' loading and rewriting stay in the default run
def test_a_finished_run_and_ab_directory_resume_without_sending_a_question(release: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The same commands as 0.1.0's rerun: every eval and scoring pass is kept, the comparison recomputed (the
    abh ab servers are gone: nothing is sent to them)."""
    run_dir = release / "run"
    before = {p: p.stat().st_mtime_ns for p in run_dir.glob("evals/*/*/*")}
    # 0.1.0's demo scored the top 20 and drew every launch's seed at random; today's demo scores the top 5 (a
    # changed divergence setting redoes the passes: test_divergence_run.py) and seeds launches by their ids (a
    # changed engine config is another run): the release's own settings keep them
    code, _, err = run(capsys, "run", "task.num_questions=24", "experiment.repeats=2", "client.parallel=24",
                       "divergence.top_k=20", "engine.run_seed=-1", f"hydra.run.dir={run_dir}")
    assert code == 0, err
    assert err.count("already complete, kept") == 6
    assert {p: p.stat().st_mtime_ns for p in before} == before
    dead = ("http://127.0.0.1:18731", "http://127.0.0.1:18732")
    code, _, err = run(capsys, "ab", *dead, "--out", str(release / "ab"), "--num-questions", "24", "--parallel", "24",
                       "--repeats", "2", "--names", "base,fix", "--no-progress")
    assert code == exitcodes.OK, err
    assert err.count("already complete, kept") == 4
    assert schema.load_run_summary(release / "ab" / schema.RUN_SUMMARY_FILE).arms == {"a": "base", "b": "fix"}
