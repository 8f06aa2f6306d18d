"""Adjustment of p-values across the comparisons of one sweep."""

from __future__ import annotations

import numpy as np


def holm(pvalues: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values (controls the family-wise error rate)."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def benjamini_hochberg(pvalues: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg step-up adjusted p-values (controls the false discovery rate)."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    adj = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def adjust(pvalues: np.ndarray, method: str = "holm") -> np.ndarray:
    """Adjusted p-values by ``method``: ``holm`` or ``bh`` (Benjamini-Hochberg)."""
    if method == "holm":
        return holm(pvalues)
    if method in ("bh", "fdr_bh", "benjamini-hochberg"):
        return benjamini_hochberg(pvalues)
    raise ValueError(f"unknown adjustment {method!r} (holm or bh)")
