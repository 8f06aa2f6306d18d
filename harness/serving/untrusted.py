"""Untrusted text made safe to print or write: a server's error page, a model's output or a name from a
command line may carry ANSI/OSC sequences, C1 controls or bidirectional overrides, which act on the reader's
terminal. :func:`printable` turns each into its visible escape (``\\x1b``): the text says what was sent, and
does nothing.
"""

from __future__ import annotations

import re

#: C0 controls (but tab and newline, kept where allowed), DEL, C1 controls, the bidi embeddings/overrides/isolates
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROLS_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character (C0 but tab and newline, DEL, C1, bidi controls) as its escape;
    ``one_line``: tabs and newlines too."""
    pattern = _CONTROLS_ONE_LINE if one_line else _CONTROLS
    return pattern.sub(_escape, text) if pattern.search(text) else text
