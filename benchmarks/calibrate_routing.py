"""Calibration of the routing's launch-level test against an independent generator of near-tie flips
(tests/helpers/routing_generator.py, not the simulator): its false-positive rate where every launch's near-tie
flip rate differs (a lognormal launch factor of sd ``sd_log``) and its power for a change that flips near ties on
a share of the (token, layer) rows (2 % by default), each with its 95 % Wilson interval.

Questions: 1319 with 60-300 reference tokens each, x 58 routed layers (DeepSeek-V4: 61 layers, 3 hash-routed).

    python benchmarks/calibrate_routing.py [--experiments 2000] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from helpers.routing_generator import rejection_rate  # noqa: E402

# (design label, A launches besides the reference, B launches)
DESIGNS = [("seed default: A 3 + A/A 2 + B 3 (m_A 4, m_B 3)", 4, 3), ("A 2 + A/A 1 + B 2 (m_A 2, m_B 2)", 2, 2),
           ("one A/A launch, one B launch (per-question test)", 1, 1)]
RATES = (1e-4, 0.01)
SDS = (0.0, 0.3, 0.5)
SHIFTS = (0.0, 0.02, 0.002)


def wilson(k: float, n: int) -> tuple[float, float]:
    z, p = 1.959964, k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    rows = rng.integers(60, 301, 1319) * 58
    lines = ["| design | near-tie flips per launch | launch sd (log) | change | rejected | 95 % CI |",
             "| --- | --- | --- | --- | --- | --- |"]
    t0 = time.perf_counter()
    for label, ma, mb in DESIGNS:
        for rate in RATES:
            for sd in SDS:
                for shift in SHIFTS:
                    if ma == 1 and shift:
                        continue
                    r = rejection_rate(rows, ma, mb, rate, sd, shift, args.experiments, seed=11)
                    lo, hi = wilson(r * args.experiments, args.experiments)
                    what = "none (size)" if shift == 0 else f"flips {shift:.1%} of rows (power)"
                    lines.append(f"| {label} | {rate:.2%} | {sd} | {what} | {r:.1%} | {lo:.1%} - {hi:.1%} |")
                    print(lines[-1], flush=True)
    text = "\n".join(lines) + f"\n\n{args.experiments} experiments per row, {time.perf_counter() - t0:.0f} s\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
