"""The routed-experts answers of SGLang and vLLM as their source code builds them (fixtures made here the same way),
read by harness.serving.routed_wire.

* SGLang: python/sglang/srt/layers/moe/routed_experts_capturer.py, ``encode_routed_experts_for_wire`` (a flat
  row-major array in ``SGLANG_ROUTED_EXPERTS_DTYPE``, int32 where an id does not fit, the dtype sent advertised in
  ``meta_info["routed_experts_dtype"]``) and ``extract_routed_experts_from_meta_info`` (row p: the routing that
  produced token p + 1; int32 when the answer names no dtype);
* vLLM 0.32.0: vllm/utils/serial_utils.py ``numpy2base64`` (``np.save(buffer, array, allow_pickle=False)``, base64)
  and vllm/entrypoints/openai/completion/protocol.py ``CompletionResponseChoice.routed_experts`` (shape
  ``(num_tokens - 1, num_layers, num_experts_per_tok)`` after ``routed_experts_prompt_start`` prompt tokens,
  dtype uint8/uint16/int32).
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest

from harness.serving.routed_wire import (
    RoutedAnswerError,
    parse_routed,
    parse_vllm_routed,
    routing_body,
    vllm_routing_body,
)

L, K = 4, 6


def sglang_answer(routed: np.ndarray, asked_dtype: str, prompt_tokens: int, completion_tokens: int) -> dict:
    """``/generate``'s answer as SGLang builds it (encode_routed_experts_for_wire)."""
    wire = {"int32": np.dtype(np.int32), "uint16": np.dtype(np.uint16), "uint8": np.dtype(np.uint8)}
    target = wire[asked_dtype]
    if target.kind == "u" and routed.size and (routed.min() < np.iinfo(target).min or routed.max() > np.iinfo(target).max):
        target = wire["int32"]
    payload = base64.b64encode(routed.astype(target).tobytes()).decode("utf-8")
    return {"text": "", "meta_info": {"id": "x", "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                      "routed_experts": payload, "routed_experts_dtype": target.name,
                                      "finish_reason": {"type": "length", "length": 0}}}


def vllm_answer(routed: np.ndarray | None) -> dict:
    """``/v1/completions``' answer as vLLM 0.32.0 builds it (numpy2base64 of each choice's routed experts)."""
    b64 = None
    if routed is not None:
        with io.BytesIO() as buf:
            np.save(buf, routed, allow_pickle=False)
            b64 = base64.b64encode(buf.getbuffer()).decode("ascii")
    return {"id": "cmpl-1", "object": "text_completion", "model": "m",
            "choices": [{"index": 0, "text": "x", "logprobs": None, "finish_reason": "length", "stop_reason": None,
                         "prompt_logprobs": None, "routed_experts": b64}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}}


@pytest.mark.parametrize(("asked", "top_id", "sent"), [("int32", 384, "int32"), ("uint16", 384, "uint16"),
                                                       ("uint8", 200, "uint8"), ("uint8", 384, "int32")])
def test_sglang_answers_in_each_wire_dtype(asked, top_id, sent):
    prompt, reference = [11, 12, 13, 14], [21, 22, 23]
    body = routing_body(prompt, reference)
    start = body["routed_experts_start_len"]
    seqlen = len(body["input_ids"])  # max_new_tokens 0: nothing generated
    rows = seqlen - 1 - start  # the capturer's positions from routed_experts_start_len to the last but one
    assert rows == len(reference)
    routed = np.random.default_rng(0).integers(0, top_id, (rows, L, K)).astype(np.int32)
    routed[0, 0, -1] = top_id  # the shared marker one past the end
    obj = sglang_answer(routed, asked, seqlen, 0)
    assert obj["meta_info"]["routed_experts_dtype"] == sent
    assert (parse_routed(obj, len(reference), K) == routed).all()


def test_sglang_legacy_answers_without_a_dtype_are_int32():
    routed = np.arange(2 * L * K, dtype=np.int32).reshape(2, L, K)
    obj = sglang_answer(routed, "int32", 3, 0)
    del obj["meta_info"]["routed_experts_dtype"]
    assert (parse_routed(obj, 2, K) == routed).all()


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32"])
def test_vllm_answers_drop_the_generated_tokens_row(dtype):
    prompt, reference = [5, 6, 7], [8, 9, 10, 11]
    body = vllm_routing_body("m", prompt, reference)
    assert body["routed_experts_prompt_start"] == 2 and body["max_tokens"] == 1 and body["prompt"] == [5, 6, 7, 8, 9, 10, 11]
    num_tokens = len(body["prompt"]) + body["max_tokens"]
    rows = num_tokens - 1 - body["routed_experts_prompt_start"]
    routed = np.random.default_rng(1).integers(0, 200, (rows, L, K)).astype(dtype)
    got = parse_vllm_routed(vllm_answer(routed), len(reference), K)
    assert got.dtype == np.int32 and (got == routed[:len(reference)]).all()
    assert parse_vllm_routed(vllm_answer(routed), len(reference), K, layers=L).shape == (4, L, K)


@pytest.mark.parametrize(("answer", "words"), [
    (vllm_answer(None), "--enable-return-routed-experts"),
    (vllm_answer(np.zeros((5, L, K), np.float32)), r"not \(>= 4, layers, 6\) integers"),
    (vllm_answer(np.zeros((2, L, K), np.int32)), r"shape \(2, 4, 6\)"),
    ({"choices": [{"routed_experts": "!!"}]}, "not base64"),
    ({"choices": []}, "single choice"),
])
def test_malformed_vllm_answers_are_refused(answer, words):
    with pytest.raises(RoutedAnswerError, match=words):
        parse_vllm_routed(answer, 4, K)


def test_a_pickled_vllm_payload_is_refused_not_unpickled():
    with io.BytesIO() as buf:
        np.save(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
        payload = base64.b64encode(buf.getvalue()).decode()
    with pytest.raises(RoutedAnswerError, match="not base64 of a .npy array"):
        parse_vllm_routed({"choices": [{"routed_experts": payload}]}, 1, K)
