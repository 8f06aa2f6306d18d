"""Side check ``routed_experts``: which experts the server's MoE gate really picks, per token and layer.

One short ``POST /generate`` with ``"return_routed_experts": true`` (SGLang, PR #12162; the server needs
``--enable-return-routed-experts``). SGLang answers in ``meta_info["routed_experts"]``: the int32 expert ids
of every token (but the last) and MoE layer, flattened ``[tokens, layers, top_k]`` and base64-encoded
(older builds: a plain list). They are captured as the gate returns them, before a fused shared expert is
appended, so they show what the gate itself emitted.

Each row (one token in one layer) holds ``top_k`` ids. A row whose ids are all equal is a layer the gate
did not fill (dense or hash-routed layers stay zero) and is skipped. For the others:

* ``routed_per_token``: the row's ids in ``0 .. num_experts-1`` must number exactly this many;
* ``out_of_range: true``: the row must hold an id outside that range (a shared-expert marker);
* both must hold in at least ``min_share`` of the routed rows;
* ``out_of_range: false``: no id outside the range may appear in any row, whatever ``min_share`` says.

The seed's gate, before the fix, spends one of its 6 routed slots on its own shared marker (id 384 for 384
routed experts): 5 routed ids and an out-of-range one per token. After the fix it returns 6 routed ids.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Sequence
from typing import Any

import requests

from harness.arms.arm import ResolvedArm
from harness.checks.result import CheckResult, check_name
from harness.config import CheckConfig
from harness.engines.base import Engine
from harness.results.records import JSONObject

#: Rows shown in the evidence.
_SHOW = 4


def decode_routed_experts(value: Any) -> list[int]:
    """SGLang's ``meta_info["routed_experts"]``: base64 of little-endian int32, or a (nested) list of ints."""
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError) as e:
            raise ValueError(f"routed_experts is a string but not base64: {e}") from None
        if len(raw) % 4:
            raise ValueError(f"routed_experts holds {len(raw)} bytes, not a whole number of int32")
        return [x[0] for x in struct.iter_unpack("<i", raw)]
    if isinstance(value, list):
        out: list[int] = []
        stack: list[Any] = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, list):
                stack.extend(reversed(v))
            elif isinstance(v, int) and not isinstance(v, bool):
                out.append(v)
            else:
                raise ValueError(f"routed_experts holds a non-integer {v!r}")
        return out
    raise ValueError(f"routed_experts must be a base64 string or a list, not {type(value).__name__}")


def judge(ids: Sequence[int], c: CheckConfig) -> tuple[bool, str, JSONObject]:
    """(passed, found, evidence) for the flat ``ids`` under check ``c`` (see the module docstring)."""
    k, n = int(c.top_k), int(c.num_experts)
    if not ids:
        return False, "no routed experts in the reply", {}
    if len(ids) % k:
        return False, f"{len(ids)} ids, not a whole number of rows of top_k={k}", {"ids": len(ids)}
    rows = [list(ids[i:i + k]) for i in range(0, len(ids), k)]
    routed = [r for r in rows if len(set(r)) > 1]
    in_range = [sum(0 <= x < n for x in r) for r in routed]
    outside = [[x for x in r if not 0 <= x < n] for r in routed]
    counts: dict[int, int] = {}
    for m in in_range:
        counts[m] = counts.get(m, 0) + 1
    marker_ids = sorted({x for o in outside for x in o})
    ev: JSONObject = {"rows": len(rows), "routed_rows": len(routed), "skipped_rows": len(rows) - len(routed),
                          "in_range_per_row": {str(m): v for m, v in sorted(counts.items())},
                          "rows_with_out_of_range": sum(bool(o) for o in outside),
                          "out_of_range_ids": marker_ids[:16], "first_rows": routed[:_SHOW]}
    desc = (f"{len(routed)} routed row(s) of {k}: in-range ids per row "
            + ", ".join(f"{m}: {v} row(s)" for m, v in sorted(counts.items()))
            + (f"; ids outside 0..{n - 1}: {marker_ids[:8]} in {ev['rows_with_out_of_range']} row(s)"
               if marker_ids else f"; no id outside 0..{n - 1}"))
    if not routed:
        return False, f"{len(rows)} row(s), none routed (every row's ids are equal)", ev
    good = 0
    for m, o in zip(in_range, outside, strict=True):
        row_ok = (c.routed_per_token is None or m == c.routed_per_token) and (c.out_of_range is not True or bool(o))
        good += row_ok
    share = good / len(routed)
    ev["share_as_expected"] = share
    ok = share >= float(c.min_share) - 1e-12
    anywhere = sorted({x for x in ids if not 0 <= x < n})
    if c.out_of_range is False and anywhere:
        ok = False
        if not marker_ids:
            desc += f"; ids outside 0..{n - 1} in rows skipped as unrouted: {anywhere[:8]}"
    return ok, desc, ev


def expectation(c: CheckConfig) -> str:
    parts = []
    if c.routed_per_token is not None:
        parts.append(f"{c.routed_per_token} ids in 0..{c.num_experts - 1}")
    if c.out_of_range is True:
        parts.append(f"an id outside 0..{c.num_experts - 1} (a shared marker)")
    rows = f"in >= {c.min_share:.0%} of the routed rows of {c.top_k}" if c.min_share < 1 else "in every routed row"
    text = (" and ".join(parts) + " " + rows) if parts else f"routed rows of {c.top_k}"
    if c.out_of_range is False:
        text += f"; no id outside 0..{c.num_experts - 1} anywhere"
    return text


def routed_experts_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    what = "POST /generate with return_routed_experts -> meta_info.routed_experts"
    expected = expectation(c)
    if not engine.wire.native_sglang:
        return CheckResult(name, c.kind, False, expected, f"the {engine.api} API cannot return routed experts "
                           "here (needs SGLang's native /generate)", {}, arm.key, what)
    body: JSONObject = {"text": c.prompt, "sampling_params": {"max_new_tokens": int(c.max_new_tokens), "temperature": 0.0},
            "return_routed_experts": True}
    url = engine.url + "/generate"
    try:
        r = requests.post(url, json=body, timeout=300)
        status = r.status_code
        reply = r.json()
    except (requests.RequestException, ValueError) as e:
        return CheckResult(name, c.kind, False, expected, f"POST {url} failed: {e}", {"url": url}, arm.key, what)
    ev: JSONObject = {"url": url, "status": status, "prompt": c.prompt}
    if status != 200:
        return CheckResult(name, c.kind, False, expected, f"HTTP {status}: {str(reply)[:300]}", ev, arm.key, what)
    reply0 = reply[0] if isinstance(reply, list) and reply else reply
    meta = reply0.get("meta_info") if isinstance(reply0, dict) else None
    value = meta.get("routed_experts") if isinstance(meta, dict) else None
    if value is None:
        return CheckResult(name, c.kind, False, expected, "no meta_info.routed_experts in the reply (is the server "
                           "started with --enable-return-routed-experts?)", ev, arm.key, what)
    try:
        ids = decode_routed_experts(value)
    except ValueError as e:
        return CheckResult(name, c.kind, False, expected, str(e), ev, arm.key, what)
    ok, found, jev = judge(ids, c)
    return CheckResult(name, c.kind, ok, expected, found, {**ev, **jev}, arm.key, what)
