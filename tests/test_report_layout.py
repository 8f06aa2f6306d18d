"""report.html and the sweep's report at phone, laptop and desktop widths in headless Chromium (slow): no element
wider than its card (a table scrolls inside its own box), the page no wider than the window, every plot's marker
in view, and the sweep's main table whole on a desktop.

Chromium missing is a failure, not a skip: CI installs the Debian package.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.layout import LAYOUT_JS
from helpers.rundirs import build_run_dir

from harness.report import write_report, write_sweep_report
from harness.report.browser import find_chromium, render_page

pytestmark = pytest.mark.slow

WIDTHS = (390, 1280, 1400, 1920)


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = find_chromium()
    if exe is None:
        pytest.fail("headless Chromium is required for the layout tests and was not found on PATH "
                    "(install the Debian package `chromium`, as .ci/run does, or set ABH_CHROMIUM)")
    return exe


@pytest.fixture(scope="module")
def run_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with repeats, the A/A control and a positive Δ (its marker right of 0, where a narrow page's plot
    was cut off), whose evals sit in long directories (the Runs table ran 90 px out of its card)."""
    root = build_run_dir(tmp_path_factory.mktemp("layout") / "a-rather-long-run-directory-name" / "run", n=200,
                         repeats=2, aa=True, p_a=0.88, p_b=0.93)
    return write_report(root)


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from harness.analysis.sweep import summarize_sweep

    sweep = tmp_path_factory.mktemp("layout-sweep") / "sweep"
    for k in range(4):
        build_run_dir(sweep / f"job{k}", n=150, p_b=0.86 + 0.03 * k, seed=k, inject=False)
    summarize_sweep(sweep, "holm")
    return write_sweep_report(sweep)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_run_report_has_no_layout_defect(run_report: Path, chromium: str, width: int, tmp_path: Path) -> None:
    res = render_page(run_report, width=width, height=900, executable=chromium,
                      screenshot=tmp_path / f"run-{width}.png", evaluate={"layout": LAYOUT_JS, "markers":
                      "document.querySelectorAll('.plotbox [id^=\"focus-\"]').length"})
    assert res.console_errors == []
    assert res.values["layout"] == [], res.values["layout"]
    assert res.values["markers"] == 1  # the Δ plot's marker exists, and (above) is in view


@pytest.mark.parametrize("width", WIDTHS)
def test_the_sweep_report_has_no_layout_defect(sweep_report: Path, chromium: str, width: int,
                                               tmp_path: Path) -> None:
    whole = ("(function(){var t=document.getElementById('sweep-table').parentElement;"
             "return [t.scrollWidth, t.clientWidth]})()")
    res = render_page(sweep_report, width=width, height=900, executable=chromium,
                      screenshot=tmp_path / f"sweep-{width}.png", evaluate={"layout": LAYOUT_JS, "whole": whole})
    assert res.values["layout"] == [], res.values["layout"]
    if width >= 1280:  # a desktop shows the whole table, no column hidden behind a scroll
        assert res.values["whole"][0] <= res.values["whole"][1], res.values["whole"]
