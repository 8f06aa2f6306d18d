"""Several tasks compared on the same launches: a verdict per task and one overall decision, the family-wise
error rate held across the tasks by Holm's step-down procedure on each task's superiority p
(``verdict_holm``). Overall: ``not_comparable`` or ``regressed`` when any task is; the claims of no difference
need every task to show them (intersection-union); else ``improved`` when any task is, or ``inconclusive``."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from harness.results.eval_store import StoreError, load_scored
from harness.results.schema import Comparison, GroupRow, TaskRow, TasksComparison
from harness.stats.multiple import holm
from harness.stats.verdict import ALPHA

CORRECTION = "holm"
#: what a task's verdict must be for the overall claims of no difference (intersection-union)
_NONINFERIOR = frozenset({"noninferior", "improved", "equivalent"})


@dataclass(frozen=True)
class TaskResult:
    """One task's comparison and what names it."""

    key: str
    task: str
    recipe: str
    dir: str
    comparison: Comparison
    upstream: str | None = None
    #: per-question group (MMLU subject) of the compared questions, when the task has groups
    groups: Sequence[str] | None = None
    categories: Mapping[str, str] | None = None


def superiority_p(c: Comparison) -> float | None:
    """The two-sided superiority test's p of a comparison, when its verdict rested on it (else None)."""
    if c.p is None or c.test is None:
        return None
    if c.test.startswith(("TOST", "non-inferiority", "error bounds")):
        return None
    return float(c.p)


def _arm_means(dirs: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """(question ids, per-question mean over the arm's runs) of stored evals (None when unreadable)."""
    try:
        runs = [load_scored(Path(d)) for d in dirs]
    except StoreError:
        return None
    if not runs:
        return None
    first = runs[0]
    questions = first.questions if first.questions is not None else np.asarray(first.meta.get("indices") or [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a question no run answered: NaN
        means = np.nanmean(np.vstack([r.scores for r in runs]), axis=0)
    return questions, means


def group_rows(c: Comparison, groups: Sequence[str], categories: Mapping[str, str] | None = None
               ) -> tuple[list[GroupRow], list[GroupRow]]:
    """Each group's (and category's) accuracy of both arms over the questions both answered."""
    a, b = _arm_means(c.arms.a.dirs), _arm_means(c.arms.b.dirs)
    if a is None or b is None or len(groups) != a[1].size or a[1].size != b[1].size:
        return [], []
    ok = np.isfinite(a[1]) & np.isfinite(b[1])
    labels = np.asarray(list(groups), dtype=object)

    def rows(keys: np.ndarray) -> list[GroupRow]:
        out = []
        for g in sorted(set(keys[ok].tolist())):
            m = ok & (keys == g)
            acc_a, acc_b = float(a[1][m].mean()), float(b[1][m].mean())
            out.append(GroupRow(group=str(g), n=int(m.sum()), accuracy_a=acc_a, accuracy_b=acc_b,
                                delta=acc_b - acc_a))
        return out

    cats = rows(np.asarray([categories.get(g, "other") for g in labels], dtype=object)) if categories else []
    return rows(labels), cats


def compare_tasks(results: Sequence[TaskResult], alpha: float = ALPHA, hypothesis: str = "superiority"
                  ) -> TasksComparison:
    """The per-task table and the overall decision (see the module docstring)."""
    if not results:
        raise ValueError("no task to compare")
    adjusted, verdicts = adjust([r.comparison.verdict for r in results],
                                [superiority_p(r.comparison) for r in results], alpha)
    rows: list[TaskRow] = []
    m = len(results)
    for r, p_adj, verdict in zip(results, adjusted, verdicts, strict=True):
        c = r.comparison
        groups, cats = group_rows(c, r.groups, r.categories) if r.groups else ([], [])
        reason = c.verdict_reason if verdict == c.verdict else (
            f"{c.verdict} on its own test (p = {superiority_p(c):.3g}) but not after Holm across {m} tasks "
            f"(adjusted p = {p_adj:.3g} >= α = {alpha:g})")
        rows.append(TaskRow(key=r.key, task=r.task, recipe=r.recipe, dir=r.dir, n=c.n,
                            accuracy_a=c.arms.a.accuracy, accuracy_b=c.arms.b.accuracy, delta=c.delta,
                            delta_ci=list(c.delta_ci), test=c.test, p=superiority_p(c), p_holm=float(p_adj),
                            verdict=c.verdict, verdict_holm=verdict, verdict_reason=reason,
                            error_rate=c.error_rate, simulated=c.simulated, upstream=r.upstream,
                            groups=groups, categories=cats))
    decision, why = overall(rows, hypothesis, alpha)
    return TasksComparison(decision=decision, decision_reason=why, alpha=alpha, correction=CORRECTION,
                           hypothesis=hypothesis, rows=rows, simulated=any(r.simulated for r in rows))


def adjust(verdicts: Sequence[str], ps: Sequence[float | None], alpha: float) -> tuple[list[float], list[str]]:
    """(Holm-adjusted superiority p, verdict after the adjustment) of each task: ``improved`` / ``regressed``
    stand only below α after the adjustment (a p of None counts as 1)."""
    adjusted = holm(np.array([1.0 if p is None else p for p in ps], dtype=float))
    out = [("inconclusive" if v in ("improved", "regressed") and not pa < alpha else v)
           for v, pa in zip(verdicts, adjusted, strict=True)]
    return [float(x) for x in adjusted], out


def overall(rows: Sequence[TaskRow], hypothesis: str, alpha: float) -> tuple[str, str]:
    """The overall decision over the tasks' Holm-adjusted verdicts, and why."""
    def named(word: str) -> list[str]:
        return [r.key for r in rows if r.verdict_holm == word]

    m = len(rows)
    held = f"Holm across {m} tasks at α = {alpha:g}"
    if named("not_comparable"):
        return "not_comparable", f"not comparable on {', '.join(named('not_comparable'))}"
    if named("regressed"):
        extra = f"; improved on {', '.join(named('improved'))}" if named("improved") else ""
        return "regressed", f"regressed on {', '.join(named('regressed'))} ({held}){extra}"
    if hypothesis == "noninferiority":
        if all(r.verdict_holm in _NONINFERIOR for r in rows):
            if named("improved"):
                return "improved", (f"non-inferior on every one of the {m} tasks and improved on "
                                    f"{', '.join(named('improved'))} ({held})")
            return "noninferior", f"non-inferior on every one of the {m} tasks (each at its own level: intersection-union)"
        return "inconclusive", "non-inferiority not shown on " + ", ".join(
            f"{r.key} ({r.verdict_holm})" for r in rows if r.verdict_holm not in _NONINFERIOR)
    if hypothesis == "equivalence" or not named("improved"):
        if all(r.verdict_holm == "equivalent" for r in rows):
            return "equivalent", f"equivalent on every one of the {m} tasks (each TOST at α: intersection-union)"
    if named("improved"):
        return "improved", f"improved on {', '.join(named('improved'))} and regressed on none ({held})"
    return "inconclusive", f"no task differs after {held}; " + "; ".join(
        f"{r.key}: {r.verdict_holm} (Δ = {100 * r.delta:+.2f} pp)" for r in rows)


def apply_holm(c: Comparison, row: TaskRow) -> Comparison:
    """A task's comparison with its verdict after the Holm adjustment (what its exit code and gate read)."""
    if row.verdict_holm == c.verdict:
        return c
    return replace(c, verdict=row.verdict_holm, verdict_reason=row.verdict_reason)


def format_tasks(tc: TasksComparison) -> str:
    """The per-task table and the overall decision, for the terminal."""
    lines = ["*** SIMULATED: results come from the simulated engine, not a real server ***"] if tc.simulated else []
    wk, wr = max([4, *(len(r.key) for r in tc.rows)]), max([6, *(len(r.recipe) for r in tc.rows)])
    head = f"{'task':<{wk}} {'recipe':<{wr}} {'n':>5} {'A':>7} {'B':>7} {'Δ pp':>7} {'p':>8} {'p Holm':>8}  verdict"
    lines += [f"per task ({tc.correction} across {len(tc.rows)} tasks, α = {tc.alpha:g}):", head]
    for r in tc.rows:
        p = "n/a" if r.p is None else f"{r.p:.3g}"
        lines.append(f"{r.key:<{wk}} {r.recipe:<{wr}} {r.n:>5} {100 * r.accuracy_a:>6.2f}% {100 * r.accuracy_b:>6.2f}% "
                     f"{100 * r.delta:>+7.2f} {p:>8} {r.p_holm:>8.3g}  {r.verdict_holm}"
                     + (f" (own test: {r.verdict})" if r.verdict != r.verdict_holm else ""))
    lines.append(f"overall: {tc.decision.upper()} — {tc.decision_reason}")
    return "\n".join(lines)
