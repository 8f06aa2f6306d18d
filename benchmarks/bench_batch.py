"""Benchmark: one scoring pass (arm B's, A's top ids asked) at several ``divergence.batch`` sizes, against a
zero-latency simulator: the pass's wall, this process's CPU and the simulator's CPU, per batch size, so the default
is chosen by measurement (each size runs ``--rounds`` times, taking turns; medians).

    python benchmarks/bench_batch.py [--questions 1319] [--sizes 1,4,8,16,32] [--rounds 2] [--top-k 20]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from bench_scoring import Sim, warm_up

from harness.measure.divergence_pass import ScoringOptions, score_pass
from harness.measure.evaluation import EvalOptions, run_eval
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--sizes", default="1,4,8,16,32")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--top-k", type=int, default=ScoringOptions().top_k, help="divergence.top_k (the demo's: 5)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    a = Sim("--build", "a", "--run-seed", "1", "--noise", "launch")
    b = Sim("--build", "b", "--logit-shift", "0.3", "--run-seed", "2", "--noise", "launch")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            warm_up(root)
            ev = root / "a"
            run_eval(gsm8k.load(gsm8k.EMBEDDED_TEST, "test"),
                     gsm8k.RecipeConfig(num_questions=args.questions), ClientConfig(url=a.url, parallel=1319), ev,
                     None, EvalOptions(progress=False))
            t = time.perf_counter()
            score_pass(ev, ClientConfig(url=a.url, parallel=128), ev, ScoringOptions(progress=False, top_k=args.top_k))
            print(f"reference pass (batch {ScoringOptions().batch}): {time.perf_counter() - t:.1f} s")
            got: dict[int, list[tuple[float, float, float]]] = {s: [] for s in sizes}
            for r in range(args.rounds):
                for s in sizes:
                    c0, s0, t0 = cpu_self(), b.cpu(), time.perf_counter()
                    meta = score_pass(ev, ClientConfig(url=b.url, parallel=128), root / f"b{s}_{r}",
                                      ScoringOptions(progress=False, batch=s, reference_scores=ev,
                                                     top_k=args.top_k))
                    assert meta["status"] == "ok", meta
                    got[s].append((time.perf_counter() - t0, cpu_self() - c0, b.cpu() - s0))
            print(f"{'batch':>5} {'wall s':>7} {'abh CPU s':>9} {'sim CPU s':>9} {'total CPU':>9}")
            for s in sizes:
                w, c, m = (statistics.median(x[i] for x in got[s]) for i in range(3))
                print(f"{s:>5} {w:>7.2f} {c:>9.2f} {m:>9.2f} {c + m:>9.2f}")
    finally:
        a.stop()
        b.stop()


if __name__ == "__main__":
    main()
