"""Read GitHub-flavoured markdown tables back, to check what comparison.md states."""

from __future__ import annotations


def parse_table(text: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the GFM table whose first header cell is ``first_header``, cells unescaped: the inverse
    of :func:`harness.report.markdown.table`, written independently of it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        cells = _split(line)
        if cells and cells[0] == first_header and i + 1 < len(lines) and set(lines[i + 1]) <= set("|:- "):
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(cells, _split(row), strict=True)))
            return rows
    raise ValueError(f"no table with a first column {first_header!r}")


def _split(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    out, cur, i = [], "", 1
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line) and line[i + 1] in "|[]\\":  # markdown's backslash escapes
            cur += line[i + 1]
            i += 2
            continue
        if ch == "|":
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    return [c.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") for c in out]
