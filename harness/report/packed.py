"""The question browser's data packed small inside the one self-contained page.

Up to :data:`PACK_ABOVE` characters the rows are plain JSON; above, one base64 string of zlib-deflated JSON
that the page's script inflates (``DecompressionStream("deflate")``). Inside, rows are columns and every text
is stored once in a string table, since deflate's 32 KiB window misses a text repeated far apart. Packed
form::

    {"s": [text, ...], "i": [index, ...], "c": [outcome, ...], "q": [text id, ...], "l": [label, ...],
     "a": {"p": [[text id per repeat], ...], "ok": [[bool|null per repeat], ...], "o": [text id, ...]}, "b": {...}}
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from harness.report.views import BrowserArm, QuestionRow

#: plain JSON up to this many characters; above, packed
PACK_ABOVE = 256 * 1024
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
    packed = json.dumps(columns(rows), ensure_ascii=False, separators=(",", ":")).encode()
    return base64.b64encode(zlib.compress(packed, 9)).decode("ascii"), ENCODING


def _size(rows: list[QuestionRow]) -> int:
    """About the characters of the rows as JSON (their texts and a row's keys), without writing it."""
    return sum(len(r["q"]) + len(r["a"]["o"]) + len(r["b"]["o"]) + 16 * (len(r["a"]["p"]) + len(r["b"]["p"])) + 60
               for r in rows)
