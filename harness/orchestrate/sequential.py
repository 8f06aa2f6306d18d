"""The looks of a sequential run (``experiment.sequential=true``): after every repeat of both arms, estimate,
decide, record; stop as soon as the verdict is decided or at ``experiment.max_repeats``.

The design is :class:`harness.stats.group_sequential.SequentialDesign` built from the config
(:func:`design_of`): ``experiment.max_repeats`` / ``min_repeats``, ``stats.alpha``, ``stats.spending``,
``stats.futility``, ``stats.hypothesis`` and ``stats.margin_pp``. Each look is
:func:`harness.stats.group_sequential.decide_look` on the question-level estimate (Δ, SE, n) of repeats 1..r
(:func:`look_estimate`); the decision is pure, so a resumed run would decide the same way, and it continues
from the recorded looks (:class:`Looks`, built from the manifest's ``sequential`` record). A rerun whose
design differs from the recorded one is refused: the error rates hold for the design the looks were made
with, not for one changed half-way.

Each repeat is a fresh launch of both arms: under no effect the repeats' per-question differences are then
independent and identically distributed, which is what makes the information fraction ``r / max_repeats``
(see :mod:`harness.stats.group_sequential`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import ConfigError
from harness.results.eval_store import StoreError, load_scored
from harness.results.records import RecordError, to_doc
from harness.results.schema import Comparison, Cost, Look, SequentialRecord
from harness.stats.group_sequential import (
    LookDecision,
    SequentialDesign,
    decide_look,
    question_level_estimate,
)

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
def _by_launch(dirs: Sequence[Path]) -> list[np.ndarray]:
    """An arm's evals grouped by the launch that served them: one (passes, n) matrix per launch."""
    groups: dict[str, list[np.ndarray]] = {}
    for d in dirs:
        try:
            ev = load_scored(d)
        except StoreError as e:
            raise StoreError(f"cannot read eval {d} for a sequential look: {e}") from None
        groups.setdefault(ev.launch, []).append(ev.scores)
    return [np.vstack(v) for v in groups.values()]


def look_estimate(a_dirs: Sequence[Path], b_dirs: Sequence[Path]) -> tuple[float, float, int]:
    """(Δ, SE, n) of B - A over the given evals, with the question as the unit and launches as clusters
    (:func:`harness.stats.group_sequential.question_level_estimate`)."""
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
        self.looks: list[Look] = []
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
            try:
                self.looks = [Look.from_doc(v, f"manifest.json sequential.looks[{i}]")
                              for i, v in enumerate(recorded["looks"])]
            except RecordError as e:
                raise ConfigError(f"the recorded sequential looks are unreadable: {e}") from None

    # ------------------------------------------------------------------ state
    def recorded(self, repeats: int) -> Look | None:
        return next((v for v in self.looks if v.repeats == repeats), None)

    @property
    def last(self) -> Look | None:
        return self.looks[-1] if self.looks else None

    @property
    def decided(self) -> bool:
        """A look has stopped the run (a verdict, futility, or the last repeat)."""
        return any(v.stop for v in self.looks)

    @property
    def repeats_run(self) -> int:
        """Repeats of both arms the decision rests on (the last look's)."""
        return self.last.repeats if self.last else 0

    def wants(self, repeats: int) -> bool:
        """Whether repeat ``repeats`` of both arms is to be run: nothing decided before it, and within
        max_repeats."""
        return repeats <= self.design.max_repeats and not any(v.stop and v.repeats < repeats for v in self.looks)

    # ------------------------------------------------------------------ a look
    def look(self, repeats: int, a_dirs: Sequence[Path], b_dirs: Sequence[Path]) -> Look | None:
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
        entry = Look.from_doc({**to_doc(asdict(decision)), "n": n})
        self.looks.append(entry)
        self.looks.sort(key=lambda v: v.repeats)
        return entry

    # ------------------------------------------------------------------ the record
    def record(self, cost: Cost | None = None) -> SequentialRecord:
        """The ``sequential`` record (manifest, summary.json, comparison.json): design, looks, outcome, and
        what stopping saved against running every repeat (GPU-hours from ``cost``: the arms' GPU-hours
        per repeat run)."""
        last = self.last
        stopped = self.decided and last is not None
        saved = last.repeats_saved if stopped and last is not None else 0
        per_repeat = saved_gh = None
        if cost and self.repeats_run:
            per_repeat = (cost.a.gpu_hours + cost.b.gpu_hours) / self.repeats_run
            saved_gh = per_repeat * saved
        return SequentialRecord(
            design=design_dict(self.design), estimator=self.estimator, looks=list(self.looks), stopped=stopped,
            repeats_run=self.repeats_run, max_repeats=self.design.max_repeats,
            verdict=last.verdict if stopped and last else None, reason=last.reason if stopped and last else None,
            sentence=last.sentence if stopped and last else None, repeats_saved=saved,
            gpu_hours_per_repeat=per_repeat, gpu_hours_saved=saved_gh)


def apply_to_comparison(comparison: Comparison, record: SequentialRecord) -> Comparison:
    """A decided sequential run's verdict is the sequential decision: it becomes the comparison's
    ``verdict`` (every reader of comparison.json sees it), the fixed-design test of the same data is kept
    as ``verdict_fixed``. A comparison that is not comparable (errors) stays so."""
    if not record.stopped or comparison.verdict == "not_comparable" or record.verdict is None:
        return replace(comparison, sequential=record)
    return replace(comparison, sequential=record, verdict_fixed=comparison.verdict,
                   verdict_reason_fixed=comparison.verdict_reason, verdict=record.verdict,
                   verdict_reason=f"sequential design: {record.sentence}")
