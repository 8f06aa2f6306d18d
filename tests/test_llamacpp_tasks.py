"""Real llama.cpp (SmolLM2-135M on the CPU, experiment cpu_smollm2): a run of two tasks on every launch, and a run
of a chat recipe through llama.cpp's own ``/v1/chat/completions`` (its chat template from the GGUF)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from helpers.llamacpp import needs_llamacpp

from harness import exitcodes
from harness.results import schema
from tests.helpers.runs import abh_run

pytestmark = [pytest.mark.slow, pytest.mark.real_model, needs_llamacpp()]
SMALL = ("progress=false", "divergence.enabled=false", "client.parallel=2")


def _mmlu_csv(path: Path) -> Path:
    rows = [("What is 2 + 2?", "3", "4", "5", "6", "B", "elementary_mathematics"),
            ("Which planet is closest to the Sun?", "Venus", "Earth", "Mercury", "Mars", "C", "astronomy"),
            ("What is the capital of France?", "Paris", "Rome", "Berlin", "Madrid", "A", "high_school_geography"),
            ("How many legs does a spider have?", "6", "10", "4", "8", "D", "high_school_biology")]
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["Question", "A", "B", "C", "D", "Answer", "Subject"])
        w.writerows(rows)
    return path


def test_two_tasks_on_every_llamacpp_launch(tmp_path):
    run = tmp_path / "run"
    done = abh_run("experiment=cpu_smollm2", "task=[gsm8k,mmlu]", "task.num_questions=4", "task.max_new_tokens=48",
                   f"tasks.mmlu.data_path={_mmlu_csv(tmp_path / 'mmlu.csv')}", f"hydra.run.dir={run}", *SMALL,
                   cwd=tmp_path, timeout=1500)
    assert done.returncode == exitcodes.OK, done.stdout[-3000:] + done.stderr[-3000:]
    tc = schema.load_tasks(run / schema.TASKS_FILE)
    assert [r.key for r in tc.rows] == ["gsm8k", "mmlu"] and not tc.simulated
    assert all(r.n == 4 for r in tc.rows) and tc.decision in ("inconclusive", "improved", "regressed", "equivalent")
    manifest = json.loads((run / "manifest.json").read_text())
    assert {k: len(v["launches"]) for k, v in manifest["arms"].items()} == {"a": 1, "b": 1}
    assert schema.load_eval_meta(run / "evals/a/r1/mmlu/eval.json")["api"] == "chat"
    assert schema.load_eval_meta(run / "evals/a/r1/gsm8k/eval.json")["api"] == "openai"
    assert "per task (holm across 2 tasks" in done.stdout and (run / "report.html").exists()


def test_a_chat_recipe_through_llamacpps_chat_endpoint(tmp_path):
    run = tmp_path / "run"
    done = abh_run("experiment=cpu_smollm2", "task=mgsm_en", "task.num_questions=4", "task.max_new_tokens=48",
                   f"hydra.run.dir={run}", *SMALL, cwd=tmp_path, timeout=1500)
    assert done.returncode == exitcodes.OK, done.stdout[-3000:] + done.stderr[-3000:]
    meta = schema.load_eval_meta(run / "evals/a/r1/eval.json")
    assert meta["api"] == "chat" and meta["task"] == "mgsm_en"
    rows = [json.loads(line) for line in (run / "evals/a/r1/samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["error"] is None and isinstance(r["output"], str) for r in rows)
    c = schema.load_comparison(run / schema.COMPARISON_FILE)
    assert c.n == 4 and not c.simulated
