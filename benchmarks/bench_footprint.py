"""Benchmark: what a finished run costs to conclude, side by side with a baseline commit in one run.

For a finished run directory (``abh run``'s, e.g. the demo's ``results/demo``), each figure is measured on this
tree and on a baseline commit (checked out once as a temporary git worktree), each variant a fresh process timed
from outside (``os.wait4``: its CPU, user + sys, and its peak RSS), alternating baseline and this tree
``--repeats`` times; the median is printed with the ratio this tree / baseline:

- ``divergence``: the divergence object from the run's scoring passes (``divergence_of_dirs`` over the run's
  evals: every pass read and compared) - CPU and peak RSS, and peak RSS per question;
- ``report``: report.html rendered (not written) from the run - CPU, peak RSS and its size in bytes and per question;
- ``compare``: ``abh compare`` of the run's evals into a temporary directory (comparison, divergence, report,
  markdown, exports) - CPU and peak RSS;
- ``start-up``: ``abh run --cfg job`` (compose and print the config; nothing runs) - CPU.

    python benchmarks/bench_footprint.py --run results/demo [--baseline 25f941a] [--repeats 3] [--skip compare]
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

HERE = Path(__file__).resolve().parents[1]

DIVERGENCE = """
import json, sys
from harness.analysis.divergence import divergence_of_dirs
a, b, aa = json.loads(sys.argv[1])
d = divergence_of_dirs(a, b, aa)
print(json.dumps({"questions": d.questions_total, "kld_mean": d.kld_mean, "p": d.p}))
"""
REPORT = """
import json, sys
from harness.report import html
text = html.render_comparison(sys.argv[1])
print(json.dumps({"bytes": len(text.encode())}))
"""


def run_child(argv: list[str], tree: Path, cwd: Path) -> tuple[float, float, float, str]:
    """(CPU seconds, peak RSS MiB, wall seconds, stdout) of one fresh process with ``tree`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    if p.returncode not in (0, 7):
        raise RuntimeError(f"{argv[:4]} in {tree} exited {p.returncode}")
    return ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, wall, text


def eval_dirs(run: Path) -> tuple[list[str], list[str], list[str]]:
    def role(r: str) -> list[str]:
        return [str(d) for d in sorted((run / "evals" / r).glob("r*"), key=lambda p: int(p.name[1:]))
                if (d / "eval.json").exists()]
    return role("a"), role("b"), role("aa")


def variants(run: Path, out: Path) -> dict[str, list[str]]:
    a, b, aa = eval_dirs(run)
    flags = [x for d in a for x in ("--a", d)] + [x for d in b for x in ("--b", d)] + \
        [x for d in aa for x in ("--aa", d)]
    py = sys.executable
    return {"divergence": [py, "-c", DIVERGENCE, json.dumps([a, b, aa])],
            "report": [py, "-c", REPORT, str(run)],
            "compare": [py, "-m", "harness.cli.main", "compare", *flags, "--out", str(out)],
            "start-up": [py, "-m", "harness.cli.main", "run", "--cfg", "job"]}


def baseline_tree(commit: str, where: Path) -> Path:
    tree = where / "baseline"
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "-f", str(tree), commit], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return tree


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", type=Path, required=True, help="a finished run directory (abh run's)")
    ap.add_argument("--baseline", default="25f941a", help="the commit to compare with")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip", action="append", default=[], help="a variant to leave out (repeatable)")
    args = ap.parse_args()
    run = args.run.resolve()
    with tempfile.TemporaryDirectory(prefix="abh-bench-footprint-") as tmp:
        base = baseline_tree(args.baseline, Path(tmp))
        try:
            rows = []
            for name, argv in variants(run, Path(tmp) / "compare-out").items():
                if name in args.skip:
                    continue
                got: dict[str, list[tuple[float, float, float, str]]] = {"base": [], "this": []}
                for _ in range(args.repeats):  # alternating: a drift of the machine's speed hits both alike
                    got["base"].append(run_child(argv, base, base))
                    got["this"].append(run_child(argv, HERE, HERE))
                rows.append((name, got))
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(base)], check=False)
    n = _questions(run)
    print(f"run {run} ({n} questions); baseline {args.baseline}; median of {args.repeats} fresh processes each")
    print(f"{'figure':34s} {'baseline':>12s} {'this tree':>12s} {'ratio':>7s}")
    for name, got in rows:
        med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in got.items()}
        _row(f"{name}: CPU s", med["base"][0], med["this"][0])
        _row(f"{name}: peak RSS MiB", med["base"][1], med["this"][1])
        if name == "divergence" and n:
            _row(f"{name}: peak RSS KiB / question", 1024 * med["base"][1] / n, 1024 * med["this"][1] / n)
        if name == "report":
            size = {k: json.loads(v[-1][3].strip().splitlines()[-1])["bytes"] for k, v in got.items()}
            _row("report.html MB", size["base"] / 1e6, size["this"] / 1e6)
            if n:
                _row("report.html KB / question", size["base"] / 1e3 / n, size["this"] / 1e3 / n)


def _questions(run: Path) -> int:
    a, _, _ = eval_dirs(run)
    return len(json.loads((Path(a[0]) / "eval.json").read_text()).get("indices") or []) if a else 0


def _row(label: str, base: float, this: float) -> None:
    ratio = f"{this / base:.2f}x" if base else "-"
    print(f"{label:34s} {base:12.3f} {this:12.3f} {ratio:>7s}")


if __name__ == "__main__":
    main()
