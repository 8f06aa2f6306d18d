"""Benchmark: the default ``abh run`` (the demo) and ``abh eval``, this checkout against a baseline commit, side by
side in one run.

For each side (this checkout; ``--baseline REV`` exported by ``git archive`` into a temp dir), taking turns
(baseline, this, baseline, this, ... so a drift of the loaded machine hits both):

* ``abh run`` in an empty directory, as a newcomer runs it: CPU seconds of every process (abh and the simulated
  servers it launches and waits for: ``wait4``'s rusage of the whole tree), the wall, abh's peak RSS (the largest
  single process), the run directory's size (and its prompt texts and scores in it), and each scoring pass's wall
  over the mean wall of an eval (``scores.json`` / ``summary.json`` ``wall_s``); each side with a bytecode cache of
  its own, as a newcomer's python keeps one;
* ``abh eval`` of 1319 questions at parallel 1319 against one simulated server, and a bare aiohttp client sending
  the same requests to the same server: the wall and CPU of each whole process and their ratio, ``--eval-rounds``
  times per side (a ratio of two ~1 s processes on a loaded 2-core machine moves by +-0.2 from one round to the
  next: one round proves nothing). The server answers one untimed eval first (its memos filled); the two clients
  take turns going first; both run with a warm bytecode cache of their own (``PYTHONPYCACHEPREFIX``, filled by an
  untimed run of each: with ``PYTHONDONTWRITEBYTECODE`` abh would compile its ~100 modules on every run, the bare
  client its few, which is no cost of abh's a user pays twice).

    python benchmarks/bench_demo.py [--baseline 25f941a] [--rounds 1] [--eval-rounds 9]

Prints one table: each figure for both sides, medians over the rounds with their spread [min, max], and the ratio
of the medians (this / baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: A bare client: the eval's prompts sent as SGLang /generate requests by one aiohttp session, answers read as JSON
BARE_CLIENT = r"""
import asyncio, json, sys
import aiohttp
from harness.tasks import gsm8k
url, parallel = sys.argv[1], int(sys.argv[2])
rows = gsm8k.read_embedded_test()
shots = gsm8k.few_shot_block(rows[:5])
sp = {"max_new_tokens": 512, "temperature": 0, "stop": ["Question", "Assistant:", "<|separator|>"]}
async def main():
    sem = asyncio.Semaphore(parallel)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=parallel)) as s:
        async def one(row):
            async with sem:
                async with s.post(url + "/generate", json={"text": shots + gsm8k.one_example(row, False),
                                                           "sampling_params": sp}) as r:
                    return json.loads(await r.read())["text"]
        outs = await asyncio.gather(*(one(r) for r in rows))
    print(len(outs))
asyncio.run(main())
"""


#: ``abh`` as ``python -m harness.cli.main``, writing its own CPU seconds (not its children's) to argv[1] at exit
ABH_SELF_CPU = r"""
import atexit, resource, runpy, sys
out = sys.argv.pop(1)
def _write():
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open(out, "w") as f:
        f.write(repr(r.ru_utime + r.ru_stime))
atexit.register(_write)
sys.argv[0] = "abh"
runpy.run_module("harness.cli.main", run_name="__main__")
"""


def run_tree(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """(wall s, CPU s of the whole process tree, peak RSS MiB of its largest process), by wait4."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed: {err.decode()[-2000:]}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def size_mb(root: Path, name: str | None = None) -> float:
    files = [p for p in root.rglob(name or "*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def walls(run: Path, name: str, key: str) -> list[float]:
    """Every ``key`` of the run's evals' ``name`` files (an eval's wall: ``summary.json``
    ``wall_s_this_session``; a scoring pass's: ``scores.json`` ``wall_s``)."""
    out = []
    for p in sorted((run / "evals").glob(f"*/*/{name}")):
        w = json.loads(p.read_text()).get(key)
        if isinstance(w, int | float):
            out.append(float(w))
    return out


def demo(tree: Path, env: dict[str, str]) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        own = Path(tmp) / "abh_cpu_s"
        wall, cpu, rss = run_tree([sys.executable, "-c", ABH_SELF_CPU, str(own), "run"], Path(tmp), env)
        run = Path(tmp) / "results" / "demo"
        evals, passes = walls(run, "summary.json", "wall_s_this_session"), walls(run, "scores.json", "wall_s")
        abh_cpu = float(own.read_text()) if own.is_file() else float("nan")
        return {"demo CPU s (all processes)": cpu, "  abh process CPU s": abh_cpu,
                "  simulated servers CPU s (the rest)": cpu - abh_cpu, "demo wall s": wall,
                "demo peak RSS MiB (abh)": rss,
                "run directory MB": size_mb(run), "  prompt texts MB": size_mb(run, "prompt*.jsonl*"),
                "  scores MB": size_mb(run, "scores.parquet"),
                "scoring pass wall / eval wall (worst)": max(passes) / statistics.mean(evals)}


def start_simulator(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    p = subprocess.Popen([sys.executable, "-m", "abh_simulator", "--port", "0", "--latency-s", "0"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert p.stdout is not None
    for line in p.stdout:
        text = line.decode()
        if "ready on " in text:
            return p, text.split("ready on ")[1].strip()
    sys.exit("the simulator did not start")


def client_env(env: dict[str, str], cache: Path) -> dict[str, str]:
    """``env`` with a bytecode cache of its own at ``cache`` (and bytecode written there)."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**out, "PYTHONPYCACHEPREFIX": str(cache)}


def client(env: dict[str, str], url: str, bare_first: bool = False) -> dict[str, float]:
    """``abh eval`` and the bare client against the (warm) simulator at ``url``, in turn (``bare_first``: the bare
    client's turn first, so neither always runs on the heels of the other)."""
    with tempfile.TemporaryDirectory() as tmp:
        def abh_eval() -> tuple[float, float, float]:
            return run_tree([sys.executable, "-m", "harness.cli.main", "eval", "--url", url, "--out", f"{tmp}/ev",
                             "--parallel", "1319", "--no-progress"], Path(tmp), env)

        def bare_client() -> tuple[float, float, float]:
            return run_tree([sys.executable, "-c", BARE_CLIENT, url, "1319"], Path(tmp), env)

        if bare_first:
            bare, abh = bare_client(), abh_eval()
        else:
            abh, bare = abh_eval(), bare_client()
    return {"abh eval wall / bare aiohttp wall": abh[0] / bare[0], "abh eval CPU / bare aiohttp CPU": abh[1] / bare[1],
            "  abh eval wall s": abh[0], "  bare aiohttp wall s": bare[0], "  abh eval CPU s": abh[1],
            "  bare aiohttp CPU s": bare[1]}


def export(rev: str, dest: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="25f941a", metavar="REV")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--eval-rounds", type=int, default=9, help="rounds of abh eval against the bare client per side")
    ap.add_argument("--skip-demo", action="store_true", help="only abh eval against the bare client")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"baseline": export(a.baseline, Path(tmp)), "this": ROOT}
        envs = {k: {**os.environ, "PYTHONPATH": str(t)} for k, t in trees.items()}
        clients = {k: client_env(e, Path(tmp) / "pycache") for k, e in envs.items()}
        figures: dict[str, dict[str, list[float]]] = {k: {} for k in trees}

        def keep(side: str, got: dict[str, float]) -> None:
            for k, v in got.items():
                figures[side].setdefault(k, []).append(v)
            print(f"[{side}] " + ", ".join(f"{k.strip()} {v:.2f}" for k, v in got.items()), file=sys.stderr)

        sim, url = start_simulator(envs["this"])  # one server for every client: what differs is the client
        try:
            # the server's first eval fills its memos (each prompt's tokens, each answer's text), and each client's
            # first run its bytecode cache: paid here, untimed, not by whichever client happens to go first
            for side in trees:
                client(clients[side], url)
            for _ in range(a.rounds if not a.skip_demo else 0):
                for side in ("baseline", "this"):  # with each side's bytecode cache (as a newcomer's python keeps)
                    keep(side, demo(trees[side], clients[side]))
            for r in range(a.eval_rounds):
                for side in (("baseline", "this") if r % 2 == 0 else ("this", "baseline")):
                    keep(side, client(clients[side], url, bare_first=bool((r // 2) % 2)))
        finally:
            sim.terminate()
            sim.wait(30)
    print_table(figures, a.baseline, a.rounds, width=42)


def print_table(figures: dict[str, dict[str, list[float]]], baseline: str, rounds: int, width: int) -> None:
    """Each figure's median on both sides (and its spread [min, max] over its rounds, when more than one) and the
    ratio of the medians (this / baseline)."""
    print(f"\nmedians of {rounds} round(s) (each figure's own count where it says n); baseline {baseline}, this "
          "checkout; ratio this / baseline\n")
    print(f"{'figure':<{width}} {'baseline':>19} {'this':>19} {'ratio':>7} {'n':>3}")
    for k in figures["this"]:
        b, t = statistics.median(figures["baseline"][k]), statistics.median(figures["this"][k])
        print(f"{k:<{width}} {_spread(figures['baseline'][k]):>19} {_spread(figures['this'][k]):>19} "
              f"{t / b if b else float('nan'):>7.2f} {len(figures['this'][k]):>3}")


def _spread(values: list[float]) -> str:
    med = f"{statistics.median(values):.2f}"
    return med if len(values) < 2 else f"{med} [{min(values):.2f},{max(values):.2f}]"


if __name__ == "__main__":
    main()
