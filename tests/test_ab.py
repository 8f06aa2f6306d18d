"""`abh ab URL_A URL_B`: two running simulator processes evaluated in interleaved order and compared."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from conftest import TEST_JSONL, SimServer, free_port
from helpers.markdown import parse_table
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.cli import ab as ab_cli
from harness.cli.main import main as cli_main
from harness.results.fileio import read_json, read_jsonl
from harness.serving.settings import url_identity as launch_id

N = "100"


def abh(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli.main", *args], capture_output=True, text=True, **kw)


def _argv(url_a: str, url_b: str, out: Path, *extra: str) -> list[str]:
    return ["ab", url_a, url_b, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", N, "--parallel", N,
            "--no-progress", *extra]


def ab(url_a: str, url_b: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """``abh ab`` as a command, in its own process."""
    return abh(*_argv(url_a, url_b, out, *extra))


def cli_here(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``abh ARGV`` in this process (what the entry point would exit with, stdout, stderr): no interpreter start
    and no scipy import per call."""
    capsys.readouterr()
    try:
        code = cli_main(list(argv))
    except SystemExit as e:  # argparse
        code = int(e.code or 0)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def ab_here(capsys: pytest.CaptureFixture[str], url_a: str, url_b: str, out: Path, *extra: str) -> tuple[int, str, str]:
    """``abh ab`` in this process."""
    return cli_here(capsys, *_argv(url_a, url_b, out, *extra))


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's retries as they are, with a backoff of milliseconds instead of seconds (``client.backoff_s``,
    added to the run's config): these tests check which requests are retried and what is kept, not the backoff's
    timing (test_eval.py checks retries)."""
    overrides = ab_cli.overrides
    monkeypatch.setattr(ab_cli, "overrides", lambda *a: [*overrides(*a), "client.backoff_s=0.01"])


@pytest.fixture(scope="module")
def servers():
    """Arm A's server at 90 % and a worse arm B at 60 %, each one launch with a fixed noise seed and
    launch-level noise (a later pass repeats the first, so `abh eval` twice gives the answers `abh ab` got)."""
    a = SimServer("--accuracy", "0.9", "--run-seed", "1", "--noise", "launch")
    b = SimServer("--accuracy", "0.6", "--run-seed", "2", "--noise", "launch")
    try:
        yield a.wait_ready(), b.wait_ready()
    finally:
        a.stop()
        b.stop()


def _summary_lines(stdout: str) -> list[str]:
    """The printed comparison summary: everything before the "wrote ..." lines."""
    lines = stdout.splitlines()
    return lines[:next(i for i, ln in enumerate(lines) if ln.startswith("wrote "))]


def _received(server: SimServer) -> int:
    return int(requests.get(server.url + "/get_server_info", timeout=5).json()["requests_received"])


STATS = ("n", "n_total", "both", "a_only", "b_only", "neither", "delta", "delta_ci", "delta_ci_method", "test",
         "test", "p", "mde", "verdict", "verdict_reason", "flips", "simulated")


@pytest.mark.slow  # a whole abh ab of two evals x 2 repeats and a compare: its parts are the other tests of this file
def test_ab_gives_the_table_of_eval_twice_and_compare(servers, tmp_path, capsys):
    sa, sb = servers
    r = ab(sa.url, sb.url, tmp_path / "ab")
    assert r.returncode == 0, r.stderr
    root = tmp_path / "ab"
    for f in ("comparison.json", "summary.json", "report.html", "comparison.md", "evals/a/r1/eval.json",
              "evals/a/r1/samples.jsonl", "evals/b/r1/summary.json"):
        assert (root / f).is_file(), f

    # `abh eval` twice and `abh compare`, in this process (`abh ab` above ran as the command itself)
    for ev, name in (("ea", sa), ("eb", sb)):
        code, _, err = cli_here(capsys, "eval", "--url", name.url, "--out", str(tmp_path / ev), "--data",
                                str(TEST_JSONL), "--num-questions", N, "--parallel", N, "--no-progress")
        assert code == 0, err
    code, compare_out, err = cli_here(capsys, "compare", "--a", str(tmp_path / "ea"), "--b", str(tmp_path / "eb"),
                                      "--out", str(tmp_path / "cmp"))
    assert code == 0, err

    got, want = read_json(root / "comparison.json"), read_json(tmp_path / "cmp" / "comparison.json")
    assert {k: got[k] for k in STATS} == {k: want[k] for k in STATS}
    for role in ("a", "b"):
        assert got["arms"][role]["accuracy"] == want["arms"][role]["accuracy"]
        assert got["arms"][role]["wilson"] == want["arms"][role]["wilson"]
    # the same result lines, line for line (abh ab's title names its experiment; it adds outputs and cost lines)
    printed = r.stdout.splitlines()
    assert all(line in printed for line in _summary_lines(compare_out)[1:])
    # one launch per arm: the verdict is about the two server instances, and says so first
    assert got["verdict"] == "regressed" and got["instances_only"] is True
    assert r.stdout.strip().splitlines()[-1].startswith("[SIMULATED] [instances only] REGRESSED ")

    # independently of compare: the accuracies are those of the stored answers
    for role, server in (("a", sa), ("b", sb)):
        rows = read_jsonl(root / "evals" / role / "r1" / "samples.jsonl")
        assert sorted(x["index"] for x in rows) == list(range(100))
        assert got["arms"][role]["accuracy"] == pytest.approx(sum(bool(x["correct"]) for x in rows) / 100)
        meta = read_json(root / "evals" / role / "r1" / "eval.json")
        assert meta["launch"] == launch_id(server.url) == f"url:{server.url}"
        assert (meta["arm"], meta["role"], meta["repeat"], meta["url"]) == (role, role, 1, server.url)
    summary = read_json(root / "summary.json")
    assert summary["kind"] == "abh.run.summary" and summary["verdict"] == "regressed"
    assert summary["accuracy"] == {"a": got["arms"]["a"]["accuracy"], "b": got["arms"]["b"]["accuracy"]}
    assert summary["exit_code"] == 0 and summary["repeats"] == 1
    assert got["command"][:2] == ["abh", "ab"] and sa.url in got["command"]

    # a finished run recomputes without sending anything, and the same URLs swapped are refused
    before = _received(sa), _received(sb)
    code, _, err = ab_here(capsys, sa.url, sb.url, root, "--fail-on", "any-difference", "--assume-no-launch-shift")
    assert code == exitcodes.GATE_FAILED, err
    assert read_json(root / "comparison.json")["assumptions"] == ["no_launch_shift"]
    assert (_received(sa), _received(sb)) == before
    code, _, err = ab_here(capsys, sb.url, sa.url, root)
    assert code == exitcodes.BAD_CONFIG
    assert "swapped" in err and len(err.strip().splitlines()) == 1
    code, _, err = ab_here(capsys, sa.url, sb.url, root, "--num-questions", "50")  # kept evals are of 100
    assert code == exitcodes.BAD_CONFIG and "holds a run of a different config (changed: task.num_questions)" in err
    assert "Use another --out, or delete it" in err and "hydra.run.dir" not in err  # abh ab's own option
    assert (_received(sa), _received(sb)) == before


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_repeats_interleave_names_gate_and_resume(servers, tmp_path, capsys):
    sa, sb = servers
    root = tmp_path / "run"
    code, out, err = ab_here(capsys, sa.url, sb.url, root, "--repeats", "2", "--names", "base,fix", "--fail-on",
                             "regressed")
    # repeats on one launch per arm: about the two instances only, so the gate does not act and says why
    assert code == exitcodes.OK, err
    [why] = [ln for ln in err.splitlines() if "--fail-on regressed not applied to verdict regressed" in ln]
    assert "two server instances only" in why and "--assume-no-launch-shift" in why and "--aa URL_A2" in why
    assert out.strip().splitlines()[-1].startswith("[SIMULATED] [instances only] REGRESSED ")
    # each eval's line (its result: the line that announces it is a detail, for --verbose and run.log)
    order = [ln.split()[2] for ln in err.splitlines() if ln.startswith("[abh] [") and ": accuracy " in ln]
    assert order == ["evals/a/r1", "evals/b/r1", "evals/a/r2", "evals/b/r2"]
    # servers abh did not start are checked, not launched
    assert "checking the server of arm a (external)" in err and "launching arm" not in err
    c = read_json(root / "comparison.json")
    assert c["arm_names"] == {"a": "base", "b": "fix"}
    assert c["arms"]["a"]["n_runs"] == 2 == c["arms"]["b"]["n_runs"] and c["verdict"] == "regressed"
    assert [Path(d).relative_to(root).as_posix() for d in c["arms"]["b"]["dirs"]] == ["evals/b/r1", "evals/b/r2"]
    assert read_json(root / "summary.json")["exit_code"] == exitcodes.OK
    assert read_json(root / "summary.json")["arms"] == {"a": "base", "b": "fix"}
    assert "fix vs base" in (root / "report.html").read_text()
    md = (root / "comparison.md").read_text()
    assert {row["arm"]: row["name"] for row in parse_table(md, "arm")} == {"A": "base", "B": "fix"}
    assert md.startswith("> **[SIMULATED] [instances only] REGRESSED ")  # the headline first, then the title
    assert md.split("\n\n")[1] == "### [SIMULATED] abh: fix (B) vs base (A) — ab"
    for rel in ("evals/a/r2", "evals/b/r2"):
        meta = read_json(root / rel / "eval.json")
        assert meta["repeat"] == 2 and meta["arm"] == meta["role"]

    # resume: B r2 lost its summary and 60 answers; everything else is kept as it is
    samples = root / "evals/b/r2/samples.jsonl"
    samples.write_text("".join(ln + "\n" for ln in samples.read_text().splitlines()[:40]))
    (root / "evals/b/r2/summary.json").unlink()
    kept = {p: p.stat().st_mtime_ns for p in root.glob("evals/a/*/*")}
    before = _received(sa), _received(sb)
    code, _, err = ab_here(capsys, sa.url, sb.url, root, "--repeats", "2", "--names", "base,fix", "--fail-on",
                           "regressed", "--assume-no-launch-shift")  # the assumption stated: the gate acts
    assert code == exitcodes.GATE_FAILED, err
    assert "verdict regressed fails --fail-on regressed (exit 7)" in err
    assert "[assumes no launch shift] REGRESSED" in (root / "comparison.md").read_text()
    assert err.count("already complete, kept") == 3
    assert {p: p.stat().st_mtime_ns for p in root.glob("evals/a/*/*")} == kept
    assert _received(sa) == before[0]
    assert _received(sb) - before[1] == 60 + 1  # the 60 missing questions and one warm-up request
    rows = read_jsonl(samples)
    assert sorted(x["index"] for x in rows) == list(range(100))
    assert read_json(root / "evals/b/r2/eval.json")["resumes"] == 1


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_the_gate_passes_when_b_is_better(servers, tmp_path, capsys):
    sa, sb = servers
    code, _, err = ab_here(capsys, sb.url, sa.url, tmp_path / "run", "--fail-on", "regressed")
    assert code == 0, err
    assert read_json(tmp_path / "run" / "comparison.json")["verdict"] == "improved"


def test_an_unreachable_server_is_one_line_and_exit_4(servers, tmp_path, capsys):
    sa, _ = servers
    dead = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    code, out, err = ab_here(capsys, sa.url, dead, tmp_path / "run")
    assert code == exitcodes.SERVER_FAILURE and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith(f"abh ab: server B at {dead} is not reachable: ") and "refused" in line
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "run").exists()  # checked before anything is sent or written


@pytest.mark.parametrize("args", [("not-a-url", "http://127.0.0.1:1"), ("http://127.0.0.1:1", "ftp://host/x"),
                                  ("http://127.0.0.1:99999", "http://127.0.0.1:1")])
def test_a_url_that_is_not_a_url_is_exit_2(tmp_path, capsys, args):
    code, _, err = ab_here(capsys, *args, tmp_path / "run")
    assert code == exitcodes.BAD_CONFIG
    assert len(err.strip().splitlines()) == 1 and err.startswith("abh ab: error: URL_")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("extra", [("--names", "base"), ("--names", "x,x"), ("--repeats", "0")])
def test_bad_options_are_exit_2(tmp_path, capsys, extra):
    code, _, err = ab_here(capsys, "http://127.0.0.1:1", "http://127.0.0.1:2", tmp_path / "run", *extra)
    assert code == exitcodes.BAD_CONFIG and extra[0] in err
    assert not (tmp_path / "run").exists()


def test_out_that_is_a_file_is_exit_2(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    code, _, err = ab_here(capsys, "http://127.0.0.1:1", "http://127.0.0.1:2", tmp_path / "f")
    assert code == exitcodes.BAD_CONFIG and "not a directory" in err
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_server_that_dies_mid_eval_is_exit_4_and_resumable(servers, sim_server, tmp_path, capsys,
                                                             quick_backoff):
    sa, _ = servers
    dying = sim_server("--accuracy", "0.9", "--run-seed", "5", "--crash-after", "30",
                       "--max-running-requests", "5", "--latency-s", "0.01")
    root = tmp_path / "run"
    code, _, err = ab_here(capsys, sa.url, dying.url, root)
    assert code == exitcodes.SERVER_FAILURE, err
    lines = [ln for ln in err.splitlines() if ln.startswith("[abh] error: server of arm b")]
    assert len(lines) == 1 and f"server of arm b (launch url:{dying.url}) failed during evals/b/r1" in lines[0]
    assert "Traceback" not in err
    assert 0 < len(read_jsonl(root / "evals/b/r1/samples.jsonl")) < 100
    assert not (root / "comparison.json").exists()


@pytest.mark.slow  # the default run: SIGINT mid-eval and its resume through abh eval (test_eval.py), abh ab's resume
# (test_repeats_interleave_names_gate_and_resume)
def test_sigint_mid_eval_exits_130_and_the_rerun_finishes(sim_server, tmp_path, capsys):
    slow = sim_server("--accuracy", "0.9", "--run-seed", "7", "--latency-s", "0.05", "--max-running-requests", "5")
    other = sim_server("--accuracy", "0.9", "--run-seed", "8")
    root = tmp_path / "run"
    cmd = [sys.executable, "-m", "harness.cli.main", "ab", slow.url, other.url, "--out", str(root), "--data",
           str(TEST_JSONL), "--num-questions", N, "--parallel", N, "--no-progress"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    samples = root / "evals/a/r1/samples.jsonl"
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline and not (samples.exists() and len(read_jsonl(samples)) >= 10):
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=PATIENCE_S)
    assert p.returncode == 130, err
    assert "interrupted by SIGINT" in err and "Traceback" not in err
    assert 10 <= len(read_jsonl(samples)) < 100 and not (root / "evals/b").exists()
    code, _, err = ab_here(capsys, slow.url, other.url, root)  # the rerun, in this process
    assert code == 0, err
    assert sorted(x["index"] for x in read_jsonl(samples)) == list(range(100))
    assert json.loads((root / "evals/a/r1/eval.json").read_text())["resumes"] == 1


@pytest.mark.slow
def test_too_many_request_errors_exit_5_and_a_rerun_retries_them(servers, sim_server, tmp_path, capsys,
                                                               quick_backoff):
    sa, _ = servers
    flaky = sim_server("--accuracy", "0.9", "--run-seed", "9", "--error-rate", "0.6")  # 0.6^4: ~13 % fail 4 times
    root = tmp_path / "run"
    code, out, err = ab_here(capsys, sa.url, flaky.url, root)
    assert code == exitcodes.TOO_MANY_ERRORS, err
    errors = read_json(root / "evals/b/r1/summary.json")["errors"]
    assert errors > 2 and read_json(root / "summary.json")["exit_code"] == exitcodes.TOO_MANY_ERRORS
    assert "lost to request errors exceeds --max-error-rate 2 %" in err
    assert out.strip().splitlines()[-1].startswith("[SIMULATED] NOT COMPARABLE: request errors")
    before = _received(sa), _received(flaky)
    code, _, err = ab_here(capsys, sa.url, flaky.url, root, "--max-error-rate", "0.5")
    assert code == 0, err
    assert "evals/a/r1: already complete, kept" in err and "] evals/b/r1 (arm b" in err
    assert _received(sa) == before[0] and _received(flaky) - before[1] >= errors + 1  # the failed ones again


@pytest.mark.slow  # four scoring passes of processes (~10 s of CPU): the slow suite (.ci/run runs it)
@pytest.mark.parametrize("shift, verdict", [("0.3", "diverged"), ("0", "indistinguishable")])
def test_a_second_launch_of_a_gives_the_divergence(sim_server, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   shift: str, verdict: str) -> None:
    """abh ab A B --aa A2: A2 is the A/A control, evaluated like A in the arms' order (A r1, B r1, A2 r1): its
    launch gives the accuracy verdict its launch variance; the reference pass on A, the compared pass on B, the
    floor on A2 after its eval; B's logits shifted by 0.3 diverge beyond the floor, unshifted they do not."""
    a = sim_server("--accuracy", "0.9", "--run-seed", "1")
    a2 = sim_server("--accuracy", "0.9", "--run-seed", "3")
    b = sim_server("--accuracy", "0.9", "--run-seed", "2", "--logit-shift", shift)
    root = tmp_path / "run"
    code, out, err = ab_here(capsys, a.url, b.url, root, "--aa", a2.url)
    assert code == 0, err[-2000:]
    c = read_json(root / "comparison.json")
    order = [ln.split()[2] for ln in err.splitlines() if ln.startswith("[abh] [") and ": accuracy " in ln]
    assert order == ["evals/a/r1", "evals/b/r1", "evals/aa/r1"]
    assert read_json(root / "evals/aa/r1/eval.json")["launch"] == launch_id(a2.url)
    assert [Path(d).relative_to(root).as_posix() for d in c["aa_dirs"]] == ["evals/aa/r1"]
    assert c["instances_only"] is False and c["design"]["unit"] == "launch-aware"
    assert c["launch_variance"]["launches"] == {"a": 1, "aa": 1, "b": 1} and c["launch_variance"]["df_launch"] == 1
    assert "[instances only]" not in out and f"A/A floor, arm a2, launch {launch_id(a2.url)}" in err
    d = c["divergence"]
    assert d["verdict"] == verdict, d.get("verdict_reason")
    assert (d["kld_mean"] > 5 * d["kld_mean_aa"]) is (verdict == "diverged")
    m = read_json(root / "manifest.json")
    assert m["planned_design"]["scoring"]["floor_server"] is True
    assert m["planned_design"]["scoring"]["own_launches"] == 0  # the floor rides on A2's eval
    launches = {k: [lc["id"] for lc in v.get("launches", [])] for k, v in m["arms"].items()}
    assert launches == {"a": [launch_id(a.url)], "b": [launch_id(b.url)], "a2": [launch_id(a2.url)]}
    assert f"outputs {'differ beyond' if verdict == 'diverged' else 'within'} relaunch noise" in (
        out.strip().splitlines()[-1])
    assert 'id="divergence"' in (root / "report.html").read_text()


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_without_a_second_launch_divergence_is_not_measured_and_says_how(servers, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    sa, sb = servers
    root = tmp_path / "run"
    code, out, _ = ab_here(capsys, sa.url, sb.url, root, "--num-questions", "40")
    d = read_json(root / "comparison.json")["divergence"]
    assert d["verdict"] == "not_measured" and "--aa URL_A2" in d["verdict_reason"]
    assert out.strip().splitlines()[-1].endswith("outputs not measured")


@pytest.mark.parametrize("flags,problem", [
    (["--alpha", "0.6"], None),  # the comparison's range, (0, 1), as abh run and abh power take it
    (["--alpha", "1.5"], "--alpha: alpha must be in (0, 1), not 1.5"),
    (["--repeats", "0"], "--repeats must be >= 1, not 0"),  # experiment.repeats' own range
    (["--num-questions", "1"], "--num-questions must be >= 2, not 1"),  # task.num_questions' own range
    (["--margin", "-1", "--hypothesis", "equivalence"], "--margin: the margin must be in (0, 100] pp, not -1"),
])
def test_the_flags_are_checked_by_the_ranges_of_the_keys_they_set(flags, problem):
    a = ab_cli._parser().parse_args(["http://127.0.0.1:1", "http://127.0.0.1:2", "--out", "o", *flags])
    assert ab_cli.flag_problem(a) == problem
