"""Sweeps: after a Hydra multirun, one table of every comparison with p adjusted across the sweep.

Registered as a Hydra callback in configs/config.yaml; also usable on its own over a sweep directory
(``summarize_sweep(dir, method)``). Reads stored ``comparison.json`` files; never talks to servers.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.store import atomic_write_json, read_json

SWEEP_SUMMARY = "sweep_summary.json"


def summarize_sweep(sweep_dir: str | Path, method: str = "holm") -> dict[str, Any]:
    """Collect each job's comparison.json under ``sweep_dir``; adjust McNemar p by Holm or BH."""
    import numpy as np

    from harness.stats import adjust

    root = Path(sweep_dir)
    rows: list[dict[str, Any]] = []
    # A job that failed or was interrupted has no comparison.json, but it is still one of the family of
    # comparisons: it counts with p = 1, so the adjustment of the others is not made laxer by its absence.
    for job in sorted(d for d in root.glob("job*") if d.is_dir() and not (d / "comparison.json").exists()):
        rows.append({"job": job.name, "dir": str(job), "n": None, "accuracy_a": None, "accuracy_b": None,
                     "delta": None, "delta_ci": None, "p": None, "mde": None, "verdict": "not_comparable",
                     "alpha": 0.05, "simulated": False, "missing": True})
    for path in sorted(root.glob("*/comparison.json")):
        c = read_json(path)
        rows.append({"job": path.parent.name, "dir": str(path.parent), "n": c.get("n"),
                     "accuracy_a": c["arms"]["a"]["accuracy"], "accuracy_b": c["arms"]["b"]["accuracy"],
                     "delta": c.get("delta"), "delta_ci": c.get("delta_ci"), "p": c.get("p", c.get("p_value")),
                     "test_alpha": c.get("test_alpha") or c.get("alpha", 0.05),
                     "mde": c.get("mde"), "verdict": c.get("verdict"), "alpha": c.get("alpha", 0.05),
                     "simulated": bool(c.get("simulated"))})
    ps = np.array([r["p"] if r["p"] is not None else 1.0 for r in rows], dtype=float)
    adj = adjust(ps, method) if len(rows) else ps
    for r, pa, label in zip(rows, adj, swept_labels([r["job"] for r in rows]) if rows else [], strict=True):
        r["p_adjusted"] = float(pa)
        r["label"] = label
        # A verdict that rests on a test (improved, regressed, equivalent, noninferior: `p` is that test's
        # p-value, compared with `test_alpha`) must survive the sweep's multiple-comparison adjustment.
        r["verdict_unadjusted"] = r["verdict"]
        if (r["verdict"] in ("improved", "regressed", "equivalent", "noninferior")
                and pa >= r.get("test_alpha", r["alpha"])):
            r["verdict"] = "inconclusive"
    rows.sort(key=lambda r: r["job"])
    summary = {"schema_version": 1, "kind": "abh.sweep", "correction": method, "comparisons": rows,
               "missing": [r["job"] for r in rows if r.get("missing")],
               "simulated": any(r["simulated"] for r in rows)}
    atomic_write_json(root / SWEEP_SUMMARY, summary)
    return summary


def swept_labels(jobs: list[str]) -> list[str]:
    """Job directory names (``job3_a=1,b=2,c=9``) shortened to what varies across the sweep (``a=1,b=2``)."""
    parts = [j.split("_", 1)[1].split(",") if "_" in j else [j] for j in jobs]
    common = set.intersection(*(set(p) for p in parts)) if len(parts) > 1 else set()
    return [",".join(x for x in p if x not in common) or j for p, j in zip(parts, jobs, strict=True)]


def format_sweep(s: dict[str, Any]) -> str:
    lines = []
    if s.get("simulated"):
        lines.append("*** SIMULATED sweep ***")
    labels = [r.get("label") or r["job"] for r in s["comparisons"]]
    width = max([10, *(len(x) for x in labels)])
    lines.append(f"{'comparison':<{width}} {'delta':>9} {'CI (1 - α)':>20} {'p':>8} {'p_adj':>8}  verdict")
    for label, r in zip(labels, s["comparisons"], strict=True):
        ci = r.get("delta_ci") or [None, None]
        ci_s = f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}]" if ci[0] is not None else ""
        d = f"{100 * r['delta']:+.2f}pp" if r.get("delta") is not None else "n/a"
        p = f"{r['p']:.3g}" if r.get("p") is not None else "n/a"
        v = r["verdict"] + (f" (unadjusted: {r['verdict_unadjusted']})"
                            if r.get("verdict_unadjusted", r["verdict"]) != r["verdict"] else "")
        lines.append(f"{label:<{width}} {d:>9} {ci_s:>20} {p:>8} {r['p_adjusted']:>8.3g}  {v}")
    lines.append(f"(p adjusted across {len(s['comparisons'])} comparisons by {s['correction']})")
    if s.get("missing"):
        lines.append(f"{len(s['missing'])} job(s) produced no comparison (failed or interrupted; counted with "
                     f"p = 1): {', '.join(s['missing'])}. Rerun the sweep to resume them.")
    return "\n".join(lines)


def redact_multirun_yaml(sweep_dir: Path) -> None:
    """Hydra writes its record of the sweep's overrides (``multirun.yaml``) unredacted: redact it in place."""
    from harness.redact import redact_text

    path = Path(sweep_dir) / "multirun.yaml"
    if path.exists():
        text = path.read_text()
        if redact_text(text) != text:
            path.write_text(redact_text(text))


class SweepSummary(Callback):
    """Hydra callback: at the end of a multirun, write sweep_summary.json (+ report) and print the table."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.exists():
            return
        redact_multirun_yaml(sweep_dir)
        s = summarize_sweep(sweep_dir, str(config.stats.correction))
        print(format_sweep(s), file=sys.stdout, flush=True)
        if config.get("report", True):
            try:
                from harness.report import write_sweep_report

                write_sweep_report(sweep_dir)
            except ImportError:
                pass
