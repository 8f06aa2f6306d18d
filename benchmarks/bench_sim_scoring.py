"""Benchmark: the simulator's own CPU for the same scoring requests, this checkout against a baseline commit, side
by side in one run, and whether their answers are byte for byte the same.

The demo's CPU figure (``bench_demo.py``) cannot tell a change of a few percent in the simulated servers on a loaded
machine (the same code measures 17-24 s of abh CPU from one run to the next). Here only the simulator runs: one
server per side (``python -m abh_simulator`` from each tree, taking turns, a fresh server per round), each sent the
same SGLang ``/generate`` scoring batches one at a time (``--batch`` questions of GSM8K prompt + answer, the last
``--positions`` tokens scored, top ``--top-k`` and ``--asked`` ids asked, as a scoring pass asks them). The
server's CPU seconds over those requests (from /proc), medians over the rounds; the answers (request ids and
latencies blanked; one run seed) must be identical on both sides, else the run fails.

    python benchmarks/bench_sim_scoring.py [--baseline REV] [--rounds 3] [--top-k 5] [--requests 20]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from harness.tasks import gsm8k

ROOT = Path(__file__).resolve().parents[1]
#: The fields of an answer that differ from one request to the next whatever the code (its id, its latency)
VOLATILE = re.compile(rb'"(id|e2e_latency)":("[^"]*"|[0-9.e-]+)')


def start(tree: Path, cwd: Path, *flags: str) -> tuple[subprocess.Popen[bytes], str]:
    """The simulator of ``tree`` on a free port (run seed 1, and ``flags``), once it answers ``/health``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "abh_simulator", "--port", str(port), "--run-seed", "1", *flags],
                         env={**os.environ, "PYTHONPATH": str(tree)}, cwd=cwd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                return p, url
        except requests.RequestException:
            pass
        time.sleep(0.05)
    p.kill()
    sys.exit(f"the simulator from {tree} did not start")


def cpu_s(p: subprocess.Popen[bytes]) -> float:
    fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bodies(url: str, a: argparse.Namespace) -> list[dict]:
    """The scoring batches (token ids by the server's own /tokenize; the same on every side and round)."""
    rows = gsm8k.read_embedded_test()
    shots = gsm8k.few_shot_block(rows[:5])
    texts = [shots + gsm8k.one_example(r, False) + " " + r["answer"] for r in rows[:a.requests * a.batch]]
    ids = requests.post(url + "/tokenize", json={"prompt": texts}, timeout=600).json()["tokens"]
    rnd = random.Random(0)
    out = []
    for i in range(0, len(ids), a.batch):
        items = ids[i:i + a.batch]
        out.append({"input_ids": items, "sampling_params": {"max_new_tokens": 0, "temperature": 0},
                    "return_logprob": True, "logprob_start_len": [max(0, len(x) - 1 - a.positions) for x in items],
                    "top_logprobs_num": [a.top_k] * len(items),
                    "token_ids_logprob": [[rnd.randrange(3, 32000) for _ in range(a.asked)] for _ in items]})
    return out


def measure(tree: Path, a: argparse.Namespace, cwd: Path) -> tuple[float, list[bytes]]:
    """(the server's CPU seconds over the scoring requests, its answers with the volatile fields blanked)."""
    p, url = start(tree, cwd, "--noise", "pass")
    try:
        batches = bodies(url, a)
        requests.post(url + "/generate", json=batches[0], timeout=600)  # first use: numpy, the tokenizer
        c0 = cpu_s(p)
        answers = []
        with requests.Session() as s:
            for b in batches:
                r = s.post(url + "/generate", json=b, timeout=600)
                r.raise_for_status()
                answers.append(VOLATILE.sub(rb'"\1":0', r.content))
        return cpu_s(p) - c0, answers
    finally:
        p.terminate()
        p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="ced30a7", metavar="REV")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16, help="questions per request (divergence.batch)")
    ap.add_argument("--positions", type=int, default=100, help="tokens scored per question")
    ap.add_argument("--top-k", type=int, default=5, help="divergence.top_k (the demo's 5)")
    ap.add_argument("--asked", type=int, default=8, help="ids asked per question (8 at top-5, 32 at top-20)")
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
        answers: dict[str, list[bytes]] = {}
        for _ in range(a.rounds):
            for side, tree in trees.items():
                s, got = measure(tree, a, cwd)
                cpu[side].append(s)
                answers.setdefault(side, got)
                print(f"[{side}] simulator CPU {s:.2f} s", file=sys.stderr)
    same = answers["baseline"] == answers["this"]
    b, t = statistics.median(cpu["baseline"]), statistics.median(cpu["this"])
    print(f"\n{a.requests} scoring requests of {a.batch} questions, {a.positions} positions, top-{a.top_k}, "
          f"{a.asked} ids asked; median of {a.rounds} round(s); baseline {a.baseline}, this checkout\n")
    print(f"{'figure':<34} {'baseline':>10} {'this':>10} {'ratio':>7}")
    print(f"{'simulator CPU s':<34} {b:>10.2f} {t:>10.2f} {t / b if b else float('nan'):>7.2f}")
    print(f"answers byte-identical: {'yes' if same else 'NO'}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
