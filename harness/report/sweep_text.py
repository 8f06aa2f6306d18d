"""A sweep's table on the terminal: each comparison's Δ, interval, p before and after the sweep's adjustment, KLD
and verdict, the sweep's cost and the jobs that produced no comparison."""

from __future__ import annotations

from harness.analysis.cost import format_cost
from harness.report.divergence_section import kld_cell
from harness.report.words import p_bound
from harness.results.schema import SweepSummary


def format_sweep(s: SweepSummary) -> str:
    lines = []
    if s.simulated:
        lines.append("*** SIMULATED sweep ***")
    if s.experiment:
        lines.append(f"sweep of {s.experiment}")
    labels = [r.label or r.job for r in s.comparisons]
    width = max([10, *(len(x) for x in labels)])
    kld = any(r.divergence for r in s.comparisons)
    lines.append(f"{'comparison':<{width}} {'delta':>9} {'CI (1 - α)':>20} {'p':>8} {'p_adj':>8}"
                 + (f" {'KLD (A/A)':>20}" if kld else "") + "  verdict")
    for label, r in zip(labels, s.comparisons, strict=True):
        ci_s = f"[{100 * r.delta_ci[0]:+.2f}, {100 * r.delta_ci[1]:+.2f}]" if r.delta_ci else ""
        d = f"{100 * r.delta:+.2f}pp" if r.delta is not None else "n/a"
        p = p_bound(r.p, r.p_value_floor)
        p_adj = p_bound(r.p_adjusted, r.p_value_floor, raw=r.p)
        v = r.verdict + (f" (unadjusted: {r.verdict_unadjusted})"
                         if (r.verdict_unadjusted or r.verdict) != r.verdict else "")
        k = f" {kld_cell(r):>20}" if kld else ""
        lines.append(f"{label:<{width}} {d:>9} {ci_s:>20} {p:>8} {p_adj:>8}{k}  {v}" + (" †" if r.qualification else ""))
    lines.append(f"(p adjusted across {len(s.comparisons)} comparisons by {s.correction})")
    quals = sorted({r.qualification for r in s.comparisons if r.qualification})
    if quals:
        lines.append(f"(† {'; '.join(quals)})")
    if kld:
        lines.append("(KLD: mean nats/token A‖B, in brackets the A/A floor's; * = diverged beyond the floor, its p "
                     f"adjusted across the jobs by {s.correction} as accuracy's)")
    if s.cost:
        lines.append(f"cost of the sweep ({len(s.comparisons)} jobs):")
        lines.append(format_cost(s.cost))
    if s.missing:
        lines.append(f"{len(s.missing)} job(s) produced no comparison (failed or interrupted; counted with "
                     f"p = 1): {', '.join(s.missing)}. Rerun the sweep to resume them.")
    return "\n".join(lines)
