"""The question browser's rows back from a packed block: what the page's script does, in Python for the tests."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

from harness.report.views import BrowserArm, QuestionRow


def rows_of(cols: dict[str, Any]) -> list[QuestionRow]:
    """The rows back from :func:`harness.report.packed.columns`."""
    s = cols["s"]

    def arm(key: str, n: int) -> BrowserArm:
        x = cols[key]
        return {"p": [s[k] for k in x["p"][n]], "ok": x["ok"][n], "o": s[x["o"][n]]}

    return [{"i": i, "c": cols["c"][n], "q": s[cols["q"][n]], "l": cols["l"][n], "a": arm("a", n), "b": arm("b", n)}
            for n, i in enumerate(cols["i"])]


def unpack(text: str, encoding: str | None) -> list[QuestionRow]:
    """The rows of a block as :func:`harness.report.packed.pack` wrote it."""
    if encoding is None:
        rows: list[QuestionRow] = json.loads(text)
        return rows
    return rows_of(json.loads(zlib.decompress(base64.b64decode(text))))
