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


def encode(rows: list[list[list[int]]]) -> str:
    flat = [x for tok in rows for layer in tok for x in layer]
    return base64.b64encode(struct.pack(f"<{len(flat)}i", *flat)).decode("ascii")


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
        meta: dict[str, object] = {"prompt_tokens": 5, "completion_tokens": 4, "finish_reason": {"type": "length"}}
        if req.get("return_routed_experts") and os.environ.get("FAKE_NO_ROUTED") != "1":
            rows = routed_rows(os.environ.get("FAKE_BUILD", "fixed"), tokens=8)
            meta["routed_experts"] = rows if os.environ.get("FAKE_ROUTED_FORMAT") == "list" else encode(rows)
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
