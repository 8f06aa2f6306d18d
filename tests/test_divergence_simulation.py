"""Calibration of the divergence test by simulation, at the numpy level.

A synthetic model: per question a reference text of 4..20 tokens over a 48-id vocabulary; each token has
base logits (peaked, like an LLM's greedy choice). A server pass adds to the base logits
- its build's perturbation ``shift * N(0, 1)`` per (token, id), fixed per build (0 for arm A);
- per-launch noise ``sigma_launch * N(0, 1)`` per (token, id), drawn once per server launch;
- per-pass noise ``sigma_pass * N(0, 1)`` per (token, id), drawn for every pass;
and reports its top-k (k = 10) and the reference token's logprob. The pipeline under test is the library's:
``token_kl`` -> ``segment_means`` -> ``divergence_test``.

Design "fresh launch" (the correct A/A when B is another launch): A, A' and B on three launches. Design
"same launch" (A' a second pass of A's process while B is another launch) is shown to be wrong under launch
noise. A launch-level random noise *scale* (shared by all questions of a launch) breaks the question-level
independence the test rests on; its effect is printed, not hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from scipy.special import log_softmax

from harness.stats import kld as dv

ALPHA = 0.05
K = 10
V = 48


@dataclass
class World:
    base: np.ndarray       # (N, V) logits
    ref: np.ndarray        # (N,) reference token (argmax of base)
    offsets: np.ndarray    # (Q + 1,)
    build_b: np.ndarray    # (N, V) build B's perturbation direction


def world(seed: int, questions: int = 150) -> World:
    rng = np.random.default_rng(seed)
    lens = rng.integers(4, 21, questions)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    n = int(offsets[-1])
    base = rng.normal(0, 1.5, (n, V))
    top = rng.integers(0, V, n)
    base[np.arange(n), top] += rng.uniform(1.0, 7.0, n)   # p(top) from ~0.3 to ~1
    return World(base, base.argmax(axis=1), offsets, rng.standard_normal((n, V)))


def score(w: World, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A server's report: top-k ids, their logprobs, the reference token's logprob."""
    lp = log_softmax(logits, axis=1)
    ids = np.argpartition(-lp, K - 1, axis=1)[:, :K]
    lps = np.take_along_axis(lp, ids, axis=1)
    return ids.astype(np.int32), lps, lp[np.arange(lp.shape[0]), w.ref]


def experiment(w: World, rng: np.random.Generator, *, shift: float, sigma_launch: float, sigma_pass: float,
               design: str = "fresh_launch", launch_scale_sd: float = 0.0,
               n_resamples: int = 999) -> dict:
    shape = w.base.shape

    def normal() -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32)

    if design == "fresh_launch" and not launch_scale_sd:
        # three launches of a fixed noise scale: each pass's launch + pass noise is one normal field
        sd = float(np.hypot(sigma_launch, sigma_pass))
        a, b, a2 = (score(w, w.base + build * w.build_b + sd * normal()) for build in (0.0, shift, 0.0))
    else:
        def launch() -> np.ndarray:
            scale = sigma_launch * (np.exp(rng.normal(0, launch_scale_sd)) if launch_scale_sd else 1.0)
            return scale * normal()

        la, lb = launch(), launch()
        la2 = launch() if design == "fresh_launch" else la
        a, b, a2 = (score(w, w.base + build * w.build_b + lf + sigma_pass * normal())
                    for lf, build in ((la, 0.0), (lb, shift), (la2, 0.0)))
    kq_ab = dv.segment_means(dv.token_kl(a[0], a[1], b[0], b[1]), w.offsets)
    kq_aa = dv.segment_means(dv.token_kl(a[0], a[1], a2[0], a2[1]), w.offsets)
    return dv.divergence_test(kq_ab, kq_aa, np.diff(w.offsets), alpha=ALPHA, n_resamples=n_resamples,
                              seed=rng, ci_method="percentile")


def rejection_rate(exps: int, seed: int, **kw: float | str) -> float:
    w = world(seed)
    rng = np.random.default_rng(seed + 1)
    rej = sum(experiment(w, rng, **kw).verdict == "diverged" for _ in range(exps))
    return rej / exps


NOISE = {"sigma_launch": 0.02, "sigma_pass": 0.02}


# ------------------------------------------------------------------------------ quick (default run)
@pytest.mark.slow  # a simulation of thousands of experiments: the slow suite (.ci/run runs it)
def test_false_positive_rate_under_pass_and_launch_noise_quick():
    exps = 300
    fpr = rejection_rate(exps, 100, shift=0.0, **NOISE)
    se = np.sqrt(ALPHA * (1 - ALPHA) / exps)
    print(f"FPR (fresh-launch A/A, pass + launch noise, {exps} experiments): {fpr:.4f}")
    assert abs(fpr - ALPHA) <= 3 * se


def test_logit_shift_0_3_diverges_and_0_is_indistinguishable():
    w = world(200)
    rng = np.random.default_rng(201)
    r = experiment(w, rng, shift=0.3, **NOISE)
    assert r.verdict == "diverged" and r.p_at_floor and r.effect_ci[0] > 0
    r0 = experiment(w, rng, shift=0.0, sigma_launch=0.0, sigma_pass=0.0)   # deterministic identical builds
    assert r0.verdict == "indistinguishable" and r0.effect == 0.0 and r0.p == 1.0


def test_same_launch_floor_mistakes_launch_noise_for_divergence():
    """Why the A/A floor must be a fresh launch when B is another launch."""
    fpr = rejection_rate(40, 300, shift=0.0, design="same_launch", **NOISE)
    print(f"FPR with A' a second pass of A's launch: {fpr:.3f}")
    assert fpr > 0.5


# ------------------------------------------------------------------------------ heavy calibration
@pytest.mark.slow
def test_false_positive_rate_calibration():
    exps = 4000
    fprs = {}
    for name, kw in {"pass noise only": {"sigma_launch": 0.0, "sigma_pass": 0.03},
                     "pass + launch noise": NOISE,
                     "launch noise only": {"sigma_launch": 0.03, "sigma_pass": 0.0}}.items():
        fprs[name] = rejection_rate(exps, 400, shift=0.0, **kw)
    for name, f in fprs.items():
        print(f"FPR {name:22s} {f:.4f}  ({exps} experiments)")
    for f in fprs.values():
        assert abs(f - ALPHA) <= 0.015


@pytest.mark.slow
def test_power_against_shift():
    exps = 400
    shifts = [0.005, 0.01, 0.015, 0.02, 0.03, 0.05]
    power = [rejection_rate(exps, 500, shift=s, **NOISE) for s in shifts]
    for s, p in zip(shifts, power, strict=True):
        print(f"power at logit shift {s:<6g} {p:.3f}")
    assert power[-1] >= 0.99
    assert all(b >= a - 0.05 for a, b in zip(power, power[1:], strict=False))   # non-decreasing within MC noise


@pytest.mark.slow
def test_launch_scale_variability_is_reported():
    """A per-launch random noise SCALE is shared by all questions of a launch: questions are then not
    independent given A's pass, and one A/A launch cannot calibrate it. The inflation is printed."""
    exps = 1000
    fpr = rejection_rate(exps, 600, shift=0.0, launch_scale_sd=0.3, **NOISE)
    print(f"FPR with a launch-level noise scale (lognormal sd 0.3): {fpr:.4f}")
    assert fpr > ALPHA + 0.015    # documented limitation: more A/A launches are needed
