"""A resumed run whose design changes says how and why, in the plan and in the result (the whole run: the slow
test_interrupt_in_the_first_arm_then_resume_to_completion)."""

from __future__ import annotations

from typing import Any

from harness.orchestrate.resumed_design import plan_lines, result_warning


def _plan(a: int, b: int) -> Any:
    role = {"evals": 2, "passes_per_launch": 2, "launch_noise": "not sampled"}
    return {"launches": a + b, "evals": 4, "roles": {"a": {**role, "launches": a}, "b": {**role, "launches": b}},
            "scoring": None, "concurrent": True, "gpus": {}, "sequential": None, "expected": None}


EVALS = {"evals/a/r1": {"role": "a", "launches": ["a-1"]}, "evals/b/r1": {"role": "b", "launches": ["b-1"]}}


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
    assert result_warning(_plan(1, 1), {"a": 1, "b": 1}, sessions=2) is None
    assert result_warning(_plan(1, 1), {"a": 2, "b": 2}, sessions=1) is None


def test_the_result_says_the_design_that_ran() -> None:
    w = result_warning(_plan(1, 1), {"a": 2, "b": 1}, sessions=2)
    assert w is not None and "launches per arm A 1 -> 2" in w and "B" not in w.split("(")[0]
