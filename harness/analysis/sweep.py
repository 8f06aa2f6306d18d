"""Sweeps: after a Hydra multirun (a callback in configs/config.yaml), one table of every comparison with p
adjusted across the sweep, from the stored ``comparison.json`` files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.analysis.cost import cost_from_manifest, sum_costs
from harness.results import schema
from harness.results.records import RecordError
from harness.results.schema import Cost, SweepRow, SweepSummary
from harness.stats.verdict import ALPHA, at_floor

SWEEP_SUMMARY = schema.SWEEP_FILE


def summarize_sweep(sweep_dir: str | Path, method: str = "holm", experiment: str | None = None) -> SweepSummary:
    """Collect each job's comparison.json under ``sweep_dir`` and adjust the p that decided each verdict by
    Holm or BH (a comparison.json of an unknown schema_version is refused, not misread)."""
    import numpy as np

    from harness.stats import adjust

    root = Path(sweep_dir)
    rows: list[SweepRow] = []
    costs = job_costs(root)
    # A job that failed or was interrupted has no comparison.json, but it is still one of the family of
    # comparisons: it counts with p = 1, so the adjustment of the others is not made laxer by its absence.
    for job in sorted(d for d in root.glob("job*") if d.is_dir() and not (d / schema.COMPARISON_FILE).exists()):
        rows.append(SweepRow(job=job.name, dir=str(job), label=job.name, missing=True, alpha=ALPHA,
                             overrides=job_overrides(job), gpu_hours=_gpu_hours(costs.get(job.name))))
    for path in sorted(root.glob(f"*/{schema.COMPARISON_FILE}")):
        c = schema.load_comparison(path)
        div = c.divergence
        rows.append(SweepRow(
            job=path.parent.name, dir=str(path.parent), label=path.parent.name, n=c.n,
            overrides=job_overrides(path.parent),
            accuracy_a=c.arms.a.accuracy, accuracy_b=c.arms.b.accuracy, delta=c.delta, delta_ci=c.delta_ci,
            p=c.p, p_value_floor=c.p_floor, p_value_at_floor=at_floor(c.p, c.p_floor),
            test_alpha=c.test_alpha or c.alpha, mde=c.mde, verdict=c.verdict, alpha=c.alpha, simulated=c.simulated,
            divergence=None if div is None else div.verdict, kld=None if div is None else div.kld_mean,
            divergence_p=div.p if div is not None and div.verdict in MEASURED else None,
            kld_aa=None if div is None else div.kld_mean_aa, gpu_hours=_gpu_hours(costs.get(path.parent.name)),
            test=c.test, qualification=c.qualification))
    ps = np.array([r.p if r.p is not None else 1.0 for r in rows], dtype=float)
    adj = adjust(ps, method) if len(rows) else ps
    rows = adjust_divergence(rows, method)
    adjusted = []
    labels = swept_labels([r.overrides or _dirname_overrides(r.job) for r in rows]) if rows else []
    for r, pa, label in zip(rows, adj, labels, strict=True):
        # A verdict that rests on a test (improved, regressed, equivalent, noninferior: `p` is that test's
        # p-value, compared with `test_alpha`) must survive the sweep's multiple-comparison adjustment.
        survives = not (r.verdict in ("improved", "regressed", "equivalent", "noninferior")
                        and pa >= (r.test_alpha if r.test_alpha is not None else r.alpha or ALPHA))
        adjusted.append(replace(r, p_adjusted=float(pa), label=label or r.job, verdict_unadjusted=r.verdict,
                                verdict=r.verdict if survives else "inconclusive"))
    adjusted.sort(key=lambda r: r.job)
    summary = SweepSummary(experiment=experiment if experiment is not None else _experiment_of(root),
                           correction=method, comparisons=adjusted, missing=[r.job for r in adjusted if r.missing],
                           simulated=any(r.simulated for r in adjusted),
                           cost=sum_costs(costs.values()) if costs else None)
    schema.write_sweep_summary(root / SWEEP_SUMMARY, summary)
    return summary


#: the divergence verdicts that rest on a test (its p); others (not_measured) are no member of the family
MEASURED = ("diverged", "indistinguishable")


def adjust_divergence(rows: list[SweepRow], method: str) -> list[SweepRow]:
    """The rows with each measured divergence's p adjusted across the jobs (a missing job counts with p = 1)
    and "diverged" only below α: a sweep stars no divergence that one job in twenty would show by chance."""
    import numpy as np

    from harness.stats import adjust

    family = [i for i, r in enumerate(rows) if r.divergence_p is not None]
    if not family:
        return rows
    family += [i for i, r in enumerate(rows) if r.missing]
    adj = adjust(np.asarray([rows[i].divergence_p if rows[i].divergence_p is not None else 1.0 for i in family],
                            dtype=float), method)
    out = list(rows)
    for i, pa in zip(family, adj, strict=True):
        r = rows[i]
        if r.missing:
            continue
        word = "diverged" if r.divergence == "diverged" and pa < (r.alpha or ALPHA) else "indistinguishable"
        out[i] = replace(r, divergence_p_adjusted=float(pa), divergence_unadjusted=r.divergence, divergence=word)
    return out


def job_costs(root: Path) -> dict[str, Cost]:
    """Each job's cost (its run summary's, else its manifest's, else computed from the launches its manifest
    recorded), by job directory name: a failed or interrupted job that held servers cost GPU time."""
    out: dict[str, Cost] = {}
    for job in sorted(d for d in root.iterdir() if d.is_dir()) if root.is_dir() else []:
        cost = _recorded_cost(job)
        if cost is not None:
            out[job.name] = cost
            continue
        path = job / schema.MANIFEST_FILE  # a job that stopped before its summary: the launches it recorded
        if path.exists():
            try:
                manifest = schema.load_manifest(path)
            except schema.SchemaError:
                continue
            if any(arm.get("launches") for arm in (manifest.get("arms") or {}).values()):
                out[job.name] = cost_from_manifest(manifest, job)
    return out


def _recorded_cost(job: Path) -> Cost | None:
    """The cost a job's summary.json, else its manifest.json, records (None when neither holds one)."""
    try:
        if (job / schema.RUN_SUMMARY_FILE).exists():
            cost = schema.load_run_summary(job / schema.RUN_SUMMARY_FILE).cost
            if cost is not None:
                return cost
        if (job / schema.MANIFEST_FILE).exists():
            doc = schema.load_manifest(job / schema.MANIFEST_FILE).get("cost")
            if isinstance(doc, dict) and doc.get("total"):
                return Cost.from_doc(doc)
    except (schema.SchemaError, RecordError):
        return None
    return None


def _gpu_hours(cost: Cost | None) -> float | None:
    return None if cost is None else cost.total.gpu_hours


def _experiment_of(root: Path) -> str | None:
    """The experiment the sweep's runs record in their manifests (names joined if a sweep spans several)."""
    names: list[str] = []
    for path in sorted(root.glob(f"*/{schema.MANIFEST_FILE}")):
        name = schema.load_manifest(path).get("experiment")
        if name and name not in names:
            names.append(str(name))
    return ", ".join(names) or None


def job_overrides(job: Path) -> list[str]:
    """The overrides a job ran with, from the last command its manifest recorded (``abh run K=V ...``)."""
    try:
        sessions = schema.load_manifest(job / schema.MANIFEST_FILE).get("sessions") or []
    except (OSError, schema.SchemaError):
        return []
    recorded = sessions[-1].get("argv") if sessions else None
    argv = [str(a) for a in recorded] if isinstance(recorded, list) else []
    head = 2 if argv[:2] == ["abh", "run"] else 1 if argv[:1] == ["abh run"] else len(argv)
    return [a for a in argv[head:] if a != "-m" and not a.startswith("--")]


def _dirname_overrides(job: str) -> list[str]:
    """The overrides of a job directory named by Hydra's override_dirname (``job3_a=1,b=2``)."""
    return job.split("_", 1)[1].split(",") if "_" in job else [job]


def swept_labels(jobs: list[list[str]]) -> list[str]:
    """Each job's overrides shortened to what varies across the sweep (``a=1,b=2,c=9`` -> ``a=1,b=2``)."""
    common = set.intersection(*(set(p) for p in jobs)) if len(jobs) > 1 else set()
    return [",".join(x for x in p if x not in common) or ",".join(p) for p in jobs]
