"""A resumed run whose design changes, said in the plan and in the result: a server does not outlive its
session, so an arm planned on one launch ends up on two, and the verdict (launches its unit) is that of the
design that ran.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.orchestrate.design import PlannedDesign

NAMES = {"a": "A", "b": "B"}
WHY = "a server does not outlive its session, so the evals run after the interruption are on a new launch"
#: the launch id of a server abh was given, not one it launched (``serving.settings.url_identity``): the same URL
#: in the resuming session is the same launch
GIVEN = "url:"


def launches_used(evals: Mapping[str, Any], role: str) -> set[str]:
    """The launches the finished evals of ``role`` count on (an eval cut short counts on the launch that finishes
    it, as its stored record says)."""
    return {str(ev["launches"][-1]) for ev in evals.values() if isinstance(ev, dict) and ev.get("role") == role
            and ev.get("status") in ("complete", "errors") and ev.get("launches")}


def plan_lines(first: PlannedDesign | None, evals: Mapping[str, Any], pending: Iterable[str]) -> list[str]:
    """The plan's words for a resumed run whose arms will span more launches than ``first`` (the first session's
    plan) planned; ``pending``: the roles with an eval still to run or to finish."""
    if first is None:
        return []
    todo, grew = set(pending), []
    for role, name in NAMES.items():
        plan, ids = first["roles"].get(role), launches_used(evals, role)
        if plan is None or role not in todo or all(x.startswith(GIVEN) for x in ids):
            continue  # nothing ran yet, nothing to run, or servers abh was given (one launch per URL)
        if len(ids) + 1 > plan["launches"]:
            grew.append(f"{name} {plan['launches']} -> {len(ids) + 1}")
    if not grew:
        return []
    return [f"  resumed: the design changes, launches per arm {', '.join(grew)}: {WHY}; the verdict takes launches "
            "as its unit, so its interval and detectable effect will be those of the design that ran"]


def result_warning(first: PlannedDesign | None, ran: Mapping[str, int], sessions: int) -> str | None:
    """The result's words when the design that ran has more launches per arm than the first plan had."""
    if first is None or sessions < 2:
        return None
    grew = [f"{name} {first['roles'][role]['launches']} -> {ran.get(role, 0)}" for role, name in NAMES.items()
            if role in first["roles"] and ran.get(role, 0) > first["roles"][role]["launches"]]
    if not grew:
        return None
    return (f"the design changed when the run was resumed: launches per arm {', '.join(grew)} ({WHY}); the interval "
            "and the detectable effect are those of the design that ran")
