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

__all__ = ["DECIMALS", "as_array", "entry_rows", "fixed_numbers", "own_array", "own_entries", "own_rows", "position_entries"]

#: Decimals of a logprob on the wire (a real server's are float32: about 7 significant digits)
DECIMALS = 12
_SPACE, _MINUS, _DOT, _ZERO = ord(" "), ord("-"), ord("."), ord("0")
_OPEN, _CLOSE, _COMMA = ord("["), ord("]"), ord(",")
#: what follows an entry's id: its null text, its close and separator
_TAIL = np.frombuffer(b",null],", dtype=np.uint8)


@functools.cache
def _four_digits() -> np.ndarray:
    """The four ASCII digits of every integer below 10**4 as one uint32 each, (10**4,) (40 KB, made once: it stays
    in the cache, where a bigger table's rows are fetched from memory)."""
    four = (_ZERO + (np.arange(10 ** 4)[:, None] // np.array([1000, 100, 10, 1])) % 10).astype(np.uint8)
    return four.view(np.uint32).reshape(-1)


def _put_digits(out: np.ndarray, col: int, n: np.ndarray, width: int) -> None:
    """Write non-negative integers ``n`` (N,) below ``10**width`` as ASCII digits, leading zeros included, into
    columns ``col..col+width-1`` of ``out`` (N, W) uint8 (C order): four digits at a time from a table, each word
    stored through a uint32 view of those four columns (one store per row, where copying bytes costs one per
    digit). Remainders as ``n - (n // d) * d``: numpy divides by a constant fast (libdivide) but takes a remainder
    by a slow division per element."""
    four = _four_digits()
    rows, row_bytes = out.shape[0], out.strides[0]
    rest = np.asarray(n, dtype=np.int64)
    right = col + width
    while right > col:
        q = rest // 10 ** 4
        word = four[rest - q * 10 ** 4]
        take = min(4, right - col)
        if take == 4:  # an unaligned uint32 view of the four columns: numpy stores into it byte-safely
            np.ndarray((rows,), np.uint32, buffer=out, offset=right - 4, strides=(row_bytes,))[...] = word
        else:  # the leading digits: a column at a time (a strided block copy costs more per row)
            b = word.view(np.uint8).reshape(rows, 4)
            for j in range(take):
                out[:, col + j] = b[:, 4 - take + j]
        rest, right = q, right - take


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
    _put_digits(out, 1, whole, n_int)
    # the number of whole digits of each value: leading zeros become spaces, the sign goes just before
    n_digits = np.ones(v.size, dtype=np.int64)
    for j in range(1, n_int):
        n_digits += whole >= 10 ** j
    first = 1 + n_int - n_digits  # column of the first digit
    minus = (v < 0) & (scaled > 0)
    for c in range(n_int):  # a column at a time (whole digits are few): spaces before the first digit, the sign
        # just before it (copyto with a mask: a masked assignment to a strided column costs ~10x more)
        col = out[:, c]
        if c:
            np.copyto(col, _SPACE, where=first > c)
        np.copyto(col, _MINUS, where=minus & (first == c + 1))
    if decimals:
        out[:, 1 + n_int] = _DOT
        _put_digits(out, 2 + n_int, scaled - whole * scale, decimals)
    return out


def entry_rows(logprobs: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """One ``[[lp, id, null], ...],`` row per row of ``logprobs`` (n, k >= 1) and ``ids`` (n, k; or (k,): the same
    ids at every position), as (n, width) ASCII, each row ending in its separator ``,``. None when a value cannot
    be written this way."""
    lp = np.asarray(logprobs, dtype=np.float64)
    tid = np.asarray(ids)
    if lp.ndim != 2 or tid.shape not in (lp.shape, lp.shape[1:]) or (tid.size and tid.min() < 0):
        return None
    n, k = lp.shape
    if n == 0 or k == 0:
        return None
    nums = fixed_numbers(lp.reshape(-1), DECIMALS)
    idt = fixed_numbers(tid.reshape(-1).astype(np.float64), 0)
    if nums is None or idt is None:
        return None
    # per row "[" + k entries "[lp,id,null]," + "," (a row's last entry closes the row instead: "...null]],")
    wn, wi = nums.shape[1], idt.shape[1]
    e = wn + wi + 9  # "[" lp "," id ",null],"
    rows = np.empty((n, 2 + k * e), dtype=np.uint8)
    rows[:, 0] = _OPEN
    # an entry as one record of its fields' bytes: a number is copied whole, not a byte column at a time
    entry = np.dtype({"names": ["open", "lp", "comma", "id", "tail"],
                      "formats": ["u1", f"V{wn}", "u1", f"V{wi}", f"V{_TAIL.size}"],
                      "offsets": [0, 1, 1 + wn, 2 + wn, 2 + wn + wi], "itemsize": e})
    entries = rows[:, 1:1 + k * e].view(entry)  # (n, k)
    entries["open"] = _OPEN
    entries["lp"] = nums.view(f"V{wn}").reshape(n, k)
    entries["comma"] = _COMMA
    ids_v = idt.view(f"V{wi}")
    entries["id"] = ids_v.reshape(k) if tid.ndim == 1 else ids_v.reshape(n, k)
    entries["tail"] = _TAIL.view(f"V{_TAIL.size}")[0]
    rows[:, -2] = _CLOSE  # the last entry's separator closes the row
    rows[:, -1] = _COMMA
    return rows


def as_array(rows: np.ndarray, skip: int) -> bytes:
    """The JSON array of ``skip`` leading ``null`` positions, then the ``rows`` of :func:`entry_rows`."""
    head = b"null," * skip
    if rows.shape[0] == 0:
        return b"[" + head[:-1] + b"]"
    body = rows.tobytes()
    return b"[" + head + body[:-1] + b"]"  # the last row's separator closes the array


def position_entries(logprobs: np.ndarray, ids: np.ndarray, skip: int) -> bytes | None:
    """SGLang's ``input_top_logprobs`` / ``input_token_ids_logprobs`` without texts: ``skip`` leading ``null``
    positions, then one ``[[lp, id, null], ...]`` list per row of ``logprobs`` (n, k) and ``ids`` (n, k; or (k,):
    the same ids at every position, as asked ids are), as JSON text. None when a value cannot be written this way
    (the caller builds the lists then)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim == 2 and (lp.shape[0] == 0 or lp.shape[1] == 0):
        head = b"null," * skip
        n = lp.shape[0]
        body = b",".join([b"[]"] * n)
        return b"[" + (head + body if n else head[:-1]) + b"]"
    rows = entry_rows(lp, ids)
    return None if rows is None else as_array(rows, skip)


def own_entries(logprobs: np.ndarray, ids: np.ndarray, first_id: int) -> bytes | None:
    """SGLang's ``input_token_logprobs`` of a scored input without texts: ``[null, first_id, null]`` (the first
    position has no logprob), then one ``[lp, id, null]`` per value of ``logprobs`` (n,) and ``ids`` (n,), as JSON
    text. None when a value cannot be written this way (the caller builds the lists then)."""
    rows = own_rows(logprobs, ids)
    return None if rows is None else own_array(rows, first_id)


def own_rows(logprobs: np.ndarray, ids: np.ndarray) -> np.ndarray | None:
    """One ``[lp, id, null],`` per value of ``logprobs`` (n,) and ``ids`` (n,), as (n, width) ASCII (n may be 0);
    None when a value cannot be written this way."""
    if len(logprobs) == 0:
        return np.zeros((0, 0), dtype=np.uint8)
    rows = entry_rows(np.asarray(logprobs, dtype=np.float64).reshape(-1, 1), np.asarray(ids).reshape(-1, 1))
    if rows is None:
        return None
    # a row is "[" entry "]," with the entry "[lp,id,null]": the entries alone, each followed by its comma
    entries = rows[:, 1:-1].copy()
    entries[:, -1] = _COMMA
    return entries


def own_array(rows: np.ndarray, first_id: int) -> bytes:
    """The JSON array of ``[null, first_id, null]`` then the ``rows`` of :func:`own_rows`."""
    head = b"[[null," + str(int(first_id)).encode() + b",null]"
    return head + (b"," + rows.tobytes()[:-1] if rows.shape[0] else b"") + b"]"
