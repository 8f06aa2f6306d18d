"""SGLang's per-position ``[logprob, token_id, null]`` arrays written as JSON text by numpy, not one Python object each.

A scoring answer of the simulator holds ~50 entries per token (top-k and asked ids): building a list per entry and
serialising it cost ~85 % of a scoring pass's wall time (``benchmarks/bench_scoring.py``). Here every number is
written as fixed-width ASCII in a few array operations: logprobs with :data:`DECIMALS` decimals (finer than the
float32 a real server computes in), ids as integers, right-aligned with spaces (JSON allows whitespace before a
number, so every entry has one width). The text goes into the response as an ``orjson.Fragment``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DECIMALS", "fixed_numbers", "position_entries"]

#: Decimals of a logprob on the wire (a real server's are float32: about 7 significant digits)
DECIMALS = 12
_SPACE, _MINUS, _DOT, _ZERO = ord(" "), ord("-"), ord("."), ord("0")


def _digits(n: np.ndarray, width: int) -> np.ndarray:
    """Non-negative integers ``n`` (N,) as (N, width) ASCII digits, leading zeros included."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return (_ZERO + (n[:, None] // powers[None, :]) % 10).astype(np.uint8)


def fixed_numbers(values: np.ndarray, decimals: int = 0) -> np.ndarray | None:
    """Finite ``values`` (N,) as JSON numbers in one width, (N, W) ASCII right-aligned with spaces: ``decimals``
    digits after the point (0: whole numbers, no point). None when a value is not finite or too large."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0 or not np.isfinite(v).all():
        return None
    scale = 10 ** decimals
    mag = np.abs(v)
    if mag.max() * scale >= 2.0 ** 62:
        return None
    scaled = np.rint(mag * scale).astype(np.int64)
    whole, frac = scaled // scale, scaled % scale
    neg = (v < 0) & (scaled > 0)
    n_int = max(1, len(str(int(whole.max()))))
    width = 1 + n_int + (1 + decimals if decimals else 0)  # sign, whole digits, point, decimals
    out = np.full((v.size, width), _SPACE, dtype=np.uint8)
    ints = _digits(whole, n_int)
    # leading zeros become spaces (the last whole digit always stays)
    lead = np.cumprod(ints[:, :-1] == _ZERO, axis=1).astype(bool)
    ints[:, :-1][lead] = _SPACE
    out[:, 1:1 + n_int] = ints
    first = 1 + lead.sum(axis=1)  # where the first digit is; the sign goes just before it
    rows = np.flatnonzero(neg)
    out[rows, first[rows] - 1] = _MINUS
    if decimals:
        out[:, 1 + n_int] = _DOT
        out[:, 2 + n_int:] = _digits(frac, decimals)
    return out


def position_entries(logprobs: np.ndarray, ids: np.ndarray, skip: int) -> bytes | None:
    """SGLang's ``input_top_logprobs`` / ``input_token_ids_logprobs`` without texts: ``skip`` leading ``null``
    positions, then one ``[[lp, id, null], ...]`` list per row of ``logprobs`` / ``ids`` (n, k), as JSON text.
    None when a value cannot be written this way (the caller builds the lists then)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    tid = np.asarray(ids)
    if lp.ndim != 2 or lp.shape != tid.shape or (tid.size and tid.min() < 0):
        return None
    n, k = lp.shape
    head = b"null," * skip
    if n == 0 or k == 0:
        body = b",".join([b"[]"] * n)
        return b"[" + (head + body if n else head[:-1]) + b"]"
    nums = fixed_numbers(lp.reshape(-1), DECIMALS)
    idt = fixed_numbers(tid.reshape(-1).astype(np.float64), 0)
    if nums is None or idt is None:
        return None
    tail = np.frombuffer(b",null],", dtype=np.uint8)
    wn, wi = nums.shape[1], idt.shape[1]
    entry = np.empty((n * k, 1 + wn + 1 + wi + tail.size), dtype=np.uint8)
    entry[:, 0] = ord("[")
    entry[:, 1:1 + wn] = nums
    entry[:, 1 + wn] = ord(",")
    entry[:, 2 + wn:2 + wn + wi] = idt
    entry[:, 2 + wn + wi:] = tail
    row = np.empty((n, 2 + entry.shape[1] * k), dtype=np.uint8)
    row[:, 0] = ord("[")
    row[:, 1:-1] = entry.reshape(n, -1)
    row[:, -2] = ord("]")  # the last entry's separator closes the position's list
    row[:, -1] = ord(",")
    return b"[" + head + row.tobytes()[:-1] + b"]"
