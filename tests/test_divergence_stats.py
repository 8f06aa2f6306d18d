"""harness.stats.kld against independent references: scipy.special.rel_entr on hand-built buckets,
closed forms for hand cases, scipy.stats.permutation_test (sign flips) and scipy.stats.bootstrap."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_softmax, rel_entr
from scipy.stats import bootstrap, permutation_test

from harness.stats import kld as dv
from harness.stats.signflip import signflip_weighted


def dists(rng: np.random.Generator, n: int, v: int, peak: float = 3.0) -> np.ndarray:
    """n random next-token distributions over v ids (log-probabilities), moderately peaked."""
    z = rng.normal(0, 1.5, (n, v))
    z[np.arange(n), rng.integers(0, v, n)] += peak
    return log_softmax(z, axis=1)


def topk(lp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.argsort(-lp, axis=1)[:, :k]
    return ids.astype(np.int32), np.take_along_axis(lp, ids, axis=1)


def bucket_kl(p: np.ndarray, q: np.ndarray, bucket_ids: list[int]) -> float:
    """Reference: KL of the coarsened distributions, built by hand with rel_entr."""
    pb = [p[i] for i in bucket_ids] + [1 - sum(p[i] for i in bucket_ids)]
    qb = [q[i] for i in bucket_ids] + [1 - sum(q[i] for i in bucket_ids)]
    return float(rel_entr(pb, qb).sum())


# ------------------------------------------------------------------------------ KL with a tail bucket
def test_hand_case_all_ids_known_closed_form():
    lp = np.log([[0.5, 0.3]])           # tail 0.2
    lq = np.log([[0.4, 0.4]])           # tail 0.2
    want = 0.5 * np.log(0.5 / 0.4) + 0.3 * np.log(0.3 / 0.4) + 0.2 * np.log(0.2 / 0.2)
    assert dv.lumped_kl(lp, lq)[0] == pytest.approx(want, rel=1e-12)


def test_hand_case_b_missing_one_of_a_ids_goes_to_the_tail_on_both_sides():
    lp = np.log([[0.5, 0.3]])
    lq = np.array([[np.log(0.4), np.nan]])   # B did not report id 2 -> buckets {id1}, tail
    want = 0.5 * np.log(0.5 / 0.4) + 0.5 * np.log(0.5 / 0.6)
    assert dv.lumped_kl(lp, lq)[0] == pytest.approx(want, rel=1e-12)


def test_hand_case_b_reports_none_of_a_ids_gives_zero():
    lp = np.log([[0.6, 0.3]])
    lq = np.full((1, 2), np.nan)
    assert dv.lumped_kl(lp, lq)[0] == 0.0


def test_identical_top_k_gives_exactly_zero():
    rng = np.random.default_rng(1)
    ids, lps = topk(dists(rng, 50, 40), 10)
    assert np.all(dv.token_kl(ids, lps, ids, lps) == 0.0)
    assert np.all(dv.token_kl(ids, lps.astype(np.float32), ids, lps.astype(np.float32)) == 0.0)


@pytest.mark.parametrize("k", [5, 20])
def test_token_ids_logprob_case_matches_rel_entr(k):
    """Best case: B scored exactly A's top-k ids (SGLang token_ids_logprob)."""
    rng = np.random.default_rng(2)
    v = 60
    lp, lq = dists(rng, 40, v), dists(rng, 40, v)
    ids, lps = topk(lp, k)
    q_on_a = np.take_along_axis(lq, ids, axis=1)
    b_ids, b_lps = topk(lq, k)          # B's own top-k: ignored where q_on_a is given
    got = dv.token_kl(ids, lps, b_ids, b_lps, cmp_on_ref=q_on_a)
    want = [bucket_kl(np.exp(lp[t]), np.exp(lq[t]), list(ids[t])) for t in range(40)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_id_matching_case_matches_rel_entr_on_the_shared_ids():
    """B's own top-k only: buckets are A's ids that B also lists, in any order, the rest is the tail."""
    rng = np.random.default_rng(3)
    v, k = 30, 8
    lp = dists(rng, 60, v)
    lq = log_softmax(lp + rng.normal(0, 0.8, lp.shape), axis=1)   # related, so the top-k overlap partly
    ids, lps = topk(lp, k)
    b_ids, b_lps = topk(lq, k)
    perm = rng.permutation(k)
    got = dv.token_kl(ids, lps, b_ids[:, perm], b_lps[:, perm])
    want = [bucket_kl(np.exp(lp[t]), np.exp(lq[t]), [i for i in ids[t] if i in set(b_ids[t])])
            for t in range(60)]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    partial = [len(set(ids[t]) & set(b_ids[t])) for t in range(60)]
    assert min(partial) < k, "the case must include tokens where B misses some of A's ids"


def test_full_vocabulary_equals_full_kl_and_lumping_is_a_lower_bound():
    rng = np.random.default_rng(4)
    v = 25
    lp, lq = dists(rng, 100, v), dists(rng, 100, v)
    full = rel_entr(np.exp(lp), np.exp(lq)).sum(axis=1)
    ids, lps = topk(lp, v)
    q_on = np.take_along_axis(lq, ids, axis=1)
    np.testing.assert_allclose(dv.lumped_kl(lps, q_on), full, rtol=1e-9)
    for k in (1, 3, 10):
        ids, lps = topk(lp, k)
        lumped = dv.lumped_kl(lps, np.take_along_axis(lq, ids, axis=1))
        assert np.all(lumped <= full + 1e-12)
        assert np.all(lumped >= 0)


def test_minus_inf_and_padding_stay_finite_and_are_ignored():
    lp = np.array([[np.log(0.7), np.log(0.2), -np.inf]])       # third slot: padding
    lq = np.array([[np.log(0.7), -np.inf, np.log(0.05)]])      # B masked id 2
    got = dv.lumped_kl(lp, lq)[0]
    assert np.isfinite(got) and got > 1.0                      # 0.2 * (log 0.2 + 100) ~ 19.7
    ids = np.array([[3, 4, dv.PAD_ID]])
    got2 = dv.token_kl(ids, lp, np.array([[3, 4, 9]]), np.array([[np.log(0.7), np.log(0.2), np.log(0.05)]]))
    assert got2[0] == pytest.approx(0.0, abs=1e-15)            # the padded slot does not match id -1 ... or 9


def test_tail_floor_rounding_noise_contributes_nothing():
    # top-k covering all mass up to float32 rounding on both sides: the tails are noise, not divergence
    p = np.array([[0.6, 0.3, 0.1]], dtype=np.float32)
    lp = np.log(p).astype(np.float32)
    lq = (lp + np.float32(1e-7)).astype(np.float32)
    assert dv.lumped_kl(lp, lq)[0] < 1e-9


def test_align_to_reference_handles_order_extras_and_padding():
    ref = np.array([[5, 7, 9], [1, 2, dv.PAD_ID]])
    cmp_ids = np.array([[9, 5, 11], [dv.PAD_ID, 2, 3]])
    cmp_lps = np.array([[-1.0, -2.0, -3.0], [-9.0, -0.5, -0.7]])
    got = dv.align_to_reference(ref, cmp_ids, cmp_lps)
    np.testing.assert_array_equal(np.isnan(got), [[False, True, False], [True, False, True]])
    assert got[0, 0] == -2.0 and got[0, 2] == -1.0 and got[1, 1] == -0.5


def test_same_top_and_top_id():
    ids = np.array([[1, 2], [3, 4], [dv.PAD_ID, dv.PAD_ID]])
    lps = np.array([[-1.0, -0.1], [-0.2, -3.0], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(dv.top_id(ids, lps), [2, 3, dv.PAD_ID])
    b_ids = np.array([[2, 1], [4, 3], [dv.PAD_ID, dv.PAD_ID]])
    b_lps = np.array([[-0.3, -2.0], [-0.1, -2.0], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(dv.same_top(ids, lps, b_ids, b_lps), [True, False, False])


# ------------------------------------------------------------------------------ aggregation
def test_segment_means_against_a_loop_with_empty_segments():
    rng = np.random.default_rng(5)
    lens = rng.integers(0, 5, 40)
    lens[[0, -1]] = 0
    off = np.concatenate([[0], np.cumsum(lens)])
    x = rng.normal(size=off[-1])
    got = dv.segment_means(x, off)
    want = [x[off[i]:off[i + 1]].mean() if lens[i] else np.nan for i in range(40)]
    np.testing.assert_allclose(got, want)
    with pytest.raises(ValueError):
        dv.segment_means(x, np.r_[off, off[-1] + 1])


def test_percentiles_rms_and_first_divergence():
    x = np.random.default_rng(6).exponential(size=1000)
    got = dv.kld_percentiles(x)
    assert list(got) == ["99.9", "99", "95", "90", "50"]
    assert got["50"] == pytest.approx(np.median(x)) and got["99.9"] == pytest.approx(np.percentile(x, 99.9))
    assert dv.kld_percentiles(np.array([]))["50"] is None
    assert dv.rms(np.array([3.0, -4.0])) == pytest.approx(np.sqrt(12.5))
    assert dv.first_divergence("The answer is 42", "The answer is 41") == 15
    assert dv.first_divergence("abc", "abc") is None
    assert dv.first_divergence("abc", "abcd") == 3
    assert dv.first_divergence("", "x") == 0
    assert dv.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert dv.first_divergence(np.array([1, 2, 3]), np.array([1, 5, 3])) == 1
    offsets = np.array([0, 3, 7, 12])     # tokens "The", " answer", " is 4", "2"...
    assert dv.char_to_token(0, offsets) == 0
    assert dv.char_to_token(8, offsets) == 2
    assert dv.char_to_token(12, offsets) == 3
    assert dv.char_to_token(None, offsets) is None
    assert dv.first_argmax_miss(np.array([4, 5, 6]), np.array([4, 5, 7])) == 2
    assert dv.first_argmax_miss(np.array([4, 5]), np.array([4, 5])) is None


# ------------------------------------------------------------------------------ the test
def test_sign_flip_p_matches_scipy_exact_sign_flip():
    rng = np.random.default_rng(7)
    d = rng.normal(0.3, 1.0, 12)
    ref = permutation_test((d,), lambda x, axis=-1: np.mean(x, axis=axis), permutation_type="samples",
                           alternative="greater", n_resamples=np.inf).pvalue   # exact: all 2^12 flips
    R = 40_000
    got = signflip_weighted(d, n_resamples=R, seed=1).p
    assert abs(got - ref) < 4 * np.sqrt(ref * (1 - ref) / R)


def test_weighted_sign_flip_matches_scipy_with_a_weighted_statistic():
    rng = np.random.default_rng(8)
    d = rng.normal(0.2, 1.0, 11)
    w = rng.integers(5, 300, 11).astype(float)
    ref = permutation_test((d,), lambda x, axis=-1: np.sum(w * x, axis=axis) / w.sum(),
                           permutation_type="samples", alternative="greater", n_resamples=np.inf).pvalue
    R = 40_000
    got = signflip_weighted(d, w, n_resamples=R, seed=2)
    assert abs(got.p - ref) < 4 * np.sqrt(ref * (1 - ref) / R)
    assert got.statistic == pytest.approx(np.sum(w * d) / w.sum())


def test_sign_flip_edge_cases():
    assert signflip_weighted(np.zeros(50), n_resamples=999, seed=0).p == 1.0
    r = signflip_weighted(np.full(30, 0.01), n_resamples=999, seed=0)
    assert r.p == pytest.approx(1 / 1000)      # at the floor: 2^-30 is far below 1/(R+1)
    with pytest.raises(ValueError):
        signflip_weighted(np.array([]))
    with pytest.raises(ValueError):
        signflip_weighted(np.ones(3), np.array([1.0, -1.0, 1.0]))


def test_weighted_mean_ci_matches_scipy_bootstrap():
    rng = np.random.default_rng(9)
    d = rng.gamma(2.0, 0.01, 300) - 0.01
    w = rng.integers(20, 300, 300).astype(float)

    def ratio(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.sum(a, axis=axis) / np.sum(b, axis=axis)

    for method, sp in (("percentile", "percentile"), ("bca", "BCa")):
        ours = dv.weighted_mean_ci(d, w, 0.05, 20_000, method, seed=3)
        ref = bootstrap((w * d, w), ratio, paired=True, vectorized=True, n_resamples=20_000, method=sp,
                        rng=np.random.default_rng(4)).confidence_interval
        width = ref.high - ref.low
        assert ours[0] == pytest.approx(ref.low, abs=0.05 * width)
        assert ours[1] == pytest.approx(ref.high, abs=0.05 * width)


def test_weighted_mean_se_matches_the_bootstrap_sd():
    rng = np.random.default_rng(10)
    d = rng.normal(0.001, 0.01, 500)
    w = rng.integers(20, 300, 500).astype(float)
    idx = rng.integers(0, 500, (20_000, 500))
    boot_sd = np.std((w * d)[idx].sum(1) / w[idx].sum(1))
    assert dv.weighted_mean_se(d, w) == pytest.approx(boot_sd, rel=0.05)


def test_divergence_test_verdicts():
    rng = np.random.default_rng(11)
    base = rng.gamma(2.0, 0.001, 400)
    tokens = rng.integers(50, 300, 400)
    same = dv.divergence_test(base, base.copy(), tokens, seed=0, n_resamples=1999)
    assert same.verdict == "indistinguishable" and same.p == 1.0 and same.effect == 0.0
    shifted = dv.divergence_test(base + 0.02 + rng.normal(0, 0.002, 400), base, tokens, seed=0,
                                 n_resamples=1999)
    assert shifted.verdict == "diverged" and shifted.p_at_floor
    lo, hi = shifted.effect_ci
    assert lo < shifted.effect < hi and lo > 0.015 and hi < 0.025
    lower = dv.divergence_test(base, base + 0.02, tokens, seed=0, n_resamples=1999)   # B closer than A/A
    assert lower.verdict == "indistinguishable" and lower.effect < 0
    with pytest.raises(ValueError):
        dv.divergence_test(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
