"""Time writing report.html for a full-size run: 1319 questions x 2 arms x 3 repeats (+ 2 A/A runs).

    python benchmarks/bench_report.py [--dir DIR] [--screenshot PNG] [--real]

Builds a run directory as the harness stores it (tests/helpers/rundirs.py's builder; GSM8K questions from
../shared/data/gsm8k when present), then times ``write_report`` (target: under 5 s). ``--screenshot``
also renders the page in headless Chromium and saves a full-page PNG; ``--real`` marks the data as from
a real engine (no SIMULATED banner), for looking at the layout a reviewer of a real run gets.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.rundirs import build_run_dir  # noqa: E402

from harness.report import write_report  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "gsm8k" / "test.jsonl"
TARGET_S = 5.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None, help="build the run here (default: a temp dir)")
    ap.add_argument("--screenshot", type=Path, default=None, metavar="PNG")
    ap.add_argument("--real", action="store_true", help="data not marked simulated")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="abh-bench-") as tmp:
        root = args.dir or Path(tmp) / "run"
        t0 = time.perf_counter()
        build_run_dir(root, n=1319, repeats=args.repeats, aa=True, simulated=not args.real, p_a=0.945,
                      p_b=0.948, flip=0.02, margin=0.01, dataset=DATA if DATA.exists() else None, inject=False,
                      n_resamples=10_000)
        built = time.perf_counter() - t0
        t0 = time.perf_counter()
        path = write_report(root)
        took = time.perf_counter() - t0
        size = path.stat().st_size
        print(f"built run dir (1319 questions x 2 arms x {args.repeats} repeats + 2 A/A) in {built:.1f} s")
        print(f"write_report: {took:.2f} s (target < {TARGET_S:.0f} s), {size / 1e6:.2f} MB -> {path}")
        if args.screenshot is not None:
            from harness.report.browser import render_page

            res = render_page(path, screenshot=args.screenshot)
            print(f"screenshot: {args.screenshot} ({res.height} px tall); console errors: {res.console_errors}; "
                  f"requests besides the file: {[r for r in res.requests if r != res.url]}")
        return 0 if took < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
