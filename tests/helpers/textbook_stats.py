"""Statistics abh does not report, kept as references its tests compare the product's methods with: the
asymptotic McNemar test, the Wald and Newcombe paired intervals, the unpaired z-test, the normal power
formula, launch accuracies, and the error gate applied to any test."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np
from scipy.special import ndtr, ndtri

from harness.stats.dist import chi2_sf
from harness.stats.errorgate import error_gate, impute_unanswered
from harness.stats.launches import ArmRuns, launch_means
from harness.stats.outcomes import ErrorGate
from harness.stats.proportions import wilson_interval, z_crit


def mcnemar_asymptotic(a_only: np.ndarray | int, b_only: np.ndarray | int,
                       correction: bool = False) -> np.ndarray:
    """Asymptotic McNemar chi-square p-value (optionally with continuity correction); 1 when b + c = 0."""
    b = np.asarray(a_only, dtype=float)
    c = np.asarray(b_only, dtype=float)
    m = b + c
    num = np.abs(c - b) - (1.0 if correction else 0.0)
    num = np.maximum(num, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.where(m > 0, num**2 / np.where(m > 0, m, 1), 0.0)
    return chi2_sf(stat, 1)


def paired_se(a_only: np.ndarray | int, b_only: np.ndarray | int, n: np.ndarray | int) -> np.ndarray:
    """Standard error of Δ from the table: sqrt((ψ - Δ²) / n)."""
    b = np.asarray(a_only, dtype=float)
    c = np.asarray(b_only, dtype=float)
    n = np.asarray(n, dtype=float)
    psi = (b + c) / n
    d = (c - b) / n
    return np.sqrt(np.maximum(psi - d**2, 0.0) / n)


def paired_wald_ci(a_only: np.ndarray | int, b_only: np.ndarray | int, n: np.ndarray | int,
                   alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Wald interval Δ ± z·SE for the paired difference (vectorised)."""
    d = (np.asarray(b_only, dtype=float) - np.asarray(a_only, dtype=float)) / np.asarray(n, dtype=float)
    half = z_crit(alpha) * paired_se(a_only, b_only, n)
    return d - half, d + half


def newcombe_paired_ci(both: np.ndarray | int, a_only: np.ndarray | int, b_only: np.ndarray | int,
                       neither: np.ndarray | int, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe's (1998, method 10) square-and-add hybrid score interval for the paired Δ = p_B - p_A.

    Combines the Wilson intervals of the two marginal accuracies with the (corrected) phi correlation of
    the table, as in Newcombe (1998) and Fagerland, Lydersen & Laake (2017, ch. 8).
    Vectorised over arrays of tables.
    """
    e = np.asarray(both, dtype=float)       # both right
    f = np.asarray(b_only, dtype=float)     # B right only
    g = np.asarray(a_only, dtype=float)     # A right only
    h = np.asarray(neither, dtype=float)
    n = e + f + g + h
    p1 = (e + f) / n    # accuracy of B
    p2 = (e + g) / n    # accuracy of A
    l1, u1 = wilson_interval(e + f, n, alpha)
    l2, u2 = wilson_interval(e + g, n, alpha)
    den = (e + f) * (g + h) * (e + g) * (f + h)
    cross = e * h - f * g
    # Newcombe's phi: shrunk towards 0 by n/2 when positive (as in Newcombe 1998 and Fagerland et al. 2017)
    num = np.where(cross > n / 2, cross - n / 2, np.where(cross < 0, cross, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = np.where(den > 0, num / np.sqrt(np.where(den > 0, den, 1)), 0.0)
    theta = p1 - p2
    dl = np.sqrt(np.maximum((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    du = np.sqrt(np.maximum((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    return np.maximum(theta - dl, -1.0), np.minimum(theta + du, 1.0)


def power_at(effect: float | np.ndarray, se: float | np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Power of the two-sided z-test of level α to detect ``effect`` when the estimate has standard error
    ``se`` (both tails counted)."""
    z = ndtri(1 - alpha / 2)
    e = np.abs(np.asarray(effect, dtype=float)) / np.asarray(se, dtype=float)
    return ndtr(e - z) + ndtr(-e - z)


def two_proportion_z_test(k_a: np.ndarray | float, n_a: np.ndarray | float, k_b: np.ndarray | float,
                          n_b: np.ndarray | float) -> np.ndarray:
    """Two-sided p-value of the pooled two-proportion z-test for independent samples (vectorised)."""
    k_a, n_a, k_b, n_b = (np.asarray(v, dtype=float) for v in (k_a, n_a, k_b, n_b))
    pool = (k_a + k_b) / (n_a + n_b)
    se = np.sqrt(pool * (1 - pool) * (1 / n_a + 1 / n_b))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, (k_b / n_b - k_a / n_a) / se, 0.0)
    return 2 * ndtr(-np.abs(z))


def launch_accuracies(arm: ArmRuns, keep: np.ndarray | None = None) -> np.ndarray:
    """Accuracy of each launch over the questions ``keep`` (all by default), NaN skipped."""
    lm = launch_means(arm)
    if keep is not None:
        lm = lm[:, keep]
    with np.errstate(invalid="ignore"):
        return np.nanmean(lm, axis=1)


class _Tested(Protocol):
    @property
    def delta(self) -> float: ...

    @property
    def significant(self) -> bool: ...


R = TypeVar("R", bound=_Tested)


@dataclass(frozen=True)
class ErrorRobust(Generic[R]):
    """The test on the answered questions, the gate, and (``bound`` only) both bounds."""

    gate: ErrorGate
    main: R
    bounds: dict[str, R] | None
    #: +1 B better, -1 B worse, 0 no direction shown
    direction: int
    #: test | errors (the bounds disagree with the main test: inconclusive because of errors)
    decided_by: str


def _direction(r: _Tested) -> int:
    return int(np.sign(r.delta)) if r.significant else 0


def error_robust_test(a: ArmRuns, b: ArmRuns, test: Callable[[ArmRuns, ArmRuns], R],
                      alpha_gate: float = 0.05) -> ErrorRobust[R]:
    """``test(a, b)`` on the questions both arms answered, gated as :func:`harness.stats.errorgate.error_gate`
    decides. ``test`` returns an object with ``delta`` and ``significant`` (e.g. a
    :class:`harness.stats.launchvar.LaunchAwareResult`; close over the A/A control and α). With ``bound``, a
    direction stands only when both bounds (A's unanswered right and B's wrong, and the reverse) give the same
    direction as the main test."""
    gate = error_gate(a, b, alpha_gate)
    main = test(a, b)
    d = _direction(main)
    if gate.action != "bound":
        return ErrorRobust(gate, main, None, d, "test")
    bounds = {"against_b": test(impute_unanswered(a, 1.0), impute_unanswered(b, 0.0)),
              "against_a": test(impute_unanswered(a, 0.0), impute_unanswered(b, 1.0))}
    if all(_direction(r) == d for r in bounds.values()):
        return ErrorRobust(gate, main, bounds, d, "test")
    return ErrorRobust(gate, main, bounds, 0, "errors")
