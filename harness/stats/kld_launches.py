"""Divergence of B from A with launches as the unit.

A noise *scale* fixed per launch moves every KLD_i of a launch alike, which the per-question test of
:mod:`.kld` sees as divergence (35-45 % false positives with one A/A launch). Per launch one number, its
token-weighted mean KLD against A's reference pass; a one-sided pooled t-test of log K (a scale is additive on
the log scale), the exact permutation p beside it. With one launch on each side the per-question test decides.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
from scipy.special import nctdtr

from harness.stats.roots import brentq

from .dist import t_ppf, t_sf
from .kld import divergence_test
from .outcomes import LaunchDivergence
from .resample import SeedLike
from .verdict import ALPHA

#: a launch mean KLD below this (nats/token) counts as this on the log scale (bit-identical launches)
KLD_FLOOR = 1e-12
#: the exact permutation p is enumerated up to this many arrangements of the launch labels
MAX_ARRANGEMENTS = 200_000
METHOD_T = "one-sided t-test of log mean KLD over launches (B's launches vs A's other launches)"
METHOD_QUESTION = "one-sided sign-flip test over questions (one A/A launch, one B launch)"
QUALIFICATION_ONE_EACH = ("one A/A launch and one B launch: the test assumes the noise scale is the same on "
                          "every launch (a launch-wide noise scale shows up as divergence); score the reference on "
                          "more launches of A and B to test at the launch level")
QUALIFICATION_ONE_A = ("one launch of A besides the reference: the launch-to-launch variance is estimated from B's "
                       "launches only (exchangeable with A's under H0)")
QUALIFICATION_ONE_B = ("one launch of B: the test compares a single launch with A's and leans on log K being normal "
                       "across launches (7 % false positives at a lognormal noise-scale sd of 0.3 with 4 A launches); "
                       "score the reference on two or more launches of B")


def launch_means(kld: np.ndarray, tokens: np.ndarray | None = None) -> np.ndarray:
    """Token-weighted mean over questions of each launch's per-question KLD ``(m, n)`` -> ``(m,)``."""
    k = np.atleast_2d(np.asarray(kld, dtype=float))
    w = np.ones(k.shape[1]) if tokens is None else np.asarray(tokens, dtype=float)
    if w.shape != (k.shape[1],) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError("tokens must be non-negative weights, one per question")
    return (k @ w) / w.sum()


def pooled_t(x_b: np.ndarray, x_a: np.ndarray) -> tuple[float, float, float]:
    """(t, df, se) of mean(x_b) - mean(x_a), pooled (Student) variance, df = m_A + m_B - 2 (>= 1)."""
    ma, mb = x_a.size, x_b.size
    df = ma + mb - 2
    ss = float(np.sum((x_a - x_a.mean()) ** 2) + np.sum((x_b - x_b.mean()) ** 2))
    se = math.sqrt(ss / df * (1 / ma + 1 / mb)) if df > 0 else math.nan
    diff = float(x_b.mean() - x_a.mean())
    if not se > 0:
        return (0.0 if diff == 0 else math.copysign(math.inf, diff)), float(df), 0.0
    return diff / se, float(df), se


def permutation_p(x_b: np.ndarray, x_a: np.ndarray) -> tuple[float | None, int | None]:
    """Exact one-sided permutation p of mean(x_b) - mean(x_a) over every assignment of the B labels (the
    observed one included), or (None, None) past :data:`MAX_ARRANGEMENTS`."""
    x = np.concatenate([x_b, x_a])
    m, mb = x.size, x_b.size
    count = math.comb(m, mb)
    if count > MAX_ARRANGEMENTS:
        return None, None
    idx = np.array(list(combinations(range(m), mb)), dtype=np.int64)
    sb = x[idx].sum(axis=1)
    stat = sb / mb - (x.sum() - sb) / (m - mb)
    obs = float(x_b.mean() - x_a.mean())
    tol = 1e-12 * max(1.0, float(np.abs(x).max()))
    return float(np.mean(stat >= obs - tol)), count


def launch_divergence_test(kld_a: np.ndarray, kld_b: np.ndarray, tokens: np.ndarray | None = None, *,
                           alpha: float = ALPHA, n_resamples: int = 9_999, seed: SeedLike = 0,
                           per_question: bool = True) -> LaunchDivergence:
    """B's launches (``kld_b``, ``(m_B, n)`` per-question KLD against the reference) against A's other
    launches (``kld_a``, ``(m_A, n)``), questions weighted by ``tokens``. ``per_question``: also run the
    per-question diagnostic (always run when m_A = m_B = 1, where it is the verdict)."""
    ka, kb = np.atleast_2d(np.asarray(kld_a, dtype=float)), np.atleast_2d(np.asarray(kld_b, dtype=float))
    if ka.shape[1] != kb.shape[1] or ka.shape[0] < 1 or kb.shape[0] < 1:
        raise ValueError(f"per-launch KLDs must be (m, n) over the same questions, got {ka.shape} and {kb.shape}")
    if np.isnan(ka).any() or np.isnan(kb).any():
        raise ValueError("per-question KLD holds NaN: keep the questions every launch scored")
    ma, mb = ka.shape[0], kb.shape[0]
    la, lb = launch_means(ka, tokens), launch_means(kb, tokens)
    xa, xb = np.log(np.maximum(la, KLD_FLOOR)), np.log(np.maximum(lb, KLD_FLOOR))
    ratio, effect = float(math.exp(xb.mean() - xa.mean())), float(lb.mean() - la.mean())
    pq = None
    if per_question or (ma == 1 and mb == 1):
        pq = divergence_test(kb.mean(axis=0), ka.mean(axis=0), tokens, alpha=alpha, n_resamples=n_resamples,
                             seed=seed, ci_method="percentile")
    if ma == 1 and mb == 1:
        assert pq is not None
        p = float(pq.p)
        return LaunchDivergence(
            verdict="diverged" if p < alpha and effect > 0 else "indistinguishable", method=METHOD_QUESTION, p=p,
            alpha=alpha, launches_a=1, launches_b=1, kld_launch_a=tuple(la.tolist()), kld_launch_b=tuple(lb.tolist()),
            ratio=ratio, ratio_ci=None, effect=effect, t=None, df=None, p_permutation=None, arrangements=None,
            qualification=QUALIFICATION_ONE_EACH, per_question=pq)
    t, df, se = pooled_t(xb, xa)
    if math.isinf(t):
        p = 0.0 if t > 0 else 1.0
    elif se == 0:   # every launch mean equal: nothing to see
        p = 1.0
    else:
        p = float(t_sf(t, df))
    if se > 0:
        q = float(t_ppf(1 - alpha / 2, df))
        diff = float(xb.mean() - xa.mean())
        ratio_ci: tuple[float, float] | None = (math.exp(diff - q * se), math.exp(diff + q * se))
    else:
        ratio_ci = (ratio, ratio)
    p_perm, count = permutation_p(xb, xa)
    verdict = "diverged" if p < alpha and ratio > 1 else "indistinguishable"
    return LaunchDivergence(
        verdict=verdict, method=METHOD_T, p=p, alpha=alpha, launches_a=ma, launches_b=mb,
        kld_launch_a=tuple(la.tolist()), kld_launch_b=tuple(lb.tolist()), ratio=ratio, ratio_ci=ratio_ci,
        effect=effect, t=t, df=df, p_permutation=p_perm, arrangements=count,
        qualification=QUALIFICATION_ONE_A if ma == 1 else QUALIFICATION_ONE_B if mb == 1 else None, per_question=pq)


def launch_power(ratio: float, sd_log: float, launches_a: int, launches_b: int, alpha: float = ALPHA) -> float:
    """Power of the launch-level test when B's launches have ``ratio`` times A's mean KLD (geometric) and log
    K varies with sd ``sd_log``: noncentral t, ncp = log(ratio) / (sd_log sqrt(1/m_A + 1/m_B))."""
    df = launches_a + launches_b - 2
    if df < 1 or ratio <= 0 or not sd_log > 0:
        raise ValueError("need m_A + m_B >= 3, a positive ratio and a positive sd")
    ncp = math.log(ratio) / (sd_log * math.sqrt(1 / launches_a + 1 / launches_b))
    crit = float(t_ppf(1 - alpha, df))
    power = float(1 - nctdtr(df, ncp, crit))
    if not math.isfinite(power):  # nctdtr gives NaN far in the tail (ncp of tens): the test then surely decides
        return 1.0 if ncp > crit else 0.0
    return power


def launches_needed(ratio: float, sd_log: float, launches_b: int, power: float = 0.8, alpha: float = ALPHA,
                    most: int = 64) -> int | None:
    """Fewest A launches (besides the reference's) for ``power`` at ``ratio``; None beyond ``most``."""
    for m in range(1, most + 1):
        if m + launches_b >= 3 and launch_power(ratio, sd_log, m, launches_b, alpha) >= power:
            return m
    return None


def mde_ratio(sd_log: float, launches_a: int, launches_b: int, alpha: float = ALPHA, power: float = 0.8) -> float | None:
    """The smallest KLD ratio B/A the launch-level test detects with ``power`` (inverts :func:`launch_power`);
    None when it cannot be planned (fewer than 3 launches, a zero or non-finite sd)."""
    if launches_a + launches_b < 3 or not (math.isfinite(sd_log) and sd_log > 0):
        return None
    f = lambda x: launch_power(math.exp(x), sd_log, launches_a, launches_b, alpha) - power  # noqa: E731
    hi = 1.0
    while f(hi) < 0 and hi < 60:
        hi *= 2
    return float(math.exp(brentq(f, 0.0, hi, xtol=1e-10))) if f(hi) >= 0 else None


def pooled_sd_log(kld_launch_a: np.ndarray, kld_launch_b: np.ndarray) -> float:
    """Pooled within-side sd of log launch-mean KLD (NaN with fewer than 3 launches)."""
    xa = np.log(np.maximum(np.asarray(kld_launch_a, dtype=float), KLD_FLOOR))
    xb = np.log(np.maximum(np.asarray(kld_launch_b, dtype=float), KLD_FLOOR))
    df = xa.size + xb.size - 2
    if df < 1:
        return math.nan
    return math.sqrt(float(np.sum((xa - xa.mean()) ** 2) + np.sum((xb - xb.mean()) ** 2)) / df)
