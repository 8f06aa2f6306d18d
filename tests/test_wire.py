"""The wire protocols: request bodies byte for byte as before the protocol objects, response parsing."""

from __future__ import annotations

import json

import pytest
from conftest import TEST_JSONL

from harness.serving.client import ClientConfig
from harness.serving.wire import (
    API_NAMES,
    ChatApi,
    Generation,
    MalformedResponse,
    OpenAIApi,
    SGLangApi,
    VLLMApi,
    for_api,
)
from harness.tasks import gsm8k
from harness.tasks.gsm8k import GSM8K, RecipeConfig

#: SGLang's frontend sampling params, in its order (the order is part of the bytes sent).
SAMPLING = ('{"skip_special_tokens": true, "spaces_between_special_tokens": true, "max_new_tokens": %d, '
            '"min_new_tokens": 0, "n": 1, "stop": ["Question", "Assistant:", "<|separator|>"], '
            '"stop_token_ids": [], "stop_regex": [], "temperature": 0, "top_p": 1.0, "top_k": -1, '
            '"min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0, "ignore_eos": false, '
            '"regex": null, "json_schema": null}')


@pytest.fixture(scope="module")
def task() -> GSM8K:
    return GSM8K(gsm8k.load(TEST_JSONL), RecipeConfig(num_questions=10))


def test_for_api_is_the_only_chooser():
    assert API_NAMES == ("sglang", "openai", "vllm", "chat")
    assert isinstance(for_api("sglang"), SGLangApi)
    assert isinstance(for_api("chat", "m"), ChatApi) and for_api("chat").needs_model
    api = for_api("openai", "m")
    assert type(api) is OpenAIApi and api.model == "m" and not api.needs_model
    assert for_api("openai").needs_model
    v = for_api("vllm", "m")
    assert isinstance(v, VLLMApi) and v.model == "m" and v.with_model_listing({"data": [{"id": "x"}]}).name == "vllm"
    assert isinstance(for_api("chat", "m"), ChatApi)
    with pytest.raises(ValueError, match="api must be one of sglang, openai, vllm, chat"):
        for_api("tgi")
    with pytest.raises(ValueError, match="api must be one of"):
        ClientConfig(url="http://x:1", api="tgi")


def test_sglang_bodies_are_byte_identical_to_the_frontend(task):
    api, q, sp = SGLangApi(), task.questions[3], task.sampling_params()
    body = json.dumps(api.generation_body(q.prompt, sp))
    assert body == '{"text": ' + json.dumps(q.prompt) + ', "sampling_params": ' + SAMPLING % 512 + "}"
    assert body == json.dumps(task.generate_body(q))  # the task's own view goes through the same object
    # RuntimeEndpoint.cache_prefix: the few-shot block and max_new_tokens 0, nothing else
    warm = json.dumps(api.warmup_body(task.few_shot, task.questions[0].prompt, sp))
    assert warm == '{"text": ' + json.dumps(task.few_shot) + ', "sampling_params": {"max_new_tokens": 0}}'
    assert warm == json.dumps(task.warmup_body())
    assert api.generate_path == "/generate" and api.health_path == "/health_generate"


def test_openai_bodies_are_byte_identical_to_before(task):
    api, q, sp = OpenAIApi("m"), task.questions[3], task.sampling_params()
    stop = '["Question", "Assistant:", "<|separator|>"]'
    expected = ('{"model": "m", "prompt": %s, "max_tokens": %d, "temperature": 0, "top_p": 1.0, "n": 1, '
                '"stop": ' + stop + ', "frequency_penalty": 0.0, "presence_penalty": 0.0, "stream": false}')
    assert json.dumps(api.generation_body(q.prompt, sp)) == expected % (json.dumps(q.prompt), 512)
    # warm-up: the few-shot block, one token; with no shots, the first prompt
    assert json.dumps(api.warmup_body(task.few_shot, task.questions[0].prompt, sp)) == \
        expected % (json.dumps(task.few_shot), 1)
    assert json.dumps(api.warmup_body("", "P", sp)) == expected % ('"P"', 1)
    assert api.generate_path == "/v1/completions" and api.models_path == "/v1/models"


def test_the_warm_up_is_sent_when_sglangs_frontend_sends_it():
    """run_program_batch caches the prefix for a batch of more than one question, cache_program only a prefix
    longer than 64 characters."""
    test = gsm8k.load(TEST_JSONL)
    assert GSM8K(test, RecipeConfig(num_questions=2)).warms_up
    assert not GSM8K(test, RecipeConfig(num_questions=1)).warms_up
    assert not GSM8K(test, RecipeConfig(num_questions=5, num_shots=0)).warms_up
    short = gsm8k.Dataset(rows=[{"question": "1+1?", "answer": "#### 2"}] * 3, sha256="x", source="t", canonical=False)
    t = GSM8K(short, RecipeConfig(num_questions=3, num_shots=1))
    assert len(t.few_shot) <= 64 and not t.warms_up


def test_vllm_bodies_set_every_field_vllm_would_fill_from_generation_config(task):
    api, q, sp = VLLMApi("m"), task.questions[3], task.sampling_params()
    body = api.generation_body(q.prompt, sp)
    assert list(body) == ["model", "prompt", "max_tokens", "min_tokens", "n", "temperature", "top_p", "top_k", "min_p",
                          "repetition_penalty", "frequency_penalty", "presence_penalty", "seed", "stop",
                          "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "skip_special_tokens",
                          "spaces_between_special_tokens", "stream"]
    assert body["prompt"] == q.prompt and body["max_tokens"] == 512 and body["min_tokens"] == 0
    assert body["temperature"] == 0 and body["top_p"] == 1.0 and body["top_k"] == -1 and body["min_p"] == 0.0
    assert body["repetition_penalty"] == 1.0 and body["stop"] == ["Question", "Assistant:", "<|separator|>"]
    assert body["stop_token_ids"] == [] and body["skip_special_tokens"] is True and body["seed"] == 0
    # ModelConfig.get_diff_sampling_param's fields (vllm/config/model.py): none is left to the model's defaults
    for name in ("repetition_penalty", "presence_penalty", "frequency_penalty", "temperature", "top_k", "top_p",
                 "min_p", "max_tokens"):
        assert body[name] is not None, name
    warm = api.warmup_body(task.few_shot, q.prompt, sp)
    assert warm == {**body, "prompt": task.few_shot, "max_tokens": 1}
    # the OpenAI protocol keeps the fields the OpenAI API has
    assert "top_k" not in OpenAIApi("m").generation_body(q.prompt, sp)


def test_parse_generation():
    sg = SGLangApi()
    obj = {"text": " 18.", "meta_info": {"finish_reason": {"type": "stop", "matched": "Question"},
                                         "prompt_tokens": 900, "completion_tokens": 40}}
    assert sg.parse_generation(obj) == Generation(" 18.", "stop", 900, 40)
    assert sg.parse_generation([obj]).text == " 18."
    assert sg.parse_generation({"text": "x", "meta_info": {"finish_reason": "length"}}).finish_reason == "length"
    for bad in ({"error": "x"}, {"text": None}, [], "<html>", None):
        with pytest.raises(MalformedResponse):
            sg.parse_generation(bad)
    oa = OpenAIApi("m")
    obj = {"choices": [{"text": " 5", "finish_reason": "stop"}], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}
    assert oa.parse_generation(obj) == Generation(" 5", "stop", 7, 2)
    assert oa.parse_generation({"choices": [{"text": ""}]}) == Generation("", None, None, None)
    for bad in ({"choices": []}, {"choices": [{"text": 3}]}, {"object": "error"}, None):
        with pytest.raises(MalformedResponse):
            oa.parse_generation(bad)


def test_model_listing():
    api = OpenAIApi().with_model_listing({"object": "list", "data": [{"id": "smol", "object": "model"}]})
    assert api.model == "smol" and not api.needs_model
    for bad in ({"data": []}, {"data": [{"id": ""}]}, {}, None):
        with pytest.raises(MalformedResponse):
            OpenAIApi().with_model_listing(bad)
    assert SGLangApi().with_model_listing({"data": [{"id": "x"}]}) == SGLangApi()


def test_chat_bodies_and_reasoning_apart():
    api = ChatApi("m")
    body = api.generation_body("Solve 2+2.", {"max_new_tokens": 64, "temperature": 0.0, "top_p": 0.95,
                                              "openai_extras": {"min_p": 0.0, "repetition_penalty": 1.0}})
    assert json.dumps(body, separators=(",", ":")) == (
        '{"messages":[{"role":"user","content":"Solve 2+2."}],"model":"m","max_tokens":64,"temperature":0.0,'
        '"top_p":0.95,"min_p":0.0,"repetition_penalty":1.0}')
    assert "stop" not in api.generation_body("x", {"max_new_tokens": 1, "stop": []})
    assert api.generation_body("x", {"max_new_tokens": 1, "stop": ["Q"]})["stop"] == ["Q"]
    assert api.warmup_body("", "first", {"max_new_tokens": 9})["max_tokens"] == 1
    reply = {"choices": [{"message": {"role": "assistant", "content": "\\boxed{4}", "reasoning_content": "2+2=4"},
                          "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}
    assert api.parse_generation(reply) == Generation("\\boxed{4}", "stop", 5, 7, "2+2=4")
    vllm = {"choices": [{"message": {"content": None, "reasoning": "thinking..."}, "finish_reason": "length"}]}
    assert api.parse_generation(vllm) == Generation("", "length", None, None, "thinking...")
    for bad in ({}, {"choices": [{"text": "x"}]}, {"choices": [{"message": "x"}]},
                {"choices": [{"message": {"content": 3}}]}):
        with pytest.raises(MalformedResponse):
            api.parse_generation(bad)
    with pytest.raises(ValueError, match="no teacher-forced scoring"):
        api.scoring_probe("x")


def test_openai_extras_only_where_a_recipe_sets_them():
    sp = {"max_new_tokens": 256, "stop": ["Question"], "temperature": 0.0, "openai_extras": {"seed": 42}}
    assert OpenAIApi("m").generation_body("p", sp) == {
        "model": "m", "prompt": "p", "max_tokens": 256, "temperature": 0.0, "stop": ["Question"], "seed": 42,
        "stream": False}
    assert SGLangApi().generation_body("p", sp) == {"text": "p", "sampling_params": {
        "max_new_tokens": 256, "stop": ["Question"], "temperature": 0.0}}
