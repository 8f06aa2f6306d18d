"""An independent generator of routing near-tie flips (not the simulator): per question, binomial counts of flipped
(token, layer) rows on each launch, for the size and power of the routing's launch-level test
(:func:`harness.stats.expert_sets.launch_test`)."""

from __future__ import annotations

import numpy as np

from harness.stats.kld_launches import launch_divergence_test
from harness.stats.verdict import ALPHA


def simulate_moved(rows: np.ndarray, n_ref: np.ndarray, rates: np.ndarray, shift: float,
                   rng: np.random.Generator) -> np.ndarray:
    """A generator of near-tie flips that is not the simulator: per question i of ``rows[i]`` routed rows, the
    reference launch flipped ``n_ref[i]`` of them; launch l flips each row with probability ``rates[l]``, XOR a
    build's own flip with probability ``shift``. A row moves (1 id) where exactly one of the reference and the
    launch flipped. Returns the mean ids moved per row, ``(launches, questions)``."""
    r = np.asarray(rows, dtype=np.int64)
    out = np.empty((len(rates), r.size))
    for j, rate in enumerate(np.asarray(rates, dtype=float)):
        q = rate * (1 - shift) + shift * (1 - rate)  # the launch's row flips: its own near ties XOR the build's
        both = rng.binomial(n_ref, q)
        only_launch = rng.binomial(r - n_ref, q)
        out[j] = ((n_ref - both) + only_launch) / np.maximum(r, 1)
    return out


def rejection_rate(rows: np.ndarray, launches_a: int, launches_b: int, rate: float, sd_log: float, shift: float,
                   experiments: int, seed: int = 0, alpha: float = ALPHA) -> float:
    """Share of simulated runs the launch-level test calls diverged: every launch's near-tie flip rate is ``rate``
    times a lognormal launch factor (sd ``sd_log``: launch noise that differs), B's launches also flip ``shift`` of
    the rows (0: the test's size)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(experiments):
        m = 1 + launches_a + launches_b
        rates = np.clip(rate * np.exp(rng.normal(0.0, sd_log, m)), 0.0, 0.5)
        n_ref = rng.binomial(np.asarray(rows, dtype=np.int64), rates[0])
        a = simulate_moved(rows, n_ref, rates[1:1 + launches_a], 0.0, rng)
        b = simulate_moved(rows, n_ref, rates[1 + launches_a:], shift, rng)
        # the per-question diagnostic is left out (it is the verdict itself with one launch a side)
        res = launch_divergence_test(a, b, rows, alpha=alpha, n_resamples=199, seed=rng, per_question=False)
        hits += res.verdict == "diverged"
    return hits / experiments
