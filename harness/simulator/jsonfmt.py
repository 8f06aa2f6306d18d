"""SGLang's per-position ``[logprob, token_id, null]`` arrays written as JSON text by numpy, not one Python object each.

A scoring answer of the simulator holds ~50 entries per token (top-k and asked ids): building a list per entry and
serialising it cost ~85 % of a scoring pass's wall time (``benchmarks/bench_scoring.py``). Here every number is
written as fixed-width ASCII in a few array operations: logprobs with :data:`DECIMALS` decimals (finer than the
float32 a real server computes in), ids as integers, right-aligned with spaces (JSON allows whitespace before a
number, so every entry has one width). The text goes into the response as an ``orjson.Fragment``.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["DECIMALS", "fixed_numbers", "position_entries"]

#: Decimals of a logprob on the wire (a real server's are float32: about 7 significant digits)
DECIMALS = 12
_SPACE, _MINUS, _DOT, _ZERO = ord(" "), ord("-"), ord("."), ord("0")


@functools.cache
def _six_digits() -> np.ndarray:
    """The six ASCII digits of every integer below 10**6, (10**6, 6) (6 MB, made once)."""
    return (_ZERO + (np.arange(10 ** 6)[:, None] // 10 ** np.arange(5, -1, -1)) % 10).astype(np.uint8)


def _digits(n: np.ndarray, width: int) -> np.ndarray:
    """Non-negative integers ``n`` (N,) below ``10**width`` as (N, width) ASCII digits, leading zeros included:
    six digits at a time from a table (``np.take``: a lookup per six digits instead of a division per digit)."""
    six = _six_digits()
    out = np.empty((n.size, width), dtype=np.uint8)
    rest, right = n, width
    while right > 0:
        chunk = np.take(six, rest % 10 ** 6 if right > 6 else rest, axis=0)
        take = min(6, right)
        out[:, right - take:right] = chunk[:, 6 - take:]
        rest, right = rest // 10 ** 6, right - take
    return out


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
    whole = scaled // scale if decimals else scaled
    top = int(whole.max())
    n_int = max(1, len(str(top)))
    width = 1 + n_int + (1 + decimals if decimals else 0)  # sign, whole digits, point, decimals
    out = np.empty((v.size, width), dtype=np.uint8)
    out[:, 0] = _SPACE
    out[:, 1:1 + n_int] = _digits(whole, n_int)
    # the number of whole digits of each value: leading zeros become spaces, the sign goes just before
    n_digits = np.ones(v.size, dtype=np.int64)
    for j in range(1, n_int):
        n_digits += whole >= 10 ** j
    first = 1 + n_int - n_digits  # column of the first digit
    if n_int > 1:
        lead = np.arange(1, 1 + n_int)[None, :] < first[:, None]
        out[:, 1:1 + n_int][lead] = _SPACE
    rows = np.flatnonzero((v < 0) & (scaled > 0))
    out[rows, first[rows] - 1] = _MINUS
    if decimals:
        out[:, 1 + n_int] = _DOT
        out[:, 2 + n_int:] = _digits(scaled % scale, decimals)
    return out


def position_entries(logprobs: np.ndarray, ids: np.ndarray, skip: int) -> bytes | None:
    """SGLang's ``input_top_logprobs`` / ``input_token_ids_logprobs`` without texts: ``skip`` leading ``null``
    positions, then one ``[[lp, id, null], ...]`` list per row of ``logprobs`` (n, k) and ``ids`` (n, k; or (k,):
    the same ids at every position, as asked ids are), as JSON text. None when a value cannot be written this way
    (the caller builds the lists then)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    tid = np.asarray(ids)
    if lp.ndim != 2 or tid.shape not in (lp.shape, lp.shape[1:]) or (tid.size and tid.min() < 0):
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
    wi = idt.shape[1]
    if tid.ndim == 1:  # one row of ids, written once and repeated
        idt = np.broadcast_to(idt[None], (n, k, wi)).reshape(n * k, wi)
    col = np.full((n * k, 1), ord(","), dtype=np.uint8)
    opening = np.full((n * k, 1), ord("["), dtype=np.uint8)
    closing = np.broadcast_to(np.frombuffer(b",null],", dtype=np.uint8), (n * k, 7))
    entries = np.concatenate([opening, nums, col, idt, closing], axis=1).reshape(n, -1)
    rows = np.concatenate([opening[:n], entries, col[:n]], axis=1)
    rows[:, -2] = ord("]")  # the last entry's separator closes the position's list
    return b"[" + head + rows.tobytes()[:-1] + b"]"
