"""Benchmark: the simulator's own CPU over one eval (``abh eval`` of the 1319 questions at parallel 1319, each request
on its own connection, as the demo runs it), this checkout's simulator against a baseline commit's, side by side in
one run, and whether their answers are byte for byte the same.

One server per side (``python -m abh_simulator --run-seed 1 --latency-s 0`` from each tree; the client is always
this checkout's ``abh eval``), taking turns, a fresh server per round. The server first answers one untimed eval (its
memos filled, as in the demo's second eval on a server); then its CPU seconds (from /proc) over one more ``abh
eval``. The answers: every /generate request of the eval (and a few side endpoints and errors) sent once more by a
plain client, status, content type and body bytes compared (request ids and latencies blanked; the time in "created" too).

    python benchmarks/bench_sim_eval.py [--baseline REV] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
from bench_sim_scoring import start

from harness.tasks import gsm8k

ROOT = Path(__file__).resolve().parents[1]
#: The fields of an answer that differ from one request to the next whatever the code (its id, its latency, the time)
VOLATILE = re.compile(rb'"(id|e2e_latency|created)": ?("[^"]*"|[0-9.e-]+)')
SP = {"max_new_tokens": 512, "temperature": 0, "stop": ["Question", "Assistant:", "<|separator|>"]}
#: Requests beside the eval's whose answers must be the same too: (method, path, body)
EXTRA: list[tuple[str, str, Any]] = [
    ("GET", "/health", None), ("GET", "/version", None), ("GET", "/get_model_info", None),
    ("GET", "/v1/models", None), ("POST", "/health", None), ("GET", "/nowhere", None),
    ("POST", "/generate", b"{not json"), ("POST", "/generate", b"[1, 2]"), ("POST", "/generate", {"text": 3}),
    ("POST", "/generate", {"text": "x", "sampling_params": {"bogus": 1}}),
    ("POST", "/v1/completions", {"prompt": "Question: 1+1?\nAnswer:", "max_tokens": 30, "logprobs": 3, "echo": True}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Question: 2+2?\nAnswer:"}]}),
    ("POST", "/tokenize", {"prompt": ["a b", "Question: c"]}), ("POST", "/v1/detokenize", {"tokens": [5, 6, 7]}),
    ("POST", "/flush_cache", None),
]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def abh_eval(url: str, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "harness.cli.main", "eval", "--url", url, "--out", str(out),
                    "--parallel", "1319", "--no-progress"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _answers(url: str) -> list[tuple[int, str, bytes]]:
    rows = gsm8k.read_embedded_test()
    shots = gsm8k.few_shot_block(rows[:5])
    calls: list[tuple[str, str, Any]] = [("POST", "/generate", {"text": shots + gsm8k.one_example(r, False),
                                                                "sampling_params": SP}) for r in rows]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def one(method: str, path: str, body: Any) -> tuple[int, str, bytes]:
            kw = {"data": body} if isinstance(body, bytes) else {"json": body} if body is not None else {}
            async with s.request(method, url + path, **kw) as r:
                return r.status, r.headers.get("Content-Type", ""), VOLATILE.sub(rb'"\1": 0', await r.read())
        got = list(await asyncio.gather(*(one(*c) for c in calls)))
        for c in EXTRA:  # one by one: /flush_cache and the counters' order matter
            got.append(await one(*c))
    return got


def measure(tree: Path, cwd: Path, compare: bool) -> tuple[float, list[tuple[int, str, bytes]]]:
    """(the server's CPU seconds over one warm eval, its answers when ``compare``)."""
    p, url = start(tree, cwd, "--latency-s", "0")
    try:
        abh_eval(url, cwd / "warm")
        c0 = cpu_s(p.pid)
        abh_eval(url, cwd / "timed")
        cpu = cpu_s(p.pid) - c0
        return cpu, asyncio.run(_answers(url)) if compare else []
    finally:
        p.terminate()
        p.wait(30)
        subprocess.run(["rm", "-rf", str(cwd / "warm"), str(cwd / "timed")], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="7d1d16a", metavar="REV")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.baseline], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        trees = {"baseline": base, "this": ROOT}
        cwd = Path(tmp) / "cwd"  # no tree of its own: `python -m` imports the one PYTHONPATH names
        cwd.mkdir()
        cpu: dict[str, list[float]] = {k: [] for k in trees}
        answers: dict[str, list[tuple[int, str, bytes]]] = {}
        for r in range(a.rounds):
            for side, tree in trees.items():
                s, got = measure(tree, cwd, compare=r == 0)
                cpu[side].append(s)
                if r == 0:
                    answers[side] = got
                print(f"[{side}] simulator CPU over one eval {s:.2f} s", file=sys.stderr)
    diff = [i for i, (x, y) in enumerate(zip(answers["baseline"], answers["this"], strict=True)) if x != y]
    b, t = statistics.median(cpu["baseline"]), statistics.median(cpu["this"])
    print(f"\nabh eval, 1319 questions at parallel 1319; median of {a.rounds} round(s) "
          f"(spread {min(cpu['baseline']):.2f}-{max(cpu['baseline']):.2f} and "
          f"{min(cpu['this']):.2f}-{max(cpu['this']):.2f}); baseline {a.baseline}, this checkout\n")
    print(f"{'figure':<34} {'baseline':>10} {'this':>10} {'ratio':>7}")
    print(f"{'simulator CPU s over one eval':<34} {b:>10.2f} {t:>10.2f} {t / b if b else float('nan'):>7.2f}")
    print(f"answers byte-identical (status, content type, body): {'yes' if not diff else 'NO'} "
          f"({len(answers['this'])} requests)")
    for i in diff[:5]:
        print(f"  differs: #{i}: {answers['baseline'][i][:2]} {answers['baseline'][i][2][:200]!r}\n"
              f"       vs {answers['this'][i][:2]} {answers['this'][i][2][:200]!r}")
    if diff:
        sys.exit(1)


if __name__ == "__main__":
    main()
