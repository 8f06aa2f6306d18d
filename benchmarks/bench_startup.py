"""Benchmark: what an ``abh`` command pays before it does anything, side by side in one run.

Each variant is a fresh interpreter (``python -c``), timed over ``--repeats`` runs (median CPU time, user + sys,
of the child; wall beside it):

- ``python``: the bare interpreter (the floor);
- ``abh eval`` / ``abh run`` / ``abh compare``: importing the modules each command imports when it is chosen
  (``harness.cli.main`` imports them lazily), which is the start-up of that command;
- ``abh run + scipy.stats``: the same plus ``scipy.stats`` and ``scipy.signal``, which the statistics imported
  until they took their distributions from ``scipy.special`` (``harness/stats/dist.py``): what that saves.

Prints the table with each row's ratio to ``abh run``.

    python benchmarks/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time

VARIANTS = {
    "python": "pass",
    "abh eval": "import harness.measure.evaluation, harness.serving.client",
    "abh run": "import harness.cli.run",
    "abh compare": "import harness.cli.compare",
    "abh run + scipy.stats": "import harness.cli.run, scipy.stats, scipy.signal",
}


def measure(code: str) -> tuple[float, float]:
    """(CPU seconds of the child, wall seconds) of one fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rows = {}
    for name, code in VARIANTS.items():
        measure(code)  # warm the page cache and the bytecode caches
        runs = [measure(code) for _ in range(args.repeats)]
        rows[name] = (statistics.median(c for c, _ in runs), statistics.median(w for _, w in runs))
    ref = rows["abh run"][0]
    print(f"{'variant':<24} {'CPU s':>7} {'wall s':>7} {'CPU / abh run':>14}")
    for name, (cpu, wall) in rows.items():
        print(f"{name:<24} {cpu:>7.2f} {wall:>7.2f} {cpu / ref:>14.2f}")


if __name__ == "__main__":
    main()
