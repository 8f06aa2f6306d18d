"""Benchmark: the client's JSON parse with orjson and with the standard library, side by side.

Records the raw response bodies of one eval of 1319 questions and one top-20 scoring pass against the
zero-latency simulator (the bodies the client really receives), then times ``harness.serving.client._loads``
(orjson) and ``json.loads`` on the same bodies, best of ``--rounds``. This is what decided orjson as a
dependency (issue 18): the parse is the part of the client's CPU the library choice changes.

    python benchmarks/bench_json.py [--questions 1319] [--top-k 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).parent))

from bench_scoring import Sim  # noqa: E402

from harness.measure.divergence_pass import ScoringOptions, score_pass  # noqa: E402
from harness.measure.evaluation import EvalOptions, run_eval  # noqa: E402
from harness.serving import client  # noqa: E402
from harness.serving.client import ClientConfig  # noqa: E402
from harness.tasks import gsm8k  # noqa: E402
from harness.tasks.gsm8k import EMBEDDED_TEST  # noqa: E402


def record(questions: int, top_k: int) -> dict[str, list[bytes]]:
    """The bodies of one eval and one scoring pass, as the client received them."""
    bodies: dict[str, list[bytes]] = {"eval": [], "scoring": []}
    phase = "eval"
    real = client._loads

    def keep(raw: bytes) -> object:
        bodies[phase].append(bytes(raw))
        return real(raw)

    client._loads = keep  # type: ignore[assignment]
    root = Path(tempfile.mkdtemp(prefix="bench_json_"))
    sim = Sim("--build", "a")
    try:
        cfg = ClientConfig(url=sim.url, parallel=questions)
        run_eval(gsm8k.load(EMBEDDED_TEST, "test"), gsm8k.RecipeConfig(num_questions=questions), cfg,
                 root / "a", None, EvalOptions(progress=False))
        phase = "scoring"
        score_pass(root / "a", cfg, root / "a", ScoringOptions(top_k=top_k, progress=False))
    finally:
        sim.stop()
        client._loads = real  # type: ignore[assignment]
    return bodies


def best(fn, bodies: list[bytes], rounds: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        for raw in bodies:
            fn(raw)
        times.append(time.process_time() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    bodies = record(args.questions, args.top_k)
    print(f"orjson {orjson.__version__}; CPU seconds to parse every body, best of {args.rounds}")
    print(f"{'bodies of':12s} {'n':>6s} {'MiB':>8s} {'json s':>8s} {'orjson s':>9s} {'json/orjson':>12s}")
    for name, raws in bodies.items():
        mib = sum(map(len, raws)) / 2**20
        t_json, t_or = best(json.loads, raws, args.rounds), best(orjson.loads, raws, args.rounds)
        print(f"{name:12s} {len(raws):6d} {mib:8.1f} {t_json:8.3f} {t_or:9.3f} {t_json / t_or:12.2f}")


if __name__ == "__main__":
    main()
