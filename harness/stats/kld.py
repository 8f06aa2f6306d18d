"""Token-level divergence of two servers' next-token distributions, and its paired test against an A/A floor.

A server reports only its top-k, so per token both distributions are coarsened onto the same buckets: A's
top-k ids that B also reported and one tail bucket with the rest of the mass on each side. That KL is at most
the full-vocabulary KL (data-processing inequality): it can miss divergence in the tail, never invent it. The
per-question test of KLD_i(A‖B) - KLD_i(A‖A′) is a one-sided sign-flip; :mod:`.kld_launches` decides when
launches can be the unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .outcomes import DivergenceTest
from .resample import DEFAULT_MAX_ELEMS, SeedLike, as_rng, bca_interval, percentile_interval
from .signflip import signflip_weighted
from .verdict import ALPHA

#: KLD percentiles reported, as llama.cpp prints them (50 = median)
PERCENTILES = (99.9, 99.0, 95.0, 90.0, 50.0)
#: a tail mass below this counts as this (rounding noise of a sum of k float32 probabilities)
TAIL_FLOOR = 1e-6
#: a logprob of -inf (masked token) counts as this many nats, so one token's KL stays finite
MIN_LOGPROB = -100.0
#: padding id in top-k arrays (a server that returned fewer than k alternatives at a position)
PAD_ID = -1


# ------------------------------------------------------------------------------------------ per token
def align_to_reference(ref_ids: np.ndarray, cmp_ids: np.ndarray, cmp_logprobs: np.ndarray) -> np.ndarray:
    """The compared side's logprobs (from its own top-k, (T, k2)) of the reference's top-k ids (T, k); NaN
    where it did not report the id or the reference id is ``PAD_ID``."""
    ref_ids, cmp_ids = np.asarray(ref_ids), np.asarray(cmp_ids)
    cmp_logprobs = np.asarray(cmp_logprobs, dtype=float)
    if ref_ids.ndim != 2 or cmp_ids.shape != cmp_logprobs.shape or cmp_ids.shape[0] != ref_ids.shape[0]:
        raise ValueError(f"misaligned top-k arrays: {ref_ids.shape}, {cmp_ids.shape}, {cmp_logprobs.shape}")
    if cmp_ids.shape[1] == 0:
        return np.full(ref_ids.shape, np.nan)
    eq = (ref_ids[:, :, None] == cmp_ids[:, None, :]) & (ref_ids[:, :, None] != PAD_ID)
    hit = eq.any(axis=2)
    j = eq.argmax(axis=2)
    out = np.take_along_axis(cmp_logprobs, j, axis=1)
    out[~hit] = np.nan
    return out


def lumped_kl(ref_logprobs: np.ndarray, cmp_logprobs: np.ndarray) -> np.ndarray:
    """KL(P‖Q) per token (nats, >= 0) over the reference's top-k buckets plus one tail bucket:
    ``ref_logprobs`` (T, k) log P of the reference's top-k ids, ``cmp_logprobs`` log Q of the same ids, NaN
    where the compared side did not report one (then lumped into the tail on both sides)."""
    lp, lq = np.asarray(ref_logprobs, dtype=float), np.asarray(cmp_logprobs, dtype=float)
    if lp.shape != lq.shape or lp.ndim != 2:
        raise ValueError(f"ref and cmp logprobs must be (T, k) of one shape, got {lp.shape} and {lq.shape}")
    known = np.isfinite(lp) & ~np.isnan(lq)
    lp_k, lq_k = np.where(known, lp, 0.0), np.where(known, np.maximum(lq, MIN_LOGPROB), 0.0)
    p, q = np.where(known, np.exp(lp_k), 0.0), np.where(known, np.exp(lq_k), 0.0)
    head = np.sum(p * (lp_k - lq_k), axis=1)
    p_tail, q_tail = np.maximum(1.0 - p.sum(axis=1), TAIL_FLOOR), np.maximum(1.0 - q.sum(axis=1), TAIL_FLOOR)
    tail = p_tail * (np.log(p_tail) - np.log(q_tail))
    # both tails at the floor: rounding noise on both sides, no contribution
    tail = np.where((p_tail <= TAIL_FLOOR) & (q_tail <= TAIL_FLOOR), 0.0, tail)
    return np.maximum(head + tail, 0.0)


def token_kl(ref_ids: np.ndarray, ref_logprobs: np.ndarray, cmp_ids: np.ndarray, cmp_logprobs: np.ndarray,
             cmp_on_ref: np.ndarray | None = None) -> np.ndarray:
    """Per-token lumped KL(ref‖cmp) from both sides' top-k lists; ``cmp_on_ref`` (T, k): the compared server's
    logprobs of exactly the reference's ids (NaN where missing), used where given."""
    aligned = align_to_reference(ref_ids, cmp_ids, cmp_logprobs)
    if cmp_on_ref is not None:
        cor = np.asarray(cmp_on_ref, dtype=float)
        aligned = np.where(np.isnan(cor), aligned, cor)
    lp = np.where(np.asarray(ref_ids) == PAD_ID, -np.inf, np.asarray(ref_logprobs, dtype=float))
    return lumped_kl(lp, aligned)


def top_id(ids: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
    """The argmax id of each row's top-k list (padding ignored); ``PAD_ID`` for an empty row."""
    ids = np.asarray(ids)
    lps = np.where(ids == PAD_ID, -np.inf, np.nan_to_num(np.asarray(logprobs, dtype=float), nan=-np.inf))
    if ids.shape[1] == 0:
        return np.full(ids.shape[0], PAD_ID, dtype=ids.dtype)
    j = lps.argmax(axis=1)
    out = ids[np.arange(ids.shape[0]), j]
    return np.where(np.isfinite(lps.max(axis=1)), out, PAD_ID)


def same_top(ref_ids: np.ndarray, ref_logprobs: np.ndarray, cmp_ids: np.ndarray,
             cmp_logprobs: np.ndarray) -> np.ndarray:
    """Per token: both sides' most likely id is the same (bool, shape (T,)); False when either is empty."""
    a, b = top_id(ref_ids, ref_logprobs), top_id(cmp_ids, cmp_logprobs)
    return (a == b) & (a != PAD_ID)


# ------------------------------------------------------------------------------------------ aggregation
def segment_means(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Means of ``values`` over the segments ``[offsets[i], offsets[i+1])`` (NaN for an empty segment)."""
    values, offsets = np.asarray(values, dtype=float), np.asarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != values.size \
            or np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must run non-decreasing from 0 to len(values)")
    counts = np.diff(offsets)
    out = np.full(counts.shape, np.nan)
    nz = counts > 0
    if nz.any():   # between two non-empty segments only empty ones: reduceat's implicit ends are exact
        out[nz] = np.add.reduceat(values, offsets[:-1][nz]) / counts[nz]
    return out


def kld_percentiles(kl: np.ndarray, percentiles: Sequence[float] = PERCENTILES) -> dict[str, float | None]:
    """{"99.9": x, "99": x, ..., "50": median} of per-token KLD (None for no tokens)."""
    kl = np.asarray(kl, dtype=float)
    keys = [f"{p:g}" for p in percentiles]
    if kl.size == 0:
        return dict.fromkeys(keys)
    vals = np.percentile(kl, list(percentiles))
    return {k: float(v) for k, v in zip(keys, vals, strict=True)}


def rms(x: np.ndarray) -> float | None:
    """Root mean square over the finite values (a token may have no logprob: NaN); None if none."""
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    return float(np.sqrt(np.mean(x**2))) if x.size else None


def first_divergence(a: Sequence[Any] | str, b: Sequence[Any] | str) -> int | None:
    """Index of the first element where two sequences (token ids, or characters) differ; None when equal."""
    n = min(len(a), len(b))
    if isinstance(a, str) and isinstance(b, str):
        if a == b:
            return None
        lo, hi = 0, n    # binary search on prefix equality: O(n) compares in C, not a Python loop per char
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if a[:mid] == b[:mid]:
                lo = mid
            else:
                hi = mid - 1
        return lo
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    ne = np.flatnonzero(x != y)
    if ne.size:
        return int(ne[0])
    return None if len(a) == len(b) else n


def char_to_token(char_index: int | None, text_offsets: np.ndarray | None) -> int | None:
    """The token (index into ``text_offsets``, each token's start offset in the text) holding a character."""
    if char_index is None or text_offsets is None or len(text_offsets) == 0:
        return None
    return max(0, int(np.searchsorted(np.asarray(text_offsets), char_index, side="right")) - 1)


def first_argmax_miss(ref_token_ids: np.ndarray, cmp_top: np.ndarray) -> int | None:
    """First position where the compared server's argmax is not the reference token, else None."""
    miss = np.flatnonzero(np.asarray(cmp_top) != np.asarray(ref_token_ids))
    return int(miss[0]) if miss.size else None


# ------------------------------------------------------------------------------------------ test
def weighted_mean_ci(d: np.ndarray, weights: np.ndarray | None = None, alpha: float = ALPHA,
                     n_resamples: int = 10_000, method: str = "bca", seed: SeedLike = None,
                     max_elems: int = DEFAULT_MAX_ELEMS) -> tuple[float, float]:
    """(1 - α) question-level bootstrap interval of Σ w d / Σ w (the ratio re-formed in each resample),
    ``percentile`` or ``bca``."""
    d = np.asarray(d, dtype=float)
    n = d.size
    if n < 2:
        raise ValueError("a bootstrap interval needs at least two questions")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    rng = as_rng(seed)
    chunk = max(1, min(n_resamples, max_elems // n))
    theta = np.empty(n_resamples)
    wd = w * d
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        theta[start:start + m] = wd[idx].sum(axis=1) / w[idx].sum(axis=1)
    if method == "percentile":
        return percentile_interval(theta, alpha)
    if method == "bca":
        sw, swd = w.sum(), wd.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            jack = (swd - wd) / (sw - w)
        jack = np.where(np.isfinite(jack), jack, swd / sw)
        return bca_interval(theta, swd / sw, jack, alpha)
    raise ValueError(f"unknown bootstrap method {method!r} (percentile or bca)")


def weighted_mean_se(d: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Linearised (ratio-estimator) standard error of Σ w d / Σ w with questions as the unit."""
    d = np.asarray(d, dtype=float)
    n = d.size
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if n < 2:
        return float("nan")
    m = np.sum(w * d) / np.sum(w)
    u = w * (d - m) / np.mean(w)
    return float(np.sqrt(np.var(u, ddof=1) / n))


def divergence_test(kld_ab: np.ndarray, kld_aa: np.ndarray, tokens: np.ndarray | None = None,
                    alpha: float = ALPHA, n_resamples: int = 9_999, seed: SeedLike = None,
                    ci_method: str = "bca", power: float = 0.8) -> DivergenceTest:
    """The paired test of per-question KLD(A‖B) against the A/A floor KLD(A‖A'), weighted by ``tokens`` per
    question; the effect Σ w d / Σ w with its interval, SE and MDE at ``power``."""
    kld_ab, kld_aa = np.asarray(kld_ab, dtype=float), np.asarray(kld_aa, dtype=float)
    if kld_ab.shape != kld_aa.shape or kld_ab.ndim != 1:
        raise ValueError(f"per-question KLDs must be 1-D of one shape, got {kld_ab.shape} and {kld_aa.shape}")
    if np.isnan(kld_ab).any() or np.isnan(kld_aa).any():
        raise ValueError("per-question KLD holds NaN: drop questions without tokens first")
    d = kld_ab - kld_aa
    rng = as_rng(seed)
    seeds = rng.integers(0, 2**32, size=2)
    test = signflip_weighted(d, tokens, n_resamples, seed=int(seeds[0]))
    effect = test.statistic
    ci = weighted_mean_ci(d, tokens, alpha, n_resamples, ci_method, seed=int(seeds[1])) if d.size > 1 else None
    se = weighted_mean_se(d, tokens)
    from scipy.special import ndtri  # here: scipy costs a quarter second to import, and only this needs it

    mde = float((ndtri(1 - alpha) + ndtri(power)) * se) if np.isfinite(se) else None
    diverged = test.p < alpha and effect > 0
    return DivergenceTest(
        test="one-sided sign-flip randomisation test of the token-weighted mean of d_i", p=test.p,
        p_floor=test.p_floor, p_at_floor=test.at_floor, effect=effect,
        effect_ci=None if ci is None else [float(ci[0]), float(ci[1])],
        effect_ci_method=f"question-level bootstrap, {ci_method}", effect_se=se, effect_mde=mde,
        n_resamples=n_resamples, verdict="diverged" if diverged else "indistinguishable", alpha=alpha,
        questions=int(d.size))
