"""Stable 64-bit hashing for the simulator's token-level models (same values in every process and Python)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix(x: int) -> int:
    """splitmix64's finaliser on a Python int."""
    x &= M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def mix_np(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic); a new array (``x`` is not changed)."""
    return _mix_into(x >> _S30, x)


_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)
_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix_into(out: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
    """splitmix64's finaliser of ``x`` into ``out`` (uint64, x's shape; ``x`` None: of ``out`` itself), each step in
    place with one scratch array: the simulator hashes ~100 keys per scored token, and a fresh array per step cost
    as much as the arithmetic. ``out`` may hold ``x >> 30`` already (then pass ``x``)."""
    with np.errstate(over="ignore"):
        if x is None:
            tmp = out >> _S30
            out ^= tmp
        else:
            out ^= x  # out held x >> 30
            tmp = np.empty_like(out)
        out *= _C1
        np.right_shift(out, _S27, out=tmp)
        out ^= tmp
        out *= _C2
        np.right_shift(out, _S31, out=tmp)
        out ^= tmp
        return out


def key_of(*parts: object) -> int:
    """A 64-bit key from any labels."""
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


#: Per seed, the last sequence hashed and its states: requests share long prefixes (the few-shot block), whose
#: states are taken from here instead of recomputed (one Python hash per token is most of a request's cost)
_LAST: dict[int, tuple[np.ndarray, list[int]]] = {}


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(a.size, b.size)
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def context_states(ids: Sequence[int], seed: int) -> list[int]:
    """``s[p]`` = hash of ``ids[:p]`` (seeded) for p = 0..len(ids): what a position's distribution depends on."""
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    last = _LAST.get(seed)
    m = _common_prefix(last[0], arr) if last is not None else 0
    if last is not None and m:
        out = last[1][:m + 1]
    else:
        m, out = 0, [mix(key_of("abh-sim/ctx", seed))]
    s = out[-1]
    c1, c2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
    for t in arr[m:].tolist():  # mix(s ^ ((t + GOLDEN) & M64)), inline: no call per token
        x = s ^ ((t + GOLDEN) & M64)
        x = ((x ^ (x >> 30)) * c1) & M64
        x = ((x ^ (x >> 27)) * c2) & M64
        s = x ^ (x >> 31)
        out.append(s)
    _LAST[seed] = (arr, out)
    return list(out)


def context_states_many(seqs: Sequence[Sequence[int]], seed: int) -> list[list[int]]:
    """:func:`context_states` of each of ``seqs`` (the same values): the first one alone, then the others' tokens
    after their common prefix with it side by side. A scoring request's 16 sequences share their few-shot prefix
    and differ in ~175 tokens each, hashed one Python step per sequence and token (~10 % of a scoring request's
    CPU); here one step per token hashes them all, as lanes of one Python int (see :func:`_lanes_states`)."""
    if len(seqs) < 2:
        return [context_states(x, seed) for x in seqs]
    first = context_states(seqs[0], seed)
    head = np.asarray(seqs[0], dtype=np.int64).reshape(-1)
    rest = [np.asarray(x, dtype=np.int64).reshape(-1) for x in seqs[1:]]
    shared = [_common_prefix(head, a) for a in rest]
    steps = max(a.size - m for a, m in zip(rest, shared, strict=True))
    if not steps:
        return [first, *(first[:m + 1] for m in shared)]
    tokens = np.zeros((steps, len(rest)), dtype=np.int64)  # per step, each sequence's token (0 past its end)
    for j, (a, m) in enumerate(zip(rest, shared, strict=True)):
        tokens[:a.size - m, j] = a[m:]
    cols = _lanes_states([first[m] for m in shared], tokens)
    _LAST[seed] = (rest[-1], first[:shared[-1] + 1] + cols[-1][:rest[-1].size - shared[-1]])
    return [first, *(first[:m + 1] + col[:a.size - m] for a, m, col in zip(rest, shared, cols, strict=True))]


def _lanes_states(starts: list[int], tokens: np.ndarray) -> list[list[int]]:
    """Per lane j, the states after each of ``tokens[:, j]`` (steps, lanes) from the state ``starts[j]``: the rolling
    hash of :func:`context_states` for every lane at once, each lane 64 bits of its own 128 in one Python int (the
    64 above a lane's value are zero after every masking, so a product by a 64-bit constant stays in the lane, and
    what a right shift brings down from the next lane lands above the lane's 64 bits, where the mask clears it)."""
    steps, lanes = tokens.shape
    wide = np.zeros((steps, lanes, 2), dtype=np.uint64)
    with np.errstate(over="ignore"):
        wide[:, :, 0] = tokens.astype(np.uint64) + np.uint64(GOLDEN)  # (t + GOLDEN) & M64, per lane
    added = wide.tobytes()
    width = 16 * lanes
    mask = int.from_bytes(np.tile(np.array([M64, 0], dtype=np.uint64), lanes).tobytes(), "little")
    c1, c2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
    s = int.from_bytes(np.array([[v, 0] for v in starts], dtype=np.uint64).tobytes(), "little")
    out = []
    for j in range(steps):
        x = s ^ int.from_bytes(added[j * width:(j + 1) * width], "little")
        x = ((x ^ (x >> 30)) & mask) * c1 & mask
        x = ((x ^ (x >> 27)) & mask) * c2 & mask
        s = (x ^ (x >> 31)) & mask
        out.append(s.to_bytes(width, "little"))
    got: list[list[int]] = np.frombuffer(b"".join(out), dtype=np.uint64).reshape(steps, lanes, 2)[:, :, 0].T.tolist()
    return got


_TWO_TO_MINUS_53 = 2.0 ** -53
#: 2 pi / 2**53: a product by it is the product by 2**-53 (exact: a power of two) then by 2 pi, rounded once alike
_TWO_PI_TO_MINUS_53 = 2.0 * math.pi * _TWO_TO_MINUS_53


def _unit(m: np.ndarray, scale: float) -> np.ndarray:
    """((mix(m) >> 11) + 0.5) * scale as float64 (``m``: keys, uint64, overwritten)."""
    _mix_into(m)
    m >>= _S11
    u = np.add(m, 0.5, dtype=np.float64)  # the same conversion as astype (exact: below 2**53), then + 0.5
    u *= scale
    return u


def uniform(keys: np.ndarray) -> np.ndarray:
    """U(0, 1) (never 0) from uint64 keys: ((mix >> 11) + 0.5) / 2**53, each step in place (the division as a
    product by 2**-53: exact for a power of two, and cheaper)."""
    return _unit(keys.copy(), _TWO_TO_MINUS_53)


def normal(keys: np.ndarray, salt: int = 0) -> np.ndarray:
    """N(0, 1) from uint64 keys (Box-Muller on two derived uniforms): sqrt(-2 log u1) cos(2 pi u2), in place.
    ``salt``: the keys are ``keys ^ salt`` (without an array for them)."""
    u1 = _unit(keys ^ np.uint64((0x5851F42D4C957F2D ^ salt) & M64), _TWO_TO_MINUS_53)
    u2 = _unit(keys ^ np.uint64((0x14057B7EF767814F ^ salt) & M64), _TWO_PI_TO_MINUS_53)
    np.log(u1, out=u1)
    u1 *= -2.0
    np.sqrt(u1, out=u1)
    np.cos(u2, out=u2)
    u1 *= u2
    return u1


def pair_keys(states: np.ndarray, ids: np.ndarray, salt: int | np.ndarray) -> np.ndarray:
    """One uint64 key per (state, id) pair (states broadcast over the id columns); ``salt``: one for all, or one per
    state (uint64, (n,))."""
    add = salt[:, None] if isinstance(salt, np.ndarray) else np.uint64(salt & M64)
    with np.errstate(over="ignore"):
        return mix_np(states[:, None] * np.uint64(GOLDEN) ^ (ids.astype(np.uint64) + add))
