"""What a run cost in GPU time, and how a sequential run stopped, as the report and comparison.md show them.

Read from stored files only: the run's ``summary.json`` (``cost``, ``sequential``), else its manifest
(where ``abh run`` records both as they happen), else the comparison (``sequential``, which ``abh run``
copies there so every reader of the verdict sees how it was reached). Missing or odd shapes are left out,
never a crash.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.report.words import pp
from harness.results import schema

ROLE_LABELS = {"a": "A", "b": "B", "aa": "A/A control", "total": "total"}


def _obj(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def run_summary(root: Path) -> dict[str, Any]:
    """The run's ``summary.json`` ({} when there is none, or it is not a run summary)."""
    path = Path(root) / schema.RUN_SUMMARY_FILE
    if not path.exists():
        return {}
    try:
        return dict(schema.load_run_summary(path))
    except schema.SchemaError:
        return {}


def load_cost(root: Path, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's ``cost`` block: summary.json's, else the manifest's; None when neither records one."""
    for doc in (run_summary(root), manifest):
        cost = _obj(doc.get("cost"))
        if _obj(cost.get("total")):
            return cost
    return None


def load_sequential(root: Path, manifest: Mapping[str, Any], c: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's ``sequential`` record (summary.json, else the comparison, else the manifest)."""
    for doc in (run_summary(root), c, manifest):
        seq = _obj(doc.get("sequential"))
        if seq.get("looks") is not None:
            return seq
    return None


def hms(seconds: Any) -> str:
    """3725.0 -> '1 h 02 min'; 75 -> '1 min 15 s'; None -> 'n/a'."""
    s = _num(seconds)
    if s is None:
        return "n/a"
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def cost_rows(cost: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per role present and the total: launches, evals, launch / eval / server time, GPUs, GPU-hours."""
    rows = []
    for role in ("a", "b", "aa", "total"):
        block = _obj(cost.get(role))
        if not block:
            continue
        gh = _num(block.get("gpu_hours"))
        rows.append({"role": role, "label": ROLE_LABELS[role], "launches": block.get("launches"),
                     "evals": block.get("evals"), "launch": hms(block.get("launch_s")),
                     "eval": hms(block.get("eval_s")), "server": hms(block.get("server_s")),
                     "gpus": block.get("gpus"), "gpu_hours": "n/a" if gh is None else f"{gh:.2f}"})
    return rows


def cost_line(cost: Mapping[str, Any]) -> str:
    """The cost in one line (comparison.md): the total and each arm's GPU-hours."""
    t = _obj(cost.get("total"))
    arms = ", ".join(f"{ROLE_LABELS[r]} {_num(_obj(cost.get(r)).get('gpu_hours')) or 0.0:.2f}"
                     for r in ("a", "b", "aa") if _obj(cost.get(r)))
    gh = _num(t.get("gpu_hours")) or 0.0
    est = cost.get("estimated") or []
    return (f"{gh:.2f} GPU-hours ({arms}); {t.get('launches', 0)} server launch(es), {hms(t.get('launch_s'))} "
            f"to ready, {t.get('evals', 0)} eval(s) {hms(t.get('eval_s'))}, servers up {hms(t.get('server_s'))}"
            + (f" (estimated from timestamps: {', '.join(str(e) for e in est)})" if est else ""))


def look_rows(seq: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The look table of a sequential run: per look Δ, SE, z, its boundary, α spent and the decision."""
    rows = []
    for look in seq.get("looks") or []:
        if not isinstance(look, dict):
            continue
        z, bound = _num(look.get("z")), _num(look.get("bound"))
        spent = _num(look.get("alpha_spent"))
        cp = _num(look.get("conditional_power"))
        rows.append({"repeats": look.get("repeats"), "delta": pp(look.get("delta")),
                     "se": pp(look.get("se"), signed=False), "z": "n/a" if z is None else f"{z:+.2f}",
                     "bound": "—" if bound is None else f"±{bound:.2f}",
                     "alpha_spent": "—" if spent is None else f"{spent:.4f}",
                     "cp": "—" if cp is None else f"{cp:.3f}",
                     "decision": (look.get("verdict") or "continue") if look.get("stop") else "continue",
                     "reason": str(look.get("reason") or ""), "stop": bool(look.get("stop"))})
    return rows


def sequential_facts(seq: Mapping[str, Any]) -> dict[str, Any]:
    """Repeats run, why it stopped, what it saved against running every repeat (the fixed design)."""
    d = _obj(seq.get("design"))
    saved_gh = _num(seq.get("gpu_hours_saved"))
    per = _num(seq.get("gpu_hours_per_repeat"))
    return {"repeats_run": seq.get("repeats_run"), "max_repeats": seq.get("max_repeats", d.get("max_repeats")),
            "min_repeats": d.get("min_repeats"), "spending": d.get("spending"), "alpha": d.get("alpha"),
            "hypothesis": d.get("hypothesis"), "margin": d.get("margin"), "futility": d.get("futility"),
            "verdict": seq.get("verdict"), "reason": seq.get("reason"), "sentence": seq.get("sentence"),
            "stopped": bool(seq.get("stopped")), "repeats_saved": seq.get("repeats_saved"),
            "gpu_hours_saved": "n/a" if saved_gh is None else f"{saved_gh:.2f}",
            "gpu_hours_per_repeat": "n/a" if per is None else f"{per:.2f}",
            "estimator": seq.get("estimator")}


def sequential_line(seq: Mapping[str, Any]) -> str:
    """How a sequential run stopped, in one line (comparison.md)."""
    f = sequential_facts(seq)
    if not f["stopped"]:
        return (f"sequential design (at most {f['max_repeats']} repeats per arm): {f['repeats_run']} repeat(s) run, "
                "not decided yet (the run stopped before its next look; rerun to continue)")
    saved = (f"; saved {f['repeats_saved']} repeat(s) per arm against running all {f['max_repeats']}, "
             f"{f['gpu_hours_saved']} GPU-hours") if f["repeats_saved"] else ""
    return (f"sequential design ({f['spending']} alpha spending, at most {f['max_repeats']} repeats per arm): "
            f"stopped after {f['repeats_run']} repeat(s), {f['reason']}: {f['sentence']}{saved}")
