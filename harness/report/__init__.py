"""What a reviewer reads, written from stored files only (``abh report DIR`` rewrites them): ``report.html``
of a run, comparison or sweep directory, ``comparison.md`` and ``samples.parquet`` / ``samples.csv``. The page
makes no network request and opens from ``file://``; model output is untrusted and always escaped.
"""

from __future__ import annotations

from pathlib import Path

from harness.results import schema

__all__ = ["ReportError", "detect", "export_samples", "write_markdown", "write_report", "write_sweep_report"]

REPORT = "report.html"


class ReportError(RuntimeError):
    """The directory holds nothing a report can be written from."""


def detect(path: str | Path) -> str | None:
    """"tasks" (several tasks: tasks.json), "run", "comparison", "sweep" or None for what ``path`` holds."""
    p = Path(path)
    if not p.is_dir():
        return None
    if (p / schema.TASKS_FILE).exists():
        return "tasks"
    if (p / schema.MANIFEST_FILE).exists():
        return "run"
    if (p / schema.COMPARISON_FILE).exists():
        return "comparison"
    if (p / schema.SWEEP_FILE).exists():
        return "sweep"
    return None


def write_report(path: str | Path) -> Path:
    """Write ``path/report.html`` for a run or comparison directory; return its path."""
    from harness.report import html

    root = Path(path)
    kind = detect(root)
    if kind == "tasks":
        from harness.report import tasks_section

        return html.write(root / REPORT, tasks_section.render_html(root))
    if kind not in ("run", "comparison"):
        raise ReportError(f"{root} is not a run or comparison directory (no manifest.json or comparison.json)")
    return html.write(root / REPORT, html.render_comparison(root))


def write_sweep_report(sweep_dir: str | Path) -> Path:
    """Write ``sweep_dir/report.html`` from its ``sweep_summary.json``; return its path."""
    from harness.report import html

    root = Path(sweep_dir)
    if not (root / schema.SWEEP_FILE).exists():
        raise ReportError(f"{root} is not a sweep directory (no sweep_summary.json)")
    return html.write(root / REPORT, html.render_sweep(root))


def write_markdown(path: str | Path) -> Path:
    """Write ``path/comparison.md`` from its comparison.json (a sweep directory: from its sweep_summary.json);
    return its path."""
    from harness.report import markdown

    if (Path(path) / schema.TASKS_FILE).exists():
        from harness.report import tasks_section
        from harness.results.fileio import atomic_write_text

        out = Path(path) / markdown.MARKDOWN
        atomic_write_text(out, tasks_section.render_markdown(Path(path)))
        return out
    if (Path(path) / schema.SWEEP_FILE).exists() and not (Path(path) / schema.COMPARISON_FILE).exists():
        return markdown.write_sweep(Path(path))
    if not (Path(path) / schema.COMPARISON_FILE).exists():
        raise ReportError(f"{path} holds no {schema.COMPARISON_FILE}: no comparison to write as markdown")
    return markdown.write(Path(path))


def export_samples(path: str | Path) -> list[Path]:
    """Write ``path/samples.parquet`` and ``path/samples.csv``; return their paths."""
    from harness.report import export

    if not (Path(path) / schema.COMPARISON_FILE).exists():
        raise ReportError(f"{path} holds no {schema.COMPARISON_FILE}: no compared runs to export")
    try:
        return export.export_samples(Path(path))
    except FileNotFoundError as e:
        raise ReportError(f"cannot export the samples of {path}: {e}") from None
