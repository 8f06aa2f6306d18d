"""A side assertion's outcome, and the error (with the message users see) when any failed."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

from harness.config import CheckConfig
from harness.results.records import JSON, JSONObject


def short(v: Any, n: int = 200) -> str:
    """``repr(v)``, cut to ``n`` characters."""
    s = repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def check_name(c: CheckConfig, index: int = 0) -> str:
    """The check's ``name``, else ``KIND[INDEX] WHAT`` (``source[0] select_experts``)."""
    if c.name:
        return c.name
    what = c.object or c.key or c.function or c.module
    return f"{c.kind}[{index}]" + (f" {what}" if what else "")


class CheckResultDoc(TypedDict):
    """A :class:`CheckResult` as recorded (the manifest's ``static_checks`` and ``live_checks``)."""

    name: str
    kind: str
    passed: bool
    expected: JSON
    found: JSON
    evidence: JSONObject
    arm: str
    what: str


@dataclass
class CheckResult:
    """One side assertion's outcome. ``expected`` / ``found`` are the raw values where the check compares
    one value (http / fingerprint ``equals``: e.g. ``'fix'`` and ``'baseline'``), else short descriptions;
    ``what`` says what was looked at (``GET /get_server_info -> build``); ``evidence``, what the check saw (each
    kind records its own fields; a custom check, whatever its function returned)."""

    name: str
    kind: str
    passed: bool
    expected: Any
    found: Any
    evidence: JSONObject = field(default_factory=dict)
    arm: str = ""
    what: str = ""

    def to_dict(self) -> CheckResultDoc:
        # deep copies (a dataclass in a custom check's evidence becomes a dict)
        return cast(CheckResultDoc, dataclasses.asdict(self))

    def describe(self) -> str:
        what = f"{self.kind}: {self.what}" if self.what else self.kind
        return f"check {self.name!r} ({what}): expected {short(self.expected, 300)}; found {short(self.found, 300)}"

    def line(self) -> str:
        return ("[PASS] " if self.passed else "[FAIL] ") + self.describe()


class SideAssertionError(Exception):
    """A side assertion failed: the arm's server is not on the side of the fix it claims (exit 3). Not a
    ValueError/RuntimeError, so no handler of bad config or engine errors can mistake it for one."""

    def __init__(self, failures: Sequence[CheckResult], arm: str = ""):
        self.failures = list(failures)
        self.arm = arm
        who = f" for arm {arm!r}" if arm else ""
        super().__init__(f"side assertion failed{who}: " + "\n  ".join(f.describe() for f in self.failures))


def assert_checks(results: Sequence[CheckResult], arm: str = "") -> None:
    """Raise :class:`SideAssertionError` naming every failed check (its expected and found value)."""
    failed = [r for r in results if not r.passed]
    if failed:
        raise SideAssertionError(failed, arm or failed[0].arm)
