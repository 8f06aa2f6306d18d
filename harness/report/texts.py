"""Where two texts part: the first character at which they differ, and each text split around the word there
(the report marks it in the flipped questions and in the questions that diverge most)."""

from __future__ import annotations

from typing import TypedDict

#: characters of context kept before the first divergence and after the marked token
CONTEXT_CHARS = 600


class Split(TypedDict):
    """A text around a marked span: what comes before it, the span, what follows (each cut to the context)."""

    before: str
    mark: str
    after: str


def first_difference(a: str | None, b: str | None) -> int | None:
    """The index of the first character where ``a`` and ``b`` differ (None when either is missing or they are
    equal)."""
    if a is None or b is None or a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def word_end(text: str, start: int) -> int:
    """End of the word starting at ``start``: the next whitespace after at least one character."""
    i = start + 1
    while i < len(text) and not text[i].isspace():
        i += 1
    return min(i, len(text))


def split_at(text: str | None, start: int | None, end: int | None,
             context: int = CONTEXT_CHARS) -> Split | None:
    """{before, mark, after} of a text around the marked span (cut to ``context`` characters each side)."""
    if text is None:
        return None
    if start is None:
        return {"before": text[: 2 * context] + ("…" if len(text) > 2 * context else ""), "mark": "", "after": ""}
    start = max(0, min(start, len(text)))
    end = max(start, min(end if end is not None else word_end(text, start), len(text)))
    lo = max(0, start - context)
    hi = min(len(text), end + context)
    return {"before": ("…" if lo > 0 else "") + text[lo:start], "mark": text[start:end],
            "after": text[end:hi] + ("…" if hi < len(text) else "")}
