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
from harness.report.browser import render_page
from harness.report.words import verdict_label

pytestmark = pytest.mark.slow


def _only_the_file(requests: list[str], url: str) -> list[str]:
    return [r for r in requests if r != url]


def test_report_in_chromium(tmp_path: Path, chromium: str) -> None:
    root = build_run_dir(tmp_path / "run", n=120, repeats=2, aa=True)
    c = json.loads((root / "comparison.json").read_text())
    report = write_report(root)
    shot = tmp_path / "report.png"
    res = render_page(report, screenshot=shot, executable=chromium, evaluate={
        "scripts": "document.querySelectorAll('script:not([type])').length",
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


#: Where a node sticks out of the page: elements whose right edge passes the viewport with no scrolling ancestor
OVERFLOW_JS = """(function(){var W=document.documentElement.clientWidth,out=[];
function clipped(e){for(var p=e.parentElement;p;p=p.parentElement){if(getComputedStyle(p).overflowX!=='visible')return true;}return false;}
document.querySelectorAll('body *').forEach(function(e){var r=e.getBoundingClientRect();
if(r.right>W+0.5&&!clipped(e)&&out.length<10){out.push(e.tagName+'#'+e.id+'.'+(e.getAttribute('class')||''))}});return out})()"""
COPY_JS = """(async function(){var b=document.querySelector('#reproduce button.copy');b.click();
await new Promise(function(r){setTimeout(r,500)});var t;try{t=await navigator.clipboard.readText()}catch(e){t='ERR '+e}
return [b.getAttribute('data-copied'), b.textContent, t, document.getElementById(b.getAttribute('data-target')).textContent]})()"""
TOC_JS = """(function(){window.scrollTo(0, document.body.scrollHeight * 0.6);
return [document.getElementById('toc').getBoundingClientRect().top, window.scrollY > 1000]})()"""
SORT_JS = """(function(){var th=document.querySelector('#flips th[data-sort="num"]');th.click();var up=Array.prototype.map.call(
document.querySelectorAll('#flips tbody tr'),function(r){return parseFloat(r.cells[0].getAttribute('data-v'))});th.click();
var down=Array.prototype.map.call(document.querySelectorAll('#flips tbody tr'),function(r){return parseFloat(r.cells[0].getAttribute('data-v'))});
return [up, down, th.getAttribute('aria-sort')]})()"""
BROWSER_JS = """(function(){var s=document.getElementById('qb-cat'),q=document.getElementById('qb-q');
var all=document.getElementById('qb-n').textContent; s.value='both'; s.dispatchEvent(new Event('change'));
var both=[document.getElementById('qb-n').textContent, Array.prototype.every.call(document.querySelectorAll('#qb-rows tr'),
function(r){return r.getAttribute('data-cat')==='both'})]; s.value=''; s.dispatchEvent(new Event('change'));
q.value='bold claim'; q.dispatchEvent(new Event('input'));
var hit=document.querySelectorAll('#qb-rows tr').length, html=document.getElementById('qb-rows').innerHTML;
return [all, both, hit, html.indexOf('<b>') < 0 && html.indexOf('&lt;b&gt;') >= 0]})()"""


@pytest.fixture(scope="module")
def nav_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_run_dir(tmp_path_factory.mktemp("navb") / "run", n=120, repeats=2, aa=True)
    return write_report(root)


@pytest.mark.parametrize("width", [1400, 390])
def test_the_report_navigates_at_desktop_and_phone_width(nav_report: Path, chromium: str, tmp_path: Path,
                                                          width: int) -> None:
    shot = tmp_path / f"report-{width}.png"
    res = render_page(nav_report, screenshot=shot, width=width, height=900, executable=chromium, evaluate={
        "overflow": OVERFLOW_JS, "scroll_width": "document.documentElement.scrollWidth",
        "verdict": "(function(){var v=document.getElementById('verdict');return [v.scrollWidth, v.clientWidth]})()",
        # matplotlib draws text as paths in viewBox units (pt): a plot's rendered px per unit, times its smallest
        # font (9 pt), is the smallest text in px
        "plot_scale": "Math.min.apply(null, Array.prototype.map.call(document.querySelectorAll('.plotbox svg'),"
                      "function(s){return s.getBoundingClientRect().width / s.viewBox.baseVal.width}))",
        "copy": COPY_JS, "toc": TOC_JS, "sort": SORT_JS, "browser": BROWSER_JS,
        # each arm's output in the flipped table, and the question, get most of the page's width
        "outputs": "Math.min.apply(null, Array.prototype.map.call(document.querySelectorAll('#flips td.ans pre, "
                   "#flips td.q'), function(e){return e.getBoundingClientRect().width}))"})
    print(f"\nscreenshot: {shot}")
    v = res.values
    assert res.console_errors == [] and _only_the_file(res.requests, res.url) == []
    assert v["overflow"] == [] and v["scroll_width"] <= width  # nothing runs off the page sideways
    assert v["verdict"][0] <= v["verdict"][1]  # the verdict fits its card
    assert 9 * v["plot_scale"] >= 7  # its smallest text >= 7 px (was 4 at 390 px): a narrow page scrolls the plot
    assert v["outputs"] >= min(300, 0.2 * width)  # an output was 56 px wide at 390 px, a few letters a line
    copied, label, clipboard, command = v["copy"]
    assert copied == "1" and label == "copied" and clipboard == command and command.startswith("abh ")
    assert v["toc"] == [0, True]  # the table of contents stays on screen while the page scrolls
    up, down, order = v["sort"]
    assert up == sorted(up) and down == sorted(up, reverse=True) and order == "descending" and len(up) >= 2
    all_n, (both_n, only_both), hits, escaped = v["browser"]
    assert all_n == "50 of 120" and only_both and both_n.endswith(f"of {both_n.split(' of ')[1]}")
    assert hits == 1 and escaped  # the planted markup is found by search, and shown as text
    assert shot.exists() and shot.stat().st_size > 10_000


@pytest.mark.parametrize("width", [1400, 390])
def test_the_sweep_verdicts_stay_in_view(tmp_path: Path, chromium: str, width: int) -> None:
    from harness.analysis.sweep import summarize_sweep

    sweep = tmp_path / "sweep"
    for k in range(3):
        build_run_dir(sweep / f"job{k}", n=150, p_b=0.88 + 0.03 * k, seed=k, inject=False)
    summarize_sweep(sweep, "bh")
    res = render_page(write_sweep_report(sweep), width=width, executable=chromium, evaluate={
        "overflow": OVERFLOW_JS,
        "cols": "(function(){var W=document.documentElement.clientWidth;return Array.prototype.map.call("
                "document.querySelectorAll('#sweep-table tr:first-child th'),function(th){return [th.textContent,"
                "th.getBoundingClientRect().right <= W]}).slice(0, 3)})()"})
    assert res.values["overflow"] == []
    assert [c[0] for c in res.values["cols"]] == ["comparison", "Δ (B − A)", "verdict"]
    assert all(fits for _, fits in res.values["cols"])  # Δ and the verdict are on screen without scrolling
