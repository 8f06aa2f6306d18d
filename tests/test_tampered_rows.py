"""Hand-edited eval directories (issue 22, item 6): a row that is not what it claims is refused, in one line
naming the file and the line, exit 2, by `abh compare` and by the resume of `abh eval`; an honest eval still
compares and resumes. The evals are real ones (abh eval against the simulator), edited as a person would."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import TEST_JSONL, SimServer

from harness import exitcodes
from harness.cli.main import main as abh

N = 24


@pytest.fixture(scope="module")
def server():
    s = SimServer("--accuracy", "0.6", "--seed", "3").wait_ready()
    yield s
    s.stop()


def run_eval(url: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``abh eval`` (a resume, mostly) in this process: exit code, stdout and stderr as a command's."""
    out_buf, err_buf = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out_buf), contextlib.redirect_stderr(err_buf):
        code = abh(["eval", "--url", url, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", str(N),
                    "--no-progress", *extra])
    return subprocess.CompletedProcess([], code, out_buf.getvalue(), err_buf.getvalue())


@pytest.fixture(scope="module")
def honest(server, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("honest") / "ev"
    r = run_eval(server.url, out)
    assert r.returncode == 0, r.stderr
    return out


def lines(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "samples.jsonl").read_text().splitlines()]


def write(d: Path, rows: list) -> None:
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def copy(honest: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(honest, tmp_path / name))


def compare(tmp_path: Path, a: Path, b: Path) -> int:
    return abh(["compare", "--a", str(a), "--b", str(b), "--out", str(tmp_path / "out"), "--resamples", "100"])


def one_line(text: str) -> str:
    got = [x for x in text.splitlines() if x.strip()]
    assert len(got) == 1 and "Traceback" not in text, text
    return got[0]


def flip_wrong_to_right(rows: list[dict]) -> int:
    """Flip `correct` to true in every wrong row (a person raising B's accuracy); returns the first line flipped."""
    first = 0
    for k, r in enumerate(rows, 1):
        if r["correct"] is False:
            r["correct"] = True
            first = first or k
    assert first, "the simulated eval has no wrong answer to flip"
    return first


def relabel_5_as_6(rows: list[dict]) -> int:
    """Question 5's answer given as question 6's (6's own row dropped); returns the edited line."""
    rows[:] = [r for r in rows if r["index"] != 6]
    k = next(k for k, r in enumerate(rows, 1) if r["index"] == 5)
    rows[k - 1]["index"] = 6
    return k


def conflicting_duplicate(rows: list[dict]) -> int:
    """A second, different answer to question 2 appended (it used to win silently); returns its line."""
    r = dict(next(r for r in rows if r["index"] == 2))
    r.update(output=" So the answer is 123456.\n#### 123456", pred=123456, correct=False, invalid=False)
    rows.append(r)
    return len(rows)


def relabel_consistently(rows: list[dict]) -> int:
    """Label and `correct` both changed so that a wrong answer scores right (only the dataset tells)."""
    k = next(k for k, r in enumerate(rows, 1) if r["correct"] is False and r["pred"] not in (None, -9999999))
    rows[k - 1].update(label=rows[k - 1]["pred"], correct=True)
    return k


EDITS: dict[str, tuple[Callable[[list[dict]], int], str]] = {
    "flipped_correct": (flip_wrong_to_right, "but its output scores correct=false"),
    "relabelled_question": (relabel_5_as_6, "its prompt hash is not question 6's prompt"),
    "conflicting_duplicate": (conflicting_duplicate, "are two different answers to question 2"),
    "relabelled_label": (relabel_consistently, "but the dataset's answer to question"),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_tampered_row_is_refused_by_compare_and_by_resume(edit, honest, server, tmp_path, capsys):
    change, words = EDITS[edit]
    a, b = copy(honest, tmp_path, "a"), copy(honest, tmp_path, "b")
    rows = lines(b)
    line = change(rows)
    write(b, rows)
    assert compare(tmp_path, a, b) == exitcodes.BAD_CONFIG
    err = one_line(capsys.readouterr().err)
    assert words in err and f"{b / 'samples.jsonl'}: line" in err and (f"line {line} " in err or f" {line} are" in err)
    assert not (tmp_path / "out").exists()
    r = run_eval(server.url, b)  # the resume refuses too, before any request, and keeps the file as it is
    assert r.returncode == exitcodes.BAD_CONFIG, r.stderr
    assert words in one_line(r.stderr) and lines(b) == rows


MALFORMED = {
    "index_as_string": (lambda r: r.update(index=str(r["index"])), "index must be a whole number >= 0, not \"0\""),
    "empty_object": (lambda r: r.clear(), "the row has no 'index'"),
    "correct_yes": (lambda r: r.update(correct="yes"), "correct must be true, false or null, not \"yes\""),
    "tokens_string": (lambda r: r.update(completion_tokens="12"), "completion_tokens must be a whole number"),
}


@pytest.mark.parametrize("edit", [*MALFORMED, "a_list", "not_json"])
def test_a_malformed_row_is_one_line_naming_file_and_line(edit, honest, server, tmp_path, capsys):
    a, b = copy(honest, tmp_path, "a"), copy(honest, tmp_path, "b")
    text = (b / "samples.jsonl").read_text().splitlines()
    if edit == "a_list":
        text[0], words = "[1, 2]", "line 1 is not a JSON object (found list)"
    elif edit == "not_json":
        text[0], words = '{"index": 0,', "line 1 is not valid JSON"
    else:
        row = json.loads(text[0])
        MALFORMED[edit][0](row)
        text[0], words = json.dumps(row), f"line 1: {MALFORMED[edit][1]}"
    (b / "samples.jsonl").write_text("\n".join(text) + "\n")
    assert compare(tmp_path, a, b) == exitcodes.BAD_CONFIG
    err = one_line(capsys.readouterr().err)
    assert words in err and str(b / "samples.jsonl") in err, err
    r = run_eval(server.url, b)
    assert r.returncode == exitcodes.BAD_CONFIG and words in one_line(r.stderr), r.stderr


def test_honest_copies_compare_and_an_identical_duplicate_is_one_row(honest, tmp_path, capsys):
    a, b = copy(honest, tmp_path, "a"), copy(honest, tmp_path, "b")
    rows = lines(b)
    write(b, [*rows, rows[3]])  # the same answer twice is the same answer
    assert compare(tmp_path, a, b) == exitcodes.OK, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "comparison.json").read_text())["n"] == N


def test_an_error_row_is_superseded_by_an_answer(honest, tmp_path, capsys):
    a, b = copy(honest, tmp_path, "a"), copy(honest, tmp_path, "b")
    rows = lines(b)
    err_row = {**rows[0], "output": None, "pred": None, "correct": None, "invalid": None, "error": "HTTP 503"}
    write(b, [err_row, *rows])
    assert compare(tmp_path, a, b) == exitcodes.OK, capsys.readouterr().err


def test_a_torn_last_line_is_still_a_crash_not_a_tampering(honest, server, tmp_path):
    b = copy(honest, tmp_path, "b")
    text = (b / "samples.jsonl").read_text()
    (b / "samples.jsonl").write_text(text + text.splitlines()[0][:30])  # no newline: the line being written
    r = run_eval(server.url, b)
    assert r.returncode == exitcodes.OK, r.stderr
    assert len(lines(b)) == N
