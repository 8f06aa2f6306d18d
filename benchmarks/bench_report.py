"""Time writing report.html for a full-size run: 1319 questions x 2 arms x 3 repeats (+ the A/A control).

    python benchmarks/bench_report.py [--dir DIR] [--repeats R] [--screenshot PNG]
    python benchmarks/bench_report.py --rerender RUN [--baseline REV] [--browser]

Makes the run directory the way a user does, with the harness itself (``abh run`` on the SIMULATED demo,
``report=false``), then times ``write_report`` and ``write_markdown`` on it (target: under 5 s).
``--screenshot`` also renders the page in headless Chromium and saves a full-page PNG.

``--rerender RUN``: a finished run directory (the demo's, or a 13k-question one kept by ``bench_scale.py
--keep``) is copied twice and its report rewritten by ``abh report`` with this checkout and with ``--baseline
REV`` (exported by ``git archive``), side by side: report.html's size (the target at 13,190 questions: <= 3 MB),
bytes a question, its flipped-questions and question-browser sections, the CPU seconds of ``abh report``, and with
``--browser`` the console errors headless Chromium reports opening it. The run directory itself is not touched.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_demo import export

from harness.report import write_markdown, write_report

TARGET_S = 5.0
#: report.html of a 13,190-question run at most this many MB
TARGET_MB = 3.0

#: The console errors of a report in headless Chromium (a JSON list), once its packed rows are drawn
BROWSE = r"""
import json, sys
from harness.report import browser
WAIT = ("(async function(){for (var k=0; k<600 && !(document.getElementById('qb-n') || {}).textContent; k++)"
        "{ await new Promise(function(r){setTimeout(r,50)}); } return 0})()")
print(json.dumps(browser.render_page(sys.argv[1], evaluate={"wait": WAIT}, timeout=120).console_errors))
"""


def _section(html: str, name: str) -> int:
    """The bytes of the page's section ``name`` (up to the next section)."""
    m = re.search(rf'<section id="{name}".*?(?=<section id=|</main>)', html, re.S)
    return len(m.group(0).encode()) if m else 0


def rerender_side(run: Path, tree: Path, dest: Path, browse: bool) -> dict[str, float]:
    """``abh report`` by the checkout ``tree`` on a copy of ``run`` at ``dest``: the report's figures."""
    shutil.copytree(run, dest, symlinks=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "harness.cli.main", "report", str(dest)], env=env, cwd=dest.parent,
                   check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = dest / "report.html"
    html = report.read_text(encoding="utf-8")
    n = json.loads((dest / "comparison.json").read_text()).get("n") or 1
    got = {"report.html MB": report.stat().st_size / 1e6, "bytes / question": report.stat().st_size / n,
           "flipped section KB": _section(html, "flipped") / 1e3,
           "question browser KB": _section(html, "questions") / 1e3,
           "abh report CPU s": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}
    if browse:
        out = subprocess.run([sys.executable, "-c", BROWSE, str(report)], env=env, cwd=dest.parent,
                             capture_output=True, text=True, check=True)
        errors = json.loads(out.stdout.strip().splitlines()[-1])
        got["console errors"] = float(len(errors))
        for e in errors[:5]:
            print(f"[{tree}] console: {e}", file=sys.stderr)
    return got


def rerender(run: Path, baseline: str, browse: bool) -> int:
    """This checkout's report of ``run`` against the baseline's, side by side."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="abh-bench-report-") as tmp:
        base = Path(tmp) / "tree"
        base.mkdir()
        trees = {"baseline": export(baseline, base), "this": root}
        figures = {side: rerender_side(run.resolve(), tree, Path(tmp) / side / run.name, browse)
                   for side, tree in trees.items()}
    n = json.loads((run / "comparison.json").read_text()).get("n")
    print(f"report.html of {run} ({n} questions), rewritten by baseline {baseline} and this checkout\n")
    print(f"{'figure':<24} {'baseline':>10} {'this':>10} {'ratio':>7}")
    for k, t in figures["this"].items():
        b = figures["baseline"][k]
        print(f"{k:<24} {b:>10.2f} {t:>10.2f} {t / b if b else float('nan'):>7.2f}")
    return 0 if figures["this"]["report.html MB"] <= TARGET_MB else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None, help="make the run here (default: a temp dir)")
    ap.add_argument("--screenshot", type=Path, default=None, metavar="PNG")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rerender", type=Path, metavar="RUN", help="rewrite this finished run's report, side by side")
    ap.add_argument("--baseline", default="c515bb1", metavar="REV", help="with --rerender: the commit compared")
    ap.add_argument("--browser", action="store_true", help="with --rerender: open each report in headless Chromium")
    args = ap.parse_args()
    if args.rerender is not None:
        return rerender(args.rerender, args.baseline, args.browser)
    with tempfile.TemporaryDirectory(prefix="abh-bench-") as tmp:
        root = (args.dir or Path(tmp) / "run").resolve()
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "harness.cli.main", "run", f"hydra.run.dir={root}", "report=false",
                            "progress=false", f"experiment.repeats={args.repeats}"], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        path = write_report(root)
        took_html = time.perf_counter() - t0
        t0 = time.perf_counter()
        md = write_markdown(root)
        took_md = time.perf_counter() - t0
        print(f"abh run (1319 questions x 2 arms x {args.repeats} repeats + A/A, SIMULATED) in {built:.1f} s")
        print("| output | time | size | target |")
        print("| --- | --- | --- | --- |")
        print(f"| report.html | {took_html:.2f} s | {path.stat().st_size / 1e6:.2f} MB | < {TARGET_S:.0f} s |")
        print(f"| comparison.md | {took_md:.3f} s | {md.stat().st_size / 1e3:.1f} kB | |")
        if args.screenshot is not None:
            from harness.report.browser import render_page

            res = render_page(path, screenshot=args.screenshot)
            print(f"screenshot: {args.screenshot} ({res.height} px tall); console errors: {res.console_errors}; "
                  f"requests besides the file: {[u for u in res.requests if u != res.url]}")
        return 0 if took_html < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
