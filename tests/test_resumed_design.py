"""A resumed run whose design changes says how and why, in the plan and in the result (the whole run: the slow
test_interrupt_in_the_first_arm_then_resume_to_completion)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from helpers.runs import SMALL, abh_run_here, interrupt_run

from harness.orchestrate.resumed_design import plan_lines, result_warning
from harness.results.fileio import read_json


def _plan(a: int, b: int) -> Any:
    role = {"evals": 2, "passes_per_launch": 2, "launch_noise": "not sampled"}
    return {"launches": a + b, "evals": 4, "roles": {"a": {**role, "launches": a}, "b": {**role, "launches": b}},
            "scoring": None, "concurrent": True, "gpus": {}, "sequential": None, "expected": None}


EVALS = {"evals/a/r1": {"role": "a", "launches": ["a-1"], "status": "complete"},
         "evals/b/r1": {"role": "b", "launches": ["b-1"], "status": "complete"}}


def test_the_plan_of_a_resumed_run_says_its_design_changes() -> None:
    """Ctrl-C after each arm's first eval on one launch: the rest needs new launches, 1 -> 2 per arm."""
    [line] = plan_lines(_plan(1, 1), EVALS, pending={"a", "b"})
    assert "launches per arm A 1 -> 2, B 1 -> 2" in line and "does not outlive its session" in line
    assert "detectable effect" in line


def test_nothing_is_said_when_the_design_holds() -> None:
    assert plan_lines(None, EVALS, {"a"}) == []  # the first session
    assert plan_lines(_plan(1, 1), {}, {"a", "b"}) == []  # nothing ran yet
    assert plan_lines(_plan(2, 2), EVALS, {"a", "b"}) == []  # planned a launch per repeat already
    assert plan_lines(_plan(1, 1), EVALS, set()) == []  # nothing left to run
    cut = {"evals/a/r1": {"role": "a", "launches": ["a-1"], "status": "interrupted"}}
    assert plan_lines(_plan(1, 1), cut, {"a"}) == []  # an eval cut short counts on the launch that finishes it
    assert result_warning(_plan(1, 1), {"a": 1, "b": 1}, sessions=2) is None
    given = {"evals/b/r1": {"role": "b", "launches": ["url:http://127.0.0.1:30000"], "status": "errors"}}
    assert plan_lines(_plan(1, 1), given, {"b"}) == []  # a server abh was given: the same URL, the same launch
    assert result_warning(_plan(1, 1), {"a": 2, "b": 2}, sessions=1) is None


def test_the_result_says_the_design_that_ran() -> None:
    w = result_warning(_plan(1, 1), {"a": 2, "b": 1}, sessions=2)
    assert w is not None and "launches per arm A 1 -> 2" in w and "B" not in w.split("(")[0]


@pytest.mark.slow  # two sessions of a run with its servers
def test_ctrl_c_then_rerun_says_the_design_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Repeats on one launch per arm, Ctrl-C after each arm's first eval, rerun: the plan says A and B go from one
    launch to two and why, the result says the design that ran, and comparison.json's design is that design."""
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", *SMALL, "experiment.aa_control=false", "experiment.repeats=2",
            "experiment.concurrent_servers=true", "engine.latency_s=0.05", "engine.max_running_requests=8"]
    def first_repeat_done() -> bool:
        m = run_dir / "manifest.json"
        evals = read_json(m).get("evals", {}) if m.exists() else {}
        return all(evals.get(f"evals/{r}/r1", {}).get("status") == "complete" for r in ("a", "b"))

    res = interrupt_run(args, tmp_path, when=first_repeat_done, sig=signal.SIGINT)
    assert res.returncode == 130, res.stderr[-2000:]
    assert abh_run_here(*args) == 0
    err = capsys.readouterr().err
    assert "resumed: the design changes, launches per arm A 1 -> 2, B 1 -> 2" in err
    c = read_json(run_dir / "comparison.json")
    assert c["design"]["launches"] == {"a": 2, "b": 2}
    assert any("the design changed when the run was resumed: launches per arm A 1 -> 2, B 1 -> 2" in w
               for w in c["warnings"])
