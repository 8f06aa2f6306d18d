"""``report.html``: the self-contained page a reviewer reads for one comparison, and for a sweep.

- :func:`write_report` (a run directory of ``abh run`` or a comparison directory of ``abh compare``);
- :func:`write_sweep_report` (a sweep directory holding ``sweep_summary.json``);
- :func:`main`: ``abh report DIR`` regenerates the right one from stored files.

The page has inline CSS, inline SVG plots and one tiny inline script (table filter); it makes no network
request and opens from ``file://``. Model output is untrusted and always escaped.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import exitcodes

__all__ = ["ReportError", "detect", "main", "write_report", "write_sweep_report"]

REPORT = "report.html"


class ReportError(RuntimeError):
    """The directory holds nothing a report can be written from."""


def detect(path: str | Path) -> str | None:
    """"run", "comparison", "sweep" or None for what ``path`` holds."""
    p = Path(path)
    if not p.is_dir():
        return None
    if (p / "manifest.json").exists():
        return "run"
    if (p / "comparison.json").exists():
        return "comparison"
    if (p / "sweep_summary.json").exists():
        return "sweep"
    return None


def write_report(path: str | Path) -> Path:
    """Write ``path/report.html`` for a run or comparison directory; return its path."""
    from harness.report import html

    root = Path(path)
    kind = detect(root)
    if kind not in ("run", "comparison"):
        raise ReportError(f"{root} is not a run or comparison directory (no manifest.json or comparison.json)")
    return html.write(root / REPORT, html.render_comparison(root))


def write_sweep_report(sweep_dir: str | Path) -> Path:
    """Write ``sweep_dir/report.html`` from its ``sweep_summary.json``; return its path."""
    from harness.report import html

    root = Path(sweep_dir)
    if not (root / "sweep_summary.json").exists():
        raise ReportError(f"{root} is not a sweep directory (no sweep_summary.json)")
    return html.write(root / REPORT, html.render_sweep(root))


def main(argv: Sequence[str] | None = None) -> int:
    """``abh report DIR``: (re)write DIR/report.html. Exit 0, or 2 when DIR holds nothing to report."""
    ap = argparse.ArgumentParser(prog="abh report",
                                 description="(Re)write report.html for a run, comparison or sweep directory.")
    ap.add_argument("dir", type=Path, metavar="DIR",
                    help="a run dir (manifest.json), a comparison dir (comparison.json) or a sweep dir "
                         "(sweep_summary.json)")
    ap.add_argument("--screenshot", type=Path, default=None, metavar="PNG",
                    help="also render the page in headless Chromium and save a full-page screenshot")
    args = ap.parse_args(list(argv) if argv is not None else None)
    kind = detect(args.dir)
    if kind is None:
        why = "does not exist" if not args.dir.exists() else \
            "holds no manifest.json (run), comparison.json (comparison) or sweep_summary.json (sweep)"
        print(f"abh report: {args.dir} {why}; nothing to report", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    try:
        path = write_sweep_report(args.dir) if kind == "sweep" else write_report(args.dir)
    except ReportError as e:
        print(f"abh report: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    print(f"wrote {path} ({kind})")
    if args.screenshot is not None:
        from harness.report.browser import BrowserError, render_page

        try:
            res = render_page(path, screenshot=args.screenshot)
        except BrowserError as e:
            print(f"abh report: screenshot failed: {e}", file=sys.stderr)
            return exitcodes.UNEXPECTED
        print(f"screenshot {args.screenshot}")
        for msg in res.console_errors:
            print(f"  console error: {msg}", file=sys.stderr)
    return exitcodes.OK
