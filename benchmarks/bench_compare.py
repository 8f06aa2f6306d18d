"""Benchmark: ``abh compare`` on the demo's finished run, this checkout against a baseline commit, side by side
in one run.

Each side (this checkout; ``--baseline REV`` exported by ``git archive`` into a temp dir) compares a demo run made
by its own code (``abh run`` in an empty directory, or the run directories given by ``--runs BASE THIS``): the
divergence a run stores is reused only by the code that computed it, so each side reads its own. The compares
take turns (baseline, this, this, baseline, ...; a drift of the loaded machine hits both), each a fresh process
with a warm bytecode cache of its side's own, timed by ``wait4`` (CPU user + sys, wall, peak RSS).

    python benchmarks/bench_compare.py [--baseline b3039bf] [--rounds 3] [--runs BASE_RUN THIS_RUN]

Prints one table: each figure's median for both sides and their ratio (this / baseline); the issue's target is
1.5 s of CPU. ``--breakdown`` then profiles one more compare of this checkout (cProfile) and prints where its CPU
goes: the imports and each step of the command, cumulative, largest first (profiled seconds run ~4x the real ones;
the shares are the figure).
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

# this directory is on the path of a script run from it
from bench_demo import client_env, export, print_table, run_tree

ROOT = Path(__file__).resolve().parents[1]
EVALS = ("--a", "evals/a/r1", "--a", "evals/a/r2", "--b", "evals/b/r1", "--b", "evals/b/r2",
         "--aa", "evals/aa/r1", "--aa", "evals/aa/r2")


def demo_run(env: dict[str, str], where: Path) -> Path:
    """The demo's run directory, made by ``abh run`` in ``where`` with ``env``'s code."""
    run_tree([sys.executable, "-m", "harness.cli.main", "run"], where, env)
    return where / "results" / "demo"


def compare(run: Path, env: dict[str, str], out: Path) -> dict[str, float]:
    wall, cpu, rss = run_tree([sys.executable, "-m", "harness.cli.main", "compare", *EVALS, "--out", str(out)], run,
                           env)
    return {"abh compare CPU s": cpu, "abh compare wall s": wall, "abh compare peak RSS MiB": rss}


#: the steps of ``abh compare`` the breakdown names (function names as cProfile reports them)
STEPS = ("_find_and_load", "_load_evals", "compare_dirs", "_bootstrap_means", "divergence_of_dirs", "write_markdown",
         "write_report", "export_samples", "reference_for", "read_rows")


def breakdown(run: Path, env: dict[str, str], out: Path) -> None:
    """One compare of this checkout under cProfile: each of :data:`STEPS`' share of the profiled time."""
    prof = out.with_suffix(".prof")
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "harness.cli.main", "compare", *EVALS,
                    "--out", str(out)], cwd=run, env=env, check=True, stdout=subprocess.DEVNULL)
    st = pstats.Stats(str(prof)).stats  # type: ignore[attr-defined]
    total = max(ct for (_, _, _, ct, _) in st.values())
    rows = sorted(((max((ct for (_, _, name), (_, _, _, ct, _) in st.items() if name == step), default=0.0), step)
                   for step in STEPS), reverse=True)
    print(f"\nwhere this checkout's compare spends its CPU (cProfile, {total:.2f} s profiled; imports counted "
          "where they happen, so steps overlap them)")
    for ct, step in rows:
        print(f"  {step:24s} {100 * ct / total:5.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="b3039bf", metavar="REV")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", nargs=2, type=Path, metavar=("BASE_RUN", "THIS_RUN"), default=None,
                    help="finished demo run directories (results/demo) made by each side's code")
    ap.add_argument("--breakdown", action="store_true", help="then profile one compare of this checkout")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        trees = {"baseline": export(a.baseline, base), "this": ROOT}
        # each side's own warm bytecode cache (filled by the untimed first compare below): with
        # PYTHONDONTWRITEBYTECODE set the exported tree would compile every module in every timed run
        envs = {k: client_env({**os.environ, "PYTHONPATH": str(t)}, Path(tmp) / f"pycache-{k}")
                for k, t in trees.items()}
        runs = dict(zip(trees, a.runs, strict=True)) if a.runs else {}
        for side in trees:
            if side not in runs:
                (Path(tmp) / f"run-{side}").mkdir()
                runs[side] = demo_run(envs[side], Path(tmp) / f"run-{side}")
        figures: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
        for side in trees:
            compare(runs[side].resolve(), envs[side], Path(tmp) / f"out-{side}-warm")
        for r in range(a.rounds):
            for side in (("baseline", "this") if r % 2 == 0 else ("this", "baseline")):
                got = compare(runs[side].resolve(), envs[side], Path(tmp) / f"out-{side}-{r}")
                for k, v in got.items():
                    figures[side].setdefault(k, []).append(v)
                print(f"[{side}] " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()), file=sys.stderr)
        print_table(figures, a.baseline, a.rounds, width=28)
        if a.breakdown:
            breakdown(runs["this"].resolve(), envs["this"], Path(tmp) / "out-profiled")


if __name__ == "__main__":
    main()
