"""Hostile-server memory benchmark (issue 22, item 4): peak RSS of a 1319-question `abh eval` against a server that
answers 50 MB bodies on 5 % of its requests, with the body cap on (the default, 1 MiB + 1024 bytes per token the
request can produce) and with a cap so large it never applies (what abh did before: every body held whole).

    python benchmarks/bench_hostile.py [--questions 1319] [--parallel 1319] [--size-mb 50] [--every 20]

The server is tests/helpers/faultserver.py (mode ``huge``) in its own process; each eval runs in its own process,
measured with wait4. Prints wall time, peak RSS, the size of samples.jsonl and the errors of each, and the ratio.
Target: peak RSS < 300 MB with the cap.
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

from harness.tasks.gsm8k import EMBEDDED_TEST as DATA

ROOT = Path(__file__).resolve().parents[1]
FAULT_SERVER = ROOT / "tests" / "helpers" / "faultserver.py"
#: bytes per token so large that no answer is ever too large: the client before the cap
NO_CAP = 1 << 40


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_measured(argv: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MB, exit code, stderr tail) of a child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    _, status, ru = os.wait4(p.pid, 0)
    return time.perf_counter() - t0, ru.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), err[-500:]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--parallel", type=int, default=1319)
    ap.add_argument("--size-mb", type=int, default=50, help="size of a hostile answer")
    ap.add_argument("--every", type=int, default=20, help="one request in EVERY gets it (20: 5 %%)")
    a = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, str(FAULT_SERVER), "--mode", "huge", "--every", str(a.every),
                               "--size", str(a.size_mb << 20), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    rows = []
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening"
        for label, per_token in (("before: no body cap", NO_CAP), ("after: body cap (default)", 1024)):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "ev"
                wall, rss, code, err = run_measured(
                    [sys.executable, "-m", "harness.cli.main", "eval", "--url", f"http://127.0.0.1:{port}", "--out",
                     str(out), "--data", str(DATA), "--num-questions", str(a.questions), "--parallel",
                     str(a.parallel), "--no-progress", "--retries", "0", "--max-bytes-per-token", str(per_token)])
                summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
                size = (out / "samples.jsonl").stat().st_size / 2**20 if (out / "samples.jsonl").exists() else 0.0
                rows.append((label, wall, rss, size, summary.get("errors"), summary.get("invalid"), code))
                if code not in (0, 5):
                    print(f"{label}: exit {code}: {err}", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(10)
    print(f"\n{a.questions} questions, parallel {a.parallel}; a {a.size_mb} MB answer to 1 request in {a.every} "
          "(retries 0)\n")
    print(f"{'client':<28} {'wall s':>7} {'peak RSS MB':>12} {'samples.jsonl MB':>17} {'errors':>7} {'invalid':>8} "
          f"{'exit':>5}")
    for label, wall, rss, size, errors, invalid, code in rows:
        print(f"{label:<28} {wall:>7.1f} {rss:>12.0f} {size:>17.1f} {errors!s:>7} {invalid!s:>8} {code:>5}")
    (_, _, before, sb, *_), (_, _, after, sa, *_) = rows
    print(f"\npeak RSS with the cap: {after:.0f} MB (target < 300 MB), {before / after:.1f}x less than without it; "
          f"samples.jsonl {sa:.1f} MB vs {sb:.1f} MB")
    return 0 if after < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
