"""Score matrices of the designs the harness can run, for calibrating the statistics (fast numpy, no HTTP).

Model (as the simulated engine, plus launch-wide shifts): question i has a latent solve probability
p_i = sigmoid(a - z_i), z_i ~ Normal(0, 3), with a set for the target accuracy; arm A's base outcome is
Bernoulli(p_i), drawn afresh per experiment (questions are a sample). Arm B equals A except that, for an
effect Δ > 0, each question A gets wrong is fixed with probability Δ / (1 - accuracy) (Δ < 0: each right
one broken with probability |Δ| / accuracy), so the true difference is Δ.

Noise, as in the engine's ``flip_probabilities``: a launch flips its arm's base outcomes at rate
``flip_launch`` (two launches disagree on about that share), a pass flips its launch's outcomes at rate
``flip_pass``, both balanced at the arm's base accuracy so expected accuracy is unchanged; ``shift_sd`` adds a launch-wide accuracy
shift ~ Normal(0, shift_sd) per launch (wrong answers turned right, or right ones wrong, alike). Errors:
each (run, question) is missing with probability ``error_rate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.stats.launches import ArmRuns
from harness.stats.verdict import ALPHA

DIFFICULTY_SD = 3.0


@dataclass(frozen=True)
class SimDesign:
    """Launches per arm and passes per launch (each pass is one eval run)."""

    name: str
    launches: int
    passes: int

    @property
    def runs(self) -> int:
        return self.launches * self.passes


#: the designs ``abh run`` can produce with R repeats: one run per arm; both arms' repeats on one launch
#: each (concurrent servers, or blocked order reusing the server); a fresh launch per repeat (restart per
#: repeat, or interleaved order on one GPU)
def designs(repeats: int = 3) -> list[SimDesign]:
    return [SimDesign("single run", 1, 1), SimDesign(f"one launch x {repeats} passes", 1, repeats),
            SimDesign(f"{repeats} launches x 1 pass", repeats, 1)]


@dataclass(frozen=True)
class Noise:
    name: str
    flip_launch: float
    flip_pass: float
    shift_sd: float = 0.0


def noises(flip: float = 0.04) -> list[Noise]:
    """Run-to-run noise of the engine's ``noise=launch|pass|mixed`` with total A/A discordance ``flip``."""
    return [Noise("launch", flip, 0.0), Noise("pass", 0.0, flip), Noise("mixed", flip / 2, flip / 2)]


def solve_ability(accuracy: float, sd: float = DIFFICULTY_SD) -> float:
    """Ability a with E[sigmoid(a - z)] = accuracy for z ~ Normal(0, sd) (Gauss-Hermite, bisection)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    lo, hi = -30.0, 30.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if np.sum(w / (1 + np.exp(-(mid - sd * x)))) < accuracy:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _flip(y: np.ndarray, rate: float, rng: np.random.Generator, accuracy: float) -> np.ndarray:
    """Balanced flips at ``rate`` (the engine's flip_probabilities: f/(4a) right->wrong, f/(4(1-a)) up),
    with a the arm's expected accuracy. Rates taken from a realised accuracy (of the drawn questions, or
    of a launch) would tie every question's noise to that total: a dependence between questions, i.e. a
    launch-wide effect, that the model does not intend (it inflates Var Δ by about 5-10 %)."""
    if rate <= 0:
        return y
    acc = float(np.clip(accuracy, 1e-9, 1 - 1e-9))
    down, up = min(1.0, rate / (4 * acc)), min(1.0, rate / (4 * (1 - acc)))
    u = rng.random(y.shape)
    return np.where(y, u >= down, u < up)


def _shift(y: np.ndarray, s: float, rng: np.random.Generator) -> np.ndarray:
    if s == 0:
        return y
    acc = float(np.clip(y.mean(), 1e-9, 1 - 1e-9))
    u = rng.random(y.shape)
    return (y | (u < s / (1 - acc))) if s > 0 else (y & (u >= -s / acc))


def arm_runs(base: np.ndarray, design: SimDesign, noise: Noise, rng: np.random.Generator, error_rate: float = 0.0,
             prefix: str = "L", accuracy: float | None = None) -> ArmRuns:
    """An arm's runs from its base outcomes; ``accuracy``: its expected accuracy (default: the base's)."""
    runs, ids = [], []
    acc = float(base.mean()) if accuracy is None else accuracy
    for launch in range(design.launches):
        y = _flip(base, noise.flip_launch, rng, acc)
        if noise.shift_sd > 0:
            y = _shift(y, float(rng.normal(0, noise.shift_sd)), rng)
        for _ in range(design.passes):
            runs.append(_flip(y, noise.flip_pass, rng, acc).astype(float))
            ids.append(f"{prefix}{launch}")
    s = np.vstack(runs)
    if error_rate > 0:
        s[rng.random(s.shape) < error_rate] = np.nan
    return ArmRuns(s, tuple(ids))


def experiment(rng: np.random.Generator, design: SimDesign, noise: Noise, *, n: int = 1319, accuracy: float = 0.9,
               delta: float = 0.0, error_rate: float = 0.0, ability: float | None = None) -> tuple[ArmRuns, ArmRuns]:
    """One simulated comparison: (arm A runs, arm B runs) with true difference ``delta``."""
    a_ = solve_ability(accuracy) if ability is None else ability
    p = 1 / (1 + np.exp(-(a_ - DIFFICULTY_SD * rng.standard_normal(n))))
    base_a = rng.random(n) < p
    u = rng.random(n)
    if delta >= 0:
        base_b = base_a | (u < delta / (1 - accuracy))
    else:
        base_b = base_a & (u >= -delta / accuracy)
    return (arm_runs(base_a, design, noise, rng, error_rate, "A", accuracy),
            arm_runs(base_b, design, noise, rng, error_rate, "B", accuracy + delta))


@dataclass(frozen=True)
class Calibration:
    """Error rates of :func:`harness.stats.compare_arms` on one design under one noise."""

    design: str
    noise: str
    experiments: int
    false_positive: float       # share of improved/regressed verdicts at Δ = 0
    coverage_null: float        # share of (1 - α) intervals containing 0 at Δ = 0
    mde: float                  # mean reported MDE at the effect below
    effect: float               # the true effect of the power runs: the MDE reported at that effect
    power: float                # share of improved verdicts at that effect
    coverage_alt: float         # share of intervals containing the effect


def calibrate(design: SimDesign, noise: Noise, experiments: int = 2000, *, seed: int = 0, n: int = 1319,
              accuracy: float = 0.9, error_rate: float = 0.0, alpha: float = ALPHA,
              mde_every: int = 10) -> Calibration:
    """False-positive rate and coverage at Δ = 0, then power and coverage at the reported MDE.

    The reported MDE depends on the effect (a real effect adds discordant questions), so the power runs use
    the fixed point: the mean MDE reported at Δ = MDE_0 (the null runs' mean MDE) is the effect simulated.
    MDEs are computed on every ``mde_every``-th experiment (they cost more than the test).
    """
    from harness.stats.accuracy import compare_arms

    rng = np.random.default_rng(seed)
    ability = solve_ability(accuracy)

    def run(delta: float, count: int) -> tuple[float, float, float]:
        hits = cover = 0
        mdes = []
        for i in range(count):
            a, b = experiment(rng, design, noise, n=n, accuracy=accuracy, delta=delta, error_rate=error_rate,
                              ability=ability)
            r = compare_arms(a, b, alpha=alpha, compute_mde=i % mde_every == 0)
            word = r.verdict.word
            hits += word in ("improved", "regressed") if delta == 0 else word == "improved"
            cover += r.analysis.ci[0] <= delta <= r.analysis.ci[1]
            if r.analysis.mde is not None:
                mdes.append(r.analysis.mde)
        return hits / count, cover / count, float(np.mean(mdes)) if mdes else float("nan")

    fp, cov0, m0 = run(0.0, experiments)
    _, _, m1 = run(m0, max(1, experiments // 4))
    power, cov1, m2 = run(m1, experiments)
    return Calibration(design.name, noise.name, experiments, fp, cov0, m2, m1, power, cov1)
