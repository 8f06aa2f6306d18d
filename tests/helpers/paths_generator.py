"""A generator of stored evals for calibrating the paths a user takes (``abh ab`` with and without ``--aa``, evals
without launch ids), written for that purpose and sharing nothing with the simulator (``abh_simulator``) or
``helpers.score_simulator``.

The world: question i has a log-odds difficulty b_i (normal, fixed for a world: the benchmark is fixed). A server
launch l draws one shift u_l (Student-t with 3 df, or normal, scaled to sd ``shift_sd`` on the log-odds) applied
to every question, so its chance on question i is p_il = σ(b_i + δ_arm + u_l). At temperature 0 the launch has
one answer per question (right with probability p_il); each later pass on the same launch redraws a question's
answer with the question's own flip rate (heavy-tailed: most never flip, a few often), so passes of one launch
share most answers. A few answers are request errors (NaN). Arm B differs by ``effect`` on the log-odds of
every question; the true Δ of the configurations is mean_i E_u[σ(b_i + δ + u)] - E_u[σ(b_i + u)].

An experiment is a set of evals as :func:`harness.analysis.comparison.compare_runs` takes them (what
``abh compare`` reads from the store), each with the eval.json fields a path records: ``launch`` (``abh ab``,
``abh run``) or only ``url`` (a standalone ``abh eval``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.results.eval_store import ScoredEval

DATASET = "c" * 64
RECIPE = "sglang-gsm8k-5shot"


@dataclass(frozen=True)
class World:
    n: int = 1319
    #: mean and sd of the questions' log-odds difficulty (about 73 % accuracy; 10 % of answers differ between two
    #: launches, most questions are always right or always wrong)
    difficulty_mean: float = 4.0
    difficulty_sd: float = 6.0
    shift: str = "t3"  # t3 | normal | none
    shift_sd: float = 0.15
    #: per-question flip rate of a later pass: Beta(a, b) (mean a / (a + b); most near 0)
    flip_beta: tuple[float, float] = (0.15, 3.0)
    error_rate: float = 0.002
    seed: int = 0

    def questions(self) -> np.ndarray:
        return np.random.default_rng([self.seed, 1]).normal(self.difficulty_mean, self.difficulty_sd, self.n)

    def flip_rates(self) -> np.ndarray:
        return np.random.default_rng([self.seed, 2]).beta(*self.flip_beta, self.n)


def launch_shift(world: World, rng: np.random.Generator) -> float:
    if world.shift == "none" or world.shift_sd == 0:
        return 0.0
    if world.shift == "normal":
        return float(rng.normal(0.0, world.shift_sd))
    return float(rng.standard_t(3) * world.shift_sd / np.sqrt(3.0))  # t3 has variance 3


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def true_delta(world: World, effect: float, draws: int = 20_000) -> float:
    """mean_i E_u[σ(b_i + δ + u)] - E_u[σ(b_i + u)] over the launch-shift distribution (Monte Carlo, fixed seed)."""
    rng = np.random.default_rng([world.seed, 3])
    u = np.array([launch_shift(world, rng) for _ in range(draws)])
    b = world.questions()
    totals = []
    for d in (effect, 0.0):
        totals.append(sum(float(sigmoid(b[i:i + 100, None] + d + u[None, :]).mean(axis=1).sum())
                          for i in range(0, b.size, 100)) / b.size)
    return totals[0] - totals[1]


def launch_passes(world: World, b: np.ndarray, flips: np.ndarray, delta: float, passes: int,
                  rng: np.random.Generator) -> list[np.ndarray]:
    """The scores of ``passes`` passes on one fresh launch (1 right, 0 wrong, NaN errored)."""
    p = sigmoid(b + delta + launch_shift(world, rng))
    first = (rng.random(world.n) < p).astype(float)
    out = []
    for k in range(passes):
        s = first.copy()
        if k:
            redraw = rng.random(world.n) < flips
            s[redraw] = (rng.random(int(redraw.sum())) < p[redraw]).astype(float)
        s[rng.random(world.n) < world.error_rate] = np.nan
        out.append(s)
    return out


@dataclass(frozen=True)
class Server:
    """One server of an experiment: its arm (``a``, ``aa`` or ``b``), how many passes it serves, and what its
    evals record: ``launch`` (abh ab / abh run) or only the ``url`` (a standalone abh eval)."""

    role: str
    url: str
    passes: int = 1
    records_launch: bool = True


@dataclass
class Experiment:
    a: list[ScoredEval] = field(default_factory=list)
    b: list[ScoredEval] = field(default_factory=list)
    aa: list[ScoredEval] = field(default_factory=list)


def scored(scores: np.ndarray, server: Server, k: int) -> ScoredEval:
    meta = {"dataset_sha256": DATASET, "recipe": RECIPE, "indices": list(range(scores.size)), "task": "gsm8k",
            "url": server.url}
    if server.records_launch:
        meta["launch"] = f"url:{server.url}"
    where = Path(f"/calibration/{server.role}/{server.url.rsplit(':', 1)[-1]}/r{k + 1}")
    return ScoredEval(where, meta, None, scores, str(meta.get("launch") or f"dir:{where}"))  # type: ignore[arg-type]


def experiment(world: World, servers: list[Server], effect: float, rng: np.random.Generator,
               b: np.ndarray | None = None, flips: np.ndarray | None = None) -> Experiment:
    """One experiment: every server's passes (each server one launch)."""
    b = world.questions() if b is None else b
    flips = world.flip_rates() if flips is None else flips
    out = Experiment()
    for s in servers:
        runs = launch_passes(world, b, flips, effect if s.role == "b" else 0.0, s.passes, rng)
        getattr(out, s.role).extend(scored(x, s, k) for k, x in enumerate(runs))
    return out
