"""Benchmark: the memory and time the routing adds for 1319 questions x 300 tokens x 60 MoE layers x 8 ids.

Three passes (A's reference pass, B's, an A/A launch's) go through what a run does with each answer: the SGLang
answer (base64 int32, as the server sends it) is read by :func:`harness.serving.routed_wire.parse_routed` and
streamed to the routing store (:class:`harness.results.routing_store.RoutingWriter`, uint8 ids for 256 experts);
then :func:`harness.analysis.routing.compute_routing` compares them question by question. Each step runs in a fresh
subprocess so its peak RSS (``VmHWM``) is its own; ``baseline`` is the interpreter with the same modules imported,
nothing done. The routing adds the peak minus the baseline; the run's budget is 100 MB.

    python benchmarks/bench_routing.py [--questions 1319] [--tokens 300] [--layers 60] [--k 8] [--experts 256]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUDGET_MB = 100.0


def _hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _imports() -> None:
    import numpy  # noqa: F401

    import harness.analysis.routing  # noqa: F401
    import harness.results.routing_store  # noqa: F401
    import harness.serving.routed_wire  # noqa: F401


def write_pass(out: Path, args: argparse.Namespace, seed: int) -> None:
    import numpy as np

    from harness.results.routing_store import RoutingWriter
    from harness.serving.routed_wire import parse_routed

    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0)
    with RoutingWriter(out, args.k, args.layers, args.experts, {"launch": out.name}) as w:
        for q in range(args.questions):
            ids = base.integers(0, args.experts, (args.tokens, args.layers, args.k), dtype=np.int32)  # the same tokens
            flip = rng.random((args.tokens, args.layers)) < 0.001  # each launch's near ties
            ids[:, :, -1] = np.where(flip, (ids[:, :, -1] + 1) % args.experts, ids[:, :, -1])
            answer = {"meta_info": {"routed_experts": base64.b64encode(ids.astype("<i4").tobytes()).decode()}}
            del ids
            w.add(q, parse_routed(answer, args.tokens, args.k, args.layers))


def compare(root: Path) -> dict:
    from harness.analysis.routing import compute_routing

    r = compute_routing(root / "evals/a/r1", [root / "evals/b/r1"], [root / "evals/aa/r1"],
                        labels={"a": "A", "b": "B"})
    return {"verdict": r.verdict, "identical": r.identical, "identical_aa": r.identical_aa,
            "questions": r.questions}


def child(step: str, root: Path, args: argparse.Namespace) -> None:
    _imports()
    t0, c0 = time.perf_counter(), time.process_time()
    out: dict = {}
    if step.startswith("write"):
        role = step.split(":")[1]
        write_pass(root / "evals" / role / "r1", args, seed={"a": 1, "b": 2, "aa": 3}[role])
        out["bytes"] = (root / "evals" / role / "r1" / "routing.bin").stat().st_size
    elif step == "compare":
        out.update(compare(root))
    print(json.dumps({"step": step, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                      "peak_mb": _hwm_mb(), **out}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--layers", type=int, default=60)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--child", default="")
    ap.add_argument("--root", default="")
    args = ap.parse_args()
    if args.child:
        child(args.child, Path(args.root), args)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for step in ("baseline", "write:a", "write:b", "write:aa", "compare"):
            cmd = [sys.executable, __file__, "--child", step, "--root", tmp, "--questions", str(args.questions),
                   "--tokens", str(args.tokens), "--layers", str(args.layers), "--k", str(args.k),
                   "--experts", str(args.experts)]
            rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    base = rows[0]["peak_mb"]
    ids = args.questions * args.tokens * args.layers * args.k
    print(f"{args.questions} questions x {args.tokens} tokens x {args.layers} layers x {args.k} ids = {ids / 1e6:.0f} M ids "
          f"per pass; baseline peak RSS {base:.0f} MB (imports only)")
    print("| step | wall s | CPU s | peak RSS MB | added MB | notes |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    worst = 0.0
    for r in rows[1:]:
        added = r["peak_mb"] - base
        worst = max(worst, added)
        notes = (f"{r['bytes'] / 1e6:.0f} MB on disk" if "bytes" in r else
                 f"{r.get('verdict')}, identical {r.get('identical')}, A/A {r.get('identical_aa')}")
        print(f"| {r['step']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['peak_mb']:.0f} | {added:.0f} | {notes} |")
    print(f"most added by one step: {worst:.0f} MB ({'within' if worst <= BUDGET_MB else 'OVER'} the {BUDGET_MB:.0f} MB "
          "budget)")


if __name__ == "__main__":
    main()
