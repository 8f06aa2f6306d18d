"""Dotted keys: a nested tree as ``{"a.b.c": leaf}``, and whether a key falls under dotted prefixes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings -> ``{dotted key: leaf}``; lists and scalars are leaves; an empty mapping has no keys."""
    if isinstance(obj, Mapping):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def matches(key: str, prefixes: Iterable[str]) -> bool:
    """True when ``key`` is one of ``prefixes`` or lies under one, by whole dotted parts: ``args`` covers
    ``args.--tp``, ``args.--enable`` does not cover ``args.--enable-foo``. A trailing dot is ignored."""
    return any(key == p or key.startswith(p + ".") for p in (p.rstrip(".") for p in prefixes))
