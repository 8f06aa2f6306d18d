"""The simulated engine's model of correctness: question difficulties, an arm's outcomes, run-to-run noise.

Pure functions, no I/O: the server (``abh_simulator.state``) and power or calibration studies call the same
code.

* Each test question ``i`` has a latent difficulty ``d_i ~ Normal(0, sd)`` and a uniform ``u_i ~ U(0, 1)``,
  both drawn from ``seed`` and ``i`` only (never from the arm).
* An arm has an ability ``a`` (given, or solved by bisection so that the *expected* accuracy
  ``mean_i sigmoid(a - d_i)`` is the target). Its base outcome on question ``i`` is ``u_i < sigmoid(a - d_i)``:
  deterministic in (seed, i, a) and monotone in ``a`` (a higher ability only turns wrong answers into right
  ones), so arms of close ability agree on most questions (the paired design).
* Run-to-run noise with flip rate ``f``: a draw of flips changes about ``f/2`` of the questions, balanced
  between right->wrong and wrong->right so that the expected accuracy stays the base accuracy; two
  independent draws therefore disagree on about ``f`` of the questions (the A/A discordance psi_AA; exactly
  ``sum_i 2 p_i (1 - p_i)`` over the per-question flip probabilities, a little less than ``f`` when ``f`` is
  large next to the error rate).
  Where the draws happen is the noise mode (:func:`split_flip_rate`):

  - ``launch``: one draw per server launch (from its ``run_seed``); every pass over the questions on that
    launch repeats verbatim, two launches disagree on about ``f``.
  - ``pass``: a new draw on every pass (the k-th time a question is asked on a launch is pass k), as
    dynamic batching does on a real server at temperature 0; two passes disagree on about ``f`` whether they
    share a launch or not.
  - ``mixed``: both, with half the flip rate each: a launch draw at ``f/2``, then a pass draw at ``f/2`` on
    top. Two passes on one launch disagree on about ``f/2``, two launches on about ``f``.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache

from harness.tasks.gsm8k import CANONICAL_TEST_ROWS

DEFAULT_DIFFICULTY_SD = 3.0
DEFAULT_QUESTIONS = CANONICAL_TEST_ROWS


@lru_cache(maxsize=16)
def question_draws(seed: int, n: int, difficulty_sd: float = DEFAULT_DIFFICULTY_SD
                   ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(difficulties d_i, uniforms u_i) for questions 0..n-1; each depends only on (seed, i)."""
    ds, us = [], []
    for i in range(n):
        rng = random.Random(f"abh-sim/q/{seed}/{i}")
        ds.append(rng.gauss(0.0, 1.0) * difficulty_sd)
        us.append(rng.random())
    return tuple(ds), tuple(us)


def solve_probabilities(ability: float, seed: int = 0, n: int = DEFAULT_QUESTIONS,
                        difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> list[float]:
    """Per-question probability of a correct answer, sigmoid(ability - d_i)."""
    ds, _ = question_draws(seed, n, difficulty_sd)
    exp = math.exp
    # the sigmoid in each sign's stable form, inline: the ability's bisection asks 80 times for 1319 of them (a
    # function call each was a tenth of a launch's start-up)
    return [1.0 / (1.0 + exp(-x)) if (x := ability - d) >= 0 else (e := exp(x)) / (1.0 + e) for d in ds]


def expected_accuracy(ability: float, seed: int = 0, n: int = DEFAULT_QUESTIONS,
                      difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> float:
    """Expected accuracy over questions 0..n-1 of an arm with this ability."""
    if n <= 0:
        raise ValueError("n must be positive")
    return sum(solve_probabilities(ability, seed, n, difficulty_sd)) / n


def ability_for_accuracy(accuracy: float, seed: int = 0, n: int = DEFAULT_QUESTIONS,
                         difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> float:
    """The ability whose expected accuracy over questions 0..n-1 is ``accuracy`` (bisection)."""
    if not 0.0 < accuracy < 1.0:
        raise ValueError("accuracy must be strictly between 0 and 1")
    lo, hi = -60.0, 60.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if expected_accuracy(mid, seed, n, difficulty_sd) < accuracy:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def base_outcomes(ability: float, seed: int = 0, n: int = DEFAULT_QUESTIONS,
                  difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> list[bool]:
    """Base (noise-free) outcome per question: u_i < sigmoid(ability - d_i). Monotone in ability."""
    _, us = question_draws(seed, n, difficulty_sd)
    return [u < p for u, p in zip(us, solve_probabilities(ability, seed, n, difficulty_sd), strict=True)]


def flip_probabilities(base_accuracy: float, flip_rate: float) -> tuple[float, float]:
    """(P(right->wrong), P(wrong->right)) per draw: f/4 of the questions each way, capped at 1.

    Balanced so that a draw's expected accuracy equals the base accuracy; two draws then disagree on about
    ``flip_rate`` of the questions. At a base accuracy of exactly 0 or 1 only one direction exists and it
    gets f/2.
    """
    if flip_rate <= 0:
        return 0.0, 0.0
    a = base_accuracy
    if a >= 1.0:
        return min(1.0, flip_rate / 2), 0.0
    if a <= 0.0:
        return 0.0, min(1.0, flip_rate / 2)
    return min(1.0, flip_rate / (4 * a)), min(1.0, flip_rate / (4 * (1 - a)))


def run_outcomes(base: list[bool], flip_rate: float, run_seed: int | str) -> list[bool]:
    """One draw of flips applied to ``base`` (deterministic in run_seed)."""
    if not base:
        return []
    down, up = flip_probabilities(sum(base) / len(base), flip_rate)
    if down == 0.0 and up == 0.0:
        return list(base)
    rng = random.Random(f"abh-sim/run/{run_seed}")
    out = []
    for b in base:
        v = rng.random()
        out.append((v >= down) if b else (v < up))
    return out


def split_flip_rate(flip_rate: float, noise: str) -> tuple[float, float]:
    """(flip rate drawn once per launch, flip rate drawn anew on every pass) for a noise mode."""
    if noise == "launch":
        return flip_rate, 0.0
    if noise == "pass":
        return 0.0, flip_rate
    if noise == "mixed":
        return flip_rate / 2, flip_rate / 2
    raise ValueError(f"noise must be launch, pass or mixed, not {noise!r}")


def launch_outcomes(base: list[bool], flip_rate: float, noise: str, run_seed: int | str) -> list[bool]:
    """A launch's outcomes before any per-pass noise: the base with the launch component's flips."""
    return run_outcomes(base, split_flip_rate(flip_rate, noise)[0], run_seed)


def pass_outcomes(launch: list[bool], flip_rate: float, noise: str, run_seed: int | str, k: int) -> list[bool]:
    """Outcomes of pass ``k`` (0, 1, ...) on the launch whose outcomes are ``launch``
    (from :func:`launch_outcomes` with the same ``run_seed``)."""
    per_pass = split_flip_rate(flip_rate, noise)[1]
    return run_outcomes(launch, per_pass, f"{run_seed}/pass{k}") if per_pass > 0 else list(launch)
