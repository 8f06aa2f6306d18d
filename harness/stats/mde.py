"""Power and minimum detectable effect (MDE) for a two-sided test at level alpha: exact for the paired
sign-flip (McNemar) test and for the t-test the comparison uses, the normal formulas (z_{1-α/2} + z_{power}) ·
SE for planning.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtri

from .dist import binom_cdf, binom_pmf, binom_sf, t_ppf
from .verdict import ALPHA


def z_sum(alpha: float = ALPHA, power: float = 0.8) -> float:
    """z_{1-α/2} + z_{power} (2.8016 for α = 0.05 and 80 % power)."""
    return float(ndtri(1 - alpha / 2) + ndtri(power))


def mde_unpaired(n: float, p: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """MDE of two independent arms of n questions at accuracy p: z·sqrt(2p(1-p)/n)."""
    return z_sum(alpha, power) * math.sqrt(2 * p * (1 - p) / n)


def mde_paired(n: float, psi: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """MDE of a paired comparison with discordance ψ: z·sqrt(ψ/n)."""
    return z_sum(alpha, power) * math.sqrt(psi / n)


def mde_repeats(n: float, psi_aa: float, repeats: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """MDE with R repeats per arm and A/A discordance ψ_AA: z·sqrt(ψ_AA/(nR))."""
    return z_sum(alpha, power) * math.sqrt(psi_aa / (n * repeats))


def repeats_needed(effect: float, n: float, psi_aa: float, alpha: float = ALPHA, power: float = 0.8) -> int:
    """Smallest R per arm whose MDE is at most ``effect``: ceil(z² ψ_AA / (n effect²)), at least 1."""
    if effect <= 0:
        raise ValueError("effect must be positive")
    return max(1, math.ceil(z_sum(alpha, power) ** 2 * psi_aa / (n * effect**2) - 1e-9))


def n_needed_paired(effect: float, psi: float, alpha: float = ALPHA, power: float = 0.8) -> int:
    """Questions needed to detect ``effect`` in a paired comparison with discordance ψ."""
    if effect <= 0:
        raise ValueError("effect must be positive")
    return max(1, math.ceil(z_sum(alpha, power) ** 2 * psi / effect**2 - 1e-9))


def min_detectable_discordant(alpha: float = ALPHA, mid_p: bool = True) -> int:
    """Fewest discordant pairs, all in one direction, that the two-sided paired sign-flip (McNemar) test
    can call significant: the smallest k with 0.5**k < alpha for the mid-p test (5 at alpha = 0.05), with
    2 * 0.5**k < alpha for the exact test (6)."""
    return int(math.floor(math.log2((1.0 if mid_p else 2.0) / alpha))) + 1


def mde_floor(n: float, alpha: float = ALPHA, mid_p: bool = True) -> float:
    """The smallest effect the test can detect at all (at any power): ``min_detectable_discordant / n``.
    Not an MDE at 80 % power (that is :func:`mde_paired_exact`)."""
    return min_detectable_discordant(alpha, mid_p) / n


def critical_counts(m: np.ndarray, alpha: float = ALPHA, mid_p: bool = True) -> np.ndarray:
    """For each number m of discordant pairs, the smallest count c of them on one side at which the
    two-sided paired sign-flip (McNemar) test rejects (m + 1 when it never does); vectorised bisection."""
    m = np.asarray(m, dtype=np.int64)

    def p_at(c: np.ndarray) -> np.ndarray:
        k = m - c
        p = 2 * binom_cdf(k, m, 0.5) - (binom_pmf(k, m, 0.5) if mid_p else 0.0)
        return np.where(2 * c == m, 1.0, np.minimum(p, 1.0))

    lo = (m + 1) // 2          # p(lo) >= alpha or lo rejects already (only when m tiny: never)
    hi = m + 1                 # sentinel: not rejecting
    rej_top = p_at(m) < alpha
    hi, lo = np.where(rej_top, m, hi), np.where(rej_top, lo, m + 1)
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        r = p_at(mid) < alpha
        hi = np.where((hi - lo > 1) & r, mid, hi)
        lo = np.where((hi - lo > 1) & ~r, mid, lo)
    return np.where(p_at(np.minimum(lo, m)) < alpha, lo, hi)


def power_paired_exact(n: int, psi_noise: float, effect: float, alpha: float = ALPHA,
                       mid_p: bool = True) -> float:
    """Exact power of the two-sided paired sign-flip (McNemar) test for n questions, summed over every
    discordant count: the arms disagree by chance on ``psi_noise`` of the questions and the effect adds
    ``effect`` on B's side."""
    e = abs(float(effect))
    psi = min(1.0, psi_noise + e)
    if psi <= 0 or n <= 0:
        return 0.0
    n = int(n)
    mean, sd = n * psi, math.sqrt(n * psi * (1 - psi))
    ms = np.arange(int(max(1, math.floor(mean - 10 * sd - 10))), int(min(n, math.ceil(mean + 10 * sd + 10))) + 1)
    w = binom_pmf(ms, n, psi)
    share = (psi_noise / 2 + e) / psi
    crit = critical_counts(ms, alpha, mid_p)
    p_rej = binom_sf(crit - 1, ms, share) + binom_cdf(ms - crit, ms, share)
    p_rej = np.where(crit <= ms, p_rej, 0.0)
    return float(np.sum(w * p_rej))


def mde_paired_exact(n: float, psi_noise: float, alpha: float = ALPHA, power: float = 0.8,
                     mid_p: bool = True) -> float:
    """Smallest effect the paired sign-flip test detects with the given power (bisection on the effect)."""
    n_int = max(1, int(round(n)))
    top = max(1e-9, 1.0 - psi_noise)
    guess = z_sum(alpha, power) * math.sqrt(max(psi_noise, 1.0 / n_int) / n_int)   # normal approximation
    lo, hi = 0.0, min(top, 3 * guess + 12.0 / n_int)
    if power_paired_exact(n_int, psi_noise, hi, alpha, mid_p) < power:
        lo, hi = hi, top
        if power_paired_exact(n_int, psi_noise, hi, alpha, mid_p) < power:
            return float("inf")
    while hi - lo > 1e-5 * max(hi, 1e-3):
        mid = (lo + hi) / 2
        if power_paired_exact(n_int, psi_noise, mid, alpha, mid_p) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def mde_t(se: float, df: float, alpha: float = ALPHA, power: float = 0.8) -> float:
    """MDE of a two-sided t-test on an estimate with standard error ``se`` and ``df`` degrees of freedom:
    (t_{1-α/2} + t_{power})·SE (the usual approximation to the noncentral t)."""
    return float((t_ppf(1 - alpha / 2, df) + t_ppf(power, df)) * se)
