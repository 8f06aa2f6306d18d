"""What a run cost in GPU time, and how a sequential run stopped, for the report and comparison.md: from the
run's ``summary.json``, else its manifest, else the comparison; a record that does not load is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from harness.analysis.cost import blocks, gpu_hours
from harness.report.words import pp
from harness.results import schema
from harness.results.records import JSON, RecordError
from harness.results.schema import Comparison, Cost, RunSummary, SequentialRecord

ROLE_LABELS = {"a": "A", "b": "B", "aa": "A/A control", "total": "total"}


class CostRow(TypedDict):
    """A role's row of the cost table (and the total's): counts, times as text, GPUs, GPU-hours as text."""

    role: str
    label: str
    launches: int
    evals: int
    launch: str
    eval: str
    server: str
    gpus: int
    #: scoring passes, their time and GPU-hours ("—": none)
    scoring: str
    gpu_hours: str


class LookRow(TypedDict):
    """A look of a sequential run: its estimate and boundary as text, and what it decided."""

    repeats: int
    delta: str
    se: str
    z: str
    bound: str
    alpha_spent: str
    #: conditional power ("—": not computed)
    cp: str
    decision: str
    reason: str
    stop: bool


class SequentialFacts(TypedDict):
    """How a sequential run went: its design (as recorded), how far it ran, why it stopped, what it saved."""

    repeats_run: int
    max_repeats: int
    min_repeats: JSON
    spending: JSON
    alpha: JSON
    hypothesis: JSON
    margin: JSON
    futility: JSON
    verdict: str | None
    reason: str | None
    sentence: str | None
    stopped: bool
    repeats_saved: int
    gpu_hours_saved: str
    gpu_hours_per_repeat: str
    estimator: str


def run_summary(root: Path) -> RunSummary | None:
    """The run's ``summary.json`` (None when there is none, or it is not a run summary)."""
    path = Path(root) / schema.RUN_SUMMARY_FILE
    if not path.exists():
        return None
    try:
        return schema.load_run_summary(path)
    except schema.SchemaError:
        return None


def _from_manifest(manifest: Mapping[str, Any], key: str, cls: type[Cost] | type[SequentialRecord]) -> Any:
    doc = manifest.get(key)
    if not isinstance(doc, dict):
        return None
    try:
        return cls.from_doc(doc)
    except RecordError:
        return None


def load_cost(root: Path, manifest: Mapping[str, Any]) -> Cost | None:
    """The run's cost: summary.json's, else the manifest's; None when neither records one."""
    s = run_summary(root)
    if s is not None and s.cost is not None:
        return s.cost
    cost: Cost | None = _from_manifest(manifest, "cost", Cost)
    return cost


def load_sequential(root: Path, manifest: Mapping[str, Any], c: Comparison | None) -> SequentialRecord | None:
    """The run's ``sequential`` record (summary.json, else the comparison, else the manifest)."""
    s = run_summary(root)
    for seq in (s.sequential if s else None, c.sequential if c else None):
        if seq is not None:
            return seq
    found: SequentialRecord | None = _from_manifest(manifest, "sequential", SequentialRecord)
    return found


def hms(seconds: float | None) -> str:
    """3725.0 -> '1 h 02 min'; 75 -> '1 min 15 s'; None -> 'n/a'."""
    if seconds is None:
        return "n/a"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def cost_rows(cost: Cost) -> list[CostRow]:
    """One row per role present and the total: launches, evals, launch / eval / server time, GPUs, GPU-hours."""
    return [{"role": role, "label": ROLE_LABELS[role], "launches": b.launches, "evals": b.evals,
             "launch": hms(b.launch_s), "eval": hms(b.eval_s), "server": hms(b.server_s), "gpus": b.gpus,
             "scoring": f"{b.scoring_passes} · {hms(b.scoring_s)} · {gpu_hours(b.scoring_gpu_hours)} GPU-h" if b.scoring_passes
             else "—",
             "gpu_hours": gpu_hours(b.gpu_hours)} for role, b in blocks(cost)]


def cost_line(cost: Cost) -> str:
    """The cost in one line (comparison.md): the total and each arm's GPU-hours."""
    t = cost.total
    arms = ", ".join(f"{ROLE_LABELS[r]} {gpu_hours(b.gpu_hours)}" for r, b in blocks(cost) if r != "total")
    scoring = (f", {t.scoring_passes} scoring pass(es) {hms(t.scoring_s)}"
               + (f" ({gpu_hours(t.scoring_gpu_hours)} GPU-hours)" if t.gpus else "") if t.scoring_passes else "")
    total = f"{gpu_hours(t.gpu_hours)} GPU-hours ({arms})" if t.gpus else "no GPU"
    return (f"{total}; {t.launches} server launch(es), {hms(t.launch_s)} "
            f"to ready, {t.evals} eval(s) {hms(t.eval_s)}{scoring}, servers up {hms(t.server_s)}"
            + (f" (estimated from timestamps: {', '.join(cost.estimated)})" if cost.estimated else ""))


def look_rows(seq: SequentialRecord) -> list[LookRow]:
    """The look table of a sequential run: per look Δ, SE, z, its boundary, α spent and the decision."""
    return [{"repeats": look.repeats, "delta": pp(look.delta), "se": pp(look.se, signed=False),
             "z": f"{look.z:+.2f}", "bound": "—" if look.bound is None else f"±{look.bound:.2f}",
             "alpha_spent": f"{look.alpha_spent:.4f}",
             "cp": "—" if look.conditional_power is None else f"{look.conditional_power:.3f}",
             "decision": (look.verdict or "continue") if look.stop else "continue", "reason": look.reason,
             "stop": look.stop} for look in seq.looks]


def sequential_facts(seq: SequentialRecord) -> SequentialFacts:
    """Repeats run, why it stopped, what it saved against running every repeat (the fixed design)."""
    d = seq.design
    return {"repeats_run": seq.repeats_run, "max_repeats": seq.max_repeats, "min_repeats": d.get("min_repeats"),
            "spending": d.get("spending"), "alpha": d.get("alpha"), "hypothesis": d.get("hypothesis"),
            "margin": d.get("margin"), "futility": d.get("futility"), "verdict": seq.verdict, "reason": seq.reason,
            "sentence": seq.sentence, "stopped": seq.stopped, "repeats_saved": seq.repeats_saved,
            "gpu_hours_saved": "n/a" if seq.gpu_hours_saved is None else f"{seq.gpu_hours_saved:.2f}",
            "gpu_hours_per_repeat": "n/a" if seq.gpu_hours_per_repeat is None else f"{seq.gpu_hours_per_repeat:.2f}",
            "estimator": seq.estimator}


def sequential_line(seq: SequentialRecord) -> str:
    """How a sequential run stopped, in one line (comparison.md)."""
    f = sequential_facts(seq)
    if not f["stopped"]:
        return (f"sequential design (at most {f['max_repeats']} repeats per arm): {f['repeats_run']} repeat(s) run, "
                "not decided yet (the run stopped before its next look; rerun to continue)")
    saved = (f"; saved {f['repeats_saved']} repeat(s) per arm against running all {f['max_repeats']}, "
             f"{f['gpu_hours_saved']} GPU-hours") if f["repeats_saved"] else ""
    return (f"sequential design ({f['spending']} alpha spending, at most {f['max_repeats']} repeats per arm): "
            f"stopped after {f['repeats_run']} repeat(s), {f['reason']}: {f['sentence']}{saved}")
