"""The question browser's data, and a large run's flipped questions, packed small inside the one self-contained
page.

Up to :data:`PACK_ABOVE` characters the rows are plain JSON; above, one base64 string of zlib-deflated JSON
that the page's script inflates (``DecompressionStream("deflate")``). Inside, rows are columns and every text
is stored once in a string table, since deflate's 32 KiB window misses a text repeated far apart. Packed
form::

    {"s": [text, ...], "i": [index, ...], "c": [outcome, ...], "q": [text id, ...], "l": [label, ...],
     "a": {"p": [[text id per repeat], ...], "ok": [[bool|null per repeat], ...], "o": [text id, ...]}, "b": {...}}

The flipped questions are drawn by the page's template up to :data:`FLIPS_PACK_ABOVE` characters (readable
without script; the demo's are about half of it); above, their rows (``FlipRow``, as the template reads them) go deflated in one base64 string too and the
script draws the same table from it: a 13k-question run's 600 flipped rows as markup were ~1.6 MB of the page, and
deflated they are ~0.2 MB (neighbouring repeats' outputs are mostly the same text).
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from harness.report.views import Answer, BrowserArm, FlipRow, QuestionRow

#: plain JSON up to this many characters; above, packed
PACK_ABOVE = 256 * 1024
#: the flipped questions drawn by the template up to about this many characters; above, packed
FLIPS_PACK_ABOVE = 512 * 1024
#: the ``data-encoding`` of a packed block, as the page's script reads it
ENCODING = "deflate-base64"


class _Strings:
    """Each distinct text once, by the order it is first met."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        k = self.ids.get(text)
        if k is None:
            k = self.ids[text] = len(self.ids)
        return k


def columns(rows: list[QuestionRow]) -> dict[str, Any]:
    """The rows as columns over a string table (the packed form above, before deflate)."""
    s = _Strings()

    def arm(key: str) -> dict[str, list[Any]]:
        arms: list[BrowserArm] = [r["a"] if key == "a" else r["b"] for r in rows]
        return {"p": [[s(p) for p in x["p"]] for x in arms], "ok": [x["ok"] for x in arms],
                "o": [s(x["o"]) for x in arms]}

    out: dict[str, Any] = {"i": [r["i"] for r in rows], "c": [r["c"] for r in rows], "q": [s(r["q"]) for r in rows],
                           "l": [r["l"] for r in rows], "a": arm("a"), "b": arm("b")}
    return {"s": list(s.ids), **out}


def pack(rows: list[QuestionRow]) -> tuple[str, str | None]:
    """The browser's block: (its text, its encoding); encoding None: plain JSON (escaped for a script element
    by the caller); else :data:`ENCODING` (base64: no character that could end the element)."""
    if _size(rows) <= PACK_ABOVE:
        return json.dumps(rows, ensure_ascii=False, separators=(",", ":")), None
    return deflate(columns(rows)), ENCODING


def pack_flips(rows: list[FlipRow]) -> str | None:
    """The flipped rows for the page's script to draw (:data:`ENCODING`), or None: few enough for the template."""
    if sum(_flip_size(r) for r in rows) <= FLIPS_PACK_ABOVE:
        return None
    return deflate(rows)


def deflate(value: object) -> str:
    """``value`` as JSON, zlib-deflated, in base64 (no character that could end a script element)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    # level 6: 0.5 % larger than 9 on the demo's rows at two thirds of the CPU
    return base64.b64encode(zlib.compress(text, 6)).decode("ascii")


def _size(rows: list[QuestionRow]) -> int:
    """About the characters of the rows as JSON (their texts and a row's keys), without writing it."""
    return sum(len(r["q"]) + len(r["a"]["o"]) + len(r["b"]["o"]) + 16 * (len(r["a"]["p"]) + len(r["b"]["p"])) + 60
               for r in rows)


def _flip_size(row: FlipRow) -> int:
    """About the characters the template draws for a flipped row: its texts, and the markup around each answer
    (marks, parsed answer, repeat) and around the row."""
    def answer(a: Answer) -> int:
        return len(a["output"]) + len(a["pred"]) + 300

    return len(row["question"]) + sum(answer(a) for a in row["a"] + row["b"]) + 600
