"""Time writing report.html for a full-size run: 1319 questions x 2 arms x 3 repeats (+ the A/A control).

    python benchmarks/bench_report.py [--dir DIR] [--repeats R] [--screenshot PNG]

Makes the run directory the way a user does, with the harness itself (``abh run`` on the SIMULATED demo,
``report=false``), then times ``write_report`` and ``write_markdown`` on it (target: under 5 s).
``--screenshot`` also renders the page in headless Chromium and saves a full-page PNG.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.report import write_markdown, write_report

TARGET_S = 5.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None, help="make the run here (default: a temp dir)")
    ap.add_argument("--screenshot", type=Path, default=None, metavar="PNG")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
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
