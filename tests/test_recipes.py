"""Each recipe reproduces its upstream file's prompt, request fields and parser on fixed inputs.

The expected values are in tests/data/recipes/*.json: produced by running the upstream code itself (sglang 0.5.23's
few_shot_gsm8k / run_eval, vLLM's gsm8k_eval functions, lm-eval 0.4.13, sgl-eval 0.1.3, openai/simple-evals @
ee3b0318) against a loopback server that recorded the request bytes (see each file's ``source``). MMLU and GPQA
rows there are synthetic: no MMLU or GPQA text is shipped.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from harness.serving.wire import ChatApi, OpenAIApi, SGLangApi
from harness.tasks import gpqa, gsm8k, mgsm, mmlu, registry
from harness.tasks.gsm8k import GSM8K, Dataset, RecipeConfig, get_answer_value
from harness.tasks.gsm8k_recipes import (
    LmEvalGSM8K,
    SglEvalChatGSM8K,
    SimpleEvalGSM8K,
    VllmGSM8K,
    lm_eval_filter,
    lm_eval_normalise,
    simple_eval_answer_value,
)
from harness.tasks.mathgrade import math_equal, search_boxed
from harness.tasks.multichoice import (
    ANSWER_PATTERN_MULTICHOICE,
    SGLANG_ANSWER_PATTERN,
    extract_first,
    extract_simple_evals_mmlu,
)
from harness.tasks.sglang_frontend import chat_stops_for_model

FIXTURES = Path(__file__).parent / "data" / "recipes"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def test_set() -> Dataset:
    return gsm8k.load()


def _input(case: dict) -> str:
    """A parser case's input (the fixtures spell the 5000-digit case as the expression that makes it)."""
    return "9" * 5000 if case["input"] == "'9'*5000" else case["input"]


def _subset(body: dict, ours: dict) -> None:
    """Every field upstream sent is in our body with the same value (ours may add model/stream)."""
    for k, v in body.items():
        assert k in ours and ours[k] == v, (k, v, ours.get(k))


# ------------------------------------------------------------------------------------------ GSM8K sglang
@pytest.mark.parametrize("name,shots", [("sglang", 5), ("sglang_8shot", 8)])
def test_bench_sglang_prompts_bodies_and_parser(test_set, name, shots):
    fx = fixture(name)
    task = GSM8K(test_set, RecipeConfig(name=name))
    assert task.recipe.num_shots == shots and len(task.items) == 1319
    for q in fx["questions"]:
        item = task.items[q["test_row"]]
        assert item.prompt == q["prompt"] and item.prompt_sha256 == q["prompt_sha256"] and item.label == q["label"]
        sent = json.loads(q["generate_body_as_sent"])
        ours = SGLangApi().generation_body(item.prompt, task.sampling_params())
        assert ours["text"] == sent["text"]
        want = {k: v for k, v in sent["sampling_params"].items() if k != "temperature"}
        _subset(want, ours["sampling_params"])
        assert ours["sampling_params"]["temperature"] == sent["sampling_params"]["temperature"]  # 0 == 0.0
        assert task.grade(q["canned_output"], item).pred == q["parsed"]
    for case in fx["parser_cases"]:
        assert get_answer_value(_input(case)) == case["output"], case


def test_frontend_stop_strings_follow_sglang_chat_templates():
    fx = fixture("sglang")
    for model_path, want in fx["chat_template_stop_by_model_path"].items():
        assert list(chat_stops_for_model(model_path)) == want["stop_str"], model_path
    for row in fx["abh_harness_comparison"]["chat_stop_mismatch_scan"]:
        assert list(chat_stops_for_model(row["model_path"])) == row["upstream_stop_str"], row["model_path"]


def test_stop_list_appends_every_template_stop(test_set):
    task = GSM8K(test_set, RecipeConfig(num_questions=2, model_path="THUDM/glm-4v-9b"))
    assert task.stop() == ["Question", "Assistant:", "<|separator|>", "<|user|>", "<|endoftext|>", "<|observation|>"]


# ------------------------------------------------------------------------------------------ GSM8K simple_eval
def test_simple_eval_rows_after_the_shots_prompts_and_parser(test_set):
    fx = fixture("simple_eval")
    task = SimpleEvalGSM8K(test_set, RecipeConfig(name="simple_eval"))
    assert len(task.items) == fx["num_questions_full"] == 1314
    import hashlib

    assert hashlib.sha256(task.few_shot.encode()).hexdigest() == fx["few_shot_block_sha256"]
    for p in fx["prompts"]:
        item = task.items[p["eval_index"]]
        assert item.row == p["test_row"] and item.prompt == p["prompt"] and item.label == p["label"]
        assert task.grade(p["canned_output"], item).pred == p["parsed"]
    for case in fx["parser_cases"]:
        got = simple_eval_answer_value(_input(case))
        assert got == case["output"] and type(got).__name__ == case["output_type"], case
    for case in fx["score_cases"]:
        item = task.items[0].__class__(index=0, prompt="", label=case["label"], row=0)
        assert task.grade(case["response"], item).score == case["score"], case
    by_prompt = {it.prompt: it for it in task.items}
    completion = json.loads(fx["runs"]["completion_cli_defaults"]["first_body_as_sent"])
    ours = OpenAIApi(completion["model"]).generation_body(by_prompt[completion["prompt"]].prompt,
                                                          task.sampling_params())
    _subset(completion, ours)
    chat = json.loads(fx["runs"]["chat_cli_defaults"]["first_body_as_sent"])
    content = chat["messages"][0]["content"]
    ours = ChatApi(chat["model"]).generation_body(by_prompt[content].prompt, task.sampling_params(chat=True))
    assert ours["messages"] == chat["messages"] and "stop" not in ours  # chat mode sends no stop strings
    _subset({k: v for k, v in chat.items() if k in ("max_tokens", "temperature", "top_p")}, ours)


# ------------------------------------------------------------------------------------------ GSM8K vllm
def test_vllm_train_shots_prompts_request_and_parser(test_set):
    fx = fixture("vllm")
    task = VllmGSM8K(test_set, RecipeConfig(name="vllm"), gsm8k.train_head())
    assert task.recipe.max_new_tokens == 256 and len(task.items) == 1319
    for p in fx["prompts"]:
        item = task.items[p["test_row"]]
        assert item.prompt == p["prompt"] and item.prompt_sha256 == p["prompt_sha256"] and item.label == p["label"]
    sent = json.loads(fx["completions_body_as_sent_q0"])
    ours = OpenAIApi("m").generation_body(task.items[0].prompt, task.sampling_params())
    _subset(sent, ours)
    assert task.grade(fx["response_text"], task.items[0]).pred == fx["parsed"]
    for case in fx["parser_cases"]:
        assert get_answer_value(_input(case)) == case["output"], case


def test_vllm_recipe_runs_from_the_embedded_train_head():
    data = registry.load_data(registry.TaskSpec(name="gsm8k", recipe="vllm"))
    assert data.train is not None and data.train.source.endswith("train_head.jsonl")


# ------------------------------------------------------------------------------------------ GSM8K lm-eval
def _train_for(fx: dict, n_rows: int = 7473) -> Dataset:
    """A train split whose rows at the fixture's sampled indices hold the shots the real lm-eval showed."""
    rows = [{"question": f"filler {i}", "answer": f"#### {i}"} for i in range(n_rows)]
    for p, idx in zip(fx["prompts"], fx["fewshot"]["train_indices_for_test_rows_0_1_2"], strict=True):
        blocks = p["prompt"].split("\n\nQuestion: ")
        shots = [blocks[0].removeprefix("Question: ")] + blocks[1:-1]
        for j, block in zip(idx, shots, strict=True):
            q, a = block.split("\nAnswer: ", 1)
            rows[j] = {"question": q, "answer": a}
    return Dataset(rows=rows, source="fixture", sha256="x", canonical=False)


@pytest.mark.parametrize("recipe", ["lm_eval_strict", "lm_eval_flexible"])
def test_lm_eval_random_shots_prompts_request_and_filters(test_set, recipe):
    fx = fixture("lm_eval_strict")
    task = LmEvalGSM8K(test_set, RecipeConfig(name=recipe, num_questions=3), _train_for(fx))
    for p, item in zip(fx["prompts"], task.items, strict=True):
        assert item.prompt == p["prompt"] and item.prompt_sha256 == p["prompt_sha256"]
    sent = json.loads(fx["local_completions_bodies_as_sent"][0])
    ours = OpenAIApi(sent["model"]).generation_body(task.items[0].prompt, task.sampling_params())
    _subset(sent, ours)
    filt = "strict-match" if recipe == "lm_eval_strict" else "flexible-extract"
    for case in fx["filter_cases"]:
        item = task.items[case["doc_row"]]
        got = task.grade(case["response"], item)
        assert got.pred == case[filt]["filtered"] and got.score == case[filt]["exact_match"], case
    # the samples the real lm-eval logged: filtered answer and exact_match, line by line
    for line in fx["samples_jsonl_completions"]:
        if line["filter"] == filt:
            got = task.grade(line["resps"][0][0], task.items[line["doc_id"]])
            assert got.pred == line["filtered_resps"][0] and got.score == line["exact_match"]


def test_lm_eval_filter_and_metric_pieces():
    assert lm_eval_filter("no number", r"#### (\-?[0-9\.\,]+)", 0) == "[invalid]"
    assert lm_eval_filter("a 12 b $1,000.", r"(-?[$0-9.,]{2,})|(-?[0-9]+)", -1) == "$1,000."
    assert lm_eval_normalise("$1,000.") == "1000" and lm_eval_normalise("x\n#### 18") == "18"


def test_lm_eval_needs_the_whole_train_split(test_set):
    with pytest.raises(gsm8k.DatasetError, match="lm_eval_strict recipe takes its shots from the GSM8K train split"):
        registry.load_data(registry.TaskSpec(name="gsm8k", recipe="lm_eval_strict"))


# ------------------------------------------------------------------------------------------ GSM8K sgl-eval chat
def test_sgl_eval_chat_prompt_request_extraction_and_equivalence(test_set):
    fx = fixture("sgl_eval_chat")
    task = SglEvalChatGSM8K(test_set, RecipeConfig(name="sgl_eval_chat"))
    assert len(task.items) == fx["data_rows_prepared"] == 1319 and task.apis == ("chat",)
    for p in fx["prompts"]:
        item = task.items[p["test_row"]]
        assert item.prompt == p["user_content"] and item.label == p["expected_answer"]
    sent = fx["runs"]["sglang_run_sgl_eval_no_max_tokens_attr"]["bodies_as_sent"]
    by_content = {json.loads(b)["messages"][0]["content"]: b for b in sent}
    item = next(it for it in task.items if it.prompt in by_content)
    body = ChatApi("fake-org/Fake-Model").generation_body(item.prompt, task.sampling_params(chat=True))
    assert json.dumps(body, separators=(",", ":"), ensure_ascii=False) == by_content[item.prompt]
    for case in fx["grader_cases"]:
        assert search_boxed(case["generation"]) == case["predicted_answer"], case
        assert math_equal(case["expected_answer"], case["predicted_answer"]) == case["symbolic_correct"], case


# ------------------------------------------------------------------------------------------ MMLU
def _mmlu_csv(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    path = tmp_path / "mmlu.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["", *mmlu.COLUMNS])
        w.writeheader()
        for i, r in enumerate(rows):
            w.writerow({"": str(i), **r})
    return path


def test_mmlu_prompt_extraction_and_sampling(tmp_path):
    fx = fixture("mmlu")
    row = fx["synthetic_row"]
    data = mmlu.load(str(_mmlu_csv(tmp_path, [row])))
    for recipe, key in (("sglang", "prompt_sglang_legacy"), ("simple_evals", "prompt_simple_evals")):
        task = mmlu.MMLU(data, RecipeConfig(name=recipe))
        assert task.items[0].prompt == fx[key] and task.items[0].group == "astronomy"
    for case in fx["extraction_cases"]:
        assert extract_simple_evals_mmlu(case["response"]) == case["simple_evals_mmlu"], case
        assert extract_first(SGLANG_ANSWER_PATTERN, case["response"]) == case["sglang_legacy_mmlu_gpqa"], case
    assert fx["subject2category"] == mmlu.SUBJECT_CATEGORY
    many = mmlu.load(str(_mmlu_csv(tmp_path, [dict(row, Question=f"q{i}") for i in range(mmlu.FULL_ROWS)])))
    sampled = mmlu.MMLU(many, RecipeConfig(name="sglang", num_questions=10))
    assert [it.index for it in sampled.items] == fx["sample_indices_Random0_first10_of_14042"]


def test_mmlu_is_not_shipped_and_says_so():
    with pytest.raises(gsm8k.DatasetError, match="MMLU is not shipped"):
        registry.load_data(registry.TaskSpec(name="mmlu"))


def test_mmlu_reads_hendrycks_directories(tmp_path):
    d = tmp_path / "data" / "test"
    d.mkdir(parents=True)
    (d / "astronomy_test.csv").write_text('"Which gas?",Oxygen,Nitrogen,Argon,CO2,B\n', encoding="utf-8")
    (d / "anatomy_test.csv").write_text('"Bones?",1,206,3,4,B\n', encoding="utf-8")
    data = mmlu.load(str(tmp_path / "data"))
    assert [r["Subject"] for r in data.rows] == ["anatomy", "astronomy"] and data.rows[1]["B"] == "Nitrogen"


# ------------------------------------------------------------------------------------------ GPQA
def _gpqa_csv(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "gpqa_diamond.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(gpqa.COLUMNS))
        w.writeheader()
        for i in range(n):
            w.writerow({"Question": f"synthetic question {i}?", "Correct Answer": "Correct Answer",
                        "Incorrect Answer 1": "Incorrect Answer 1", "Incorrect Answer 2": "Incorrect Answer 2",
                        "Incorrect Answer 3": "Incorrect Answer 3"})
    return path


def test_gpqa_seeded_shuffle_repeats_and_extraction(tmp_path):
    fx = fixture("gpqa")
    data = gpqa.load(str(_gpqa_csv(tmp_path, gpqa.DIAMOND_ROWS)))
    task = gpqa.GPQA(data, RecipeConfig(name="simple_evals", repeats=10))
    assert len(task.items) == fx["simple_evals_total_samples"] == 1980
    by_index = {it.index: it for it in task.items}
    # simple-evals' order: repeat 0 of every example, then repeat 1, ...; the first 8 permutations are repeat 0's
    for p, letter in zip(fx["simple_evals_permutations_first8"], fx["simple_evals_correct_letter_first8"],
                         strict=True):
        item = by_index[p["example_index"] * 10]
        assert item.label == letter
    first = by_index[0].prompt
    for letter, text in fx["simple_evals_choice_dict_for_first_example"].items():
        assert f"\n{letter}) {text}" in first
    for case in fx["extraction_cases"]:
        assert extract_first(ANSWER_PATTERN_MULTICHOICE, case["response"]) == case["simple_evals_gpqa"], case
    assert gpqa.GPQA(data, RecipeConfig(name="simple_evals")).recipe.repeats == gpqa.DEFAULT_REPEATS


@pytest.mark.parametrize("spec", ["", "/nonexistent/gpqa_diamond.csv"])
def test_gpqa_is_never_shipped_and_says_so(spec):
    with pytest.raises(gsm8k.DatasetError, match="GPQA is not shipped with abh") as e:
        registry.load_data(registry.TaskSpec(name="gpqa_diamond", data_path=spec))
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------------------------ MGSM-en
def test_mgsm_en_prompts_targets_and_grader():
    fx = fixture("mgsm_en")
    data = mgsm.load(None)
    assert len(data) == 250 and data.canonical
    task = mgsm.MGSM(data, RecipeConfig(name="simple_evals"))
    for p in fx["prompts"]:
        assert task.items[p["row"]].prompt == p["simple_evals_prompt"] and data.rows[p["row"]]["targets"] == p["targets"]
    for case in fx["cases"]:
        assert mgsm.parse_answer(case["response"]) == case["extracted_simple_evals"], case
        item = task.items[0].__class__(index=0, prompt="", label=case["target"], row=0)
        assert task.grade(case["response"], item).score == float(case["score_simple_evals"]), case


def test_mgsm_reads_a_tsv_copy(tmp_path):
    path = tmp_path / "mgsm_en.tsv"
    path.write_text("".join(f"{r['inputs']}\t{r['targets']}\n" for r in mgsm.load(None).rows), encoding="utf-8")
    assert mgsm.load(str(path)).canonical
    path.write_text("q\t1.5\n", encoding="utf-8")
    with pytest.raises(gsm8k.DatasetError, match="decimal point"):
        mgsm.load(str(path))


# ------------------------------------------------------------------------------------------ the registry
def test_every_recipe_cites_its_upstream_file(test_set, tmp_path):
    specs = [registry.TaskSpec(name="gsm8k", recipe=r, train_path=str(tmp_path / "train.jsonl"))
             for r in gsm8k.RECIPES]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gsm8k.train_head().rows))
    for spec in specs:
        data = registry.load_data(registry.TaskSpec(**{**spec.__dict__, "allow_noncanonical": True}))
        task = registry.build(spec, data)
        assert task.upstream and ("@" in task.upstream or "==" in task.upstream or "<=" in task.upstream), spec.recipe
        doc = type(task).__doc__ or ""
        assert any(word in doc for word in ("sglang", "vllm", "lm-eval", "sgl-eval")), spec.recipe
    for module in (mmlu, gpqa, mgsm):
        assert "simple-evals" in (module.__doc__ or "") and "ee3b0318" in (module.__doc__ or "")


def test_unknown_task_and_recipe_are_one_line():
    assert registry.problems(registry.TaskSpec(name="nope")) == [
        "task.name must be one of gsm8k, mmlu, gpqa_diamond, mgsm_en, not 'nope'"]
    assert "task.recipe must be one of simple_evals for task mgsm_en" in registry.problems(
        registry.TaskSpec(name="mgsm_en", recipe="vllm"))[0]
    with pytest.raises(gsm8k.DatasetError, match="unknown task"):
        registry.kind("hellaswag")


def test_data_from_a_url(tmp_path):
    import http.server
    import threading
    from functools import partial

    (tmp_path / "mgsm_en.tsv").write_text("".join(f"{r['inputs']}\t{r['targets']}\n" for r in mgsm.load(None).rows),
                                          encoding="utf-8")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        data = registry.load_data(registry.TaskSpec(name="mgsm_en", data_path=f"{base}/mgsm_en.tsv"))
        assert data.test.canonical and data.test.source == f"{base}/mgsm_en.tsv"
        with pytest.raises(gsm8k.DatasetError, match="HTTP 404") as e:
            registry.load_data(registry.TaskSpec(name="mgsm_en", data_path=f"{base}/missing.tsv"))
        assert "\n" not in str(e.value)
    finally:
        server.shutdown()
        server.server_close()


def test_each_recipe_is_sent_by_the_engines_protocol_where_it_can_be() -> None:
    """The protocol of an eval: the engine's when the recipe speaks it (vLLM's is the OpenAI completions API with
    every sampling field: a completions recipe on a vLLM server is sent by it, not by the recipe's first), else
    the recipe's own; a protocol asked for that the recipe cannot be sent by is refused."""
    import pytest

    from harness.tasks import registry
    from harness.tasks.interface import DatasetError

    spec = registry.TaskSpec(name="gsm8k")
    t = registry.build(spec, registry.load_data(spec))
    assert [registry.api_for(t, e) for e in ("sglang", "openai", "vllm", "chat")] == ["sglang", "openai", "vllm", "chat"]
    assert registry.api_for(t, "sglang", "vllm") == "vllm"
    chat = registry.TaskSpec(name="gsm8k", recipe="sgl_eval_chat")
    ct = registry.build(chat, registry.load_data(chat))
    assert registry.api_for(ct, "vllm") == "chat"  # a chat recipe goes to the same server's chat endpoint
    with pytest.raises(DatasetError, match="not vllm"):
        registry.api_for(ct, "sglang", "vllm")


def test_each_task_refuses_a_question_twice_with_two_answers(tmp_path, capsys):
    """MMLU (a question is its text and its four choices), GPQA (its text; the label is the correct answer's
    text) and MGSM: the two lines are named; the same question with the same answer is a warning line."""
    row = {"Question": "q?", "A": "1", "B": "2", "C": "3", "D": "4", "Answer": "A", "Subject": "s"}
    with pytest.raises(gsm8k.DatasetError, match="line 2 and line 4 ask the same question with different answers"):
        mmlu.load(str(_mmlu_csv(tmp_path, [row, dict(row, Question="p?"), dict(row, Answer="B")])))
    other_choices = dict(row, D="5", Answer="B")  # the same text with other choices is another question
    assert len(mmlu.load(str(_mmlu_csv(tmp_path, [row, other_choices])))) == 2
    gpqa_csv = _gpqa_csv(tmp_path, 3)
    lines = gpqa_csv.read_text().splitlines()
    gpqa_csv.write_text("\n".join([*lines, lines[2].replace("Correct Answer", "Another", 1)]) + "\n")
    with pytest.raises(gsm8k.DatasetError, match="line 3 and line 5 ask the same question with different answers"):
        gpqa.load(str(gpqa_csv))
    tsv = tmp_path / "mgsm_en.tsv"
    tsv.write_text("a question\t3\nanother\t4\na question\t3\n")
    assert len(mgsm.load(str(tsv))) == 3
    err = capsys.readouterr().err
    assert "line 1 and line 3 ask the same question with the same answer" in err
    tsv.write_text("a question\t3\nanother\t4\na question\t5\n")
    with pytest.raises(gsm8k.DatasetError, match="line 1 and line 3 ask the same question with different answers"):
        mgsm.load(str(tsv))
