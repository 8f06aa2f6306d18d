"""Side check ``routed_experts``: which experts the server's MoE gate really picks, per token and layer.

One short ``POST /generate`` with ``"return_routed_experts": true`` per DP attention rank (each has its own
scheduler), each of which must pass. Ids are decoded in the dtype :func:`wire_dtype` names and read through
the physical -> logical expert map where the server has one (:func:`expert_map_for`: with redundant experts an
id >= ``num_experts`` may be a replica, not a shared marker). A row whose ids are all equal is a layer the
gate did not fill, and is skipped; the rules on the others are the fields of
:class:`~harness.config.CheckConfig`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from harness.arms.arm import ResolvedArm
from harness.checks.result import CheckResult, check_name
from harness.config import CheckConfig
from harness.engines.base import Engine, refuse_redirect
from harness.engines.sglang import dp_attention_ranks
from harness.results.records import JSONObject
from harness.serving.routed_wire import decode_routed
from harness.util.cmdline import flag_value

#: Rows shown in the evidence.
_SHOW = 4
DTYPE_ENV = "SGLANG_ROUTED_EXPERTS_DTYPE"


def decode_routed_experts(value: Any, dtype: str = "int32") -> list[int]:
    """SGLang's ``meta_info["routed_experts"]``: base64 of ``dtype``, or a (nested) list of ints."""
    return decode_routed(value, dtype).tolist()


def judge(ids: Sequence[int], c: CheckConfig) -> tuple[bool, str, JSONObject]:
    """(passed, found, evidence) for the flat ``ids`` under check ``c`` (the rules: the fields of CheckConfig)."""
    k, n = int(c.top_k), int(c.num_experts)
    if not ids:
        return False, "no routed experts in the reply", {}
    if len(ids) % k:
        return False, f"{len(ids)} ids, not a whole number of rows of top_k={k}", {"ids": len(ids)}
    rows = [list(ids[i:i + k]) for i in range(0, len(ids), k)]
    routed = [r for r in rows if len(set(r)) > 1]
    in_range = [sum(0 <= x < n for x in r) for r in routed]
    outside = [[x for x in r if not 0 <= x < n] for r in routed]
    counts = Counter(in_range)
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
    good = sum((c.routed_per_token is None or m == c.routed_per_token)
               and (c.out_of_range is not True or bool(o)) for m, o in zip(in_range, outside, strict=True))
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


def wire_dtype(meta: JSONObject, launch_env: dict[str, str]) -> tuple[str, str]:
    """(dtype, where it comes from) of an answer's routed experts: ``meta_info.routed_experts_dtype``, else the
    server's ``SGLANG_ROUTED_EXPERTS_DTYPE`` at launch, else int32 (SGLang's default and its legacy payloads)."""
    said = meta.get("routed_experts_dtype")
    if isinstance(said, str) and said:
        return said.strip().lower(), "meta_info.routed_experts_dtype"
    env = launch_env.get(DTYPE_ENV)
    if env:
        return env.strip().lower(), f"the server's {DTYPE_ENV}"
    return "int32", "default"


@dataclass(frozen=True)
class ExpertMap:
    """The physical -> logical expert map: one list per MoE layer (or one for every layer)."""

    per_layer: list[list[int]]
    source: str

    def logical(self, ids: Sequence[int], layers: int | None, top_k: int) -> list[int]:
        """``ids`` (rows of ``top_k``, layer-major within each position) as logical ids; an id outside the map
        (a shared marker, a -1 sentinel) stays as it is."""
        if len(self.per_layer) > 1 and (layers is None or layers != len(self.per_layer)):
            raise ValueError(f"the expert map has {len(self.per_layer)} layers, the answer "
                             f"{layers if layers is not None else 'an unknown number of'}")
        out = []
        for j, x in enumerate(ids):
            table = self.per_layer[(j // top_k) % len(self.per_layer)]
            out.append(table[x] if 0 <= x < len(table) else x)
        return out


def load_expert_map(path: str, tree: str | None) -> ExpertMap:
    p = Path(path).expanduser()
    if not p.is_absolute() and tree:
        p = Path(tree) / p
    doc = json.loads(p.read_text())
    table = doc.get("physical_to_logical_map") if isinstance(doc, dict) else doc
    if isinstance(table, list) and table and all(isinstance(x, int) for x in table):
        table = [table]
    if not (isinstance(table, list) and table and all(
            isinstance(row, list) and all(isinstance(x, int) for x in row) for row in table)):
        raise ValueError(f"{p}: no physical_to_logical_map (a list of ints per layer)")
    return ExpertMap([list(row) for row in table], str(p))


def expert_map_for(c: CheckConfig, args: Sequence[str], tree: str | None) -> tuple[ExpertMap | None, str | None]:
    """(the map to read logical ids with, or None; why the check cannot judge, or None)."""
    path = c.expert_map or ""
    init = flag_value(args, ("--init-expert-location",))
    if not path and init and init.endswith(".json"):
        path = init
    redundant = int(flag_value(args, ("--ep-num-redundant-experts",)) or 0)
    if path:
        try:
            return load_expert_map(path, tree), None
        except (OSError, ValueError) as e:
            return None, f"cannot read the expert map {path}: {e}"
    if redundant > 0:
        return None, (f"the server runs {redundant} redundant expert(s) (--ep-num-redundant-experts): its ids are "
                      f"physical slots 0..{int(c.num_experts) + redundant - 1}, and an id >= {c.num_experts} may "
                      "be a replica, not a shared marker; give the check expert_map (the physical -> logical map, "
                      "as --init-expert-location takes it)")
    return None, None


def _positions(meta: JSONObject, start: int) -> int | None:
    p, g = meta.get("prompt_tokens"), meta.get("completion_tokens")
    if isinstance(p, int) and isinstance(g, int):
        return max(0, p + g - 1 - start)
    return None


def routed_experts_check(arm: ResolvedArm, engine: Engine, c: CheckConfig, index: int) -> CheckResult:
    name = check_name(c, index)
    what = "POST /generate with return_routed_experts -> meta_info.routed_experts"
    expected = expectation(c)
    if not engine.wire.native_sglang:
        return CheckResult(name, c.kind, False, expected, f"the {engine.api} API cannot return routed experts "
                           "here (needs SGLang's native /generate)", {}, arm.key, what)
    args = engine.user_args()
    n_ranks = dp_attention_ranks(args)
    ranks: list[int | None] = (list(c.dp_ranks) if c.dp_ranks is not None
                               else list(range(n_ranks)) if n_ranks > 1 else [None])
    emap, refuse = expert_map_for(c, args, arm.source.tree)
    url = engine.url + "/generate"
    ev: JSONObject = {"url": url, "prompt": c.prompt, "dp_ranks": [r for r in ranks if r is not None] or None,
                      "expert_map": emap.source if emap else None}
    if refuse:
        return CheckResult(name, c.kind, False, expected, refuse, ev, arm.key, what)
    launch_env = engine.launch_spec().env_delta if engine.launch_spec().launched else {}
    per_rank: dict[str, JSONObject] = {}
    first: JSONObject | None = None
    failed: list[str] = []
    for rank in ranks:
        ok, found, rev = _one_rank(url, c, rank, launch_env, emap, engine.http_headers)
        label = "any rank" if rank is None else f"rank {rank}"
        per_rank[label] = {"passed": ok, "found": found}
        if first is None or (not ok and not failed):
            first = rev
        if not ok:
            failed.append(f"{label}: {found}")
    ev.update(first or {})
    if len(ranks) > 1:
        ev["ranks"] = per_rank
    if failed:
        return CheckResult(name, c.kind, False, expected, "; ".join(failed), ev, arm.key, what)
    found = str(per_rank[next(iter(per_rank))]["found"])
    if len(ranks) > 1:
        found = f"every one of {len(ranks)} DP rank(s): {found}"
    return CheckResult(name, c.kind, True, expected, found, ev, arm.key, what)


def _one_rank(url: str, c: CheckConfig, rank: int | None, launch_env: dict[str, str],
              emap: ExpertMap | None, headers: dict[str, str]) -> tuple[bool, str, JSONObject]:
    """(passed, found, evidence) of one request, pinned to DP ``rank`` (None: not pinned)."""
    sampling = {"max_new_tokens": int(c.max_new_tokens), "temperature": 0}
    body: JSONObject = {"text": c.prompt, "sampling_params": sampling, "return_routed_experts": True}
    if c.routed_experts_start_len:
        body["routed_experts_start_len"] = int(c.routed_experts_start_len)
    ev: JSONObject = {}
    if rank is not None:
        body["routed_dp_rank"] = rank
    try:
        r = requests.post(url, json=body, timeout=300, headers=headers, allow_redirects=False)
        if rank is not None and r.status_code == 400 and "routed_dp_rank" in r.text:
            body.pop("routed_dp_rank")
            body["data_parallel_rank"] = rank  # SGLang before routed_dp_rank (still its deprecated alias)
            ev["rank_field"] = "data_parallel_rank"
            r = requests.post(url, json=body, timeout=300, headers=headers, allow_redirects=False)
        refuse_redirect(r, "POST", url)
        status = r.status_code
        reply = r.json()
    except (requests.RequestException, ValueError) as e:
        return False, f"POST {url} failed: {e}", ev
    ev["status"] = status
    if status != 200:
        return False, f"HTTP {status}: {str(reply)[:300]}", ev
    reply0 = reply[0] if isinstance(reply, list) and reply else reply
    meta = reply0.get("meta_info") if isinstance(reply0, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    value = meta.get("routed_experts")
    if value is None:
        return False, ("no meta_info.routed_experts in the reply (is the server started with "
                       "--enable-return-routed-experts?)"), ev
    dtype, dsource = wire_dtype(meta, launch_env)
    ev["dtype"] = f"{dtype} ({dsource})"
    try:
        ids = decode_routed_experts(value, dtype)
    except ValueError as e:
        return False, str(e), ev
    k = int(c.top_k)
    positions = _positions(meta, int(c.routed_experts_start_len))
    rows = len(ids) // k if k else 0
    layers = rows // positions if positions and rows % positions == 0 else None
    ev.update({"positions": positions, "layers": layers})
    if emap is not None:
        try:
            ids = emap.logical(ids, layers, k)
        except ValueError as e:
            return False, str(e), ev
    ok, found, jev = judge(ids, c)
    if positions is not None and layers is None and rows:
        ok = False
        found += (f"; {rows} row(s) are not a whole number of layers of the {positions} position(s) meta_info "
                  "counts (prompt_tokens + completion_tokens - 1 - routed_experts_start_len)")
    return ok, found, {**ev, **jev}
