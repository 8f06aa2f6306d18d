"""Custom side probe (stdlib only): is the server configured for the regime where the per-rank fused
shared-slot path runs? This reads the HTTP process's copy of the server args; the arms' ``process_env``,
``log_line`` and ``routed_experts`` checks read what the serving processes really do.

SGLang takes that path when shared experts are fused into the MoE (``--enforce-shared-experts-fusion``, as
the DeepEP family does not fuse by default) and the MoE all-to-all backend is DeepEP-class or MegaMoE
(``uses_per_rank_fused_shared_slots()`` in ``python/sglang/srt/layers/moe/utils.py``). The fix is a no-op
off that path, so an arm that is not on it measures nothing about the fix.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

PER_RANK_BACKENDS = {"deepep", "mooncake", "mori", "megamoe"}


def _server_info(url: str) -> dict[str, Any]:
    last: Exception | None = None
    for path in ("/server_info", "/get_server_info"):  # the deprecated name for older servers
        try:
            with urllib.request.urlopen(url.rstrip("/") + path, timeout=30) as r:
                return json.loads(r.read().decode())
        except Exception as e:  # noqa: BLE001 - try the other name
            last = e
    raise RuntimeError(f"no server info at {url}: {last}")


def regime(url: str) -> tuple[bool, dict[str, Any]]:
    info = _server_info(url)
    args = info.get("server_args") if isinstance(info.get("server_args"), dict) else info
    backend = str(args.get("moe_a2a_backend", "")).lower()
    enforce = bool(args.get("enforce_shared_experts_fusion"))
    disabled = bool(args.get("disable_shared_experts_fusion"))
    evidence = {"moe_a2a_backend": backend, "enforce_shared_experts_fusion": enforce,
                "disable_shared_experts_fusion": disabled, "ep_size": args.get("ep_size"),
                "version": info.get("version")}
    return backend in PER_RANK_BACKENDS and enforce and not disabled, evidence
