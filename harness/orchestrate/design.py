"""The design a run is about to execute, stated before the first server starts: launches per arm, passes per
launch, whether launch-to-launch noise is sampled, and the expected GPU cost. Reusing a launch is cheaper, but
a launch-wide shift then cannot be told from the change: the harness prints the trade-off rather than pick.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from harness.orchestrate.schedule import PlannedLaunch, Step, plan_launches
from harness.results.schema import Cost


class RolePlan(TypedDict):
    """One role's part of the design: its launches, evals, the most passes one launch serves, and whether the
    launch-to-launch noise is ``sampled``, ``not sampled``, ``partly sampled`` (or a ``single run``)."""

    launches: int
    evals: int
    passes_per_launch: int
    launch_noise: str


class ScoringPlan(TypedDict):
    """The divergence's scoring passes, and the launches they need of their own."""

    passes: int
    own_launches: int
    floor_server: bool


class SequentialSchedule(TypedDict):
    """What a sequential run says of its schedule: the most and fewest repeats, and the expected number without
    an effect (None for a design with a margin)."""

    max_repeats: int
    min_repeats: int
    expected_if_null: float | None


class ExpectedCost(TypedDict):
    gpu_hours: float
    server_s: float


class PlannedDesign(TypedDict):
    """The design of a schedule (:func:`describe`; the manifest's ``planned_design``)."""

    launches: int
    evals: int
    #: by role (``a``, ``b``, ``aa``), for the roles the schedule has
    roles: dict[str, RolePlan]
    scoring: ScoringPlan | None
    concurrent: bool
    #: GPUs per launch, by role
    gpus: dict[str, int]
    sequential: SequentialSchedule | None
    #: None until launch and eval times are known
    expected: ExpectedCost | None


def _role_of(launch: PlannedLaunch) -> str:
    """The role whose cost a launch counts in: ``aa`` only for a launch that serves the A/A control alone
    (a launch for a scoring pass alone counts in the role of that pass)."""
    if not launch.roles:
        return launch.role
    return "aa" if set(launch.roles) == {"aa"} else ("a" if "a" in launch.roles else launch.role)


def describe(items: Sequence[Step], *, concurrent: bool, gpus: Mapping[str, int],
             times: Mapping[str, Mapping[str, float]] | None = None,
             sequential: SequentialSchedule | None = None, floor_server: bool = False) -> PlannedDesign:
    """The design of a schedule: per role (``a``, ``b``, ``aa``) launches, evals, the most passes one launch
    serves, whether launch noise is sampled; GPUs per role (``gpus``: by role); the expected cost when
    ``times`` gives per role ``launch_s``, ``eval_s`` and ``stop_s`` (seconds). ``sequential``: ``max_repeats``,
    ``min_repeats`` and the expected repeats (``expected_if_null``), to say the schedule is a worst case;
    ``floor_server``: the A/A floor's scoring pass has a server of its own (``abh ab --aa``)."""
    launches = plan_launches(items, concurrent)
    roles: dict[str, RolePlan] = {}
    for role in ("a", "b", "aa"):
        mine = [lc for lc in launches if _role_of(lc) == role]
        evals = sum(1 for it in items if it.role == role and it.is_eval)
        if not mine and not evals:
            continue
        served = [lc for lc in launches if role in lc.roles]
        per = max((lc.roles.count(role) for lc in served), default=0)
        roles[role] = {"launches": len(mine), "evals": evals,
                       "passes_per_launch": max((lc.passes for lc in mine), default=0),
                       "launch_noise": ("single run" if evals <= 1 else "sampled" if per == 1 else
                                        "not sampled" if len(served) == 1 else "partly sampled")}
    passes = [it for it in items if not it.is_eval]
    scoring: ScoringPlan = {"passes": len(passes),
                            "own_launches": sum(1 for lc in launches if lc.scoring and not lc.roles),
                            "floor_server": floor_server}
    out: PlannedDesign = {"launches": len(launches), "evals": len(items) - len(passes), "roles": roles,
                          "scoring": scoring if passes else None,
                          "concurrent": concurrent, "gpus": dict(gpus),
                          "sequential": sequential.copy() if sequential else None, "expected": None}
    if times:
        gh = wall = 0.0
        for lc in launches:
            role = _role_of(lc)
            t = times.get(role) or times.get("a") or {}
            secs = (float(t.get("launch_s", 0.0)) + lc.passes * float(t.get("eval_s", 0.0))
                    + lc.scoring * float(t.get("scoring_s", 0.0)) + float(t.get("stop_s", 0.0)))
            gh += secs * int(gpus.get(role, gpus.get("a", 0))) / 3600
            wall += secs
        out["expected"] = {"gpu_hours": gh, "server_s": wall}
    return out


def _hours(s: float) -> str:
    return f"{s / 3600:.2f} h" if s >= 3600 else f"{s / 60:.1f} min"


def format_design(d: PlannedDesign, repeats: int, restart_per_repeat: bool, can_restart: bool = True) -> list[str]:
    """The lines printed before the run starts. ``can_restart``: abh starts the servers (not ``abh ab``'s)."""
    names = {"a": "A", "b": "B", "aa": "A/A control"}
    seq = d.get("sequential")
    null = f"; about {seq['expected_if_null']:.1f} expected without an effect" if seq and seq.get(
        "expected_if_null") is not None else ""
    head = (f"design: sequential, at most {seq['max_repeats']} repeats per arm (first look after repeat "
            f"{seq['min_repeats']}{null}); the schedule below is the worst case" if seq else
            f"design: {repeats} repeat(s) per arm")
    lines = [head + (", both arms' servers up at once" if d.get("concurrent") else ", one server at a time")
             + f": {d['launches']} server launch(es)" + (", scoring passes included" if d.get("scoring") else "")]
    for role, r in d["roles"].items():
        g = d["gpus"].get(role, d["gpus"].get("a", 0))
        lines.append(f"  {names[role]:<12} {r['launches']} launch(es), {r['evals']} eval(s), up to "
                     f"{r['passes_per_launch']} pass(es) per launch, {g} GPU(s) per launch; launch-to-launch "
                     f"noise {r['launch_noise']}")
    shared = [names[k] for k, r in d["roles"].items() if k in ("a", "b") and r["launch_noise"] != "sampled"
              and r["evals"] > 1]
    if shared:
        who = " and ".join(shared) + (" each reuse" if len(shared) > 1 else " reuses")
        lines.append(f"  trade-off: {who} one launch for several repeats: cheaper (no launch "
                     "per repeat), but a launch-wide shift (autotuning, memory layout) cannot be told from the change; "
                     + ("experiment.restart_per_repeat=true samples it at one launch per repeat" if can_restart else
                        "abh cannot restart servers it did not start: to sample it, "
                        + ("" if "aa" in d["roles"] else "give a second launch of A (abh ab --aa URL_A2), or ")
                        + "restart both servers between repeats, `abh eval` each launch and `abh compare` the evals"))
    elif seq:
        lines.append("  each repeat of both arms is a fresh launch: the sequential design needs independent repeats"
                     + ("" if restart_per_repeat else " (experiment.restart_per_repeat=false does not apply to a "
                                                      "sequential run)"))
    elif restart_per_repeat:
        lines.append("  each repeat is a fresh launch (experiment.restart_per_repeat=true): launch noise is sampled, "
                     "at one launch per repeat")
    sc = d.get("scoring")
    if sc:
        own = sc["own_launches"]
        if sc.get("floor_server"):
            own_txt = ", the A/A floor on the server given for it"
        elif own:
            own_txt = (f", and {own} launch(es) of their own for the floor (no later fresh launch of the reference "
                       "arm: an A/A control on a fresh launch would save it)")
        else:
            own_txt = ": no launch of their own"
        lines.append(f"  scoring: {sc['passes']} pass(es) for the divergence (reference, compared, A/A floor) on the "
                     "evals' launches" + own_txt)
    exp = d.get("expected")
    if exp:
        txt = f"  expected cost: {exp['gpu_hours']:.2f} GPU-hours, servers up {_hours(exp['server_s'])}"
        if seq and seq.get("expected_if_null") is not None:
            txt += (f" at worst ({seq['max_repeats']} repeats); about {seq['expected_if_null']:.1f} repeats are "
                    "expected without an effect, fewer with a clear one")
        lines.append(txt + " (launch and eval times of this run's earlier launches)")
    else:
        lines.append("  expected cost: unknown until a launch and an eval have been timed (abh power --from RUN_DIR "
                     "plans from a finished run)")
    return lines


def times_from_cost(cost: Cost) -> dict[str, dict[str, float]] | None:
    """Per role mean launch, eval and stop seconds from a run's cost (harness.analysis.cost), None when nothing
    was timed. A role with no launch of its own borrows arm A's times."""
    out: dict[str, dict[str, float]] = {}
    for role, c in (("a", cost.a), ("b", cost.b), ("aa", cost.aa)):
        if c is None or not c.launches or not c.evals:
            continue
        launch_s, eval_s = c.launch_s / c.launches, c.eval_s / c.evals
        stop_s = max(0.0, c.server_s - c.launch_s - c.eval_s - c.scoring_s) / c.launches
        scoring_s = c.scoring_s / c.scoring_passes if c.scoring_passes else 0.0
        out[role] = {"launch_s": launch_s, "eval_s": eval_s, "stop_s": stop_s, "scoring_s": scoring_s}
    if "a" in out and "b" not in out:
        out["b"] = out["a"]
    return out or None
