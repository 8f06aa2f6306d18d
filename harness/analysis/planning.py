"""The plan behind ``abh power``: repeats and GPU-hours to detect an effect with the fixed design and the
sequential one, from a finished run or from numbers; the JSON (kind ``abh.plan``) is in fractions. The model
and its calibration: docs/statistics.md, "GPU-hours to a verdict".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from harness import stats
from harness.analysis.cost import cost_from_manifest, gpu_hours
from harness.analysis.launch_ids import LaunchesUnknown, launch_ids
from harness.results import schema
from harness.results.eval_store import ScoredEval, load_scored
from harness.results.fileio import StoreError, read_json
from harness.stats import group_sequential as sq
from harness.stats import launchvar
from harness.stats.verdict import ALPHA

KIND = schema.PLAN
SCHEMA_VERSION = schema.WRITES[KIND]
#: sequential designs are searched up to this many repeats per arm
MAX_SEQUENTIAL_REPEATS = 200


class PlanError(ValueError):
    """The run cannot be planned from (missing files, no discordance) or an option is nonsense."""


# ------------------------------------------------------------------------------------------ the documents
class PowerFigures(TypedDict):
    """:func:`power_figures`: the MDEs of a design and what detecting ``effect`` needs (fractions)."""

    n: int
    p: float
    alpha: float
    power: float
    discordance: float | None
    repeats: int | None
    effect: float | None
    effect_pp: float | None
    mde_unpaired: float
    mde_paired: float | None
    mde_repeats: float | None
    repeats_needed: int | None
    n_needed_paired: int | None
    mde: float


class SequentialPlanDesign(TypedDict):
    spending: str
    min_repeats: int
    max_repeats: int
    futility: bool
    futility_power: float
    futility_from: float
    alpha: float
    bounds: list[float]
    futility_z: list[float]


class SequentialRepeats(TypedDict):
    """Repeats per arm of a sequential design: expected under the effect, under no effect, at worst."""

    expected: float
    expected_if_null: float
    worst: int


class SequentialHours(TypedDict):
    """GPU-hours (or wall hours) of :class:`SequentialRepeats` (None: the cost of a repeat is unknown)."""

    expected: float | None
    expected_if_null: float | None
    worst: float | None


class SequentialPlan(TypedDict):
    """``sequential`` of a plan: the design found, its power and false positive rate, its repeats and their
    cost (the cost added by :func:`make_plan`)."""

    design: SequentialPlanDesign
    power: float
    false_positive_rate: float
    repeats: SequentialRepeats
    gpu_hours: NotRequired[SequentialHours]
    wall_hours: NotRequired[SequentialHours]


class FixedPlan(TypedDict):
    repeats: int
    power: float
    gpu_hours: float | None
    wall_hours: float | None
    gpu_hours_one_launch_per_arm: float | None


#: ``repeats`` and ``gpu_hours`` of a plan: ``fixed``, ``sequential_expected``,
#: ``sequential_expected_if_null``, ``sequential_worst``
PlanFigures = dict[str, float | None]


class PerRepeatCost(TypedDict):
    """One repeat (a launch and an eval of each arm, then its stop): per-arm seconds and GPUs, GPU-hours, wall
    seconds, and where the figures came from."""

    launch_s: dict[str, float]
    eval_s: dict[str, float]
    stop_s: dict[str, float]
    gpus: dict[str, int]
    gpu_hours: float
    wall_s: float
    source: str


class NoiseEstimate(TypedDict):
    """σ² of the plan and where it came from (:func:`noise_from_runs`); ``notes`` go to the plan's notes."""

    sigma2: float
    source: str
    psi_within: dict[str, float | None]
    psi_between: float | None
    fresh_launch_pairs: int
    same_launch_pairs: int
    notes: NotRequired[list[str]]


class LaunchPlan(TypedDict):
    """``launch`` of a plan: the launch-to-launch variance the plan assumes and the verdict's reference it
    plans with (:func:`design_power`)."""

    #: sd of a launch's accuracy shift (fraction) and its square; where it came from
    sd: float
    sigma2: float
    source: str
    #: σ²_e / n: a launch accuracy's within-launch noise
    noise_per_launch: float
    #: the question x arm term the effect itself adds (it sits on whole questions)
    heterogeneity: float
    aa_launches: int
    reference: str
    power_by_launches: list[dict[str, float]]


class PlanScoring(TypedDict):
    """The divergence's scoring passes of the run planned from: once per run, on the evals' launches."""

    passes: int
    wall_s: float
    gpu_hours: float | None
    note: str


class Plan(TypedDict):
    """The plan (``abh power --json``, kind ``abh.plan``); ``source`` to ``scoring``: a plan from a run."""

    schema_version: int
    kind: str
    effect_pp: float
    effect: float
    alpha: float
    power: float
    n: int
    fixed: FixedPlan
    sequential: SequentialPlan | None
    repeats: PlanFigures
    gpu_hours: PlanFigures
    per_repeat: PerRepeatCost | None
    notes: list[str]
    source: NotRequired[str]
    simulated: NotRequired[bool]
    accuracy: NotRequired[dict[str, float | None]]
    noise: NotRequired[NoiseEstimate]
    scoring: NotRequired[PlanScoring | None]
    launch: NotRequired[LaunchPlan]


# ------------------------------------------------------------------------------------------ figures
def power_figures(n: int, p: float, discordance: float | None = None, repeats: int | None = None,
                  effect: float | None = None, alpha: float = ALPHA, power: float = 0.8) -> PowerFigures:
    """MDEs for n questions at accuracy p, and the repeats / questions needed for ``effect`` (fractions)."""
    mde_unpaired = stats.mde_unpaired(n, p, alpha, power)
    mde_paired = mde_repeats = None
    needed = n_paired = None
    if discordance is not None:
        mde_paired = stats.mde_paired(n, discordance, alpha, power)
        if repeats is not None:
            mde_repeats = stats.mde_repeats(n, discordance, repeats, alpha, power)
        if effect is not None:
            needed = stats.repeats_needed(effect, n, discordance, alpha, power)
            n_paired = stats.n_needed_paired(effect, discordance, alpha, power)
    mde = next(v for v in (mde_repeats, mde_paired, mde_unpaired) if v is not None)
    return {"n": n, "p": p, "alpha": alpha, "power": power, "discordance": discordance, "repeats": repeats,
            "effect": effect, "effect_pp": None if effect is None else 100 * effect, "mde_unpaired": mde_unpaired,
            "mde_paired": mde_paired, "mde_repeats": mde_repeats, "repeats_needed": needed,
            "n_needed_paired": n_paired, "mde": mde}


# ------------------------------------------------------------------------------------------ the verdict's power
REFERENCE = ("the comparison's launch-aware t-test: Welch's launch term, Satterthwaite's df (one launch per arm "
             "and no A/A launch: the question-level test); launch shifts with Student-t(3) tails")
#: the launch shifts' tails the plan assumes: a few launches cannot tell their shape, and planning with normal
#: tails fell short of the power under t3 (docs/calibration.md)
PLAN_TAILS = "t3"
#: launches per arm shown in ``launch.power_by_launches``
SHOWN_LAUNCHES = range(1, 7)


def effect_heterogeneity(effect: float, n: int) -> float:
    """The question x arm variance an effect adds when it sits on whole questions (B turns |effect| n of them
    around): |effect| (1 - |effect|) / n, the planner's default (0 for an effect spread evenly)."""
    e = min(abs(effect), 1.0)
    return e * (1 - e) / n


def design_power(effect: float, n: int, sigma2_launch: float | tuple[float, float], noise_per_launch: float,
                 launches_a: int, launches_b: int, launches_aa: int = 0, alpha: float = ALPHA,
                 heterogeneity: float | None = None, tails: str = PLAN_TAILS) -> float:
    """Power of the verdict's own test for the design, with the effect's heterogeneity unless given."""
    h = effect_heterogeneity(effect, n) if heterogeneity is None else heterogeneity
    return launchvar.power_launch_aware(effect, n, sigma2_launch, noise_per_launch, launches_a, launches_b,
                                        launches_aa, h, alpha, tails)


def launch_plan(effect: float, n: int, sigma2_launch: float, noise_per_launch: float, aa_launches: int,
                source: str, alpha: float = ALPHA) -> LaunchPlan:
    """The ``launch`` block: the assumed launch variance and the power of 1-6 launches per arm."""
    h = effect_heterogeneity(effect, n)
    return {"sd": math.sqrt(max(sigma2_launch, 0.0)), "sigma2": max(sigma2_launch, 0.0), "source": source,
            "noise_per_launch": noise_per_launch, "heterogeneity": h, "aa_launches": aa_launches,
            "reference": REFERENCE,
            "power_by_launches": [{"launches": L, "power": design_power(effect, n, sigma2_launch, noise_per_launch,
                                                                        L, L, aa_launches, alpha, h)}
                                  for L in SHOWN_LAUNCHES]}


# ------------------------------------------------------------------------------------------ the plan
def sequential_plan(effect: float, n: int, sigma2: float, alpha: float = ALPHA, power: float = 0.8,
                    min_repeats: int = 1, spending: str = "obf", futility: bool = True,
                    futility_power: float = 0.02, futility_from: float = 0.5,
                    start: int = 1) -> SequentialPlan | None:
    """The smallest sequential design (a look after every repeat, up to ``max_repeats``) whose power to
    detect ``effect`` reaches ``power``; None above :data:`MAX_SEQUENTIAL_REPEATS`."""
    for k in range(max(start, min_repeats), MAX_SEQUENTIAL_REPEATS + 1):
        d = sq.SequentialDesign(max_repeats=k, min_repeats=min_repeats, alpha=alpha, spending=spending,
                                futility=futility, futility_power=futility_power, futility_from=futility_from)
        drift = effect / math.sqrt(sigma2 / (n * k)) if sigma2 > 0 else math.inf
        if not math.isfinite(drift):
            drift = 50.0
        oc = sq.operating_characteristics(d, drift)
        if oc["power"] >= power - 1e-9:
            null = sq.operating_characteristics(d, 0.0)
            return {"design": {"spending": spending, "min_repeats": min_repeats, "max_repeats": k,
                               "futility": futility, "futility_power": futility_power,
                               "futility_from": futility_from, "alpha": alpha, "bounds": oc["bounds"],
                               "futility_z": oc["futility_z"]},
                    "power": oc["power"], "false_positive_rate": null["reject"],
                    "repeats": {"expected": oc["expected_repeats"], "expected_if_null": null["expected_repeats"],
                                "worst": k}}
    return None


def make_plan(effect: float, n: int, sigma2: float, alpha: float = ALPHA, power: float = 0.8,
              per_repeat: PerRepeatCost | None = None, min_repeats: int = 1, spending: str = "obf",
              futility: bool = True, notes: Sequence[str] = (), *, launch_sigma2: float | None = None,
              noise_per_launch: float | None = None, aa_launches: int = 0, launch_source: str | None = None) -> Plan:
    """The plan from n, σ² (the run-to-run discordance ψ), the launch variance (``launch_sigma2``; None:
    assumed 0, said so), the A/A launches of the planned design and the cost of one repeat."""
    if sigma2 < 0 or n < 1:
        raise PlanError("need n >= 1 and a discordance >= 0")
    notes = list(notes)
    if sigma2 == 0:
        notes.append("no run-to-run discordance was measured (ψ = 0): one repeat per arm is the plan, but "
                     "a zero noise estimate is not evidence of no noise; measure with at least 2 launches per arm")
    noise = sigma2 / (2 * n) if noise_per_launch is None else noise_per_launch
    s2l = 0.0 if launch_sigma2 is None else max(launch_sigma2, 0.0)
    if launch_sigma2 is None:
        launch_source = "assumed 0 (no --launch-sd, no launch variance measured): the plan is a lower bound"
        notes.append("the launch-to-launch variance is assumed 0: give --launch-sd PP (or plan --from a run with "
                     "the A/A control on fresh launches); launches that shift accuracy need more repeats")
    h = effect_heterogeneity(effect, n)
    found = launchvar.launches_needed(effect, n, s2l, noise, aa_launches, h, alpha, power,
                                      most=MAX_SEQUENTIAL_REPEATS, tails=PLAN_TAILS)
    if found is None:
        notes.append(f"no design of up to {MAX_SEQUENTIAL_REPEATS} launches per arm reaches "
                     f"{100 * power:g} % power: the launch variance is too large for this effect")
    r_fixed = MAX_SEQUENTIAL_REPEATS if found is None else found
    fixed_power = design_power(effect, n, s2l, noise, r_fixed, r_fixed, aa_launches, alpha, h)
    # the sequential design's normal model, per repeat: the variance of one fresh launch of each arm
    sigma2 = n * 2 * (s2l + noise)
    floor = stats.mde_floor(n, alpha)
    if effect < floor:
        notes.append(f"{100 * effect:.2f} pp is {effect * n:.1f} of {n} questions: if the effect sits on that few "
                     f"questions no number of repeats shows it with the question as the unit (at least "
                     f"{stats.min_detectable_discordant(alpha)} questions are needed); add questions")
    seq = None
    if found is not None:
        seq = sequential_plan(effect, n, sigma2, alpha, power, min_repeats=min_repeats, spending=spending,
                              futility=futility, start=r_fixed)
    if seq is None:
        notes.append(f"the sequential design is not searched beyond {MAX_SEQUENTIAL_REPEATS} repeats per arm")
    gh = wall = None
    if per_repeat is not None:
        gh, wall = float(per_repeat["gpu_hours"]), float(per_repeat["wall_s"]) / 3600
    fixed: FixedPlan = {
        "repeats": r_fixed, "power": fixed_power,
        "gpu_hours": None if gh is None else r_fixed * gh, "wall_hours": None if wall is None else r_fixed * wall,
        "gpu_hours_one_launch_per_arm": None if per_repeat is None else _one_launch_gpu_hours(per_repeat, r_fixed)}
    if seq is not None:
        seq["gpu_hours"] = _hours(seq["repeats"], gh)
        seq["wall_hours"] = _hours(seq["repeats"], wall)
    one, every = fixed["gpu_hours_one_launch_per_arm"], fixed["gpu_hours"]
    if (per_repeat is not None and one is not None and every is not None and r_fixed > 1
            and gpu_hours(one) != gpu_hours(every)):  # "0.00 instead of 0.00" says nothing
        notes.append("a fixed design that keeps one launch per arm for all its repeats costs "
                     f"{gpu_hours(one)} GPU-hours instead of {gpu_hours(every)}, "
                     "but cannot tell a launch-wide shift from the change: the plan launches afresh per repeat")
    if seq is not None:
        notes.append("the sequential design uses a normal approximation with the launch variance known; the fixed "
                     "design uses the verdict's own t reference")
    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "effect_pp": 100 * effect, "effect": effect,
            "alpha": alpha, "power": power, "n": n, "fixed": fixed, "sequential": seq,
            "repeats": _beside(r_fixed, seq["repeats"] if seq else None),
            "gpu_hours": _beside(fixed["gpu_hours"], seq["gpu_hours"] if seq else None),
            "per_repeat": None if per_repeat is None else per_repeat.copy(), "notes": notes,
            "launch": launch_plan(effect, n, s2l, noise, aa_launches, str(launch_source), alpha)}


def _beside(fixed: float | None, seq: SequentialRepeats | SequentialHours | None) -> PlanFigures:
    """The fixed design's figure beside the sequential one's (expected, expected if null, worst)."""
    return {"fixed": fixed, **{f"sequential_{k}": None if seq is None else seq[k]
                               for k in ("expected", "expected_if_null", "worst")}}


def _hours(repeats: SequentialRepeats, per_repeat: float | None) -> SequentialHours:
    """The cost of a sequential design's repeats at ``per_repeat`` hours each (None: unknown)."""
    if per_repeat is None:
        return {"expected": None, "expected_if_null": None, "worst": None}
    return {"expected": repeats["expected"] * per_repeat, "expected_if_null": repeats["expected_if_null"] * per_repeat,
            "worst": repeats["worst"] * per_repeat}


def _one_launch_gpu_hours(per_repeat: PerRepeatCost, repeats: int) -> float | None:
    try:
        return sum(per_repeat["gpus"][r] * (per_repeat["launch_s"][r] + repeats * per_repeat["eval_s"][r]
                                             + per_repeat["stop_s"][r]) for r in ("a", "b")) / 3600
    except (KeyError, TypeError):
        return None


def per_repeat_cost(launch_s: Mapping[str, float], eval_s: Mapping[str, float], stop_s: Mapping[str, float],
                    gpus: Mapping[str, int], source: str) -> PerRepeatCost:
    """One repeat = one launch and one eval of each arm (then its stop): GPU-hours and wall seconds."""
    per_arm = {r: launch_s[r] + eval_s[r] + stop_s[r] for r in ("a", "b")}
    return {"launch_s": dict(launch_s), "eval_s": dict(eval_s), "stop_s": dict(stop_s), "gpus": dict(gpus),
            "gpu_hours": sum(gpus[r] * per_arm[r] for r in ("a", "b")) / 3600,
            "wall_s": sum(per_arm.values()), "source": source}


# ------------------------------------------------------------------------------------------ from a run
def _runs(run_dir: Path) -> list[ScoredEval]:
    """Every eval of the run, with its scores (1/0/NaN) and launch (the one eval-directory reader), launches
    counted as the comparison counts them (evals without a launch id: one launch per server)."""
    out = []
    for meta_path in sorted(run_dir.glob("evals/*/*/eval.json")):
        try:
            out.append(load_scored(meta_path.parent))
        except StoreError as e:
            raise PlanError(str(e)) from None
    configs = [[r for r in out if _role(r) in ("a", "aa")], [r for r in out if _role(r) == "b"]]
    try:
        ids, _ = launch_ids(configs)
    except LaunchesUnknown as e:
        raise PlanError(str(e)) from None
    launch = {r.dir: i for rs, idl in zip(configs, ids, strict=True) for r, i in zip(rs, idl, strict=True)}
    return [dataclasses.replace(r, launch=launch.get(r.dir, r.launch)) for r in out]


def _role(ev: ScoredEval) -> str:
    return str(ev.meta.get("role") or ev.dir.parent.name)


def noise_from_runs(runs: Sequence[ScoredEval]) -> NoiseEstimate:
    """σ² for the plan: ψ within each arm (A with its A/A runs: :func:`harness.stats.within_arm_psi`, pairs on
    different launches preferred), pooled evenly over the arms, else ψ between the arms."""
    groups = {"a": [r for r in runs if _role(r) in ("a", "aa")], "b": [r for r in runs if _role(r) == "b"]}
    within: dict[str, float | None] = {}
    fresh = same = 0
    for arm, rs in groups.items():
        w = stats.within_arm_psi(stats.ArmRuns(np.vstack([r.scores for r in rs]), tuple(r.launch for r in rs))) \
            if len(rs) >= 2 else None
        within[arm] = None if w is None else w.value
        fresh += 0 if w is None else w.across_pairs
        same += 0 if w is None else w.within_pairs
    between_vals = [stats.discordance(x.scores, y.scores) for x in groups["a"] if _role(x) == "a"
                    for y in groups["b"]]
    between_vals = [v for v in between_vals if not math.isnan(v)]
    between = float(np.mean(between_vals)) if between_vals else None
    have = [v for v in within.values() if v is not None]
    notes = []
    if have:
        sigma2, source = float(np.mean(have)), "ψ within arms" + ("" if len(have) == 2 else " (one arm)")
        if fresh == 0 and same > 0:
            notes.append("the within-arm runs shared a server launch: launch-level noise was not sampled and the "
                         "plan may be optimistic; a run with a fresh launch per repeat measures it")
    elif between is not None:
        sigma2, source = between, "ψ between arms (no arm has two runs; includes any effect)"
        notes.append("no arm has two runs: σ² is the A-vs-B discordance, which includes the effect itself")
    else:
        raise PlanError("the run has no two runs to measure run-to-run discordance from")
    return {"sigma2": sigma2, "source": source, "psi_within": within, "psi_between": between,
            "fresh_launch_pairs": fresh, "same_launch_pairs": same, "notes": notes}


def cost_per_repeat_from_run(manifest: Mapping[str, Any], run_dir: Path, launch_s: float | None = None,
                             eval_s: float | None = None, gpus: int | None = None) -> PerRepeatCost:
    """Per-arm seconds per launch, per eval, of stopping, and GPUs, from the run's cost records; the
    overrides (both arms) win."""
    cost = cost_from_manifest(manifest, run_dir)
    per: dict[str, dict[str, float]] = {"launch_s": {}, "eval_s": {}, "stop_s": {}}
    g: dict[str, int] = {}
    for r, c in (("a", cost.a), ("b", cost.b)):
        nl, ne = c.launches, c.evals
        per["launch_s"][r] = c.launch_s / nl if nl else 0.0
        per["eval_s"][r] = c.eval_s / ne if ne else 0.0
        per["stop_s"][r] = max(0.0, c.server_s - c.launch_s - c.eval_s) / nl if nl else 0.0
        g[r] = c.gpus
    parts = []
    if cost.estimated:
        parts.append("estimated " + ", ".join(cost.estimated))
    for key, value in (("launch_s", launch_s), ("eval_s", eval_s)):
        if value is not None:
            per[key] = {"a": value, "b": value}
            parts.append("--" + key.replace("_", "-"))
    if gpus is not None:
        g = {"a": gpus, "b": gpus}
        parts.append("--gpus")
    source = "recorded" if not parts else "; ".join(parts)
    return per_repeat_cost(per["launch_s"], per["eval_s"], per["stop_s"], g, source)


def launch_from_runs(runs: Sequence[ScoredEval]) -> tuple[float | None, float | None, int, str]:
    """(σ²_L, σ²_e / n, A/A launches, source) the verdict's own variance components measure in the run; σ²_L
    None when no configuration has two launches."""
    def arm(roles: tuple[str, ...]) -> stats.ArmRuns | None:
        rs = [r for r in runs if _role(r) in roles]
        return stats.ArmRuns(np.vstack([r.scores for r in rs]), tuple(r.launch for r in rs)) if rs else None

    a, aa, b = arm(("a",)), arm(("aa",)), arm(("b",))
    laa = 0 if aa is None else len(aa.launch_ids())
    if a is None or b is None:
        return None, None, laa, "the run lacks an arm"
    try:
        r = stats.launch_aware_test(a, b, aa)
    except ValueError as e:
        return None, None, laa, str(e)
    c = r.components
    if c is None or r.df_launch == 0:
        return None, None, laa, "not measurable: no configuration of the run has two launches"
    return (max(c.sigma2_raw, 0.0), c.ms_resid / r.n, laa,
            f"measured: {r.variance_source}; sd {100 * math.sqrt(max(c.sigma2_raw, 0.0)):.2f} pp on "
            f"{r.df_launch} df")


def plan_from_run(run_dir: str | Path, effect: float, alpha: float | None = None, power: float = 0.8,
                  launch_s: float | None = None, eval_s: float | None = None, gpus: int | None = None,
                  min_repeats: int = 1, spending: str = "obf", futility: bool = True,
                  launch_sd: float | None = None, aa_launches: int | None = None) -> Plan:
    """The plan for detecting ``effect`` (fraction) with the noise, times and GPUs a finished run measured."""
    root = Path(run_dir)
    if not root.is_dir():
        raise PlanError(f"{root} is not a directory")
    runs = _runs(root)
    if not runs:
        raise PlanError(f"{root} holds no evals (evals/<arm>/r<k>/eval.json)")
    n = len(runs[0].scores)
    if any(len(r.scores) != n for r in runs):
        raise PlanError(f"the evals in {root} do not share one question set")
    if effect * n < 0.5:
        raise PlanError(f"--effect {100 * effect:g} pp is {effect * n:.2g} of {n} questions, less than half a "
                        "question; --effect is in percentage points (0.3 means 0.3 pp)")
    manifest = read_json(root / "manifest.json") if (root / "manifest.json").exists() else {}
    if alpha is None:
        alpha = float(((manifest.get("config") or {}).get("stats") or {}).get("alpha") or ALPHA)
    noise = noise_from_runs(runs)
    notes = list(noise.pop("notes"))
    per_repeat = cost_per_repeat_from_run(manifest, root, launch_s, eval_s, gpus) if manifest else None
    if per_repeat is None:
        notes.append("no manifest.json: GPU-hours unknown (give --launch-s, --eval-s and --gpus)")
        if launch_s is not None or eval_s is not None or gpus is not None:
            per_repeat = per_repeat_cost({"a": launch_s or 0.0, "b": launch_s or 0.0},
                                         {"a": eval_s or 0.0, "b": eval_s or 0.0}, {"a": 0.0, "b": 0.0},
                                         {"a": gpus or 0, "b": gpus or 0}, "options")
    elif "estimated" in per_repeat["source"] and "launch_s" in per_repeat["source"] and launch_s is None:
        notes.append("launch times are not recorded by this run: estimated from the manifest's timestamps "
                     "(an upper bound); pass --launch-s to plan with the real box's")
    simulated = any(bool(r.meta.get("simulated")) for r in runs)
    if simulated and per_repeat is not None and gpus is None and per_repeat["gpu_hours"] == 0:
        notes.append("SIMULATED run: no GPUs were held; pass --gpus and --launch-s for the real box")
    s2l, noise_l, laa, src = launch_from_runs(runs)
    if launch_sd is not None:
        s2l, src = launch_sd**2, f"assumed: --launch-sd {100 * launch_sd:g} pp (the run measured: {src})"
    elif s2l is None:
        src = f"assumed 0 ({src}): the plan is a lower bound"
    plan = make_plan(effect, n, noise["sigma2"], alpha, power, per_repeat, min_repeats, spending, futility, notes,
                     launch_sigma2=s2l if s2l is not None else (0.0 if "assumed 0" in src else None),
                     noise_per_launch=noise_l, aa_launches=laa if aa_launches is None else aa_launches,
                     launch_source=src)
    if s2l is None and launch_sd is None:
        plan["notes"].append("the run cannot measure the launch-to-launch variance: give --launch-sd PP")
    acc = {}
    for arm, roles in (("a", ("a",)), ("b", ("b",))):
        vals = [float(np.nanmean(r.scores)) for r in runs if _role(r) in roles and np.isfinite(r.scores).any()]
        acc[arm] = float(np.mean(vals)) if vals else None
    scoring: PlanScoring | None = None
    if manifest:
        total = cost_from_manifest(manifest, root).total
        if total.scoring_passes:
            scoring = {"passes": total.scoring_passes, "wall_s": total.scoring_s,
                       "gpu_hours": None if gpus is not None else total.scoring_gpu_hours,
                       "note": "the divergence's scoring passes, once per run (not per repeat), on the evals' launches"}
    return {**plan, "source": str(root), "simulated": simulated, "accuracy": acc, "noise": noise, "scoring": scoring}


# ------------------------------------------------------------------------------------------ text
def _num(x: float | None, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


def format_plan(p: Plan) -> str:
    lines = []
    if p.get("simulated"):
        lines.append("*** SIMULATED: noise and times measured on the simulated engine ***")
    src = f" from {p['source']}" if p.get("source") else ""
    lines.append(f"plan{src}: detect {p['effect_pp']:.2f} pp ({p['effect'] * p['n']:.1f} of {p['n']} questions) "
                 f"at {100 * p['power']:g} % power, α {p['alpha']:g}")
    if p.get("noise"):
        nz = p["noise"]
        lines.append(f"  noise: σ² = {100 * nz['sigma2']:.2f} % per repeat ({nz['source']})")
    pr = p.get("per_repeat")
    if pr:
        lines.append(f"  one repeat (a fresh launch + eval of each arm): {pr['gpu_hours']:.2f} GPU-hours, "
                     f"{pr['wall_s'] / 3600:.2f} h wall; GPUs A {pr['gpus']['a']}, B {pr['gpus']['b']}; launch "
                     f"A {pr['launch_s']['a']:.0f} s, B {pr['launch_s']['b']:.0f} s; eval A {pr['eval_s']['a']:.0f} s, "
                     f"B {pr['eval_s']['b']:.0f} s ({pr['source']})")
    lp = p.get("launch")
    if lp:
        lines.append(f"  launch variance: sd {100 * lp['sd']:.2f} pp per launch ({lp['source']}); "
                     f"A/A launches {lp['aa_launches']}")
        lines.append(f"  power by launches per arm ({lp['reference']}): "
                     + ", ".join(f"{int(x['launches'])}: {100 * x['power']:.0f} %" for x in lp["power_by_launches"]))
    f = p["fixed"]
    lines.append(f"  fixed design:      {f['repeats']} repeats per arm, each a fresh launch (power "
                 f"{100 * f['power']:.1f} %), {_num(f['gpu_hours'])} GPU-hours")
    s = p.get("sequential")
    if s:
        r, g = s["repeats"], s["gpu_hours"]
        lines.append(f"  sequential design: at most {r['worst']} repeats per arm (power {100 * s['power']:.1f} %): "
                     f"expected {r['expected']:.1f} with the effect, {r['expected_if_null']:.1f} without; "
                     f"{_num(g['expected'])} GPU-hours expected ({_num(g['expected_if_null'])} without the effect), "
                     f"{_num(g['worst'])} at worst")
    sc = p.get("scoring")
    if sc:
        gh = "" if sc.get("gpu_hours") is None else f", {sc['gpu_hours']:.2f} GPU-hours"
        lines.append(f"  scoring (divergence): {sc['passes']} pass(es), {sc['wall_s'] / 60:.1f} min{gh}, once per run "
                     "on the evals' launches (add it to either design)")
    for note in p.get("notes") or []:
        lines.append(f"  note: {note}")
    return "\n".join(lines)
