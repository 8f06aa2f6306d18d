"""How tests wait: for an event, never for a duration. ``PATIENCE_S`` only tells a hang from a slow machine; a
healthy run on a loaded 2-core box never reaches it (pytest-timeout's 600 s per test is the outer guard)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: the longest a test waits for something that is sure to happen on a healthy machine, however loaded
PATIENCE_S = 600.0


def wait_until(happened: Callable[[], bool], what: str, patience: float = PATIENCE_S) -> None:
    """Poll ``happened`` until it is true; fail with ``what`` only after ``patience`` (a hang, not slowness)."""
    deadline = time.monotonic() + patience
    while not happened():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never happened: {what}")
        time.sleep(0.05)
