"""Client benchmark: `abh eval` (one aiohttp session) vs a thread-per-request client shaped like SGLang's
frontend (a pool of `parallel` threads, each doing a blocking `requests.post`), side by side in one run,
against the same zero-latency local server (a minimal asyncio HTTP server answering at once).

    python benchmarks/bench_client.py [--questions 1319] [--parallel 1319] [--rounds 2]

Prints wall time, requests/s and whole-process peak RSS of each client (each runs in its own process,
measured with wait4), and the ratios. Targets: abh eval >= 3x faster, peak RSS < 250 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.tasks.gsm8k import EMBEDDED_TEST as DATA  # the canonical test set the package ships

#: A zero-latency server (raw asyncio protocol, uvloop when present): reads each request and answers at once
#: with a fixed GSM8K-style reply, so what is measured is the client, not the server.
ZERO_LATENCY_SERVER = r"""
import asyncio, json, sys
BODY = json.dumps({"text": " 2 + 2 = 4\n#### 4", "meta_info": {"prompt_tokens": 700, "completion_tokens": 8,
    "cached_tokens": 0, "finish_reason": {"type": "stop", "matched": "Question"}, "e2e_latency": 0.0}}).encode()
INFO = json.dumps({"model_path": "zero-latency"}).encode()
def response(body):
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n\r\n" + body)
class Http(asyncio.Protocol):
    # minimal HTTP/1.1 with keep-alive: read headers, then Content-Length bytes, answer at once
    def connection_made(self, transport):
        self.t, self.buf = transport, b""
    def data_received(self, data):
        self.buf += data
        while True:
            head, sep, rest = self.buf.partition(b"\r\n\r\n")
            if not sep:
                return
            n = 0
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    n = int(v)
            if len(rest) < n:
                return
            self.buf = rest[n:]
            self.t.write(response(BODY if head.startswith(b"POST") else INFO))
async def main(port):
    server = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", port, backlog=4096)
    print("ready", flush=True)
    await server.serve_forever()
try:
    import uvloop
    uvloop.run(main(int(sys.argv[1])))
except ImportError:
    asyncio.run(main(int(sys.argv[1])))
"""

THREADPOOL_CLIENT = r"""
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import requests
from harness.tasks import gsm8k
url, n, parallel, data = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
task = gsm8k.GSM8K(gsm8k.load(data), gsm8k.RecipeConfig(num_questions=n))
requests.post(url + "/generate", json=task.warmup_body(), timeout=3600)
def one(q):
    r = requests.post(url + "/generate", json=task.generate_body(q), timeout=3600)
    r.raise_for_status()
    return gsm8k.get_answer_value(r.json()["text"]) == q.label
t0 = time.perf_counter()
with ThreadPoolExecutor(parallel) as ex:
    correct = sum(ex.map(one, task.questions))
print(json.dumps({"wall": time.perf_counter() - t0, "correct": correct}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_measured(argv: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MB, exit code, stdout) of a child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read().decode() if p.stdout else ""
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.stderr.write(p.stderr.read().decode()[-2000:] if p.stderr else "")
    return wall, ru.ru_maxrss / 1024, p.returncode, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--parallel", type=int, default=1319)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-c", ZERO_LATENCY_SERVER, str(port)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL)
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "ready"
        time.sleep(0.5)
        rows: dict[str, list[tuple[float, float, float]]] = {"abh eval (aiohttp)": [], "thread pool (SGLang-style)": []}
        for _ in range(a.rounds):
            with tempfile.TemporaryDirectory() as tmp:
                w, rss, rc, _ = run_measured([sys.executable, "-m", "harness.cli.main", "eval", "--url", url, "--out",
                                              f"{tmp}/ev", "--data", str(DATA), "--num-questions",
                                              str(a.questions), "--parallel", str(a.parallel), "--no-progress"])
                assert rc == 0, "abh eval failed"
                batch = json.loads(Path(f"{tmp}/ev/summary.json").read_text())["latency_s"]
                rows["abh eval (aiohttp)"].append((w, batch, rss))
            w, rss, rc, out = run_measured([sys.executable, "-c", THREADPOOL_CLIENT, url, str(a.questions),
                                            str(a.parallel), str(DATA)])
            assert rc == 0, "thread-pool client failed"
            rows["thread pool (SGLang-style)"].append((w, json.loads(out.strip().splitlines()[-1])["wall"], rss))
    finally:
        server.terminate()
        server.wait(10)
    print(f"\n{a.questions} questions, parallel {a.parallel}, zero-latency local server, best of {a.rounds} "
          "(whole process: start-up, data load, warm-up, eval)\n")
    print(f"{'client':<30} {'process s':>10} {'batch s':>8} {'req/s (batch)':>14} {'peak RSS MB':>12}")
    best = {}
    for name, vals in rows.items():
        w = min(v[0] for v in vals)
        b = min(v[1] for v in vals)
        rss = max(v[2] for v in vals)
        best[name] = (w, b, rss)
        print(f"{name:<30} {w:>10.2f} {b:>8.2f} {a.questions / b:>14.0f} {rss:>12.0f}")
    (wa, ba, ra), (wt, bt, rt) = best["abh eval (aiohttp)"], best["thread pool (SGLang-style)"]
    print(f"\nspeed-up of abh eval over the thread pool: batch {bt / ba:.2f}x, whole process {wt / wa:.2f}x "
          "(target >= 3x)")
    print(f"peak RSS of abh eval: {ra:.0f} MB (target < 250 MB); thread pool: {rt:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
