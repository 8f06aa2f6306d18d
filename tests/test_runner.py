"""The measurements' runner: the cyclic garbage collector is paused while a measurement runs, and restored."""

from __future__ import annotations

import gc

import pytest

from harness.measure.runner import run


async def _collector_enabled() -> bool:
    return gc.isenabled()


async def _fails() -> None:
    assert not gc.isenabled()
    raise RuntimeError("boom")


def test_the_collector_is_paused_during_a_measurement_and_restored_after() -> None:
    assert gc.isenabled()
    assert run(_collector_enabled()) is False
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="boom"):  # restored when the measurement fails too
        run(_fails())
    assert gc.isenabled()
    gc.disable()  # a caller that had it off keeps it off
    try:
        assert run(_collector_enabled()) is False
        assert not gc.isenabled()
    finally:
        gc.enable()
