"""Adjustment of p-values across the comparisons of one sweep."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _adjusted(pvalues: np.ndarray, step: Callable[[np.ndarray, int], np.ndarray]) -> np.ndarray:
    """``step`` applied to the p-values in ascending order (and ``m``), capped at 1, in the input's order."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    out = np.empty(m)
    out[order] = np.minimum(step(p[order], m), 1.0)
    return out


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (controls the family-wise error rate)."""
    return _adjusted(pvalues, lambda s, m: np.maximum.accumulate((m - np.arange(m)) * s))


def benjamini_hochberg(pvalues: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg step-up adjusted p-values (controls the false discovery rate)."""
    return _adjusted(pvalues, lambda s, m: np.minimum.accumulate((s * m / np.arange(1, m + 1))[::-1])[::-1])


def adjust(pvalues: np.ndarray, method: str = "holm") -> np.ndarray:
    """Adjusted p-values by ``method``: ``holm`` or ``bh`` (Benjamini-Hochberg)."""
    if method == "holm":
        return holm(pvalues)
    if method in ("bh", "fdr_bh", "benjamini-hochberg"):
        return benjamini_hochberg(pvalues)
    raise ValueError(f"unknown adjustment {method!r} (holm or bh)")
