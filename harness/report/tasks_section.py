"""The report and markdown of several tasks (a run of ``task=[...]``, ``abh compare --lm-eval``): the per-task
table first, the overall decision (Holm across the tasks), each task's breakdown by subject where it has one,
then (markdown) each task's own section; each task's full report is ``tasks/<key>/report.html``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TypedDict

from harness import __version__
from harness.report import plots, words
from harness.report.markdown import cell, table
from harness.results import schema
from harness.results.schema import TaskRow, TasksComparison


class TaskRowView(TypedDict):
    """A task of the page's table: its row of tasks.json, its Holm verdict's colour, the link to its own report
    (None: it has none)."""

    row: TaskRow
    color: str
    link: str | None


class TasksContext(TypedDict):
    """What report.html of several tasks reads (templates/tasks.html.j2), but its ``csp``."""

    title: str
    tc: TasksComparison
    rows: list[TaskRowView]
    simulated: bool
    correction: str
    level: str
    decision_color: str
    root: str
    generated: str
    version: str


class TasksPage(TasksContext):
    """The tasks page's context with its Content-Security-Policy."""

    csp: str


def load(root: Path) -> TasksComparison:
    return schema.load_tasks(Path(root) / schema.TASKS_FILE)


def _names(tc: TasksComparison) -> tuple[str, str]:
    return (tc.arm_names.a, tc.arm_names.b) if tc.arm_names else ("A", "B")


def context(root: Path) -> TasksContext:
    tc = load(root)
    a, b = _names(tc)
    rows: list[TaskRowView] = []
    for r in tc.rows:
        link = Path(r.dir) / "report.html"
        rows.append({"row": r, "color": plots.VERDICT_COLORS.get(r.verdict_holm, "#333333"),
                     "link": link.as_posix() if (Path(root) / link).exists() else None})
    return {"title": f"{b} vs {a}: {len(tc.rows)} tasks", "tc": tc, "rows": rows, "simulated": tc.simulated,
            "correction": tc.correction, "level": f"{100 * (1 - tc.alpha):g} %",
            "decision_color": plots.VERDICT_COLORS.get(tc.decision, "#333333"), "root": str(root),
            "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "version": __version__}


def render_html(root: Path) -> str:
    from harness.report import html

    ctx: TasksPage = {**context(root), "csp": html.csp()}
    return html.template("tasks.html.j2").render(**ctx)


def render_markdown(root: Path) -> str:
    tc = load(root)
    a, b = _names(tc)
    sim = "[SIMULATED] " if tc.simulated else ""
    level = f"{100 * (1 - tc.alpha):g} %"
    parts = [f"### {sim}abh: {cell(b)} (B) vs {cell(a)} (A), {len(tc.rows)} tasks: "
             f"**{words.verdict_label(tc.decision)}**"]
    if tc.simulated:
        parts.append("> **SIMULATED**: these numbers come from the harness's simulated engine, not a real model "
                     "server.")
    parts.append(table(["task", "recipe", "n", "accuracy A", "accuracy B", "Δ (B − A)", f"{level} CI", "p",
                        f"p ({tc.correction})", "verdict"],
                       [[r.key, f"{r.task} · {r.recipe}", r.n, words.pct(r.accuracy_a), words.pct(r.accuracy_b),
                         words.pp(r.delta), words.ci_pp(r.delta_ci), words.pval(r.p), words.pval(r.p_holm),
                         words.verdict_label(r.verdict_holm)
                         + (f" ({words.verdict_label(r.verdict)} on its own test)" if r.verdict != r.verdict_holm
                            else "")] for r in tc.rows],
                       ["l", "l", "r", "r", "r", "r", "r", "r", "r", "l"]))
    parts.append(f"**Overall decision: {words.verdict_label(tc.decision)}** — {cell(tc.decision_reason)}. "
                 f"The tasks' p-values are adjusted by {tc.correction} across the {len(tc.rows)} tasks (family-wise "
                 f"error at most α = {tc.alpha:g}).")
    for r in tc.rows:
        if r.categories or r.groups:
            parts.append(f"#### {cell(r.key)} by {'subject' if r.task == 'mmlu' else 'group'}")
            for rows, what in ((r.categories, "category"), (r.groups, "subject" if r.task == "mmlu" else "group")):
                if rows:
                    parts.append(table([what, "n", "accuracy A", "accuracy B", "Δ (B − A)"],
                                       [[g.group, g.n, words.pct(g.accuracy_a), words.pct(g.accuracy_b),
                                         words.pp(g.delta)] for g in rows], ["l", "r", "r", "r", "r"]))
    for r in tc.rows:
        md = Path(root) / r.dir / "comparison.md"
        if md.exists():
            body = md.read_text(encoding="utf-8").replace("\n### ", "\n#### ")
            if body.startswith("### "):  # its own title: the heading below names the task instead
                body = body.split("\n", 1)[1].lstrip()
            parts.append(f"---\n\n#### Task {cell(r.key)}\n\n" + body)  # a task's page starts with its headline
    return "\n\n".join(parts) + "\n"
