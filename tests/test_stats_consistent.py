"""harness.stats.consistent: "p < α" and "0 outside the interval" never disagree, exhaustively over small
tables and for repeats; the parts match their references (binomial mid-p, Tango); exact operating
characteristics by enumeration."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import indep_generator as G
from helpers.vectorised_stats import consistent_table
from scipy.stats import binom

from harness.stats import compare_arms, signflip_test
from harness.stats import consistent as C
from harness.stats.launches import ArmRuns, question_means
from harness.stats.tango import score_interval, score_p


def grid(max_n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bs, cs, ns = [], [], []
    for n in range(1, max_n + 1):
        b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        m = b + c <= n
        bs.append(b[m])
        cs.append(c[m])
        ns.append(np.full(int(m.sum()), n))
    return np.concatenate(bs), np.concatenate(cs), np.concatenate(ns)


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1])
def test_exhaustive_grid_p_and_interval_never_disagree(alpha: float):
    """Every table (b, c) with b + c <= n <= 60 (39,711 tables)."""
    b, c, n = grid(60)
    r = consistent_table(b, c, n, alpha)
    outside = (r["lo"] > 0) | (r["hi"] < 0)
    assert np.array_equal(outside, r["p"] < alpha)
    assert np.all(r["lo"] <= r["hi"]) and np.all(r["lo"] >= -1) and np.all(r["hi"] <= 1)
    # the parts: mid-p McNemar = 2 (P(X < k) + P(X = k) / 2), k = min(b, c), X ~ Bin(b + c, 1/2), capped
    k, m = np.minimum(b, c), b + c
    ref = np.where(m == 0, 1.0, np.minimum(1.0, 2 * (binom.cdf(k - 1, m, 0.5) + 0.5 * binom.pmf(k, m, 0.5))))
    assert np.allclose(r["p_signflip"], ref, rtol=1e-9, atol=1e-12)
    assert np.allclose(r["p_score"], score_p(b, c, n, 0.0))
    assert np.allclose(r["p"], np.maximum(r["p_signflip"], r["p_score"]))
    # the interval is Tango's, extended to 0 exactly where the sign-flip test does not reject
    lo_t, hi_t = score_interval(b, c, n, alpha)
    ext = r["p_signflip"] >= alpha
    assert np.allclose(r["lo"][~ext & ~r["nudged"]], lo_t[~ext & ~r["nudged"]])
    assert np.allclose(r["lo"][ext], np.minimum(lo_t[ext], 0.0)) and np.allclose(r["hi"][ext], np.maximum(hi_t[ext], 0.0))
    # one run per arm: wherever the mid-p test rejects, Tango's does too, so the decision is the mid-p test's
    assert np.array_equal(r["significant"], r["p_signflip"] < alpha)


@pytest.mark.slow
def test_exhaustive_grid_to_120():
    b, c, n = grid(120)
    for alpha in (0.01, 0.05, 0.1):
        r = consistent_table(b, c, n, alpha)
        assert np.array_equal((r["lo"] > 0) | (r["hi"] < 0), r["p"] < alpha)
        assert np.array_equal(r["significant"], r["p_signflip"] < alpha)


def test_the_mid_p_p_and_tangos_interval_disagree_on_some_tables():
    """What the consistent form fixes: the mid-p p and Tango's interval disagree on some tables."""
    b, c, n = grid(60)
    lo, hi = score_interval(b, c, n, 0.05)
    p = consistent_table(b, c, n, 0.05)["p_signflip"]
    assert np.sum(((lo > 0) | (hi < 0)) != (p < 0.05)) > 0


def test_repeats_fractional_d_never_disagree():
    rng = np.random.default_rng(1)
    for _ in range(150):
        n = int(rng.integers(3, 80))
        R = int(rng.integers(1, 4))
        pa = rng.uniform(0, 1, n)
        pb = np.clip(pa + rng.normal(0.1, 0.2, n), 0, 1)
        runs = tuple(f"run{i}" for i in range(R))  # a launch per run
        a = ArmRuns((rng.random((R, n)) < pa).astype(float), runs)
        b = ArmRuns((rng.random((R, n)) < pb).astype(float), runs)
        d = question_means(b) - question_means(a)
        for alpha in (0.05, 0.1):
            r = C.consistent_paired(d, alpha)
            assert (r.p < alpha) == (r.ci[0] > 0 or r.ci[1] < 0) == r.significant
            assert r.p_signflip == pytest.approx(signflip_test(d).p)
            assert r.ci[0] <= r.ci_tango[0] + 1e-15 and r.ci[1] >= r.ci_tango[1] - 1e-15


def test_degenerate_inputs():
    r = C.consistent_paired(np.zeros(10))
    assert r.p == 1.0 and r.ci[0] < 0 < r.ci[1] and not r.significant
    r = C.consistent_paired(np.array([1 / 3, 2 / 3 - 1 / 3, 1 - 2 / 3]))   # issue 25 item 6: no crash
    assert not r.significant and r.ci[1] > r.ci[0] and r.table["deff"] == 1.0
    r = C.consistent_paired(np.ones(30))
    assert r.significant and r.ci[0] > 0


def exact_operating(n: int, psi: float, delta: float, alpha: float = 0.05) -> dict[str, float]:
    """Exact rejection rates (two-sided, at α) and coverage of Δ for one run per arm: the table is
    multinomial with P(only A right) = (ψ - Δ)/2, P(only B right) = (ψ + Δ)/2; sums over every (b, c).

    Returns the rejection rates of the mid-p sign-flip (McNemar) test, Tango's score test and the combined
    test, and the coverage of ``delta`` by Tango's interval and by the combined one. At Δ = 0 the rejection
    rates are the sizes."""
    if not 0 <= psi <= 1 or abs(delta) > psi:
        raise ValueError("need 0 <= |delta| <= psi <= 1")
    m = np.arange(n + 1)
    pm = binom.pmf(m, n, psi)
    keep = pm > 1e-15
    bs, cs, ws = [], [], []
    share = 0.5 if psi == 0 else (psi + delta) / (2 * psi)
    for mm, w in zip(m[keep], pm[keep], strict=True):
        c = np.arange(mm + 1)
        bs.append(mm - c)
        cs.append(c)
        ws.append(w * binom.pmf(c, mm, share))
    b, c, w = np.concatenate(bs), np.concatenate(cs), np.concatenate(ws)
    r = consistent_table(b, c, np.full(b.shape, n), alpha)
    return {
        "reject_signflip": float(np.sum(w * (r["p_signflip"] < alpha))),
        "reject_score": float(np.sum(w * (r["p_score"] < alpha))),
        "reject_combined": float(np.sum(w * r["significant"])),
        "coverage_tango": float(np.sum(w * ((r["lo_tango"] <= delta) & (delta <= r["hi_tango"])))),
        "coverage_combined": float(np.sum(w * ((r["lo"] <= delta) & (delta <= r["hi"])))),
        "mass": float(np.sum(w)),
    }


def test_exact_operating_characteristics():
    """Size by enumeration: the combined test never rejects more than either part; at one run per arm it
    is the mid-p test; coverage of the combined interval is at least Tango's."""
    for n, psi in ((50, 0.1), (200, 0.05), (200, 0.3)):
        r0 = exact_operating(n, psi, 0.0)
        assert r0["mass"] == pytest.approx(1.0, abs=1e-9)
        assert r0["reject_combined"] <= min(r0["reject_signflip"], r0["reject_score"]) + 1e-12
        assert r0["reject_combined"] == pytest.approx(r0["reject_signflip"])
        assert r0["coverage_combined"] >= r0["coverage_tango"] - 1e-12
        assert r0["reject_combined"] <= 0.05
        r1 = exact_operating(n, psi, min(psi, 0.04))
        assert r1["coverage_combined"] >= r1["coverage_tango"] - 1e-12
    # against a brute-force sum over the multinomial at n = 12
    n, psi, delta = 12, 0.4, 0.1
    pb, pc = (psi - delta) / 2, (psi + delta) / 2
    tot = 0.0
    from scipy.stats import multinomial
    for b in range(n + 1):
        for c in range(n + 1 - b):
            pr = multinomial.pmf([b, c, n - b - c], n, [pb, pc, 1 - psi])
            tot += pr * (consistent_table(b, c, n)["p_signflip"] < 0.05)
    assert exact_operating(n, psi, delta)["reject_signflip"] == pytest.approx(float(tot), abs=1e-9)


def test_audit_case_n200_delta5_quick():
    """The audit's case (n = 200, Δ = +5 pp; 3 launches per arm, 150 experiments), through compare_arms: its p
    and interval never disagree."""
    s = G.AccuracyScenario(n=200, difficulty="logitnormal", delta=0.05, launches_aa=0)
    r = G.accuracy_rates(s, 150, seed=3)
    assert r["disagree"].k == 0 and r["fallback"].k == 0


@pytest.mark.slow  # a simulation
def test_one_run_per_arm_compare_arms_disagreements_are_what_is_fixed():
    """One run per arm (no launch replication): compare_arms' test is the consistent one, so its p and
    interval never disagree; the mid-p test's p with Tango's interval (the pair the verdict used before) did.
    Its decision is the mid-p test's (the quoted p is the larger of the two)."""
    rng = np.random.default_rng(4)
    before = new = 0
    for _ in range(300):
        n = 200
        pa = rng.beta(0.6, 0.3, n)
        a = (rng.random(n) < pa).astype(float)
        b = np.where(rng.random(n) < 0.1, 1.0, (rng.random(n) < pa).astype(float))
        r = compare_arms(ArmRuns(a, ("a",)), ArmRuns(b, ("b",)), compute_mde=False).analysis
        c = C.consistent_paired(b - a)
        assert r.unit == "question" and r.p == pytest.approx(c.p) and r.ci == pytest.approx(list(c.ci))
        new += (r.p < 0.05) != (r.ci[0] > 0 or r.ci[1] < 0)
        before += (c.p_signflip < 0.05) != (c.ci_tango[0] > 0 or c.ci_tango[1] < 0)
        assert c.significant == (c.p_signflip < 0.05)
    assert new == 0
    print(f"one run per arm, 300 experiments: mid-p p vs Tango CI {before} disagreements, compare_arms {new}")
