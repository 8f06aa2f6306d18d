"""Routed experts on the wire: the request that asks a server which experts route a teacher-forced input, and
the numpy reading of its answer (untrusted: every shape and id checked here).

**SGLang** (``--enable-return-routed-experts``; PR #12162): ``POST /generate`` with ``return_routed_experts``
and ``routed_experts_start_len``; ``meta_info["routed_experts"]`` is base64 of a flat C-order array
``[positions, layers, top_k]`` (row p: input position ``routed_experts_start_len + p``) of
``meta_info["routed_experts_dtype"]`` (int32 when unsaid; ``routed_experts_capturer.py``); dense and
hash-routed layers are rows of zeros.

**vLLM** (``--enable-return-routed-experts``; PR #28284): ``POST /v1/completions`` with
``routed_experts_prompt_start``; each choice's ``routed_experts`` is base64 of the ``.npy`` bytes of an array
``(positions, moe_layers, top_k)``, read without pickles; it holds a row for the one token vLLM must generate.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.results.records import JSONObject

#: SGLang's wire dtypes by the name ``meta_info.routed_experts_dtype`` gives
WIRE_DTYPES: dict[str, np.dtype[Any]] = {"int32": np.dtype("<i4"), "uint16": np.dtype("<u2"), "uint8": np.dtype("u1")}


class RoutedAnswerError(ValueError):
    """An answer without routed experts of the shape asked (the message says how)."""


def routing_body(prompt_ids: Sequence[int], reference_ids: Sequence[int]) -> JSONObject:
    """SGLang: the routing of the forward passes that predict each reference token, teacher-forced, nothing
    generated: one row per reference token, from the prompt's last position."""
    if not prompt_ids:
        raise ValueError("a routing request needs a prompt of at least one token")
    return {"input_ids": [*prompt_ids, *reference_ids], "sampling_params": {"max_new_tokens": 0},
            "return_routed_experts": True, "routed_experts_start_len": len(prompt_ids) - 1}


def parse_routed(obj: Any, tokens: int, top_k: int, layers: int | None = None) -> np.ndarray:
    """The ``(tokens, layers, top_k)`` int32 ids of an answer to :func:`routing_body` (``layers``: when
    known); RoutedAnswerError otherwise."""
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]
    meta = obj.get("meta_info") if isinstance(obj, dict) else None
    if not isinstance(meta, dict):
        raise RoutedAnswerError("the answer has no meta_info")
    value = meta.get("routed_experts")
    if value is None:
        raise RoutedAnswerError("no meta_info.routed_experts in the answer (is the server started with "
                                "--enable-return-routed-experts?)")
    dtype = meta.get("routed_experts_dtype", "int32")
    flat = decode_routed(value, dtype)
    per_token = flat.size // tokens if tokens else 0
    if tokens <= 0 or flat.size % tokens or per_token % top_k or per_token == 0:
        raise RoutedAnswerError(f"{flat.size} routed ids are not {tokens} positions x layers x top_k={top_k}")
    got_layers = per_token // top_k
    if layers is not None and got_layers != layers:
        raise RoutedAnswerError(f"{got_layers} layers of routed experts, where the pass's first answer had {layers}")
    return flat.reshape(tokens, got_layers, top_k)


def decode_routed(value: Any, dtype: Any) -> np.ndarray:
    """The flat int32 ids of ``meta_info.routed_experts``: base64 of ``dtype`` (older builds: a list)."""
    if isinstance(value, str):
        name = dtype.strip().lower() if isinstance(dtype, str) else None
        if name not in WIRE_DTYPES:
            raise RoutedAnswerError(f"meta_info.routed_experts_dtype {dtype!r} is not one of {', '.join(WIRE_DTYPES)}")
        try:
            raw = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as e:
            raise RoutedAnswerError(f"meta_info.routed_experts is a string but not base64: {e}") from None
        width = WIRE_DTYPES[name].itemsize
        if len(raw) % width:
            raise RoutedAnswerError(f"meta_info.routed_experts holds {len(raw)} bytes, not a whole number of {name}")
        return np.frombuffer(raw, dtype=WIRE_DTYPES[name]).astype(np.int32)
    if isinstance(value, list):  # older builds: a nested list of ints
        try:
            arr = np.asarray(value)
        except ValueError:
            raise RoutedAnswerError("meta_info.routed_experts is a ragged list") from None
        if arr.size and (arr.dtype.kind not in "iu" or arr.dtype == bool):
            raise RoutedAnswerError("meta_info.routed_experts holds something other than integers")
        if arr.size and (int(arr.min()) < -(2**31) or int(arr.max()) >= 2**31):
            raise RoutedAnswerError("meta_info.routed_experts holds an id outside int32")
        return arr.astype(np.int32).reshape(-1)
    raise RoutedAnswerError(f"meta_info.routed_experts is a {type(value).__name__}, not base64 or a list")


def vllm_routing_body(model: str, prompt_ids: Sequence[int], reference_ids: Sequence[int]) -> JSONObject:
    """vLLM: the rows of :func:`routing_body`, and one greedy token (vLLM's least) whose row is dropped."""
    if not prompt_ids:
        raise ValueError("a routing request needs a prompt of at least one token")
    return {"model": model, "prompt": [*prompt_ids, *reference_ids], "max_tokens": 1, "temperature": 0.0,
            "routed_experts_prompt_start": len(prompt_ids) - 1}


def parse_vllm_routed(obj: Any, tokens: int, top_k: int, layers: int | None = None) -> np.ndarray:
    """:func:`parse_routed` of a vLLM answer to :func:`vllm_routing_body` (its first ``tokens`` rows)."""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise RoutedAnswerError("the answer has no single choice")
    value = choices[0].get("routed_experts")
    if not isinstance(value, str):
        raise RoutedAnswerError("no choices[0].routed_experts in the answer (is the server started with "
                                "--enable-return-routed-experts?)")
    try:
        arr = np.load(io.BytesIO(base64.b64decode(value.encode("ascii"), validate=True)), allow_pickle=False)
    except (binascii.Error, UnicodeEncodeError, ValueError, OSError, EOFError) as e:
        raise RoutedAnswerError(f"choices[0].routed_experts is not base64 of a .npy array: {e}") from None
    if arr.ndim != 3 or arr.dtype.kind not in "iu" or arr.shape[2] != top_k or arr.shape[0] < tokens:
        raise RoutedAnswerError(f"choices[0].routed_experts has shape {arr.shape} and dtype {arr.dtype}, not "
                                f"(>= {tokens}, layers, {top_k}) integers")
    if layers is not None and arr.shape[1] != layers:
        raise RoutedAnswerError(f"{arr.shape[1]} layers of routed experts, where the pass's first answer had {layers}")
    if arr.size and (int(arr.min()) < -(2**31) or int(arr.max()) >= 2**31):
        raise RoutedAnswerError("choices[0].routed_experts holds an id outside int32")
    return np.ascontiguousarray(arr[:tokens], dtype=np.int32)
