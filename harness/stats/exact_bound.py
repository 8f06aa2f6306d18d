"""The exact one-sided upper bound on a rate from k events in n trials (Clopper-Pearson).

What a no-op proof can claim: with k of n questions answered differently, the per-question difference rate p
is at most the bound at confidence 1 - alpha, the largest p under which seeing k or fewer is still at least
alpha likely: P(X <= k | n, p) = alpha, i.e. the (1 - alpha) quantile of Beta(k + 1, n - k). For k = 0 that is
1 - alpha^(1/n) (0 of 1319 at 95 %: 0.227 %); for k = n it is 1. Exact, so it never claims more than the data.
"""

from __future__ import annotations

from scipy.special import betaincinv


def upper_bound(k: int, n: int, alpha: float = 0.05) -> float:
    """The one-sided (1 - alpha) Clopper-Pearson upper bound of a rate from ``k`` events in ``n`` trials."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, not k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), not {alpha}")
    if k == n:
        return 1.0
    return float(betaincinv(k + 1, n - k, 1 - alpha))
