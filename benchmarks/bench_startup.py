"""Benchmark: what an ``abh`` command pays before it does anything, side by side in one run.

Each variant is a fresh interpreter (``python -c``), timed over ``--repeats`` runs (median CPU time, user + sys,
of the child; wall beside it):

- ``python``: the bare interpreter (the floor);
- ``abh eval`` / ``abh run`` / ``abh compare``: importing the modules each command imports when it is chosen
  (``harness.cli.main`` imports them lazily), which is the start-up of that command;
- ``abh run + scipy.stats``: the same plus ``scipy.stats`` and ``scipy.signal``, which the statistics imported
  until they took their distributions from ``scipy.special`` (``harness/stats/dist.py``): what that saves.

- ``harness.config``: the config's door alone (no HTTP client, no Hydra, no task module).

With ``--baseline REV`` the same variants of that commit (exported by ``git archive``) are timed in turns with this
checkout's, and the table puts them side by side with their ratio (this / baseline).

    python benchmarks/bench_startup.py [--repeats 5] [--baseline b3039bf]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {
    "python": "pass",
    "abh eval": "import harness.measure.evaluation, harness.serving.client",
    "abh run": "import harness.cli.run",
    "abh compare": "import harness.cli.compare",
    "abh run + scipy.stats": "import harness.cli.run, scipy.stats, scipy.signal",
    "harness.config": "import harness.config",
}


def measure(code: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(CPU seconds of the child, wall seconds) of one fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), wall


def side_by_side(baseline: str, repeats: int) -> None:
    """Each variant of ``baseline`` and of this checkout, in turns; their median CPU and the ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", baseline], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        envs = {"baseline": {**os.environ, "PYTHONPATH": tmp}, "this": {**os.environ, "PYTHONPATH": str(ROOT)}}
        print(f"median CPU s of {repeats} fresh interpreters; baseline {baseline}, this checkout\n")
        print(f"{'variant':<24} {'baseline':>9} {'this':>9} {'ratio':>7}")
        for name, code in VARIANTS.items():
            runs: dict[str, list[float]] = {k: [] for k in envs}
            for env in envs.values():
                measure(code, env)  # warm the page cache and the bytecode caches
            for _ in range(repeats):
                for side, env in envs.items():
                    runs[side].append(measure(code, env)[0])
            b, t = statistics.median(runs["baseline"]), statistics.median(runs["this"])
            print(f"{name:<24} {b:>9.2f} {t:>9.2f} {t / b:>7.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline", default=None, metavar="REV", help="time this commit's start-up beside this one's")
    args = ap.parse_args()
    if args.baseline:
        side_by_side(args.baseline, args.repeats)
        return
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
