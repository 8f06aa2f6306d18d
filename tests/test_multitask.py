"""Several tasks in one run: every task on every launch, a verdict per task, one overall decision with the
family-wise error controlled by Holm across the tasks; its false-positive rate under a null on 3 tasks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness import exitcodes, stats
from harness.analysis.multitask import adjust, overall
from harness.cli.run import tasks_override
from harness.results import schema
from harness.results.schema import TaskRow
from tests.helpers.runs import ONE_EACH, abh_run_here

ALPHA = 0.05


# ------------------------------------------------------------------------------------------ the statistics
def _null_task(rng: np.random.Generator, n: int, flip: float = 0.06) -> tuple[np.ndarray, np.ndarray]:
    """One task under the null: per-question difficulty, and each arm's answer a fresh draw on a share of the
    questions (the run-to-run noise), the same law for both arms."""
    p = np.clip(rng.normal(0.6, 0.25, n), 0.02, 0.98)
    base = (rng.random(n) < p).astype(float)
    arms = []
    for _ in range(2):
        x = base.copy()
        redraw = rng.random(n) < flip
        x[redraw] = (rng.random(int(redraw.sum())) < p[redraw]).astype(float)
        arms.append(x)
    return arms[0], arms[1]


def null_fpr(reps: int, tasks: int = 3, n: int = 400, seed: int = 20) -> tuple[float, float]:
    """(share of runs whose overall decision claims a difference, the same without Holm) under the null."""
    rng = np.random.default_rng(seed)
    holm_hits = raw_hits = 0
    for _ in range(reps):
        verdicts, ps = [], []
        for _ in range(tasks):
            a, b = _null_task(rng, n)
            cmp = stats.compare_arms(stats.ArmRuns(a[None, :], ("la",)), stats.ArmRuns(b[None, :], ("lb",)),
                                     alpha=ALPHA, compute_mde=False)
            verdicts.append(cmp.verdict.word)
            ps.append(cmp.analysis.p)
        raw_hits += any(v in ("improved", "regressed") for v in verdicts)
        _, held = adjust(verdicts, ps, ALPHA)
        holm_hits += any(v in ("improved", "regressed") for v in held)
    return holm_hits / reps, raw_hits / reps


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_overall_decision_fpr_under_a_null_on_three_tasks_is_at_most_alpha():
    fpr, unadjusted = null_fpr(800)
    assert fpr <= ALPHA, fpr
    assert unadjusted > fpr  # what the adjustment buys: without it, "some task differs" is claimed more often


def _row(key: str, verdict: str, p: float | None, delta: float = 0.0) -> TaskRow:
    return TaskRow(key=key, task="gsm8k", recipe="sglang", dir=f"tasks/{key}", n=100, accuracy_a=0.5,
                   accuracy_b=0.5 + delta, delta=delta, delta_ci=[delta - 0.01, delta + 0.01], test="t", p=p,
                   p_holm=1.0, verdict=verdict, verdict_holm=verdict, verdict_reason="", error_rate=0.0)


def test_holm_keeps_only_the_differences_that_survive_across_the_tasks():
    p_adj, held = adjust(["regressed", "improved", "inconclusive"], [0.001, 0.03, 0.5], ALPHA)
    assert p_adj == pytest.approx([0.003, 0.06, 0.5]) and held == ["regressed", "inconclusive", "inconclusive"]
    _, held = adjust(["equivalent", "improved"], [None, 0.02], ALPHA)  # a task with no superiority p counts as 1
    assert held == ["equivalent", "improved"]


def test_overall_decision_rules():
    assert overall([_row("a", "regressed", 0.001), _row("b", "improved", 0.001)], "superiority", ALPHA)[0] == "regressed"
    assert overall([_row("a", "improved", 0.001), _row("b", "inconclusive", 0.5)], "superiority", ALPHA)[0] == "improved"
    assert overall([_row("a", "not_comparable", None), _row("b", "improved", 0.001)], "superiority",
                   ALPHA)[0] == "not_comparable"
    assert overall([_row("a", "noninferior", None), _row("b", "improved", 0.01)], "noninferiority",
                   ALPHA)[0] == "improved"
    assert overall([_row("a", "noninferior", None), _row("b", "noninferior", None)], "noninferiority",
                   ALPHA)[0] == "noninferior"
    assert overall([_row("a", "noninferior", None), _row("b", "inconclusive", 0.3)], "noninferiority",
                   ALPHA)[0] == "inconclusive"
    assert overall([_row("a", "equivalent", None), _row("b", "equivalent", None)], "superiority",
                   ALPHA)[0] == "equivalent"


# ------------------------------------------------------------------------------------------ the command line
def test_task_list_becomes_one_entry_per_task():
    assert tasks_override(["task=[gsm8k,mmlu]", "task.num_questions=5", "tasks.mmlu.data_path=/x"]) == [
        "+task@tasks.gsm8k=gsm8k", "+task@tasks.mmlu=mmlu", "tasks.gsm8k.num_questions=5",
        "tasks.mmlu.num_questions=5", "tasks.mmlu.data_path=/x"]
    assert tasks_override(["task=[mmlu]"]) == ["task=mmlu"]
    assert tasks_override(["task=gsm8k_heldout", "task.num_questions=3"]) == ["task=gsm8k_heldout",
                                                                             "task.num_questions=3"]


# ------------------------------------------------------------------------------------------ a run
def _mmlu_csv(path: Path, n: int = 60) -> Path:
    import csv

    subjects = ["astronomy", "anatomy", "formal_logic"]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["Question", "A", "B", "C", "D", "Answer", "Subject"])
        w.writeheader()
        for i in range(n):
            w.writerow({"Question": f"Synthetic question number {i}?", "A": f"a{i}", "B": f"b{i}", "C": f"c{i}",
                        "D": f"d{i}", "Answer": "ABCD"[i % 4], "Subject": subjects[i % 3]})
    return path


BASE = ("progress=false", "client.parallel=64", "divergence.enabled=false", *ONE_EACH)


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_a_run_of_three_tasks_gives_a_verdict_per_task_and_one_decision(tmp_path, capsys):
    mmlu = _mmlu_csv(tmp_path / "mmlu.csv")
    run = tmp_path / "run"
    code = abh_run_here("task=[gsm8k,mmlu,mgsm_en]", "task.num_questions=40", f"tasks.mmlu.data_path={mmlu}",
                        f"hydra.run.dir={run}", *BASE)
    out = capsys.readouterr().out
    assert code == exitcodes.OK, out
    tc = schema.load_tasks(run / schema.TASKS_FILE)
    assert [r.key for r in tc.rows] == ["gsm8k", "mmlu", "mgsm_en"] and tc.correction == "holm"
    assert tc.decision in ("improved", "regressed", "inconclusive", "equivalent") and tc.simulated
    summary = schema.load_run_summary(run / schema.RUN_SUMMARY_FILE)
    assert summary.verdict == tc.decision and set(summary.tasks or {}) == {"gsm8k", "mmlu", "mgsm_en"}
    manifest = json.loads((run / "manifest.json").read_text())
    # one launch per arm served every task (no extra launches)
    assert {k: len(v["launches"]) for k, v in manifest["arms"].items()} == {"a": 1, "b": 1}
    for role in ("a", "b"):
        for key in ("gsm8k", "mmlu", "mgsm_en"):
            meta = schema.load_eval_meta(run / "evals" / role / "r1" / key / "eval.json")
            assert meta["num_questions"] == 40 and meta["launch"] == f"{role}-1"
    mmlu_meta = schema.load_eval_meta(run / "evals/a/r1/mmlu/eval.json")
    assert mmlu_meta["api"] == "chat" and len(mmlu_meta["groups"]) == 40
    row = next(r for r in tc.rows if r.key == "mmlu")
    assert {g.group for g in row.groups} == {"astronomy", "anatomy", "formal_logic"} and row.categories
    for key in ("gsm8k", "mmlu", "mgsm_en"):
        c = schema.load_comparison(run / "tasks" / key / "comparison.json")
        assert c.n == 40 and (run / "tasks" / key / "report.html").exists()
    md = (run / "comparison.md").read_text()
    head = md.split("\n\n")
    assert "3 tasks" in head[0] and head[1 if not tc.simulated else 2].startswith("| task | recipe |")
    assert "#### mmlu by subject" in md and "Task gsm8k" in md
    html = (run / "report.html").read_text()
    assert html.index('id="tasks"') < html.index('id="decision"') and "astronomy" in html
    assert "per task (holm across 3 tasks" in out and "overall:" in out
    # rerunning resumes: every task of every eval is kept
    assert abh_run_here("task=[gsm8k,mmlu,mgsm_en]", "task.num_questions=40", f"tasks.mmlu.data_path={mmlu}",
                        f"hydra.run.dir={run}", *BASE) == exitcodes.OK
    again = capsys.readouterr()
    assert (again.out + again.err).count("already complete, kept") == 2


@pytest.mark.parametrize("args,needle", [
    (("task=[gsm8k,nope]",), "nope"),
    (("task=[gsm8k,gpqa_diamond]",), "GPQA is not shipped with abh"),
    (("task=[gsm8k,mgsm_en]", "tasks.mgsm_en.recipe=vllm"), "recipe must be one of simple_evals"),
    (("task=[gsm8k,mgsm_en]", "experiment.sequential=true", "experiment.max_repeats=3"), "several tasks"),
])
def test_bad_tasks_stop_before_any_server_with_one_line(tmp_path, capsys, args, needle):
    code = abh_run_here(*args, f"hydra.run.dir={tmp_path / 'run'}", *BASE)
    captured = capsys.readouterr()
    assert code == exitcodes.BAD_CONFIG
    text = captured.out + captured.err
    assert needle in text
    assert not (tmp_path / "run" / "servers").exists()
