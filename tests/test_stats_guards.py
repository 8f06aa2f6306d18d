"""harness.stats.guards: the crash cases of issue 25 item 6 (a design effect of ~1e-32 from round-off, a
zero-width score interval, OverflowError in the exact MDE) reproduced on the raw functions and absent from
the guarded ones; the guards change nothing on ordinary inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.stats import guards as GD
from harness.stats.launches import ArmRuns, question_means
from harness.stats.tango import effective_table, score_interval

#: every d_i = 1/3, computed from different arm means (1/3 - 0, 2/3 - 1/3, 1 - 2/3): round-off variance
THIRDS = np.array([1 / 3, 2 / 3 - 1 / 3, 1 - 2 / 3])


def thirds_arms() -> tuple[ArmRuns, ArmRuns]:
    a = ArmRuns(np.array([[0, 1, 1], [0, 0, 1], [0, 0, 0]], float), ("a1", "a2", "a3"))
    b = ArmRuns(np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1]], float), ("b1", "b2", "b3"))
    return a, b


def test_the_crash_case_is_round_off_in_the_raw_design_effect():
    a, b = thirds_arms()
    d = question_means(b) - question_means(a)
    assert np.allclose(d, 1 / 3) and not np.all(d == d[0])        # equal up to round-off only
    raw = effective_table(d)
    assert raw["deff"] < 1e-20 and raw["n"] > 1e20                 # the raw table: ~6e32 questions
    lo, hi = score_interval(raw["b"], raw["c"], raw["n"])
    assert float(hi) - float(lo) < 1e-12                           # zero width
    from harness.stats.mde import mde_paired_exact
    with pytest.raises(OverflowError):                             # power.py critical_counts: int64 overflow
        mde_paired_exact(raw["n"], 0.0)


def test_guarded_design_effect_and_table():
    g = GD.design_effect(THIRDS)
    assert g.guarded and g.deff == 1.0 and g.deff_raw < 1e-20 and g.lattice == 3
    t = GD.robust_effective_table(THIRDS)
    assert t["n"] == pytest.approx(3.0) and t["c"] == pytest.approx(1.0) and t["deff_guarded"] == 1.0
    lo, hi = score_interval(t["b"], t["c"], t["n"])
    assert math.isfinite(lo) and math.isfinite(hi) and hi > lo and float(lo) < 0 < float(hi)
    assert GD.safe_mde_paired_exact(t["n"], 0.0) == math.inf       # 3 questions cannot reach 80 % power
    assert math.isfinite(GD.safe_mde_paired_exact(6.5e32, 0.0))    # no OverflowError
    assert GD.safe_mde_paired_exact(float("nan"), 0.1) == math.inf
    # many questions all moved by the same fraction: the same guard
    d = np.concatenate([THIRDS] * 400)
    assert GD.design_effect(d).deff == 1.0


def test_floor_is_one_over_the_lattice():
    """d_i on the 1/4 lattice with a variance far below the single-run table's: deff floored at 1/4."""
    d = np.full(200, 0.25)
    d[0] = 0.5
    g = GD.design_effect(d, variance=1e-9)
    assert g.lattice == 4 and g.floor == 0.25 and g.deff == 0.25 and g.guarded
    off = GD.design_effect(np.array([0.1234567, 0.2, 0.3]), variance=1e-8)
    assert off.lattice is None and off.deff == GD.FLOOR_OFF_LATTICE


def test_guards_change_nothing_on_ordinary_inputs():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n, R = int(rng.integers(5, 300)), int(rng.integers(1, 5))
        p = rng.uniform(0, 1, n)
        a = (rng.random((R, n)) < p).mean(axis=0)
        b = (rng.random((R, n)) < p).mean(axis=0)
        d = b - a
        ref, new = effective_table(d), GD.robust_effective_table(d)
        if GD.design_effect(d).guarded:
            continue
        for k in ("b", "c", "n", "deff"):
            assert new[k] == pytest.approx(ref[k], rel=1e-12)
    from harness.stats.mde import mde_paired_exact
    assert GD.safe_mde_paired_exact(1319, 0.04) == pytest.approx(mde_paired_exact(1319, 0.04))


def test_the_crash_case_through_compare_arms():
    """The audit's crash (n = 3, every d_i = 1/3 as a difference of means over 3 runs): compare_arms' verdict has a
    finite interval of positive width and an MDE (inf: 3 questions cannot detect anything), no OverflowError, on one
    launch per arm (the question-level test) and on three launches per arm (the launch-aware test)."""
    from harness.stats import ArmRuns, compare_arms

    a = np.array([[0, 1, 1], [0, 0, 1], [0, 0, 0]], float)     # question means 0, 1/3, 2/3
    b = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1]], float)     # 1/3, 2/3, 1
    for launches in (("x",) * 3, ("x", "y", "z")):
        r = compare_arms(ArmRuns(a, launches), ArmRuns(b, tuple(f"b{v}" for v in launches)), margin=0.05)
        lo, hi = r.analysis.ci
        assert np.isfinite([lo, hi]).all() and hi > lo and r.analysis.mde is not None and r.analysis.mde > 0
        assert r.verdict.word == "inconclusive"
