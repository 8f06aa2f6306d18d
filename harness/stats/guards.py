"""Guards for degenerate inputs of the question-level statistics: a design effect that round-off drives to ~0
(d_i of 1/3 computed as 1/3 - 0, 2/3 - 1/3 and 1 - 2/3 left a sample variance of ~1e-33), an effective table
so large that the score interval has zero width, and an exact MDE whose binomial sums would overflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .mde import mde_paired, mde_paired_exact
from .signflip import lattice_scale
from .tango import discordant_mass
from .verdict import ALPHA

#: a raw design effect below this is the round-off of an exactly zero sample variance
DEFF_ROUNDOFF = 1e-9
#: deff floor when the d_i lie on no lattice of denominator <= signflip.MAX_DENOMINATOR
FLOOR_OFF_LATTICE = 0.01
#: past this many (effective) questions the exact MDE is replaced by the normal formula (they agree there)
MAX_EXACT_N = 10_000_000


@dataclass(frozen=True)
class DesignEffect:
    """The guarded design effect of per-question differences and what it was derived from."""

    deff: float
    deff_raw: float
    #: the floor 1/K (or FLOOR_OFF_LATTICE off a lattice)
    floor: float
    lattice: int | None
    #: the raw value was replaced (round-off, below the floor, not finite)
    guarded: bool
    reason: str | None


def design_effect(d: np.ndarray, variance: float | None = None) -> DesignEffect:
    """Guarded design effect of Δ = mean(d); ``variance``: the design's V̂(Δ) (default: independent)."""
    d, n, b, c = discordant_mass(d)
    delta, psi = (c - b) / n, (b + c) / n
    if variance is None:
        variance = float(np.sum((d - delta) ** 2)) / n**2
    nz = d[d != 0]
    k = lattice_scale(nz) if nz.size else 1
    floor = 1.0 / k if k is not None else FLOOR_OFF_LATTICE
    table_var = (psi - delta**2) / n
    if not table_var > 1e-15 * max(psi, 1e-300):
        return DesignEffect(1.0, 1.0, floor, k, False, "every d_i is 0 or ±1 alike (ψ = Δ²): the table as it stands")
    raw = variance / table_var
    if not math.isfinite(raw) or raw < DEFF_ROUNDOFF:
        return DesignEffect(1.0, float(raw), floor, k, True,
                            "zero sample variance of the d_i (up to round-off): no variance estimate, the table "
                            "is taken as one run per arm (deff = 1)")
    if raw < floor:
        return DesignEffect(floor, float(raw), floor, k, True,
                            f"deff {raw:.3g} below 1/K = {floor:.3g} (K = {k} runs' lattice): floored")
    return DesignEffect(float(raw), float(raw), floor, k, False, None)


def robust_effective_table(d: np.ndarray, variance: float | None = None) -> dict[str, float]:
    """:func:`harness.stats.tango.effective_table` with the guarded design effect, plus ``deff_raw`` and
    ``deff_guarded`` (1.0 when the guard replaced the raw value)."""
    d, n, b, c = discordant_mass(d)
    de = design_effect(d, variance)
    return {"b": b / de.deff, "c": c / de.deff, "n": n / de.deff, "deff": de.deff, "b_raw": b, "c_raw": c,
            "n_raw": n, "deff_raw": de.deff_raw, "deff_guarded": float(de.guarded)}


def safe_mde_paired_exact(n: float, psi_noise: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """:func:`harness.stats.mde.mde_paired_exact`, never raising on a huge or non-finite n: the normal formula
    past :data:`MAX_EXACT_N` (identical there to within 1e-3), ``inf`` for n not finite or below 1."""
    if not math.isfinite(n) or n < 1 or not math.isfinite(psi_noise):
        return float("inf")
    psi = min(max(float(psi_noise), 0.0), 1.0)
    if n > MAX_EXACT_N:
        return mde_paired(n, max(psi, 1.0 / n), alpha, power)
    return mde_paired_exact(n, psi, alpha, power)
