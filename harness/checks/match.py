"""How a side check finds a value and judges it: dotted lookup into JSON, then ``equals`` / ``contains`` /
``lacks``. Pure functions of their arguments."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness.checks.result import short
from harness.config import CheckConfig


class _Missing:
    def __repr__(self) -> str:
        return "<absent>"


#: What :func:`lookup` returns for a key that is not there (shown as ``<absent>``).
MISSING = _Missing()


def lookup(obj: Any, key: str) -> Any:
    """Value at a dotted ``key``; keys that themselves contain dots (module names, file names) are matched
    longest-first. Returns :data:`MISSING` when absent. List items by index (``a.0.b``)."""
    if not key:
        return obj
    parts = key.split(".")

    def rec(o: Any, i: int) -> Any:
        if i == len(parts):
            return o
        if isinstance(o, Mapping):
            for j in range(len(parts), i, -1):
                k = ".".join(parts[i:j])
                if k in o:
                    v = rec(o[k], j)
                    if v is not MISSING:
                        return v
            return MISSING
        if isinstance(o, list) and re.fullmatch(r"-?\d+", parts[i]):
            idx = int(parts[i])
            if -len(o) <= idx < len(o):
                return rec(o[idx], i + 1)
        return MISSING

    return rec(obj, 0)


def shown(value: Any) -> Any:
    """A found value as recorded: ``"<absent>"`` for :data:`MISSING`."""
    return "<absent>" if value is MISSING else value


def _scalar_eq(found: Any, expected: Any) -> bool:
    if found == expected and type(found) is type(expected):
        return True
    if isinstance(found, Mapping | list) or isinstance(expected, Mapping | list):
        return found == expected
    if isinstance(found, bool) or isinstance(expected, bool):
        return str(found).lower() == str(expected).lower()
    return found == expected or str(found) == str(expected)


def _contains(found: Any, needle: Any) -> bool:
    if found is MISSING or found is None:
        return False
    if isinstance(found, str):
        return str(needle) in found
    if isinstance(found, Mapping):
        return str(needle) in found or needle in found
    if isinstance(found, list | tuple | set):
        return any(_scalar_eq(x, needle) for x in found)
    return str(needle) in str(found)


def expand(value: Any, source_tree: str = "") -> Any:
    """``<source>`` in an expected string stands for the arm's source tree (resolved path)."""
    if isinstance(value, str) and source_tree and "<source>" in value:
        return value.replace("<source>", source_tree)
    return value


def compare(found: Any, c: CheckConfig, source_tree: str = "") -> tuple[bool, Any]:
    """Apply a check's equals / contains / lacks to ``found``: (passed, expected), where ``expected`` is the
    ``equals`` value itself when that is the whole check, else a description such as ``contains 'x'``."""
    parts: list[str] = []
    ok = found is not MISSING
    equals, contains, lacks = (expand(v, source_tree) for v in (c.equals, c.contains, c.lacks))
    if equals is not None:
        ok = ok and _scalar_eq(found, equals)
        parts.append(f"== {short(equals)}")
    if contains is not None:
        ok = ok and _contains(found, contains)
        parts.append(f"contains {short(contains)}")
    if lacks is not None:
        ok = ok and not _contains(found, lacks)
        parts.append(f"lacks {short(lacks)}")
    if equals is not None and contains is None and lacks is None:
        return ok, equals
    return ok, " and ".join(parts) or "present"
