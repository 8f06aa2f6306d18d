"""The --fail-on gate and the exit code of a comparison (shared by abh compare, abh run, abh ab)."""

from __future__ import annotations

import pytest
from helpers.docs import comparison

from harness import exitcodes
from harness.analysis.gate import FAIL_ON, comparison_exit, gate_exit, gate_fails

VERDICTS = ("improved", "regressed", "equivalent", "noninferior", "inconclusive", "not_comparable")

#: verdict -> the fail_on values that fail it (the decision table of the issue)
EXPECTED = {
    "improved": {"any-difference"},
    "regressed": {"regressed", "not-noninferior", "any-difference"},
    "equivalent": set(),
    "noninferior": set(),
    "inconclusive": {"not-noninferior"},
    "not_comparable": {"not-noninferior"},
}


@pytest.mark.parametrize("verdict", VERDICTS)
@pytest.mark.parametrize("fail_on", FAIL_ON)
def test_decision_table(verdict: str, fail_on: str) -> None:
    fails = fail_on in EXPECTED[verdict]
    assert gate_fails(verdict, fail_on) is fails
    assert gate_exit(verdict, fail_on) == (7 if fails else 0)


def test_no_gate_never_fails_and_an_unknown_verdict_fails_closed() -> None:
    assert all(gate_exit(v, None) == 0 for v in (*VERDICTS, "something_new", None))
    assert all(gate_exit("something_new", f) == 7 for f in FAIL_ON)
    assert gate_exit(None, "regressed") == 7
    with pytest.raises(ValueError, match="--fail-on must be one of"):
        gate_exit("improved", "worse")


def test_comparison_exit_order() -> None:
    assert exitcodes.GATE_FAILED == 7
    ok = comparison(verdict="improved", error_rate_exceeded=False)
    assert comparison_exit(ok) == 0 and comparison_exit(ok, "any-difference") == 7
    bad = comparison(verdict="not_comparable", error_rate_exceeded=True)
    assert comparison_exit(bad) == 5 and comparison_exit(bad, "not-noninferior") == 5
    assert comparison_exit(bad, "regressed", recorded_failure=3) == 3
    assert comparison_exit(comparison(verdict="not_comparable"), recorded_failure=4) == 4
