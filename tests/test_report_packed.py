"""The question browser's data packed (harness.report.packed): every row back exactly, each distinct text once, the
packed block in the page, and (slow) the page inflating it in headless Chromium and searching every question. A
large run's flipped questions packed too: the page stays a few hundred bytes a question, and (slow) the script draws
the same table the template draws for a small run, model output as text."""

from __future__ import annotations

import base64
import json
import re
import zlib
from pathlib import Path

import pytest
from helpers.packed_rows import rows_of, unpack
from helpers.rundirs import BOLD, SCRIPT_TITLE, build_run_dir

from harness.report import data, packed, write_report
from harness.report.views import QuestionRow


def _rows(n: int) -> list[QuestionRow]:
    out: list[QuestionRow] = []
    for i in range(n):
        same = f"answer {i % 7} <b>x</b> & ü\n"
        out.append({"i": i, "c": ["both", "a", "b", "neither"][i % 4], "q": f"question {i % 13}?",
                    "l": i % 5 if i % 2 else f"{i}", "a": {"p": [str(i % 3), "[invalid]"], "ok": [True, None], "o": same},
                    "b": {"p": [str(i % 3), "1"], "ok": [False, True], "o": same if i % 3 else f"other {i}"}})
    return out


def test_columns_give_every_row_back_with_each_text_once() -> None:
    rows = _rows(200)
    cols = packed.columns(rows)
    assert rows_of(cols) == rows
    assert len(cols["s"]) == len(set(cols["s"]))  # each distinct text once
    assert len(cols["s"]) < 200  # the outputs both arms share and the repeated questions are not stored again


def test_small_stays_plain_and_large_is_packed(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = _rows(30)
    text, enc = packed.pack(rows)
    assert enc is None and unpack(text, enc) == rows
    monkeypatch.setattr(packed, "PACK_ABOVE", 100)
    text, enc = packed.pack(rows)
    assert enc == packed.ENCODING and re.fullmatch(r"[A-Za-z0-9+/=]+", text)  # nothing can end a script element
    assert unpack(text, enc) == rows


def _block(html: str) -> tuple[str | None, str]:
    m = re.search(r'<script type="application/json" id="questions-data"( data-encoding="([^"]+)")?>(.*?)</script>',
                  html, re.S)
    assert m is not None
    return m.group(2), m.group(3)


def test_a_large_report_packs_its_questions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = build_run_dir(tmp_path / "run", n=80, repeats=2, aa=True)
    plain = write_report(root).read_text()
    enc, text = _block(plain)
    assert enc is None
    monkeypatch.setattr(packed, "PACK_ABOVE", 1000)
    small = write_report(root).read_text()
    enc2, text2 = _block(small)
    assert enc2 == packed.ENCODING
    assert unpack(text2, enc2) == unpack(text, None)  # the same rows, planted markup included
    assert any(BOLD in r["a"]["o"] + r["b"]["o"] for r in unpack(text2, enc2))
    assert len(text2) < len(text)


#: after the packed rows are inflated: the count shown, then a search for the last question's index
SEARCH_JS = """(async function(){var n=document.getElementById('qb-n');
for (var k=0; k<600 && !n.textContent; k++) { await new Promise(function(r){setTimeout(r,50)}); }
var first=n.textContent, q=document.getElementById('qb-q'); q.value='bold claim'; q.dispatchEvent(new Event('input'));
var hit=document.querySelectorAll('#qb-rows tr').length, html=document.getElementById('qb-rows').innerHTML;
return [first, hit, html.indexOf('<b>') < 0 && html.indexOf('&lt;b&gt;') >= 0]})()"""


@pytest.mark.slow
def test_a_packed_report_opens_and_searches_in_chromium(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.report.browser import find_chromium, render_page

    exe = find_chromium()
    assert exe is not None, "headless Chromium is required (the Debian package `chromium`, or ABH_CHROMIUM)"
    root = build_run_dir(tmp_path / "run", n=120, repeats=2, aa=True)
    monkeypatch.setattr(packed, "PACK_ABOVE", 1000)
    report = write_report(root)
    assert _block(report.read_text())[0] == packed.ENCODING
    res = render_page(report, executable=exe, evaluate={"search": SEARCH_JS})
    assert res.console_errors == [] and [r for r in res.requests if r != res.url] == []
    first, hit, escaped = res.values["search"]
    assert first == "50 of 120" and hit >= 1 and escaped


def _flips_block(html: str) -> str | None:
    m = re.search(r'<script type="application/json" id="flips-data" data-encoding="deflate-base64">(.*?)</script>',
                  html, re.S)
    return m.group(1) if m is not None else None


def test_a_small_runs_flipped_rows_are_drawn_by_the_template(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=80, repeats=2, aa=True)
    html = write_report(root).read_text()
    assert '<tr class="flip"' in html and _flips_block(html) is None


def test_a_large_runs_flipped_rows_are_packed_and_its_report_stays_small(tmp_path: Path) -> None:
    """600 flipped rows drawn as markup were ~800 bytes a question of a 1500-question run (3.6 MB at 13k GSM8K
    questions); packed, every row is still in the page, whole, and the page is under 200 bytes a question."""
    n = 1500
    root = build_run_dir(tmp_path / "run", n=n, repeats=2, p_a=0.5, p_b=0.9)  # B right on ~40 % more: 600 listed
    report = write_report(root)
    html = report.read_text()
    c = data.load_comparison(root)
    assert c is not None
    rows, total = data.flipped_questions(c, data.load_runs(c, root))
    assert len(rows) == data.MAX_FLIPS and total > len(rows)
    block = _flips_block(html)
    assert block is not None and '<tr class="flip"' not in html
    assert json.loads(zlib.decompress(base64.b64decode(block))) == rows  # every row, every repeat's answer
    assert f"Showing the first {len(rows)} of {total}." in html
    assert report.stat().st_size <= 200 * n


#: the flipped table's rows once drawn (by the template, or by the script from the packed rows), as markup without
#: the whitespace between tags; then the filter run on a planted output's words
FLIPS_JS = """(async function(){for (var k=0; k<600 && !document.querySelector('#flips tbody tr'); k++) {
await new Promise(function(r){setTimeout(r,50)}); }
var html=document.querySelector('#flips tbody').innerHTML, q=document.getElementById('flip-q'), n=document.getElementById('flip-n');
var all=n.textContent; q.value='bold claim'; q.dispatchEvent(new Event('input'));
return [html, all, n.textContent, document.querySelectorAll('#flips b, #flips img, #flips i, #flips script').length]})()"""


def _markup(html: str) -> str:
    """Rows' markup as the reader gets it: no layout whitespace, numbers as numbers (the template writes 1.0)."""
    html = re.sub(r"\s+", " ", re.sub(r"\s+<", "<", re.sub(r">\s+", ">", html)))
    return re.sub(r'data-v="(-?\d+)\.0"', r'data-v="\1"', html)


@pytest.mark.slow
def test_packed_flipped_rows_draw_the_templates_table_in_chromium(tmp_path: Path, chromium: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.report.browser import render_page

    root = build_run_dir(tmp_path / "run", n=120, repeats=2, aa=True)
    drawn = render_page(write_report(root), executable=chromium, evaluate={"flips": FLIPS_JS})
    monkeypatch.setattr(packed, "FLIPS_PACK_ABOVE", 0)
    report = write_report(root)
    html = report.read_text()
    assert _flips_block(html) is not None and '<tr class="flip"' not in html
    res = render_page(report, executable=chromium, evaluate={"flips": FLIPS_JS})
    assert res.console_errors == [] and [r for r in res.requests if r != res.url] == []
    rows, shown, filtered, markup = res.values["flips"]
    assert _markup(rows) == _markup(drawn.values["flips"][0])  # the same table, cell by cell
    assert rows.count('<tr class="flip"') == int(shown) >= 2 and '<mark class="fd"' in rows
    assert filtered == "1" and markup == 0  # the planted <b>, <img>, <script> are text, not elements
    assert BOLD in res.text and SCRIPT_TITLE in res.text and "pwned" not in res.title  # shown, never run
