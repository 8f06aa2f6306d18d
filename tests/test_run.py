"""`abh run` end to end on the simulated engine: the demo, resume after interruption, sweeps, submitit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import pid_alive

from harness import exitcodes
from harness.fileio import read_json, read_jsonl


def abh_run(*args: str, cwd: Path, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", "run", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout, env={**os.environ, **(env or {})})


def _server_pids(run_dir: Path) -> list[int]:
    m = read_json(run_dir / "manifest.json")
    pids = []
    for arm in m["arms"].values():
        for inst in arm.get("instances", []):
            pid = (inst.get("probe") or {}).get("pid")
            if pid:
                pids.append(int(pid))
    return pids


def test_demo_end_to_end(tmp_path):
    run_dir = tmp_path / "demo"
    t0 = time.monotonic()
    r = abh_run(f"hydra.run.dir={run_dir}", "progress=false", cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert "SIMULATED" in r.stdout and "VERDICT:" in r.stdout
    summary = read_json(run_dir / "summary.json")
    assert summary["simulated"] is True
    assert summary["verdict"] in {"improved", "regressed", "equivalent", "inconclusive"}
    assert summary["exit_code"] == 0
    comparison = read_json(run_dir / "comparison.json")
    assert comparison["n"] == 1319 and comparison["arms"]["a"]["n_runs"] == 2
    assert comparison["psi_aa"] is not None and comparison["psi_aa"] > 0
    assert comparison["both"] + comparison["a_only"] + comparison["b_only"] + comparison["neither"] == 1319
    manifest = read_json(run_dir / "manifest.json")
    assert set(manifest["evals"]) == {"evals/a/r1", "evals/b/r1", "evals/a/r2", "evals/b/r2", "evals/aa/r1",
                                      "evals/aa/r2"}
    for rel, ev in manifest["evals"].items():
        assert ev["status"] == "complete"
        rows = read_jsonl(run_dir / rel / "samples.jsonl")
        assert sorted(x["index"] for x in rows) == list(range(1319)), rel
    assert manifest["provenance"]["harness_version"]
    assert manifest["dataset"]["sha256"] and manifest["config"]["experiment"]["name"] == "demo"
    for key in ("a", "b"):
        arm = manifest["arms"][key]
        assert arm["launch"]["argv"] and all(c["passed"] for c in arm["live_checks"])
    # the order was interleaved: a r1 before b r1 before a r2
    for pid in _server_pids(run_dir):
        assert not pid_alive(pid)
    assert (run_dir / "report.html").exists()
    print(f"demo took {elapsed:.1f} s")


def test_interrupt_and_resume_to_completion(tmp_path):
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", "progress=false", "experiment.aa_control=false", "engine.latency_s=0.02",
            "engine.max_running_requests=64"]
    cmd = [sys.executable, "-m", "harness.cli", "run", *args]
    p = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    target = run_dir / "evals" / "b" / "r1" / "samples.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if target.exists() and len(read_jsonl(target)) > 100:
            break
        time.sleep(0.05)
    pids = _server_pids(run_dir)
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "resume" in err
    for pid in pids:
        assert not pid_alive(pid), "server outlived the harness"
    partial = len(read_jsonl(target))
    assert 0 < partial < 1319
    r = abh_run(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = read_json(run_dir / "manifest.json")
    assert len(manifest["sessions"]) == 2 and manifest["sessions"][1]["resume"] is True
    assert manifest["evals"]["evals/b/r1"].get("resumed_on")
    for rel in ("evals/a/r1", "evals/b/r1", "evals/a/r2", "evals/b/r2"):
        rows = read_jsonl(run_dir / rel / "samples.jsonl")
        assert sorted(x["index"] for x in rows) == list(range(1319)), rel
    assert read_json(run_dir / "summary.json")["verdict"]


def test_failed_side_assertion_stops_before_measuring(tmp_path):
    run_dir = tmp_path / "run"
    r = abh_run(f"hydra.run.dir={run_dir}", "progress=false", "arms.b.engine.build=baseline", cwd=tmp_path)
    assert r.returncode == exitcodes.SIDE_ASSERTION_FAILED, r.stderr[-2000:]
    assert ("side assertion failed for arm 'b': check 'server reports the fix build' (http: GET /get_server_info "
            "-> build): expected 'fix'; found 'baseline'") in r.stderr  # the message of checks.result.assert_checks
    assert not (run_dir / "evals" / "b").exists()
    for pid in _server_pids(run_dir):
        assert not pid_alive(pid)


def test_server_death_mid_run_marks_the_arm_failed(tmp_path):
    run_dir = tmp_path / "run"
    r = abh_run(f"hydra.run.dir={run_dir}", "progress=false", "+arms.a.engine.crash_after=300",
                "experiment.aa_control=false", "experiment.repeats=1", cwd=tmp_path)
    assert r.returncode == exitcodes.SERVER_FAILURE, r.stderr[-2000:]
    m = read_json(run_dir / "manifest.json")
    assert m["evals"]["evals/a/r1"]["status"] == "failed"
    kept = read_jsonl(run_dir / "evals" / "a" / "r1" / "samples.jsonl")
    assert 0 < len(kept) < 1319 and all(x["error"] is None for x in kept)


def test_sweep_2x2_with_multirun(tmp_path):
    r = abh_run("-m", "experiment.aa_control=false", "experiment.repeats=1", "task.num_questions=200",
                "client.parallel=200", "progress=false", "engine.flip_rate=0.01,0.05",
                "arms.b.engine.accuracy=0.93,0.97", "+engine.env.HF_TOKEN=hf_sweepleak",
                f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    for f in (tmp_path / "sweep").rglob("*"):
        assert "hf_sweepleak" not in str(f)
        if f.is_file() and f.suffix in (".json", ".jsonl", ".html", ".yaml", ".log"):
            assert "hf_sweepleak" not in f.read_text(errors="replace"), f
    s = read_json(tmp_path / "sweep" / "sweep_summary.json")
    assert len(s["comparisons"]) == 4 and s["correction"] == "holm"
    assert all(c["p_adjusted"] >= c["p"] - 1e-12 for c in s["comparisons"])
    assert "p adjusted across 4 comparisons" in r.stdout


def test_job_through_the_submitit_local_launcher(tmp_path):
    r = abh_run("-m", "hydra/launcher=local", "experiment.aa_control=false", "experiment.repeats=1",
                "task.num_questions=100", "client.parallel=100", "progress=false", "engine.flip_rate=0.02",
                f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path, timeout=400)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = list((tmp_path / "sweep").glob("*/comparison.json"))
    assert len(jobs) == 1
    assert list((tmp_path / "sweep" / ".submitit").glob("*/*_result.pkl"))
    s = read_json(tmp_path / "sweep" / "sweep_summary.json")
    assert s["comparisons"][0]["verdict"]
    json.dumps(s)


def test_dry_run_of_the_seed_experiment_prints_every_env_var_and_flag(tmp_path):
    from helpers.sglang_repo import make_sglang_repo
    from test_engines_cmdline import SEED, parse_seed_command

    env, flags = parse_seed_command(SEED.read_text())
    repo = make_sglang_repo(tmp_path / "sglang")  # the arms are git refs of an SGLang repository
    r = abh_run("experiment=dsv4_pro_mi355x_shared_slot", "dry_run=true", f"hydra.run.dir={tmp_path}/dry",
                f"arms.a.source.ref={repo.base}", f"arms.b.source.ref={repo.fix}", cwd=tmp_path,
                env={"SGLANG_REPO": str(repo.path)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    for arm in ("arm a: baseline", "arm b: fix"):
        assert arm in out
    lines = [ln.strip().rstrip("\\").strip() for ln in out.splitlines()]
    for k, v in env.items():
        assert lines.count(f"{k}={v}") == 2, k  # once per arm, as NAME=value
    i = 0
    pairs = []
    while i < len(flags):
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            pairs.append(f"{flags[i]} {flags[i + 1]}")
            i += 2
        else:
            pairs.append(flags[i])
            i += 1
    for p in pairs:
        assert lines.count(p) == 2, p  # once per arm, as --flag value
    assert "-m sglang.launch_server" in out
    assert "dry run: no server started" in out
    assert not list((tmp_path / "dry").glob("evals/*"))


def test_resume_after_interrupt_in_the_first_arm(tmp_path):
    """Only arm A's server has run (and left a fingerprint): the rerun must not see the arms as different."""
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", "progress=false", "experiment.aa_control=false", "experiment.repeats=1",
            "experiment.concurrent_servers=false", "engine.latency_s=0.02", "engine.max_running_requests=64"]
    p = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", *args], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    target = run_dir / "evals" / "a" / "r1" / "samples.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (target.exists() and len(read_jsonl(target)) > 50):
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == exitcodes.INTERRUPTED, err[-2000:]
    r = abh_run(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    m = read_json(run_dir / "manifest.json")
    assert m["arm_diff_live"]["disallowed"] == []
    assert m["sessions"][1]["resume"] is True


def test_rerun_with_a_changed_config_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    base = [f"hydra.run.dir={run_dir}", "progress=false", "experiment.aa_control=false", "experiment.repeats=1",
            "task.num_questions=50", "client.parallel=50"]
    assert abh_run(*base, cwd=tmp_path).returncode == 0
    r = abh_run(*base, "engine.flip_rate=0.2", cwd=tmp_path)
    assert r.returncode == exitcodes.BAD_CONFIG
    assert "holds a run of a different config (changed: engine.flip_rate)" in r.stderr
    assert read_json(run_dir / "manifest.json")["config"]["engine"]["flip_rate"] == 0.02
    # statistics settings may change: they are recomputed from the stored answers
    r = abh_run(*base, "stats.margin_pp=2.0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert read_json(run_dir / "comparison.json")["margin"] == 0.02


def test_arms_differing_in_something_not_allowed_are_stopped_before_measuring(tmp_path):
    run_dir = tmp_path / "run"
    r = abh_run(f"hydra.run.dir={run_dir}", "progress=false", "experiment.aa_control=false", "experiment.repeats=1",
                "task.num_questions=30", "client.parallel=30", "+arms.b.env.PYTHONHASHSEED=7", cwd=tmp_path)
    assert r.returncode == exitcodes.ARMS_DIFFER, r.stderr[-2000:]
    assert "env.PYTHONHASHSEED" in r.stderr
    assert not (run_dir / "evals").exists()


def test_a_secret_flag_on_a_failing_server_leaks_nowhere(tmp_path):
    run_dir = tmp_path / "run"
    r = abh_run(f"hydra.run.dir={run_dir}", "progress=false", "experiment.aa_control=false",
                "experiment.repeats=1", "+engine.args=[--api-key,sk-LEAKME42]", cwd=tmp_path)
    assert r.returncode == exitcodes.SERVER_FAILURE, r.stderr[-2000:]  # the simulator rejects the flag
    assert "sk-LEAKME42" not in r.stdout + r.stderr
    assert "last lines of its log" in r.stderr or "log" in r.stderr
    for f in run_dir.rglob("*"):
        if f.is_file():
            assert "sk-LEAKME42" not in f.read_text(errors="replace"), f
    assert read_json(run_dir / "summary.json")["verdict"] == "not_comparable"
