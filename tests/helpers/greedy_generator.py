"""A second independent generator of A/B runs: greedy (temperature-0) answers that flip at heavy-tailed
per-question rates, and launch-wide shifts on the log-odds scale.

Deliberately neither :mod:`abh_simulator` nor :mod:`helpers.score_simulator` nor
``tests/helpers/indep_generator.py`` (which draws every answer afresh from a per-launch probability): here an
answer is the *greedy* answer of the question unless it flips.

**Model.** Question i has log-odds difficulty θ_i ~ N(m, 1.6²) (m set so the mean accuracy is ``accuracy``)
and a greedy latent z_i ~ Logistic(0, 1), fixed for the experiment and shared by both arms (the same model
answers the same question the same way). A launch l of configuration g draws a launch-wide shift u_gl
(``shift="t3"``: sd·T₃/√3, ``"normal"``: N(0, sd²), ``"none"``: 0; ``b_shift_sd`` gives B's launches their own
sd). Its greedy answer to question i is 1{θ_i + δ_gi + u_gl + z_i > 0}: a shift moves every question near
the threshold. Each question flips at its own rate r_i = min(0.5, r_0 · Pareto(1.2)) (heavy-tailed: most
questions never flip, a few flip often): with probability r_i a launch's answer is redrawn as
Bernoulli(σ(θ_i + δ_gi + u_gl)), and each further pass of the launch redraws it with probability r_i / 2
(numerics that differ per launch, a little per pass). B's effect: ``delta`` > 0 makes B always right on
round(delta·n) questions drawn from those whose greedy answer is wrong (< 0: always wrong on as many right
ones); the true Δ is 0 under the null.

Vectorised over experiments: :func:`draw` returns arrays ``(E, launches x passes, n)`` for the arms A, A/A
and B; :func:`arm_runs` turns one experiment into the library's :class:`~harness.stats.launches.ArmRuns`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from scipy.special import expit

from harness.stats.launches import ArmRuns

THETA_SD = 1.6
FLIP_BASE = 0.01
FLIP_TAIL = 1.2


@dataclass(frozen=True)
class Design:
    n: int = 1319
    accuracy: float = 0.9
    launches_a: int = 3
    launches_b: int = 3
    launches_aa: int = 2
    passes: int = 1
    shift: str = "none"
    shift_sd: float = 0.15
    #: B's launches' shift sd (None: the same as A's)
    b_shift_sd: float | None = None
    delta: float = 0.0
    flip_base: float = FLIP_BASE

    def with_(self, **kw: object) -> Design:
        return replace(self, **kw)  # type: ignore[arg-type]


def _mean_offset(accuracy: float) -> float:
    """m with E σ(m + 1.6 Z) = accuracy (bisection on a fixed quadrature)."""
    z = np.linspace(-6, 6, 2001)
    w = np.exp(-z**2 / 2)
    w /= w.sum()
    lo, hi = -10.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(np.sum(w * expit(mid + THETA_SD * z))) < accuracy else (lo, mid)
    return (lo + hi) / 2


def _shifts(kind: str, sd: float, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    if kind == "none" or sd == 0:
        return np.zeros(shape)
    if kind == "normal":
        return rng.normal(0.0, sd, shape)
    if kind == "t3":
        return sd * rng.standard_t(3, shape) / np.sqrt(3.0)
    raise ValueError(f"unknown shift {kind!r}")


def draw(d: Design, experiments: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores ``(E, runs, n)`` of arm A, the A/A control and arm B (runs = launches x passes, launch-major)."""
    e, n = experiments, d.n
    m = _mean_offset(d.accuracy)
    theta = m + THETA_SD * rng.standard_normal((e, n))
    z = rng.logistic(0.0, 1.0, (e, n))
    rate = np.minimum(0.5, d.flip_base * rng.pareto(FLIP_TAIL, (e, n)))
    delta_b = np.zeros((e, n))
    if d.delta != 0:
        k = int(round(abs(d.delta) * n))
        wrong = (theta + z <= 0) if d.delta > 0 else (theta + z > 0)
        # k of the questions on the effect's side, at random (ranked by a uniform key)
        key = np.where(wrong, rng.random((e, n)), 2.0)
        pick = np.argsort(key, axis=1)[:, :k]
        np.put_along_axis(delta_b, pick, 50.0 if d.delta > 0 else -50.0, axis=1)
    sd_b = d.shift_sd if d.b_shift_sd is None else d.b_shift_sd
    la = d.launches_a + d.launches_aa
    u_a = _shifts(d.shift, d.shift_sd, rng, (e, la))
    u_b = _shifts(d.shift, sd_b, rng, (e, d.launches_b))
    ya = _launches(theta, z, np.zeros((e, n)), u_a, rate, d.passes, rng)
    yb = _launches(theta, z, delta_b, u_b, rate, d.passes, rng)
    cut = d.launches_a * d.passes
    return ya[:, :cut], ya[:, cut:], yb


def _launches(theta: np.ndarray, z: np.ndarray, delta: np.ndarray, u: np.ndarray, rate: np.ndarray,
              passes: int, rng: np.random.Generator) -> np.ndarray:
    """(E, L * passes, n) 0/1 answers of L launches (see the module docstring)."""
    e, n = theta.shape
    L = u.shape[1]
    logit = theta[:, None, :] + delta[:, None, :] + u[:, :, None]          # (E, L, n)
    greedy = (logit + z[:, None, :]) > 0
    redraw = rng.random((e, L, n)) < expit(logit)
    flip = rng.random((e, L, n)) < rate[:, None, :]
    launch = np.where(flip, redraw, greedy)
    out = np.empty((e, L, passes, n), dtype=np.float64)
    out[:, :, 0] = launch
    for p in range(1, passes):
        again = rng.random((e, L, n)) < expit(logit)
        pflip = rng.random((e, L, n)) < rate[:, None, :] / 2
        out[:, :, p] = np.where(pflip, again, launch)
    return out.reshape(e, L * passes, n)


def arm_runs(y: np.ndarray, launches: int, passes: int, prefix: str) -> ArmRuns | None:
    """One experiment's ``(runs, n)`` scores as ArmRuns (None when it has no runs)."""
    if launches == 0:
        return None
    return ArmRuns(y, tuple(f"{prefix}{lo}" for lo in range(launches) for _ in range(passes)))


def launch_accuracy_variance(d: Design, sd: float | None = None, questions: int = 200_000, seed: int = 0) -> float:
    """The population variance of a launch's accuracy shift, Var_u A(u), A(u) the expected accuracy of a
    launch with shift u (over questions, their greedy latents and flips), u drawn as ``d.shift`` with sd
    ``sd`` (default ``d.shift_sd``): 200,000 questions, u on a quadrature grid weighted by its density."""
    return launch_accuracy_moments(d, sd, questions, seed)[1]


def true_null_delta(d: Design, questions: int = 200_000) -> float:
    """The configurations' true Δ with no effect: E_u A(u) of B's launches minus A's (not 0 when B's launches
    shift by a larger sd: a shift on the log-odds moves the expected accuracy, -0.16 pp at sd 0.3 vs 0.05)."""
    if d.b_shift_sd is None:
        return 0.0
    return (launch_accuracy_moments(d, d.b_shift_sd, questions)[0]
            - launch_accuracy_moments(d, d.shift_sd, questions)[0])


def launch_accuracy_moments(d: Design, sd: float | None = None, questions: int = 200_000,
                            seed: int = 0) -> tuple[float, float]:
    """(E_u A(u), Var_u A(u)): see :func:`launch_accuracy_variance`."""
    sd = d.shift_sd if sd is None else sd
    if d.shift == "none" or sd == 0:
        sd = 0.0
    rng = np.random.default_rng(seed)
    theta = _mean_offset(d.accuracy) + THETA_SD * rng.standard_normal(questions)
    z = rng.logistic(0.0, 1.0, questions)
    rate = np.minimum(0.5, d.flip_base * rng.pareto(FLIP_TAIL, questions))
    x = theta + z
    # expected accuracy at shift u: greedy unless flipped, a redraw when flipped
    if sd == 0:
        return float(np.mean((1 - rate) * (x > 0) + rate * expit(theta))), 0.0
    grid = np.linspace(-12 * sd, 12 * sd, 961)
    acc = np.array([np.mean((1 - rate) * (x + u > 0) + rate * expit(theta + u)) for u in grid])
    if d.shift == "normal":
        w = np.exp(-0.5 * (grid / sd) ** 2)
    else:   # sd T3 / sqrt(3): scale s = sd / sqrt(3), density ∝ (1 + (u/s)² / 3)^-2
        s = sd / np.sqrt(3.0)
        w = (1 + (grid / s) ** 2 / 3) ** -2
    w /= w.sum()
    mean = float(np.sum(w * acc))
    return mean, float(np.sum(w * (acc - mean) ** 2))
