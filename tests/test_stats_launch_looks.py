"""harness.stats.launch_looks: the t-to-z transform against scipy, the look decisions (the repeated interval
excludes 0 exactly when the look stops for efficacy), degenerate looks, and the false-positive rate under
launch shifts (independent generator)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import indep_generator as G
from helpers import question_looks as QL
from scipy import stats as ss

from harness.stats import group_sequential as sq
from harness.stats import launch_looks as SL
from harness.stats.launchvar import LaunchAwareResult


def test_t_to_z_transform_matches_scipy():
    for df in (1.5, 2, 4, 10, 60):
        for t in (-5.0, -1.2, 0.0, 0.7, 3.0, 12.0):
            z = SL.z_equivalent(t, df)
            assert ss.norm.sf(abs(z)) == pytest.approx(ss.t.sf(abs(t), df), rel=1e-9) and np.sign(z) == np.sign(t)
        for c in (1.96, 2.5, 4.0):
            tb = SL.t_bound(c, df)
            assert tb == pytest.approx(ss.t.isf(ss.norm.sf(c), df), rel=1e-9)
            assert SL.z_equivalent(tb, df) == pytest.approx(c, rel=1e-9)
    assert SL.t_bound(sq.Z_MAX, 4) == math.inf
    assert SL.z_equivalent(2.0, math.inf) == 2.0


def est(delta: float, se: float, df: float, df_launch: int = 4) -> LaunchAwareResult:
    return LaunchAwareResult(delta, se, df, delta / se, 0.5, (0.0, 0.0), 0.05, False, 1319, 3, 3, 0, 2 / 3,
                             se**2, 0.0, se**2, se**2, 0.0, df_launch, "test", "test", None, None)


def test_look_decisions_and_repeated_interval():
    d = sq.SequentialDesign(max_repeats=6, min_repeats=2)
    for k in range(2, 7):
        for delta in np.linspace(-0.05, 0.05, 41):
            dec = SL.decide_launch_look(d, k, est(float(delta), 0.01, 2.0 * (k - 1)))
            tb = dec.details["bound_t"]
            assert dec.bound == pytest.approx(d.bound_at(k))
            if dec.repeated_ci is not None and math.isfinite(tb):
                assert dec.repeated_ci == pytest.approx([delta - tb * 0.01, delta + tb * 0.01])
                excludes = dec.repeated_ci[0] > 0 or dec.repeated_ci[1] < 0
                assert excludes == (dec.reason == "efficacy")
            assert dec.details["p"] == pytest.approx(2 * ss.t.sf(abs(delta) / 0.01, 2.0 * (k - 1)))
            if k == 6:
                assert dec.stop
    # no launch replication: no stop before the last look
    dec = SL.decide_launch_look(d, 2, est(0.2, 0.01, math.inf, df_launch=0))
    assert not dec.stop and dec.reason == "no_launch_replication"
    assert SL.decide_launch_look(d, 6, est(0.2, 0.01, math.inf, df_launch=0)).verdict == "inconclusive"
    assert SL.decide_launch_look(d, 1, est(0.2, 0.01, 4)).reason == "before_min_repeats"


def test_with_infinite_df_it_is_the_question_level_decision():
    """A launch-aware estimate whose df is huge decides as decide_look does on the same (Δ, SE)."""
    d = sq.SequentialDesign(max_repeats=5, min_repeats=1)
    for k in range(1, 6):
        for delta in (-0.03, -0.01, 0.0, 0.012, 0.04):
            a = SL.decide_launch_look(d, k, est(delta, 0.01, 1e9))
            b = QL.decide_look(d, k, delta, 0.01, 1319)
            assert (a.stop, a.verdict) == (b.stop, b.verdict) or b.reason == "futility" or a.reason == "futility"


def test_margin_designs():
    d = sq.SequentialDesign(max_repeats=4, min_repeats=2, hypothesis="noninferiority", margin=0.01)
    dec = SL.decide_launch_look(d, 3, est(0.0, 0.002, 30))
    assert dec.stop and dec.verdict == "noninferior"
    d = sq.SequentialDesign(max_repeats=4, min_repeats=2, hypothesis="equivalence", margin=0.01)
    assert SL.decide_launch_look(d, 3, est(0.0, 0.002, 30)).verdict == "equivalent"
    assert not SL.decide_launch_look(d, 3, est(0.0, 0.02, 30)).stop


@pytest.mark.slow  # a simulation of thousands of experiments: the slow suite (.ci/run runs it)
def test_sequential_false_positives_under_launch_shift_quick():
    """Fresh launch per repeat, max 6 repeats, launch shift N(0, 0.1): 400 experiments through Looks;
    the question-level looks 12-13 % in the audit; these at most 6 % + 3 MC SEs."""
    s = G.AccuracyScenario(shift="normal", shift_sd=0.1)
    r = G.sequential_rates(s, 400, seed=11)
    print({k: getattr(v, "rate", v) for k, v in r.items()})
    assert r["reject"].rate <= 0.06 + 3 * math.sqrt(0.06 * 0.94 / 400)  # type: ignore[union-attr]
