"""A setting's range, declared once on its dataclass field (``ranged``) and checked wherever the setting comes in:
a config key (``harness.config.validate``) or a command-line flag (``abh eval``, ``abh ab``, ``abh power``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

_KEY = "range"


@dataclass(frozen=True)
class Range:
    """``low`` .. ``high`` (None: no upper end); ``strict``: ``low`` itself excluded; ``whole``: integers only."""

    low: float
    high: float | None = None
    strict: bool = False
    whole: bool = False

    def problem(self, key: str, value: Any) -> str | None:
        """Why ``value`` is not a valid ``key`` (None when it is, or unset)."""
        if value is None:
            return None
        kind = "an integer" if self.whole else "a number"
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{key} must be {kind}, not {value!r}"
        if not math.isfinite(value):
            return f"{key} must be a finite number, not {value!r}"
        if self.whole and value != int(value):
            return f"{key} must be {kind}, not {value!r}"
        if value < self.low or (self.strict and value == self.low) or (self.high is not None and value > self.high):
            span = f"{'>' if self.strict else '>='} {self.low:g}" + (
                f" and <= {self.high:g}" if self.high is not None else "")
            return f"{key} must be {span}, not {value!r}"
        return None


def ranged(default: Any, low: float, high: float | None = None, *, strict: bool = False, whole: bool = False) -> Any:
    """A dataclass field with its default and its range."""
    return field(default=default, metadata={_KEY: Range(low, high, strict, whole)})


def range_of(schema: Any, name: str) -> Range | None:
    """The range declared on field ``name`` of the dataclass (or instance) ``schema``, if any."""
    f = next((f for f in dataclasses.fields(schema) if f.name == name), None)
    return None if f is None else f.metadata.get(_KEY)


def check(schema: Any, name: str, value: Any, key: str) -> str | None:
    """Why ``value`` is not valid for field ``name`` of ``schema``, said of ``key`` (a config key or a flag)."""
    rule = range_of(schema, name)
    return None if rule is None else rule.problem(key, value)


def problems(obj: Any, prefix: str = "") -> list[str]:
    """Every ranged field of the dataclass instance ``obj`` that is out of its range, as ``prefix + name ...``."""
    rules = ((f.name, f.metadata.get(_KEY)) for f in dataclasses.fields(obj))
    return [why for name, rule in rules if rule and (why := rule.problem(prefix + name, getattr(obj, name)))]
