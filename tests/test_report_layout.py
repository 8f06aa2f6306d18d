"""report.html and the sweep's report at phone, laptop and desktop widths in headless Chromium (slow): no element
wider than its card (a table scrolls inside its own box), the page no wider than the window, every plot's marker
in view, and the sweep's main table whole on a desktop.

Chromium missing is a failure, not a skip: CI installs the Debian package.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.layout import LAYOUT_JS
from helpers.runs import abh_run
from helpers.waiting import PATIENCE_S

from harness.report.browser import render_page

pytestmark = pytest.mark.slow

WIDTHS = (390, 1280, 1400, 1920)


#: the demo, smaller: repeats on one launch per arm, the A/A control, the divergence (its histograms), a positive Δ
#: (its marker right of 0, where a narrow page's plot was cut off) and the Runs table with each server's columns
#: (it ran 90 px out of its card)
DEMO = ("task.num_questions=150", "engine.flip_rate=0.06", "progress=false")


@pytest.fixture(scope="module")
def run_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("layout")
    r = abh_run(f"hydra.run.dir={tmp / 'run'}", *DEMO, cwd=tmp, timeout=PATIENCE_S)
    assert r.returncode == 0, r.stderr[-2000:]
    return tmp / "run" / "report.html"


@pytest.fixture(scope="module")
def sweep_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep of two demo runs (its table with the KLD column was clipped at 1400 px)."""
    tmp = tmp_path_factory.mktemp("layout-sweep")
    r = abh_run("-m", f"hydra.sweep.dir={tmp / 'sweep'}", *DEMO, "experiment.repeats=1",
                "arms.b.engine.accuracy=0.90,0.96", cwd=tmp, timeout=PATIENCE_S)
    assert r.returncode in (0, 7), r.stderr[-2000:]
    return tmp / "sweep" / "report.html"


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
