"""Benchmark: the three scoring passes of a divergence measurement against zero-latency simulators.

One eval of arm A (1319 questions by default), then, as ``abh run`` does it: A's reference pass on A's launch
(tokenizing once), B's pass (``engine.logit_shift`` 0.3, A's top ids asked by ``token_ids_logprob``) and the A/A
floor on a fresh launch of A; then :func:`harness.analysis.divergence.compute_divergence`. Prints each pass's wall and
this process's CPU time, tokens, ``scores.parquet`` size, and the client's peak RSS (``VmHWM``) so far. The
simulators are separate processes: their CPU is not counted in the client's but shown beside it (``sim CPU``),
their wall time is part of each step's. One-time imports are paid before the first step (:func:`warm_up`).
Then each step runs again with the simulator's cost taken out (``... (replayed)``): recorded through
``benchmarks/replay_server.py`` (not timed), then timed against that proxy replaying the recorded answers; its
``sim CPU`` is the proxy's. The last lines give each pass's wall over an eval's, with the simulator in and out.

    python benchmarks/bench_scoring.py [--questions 1319] [--parallel 1319] [--top-k 20] [--baseline REV]

With ``--baseline REV`` (a git revision of this repository, e.g. the commit before a change), the same
measurement runs twice, one after the other in this run, in subprocesses: once on REV's harness (exported
with ``git archive``) and once on this checkout's; a table of both and their ratios (REV / this) follows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

from harness.analysis.divergence import compute_divergence
from harness.measure.divergence_pass import ScoringOptions, score_pass
from harness.measure.evaluation import EvalOptions, run_eval
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k
from harness.tasks.gsm8k import EMBEDDED_TEST


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def warm_up(root: Path) -> None:
    """The one-time imports of a process (pyarrow writing parquet loads pandas: ~0.3 s) before any step is
    timed, so that the first pass is not charged for what a run pays once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1]}), root / "warm_up.parquet")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Replay:
    """``benchmarks/replay_server.py`` in front of a server: records its answers, then replays them."""

    def __init__(self, upstream: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("replay_server.py")),
                                      "--port", str(self.port), "--upstream", upstream],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if requests.get(self.url + "/__replay__/stats", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("replay server not ready")

    def mode(self, what: str) -> dict:
        return requests.post(f"{self.url}/__replay__/{what}", timeout=10).json()

    def cpu(self) -> float:
        return Sim.cpu(self)  # type: ignore[arg-type]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Sim:
    def __init__(self, *args: str) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "abh_simulator", "--port", str(self.port), *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("simulator not ready")

    def cpu(self) -> float:
        """The process's CPU seconds so far (user + system, from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def side_by_side(args: argparse.Namespace) -> None:
    """The measurement on ``args.baseline``'s harness and on this checkout's, and their ratios."""
    here = Path(__file__).resolve().parent.parent
    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench_scoring_base_") as base:
        archive = subprocess.run(["git", "-C", str(here), "archive", args.baseline, "harness"], check=True,
                                 capture_output=True).stdout
        tree = Path(base) / "tree"
        tree.mkdir()
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        # the runs' working directory holds no harness: `python -m abh_simulator` would import one found
        # there before PYTHONPATH's (the baseline's simulators served both runs until this was so)
        for name, root in ((args.baseline, tree), ("this checkout", here)):
            env = {**os.environ, "PYTHONPATH": str(root)}
            out = subprocess.run([sys.executable, __file__, "--json", "--questions", str(args.questions),
                                  "--parallel", str(args.parallel), "--top-k", str(args.top_k)], env=env,
                                 capture_output=True, text=True, cwd=base)
            if out.returncode:
                sys.exit(f"the measurement on {name} failed:\n{out.stderr[-3000:]}")
            runs[name] = {r["step"]: r for r in json.loads(out.stdout.strip().splitlines()[-1])}
    old, new = runs[args.baseline], runs["this checkout"]
    assert next(iter(old.values()))["harness"].startswith(base), "the baseline run did not import REV's harness"
    print(f"{args.questions} questions, parallel {args.parallel}, top-{args.top_k}: {args.baseline} vs this checkout "
          "(CPU: the client process's; the simulators run in their own processes)")
    print(f"{'step':26s} {'CPU s ' + args.baseline[:8]:>16s} {'CPU s now':>10s} {'CPU ratio':>10s} "
          f"{'wall s ' + args.baseline[:8]:>17s} {'wall s now':>11s} {'wall ratio':>11s} "
          f"{'sim CPU s ' + args.baseline[:8]:>20s} {'sim CPU s now':>14s}")
    for step, o in old.items():
        n = new[step]
        print(f"{step:26s} {o['cpu']:16.2f} {n['cpu']:10.2f} {o['cpu'] / n['cpu']:9.2f}x "
              f"{o['wall']:17.2f} {n['wall']:11.2f} {o['wall'] / n['wall']:10.2f}x "
              f"{o['sim_cpu']:20.2f} {n['sim_cpu']:14.2f}")
    ratios(new, "on this checkout")


def ratios(run: dict, where: str) -> None:
    """Each pass's wall over an eval's (against the simulator), with the simulator's cost in and out."""
    ev = run.get("eval a")
    if not ev:
        return
    for step in ("reference pass", "B pass", "A/A floor"):
        line = f"{step}: wall {run[step]['wall'] / ev['wall']:.2f}x an eval's ({ev['wall']:.2f} s)"
        rep = run.get(f"{step} (replayed)")
        if rep:
            line += (f"; replayed (the simulator's cost out: {run[step]['sim_cpu']:.2f} s of its CPU) "
                     f"{rep['wall'] / ev['wall']:.2f}x")
        print(f"{line} {where}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=1319)
    ap.add_argument("--parallel", type=int, default=1319)
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--baseline", metavar="REV", help="also measure REV's harness, side by side")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline:
        return side_by_side(args)
    test = gsm8k.load(EMBEDDED_TEST, "test")
    root = Path(tempfile.mkdtemp(prefix="bench_scoring_"))
    warm_up(root)
    a, b = root / "evals/a/r1", root / "evals/b/r1"
    rows = []

    def timed(name: str, fn, sim: Sim | None = None) -> dict:  # type: ignore[no-untyped-def]
        s0 = sim.cpu() if sim else 0.0
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows.append((name, wall, cpu, (sim.cpu() - s0) if sim else 0.0, out, peak_rss_mib()))
        return out

    def replayed(name: str, sim: Sim, step) -> None:  # type: ignore[no-untyped-def]
        """``step(url, out_dir)`` through a recording proxy of ``sim`` (not timed), then timed against the proxy
        replaying those answers: the client's wall and CPU without the simulator's (the proxy's CPU beside)."""
        proxy = Replay(sim.url)
        try:
            scratch = Path(tempfile.mkdtemp(prefix="replay_", dir=root))
            step(proxy.url, scratch / "recorded")
            proxy.mode("replay")
            timed(f"{name} (replayed)", lambda: step(proxy.url, scratch / "replayed"), proxy)  # type: ignore[arg-type]
            stats = proxy.mode("stats")
            if stats["missed"]:
                sys.exit(f"{name}: {stats['missed']} request(s) replayed were never recorded")
        finally:
            proxy.stop()

    a1, b1 = Sim("--build", "a", "--noise", "launch"), Sim("--build", "b", "--logit-shift", "0.3", "--noise", "launch")
    try:
        for d, s in ((a, a1), (b, b1)):
            timed(f"eval {d.parent.name}", lambda d=d, s=s: run_eval(
                test, gsm8k.RecipeConfig(num_questions=args.questions), ClientConfig(url=s.url, parallel=args.parallel),
                d, None, EvalOptions(progress=False)), s)
        cfg = lambda s: ClientConfig(url=s.url, parallel=args.parallel)  # noqa: E731
        timed("reference pass", lambda: score_pass(a, cfg(a1), a, ScoringOptions(top_k=args.top_k, progress=False)),
              a1)
        timed("B pass", lambda: score_pass(a, cfg(b1), b, ScoringOptions(top_k=args.top_k, reference_scores=a,
                                                                           progress=False)), b1)
        # the same steps again, the simulator's cost taken out: recorded through a proxy, then replayed by it
        replayed("eval a", a1, lambda url, d: run_eval(
            test, gsm8k.RecipeConfig(num_questions=args.questions), ClientConfig(url=url, parallel=args.parallel),
            d, None, EvalOptions(progress=False)))
        replayed("reference pass", a1, lambda url, d: score_pass(
            a, ClientConfig(url=url, parallel=args.parallel), d, ScoringOptions(top_k=args.top_k, progress=False)))
        replayed("B pass", b1, lambda url, d: score_pass(
            a, ClientConfig(url=url, parallel=args.parallel), d,
            ScoringOptions(top_k=args.top_k, reference_scores=a, progress=False)))
    finally:
        a1.stop()
        b1.stop()
    a2 = Sim("--build", "a", "--noise", "launch")
    try:
        timed("A/A floor", lambda: score_pass(a, ClientConfig(url=a2.url, parallel=args.parallel), root / "evals/aa/r1",
                                              ScoringOptions(top_k=args.top_k, reference_scores=a, progress=False)),
              a2)
        replayed("A/A floor", a2, lambda url, d: score_pass(
            a, ClientConfig(url=url, parallel=args.parallel), d,
            ScoringOptions(top_k=args.top_k, reference_scores=a, progress=False)))
    finally:
        a2.stop()
    d = timed("divergence", lambda: compute_divergence(a, b, root / "evals/aa/r1"))
    if args.json:
        import harness

        print(json.dumps([{"step": name, "wall": wall, "cpu": cpu, "sim_cpu": sim, "peak_rss_mib": peak,
                           "harness": harness.__file__} for name, wall, cpu, sim, _, peak in rows]))
        return
    print(f"{args.questions} questions, parallel {args.parallel}, top-{args.top_k}; {d.tokens} reference tokens")
    print(f"{'step':26s} {'wall s':>8s} {'CPU s':>8s} {'sim CPU s':>10s} {'tokens':>8s} {'parquet MiB':>12s} "
          f"{'peak RSS MiB':>13s}")
    for name, wall, cpu, sim, out, peak in rows:
        toks = out.get("tokens") if isinstance(out, dict) and "status" in out else ""
        size = ""
        if isinstance(out, dict) and out.get("status") == "ok":
            rel = {"reference pass": a, "B pass": b, "A/A floor": root / "evals/aa/r1"}.get(name)
            size = f"{(rel / 'scores.parquet').stat().st_size / 2**20:.1f}" if rel else ""
        print(f"{name:26s} {wall:8.2f} {cpu:8.2f} {sim:10.2f} {toks!s:>8s} {size:>12s} {peak:13.0f}")
    print(f"verdict {d.verdict}: KLD {d.kld_mean:.4g} vs A/A {d.kld_mean_aa:.4g} "
          "(peak RSS: this process's VmHWM after each step, imports included; sim CPU of a replayed step: the "
          "replaying proxy's)")
    ratios({name: {"wall": wall, "sim_cpu": sim} for name, wall, _, sim, _, _ in rows}, "")


if __name__ == "__main__":
    main()
