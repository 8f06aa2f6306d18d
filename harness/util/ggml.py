"""GGML tensor type ids and their names, as ``enum ggml_type`` in llama.cpp's ``ggml/include/ggml.h`` numbers
them (llama-cpp-python 0.3.36 exports the same values as ``llama_cpp.GGML_TYPE_*``). llama-cpp-python's server
takes the KV-cache types as these ids (``--type_k 8``); the report shows them by name (``8 (q8_0)``)."""

from __future__ import annotations

from typing import Any

GGML_TYPES: dict[int, str] = {
    0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 9: "q8_1", 10: "q2_K",
    11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs",
    19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 24: "i8", 25: "i16", 26: "i32",
    27: "i64", 28: "f64", 29: "iq1_m", 30: "bf16", 34: "tq1_0", 35: "tq2_0", 39: "mxfp4",
}
#: llama-cpp-python server flags whose value is a GGML type id
TYPE_FLAGS = ("--type_k", "--type_v")


def type_name(value: Any) -> str | None:
    """``8`` or ``"8"`` -> ``"q8_0"``; None for anything that is not a known id."""
    try:
        return GGML_TYPES.get(int(str(value).strip()))
    except ValueError:
        return None


def named(value: Any) -> str:
    """A GGML type id with its name: ``"8"`` -> ``"8 (q8_0)"`` (unknown values as they are)."""
    name = type_name(value)
    return f"{value} ({name})" if name else str(value)
