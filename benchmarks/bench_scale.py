"""Benchmark: ``abh run`` at 13,190 questions (GSM8K's 1319 test questions ten times), this checkout against a
baseline commit, side by side in one run.

The input is built once: a GSM8K JSONL of the embedded test set repeated ``--copies`` times, every copy after the
first with its questions made distinct (`` (copy k)`` appended: the data holds no question twice, and the
simulated servers, given the same file, answer each from its own row). ``abh run`` (the demo experiment: two
simulated arms, an A/A control, two repeats) is run on it with ``task.data_path`` / ``engine.data`` set to that
file, ``task.allow_noncanonical=true`` and ``task.num_questions`` = every row, once with divergence (the default)
and once with ``divergence.enabled=false``. For each side (this checkout; ``--baseline REV`` exported by
``git archive`` into a temp dir), taking turns (baseline, this, baseline, this, ... so a drift of the loaded
machine hits both), each run in an empty directory:

* peak RSS of the abh process alone (its own ``getrusage(RUSAGE_SELF)`` at exit: not the simulated servers it
  launches, which ``wait4`` / ``/usr/bin/time -v`` would fold in), in MiB and in KiB per question (the target:
  <= 40 KiB a question);
* CPU seconds of the abh process, and the wall;
* report.html's size in MB (the target: <= 3 MB) and, when Chromium is installed, the console errors headless
  Chromium reports opening it (``--browser``).

    python benchmarks/bench_scale.py [--baseline 7d1d16a] [--rounds 1] [--copies 10] [--only div|nodiv]
                                     [--browser] [--keep DIR]

A run takes several minutes (13k questions x 6 evals, and 4 scoring passes with divergence); one round is a
fair measure of memory (peak RSS varies by a few MiB from run to run). Prints one table: each figure for both
sides and their ratio (this / baseline), medians over the rounds.
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

from bench_demo import export

ROOT = Path(__file__).resolve().parents[1]

#: ``abh`` as ``python -m harness.cli.main``, writing its own peak RSS (KiB) and CPU seconds to argv[1] at exit
ABH_SELF = r"""
import atexit, json, resource, runpy, sys
out = sys.argv.pop(1)
def _write():
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open(out, "w") as f:
        json.dump({"maxrss_kib": r.ru_maxrss, "cpu_s": r.ru_utime + r.ru_stime}, f)
atexit.register(_write)
sys.argv[0] = "abh"
runpy.run_module("harness.cli.main", run_name="__main__")
"""

#: The console errors of a report in headless Chromium (a JSON list; null when Chromium is not installed)
BROWSE = r"""
import json, sys
from harness.report import browser
if browser.find_chromium() is None:
    print("null")
else:
    print(json.dumps(browser.render_page(sys.argv[1]).console_errors))
"""


def build_input(dest: Path, copies: int) -> int:
    """The embedded GSM8K test set ``copies`` times into ``dest`` (every copy after the first with distinct
    questions); returns the number of rows."""
    from harness.tasks import gsm8k

    rows = gsm8k.read_embedded_test()
    with dest.open("w", encoding="utf-8") as f:
        for k in range(copies):
            for r in rows:
                q = r["question"] if k == 0 else f"{r['question']} (copy {k})"
                f.write(json.dumps({"question": q, "answer": r["answer"]}, ensure_ascii=False) + "\n")
    return len(rows) * copies


def run_abh(tree: Path, env: dict[str, str], data: Path, n: int, divergence: bool,
            browse: bool, keep: Path | None, label: str) -> dict[str, float]:
    """One ``abh run`` of the scaled input in an empty directory: its figures."""
    with tempfile.TemporaryDirectory(prefix="abh-bench-scale-") as tmp:
        cwd = Path(tmp)
        own = cwd / "abh_self.json"
        argv = [sys.executable, "-c", ABH_SELF, str(own), "run", "progress=false",
                f"task.data_path={data}", f"engine.data={data}", "task.allow_noncanonical=true",
                f"task.num_questions={n}", *([] if divergence else ["divergence.enabled=false"])]
        t0 = time.perf_counter()
        p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
        wall = time.perf_counter() - t0
        if p.returncode not in (0, 7):  # 7: a verdict the demo may reach (not a failure of the run)
            sys.exit(f"abh run in {tree} exited {p.returncode}: {p.stderr.decode()[-3000:]}")
        self_ = json.loads(own.read_text())
        run = cwd / "results" / "demo"
        report = run / "report.html"
        got = {"peak RSS MiB (abh)": self_["maxrss_kib"] / 1024, "peak RSS KiB / question": self_["maxrss_kib"] / n,
               "abh CPU s": self_["cpu_s"], "wall s": wall,
               "report.html MB": report.stat().st_size / 1e6 if report.is_file() else float("nan")}
        if browse and report.is_file():
            out = subprocess.run([sys.executable, "-c", BROWSE, str(report)], cwd=cwd, env=env, capture_output=True,
                                 check=False, text=True)
            errors = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout else None
            if errors is None:
                print(f"[{label}] Chromium not run ({out.stderr.strip()[-300:] or 'not installed'})", file=sys.stderr)
            else:
                got["report console errors"] = float(len(errors))
                for e in errors[:5]:
                    print(f"[{label}] console: {e}", file=sys.stderr)
        if keep is not None:
            subprocess.run(["cp", "-a", str(run), str(keep / label)], check=False)
        return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="7d1d16a", metavar="REV")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--copies", type=int, default=10, help="times the 1319 questions are asked (10: 13,190)")
    ap.add_argument("--only", choices=("div", "nodiv"), help="one of the two runs (default: both)")
    ap.add_argument("--browser", action="store_true", help="open each report.html in headless Chromium")
    ap.add_argument("--keep", type=Path, help="copy each run directory here (as SIDE-VARIANT-ROUND)")
    a = ap.parse_args()
    if a.keep is not None:
        a.keep.mkdir(parents=True, exist_ok=True)
    variants = [v for v in ("div", "nodiv") if a.only in (None, v)]
    with tempfile.TemporaryDirectory(prefix="abh-bench-scale-") as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        trees = {"baseline": export(a.baseline, base), "this": ROOT}
        envs = {k: {**os.environ, "PYTHONPATH": str(t)} for k, t in trees.items()}
        data = Path(tmp) / "gsm8k_x.jsonl"
        n = build_input(data, a.copies)
        figures: dict[str, dict[str, list[float]]] = {k: {} for k in trees}
        for r in range(a.rounds):
            for side in ("baseline", "this"):
                for v in variants:
                    got = run_abh(trees[side], envs[side], data, n, v == "div", a.browser, a.keep, f"{side}-{v}-{r}")
                    for k, x in got.items():
                        figures[side].setdefault(f"{v}: {k}", []).append(x)
                    print(f"[{side} {v}] " + ", ".join(f"{k} {x:.2f}" for k, x in got.items()), file=sys.stderr)
    print(f"\n{n} questions; median of {a.rounds} round(s); baseline {a.baseline}, this checkout; "
          "ratio this / baseline\n")
    width = 40
    print(f"{'figure':<{width}} {'baseline':>10} {'this':>10} {'ratio':>7}")
    for k in figures["this"]:
        b, t = statistics.median(figures["baseline"][k]), statistics.median(figures["this"][k])
        print(f"{k:<{width}} {b:>10.2f} {t:>10.2f} {t / b if b else float('nan'):>7.2f}")


if __name__ == "__main__":
    main()
