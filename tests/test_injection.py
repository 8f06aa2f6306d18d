"""Terminal and markdown injection (issue 22, item 9): ANSI/OSC sequences and C1 controls in arm names or a
server's text never reach the terminal, comparison.md or report.html raw; markdown link and image syntax in a
name is escaped in every cell and heading. (A server's error bodies: tests/test_hostile_server.py.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEST_JSONL
from helpers.faultserver import FaultServer
from helpers.markdown import parse_table
from helpers.runs import abh_run_here
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.report.markdown import cell
from harness.serving.untrusted import printable

RAW = ("\x1b", "\x07", "\x9b", "\u202e")
NAME_A = "\x1b]0;pwned\x07base\x9b2J\u202e"
NAME_B = "[x](javascript:alert(1)) ![i](http://127.0.0.1:1/beacon.png)"


def no_raw(text: str) -> bool:
    return not any(c in text for c in RAW)


def test_printable_escapes_controls_and_keeps_text():
    assert printable("a\x1b[2Jb\x9b\u202e\tc\nd") == "a\\x1b[2Jb\\x9b\\u202e\tc\nd"
    assert printable("tab\tnl\n", one_line=True) == "tab\\x09nl\\x0a"
    assert printable("plain — ü ✓") == "plain — ü ✓"


def test_a_markdown_cell_escapes_links_images_and_controls():
    c = cell(NAME_B + " " + NAME_A)
    assert "](" not in c.replace("\\](", "") and "![" not in c.replace("!\\[", "")
    assert no_raw(c) and "\\\\x1b" in c


@pytest.mark.slow  # a whole run of processes: abh run's header escaping and the escaping functions stay in the default run
def test_abh_ab_with_hostile_names(tmp_path: Path):
    out = tmp_path / "ab"
    with FaultServer("ok") as sa, FaultServer("ok") as sb:
        r = subprocess.run([sys.executable, "-m", "harness.cli.main", "ab", sa.url, sb.url, "--out", str(out),
                            "--num-questions", "4", "--no-progress", "--data", str(TEST_JSONL), "--a-name", NAME_A,
                            "--b-name", NAME_B], capture_output=True, text=True, timeout=PATIENCE_S)
    assert r.returncode == exitcodes.OK, r.stderr
    assert no_raw(r.stdout) and no_raw(r.stderr), r.stdout + r.stderr
    md = (out / "comparison.md").read_text()
    assert no_raw(md) and no_raw((out / "report.html").read_text())
    heading = next(ln for ln in md.splitlines() if ln.startswith("### "))  # the title, under the headline
    assert heading.startswith("### abh: \\[x\\](javascript:alert(1)) !\\[i\\](http")
    prose = re.sub(r"```.*?```", "", md, flags=re.S)  # in a code fence a link is text: the command stays verbatim
    assert "[x](" not in prose.replace("\\[x\\](", "") and "![i](" not in prose
    rows = parse_table(md, "arm")
    assert rows[1]["name"] == NAME_B and rows[0]["name"] == printable(NAME_A, one_line=True)


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_abh_run_header_escapes_an_arms_name(tmp_path: Path, capsys):
    code = abh_run_here(f"hydra.run.dir={tmp_path / 'run'}", "dry_run=true", "arms.a.name='\x1b]0;t\x07A\x9b'")
    out, err = capsys.readouterr()
    assert code == exitcodes.OK, err
    assert "=== arm a: \\x1b]0;t\\x07A\\x9b" in out and no_raw(out + err)


def test_the_headline_prose_keeps_brackets_but_makes_no_link() -> None:
    from harness.report.markdown import prose
    assert prose("[SIMULATED] REGRESSED −2 pp [−3, −1]") == "[SIMULATED] REGRESSED −2 pp [−3, −1]"
    s = prose("not comparable: [x](javascript:alert(1)) ![i](http://e/p.png) <img src=x> **b** [r][1]\x1b[2J")
    for bad in ("](", "![", "<img", "**b", "][", "\x1b"):
        assert bad not in s.replace("\\](", "").replace("!\\[", "").replace("\\][", "").replace("\\*\\*b", ""), bad
