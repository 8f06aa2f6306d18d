"""Symbolic links planted in an output directory: abh writes nothing through them. Every file it writes or locks
under a run, eval or comparison directory is opened without following a link, every directory it descends into
is checked to be a real one inside it; a planted link is one line naming it and exit 2, and what it points to is
byte-identical afterwards."""

from __future__ import annotations

import hashlib
import io
import logging
import logging.config
import os
from pathlib import Path

import pytest
import yaml
from conftest import TEST_JSONL, SimServer
from helpers.evals import make_eval, seed_vectors
from helpers.runs import ONE_EACH, SMALL, abh_run_here

from harness import exitcodes
from harness.cli.main import main as cli_main
from harness.results import fileio
from harness.results.dirlock import LOCK_FILE, DirLock
from harness.results.eval_store import EvalStore
from harness.results.fileio import PlantedLink
from harness.results.prompt_store import TEXTS
from harness.results.token_store import SCORES, SCORES_META, ScoresWriter

N = "20"


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (links not followed) by its relative path: its sha256 (a directory: 'dir')."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory outside every output directory, with a file that must stay as it is."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "precious.txt").write_text("not abh's to write\n")
    return d


def plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``abh ARGV`` in this process: (exit code, stderr)."""
    capsys.readouterr()
    try:
        code = cli_main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def names_the_link(err: str, link: Path) -> str:
    """The one error line, which names ``link``."""
    lines = [ln for ln in err.splitlines() if "is a symbolic link" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"{link} is a symbolic link" in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def servers():
    a, b = SimServer("--accuracy", "0.9", "--run-seed", "1"), SimServer("--accuracy", "0.6", "--run-seed", "2")
    try:
        yield a.wait_ready(), b.wait_ready()
    finally:
        a.stop()
        b.stop()


def ab(capsys: pytest.CaptureFixture[str], servers: tuple[SimServer, SimServer], out: Path) -> tuple[int, str]:
    sa, sb = servers
    return cli(capsys, "ab", sa.url, sb.url, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", N,
               "--parallel", N, "--no-progress")


# a file: (the link under the run directory); a directory: the link's target is the outside directory itself
FILES = ["run.log", LOCK_FILE, "evals/a/r1/samples.jsonl", "evals/a/r1/prompts.jsonl", "evals/a/r1/eval.json", TEXTS,
         f"evals/a/r1/{SCORES_META}", f"evals/a/r1/{SCORES}", "comparison.json", "report.html", "comparison.md",
         "manifest.json", "summary.json"]
DIRS = ["evals/b/r1", "evals/b", "evals"]


@pytest.mark.parametrize("rel", FILES + DIRS)
def test_abh_ab_refuses_a_planted_link_and_changes_nothing_outside(servers, tmp_path, outside, capsys, rel):
    run = tmp_path / "run"
    target = outside if rel in DIRS else outside / "precious.txt"
    link = plant(run / rel, target)
    before = snapshot(outside)
    code, err = ab(capsys, servers, run)
    assert code == exitcodes.BAD_CONFIG, err
    names_the_link(err, link)
    assert snapshot(outside) == before and link.is_symlink()


@pytest.mark.slow  # a whole run, then its rerun; the same link planted before a first run is in the default run
def test_a_link_planted_in_a_finished_run_is_refused_on_the_rerun(servers, tmp_path, outside, capsys):
    run = tmp_path / "run"
    code, err = ab(capsys, servers, run)
    assert code == exitcodes.OK, err
    samples = run / "evals" / "b" / "r1" / "samples.jsonl"
    (outside / "samples.jsonl").write_bytes(samples.read_bytes())  # a plausible eval, elsewhere
    samples.unlink()
    plant(samples, outside / "samples.jsonl")
    before = snapshot(outside)
    code, err = ab(capsys, servers, run)
    assert code == exitcodes.BAD_CONFIG
    names_the_link(err, samples)
    assert snapshot(outside) == before


@pytest.mark.parametrize("rel", ["run.log", "servers", "evals/a"])
def test_abh_run_refuses_a_planted_link_before_any_server(tmp_path, outside, capsys, rel):
    run = tmp_path / "run"
    link = plant(run / rel, outside / "precious.txt" if rel == "run.log" else outside)
    before = snapshot(outside)
    code = abh_run_here(f"hydra.run.dir={run}", *SMALL, *ONE_EACH)
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_CONFIG, err
    names_the_link(err, link)
    assert snapshot(outside) == before and not (run / "manifest.json").exists()  # refused before it began


@pytest.mark.parametrize("rel", ["samples.jsonl", LOCK_FILE, "eval.json", ".scores.parquet.partial"])
def test_abh_eval_refuses_a_planted_link(servers, tmp_path, outside, capsys, rel):
    out = tmp_path / "ev"
    link = plant(out / rel, outside / "precious.txt")
    before = snapshot(outside)
    code, err = cli(capsys, "eval", "--url", servers[0].url, "--out", str(out), "--data", str(TEST_JSONL),
                    "--num-questions", "5", "--no-progress")
    assert code == exitcodes.BAD_CONFIG
    names_the_link(err, link)
    assert snapshot(outside) == before


@pytest.mark.parametrize("rel", ["comparison.json", "report.html", "samples.csv"])
def test_abh_compare_refuses_a_planted_link(tmp_path, outside, capsys, rel):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:50]), make_eval(tmp_path / "b", b[:50])
    link = plant(tmp_path / "cmp" / rel, outside / "precious.txt")
    before = snapshot(outside)
    code, err = cli(capsys, "compare", "--a", str(da), "--b", str(db), "--out", str(tmp_path / "cmp"),
                    "--resamples", "100")
    assert code == exitcodes.BAD_CONFIG, err
    names_the_link(err, link)
    assert snapshot(outside) == before


# ------------------------------------------------------------------------------------------ the helpers
def test_no_write_descends_into_a_link_below_a_held_directory(tmp_path, outside):
    root = tmp_path / "run"
    root.mkdir()
    plant(root / "evals", outside)
    before = snapshot(outside)
    with DirLock(root, "run directory"):
        with pytest.raises(PlantedLink, match="evals is a symbolic link"):
            fileio.make_dirs(root / "evals" / "a" / "r1")
        with pytest.raises(PlantedLink, match="evals is a symbolic link"):
            fileio.atomic_write_text(root / "evals" / "x.json", "{}")
        with pytest.raises(PlantedLink, match="evals is a symbolic link"):
            EvalStore(root / "evals" / "a" / "r1").open({"dataset_sha256": "x", "recipe": {}, "indices": [0]})
    assert snapshot(outside) == before
    # released: the directory is no longer held, and the same link is the user's to follow
    assert fileio.check(root / "evals" / "y.json") == root / "evals" / "y.json"


def test_an_output_directory_given_as_a_link_is_the_users_choice(tmp_path, outside):
    """The directory named on the command line may be a link (a results/ on another disk): only what is below it
    is checked."""
    given = plant(tmp_path / "results", outside)
    with DirLock(given, "run directory"):
        fileio.atomic_write_text(given / "summary.json", "{}\n")
        with fileio.open_append(fileio.make_dirs(given / "evals" / "a") / "samples.jsonl") as f:
            f.write(b"{}\n")
    assert (outside / "summary.json").read_text() == "{}\n" and (outside / "evals/a/samples.jsonl").is_file()


def test_a_file_is_never_opened_through_a_final_link_even_unheld(tmp_path, outside):
    link = plant(tmp_path / "log.txt", outside / "precious.txt")
    with pytest.raises(PlantedLink):
        fileio.append_text(link, "x")
    with pytest.raises(PlantedLink):
        fileio.open_nofollow(link, os.O_WRONLY | os.O_CREAT)
    assert (outside / "precious.txt").read_text() == "not abh's to write\n"


def test_the_lock_file_is_never_opened_through_a_link(tmp_path, outside):
    plant(tmp_path / LOCK_FILE, outside / "precious.txt")
    with pytest.raises(PlantedLink, match=LOCK_FILE):
        DirLock(tmp_path).acquire()
    assert (outside / "precious.txt").read_text() == "not abh's to write\n"


@pytest.mark.parametrize("name", [f".{SCORES}.partial", SCORES])
def test_the_scores_writer_writes_through_no_link(tmp_path, outside, name):
    root = tmp_path / "ev"
    root.mkdir()
    plant(root / name, outside / "precious.txt")
    before = snapshot(outside)
    with DirLock(root), pytest.raises(PlantedLink, match=name.replace(".", r"\.")):
        with ScoresWriter(root, top_k=1) as w:
            w.add(0, [1], [-0.1], [[1]], [[-0.1]])
    assert snapshot(outside) == before and not (root / SCORES_META).exists()


def test_the_run_log_handler_writes_nothing_through_a_link_and_opens_late(tmp_path, outside, capsys):
    """The job logging config's run.log handler: opened at the first record (a dry run that logs nothing leaves
    no run.log), never through a planted link, and a refused run.log is no logging error on the terminal."""
    conf = yaml.safe_load((Path(__file__).parents[1] / "configs/hydra/job_logging/redacted.yaml").read_text())
    conf["handlers"]["console"]["stream"] = io.StringIO()
    root, saved, level = logging.getLogger(), logging.getLogger().handlers[:], logging.getLogger().level
    try:
        for log in (tmp_path / "run.log", plant(tmp_path / "linked" / "run.log", outside / "precious.txt")):
            conf["handlers"]["file"]["filename"] = str(log)
            logging.config.dictConfig(conf)
            if not log.is_symlink():
                assert not log.exists()  # nothing logged yet: no file
            logging.getLogger("abh_run_log_handler_test").warning("a line for run.log")
            for h in logging.getLogger().handlers:
                h.close()
    finally:
        root.handlers[:] = saved
        root.setLevel(level)
        logging.getLogger("matplotlib").handlers.clear()
        logging.getLogger("matplotlib").propagate = True
    assert "a line for run.log" in (tmp_path / "run.log").read_text()
    assert (outside / "precious.txt").read_text() == "not abh's to write\n"
    assert "Logging error" not in capsys.readouterr().err


def test_the_scoring_inputs_file_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    from harness.measure.divergence_pass import INPUTS, _write_inputs

    outside = tmp_path / "outside.parquet"
    outside.write_bytes(b"keep")
    run = tmp_path / "run"
    run.mkdir()
    (run / INPUTS).symlink_to(outside)
    (run / f".{INPUTS}.partial").symlink_to(outside)  # the old code's fixed temporary name
    with DirLock(run), pytest.raises(PlantedLink):
        _write_inputs(run / INPUTS, {0: ([1, 2], [3])})
    assert outside.read_bytes() == b"keep"
    (run / f".{INPUTS}.partial").unlink()
    (run / INPUTS).unlink()
    _write_inputs(run / INPUTS, {0: ([1, 2], [3])})
    assert (run / INPUTS).is_file() and not (run / INPUTS).is_symlink()
