"""Power and minimum detectable effect (MDE) for a two-sided test at level alpha.

MDE = (z_{1-α/2} + z_{power}) · SE, with z_{0.975} + z_{0.8} = 2.8016:
unpaired sqrt(2p(1-p)/n), paired sqrt(ψ/n), R repeats per arm sqrt(ψ_AA/(nR)).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr, ndtri


def z_sum(alpha: float = 0.05, power: float = 0.8) -> float:
    """z_{1-α/2} + z_{power} (2.8016 for α = 0.05 and 80 % power)."""
    return float(ndtri(1 - alpha / 2) + ndtri(power))


def mde_unpaired(n: float, p: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDE of two independent arms of n questions at accuracy p: z·sqrt(2p(1-p)/n)."""
    return z_sum(alpha, power) * math.sqrt(2 * p * (1 - p) / n)


def mde_paired(n: float, psi: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDE of a paired comparison with discordance ψ: z·sqrt(ψ/n)."""
    return z_sum(alpha, power) * math.sqrt(psi / n)


def mde_repeats(n: float, psi_aa: float, repeats: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDE with R repeats per arm and A/A discordance ψ_AA: z·sqrt(ψ_AA/(nR))."""
    return z_sum(alpha, power) * math.sqrt(psi_aa / (n * repeats))


def repeats_needed(effect: float, n: float, psi_aa: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Smallest R per arm whose MDE is at most ``effect``: ceil(z² ψ_AA / (n effect²)), at least 1."""
    if effect <= 0:
        raise ValueError("effect must be positive")
    return max(1, math.ceil(z_sum(alpha, power) ** 2 * psi_aa / (n * effect**2) - 1e-9))


def n_needed_paired(effect: float, psi: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Questions needed to detect ``effect`` in a paired comparison with discordance ψ."""
    if effect <= 0:
        raise ValueError("effect must be positive")
    return max(1, math.ceil(z_sum(alpha, power) ** 2 * psi / effect**2 - 1e-9))


def power_at(effect: float | np.ndarray, se: float | np.ndarray, alpha: float = 0.05) -> np.ndarray:
    """Power of the two-sided z-test of level α to detect ``effect`` when the estimate has standard error
    ``se`` (both tails counted)."""
    z = ndtri(1 - alpha / 2)
    e = np.abs(np.asarray(effect, dtype=float)) / np.asarray(se, dtype=float)
    return ndtr(e - z) + ndtr(-e - z)


def min_detectable_discordant(alpha: float = 0.05) -> int:
    """Fewest discordant pairs, all in one direction, that an exact two-sided McNemar test can call
    significant: the smallest k with 2 * 0.5**k < alpha (6 at alpha = 0.05)."""
    return int(math.floor(math.log2(2.0 / alpha))) + 1


def mde_floor(n: float, alpha: float = 0.05) -> float:
    """No paired design detects an effect below ``min_detectable_discordant(alpha) / n``: the floor of the
    MDE when the observed discordance is zero (the ψ formulas would say 0)."""
    return min_detectable_discordant(alpha) / n
