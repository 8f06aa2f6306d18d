"""The GSM8K task reproduces SGLang's recipe byte for byte (prompts, sampling fields, warm-up, parser)."""

from __future__ import annotations

import ast
import json
import re

import pytest
from conftest import TEST_JSONL, TRAIN_IS_CANONICAL, TRAIN_JSONL
from helpers.runs import abh_run_here
from helpers.waiting import PATIENCE_S

from harness.tasks import gsm8k
from harness.tasks.gsm8k import GSM8K, INVALID, DatasetError, RecipeConfig, get_answer_value


def sglang_reference_parser(answer_str: str) -> int:
    """SGLang's `get_answer_value`, as written in benchmark/gsm8k/bench_sglang.py."""
    answer_str = answer_str.replace(",", "")
    numbers = re.findall(r"\d+", answer_str)
    if len(numbers) < 1:
        return INVALID
    try:
        return ast.literal_eval(numbers[-1])
    except SyntaxError:
        return INVALID


@pytest.fixture(scope="module")
def rows():
    return [json.loads(line) for line in TEST_JSONL.read_text().splitlines()]


@pytest.fixture(scope="module")
def test_set():
    return gsm8k.load(TEST_JSONL)


def test_canonical_set_loads_and_is_checked(test_set):
    assert len(test_set) == 1319
    assert test_set.canonical
    assert test_set.sha256 == gsm8k.CANONICAL_TEST_HASH
    assert gsm8k.load(TEST_JSONL.parent).sha256 == test_set.sha256  # directory form


def test_noncanonical_set_is_refused_with_one_clear_message(tmp_path, rows):
    p = tmp_path / "test.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows[:100]) + "\n")
    with pytest.raises(DatasetError, match="not the canonical GSM8K test set: 100 rows"):
        gsm8k.load(p)
    ds = gsm8k.load(p, allow_noncanonical=True)
    assert not ds.canonical and len(ds) == 100
    # same row count, one character changed: the hash catches it
    edited = [dict(r) for r in rows]
    edited[7]["answer"] = edited[7]["answer"].replace("####", "#### 1")
    p.write_text("\n".join(json.dumps(r) for r in edited) + "\n")
    with pytest.raises(DatasetError, match="content sha256"):
        gsm8k.load(p)


@pytest.mark.parametrize("content,msg", [("not json\n", "not valid JSON"), ('{"q": 1}\n', "string fields")])
def test_malformed_data_is_refused(tmp_path, content, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(DatasetError, match=msg):
        gsm8k.load(p, allow_noncanonical=True)
    with pytest.raises(DatasetError, match="not found"):
        gsm8k.load(tmp_path / "missing.jsonl")


def test_embedded_test_set_is_the_default_and_checked(tmp_path, monkeypatch):
    ds = gsm8k.load()
    assert ds.canonical and len(ds) == 1319 and ds.source == str(gsm8k.EMBEDDED_TEST)
    assert gsm8k.load("").sha256 == ds.sha256 == gsm8k.CANONICAL_TEST_HASH
    import hashlib

    assert hashlib.sha256(gsm8k.EMBEDDED_TEST.read_bytes()).hexdigest() == gsm8k.EMBEDDED_TEST_FILE_SHA256
    lic = (gsm8k.EMBEDDED_DIR / "LICENSE").read_text()
    assert "MIT License" in lic and "OpenAI" in lic
    assert gsm8k.EMBEDDED_TEST_FILE_SHA256 in (gsm8k.EMBEDDED_DIR / "README.md").read_text()
    test, train = gsm8k.load_splits(None)
    assert test.source == ds.source and train is None
    # a damaged embedded copy is refused in one line, not read
    bad = tmp_path / "test.jsonl"
    bad.write_bytes(gsm8k.EMBEDDED_TEST.read_bytes().replace(b"Janet", b"Jane", 1))
    monkeypatch.setattr(gsm8k, "EMBEDDED_TEST", bad)
    with pytest.raises(DatasetError, match="embedded GSM8K test set .* damaged"):
        gsm8k.load()


def test_train_split_is_not_shipped_and_heldout_says_so_in_one_line(tmp_path):
    with pytest.raises(DatasetError) as e:
        gsm8k.load_splits(None, None, "heldout")
    msg = str(e.value)
    assert "\n" not in msg and "task.train_path" in msg and "hf:openai/gsm8k" in msg
    with pytest.raises(DatasetError, match="only the GSM8K test split"):
        gsm8k.load(None, "train")
    # the train file beside a local test file (or in its directory) is found
    (tmp_path / "test.jsonl").write_bytes(gsm8k.EMBEDDED_TEST.read_bytes())
    assert gsm8k.train_source_for(tmp_path / "test.jsonl") is None  # no train.jsonl there
    (tmp_path / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    assert gsm8k.train_source_for(tmp_path / "test.jsonl") == str(tmp_path / "train.jsonl")
    assert gsm8k.train_source_for(tmp_path) == str(tmp_path / "train.jsonl")
    assert gsm8k.train_source_for("hf:openai/gsm8k") == "hf:openai/gsm8k"
    test, train = gsm8k.load_splits(tmp_path, None, "heldout", allow_noncanonical=True)
    assert train is not None and train.rows == [{"question": "q", "answer": "#### 1"}] and not train.canonical


def test_non_utf8_data_is_one_clear_line(tmp_path):
    p = tmp_path / "latin1.jsonl"
    p.write_bytes('{"question": "caf\u00e9", "answer": "#### 1"}\n'.encode("latin-1"))
    with pytest.raises(DatasetError) as e:
        gsm8k.load(p, allow_noncanonical=True)
    assert "not UTF-8" in str(e.value) and "0xe9" in str(e.value) and f"{p}:1" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_non_utf8_data_exits_2_from_both_commands(tmp_path, capsys):
    import subprocess
    import sys

    p = tmp_path / "bad.jsonl"
    p.write_bytes(b"\xff\xfe not utf8\n")
    # abh run in this process (a dry run: no server), abh eval as the command
    code = abh_run_here(f"hydra.run.dir={tmp_path / 'run'}", f"task.data_path={p}", "dry_run=true")
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert "not UTF-8" in err and "Traceback" not in err
    env_eval = [sys.executable, "-m", "harness.cli.main", "eval", "--url", "http://127.0.0.1:9", "--out",
                str(tmp_path / "ev"), "--data", str(p)]
    r = subprocess.run(env_eval, capture_output=True, text=True, timeout=PATIENCE_S)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "not UTF-8" in r.stderr and "Traceback" not in r.stderr


def test_question_from_prompt_is_the_inverse_of_the_prompt_builder(test_set):
    task = GSM8K(test_set, RecipeConfig(num_questions=50))
    for q in task.questions:
        assert gsm8k.question_from_prompt(q.prompt) == q.question.strip()
    assert gsm8k.question_from_prompt("Question: a\nAnswer: 1\n\nQuestion: b?\nAnswer:") == "b?"
    assert gsm8k.question_from_prompt("Question: tail only") == "tail only"
    assert gsm8k.question_from_prompt("no block here") is None


def test_all_1319_prompts_match_the_brief_byte_for_byte(test_set, rows):
    task = GSM8K(test_set, RecipeConfig())
    assert len(task.questions) == 1319
    shots = ""
    for i in range(5):
        shots += "Question: " + rows[i]["question"] + "\nAnswer:" + " " + rows[i]["answer"] + "\n\n"
    for i, q in enumerate(task.questions):
        assert q.index == i
        assert q.prompt == shots + "Question: " + rows[i]["question"] + "\nAnswer:"
        assert q.label == sglang_reference_parser(rows[i]["answer"])
    assert task.questions[0].prompt.endswith("Answer:")
    assert task.few_shot == shots
    # the block is held once by the task, not once per question: each prompt is made from it when asked for
    assert all(q.head is task.few_shot for q in task.questions)


def test_sampling_fields_and_warmup_match_the_brief(test_set):
    task = GSM8K(test_set, RecipeConfig())
    expected = {
        "skip_special_tokens": True, "spaces_between_special_tokens": True, "max_new_tokens": 512,
        "min_new_tokens": 0, "n": 1, "stop": ["Question", "Assistant:", "<|separator|>"], "stop_token_ids": [],
        "stop_regex": [], "temperature": 0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
        "frequency_penalty": 0.0, "presence_penalty": 0.0, "ignore_eos": False, "regex": None,
        "json_schema": None,
    }
    body = task.generate_body(task.questions[3])
    assert json.dumps(body["sampling_params"], sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert body["text"] == task.questions[3].prompt
    warm = task.warmup_body()
    assert warm["text"] == task.few_shot
    assert warm["sampling_params"] == {"max_new_tokens": 0}  # RuntimeEndpoint.cache_prefix sends nothing else
    assert type(body["sampling_params"]["temperature"]) is int  # bench_sglang.py's temperature=0


@pytest.mark.parametrize("model_path,extra", [
    ("Qwen/Qwen2.5-7B-Instruct", "<|im_end|>"),
    ("meta-llama/Llama-3.1-8B-Instruct", "<|eot_id|>"),
    ("deepseek-ai/DeepSeek-V3", "<｜end▁of▁sentence｜>"),
    ("deepseek-ai/DeepSeek-R1", "<｜end▁of▁sentence｜>"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "</s>"),
    ("deepseek-ai/DeepSeek-V4-Pro", None),
    ("Qwen/Qwen2.5-7B", None),
    (None, None),
])
def test_stop_list_follows_model_path(test_set, model_path, extra):
    task = GSM8K(test_set, RecipeConfig(model_path=model_path))
    assert task.stop() == ["Question", "Assistant:", "<|separator|>"] + ([extra] if extra else [])


TRICKY = [
    "The answer is 1,234", "#### 72", "-5", "3.50", "It is 05", "no digits here", "", "1,000,000 dollars",
    "#### 18\n\nQuestion", "answer: 0", "007", "x = 12 and y = 0012", "١٢", "１２", "costs $1,2,3", "12.",
    "The total is 4 + 5 = 9.", "Answer: -0", "10e5", "1_000", "a 5 then 6abc", "\u0661", "9" * 40,
]


@pytest.mark.parametrize("text", TRICKY)
def test_parser_matches_sglang_on_tricky_outputs(text):
    assert get_answer_value(text) == sglang_reference_parser(text)


def test_parser_known_values():
    assert get_answer_value("-5") == 5
    assert get_answer_value("3.50") == 50
    assert get_answer_value("05") == INVALID
    assert get_answer_value("none") == INVALID
    assert get_answer_value("1,234") == 1234


def test_heldout_recipe_takes_shots_from_train(test_set):
    train = gsm8k.load(TRAIN_JSONL, split="train", allow_noncanonical=not TRAIN_IS_CANONICAL)
    task = GSM8K(test_set, RecipeConfig(name="heldout", num_questions=10), train)
    test_questions = {r["question"] for r in test_set.rows}
    assert train.rows[0]["question"] in task.few_shot
    assert not any(q in task.few_shot for q in test_questions)
    with pytest.raises(DatasetError, match="train split"):
        GSM8K(test_set, RecipeConfig(name="heldout"))


def test_options_and_bad_values(test_set):
    task = GSM8K(test_set, RecipeConfig(num_questions=10, num_shots=2, max_new_tokens=64))
    assert len(task.questions) == 10 and task.few_shot.count("Question: ") == 2
    assert task.sampling_params()["max_new_tokens"] == 64
    with pytest.raises(DatasetError, match="unknown recipe"):
        GSM8K(test_set, RecipeConfig(name="nope"))
    with pytest.raises(DatasetError):
        GSM8K(test_set, RecipeConfig(num_questions=0))


@pytest.mark.slow
def test_fresh_copy_without_shared_data_runs_offline(tmp_path):
    """A checkout with no ../shared beside it and no network (HF_HUB_OFFLINE=1) runs `abh run` on the embedded set."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    copy = tmp_path / "clone" / "abh"
    skip = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache", ".mypy_cache",
                                  ".venv")
    # the checkout's own run outputs (./results) stay behind; harness/results is code and is copied
    shutil.copytree(root, copy, ignore=lambda d, names: {*skip(d, names), *(["results"] if Path(d) == root else [])})
    assert (copy / "harness" / "results" / "schema.py").is_file()
    assert not (copy.parent.parent / "shared").exists() and not (copy.parent / "shared").exists()
    env = {**os.environ, "PYTHONPATH": str(copy), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "harness.cli.main", "run", f"hydra.run.dir={run}", "task.num_questions=100",
                        "experiment.repeats=1", "report=false"], cwd=copy, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((run / "manifest.json").read_text())
    assert str(copy / "harness" / "tasks" / "data" / "gsm8k" / "test.jsonl") in json.dumps(manifest)


@pytest.mark.parametrize("recipe", [RecipeConfig(), RecipeConfig(repeats=1),
                                    RecipeConfig(name="vllm", num_questions=5, num_shots=2, max_new_tokens=9,
                                                 model_path="m", extra_stop=["x"], repeats=8)])
def test_a_recipe_is_recorded_as_it_always_was(recipe: RecipeConfig) -> None:
    """``eval.json``'s ``recipe`` (a resume compares it): every field in the dataclass's order, ``repeats`` only
    when it is not 1."""
    from dataclasses import asdict

    before = {k: v for k, v in asdict(recipe).items() if k != "repeats" or v not in (None, 1)}
    assert recipe.to_dict() == before and list(recipe.to_dict()) == list(before)


def _rows_file(tmp_path, rows) -> str:
    p = tmp_path / "dups.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def test_a_question_twice_with_two_answers_is_refused_naming_both_lines(tmp_path, capsys):
    rows = [{"question": f"q{i}", "answer": f"#### {i}"} for i in range(5)]
    rows.insert(4, {"question": "q1", "answer": "#### 7"})  # line 5 asks line 2's question, another answer
    with pytest.raises(DatasetError) as e:
        gsm8k.load(_rows_file(tmp_path, rows), allow_noncanonical=True)
    assert "line 2 and line 5 ask the same question with different answers (1 and 7)" in str(e.value)
    # the same answer twice: accepted, with one warning line naming both
    rows[4] = {"question": "q1", "answer": "again #### 1"}
    assert len(gsm8k.load(_rows_file(tmp_path, rows), allow_noncanonical=True)) == 6
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 2 and line 5 ask the same question with the same answer" in err[0]
    assert gsm8k.load(None).canonical and not capsys.readouterr().err  # the canonical set: no repeat at all


def test_conflicting_duplicates_exit_2_from_abh_eval(tmp_path, capsys):
    from harness.cli.main import main as cli_main

    rows = [{"question": "q", "answer": "#### 1"}, {"question": "r", "answer": "#### 2"},
            {"question": "q", "answer": "#### 3"}]
    code = cli_main(["eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "ev"), "--data",
                     _rows_file(tmp_path, rows), "--allow-noncanonical"])
    err = capsys.readouterr().err
    assert code == 2 and "line 1 and line 3 ask the same question with different answers" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "ev").exists()
