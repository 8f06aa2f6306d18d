"""The tasks of a run: each one's data (loaded once, before any server starts), its eval directory per
schedule item and its protocol. Several tasks are each evaluated on every launch into
``evals/<role>/r<k>/<task>/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.analysis.comparison import compare_dirs
from harness.analysis.multitask import TaskResult, apply_holm, compare_tasks
from harness.config import Config, task_specs
from harness.measure.evaluation import TaskBuilder
from harness.results import schema
from harness.results.schema import ArmNames, Comparison, TasksComparison
from harness.tasks.interface import Task
from harness.tasks.registry import TaskData, TaskSpec, api_for, build, load_data


@dataclass(frozen=True)
class RunTask:
    """One task of a run: ``key`` is "" for a run's only task (its evals keep the classic layout), else its name
    under ``tasks:``."""

    key: str
    spec: TaskSpec
    data: TaskData
    #: the task built without the server's model path: what it asks, by which protocols (checked before launch)
    probe: Task

    def eval_dir(self, run_dir: Path, rel: str) -> Path:
        return run_dir / rel / self.key if self.key else run_dir / rel

    def api(self, engine_api: str) -> str:
        return api_for(self.probe, engine_api, self.spec.api)

    def builder(self) -> TaskBuilder:
        spec, data = self.spec, self.data
        return lambda model_path: build(spec, data, model_path)


def load_tasks(cfg: Config) -> list[RunTask]:
    """Every task of the config with its data, each built once so bad data or options stop before any server."""
    out = []
    for where, spec in task_specs(cfg):
        data = load_data(spec)
        out.append(RunTask(where.split(".", 1)[1] if cfg.tasks else "", spec, data, build(spec, data)))
    return out


def combined_summary(summaries: Sequence[dict[str, Any]]) -> schema.EvalSummary:
    """One item's figures over its tasks' evals (their summaries, as the eval returns them): what the manifest
    records of the item, in the form of one eval's summary."""
    def total(k: str) -> Any:
        return sum(s.get(k) or 0 for s in summaries)

    return {"n": total("n"), "correct": total("correct"), "errors": total("errors"), "accuracy": None,
            "latency_s": total("latency_s"), "complete": all(s.get("complete") for s in summaries),
            "resumed": any(s.get("resumed") for s in summaries)}


def compare_run_tasks(tasks: Sequence[RunTask], dirs: dict[str, list[Path]], *, names: ArmNames,
                      command: list[str] | None, **kwargs: Any) -> tuple[dict[str, Comparison], TasksComparison]:
    """Each task's comparison over its eval directories, then the tasks compared together (Holm)."""
    comparisons: dict[str, Comparison] = {}
    results = []
    for t in tasks:
        c = compare_dirs([d / t.key for d in dirs["a"]], [d / t.key for d in dirs["b"]],
                         aa_dirs=[d / t.key for d in dirs["aa"]], **kwargs)
        c = replace(c, arm_names=names, command=command)
        comparisons[t.key] = c
        results.append(TaskResult(key=t.key, task=t.spec.name, recipe=t.probe.recipe.name,
                                  dir=f"{schema.TASKS_DIR}/{t.key}", comparison=c, upstream=t.probe.upstream or None,
                                  groups=t.probe.groups(), categories=categories_of(t.probe)))
    tc = compare_tasks(results, alpha=float(kwargs.get("alpha", 0.05)),
                       hypothesis=str(kwargs.get("hypothesis", "superiority")))
    return comparisons, replace(tc, arm_names=names, command=command)


def categories_of(task: Task) -> dict[str, str] | None:
    """The category of each group, for a task that has them (MMLU: simple-evals' subject2category)."""
    if task.name == "mmlu":
        from harness.tasks.mmlu import SUBJECT_CATEGORY

        return dict(SUBJECT_CATEGORY)
    return None


def write_task_outputs(root: Path, comparisons: dict[str, Comparison], tc: TasksComparison,
                       report: bool = True) -> list[Path]:
    """``tasks/<key>/comparison.json`` (+ comparison.md, report.html) per task, and ``tasks.json``; each task's
    comparison with its verdict after Holm (what its gate and report say)."""
    written = []
    for row in tc.rows:
        d = root / schema.TASKS_DIR / row.key
        d.mkdir(parents=True, exist_ok=True)
        schema.write_comparison(d / schema.COMPARISON_FILE, apply_holm(comparisons[row.key], row))
        written.append(d / schema.COMPARISON_FILE)
    schema.write_tasks(root / schema.TASKS_FILE, tc)
    written.append(root / schema.TASKS_FILE)
    if report:
        from harness.report import write_markdown, write_report

        for row in tc.rows:
            d = root / schema.TASKS_DIR / row.key
            written += [write_markdown(d), write_report(d)]
    return written
