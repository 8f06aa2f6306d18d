"""Benchmark: the default ``abh run`` (the demo) and ``abh eval``, this checkout against a baseline commit, side by
side in one run.

For each side (this checkout; ``--baseline REV`` exported by ``git archive`` into a temp dir), taking turns
(baseline, this, baseline, this, ... so a drift of the loaded machine hits both):

* ``abh run`` in an empty directory, as a newcomer runs it: CPU seconds of every process (abh and the simulated
  servers it launches and waits for: ``wait4``'s rusage of the whole tree), the wall, abh's peak RSS (the largest
  single process), the run directory's size (and its prompt texts and scores in it), and each scoring pass's wall
  over the mean wall of an eval (``scores.json`` / ``summary.json`` ``wall_s``);
* ``abh eval`` of 1319 questions at parallel 1319 against one simulated server, and a bare aiohttp client sending
  the same requests to the same server: the wall of each whole process and their ratio. The server answers one
  untimed eval first (its memos filled), and the two clients take turns going first.

    python benchmarks/bench_demo.py [--baseline 25f941a] [--rounds 1]

Prints one table: each figure for both sides and their ratio (this / baseline), medians over the rounds.
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


def client(tree: Path, env: dict[str, str], url: str, bare_first: bool = False) -> dict[str, float]:
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
    return {"abh eval wall / bare aiohttp wall": abh[0] / bare[0], "abh eval CPU / bare aiohttp CPU": abh[1] / bare[1]}


def export(rev: str, dest: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="25f941a", metavar="REV")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--skip-demo", action="store_true", help="only abh eval against the bare client")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"baseline": export(a.baseline, Path(tmp)), "this": ROOT}
        envs = {k: {**os.environ, "PYTHONPATH": str(t)} for k, t in trees.items()}
        figures: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
        sim, url = start_simulator(envs["this"])  # one server for every client: what differs is the client
        try:
            # the server's first eval fills its memos (each prompt's tokens, each answer's text): paid here, untimed,
            # not by whichever client happens to go first
            with tempfile.TemporaryDirectory() as empty:  # (python -c imports from its working directory first)
                run_tree([sys.executable, "-c", BARE_CLIENT, url, "1319"], Path(empty), envs["this"])
            for r in range(a.rounds):
                for side in ("baseline", "this"):
                    got = {} if a.skip_demo else demo(trees[side], envs[side])
                    got.update(client(trees[side], envs[side], url, bare_first=bool(r % 2)))
                    for k, v in got.items():
                        figures[side].setdefault(k, []).append(v)
                    print(f"[{side}] " + ", ".join(f"{k.strip()} {v:.2f}" for k, v in got.items()), file=sys.stderr)
        finally:
            sim.terminate()
            sim.wait(30)
    print_table(figures, a.baseline, a.rounds, width=42)


def print_table(figures: dict[str, dict[str, list[float]]], baseline: str, rounds: int, width: int) -> None:
    """Each figure's median on both sides and their ratio (this / baseline)."""
    print(f"\nmedian of {rounds} round(s); baseline {baseline}, this checkout; ratio this / baseline\n")
    print(f"{'figure':<{width}} {'baseline':>10} {'this':>10} {'ratio':>7}")
    for k in figures["this"]:
        b, t = statistics.median(figures["baseline"][k]), statistics.median(figures["this"][k])
        print(f"{k:<{width}} {b:>10.2f} {t:>10.2f} {t / b if b else float('nan'):>7.2f}")


if __name__ == "__main__":
    main()
