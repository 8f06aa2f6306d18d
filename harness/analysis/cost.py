"""What a run cost in GPU time, per arm and in total (``summary.json`` ``cost``): ``gpu_hours`` sums
``server_s * gpus / 3600`` over an arm's launches (``server_s`` spawn to stopped, ``launch_s`` spawn to
ready), ``aa`` only when the A/A control had launches of its own."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from harness.results.schema import Cost, CostBlock
from harness.util.cmdline import flag_value

GPU_ENGINES = ("sglang", "vllm")
TP_FLAGS = ("--tp", "--tp-size", "--tensor-parallel-size")
PP_FLAGS = ("--pp", "--pp-size", "--pipeline-parallel-size")
DP_FLAGS = ("--dp", "--dp-size", "--data-parallel-size")
DP_INSIDE_TP_FLAGS = ("--enable-dp-attention",)
VISIBLE_DEVICES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
FIELDS = ("launch_s", "eval_s", "server_s", "gpus", "gpu_hours")
ROLES = ("a", "b", "aa")


# ------------------------------------------------------------------------------------------ GPUs
def _positive_int(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    try:
        v = int(str(text).strip())
    except ValueError:
        raise ValueError(f"{what} is not an integer: {text!r}") from None
    if v < 1:
        raise ValueError(f"{what} must be >= 1, not {v}")
    return v


def _visible(env: Mapping[str, Any]) -> int | None:
    for name in VISIBLE_DEVICES:
        if name in env and env[name] is not None:
            val = str(env[name]).strip()
            if val in ("", "-1", "NoDevFiles"):
                return 0
            return len([x for x in val.split(",") if x.strip()])
    return None


def count_gpus(engine: Mapping[str, Any], args: Sequence[str] = (), env: Mapping[str, Any] | None = None
               ) -> tuple[int, str]:
    """(GPUs an arm's server holds, how that was found): ``engine.gpus`` when set; else for SGLang and vLLM TP
    x PP x DP from the flags (DP attention runs inside TP: no DP), else the visible devices, else 1; 0 for the
    other engines. ``args`` / ``env`` are the arm's own, after (and winning over) the engine's."""
    explicit = engine.get("gpus")
    if explicit is not None:
        v = int(explicit)
        if v < 0:
            raise ValueError(f"engine.gpus must be >= 0, not {v}")
        return v, "engine.gpus"
    kind = str(engine.get("kind") or "")
    if kind not in GPU_ENGINES:
        return 0, f"{kind or 'unknown'} engine (no GPUs)"
    all_args = [*(engine.get("args") or []), *args]
    all_env = {**dict(engine.get("env") or {}), **dict(env or {})}
    tp = _positive_int(flag_value(all_args, TP_FLAGS), "tensor parallel size")
    pp = _positive_int(flag_value(all_args, PP_FLAGS), "pipeline parallel size")
    dp = _positive_int(flag_value(all_args, DP_FLAGS), "data parallel size")
    if tp or pp or dp:
        dp_inside = any(str(a) in DP_INSIDE_TP_FLAGS for a in all_args)
        n = (tp or 1) * (pp or 1) * (1 if dp_inside else (dp or 1))
        how = f"tp {tp or 1} x pp {pp or 1}" + (" (dp attention inside tp)" if dp_inside and dp
                                               else f" x dp {dp or 1}")
        return n, how
    vis = _visible(all_env)
    if vis is not None:
        return vis, "visible devices"
    return 1, f"{kind} default (1 GPU)"


# ------------------------------------------------------------------------------------------ costs
@dataclass(frozen=True)
class LaunchTime:
    """One server launch: the role whose item started it, spawn->ready and spawn->stopped seconds, GPUs."""

    role: str
    launch_s: float
    server_s: float
    gpus: int


@dataclass(frozen=True)
class EvalTime:
    """One eval: its role and wall seconds."""

    role: str
    eval_s: float


@dataclass(frozen=True)
class ScoringRecord:
    """One scoring pass: the role of the launch it ran on, its wall seconds and that launch's GPUs."""

    role: str
    scoring_s: float
    gpus: int


def arm_cost(launches: Iterable[LaunchTime], evals: Iterable[EvalTime],
             scoring: Iterable[ScoringRecord] = ()) -> CostBlock:
    """Cost of one arm: sums over its launches, evals and scoring passes (see the module docstring)."""
    ls, es, ss = list(launches), list(evals), list(scoring)
    return CostBlock(launches=len(ls), evals=len(es), launch_s=float(sum(r.launch_s for r in ls)),
                     eval_s=float(sum(r.eval_s for r in es)), server_s=float(sum(r.server_s for r in ls)),
                     gpus=max((r.gpus for r in ls), default=0),
                     gpu_hours=float(sum(r.server_s * r.gpus for r in ls) / 3600.0),
                     scoring_passes=len(ss), scoring_s=float(sum(r.scoring_s for r in ss)),
                     scoring_gpu_hours=float(sum(r.scoring_s * r.gpus for r in ss) / 3600.0))


def run_cost(launches: Iterable[LaunchTime], evals: Iterable[EvalTime], estimated: Iterable[str] = (),
             scoring: Iterable[ScoringRecord] = ()) -> Cost:
    """The value of ``summary.json``'s ``cost``: per role (``aa`` only when the A/A control had launches of
    its own; its evals on arm A's servers count in ``a``) and the total."""
    ls, es, ss = list(launches), list(evals), list(scoring)
    records: list[LaunchTime | EvalTime | ScoringRecord] = [*ls, *es, *ss]
    for r in records:
        if r.role not in ROLES:
            raise ValueError(f"unknown role {r.role!r} (expected one of {ROLES})")
    own_aa = any(r.role == "aa" for r in ls)

    def role_of(r: LaunchTime | EvalTime | ScoringRecord) -> str:
        return "a" if r.role == "aa" and not own_aa else r.role

    blocks = {role: arm_cost([r for r in ls if role_of(r) == role], [r for r in es if role_of(r) == role],
                             [r for r in ss if role_of(r) == role])
              for role in ROLES if role != "aa" or own_aa}
    return Cost(a=blocks["a"], b=blocks["b"], aa=blocks.get("aa"), total=_add(list(blocks.values())),
                estimated=sorted(estimated))


def _add(blocks: Sequence[CostBlock]) -> CostBlock:
    """The blocks summed field by field (the GPUs: the most any held)."""
    zero = CostBlock()
    return CostBlock(**{f.name: max((b.gpus for b in blocks), default=0) if f.name == "gpus"
                        else sum((getattr(b, f.name) for b in blocks), getattr(zero, f.name))
                        for f in fields(CostBlock)})


def sum_costs(costs: Iterable[Cost | None]) -> Cost:
    """The cost of a sweep: each role and the total summed over the jobs' costs (None skipped)."""
    cs = [c for c in costs if c]
    aa = [c.aa for c in cs if c.aa is not None]
    return Cost(a=_add([c.a for c in cs]), b=_add([c.b for c in cs]), aa=_add(aa) if aa else None,
                total=_add([c.total for c in cs]))


def gpu_hours(x: float) -> str:
    """GPU-hours to the digits that tell values apart: ``0`` without a GPU, two significant digits under 0.01
    (``0.0042``), two decimals above."""
    if x == 0:
        return "0"
    return f"{x:.2g}" if abs(x) < 0.01 else f"{x:.2f}"


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def blocks(cost: Cost) -> list[tuple[str, CostBlock]]:
    """(role, block) of a cost in display order: a, b, aa (when present), total."""
    return [(role, b) for role, b in (("a", cost.a), ("b", cost.b), ("aa", cost.aa), ("total", cost.total))
            if b is not None]


def format_cost(cost: Cost) -> str:
    """One line per arm and the total, for the terminal summary and the report."""
    return "\n".join(f"  cost {role:<5} {c.launches} launch(es) {_hms(c.launch_s)} to ready, "
                     f"{c.evals} eval(s) {_hms(c.eval_s)}"
                     + (f", {c.scoring_passes} scoring pass(es) {_hms(c.scoring_s)}" if c.scoring_passes else "")
                     + f", servers up {_hms(c.server_s)} on {c.gpus} GPU(s): {gpu_hours(c.gpu_hours)} GPU-hours"
                     + (f" ({gpu_hours(c.scoring_gpu_hours)} of them scoring)" if c.scoring_passes and c.gpus else "")
                     for role, c in blocks(cost))


# ------------------------------------------------------------------------------------------ from a run
_ID_TIME = re.compile(r"@(\d+(?:\.\d+)?)$")


def _f(x: Any) -> float | None:
    try:
        return None if x is None else float(x)
    except (TypeError, ValueError):
        return None


def _launches(record: Mapping[str, Any]) -> list[Any]:
    """The server launches an arm or eval record lists (``launches``; ``instances`` before launch ids)."""
    return list(record.get("launches") or record.get("instances") or [])


def cost_from_manifest(manifest: Mapping[str, Any], run_dir: str | Path | None = None,
                       gpus: Mapping[str, int] | None = None) -> Cost:
    """The cost of a recorded run from ``manifest.json`` and each eval's ``summary.json`` under ``run_dir``.
    What older runs lack is estimated and listed in ``estimated`` (an upper bound): ready from the id
    (``<key>@<epoch>``), ``launch_s`` the gap since the previous event, ``server_s`` that plus the evals it
    served."""
    estimated: set[str] = set()
    evals = manifest.get("evals") or {}
    arms = manifest.get("arms") or {}
    cfg = manifest.get("config") or {}
    sessions = manifest.get("sessions") or []

    def eval_seconds(rel: str, ev: Mapping[str, Any]) -> float:
        if run_dir is not None:
            p = Path(run_dir) / rel / "summary.json"
            if p.exists():
                import json

                lat = _f(json.loads(p.read_text(encoding="utf-8")).get("latency_s"))
                if lat is not None:
                    return lat
        lat = _f((ev.get("summary") or {}).get("latency_s"))
        if lat is not None:
            return lat
        start, end = _f(ev.get("started")), _f(ev.get("ended"))
        estimated.add("eval_s")
        return max(0.0, end - start) if start is not None and end is not None else 0.0

    eval_recs: list[EvalTime] = []
    by_instance: dict[str, list[tuple[str, float]]] = {}  # launch id -> (role, eval seconds) it served
    ends = [float(s["started"]) for s in sessions if _f(s.get("started")) is not None]
    for rel, ev in sorted(evals.items()):
        if ev.get("status") not in (None, "complete", "errors", "incomplete", "failed", "interrupted"):
            continue
        secs = eval_seconds(rel, ev)
        role = str(ev.get("role") or "a")
        eval_recs.append(EvalTime(role, secs))
        for inst in _launches(ev):
            by_instance.setdefault(inst, []).append((role, secs))
        if _f(ev.get("ended")) is not None:
            ends.append(float(ev["ended"]))
    for arm in arms.values():  # a launch also starts when the previous server became ready
        for inst in _launches(arm):
            m = _ID_TIME.search(str(inst.get("id") or ""))
            r = _f(inst.get("ready")) if inst.get("ready") is not None else (float(m.group(1)) if m else None)
            if r is not None:
                ends.append(r)
    ends.sort()

    launch_recs = []
    for key, arm in sorted(arms.items()):
        arm_gpus = None if gpus is None else gpus.get(key)
        if arm_gpus is None:
            arm_gpus = config_gpus(cfg, key)
        for inst in _launches(arm):
            iid = str(inst.get("id") or "")
            served = by_instance.get(iid, [])
            role = str(inst.get("role") or (served[0][0] if served else "a"))
            spawned, ready, stopped = _f(inst.get("spawned")), _f(inst.get("ready")), _f(inst.get("stopped"))
            if ready is None and _ID_TIME.search(iid):
                ready = float(_ID_TIME.search(iid).group(1))  # type: ignore[union-attr]
            launch_s = _f(inst.get("launch_s"))
            if launch_s is None and spawned is not None and ready is not None:
                launch_s = ready - spawned
            if launch_s is None:
                estimated.add("launch_s")
                before = [e for e in ends if ready is not None and e < ready]
                launch_s = max(0.0, ready - before[-1]) if before and ready is not None else 0.0
            server_s = _f(inst.get("server_s"))
            if server_s is None and spawned is not None and stopped is not None:
                server_s = stopped - spawned
            if server_s is None:
                estimated.add("server_s")
                server_s = launch_s + sum(s for _, s in served)
            g = _f(inst.get("gpus"))
            launch_recs.append(LaunchTime(role, launch_s, server_s, int(g) if g is not None else arm_gpus))
    launch_role = {str(inst.get("id")): (str(inst.get("role") or "a"), _f(inst.get("gpus")))
                   for arm in arms.values() for inst in _launches(arm)}
    scoring_recs = []
    for rec in (manifest.get("scoring") or {}).values():
        if not isinstance(rec, dict) or _f(rec.get("wall_s")) is None:
            continue
        role, g = launch_role.get(str(rec.get("launch")), ("a", None))
        key = str(rec.get("arm") or "")
        gp = int(g) if g is not None else (gpus or {}).get(key, config_gpus(cfg, key) if key else 0)
        scoring_recs.append(ScoringRecord(str(rec.get("role") or role), float(rec["wall_s"]), int(gp)))
    return run_cost(launch_recs, eval_recs, estimated, scoring_recs)


def config_gpus(cfg: Mapping[str, Any], arm_key: str) -> int:
    """GPUs of arm ``arm_key`` from a run's resolved config (engine merged with the arm's engine block)."""
    engine = dict(cfg.get("engine") or {})
    arm = (cfg.get("arms") or {}).get(arm_key) or {}
    engine.update(arm.get("engine") or {})
    try:
        return count_gpus(engine, arm.get("args") or [], arm.get("env") or {})[0]
    except ValueError:
        return 0
