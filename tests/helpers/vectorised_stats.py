"""Forms of the product's statistics that only the exhaustive checks and the calibrations call: the
question-level decision over arrays of whole-count tables, and the two-level bootstrap of Δ alone (the same
draws as :func:`harness.stats.repeats.launch_bootstrap`'s, without the arms' intervals)."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.stats.consistent import _combine
from harness.stats.launches import ArmRuns, question_means
from harness.stats.paired import mcnemar_midp
from harness.stats.repeats import _configuration_deviations, _delta_interval
from harness.stats.resample import SeedLike, as_rng
from harness.stats.tango import score_interval, score_p
from harness.stats.verdict import ALPHA


def consistent_table(b: Any, c: Any, n: Any, alpha: float = ALPHA) -> dict[str, np.ndarray]:
    """The question-level decision for one run per arm from whole counts, vectorised over tables (``b``
    questions only A answered right, ``c`` only B, ``n`` questions): the sign-flip test is then the mid-p
    McNemar test. Returns arrays ``p``, ``p_signflip``, ``p_score``, ``lo``, ``hi``, ``lo_tango``,
    ``hi_tango``, ``significant``, ``extended``, ``nudged``."""
    b, c, n = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (b, c, n)))
    p_sf = np.asarray(mcnemar_midp(b.astype(np.int64), c.astype(np.int64)), dtype=float)
    p_sc = np.asarray(score_p(b, c, n, 0.0), dtype=float)
    lo, hi = score_interval(b, c, n, alpha)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    p, lo2, hi2, sig, ext, nud = _combine((c - b) / n, p_sf, p_sc, lo, hi, alpha)
    return {"p": p, "p_signflip": p_sf, "p_score": p_sc, "lo": lo2, "hi": hi2, "lo_tango": lo, "hi_tango": hi,
            "significant": sig, "extended": ext, "nudged": nud}


def launch_bootstrap_delta(a: ArmRuns, b: ArmRuns, aa: ArmRuns | None, keep: np.ndarray, df: float,
                           alpha: float = ALPHA, n_resamples: int = 10_000,
                           seed: SeedLike = None) -> tuple[float, float] | None:
    """:func:`harness.stats.repeats.launch_bootstrap`'s interval of Δ alone."""
    keep = np.asarray(keep, dtype=bool)
    _, dev_a, dev_b = _configuration_deviations(a, b, aa, keep)
    if dev_a is None and dev_b is None:
        return None
    return _delta_interval(question_means(a)[keep], question_means(b)[keep], dev_a, dev_b, len(a.launch_ids()),
                           len(b.launch_ids()), df, alpha, n_resamples, as_rng(seed))
