"""The chat API (``/v1/chat/completions``) as a protocol next to SGLang's and OpenAI completions: evals of chat
recipes against the simulator's chat endpoint, reasoning kept apart, and the protocol chosen per recipe."""

from __future__ import annotations

import json

import pytest
from helpers.waiting import PATIENCE_S

from abh_simulator import answer_key
from harness import exitcodes
from harness.tasks import registry
from tests.helpers.runs import abh


def _key(tmp_path, *specs: registry.TaskSpec):
    tasks = [(s.name, registry.build(s, registry.load_data(s))) for s in specs]
    return answer_key.write(tmp_path / "key.json", tasks)


def _samples(out):
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def test_mgsm_over_chat_records_reasoning_apart(tmp_path, sim_server):
    key = _key(tmp_path, registry.TaskSpec(name="mgsm_en", num_questions=30))
    server = sim_server("--answer-key", str(key), "--reasoning", "--accuracy", "0.8")
    out = tmp_path / "eval"
    done = abh("eval", "--url", server.url, "--task", "mgsm_en", "--num-questions", "30", "--out", str(out),
               "--no-progress", cwd=tmp_path)
    assert done.returncode == exitcodes.OK, done.stderr
    meta = json.loads((out / "eval.json").read_text())
    assert meta["api"] == "chat" and meta["task"] == "mgsm_en" and meta["upstream"].startswith("openai/simple-evals")
    rows = _samples(out)
    assert len(rows) == 30 and all(r["reasoning"].startswith("Let me think") for r in rows)
    assert all("reasoning" not in r["output"] for r in rows)
    right = sum(r["correct"] for r in rows)
    assert 15 <= right <= 30 and all(r["pred"] == r["label"] for r in rows if r["correct"])


@pytest.mark.slow
def test_sgl_eval_chat_is_graded_by_math_verify(tmp_path, sim_server):
    key = _key(tmp_path, registry.TaskSpec(name="gsm8k", recipe="sgl_eval_chat", num_questions=20))
    server = sim_server("--answer-key", str(key), "--accuracy", "0.7")
    out = tmp_path / "eval"
    done = abh("eval", "--url", server.url, "--recipe", "sgl_eval_chat", "--num-questions", "20", "--out", str(out),
               "--no-progress", cwd=tmp_path)
    assert done.returncode == exitcodes.OK, done.stderr
    rows = _samples(out)
    assert all("\\boxed{" in r["output"] for r in rows) and any(r["correct"] for r in rows)
    assert not any(r["correct"] for r in rows if str(r["pred"]) != str(r["label"]))


def test_the_sglang_recipe_sent_by_the_chat_api(tmp_path, sim_server):
    server = sim_server("--accuracy", "0.9")
    out = tmp_path / "eval"
    done = abh("eval", "--url", server.url, "--api", "chat", "--num-questions", "25", "--out", str(out),
               "--no-progress", cwd=tmp_path)
    assert done.returncode == exitcodes.OK, done.stderr
    meta = json.loads((out / "eval.json").read_text())
    assert meta["api"] == "chat" and meta["recipe"]["name"] == "sglang"
    rows = _samples(out)
    assert sum(r["correct"] for r in rows) >= 18 and not any("Question:" in r["output"] for r in rows)


@pytest.mark.parametrize("args,needle", [
    (("--recipe", "lm_eval_strict", "--api", "chat"), "train split"),
    (("--task", "mmlu"), "MMLU is not shipped"),
    (("--task", "gpqa_diamond"), "GPQA is not shipped"),
    (("--task", "mgsm_en", "--recipe", "vllm"), "recipe must be one of simple_evals"),
])
def test_bad_task_options_are_one_line_exit_2(tmp_path, args, needle):
    done = abh("eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "x"), *args, cwd=tmp_path)
    assert done.returncode == exitcodes.BAD_CONFIG and needle in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


@pytest.mark.slow  # two tasks through `abh ab` (the per-task data test stays in the default run)
def test_ab_of_two_tasks_on_two_running_servers(tmp_path, sim_server):
    key = _key(tmp_path, registry.TaskSpec(name="mgsm_en", num_questions=20))
    a = sim_server("--answer-key", str(key), "--accuracy", "0.7", "--build", "base")
    b = sim_server("--answer-key", str(key), "--accuracy", "0.8", "--build", "fix")
    out = tmp_path / "ab"
    done = abh("ab", a.url, b.url, "--out", str(out), "--task", "gsm8k,mgsm_en", "--num-questions", "20",
               "--parallel", "20", "--no-progress", cwd=tmp_path, timeout=PATIENCE_S)
    assert done.returncode == exitcodes.OK, done.stderr[-3000:]
    from harness.results import schema

    tc = schema.load_tasks(out / schema.TASKS_FILE)
    assert [r.key for r in tc.rows] == ["gsm8k", "mgsm_en"] and all(r.n == 20 for r in tc.rows)
    assert schema.load_eval_meta(out / "evals/b/r1/mgsm_en/eval.json")["api"] == "chat"
    assert "per task (holm across 2 tasks" in done.stdout


def test_ab_data_per_task_needs_its_name(tmp_path):
    done = abh("ab", "http://127.0.0.1:9", "http://127.0.0.1:10", "--out", str(tmp_path / "x"), "--task",
               "gsm8k,mmlu", "--data", "mmlu.csv", cwd=tmp_path)
    assert done.returncode == exitcodes.BAD_CONFIG and "give TASK=PATH" in done.stderr
    done = abh("ab", "http://127.0.0.1:9", "http://127.0.0.1:10", "--out", str(tmp_path / "x"), "--task",
               "gsm8k,hellaswag", cwd=tmp_path)
    assert done.returncode == exitcodes.BAD_CONFIG and "unknown task hellaswag" in done.stderr
