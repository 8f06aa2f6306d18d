"""Seeding helper shared by the resampling functions."""

from __future__ import annotations

import numpy as np

SeedLike = int | np.random.Generator | None


def as_rng(seed: SeedLike) -> np.random.Generator:
    """A numpy Generator from an int seed, an existing Generator (used as is) or None (fresh entropy)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)
