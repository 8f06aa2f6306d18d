"""The question browser's data packed (harness.report.packed): every row back exactly, each distinct text once, the
packed block in the page, and (slow) the page inflating it in headless Chromium and searching every question."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.packed_rows import rows_of, unpack
from helpers.rundirs import BOLD, build_run_dir

from harness.report import packed, write_report
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
