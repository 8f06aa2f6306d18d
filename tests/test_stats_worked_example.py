"""The brief's worked example (the seed's numbers): 1247 vs 1251 correct of 1319, b = 10, c = 14."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import textbook_stats as TS

from harness import stats as S
from harness.analysis.planning import power_figures
from harness.stats.mde import mde_paired_exact, z_sum
from harness.stats.tango import score_interval

N = 1319


def test_unpaired_interval():
    lo, hi = S.unpaired_diff_ci(1247, N, 1251, N)
    assert round(100 * lo, 1) == -1.4
    assert round(100 * hi, 1) == 2.0


def test_exact_mcnemar_and_paired_se():
    assert float(S.mcnemar_exact(10, 14)) == pytest.approx(0.54, abs=0.005)
    assert 100 * float(TS.paired_se(10, 14, N)) == pytest.approx(0.37, abs=0.005)
    assert float(S.mcnemar_midp(10, 14)) < float(S.mcnemar_exact(10, 14))


def test_mde_and_repeats():
    assert z_sum() == pytest.approx(2.8016, abs=1e-4)
    p = (1247 + 1251) / (2 * N)
    assert 100 * S.mde_unpaired(N, p) == pytest.approx(2.5, abs=0.1)
    assert round(100 * S.mde_paired(N, 0.02), 1) == 1.1
    assert S.repeats_needed(4 / N, N, 0.02) == 13
    f = power_figures(N, p, discordance=0.02, repeats=13, effect=4 / N)
    assert f["repeats_needed"] == 13
    assert f["mde_repeats"] <= 4 / N


def test_table_level_results_from_vectors():
    """The same numbers from per-question vectors: table, Δ, intervals bracket Δ, tests agree."""
    a = np.r_[np.ones(1237), np.ones(10), np.zeros(14), np.zeros(58)].astype(bool)
    b = np.r_[np.ones(1237), np.zeros(10), np.ones(14), np.zeros(58)].astype(bool)
    t = S.paired_table(a, b)
    assert (t.both, t.a_only, t.b_only, t.neither) == (1237, 10, 14, 58)
    assert (t.both + t.a_only, t.both + t.b_only) == (1247, 1251)
    assert t.delta == pytest.approx(4 / N)
    lo, hi = S.paired_bootstrap_ci(a, b, seed=0)
    assert lo < 0 < hi and hi - lo == pytest.approx(2 * 1.96 * 0.0037, rel=0.2)
    nlo, nhi = TS.newcombe_paired_ci(t.both, t.a_only, t.b_only, t.neither)
    assert nlo < 0 < nhi
    d = b.astype(float) - a.astype(float)
    assert S.signflip_test(d, mid_p=False).p == pytest.approx(0.5413, abs=1e-4)   # the exact McNemar p
    assert S.signflip_test(d).p == pytest.approx(float(S.mcnemar_midp(10, 14)))    # the verdict's mid-p
    lo, hi = score_interval(10, 14, N)
    assert lo < 0 < hi and mde_paired_exact(N, 20 / N) == pytest.approx(0.0127, abs=2e-4)
