"""A stand-in for ``python -m sglang.launch_server`` on CPU, for the seed's live side checks.

Run as ``python -m fake_sglang_server --host H --port P [anything else, ignored]`` (tests put this folder on
the arm's PYTHONPATH and point the SGLang engine's ``module`` at it). Like SGLang it:

* starts ``FAKE_SCHEDULERS`` (default 2) child processes whose command line reads ``sglang::scheduler_TP<i>``
  and that inherit this process's environment (SGLang's schedulers read ``SGLANG_USE_AITER`` at import);
* logs ``Shared experts fusion optimization enabled.`` when ``FAKE_FUSION=1``;
* answers ``/health``, ``/health_generate``, ``/server_info`` + ``/model_info`` (or, with
  ``FAKE_DEPRECATED_ONLY=1``, only the deprecated ``/get_server_info`` + ``/get_model_info``);
* answers ``POST /generate`` with ``"return_routed_experts": true`` with ``meta_info.routed_experts``: base64
  int32 ``[tokens, layers, 6]``; ``FAKE_BUILD=buggy`` routes like the gate before the fix (5 routed ids + the
  gate's shared marker 384 per row), ``fixed`` like after it (6 routed ids); layer 0 stays zero, like a layer
  the gate does not route. ``FAKE_ROUTED_FORMAT=list`` answers a nested list instead of base64;
  ``FAKE_NO_ROUTED=1`` leaves them out (a server started without ``--enable-return-routed-experts``).
* ``FAKE_NEVER_READY=1``: ``/health_generate`` stays 503 (a server still loading).
* DP attention ranks (``routed_dp_rank``): ``FAKE_BAD_RANK=r`` routes requests pinned to rank ``r`` like the buggy
  build (and unpinned ones like ``FAKE_BUILD``); ``FAKE_DP_FIELD=data_parallel_rank`` refuses ``routed_dp_rank``
  with HTTP 400 as an SGLang that only knows the older name does.
* ``FAKE_ROUTED_DTYPE=uint16|uint8``: the payload's dtype (``SGLANG_ROUTED_EXPERTS_DTYPE``; int32 where an id does
  not fit, as SGLang does), advertised in ``meta_info.routed_experts_dtype`` unless ``FAKE_ADVERTISE_DTYPE=0``.
* ``FAKE_REDUNDANT=8``: ids are physical slots of 384 + 8 (logical ids 0..7 sit in the replicas 384..391), as
  with ``--ep-num-redundant-experts 8``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NUM_EXPERTS = 384
TOP_K = 6
LAYERS = 3


def routed_rows(build: str, tokens: int) -> list[list[list[int]]]:
    rows = []
    for t in range(tokens):
        per_layer = [[0] * TOP_K]  # layer 0: not routed by the gate (dense / hash layer)
        for layer in range(1, LAYERS):
            ids = [(7 * t + 31 * layer + 13 * j) % NUM_EXPERTS for j in range(TOP_K)]
            if build == "buggy":
                ids = ids[:TOP_K - 1] + [NUM_EXPERTS]  # the gate's own shared marker takes a routed slot
            per_layer.append(ids)
        rows.append(per_layer)
    return rows


def encode(rows: list[list[list[int]]], dtype: str = "int32") -> tuple[str, str]:
    """(base64 payload, the dtype really used: int32 where an id does not fit the one asked for)."""
    flat = [x for tok in rows for layer in tok for x in layer]
    fmt = {"int32": "i", "uint16": "H", "uint8": "B"}[dtype]
    if dtype != "int32" and (min(flat) < 0 or max(flat) >= (1 << (16 if dtype == "uint16" else 8))):
        fmt, dtype = "i", "int32"
    return base64.b64encode(struct.pack(f"<{len(flat)}{fmt}", *flat)).decode("ascii"), dtype


def physical(rows: list[list[list[int]]], redundant: int) -> list[list[list[int]]]:
    """Logical ids 0..redundant-1 placed in their replica slots NUM_EXPERTS + id (a static EPLB placement)."""
    return [[[NUM_EXPERTS + x if 0 <= x < redundant and len(set(layer)) > 1 else x for x in layer]
             for layer in tok] for tok in rows]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: object) -> None:
        pass

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        deprecated_only = os.environ.get("FAKE_DEPRECATED_ONLY") == "1"
        info = {"server_args": {"moe_a2a_backend": "mori", "enforce_shared_experts_fusion": True,
                                "disable_shared_experts_fusion": False, "ep_size": 8},
                "moe_a2a_backend": "mori", "enforce_shared_experts_fusion": True, "port": self.server.server_port,
                "max_total_num_tokens": int(os.environ.get("FAKE_MAX_TOTAL_NUM_TOKENS", "1000")),
                "version": "0.0.0-fake"}
        model = {"model_path": "fake/model"}
        routes = {"/get_server_info": info, "/get_model_info": model}
        if not deprecated_only:
            routes.update({"/server_info": info, "/model_info": model})
        if self.path == "/health":
            self._send(200, {})
        elif self.path == "/health_generate":
            self._send(503 if os.environ.get("FAKE_NEVER_READY") == "1" else 200, {})
        elif self.path in routes:
            self._send(200, routes[self.path])
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path != "/generate":
            self._send(404, {"detail": "Not Found"})
            return
        if "routed_dp_rank" in req and os.environ.get("FAKE_DP_FIELD") == "data_parallel_rank":
            self._send(400, {"error": "GenerateReqInput.__init__() got an unexpected keyword argument "
                                      "'routed_dp_rank'"})
            return
        rank = req.get("routed_dp_rank", req.get("data_parallel_rank"))
        meta: dict[str, object] = {"prompt_tokens": 5, "completion_tokens": 4, "finish_reason": {"type": "length"}}
        if req.get("return_routed_experts") and os.environ.get("FAKE_NO_ROUTED") != "1":
            build = os.environ.get("FAKE_BUILD", "fixed")
            if rank is not None and str(rank) == os.environ.get("FAKE_BAD_RANK"):
                build = "buggy"
            rows = physical(routed_rows(build, tokens=8), int(os.environ.get("FAKE_REDUNDANT", "0")))
            if os.environ.get("FAKE_ROUTED_FORMAT") == "list":
                meta["routed_experts"] = rows
            else:
                meta["routed_experts"], dtype = encode(rows, os.environ.get("FAKE_ROUTED_DTYPE", "int32"))
                if "FAKE_ROUTED_DTYPE" in os.environ and os.environ.get("FAKE_ADVERTISE_DTYPE") != "0":
                    meta["routed_experts_dtype"] = dtype
            meta["dp_rank"] = rank
        self._send(200, {"text": " Paris", "meta_info": meta})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    args, _unknown = ap.parse_known_args()
    children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", f"sglang::scheduler_TP{i}"])
                for i in range(int(os.environ.get("FAKE_SCHEDULERS", "2")))]
    if os.environ.get("FAKE_FUSION") == "1":
        print("[2026-08-29 10:00:00 TP0] Shared experts fusion optimization enabled.", flush=True)
    print(f"fake sglang server on {args.host}:{args.port}", flush=True)
    try:
        ThreadingHTTPServer((args.host, args.port), Handler).serve_forever()
    finally:
        for c in children:
            c.kill()


if __name__ == "__main__":
    main()
