"""The simulated engine's MoE routing, as SGLang returns it with ``return_routed_experts``.

Per token and layer the gate picks ``topk`` distinct routed experts out of ``num_experts`` (ids
``0..num_experts-1``), drawn from (seed, the token's context hash, layer). The seed's shared-slot bug is
modelled on the gate: a buggy build (``routed_experts_bug``) runs top-(k-1) and puts the gate's own shared
marker, id ``num_experts`` (one past the last routed expert), in the last slot; a fixed build returns k
routed ids, all ``< num_experts``. SGLang captures the ids before the shared-expert append, so this is what
its ``meta_info["routed_experts"]`` shows on each side of the fix.

Near ties. A router's k-th and (k+1)-th scores are sometimes close enough that rounding decides between them:
on a share ``noise_share`` of the (token, layer) rows, drawn anew for every launch (``launch_key``), the k-th
routed expert is swapped for the (k+1)-th, so two launches of one build do not route every token identically
(the A/A floor); ``shift_share`` does the same on rows drawn by the build label (``build_key``), the same on every
launch of that build: a kernel change (a router-logits GEMM, a reduction order) that flips near-tied experts.

Wire shape (SGLang ``--enable-return-routed-experts``, request ``return_routed_experts: true``, optional
``routed_experts_start_len``): base64 of a little-endian int32 C-order array of shape
``(seqlen - 1 - routed_experts_start_len, num_layers, topk)`` where ``seqlen = prompt_tokens +
completion_tokens``; row ``r`` is the routing of the token at position ``routed_experts_start_len + r``.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence

import numpy as np

from abh_simulator.hashing import key_of, mix_np


def routed_experts(states: Sequence[int], start: int, end: int, seed: int, num_experts: int, topk: int,
                   num_layers: int, buggy: bool, noise_share: float = 0.0, launch_key: object = 0,
                   shift_share: float = 0.0, build_key: object = "") -> np.ndarray:
    """(end - start, num_layers, topk) int32: the experts the gate routes positions start..end-1 to;
    ``states[p]`` is the context hash of position p (abh_simulator.logprobs.context_states). ``noise_share`` /
    ``shift_share``: the share of rows whose near tie flips on this launch / in this build (module docstring)."""
    n = max(0, end - start)
    out = np.zeros((n, num_layers, topk), dtype=np.int32)
    if n == 0:
        return out
    s = np.array([states[p + 1] for p in range(start, end)], dtype=np.uint64)  # includes the token itself
    layer = np.arange(num_layers, dtype=np.uint64)
    width = min(topk + 1, num_experts)
    ranked = _ranked(s, layer, seed, num_experts, width)
    kept = topk - 1 if buggy else topk  # the buggy gate fills top-(k-1) routed slots
    flip = (_row_draw(s, layer, "abh-sim/near-tie-launch", seed, launch_key) < noise_share) \
        ^ (_row_draw(s, layer, "abh-sim/near-tie-build", seed, build_key) < shift_share)
    if kept < width:  # the near-tied (k+1)-th expert takes the k-th slot
        ranked[:, :, kept - 1] = np.where(flip, ranked[:, :, kept], ranked[:, :, kept - 1])
    routed = ranked[:, :, :topk].copy()
    if buggy:
        routed[:, :, -1] = num_experts  # then the gate's shared marker
    out[:] = routed
    return out


def _ranked(s: np.ndarray, layer: np.ndarray, seed: int, num_experts: int, width: int) -> np.ndarray:
    """(positions, layers, width) int32: each row's ``width`` best experts, best first, distinct. A row's ranking
    is the progression a, a + b, a + 2b, ... (mod num_experts) with a and a step b coprime to num_experts drawn from
    the row: distinct ids, every expert equally loaded, and O(width) per row (a 384-expert sort per row and layer
    would cost seconds per request at 61 layers)."""
    salt = np.uint64(key_of("abh-sim/router", seed))
    with np.errstate(over="ignore"):
        keys = mix_np(s[:, None] * np.uint64(0x9E3779B97F4A7C15) ^ salt ^ (layer[None, :] * np.uint64(0xD1B54A32D192ED03)))
    steps = np.array([b for b in range(1, num_experts) if math.gcd(b, num_experts) == 1] or [1], dtype=np.uint64)
    a = keys % np.uint64(num_experts)
    b = steps[((keys >> np.uint64(32)) % np.uint64(steps.size)).astype(np.int64)]
    j = np.arange(width, dtype=np.uint64)
    return ((a[:, :, None] + b[:, :, None] * j) % np.uint64(num_experts)).astype(np.int32)


def _row_draw(s: np.ndarray, layer: np.ndarray, *labels: object) -> np.ndarray:
    """(positions, layers) uniforms in [0, 1) from the positions' context hashes, the layer and ``labels``."""
    salt = np.uint64(key_of(*labels))
    with np.errstate(over="ignore"):
        keys = s[:, None] * np.uint64(0x94D049BB133111EB) ^ salt ^ (layer[None, :] * np.uint64(0x9E3779B97F4A7C15))
    return (mix_np(keys) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


#: SGLang's wire dtypes (``SGLANG_ROUTED_EXPERTS_DTYPE``; python/sglang/srt/layers/moe/routed_experts_capturer.py,
#: ``encode_routed_experts_for_wire``)
WIRE_DTYPES = {"int32": "<i4", "uint16": "<u2", "uint8": "u1"}


def encode(arr: np.ndarray, dtype: str = "int32") -> tuple[str, str]:
    """SGLang's wire encoding: base64 of the C-order bytes in ``dtype``, or int32 where an id does not fit (as
    SGLang does: the advertised dtype is the one of the bytes sent); (payload, dtype name)."""
    name = dtype.strip().lower() if dtype.strip().lower() in WIRE_DTYPES else "int32"
    if name != "int32" and arr.size:
        info = np.iinfo(np.dtype(WIRE_DTYPES[name]))
        if int(arr.min()) < info.min or int(arr.max()) > info.max:
            name = "int32"
    raw = np.ascontiguousarray(arr, dtype=WIRE_DTYPES[name]).tobytes()
    return base64.b64encode(raw).decode("ascii"), name


def decode(payload: str, num_layers: int, topk: int, dtype: str = "int32") -> np.ndarray:
    """The inverse of :func:`encode`: (rows, num_layers, topk) int32."""
    flat = np.frombuffer(base64.b64decode(payload), dtype=WIRE_DTYPES[dtype]).astype(np.int32)
    return flat.reshape(-1, num_layers, topk)
