"""The looks of a sequential run (``experiment.sequential=true``): after every repeat of both arms, estimate,
decide, record; stop as soon as the verdict is decided or at ``experiment.max_repeats``.

The design is :class:`harness.stats.sequential.SequentialDesign` built from the config
(:func:`design_of`): ``experiment.max_repeats`` / ``min_repeats``, ``stats.alpha``, ``stats.spending``,
``stats.futility``, ``stats.hypothesis`` and ``stats.margin_pp``. Each look is
:func:`harness.stats.sequential.decide_look` on the question-level estimate (Δ, SE, n) of repeats 1..r
(:func:`look_estimate`); the decision is pure, so a resumed run would decide the same way, and it continues
from the recorded looks (:class:`Looks`, built from the manifest's ``sequential`` record). A rerun whose
design differs from the recorded one is refused: the error rates hold for the design the looks were made
with, not for one changed half-way.

Each repeat is a fresh launch of both arms: under no effect the repeats' per-question differences are then
independent and identically distributed, which is what makes the information fraction ``r / max_repeats``
(see :mod:`harness.stats.sequential`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import ConfigError
from harness.results.eval_store import StoreError, load_eval
from harness.stats.sequential import LookDecision, SequentialDesign, decide_look, question_level_estimate

#: What the test at each look is (recorded with the looks, shown in the report).
ESTIMATOR = ("question-level paired z: per question the passes are averaged within a launch, then the "
             "launches; d_i = B_i - A_i, Δ = mean(d), SE = sd(d)/sqrt(n) (floored at 1/n)")
#: The reasons a look stops for (LookDecision.reason), other than reaching max_repeats.
EARLY_REASONS = ("efficacy", "equivalence", "noninferiority", "futility")


def design_of(cfg: Any) -> SequentialDesign:
    """The sequential design of a run config (``experiment`` and ``stats`` sections)."""
    x, s = cfg.experiment, cfg.stats
    margin = None if s.get("margin_pp") is None else float(s.margin_pp) / 100
    try:
        return SequentialDesign(max_repeats=int(x.max_repeats), min_repeats=int(x.get("min_repeats", 2)),
                                alpha=float(s.alpha), spending=str(s.get("spending", "obf")),
                                hypothesis=str(s.get("hypothesis", "superiority")), margin=margin,
                                futility=bool(s.get("futility", True)))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad sequential design: {e}") from None


def design_dict(design: SequentialDesign) -> dict[str, Any]:
    """The design as recorded (and compared on resume)."""
    return {k: v for k, v in asdict(design).items()}


# ------------------------------------------------------------------------------------------ estimate
def _scores(eval_dir: Path) -> tuple[str, np.ndarray]:
    """(the server launch that served the eval, its scores: 1/0, NaN for an error or a missing answer)."""
    try:
        meta, samples, _ = load_eval(eval_dir)
    except (StoreError, OSError, json.JSONDecodeError) as e:
        raise StoreError(f"cannot read eval {eval_dir} for a sequential look: {e}") from None
    indices = list(meta.get("indices") or [])
    by_index = {s.index: s for s in samples}
    scores = np.full(len(indices), np.nan)
    for j, idx in enumerate(indices):
        rec = by_index.get(idx)
        if rec is not None and rec.error is None and rec.correct is not None:
            scores[j] = 1.0 if rec.correct else 0.0
    launch = meta.get("launch") or meta.get("instance") or f"dir:{Path(eval_dir).resolve()}"
    return str(launch), scores


def _by_launch(dirs: Sequence[Path]) -> list[np.ndarray]:
    """An arm's evals grouped by the launch that served them: one (passes, n) matrix per launch."""
    groups: dict[str, list[np.ndarray]] = {}
    for d in dirs:
        launch, scores = _scores(Path(d))
        groups.setdefault(launch, []).append(scores)
    return [np.vstack(v) for v in groups.values()]


def look_estimate(a_dirs: Sequence[Path], b_dirs: Sequence[Path]) -> tuple[float, float, int]:
    """(Δ, SE, n) of B - A over the given evals, with the question as the unit and launches as clusters
    (:func:`harness.stats.sequential.question_level_estimate`)."""
    return question_level_estimate(_by_launch(a_dirs), _by_launch(b_dirs))


# ------------------------------------------------------------------------------------------ the looks
class Looks:
    """The looks of one sequential run: those recorded by earlier sessions, and the ones made now.

    ``recorded`` is the manifest's ``sequential`` record (None on a first session). A design that differs
    from the recorded one raises ConfigError (exit 2)."""

    def __init__(self, design: SequentialDesign, recorded: Mapping[str, Any] | None = None,
                 estimator: str = ESTIMATOR):
        self.design = design
        self.estimator = estimator
        self.looks: list[dict[str, Any]] = []
        if recorded and recorded.get("looks"):
            before = dict(recorded.get("design") or {})
            now = design_dict(design)
            changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
            if changed:
                raise ConfigError(
                    "this run directory holds the looks of another sequential design (changed: "
                    + ", ".join(f"{k} {before.get(k)!r} -> {now.get(k)!r}" for k in changed)
                    + "); its error rates hold only for the design the looks were made with. Restore those "
                    "settings, or use another hydra.run.dir.")
            self.looks = [dict(v) for v in recorded["looks"] if isinstance(v, dict)]

    # ------------------------------------------------------------------ state
    def recorded(self, repeats: int) -> dict[str, Any] | None:
        return next((v for v in self.looks if v.get("repeats") == repeats), None)

    @property
    def last(self) -> dict[str, Any] | None:
        return self.looks[-1] if self.looks else None

    @property
    def decided(self) -> bool:
        """A look has stopped the run (a verdict, futility, or the last repeat)."""
        return any(v.get("stop") for v in self.looks)

    @property
    def repeats_run(self) -> int:
        """Repeats of both arms the decision rests on (the last look's)."""
        return int(self.last["repeats"]) if self.last else 0

    def wants(self, repeats: int) -> bool:
        """Whether repeat ``repeats`` of both arms is to be run: nothing decided before it, and within
        max_repeats."""
        return repeats <= self.design.max_repeats and not any(
            v.get("stop") and int(v.get("repeats", 0)) < repeats for v in self.looks)

    # ------------------------------------------------------------------ a look
    def look(self, repeats: int, a_dirs: Sequence[Path], b_dirs: Sequence[Path]) -> dict[str, Any] | None:
        """The decision after ``repeats`` repeats of both arms (``a_dirs``/``b_dirs``: their evals 1..r): the
        recorded one if an earlier session made it, else a new one, recorded. None before min_repeats (no
        look is planned there)."""
        if repeats < self.design.min_repeats:
            return None
        old = self.recorded(repeats)
        if old is not None:
            return old
        delta, se, n = look_estimate(a_dirs, b_dirs)
        decision: LookDecision = decide_look(self.design, repeats, delta, se, n)
        entry = {**decision.as_dict(), "n": n}
        self.looks.append(entry)
        self.looks.sort(key=lambda v: int(v.get("repeats", 0)))
        return entry

    # ------------------------------------------------------------------ the record
    def record(self, cost: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The ``sequential`` record (manifest, summary.json, comparison.json): design, looks, outcome, and
        what stopping saved against running every repeat (GPU-hours from ``cost``: the arms' GPU-hours
        per repeat run)."""
        last = self.last or {}
        stopped = self.decided
        saved = int(last.get("repeats_saved") or 0) if stopped else 0
        per_repeat = saved_gh = None
        if cost and self.repeats_run:
            arms = sum(float(((cost.get(r) or {}).get("gpu_hours")) or 0.0) for r in ("a", "b"))
            per_repeat = arms / self.repeats_run
            saved_gh = per_repeat * saved
        return {"design": design_dict(self.design), "estimator": self.estimator, "looks": list(self.looks),
                "stopped": stopped, "repeats_run": self.repeats_run, "max_repeats": self.design.max_repeats,
                "verdict": last.get("verdict") if stopped else None,
                "reason": last.get("reason") if stopped else None,
                "sentence": last.get("sentence") if stopped else None,
                "repeats_saved": saved, "gpu_hours_per_repeat": per_repeat, "gpu_hours_saved": saved_gh}


def apply_to_comparison(comparison: dict[str, Any], record: Mapping[str, Any]) -> None:
    """A decided sequential run's verdict is the sequential decision: it becomes the comparison's
    ``verdict`` (every reader of comparison.json sees it), the fixed-design test of the same data is kept
    as ``verdict_fixed``. A comparison that is not comparable (errors) stays so."""
    comparison["sequential"] = dict(record)
    if not record.get("stopped") or comparison.get("verdict") == "not_comparable":
        return
    comparison["verdict_fixed"] = comparison.get("verdict")
    comparison["verdict_reason_fixed"] = comparison.get("verdict_reason")
    comparison["verdict"] = record["verdict"]
    comparison["verdict_reason"] = f"sequential design: {record['sentence']}"
