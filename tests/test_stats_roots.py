"""harness.stats.roots.brentq is scipy.optimize.brentq's algorithm: the same root, bit for bit."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq as scipy_brentq
from scipy.special import ndtr

from harness.stats.roots import brentq

CASES = [
    (lambda x: x ** 3 - 2 * x - 5, 2.0, 3.0, 2e-12),
    (lambda x: math.cos(x) - x, 0.0, 1.0, 1e-14),
    (lambda x: float(ndtr(x)) - 0.975, -5.0, 5.0, 1e-10),
    (lambda x: math.exp(x) - 1e6, 0.0, 50.0, 1e-8),
    (lambda x: math.atan(x - 1e-3), -1e3, 1e4, 1e-7),
    (lambda x: x, -1.0, 0.0, 1e-12),  # a root at an end
    (lambda x: 1.0 if x > 0.25 else -1.0, 0.0, 1.0, 1e-12),  # a step: bisection only
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_brentq_is_scipys_bit_for_bit(case: int) -> None:
    f, a, b, xtol = CASES[case]
    assert brentq(f, a, b, xtol=xtol) == scipy_brentq(f, a, b, xtol=xtol)
    assert brentq(f, b, a, xtol=xtol) == scipy_brentq(f, b, a, xtol=xtol)


def test_brentq_refuses_what_scipy_refuses() -> None:
    with pytest.raises(ValueError, match="different signs"):
        brentq(lambda x: x * x + 1, -1.0, 1.0)
    with pytest.raises(ValueError):
        brentq(lambda x: x, -1.0, 1.0, xtol=0.0)
    with pytest.raises(RuntimeError):
        brentq(lambda x: (x - 0.3) ** 5, -1.0, 2.0, xtol=1e-14, maxiter=100)
    with pytest.raises(RuntimeError):
        scipy_brentq(lambda x: (x - 0.3) ** 5, -1.0, 2.0, xtol=1e-14, maxiter=100)
