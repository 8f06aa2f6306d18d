"""report.html in a real browser: headless Chromium opens it from file:// (slow; `pytest -m slow`).

No console error, no network request but the file itself, the key numbers in the rendered text, and the
markup planted in model outputs shown as text (the page title is not rewritten by an injected script).
Chromium missing is a failure, not a skip: CI installs the Debian package.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.rundirs import BOLD, SCRIPT_ALERT, SCRIPT_TITLE, build_run_dir

from harness.report import write_report, write_sweep_report
from harness.report.browser import find_chromium, render_page
from harness.report.words import verdict_label

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = find_chromium()
    if exe is None:
        pytest.fail("headless Chromium is required for the report browser tests and was not found on PATH "
                    "(install the Debian package `chromium`, as .ci/run does, or set ABH_CHROMIUM)")
    return exe


def _only_the_file(requests: list[str], url: str) -> list[str]:
    return [r for r in requests if r != url]


def test_report_in_chromium(tmp_path: Path, chromium: str) -> None:
    root = build_run_dir(tmp_path / "run", n=120, repeats=2, aa=True)
    c = json.loads((root / "comparison.json").read_text())
    report = write_report(root)
    shot = tmp_path / "report.png"
    res = render_page(report, screenshot=shot, executable=chromium, evaluate={
        "scripts": "document.scripts.length",
        "bold": "document.querySelectorAll('#flips b, #flips img, #flips i').length",
        "filtered": "(function(){var q=document.getElementById('flip-q'); q.value='bold claim';"
                    "q.dispatchEvent(new Event('input')); return document.getElementById('flip-n').textContent})()",
    })
    print(f"\nscreenshot: {shot}")
    assert res.console_errors == [], res.console_errors
    assert _only_the_file(res.requests, res.url) == [], res.requests
    # key numbers are on the rendered page
    assert verdict_label(c["verdict"]) in res.text
    for arm in ("a", "b"):
        assert f"{100 * c['arms'][arm]['accuracy']:.2f} %" in res.text
    assert "SIMULATED" in res.text
    # injected markup: shown as text, never run or rendered
    assert "pwned" not in res.title and res.title.startswith("[SIMULATED]")
    assert SCRIPT_ALERT in res.text and SCRIPT_TITLE in res.text and BOLD in res.text
    assert res.values["scripts"] == 1 and res.values["bold"] == 0
    assert res.values["filtered"] == "1"  # the filter script ran (allowed by the page's CSP hash)
    assert shot.exists() and shot.stat().st_size > 10_000 and res.height > 900


def test_sweep_report_in_chromium(tmp_path: Path, chromium: str) -> None:
    from harness.analysis.sweep import summarize_sweep

    sweep = tmp_path / "sweep"
    for k in range(3):
        build_run_dir(sweep / f"job{k}", n=150, p_b=0.88 + 0.03 * k, seed=k, inject=False)
    summarize_sweep(sweep, "bh")
    shot = tmp_path / "sweep.png"
    res = render_page(write_sweep_report(sweep), screenshot=shot, executable=chromium)
    print(f"\nscreenshot: {shot}")
    assert res.console_errors == [] and _only_the_file(res.requests, res.url) == []
    assert "job0" in res.text and "job2" in res.text and "bh" in res.text
    assert shot.exists()
