"""The simulated engine's MoE routing, as SGLang returns it with ``return_routed_experts`` (issue 12).

Per token and layer the gate picks ``topk`` distinct routed experts out of ``num_experts`` (ids
``0..num_experts-1``), drawn from (seed, the token's context hash, layer). The seed's shared-slot bug is
modelled on the gate: a buggy build (``routed_experts_bug``) runs top-(k-1) and puts the gate's own shared
marker, id ``num_experts`` (one past the last routed expert), in the last slot; a fixed build returns k
routed ids, all ``< num_experts``. SGLang captures the ids before the shared-expert append, so this is what
its ``meta_info["routed_experts"]`` shows on each side of the fix.

Wire shape (SGLang ``--enable-return-routed-experts``, request ``return_routed_experts: true``, optional
``routed_experts_start_len``): base64 of a little-endian int32 C-order array of shape
``(seqlen - 1 - routed_experts_start_len, num_layers, topk)`` where ``seqlen = prompt_tokens +
completion_tokens``; row ``r`` is the routing of the token at position ``routed_experts_start_len + r``.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import numpy as np

from abh_simulator.hashing import key_of, mix_np


def routed_experts(states: Sequence[int], start: int, end: int, seed: int, num_experts: int, topk: int,
                   num_layers: int, buggy: bool) -> np.ndarray:
    """(end - start, num_layers, topk) int32: the experts the gate routes positions start..end-1 to;
    ``states[p]`` is the context hash of position p (abh_simulator.logprobs.context_states)."""
    n = max(0, end - start)
    out = np.zeros((n, num_layers, topk), dtype=np.int32)
    if n == 0:
        return out
    s = np.array([states[p + 1] for p in range(start, end)], dtype=np.uint64)  # includes the token itself
    salt = np.uint64(key_of("abh-sim/router", seed))
    layer = np.arange(num_layers, dtype=np.uint64)
    expert = np.arange(num_experts, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = (s[:, None, None] * np.uint64(0x9E3779B97F4A7C15) ^ salt
                ^ (layer[None, :, None] * np.uint64(0xD1B54A32D192ED03))
                ^ (expert[None, None, :] * np.uint64(0xBF58476D1CE4E5B9)))
    scores = mix_np(keys)
    routed = np.argsort(scores, axis=2, kind="stable")[:, :, :topk].astype(np.int32)
    if buggy:
        routed[:, :, -1] = num_experts  # top-(k-1) routed, then the gate's shared marker
    out[:] = routed
    return out


def encode(arr: np.ndarray) -> str:
    """SGLang's wire encoding: base64 of the little-endian int32 bytes (C order)."""
    return base64.b64encode(np.ascontiguousarray(arr, dtype="<i4").tobytes()).decode("ascii")


def decode(payload: str, num_layers: int, topk: int) -> np.ndarray:
    """The inverse of :func:`encode`: (rows, num_layers, topk) int32."""
    flat = np.frombuffer(base64.b64decode(payload), dtype="<i4")
    return flat.reshape(-1, num_layers, topk)
