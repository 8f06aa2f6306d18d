"""Runs grouped by server launch: an arm's ``(R, n)`` scores (NaN: errored or missing), a launch id per run.

Noise fixed for a launch repeats in all its passes, so a launch, not a run, is the replicate: per question an
arm's mean is the mean over its launches of each launch's mean over its passes (NaN skipped).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .dist import chi2_sf
from .outcomes import LaunchHeterogeneity


@dataclass(frozen=True)
class ArmRuns:
    """An arm's scores ``(R, n)`` (1 right, 0 wrong, NaN errored/missing) and the launch id of each run."""

    scores: np.ndarray
    launches: tuple[str, ...]

    def __post_init__(self) -> None:
        s = np.asarray(self.scores, dtype=float)
        if s.ndim == 1:
            s = s[None, :]
        object.__setattr__(self, "scores", s)
        object.__setattr__(self, "launches", tuple(str(x) for x in self.launches))
        if len(self.launches) != s.shape[0]:
            raise ValueError(f"{s.shape[0]} runs but {len(self.launches)} launch ids")

    @property
    def n_runs(self) -> int:
        return int(self.scores.shape[0])

    def launch_ids(self) -> list[str]:
        """Distinct launch ids in order of first appearance."""
        return list(dict.fromkeys(self.launches))

    def passes_per_launch(self) -> list[int]:
        return [self.launches.count(k) for k in self.launch_ids()]

    def with_scores(self, scores: np.ndarray) -> ArmRuns:
        return ArmRuns(scores, self.launches)

    def concat(self, other: ArmRuns) -> ArmRuns:
        return ArmRuns(np.vstack([self.scores, other.scores]), self.launches + other.launches)


def _nanmean(x: np.ndarray, axis: int) -> np.ndarray:
    ok = ~np.isnan(x)
    cnt = ok.sum(axis=axis)
    tot = np.where(ok, x, 0.0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def launch_means(arm: ArmRuns) -> np.ndarray:
    """``(L, n)``: per launch, each question's mean over that launch's passes (NaN when none answered)."""
    ids = np.asarray(arm.launches)
    return np.vstack([_nanmean(arm.scores[ids == k], axis=0) for k in arm.launch_ids()])


def question_means(arm: ArmRuns) -> np.ndarray:
    """``(n,)``: per question, the mean over launches of the launch means (NaN when no run answered)."""
    return _nanmean(launch_means(arm), axis=0)


def heterogeneity_q(y: np.ndarray) -> tuple[float, int, int]:
    """(Q, df, questions used): Cochran's Q for ``(L, n)`` launch means of one arm over the questions every
    launch answered, Q = (L - 1)·n·SS_launch / SS_within (exactly Cochran's for 0/1 scores; ≈ χ²(L - 1)); 0
    when the launches agree on every question."""
    y = np.asarray(y, dtype=float)
    y = y[:, ~np.isnan(y).any(axis=0)]
    L, n = y.shape
    if L < 2 or n == 0:
        return 0.0, 0, int(n)
    within = float(np.sum((y - y.mean(axis=0)) ** 2))
    m = y.mean(axis=1)
    ss_launch = n * float(np.sum((m - m.mean()) ** 2))
    q = (L - 1) * n * ss_launch / within if within > 0 else 0.0
    return float(q), L - 1, int(n)


def launch_heterogeneity(arms: Sequence[ArmRuns]) -> LaunchHeterogeneity | None:
    """Do launches of one configuration differ in accuracy more than question-level noise explains? Cochran's
    Q of each configuration with two or more launches, summed; None when no configuration has two launches."""
    qs = [heterogeneity_q(launch_means(a)) for a in arms if len(a.launch_ids()) >= 2]
    qs = [q for q in qs if q[1] > 0]
    if not qs:
        return None
    q, df = sum(x[0] for x in qs), sum(x[1] for x in qs)
    return {"test": "Cochran's Q over launches of each arm (questions as blocks)", "q": float(q), "df": int(df),
            "p": float(chi2_sf(q, df))}
