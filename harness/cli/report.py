"""``abh report DIR``: (re)write what a reviewer reads of a run, comparison or sweep directory."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import exitcodes, report
from harness.results.schema import SchemaError


def report_main(argv: Sequence[str] | None = None) -> int:
    """Rewrite DIR/report.html (and comparison.md where there is a comparison). Exit 0; 2 when DIR holds
    nothing to report or a file of an unknown schema_version; 1 when the screenshot fails."""
    ap = argparse.ArgumentParser(prog="abh report",
                                 description="(Re)write report.html (and comparison.md) for a run, comparison "
                                             "or sweep directory.")
    ap.add_argument("dir", type=Path, metavar="DIR",
                    help="a run dir (manifest.json), a comparison dir (comparison.json) or a sweep dir "
                         "(sweep_summary.json)")
    ap.add_argument("--export", action="store_true",
                    help="also write samples.parquet and samples.csv: every answer of every compared run")
    ap.add_argument("--screenshot", type=Path, default=None, metavar="PNG",
                    help="also render the page in headless Chromium and save a full-page screenshot")
    args = ap.parse_args(list(argv) if argv is not None else None)
    kind = report.detect(args.dir)
    if kind is None:
        why = "does not exist" if not args.dir.exists() else \
            "holds no manifest.json (run), comparison.json (comparison) or sweep_summary.json (sweep)"
        print(f"abh report: {args.dir} {why}; nothing to report", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    written: list[Path] = []
    try:
        if kind == "sweep":
            written += [report.write_sweep_report(args.dir), report.write_markdown(args.dir)]
        else:
            written.append(report.write_report(args.dir))
            if kind == "tasks":  # several tasks: each task's own files, then the run's markdown
                from harness.results import schema

                for sub in sorted((args.dir / schema.TASKS_DIR).glob(f"*/{schema.COMPARISON_FILE}")):
                    written += [report.write_report(sub.parent), report.write_markdown(sub.parent)]
                written.append(report.write_markdown(args.dir))
            elif (args.dir / "comparison.json").exists():
                written.append(report.write_markdown(args.dir))
                if args.export:
                    written += report.export_samples(args.dir)
            elif args.export:
                raise report.ReportError(f"{args.dir} holds no comparison.json: nothing to export")
    except (report.ReportError, SchemaError) as e:
        print(f"abh report: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    for path in written:
        print(f"wrote {path} ({kind})")
    if args.screenshot is not None:
        from harness.report.browser import BrowserError, render_page

        try:
            res = render_page(written[0], screenshot=args.screenshot)
        except BrowserError as e:
            print(f"abh report: screenshot failed: {e}", file=sys.stderr)
            return exitcodes.UNEXPECTED
        print(f"screenshot {args.screenshot}")
        for msg in res.console_errors:
            print(f"  console error: {msg}", file=sys.stderr)
    return exitcodes.OK
