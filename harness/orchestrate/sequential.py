"""The looks of a sequential run (``experiment.sequential=true``): after every repeat of both arms, estimate,
decide, record; stop as soon as the verdict is decided or at ``experiment.max_repeats``.

The decision is pure, so a resumed run continues from the manifest's recorded looks; a rerun whose design
differs is refused (the error rates hold only for the design the looks were made with). Each repeat is a fresh
launch of both arms, and the A/A control runs after the looks, so a look's launch variance is the arms' own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import Config, ConfigError
from harness.results.eval_store import StoreError, load_scored
from harness.results.records import JSON, RecordError, finite_or_none, from_doc, to_doc
from harness.results.schema import Comparison, Cost, SequentialRecord
from harness.stats.group_sequential import SequentialDesign
from harness.stats.launch_looks import ESTIMATOR, decide_look_arms
from harness.stats.launches import ArmRuns
from harness.stats.outcomes import LookDecision

#: the comparison's ``test`` when the sequential decision is its verdict
SEQUENTIAL_TEST = "group-sequential launch-aware t-test (stage-wise p, Lan-DeMets boundaries)"
SEQUENTIAL_CI = "repeated confidence interval of the deciding look"


def design_of(cfg: Config) -> SequentialDesign:
    """The sequential design of a run config (``experiment`` and ``stats`` sections)."""
    x, s = cfg.experiment, cfg.stats
    margin = None if s.margin_pp is None else s.margin_pp / 100
    min_effect = None if s.min_effect_pp is None else s.min_effect_pp / 100
    if x.max_repeats is None:
        raise ConfigError("bad sequential design: experiment.max_repeats is not set")
    try:
        return SequentialDesign(max_repeats=x.max_repeats, min_repeats=x.min_repeats, alpha=s.alpha,
                                spending=s.spending, hypothesis=s.hypothesis, margin=margin, futility=s.futility,
                                min_effect=min_effect)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad sequential design: {e}") from None


# ------------------------------------------------------------------------------------------ estimate
def arm_runs(dirs: Sequence[Path]) -> ArmRuns | None:
    """An arm's evals as runs with the launch id of each (None for no directory)."""
    runs = []
    for d in dirs:
        try:
            runs.append(load_scored(d))
        except StoreError as e:
            raise StoreError(f"cannot read eval {d} for a sequential look: {e}") from None
    if not runs:
        return None
    return ArmRuns(np.vstack([r.scores for r in runs]), tuple(r.launch for r in runs))


def _finite(v: Any) -> JSON:
    """A look's details as JSON: non-finite numbers (a df of inf) become None."""
    if isinstance(v, float):
        return finite_or_none(v)
    if isinstance(v, dict):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return to_doc(v)


# ------------------------------------------------------------------------------------------ the looks
class Looks:
    """The looks of one sequential run: those recorded by earlier sessions, and the ones made now.

    ``recorded`` is the manifest's ``sequential`` record (None on a first session). A design that differs
    from the recorded one raises ConfigError (exit 2)."""

    def __init__(self, design: SequentialDesign, recorded: Mapping[str, Any] | None = None):
        self.design = design
        self.looks: list[LookDecision] = []
        if not recorded or not recorded.get("looks"):
            return
        if recorded.get("estimator") not in (None, ESTIMATOR):
            raise ConfigError(
                "this run directory holds sequential looks made with another estimator ("
                f"{recorded.get('estimator')!r}); the error rates hold only for the estimator the looks were "
                "made with. Use another hydra.run.dir (or the abh version that made them).")
        before, now = dict(recorded.get("design") or {}), asdict(design)
        changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
        if changed:
            raise ConfigError(
                "this run directory holds the looks of another sequential design (changed: "
                + ", ".join(f"{k} {before.get(k)!r} -> {now.get(k)!r}" for k in changed)
                + "); its error rates hold only for the design the looks were made with. Restore those "
                "settings, or use another hydra.run.dir.")
        try:
            self.looks = [from_doc(LookDecision, v, f"manifest.json sequential.looks[{i}]")
                          for i, v in enumerate(recorded["looks"])]
        except RecordError as e:
            raise ConfigError(f"the recorded sequential looks are unreadable: {e}") from None

    # ------------------------------------------------------------------ state
    def recorded(self, repeats: int) -> LookDecision | None:
        return next((v for v in self.looks if v.repeats == repeats), None)

    @property
    def last(self) -> LookDecision | None:
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
        """Whether repeat ``repeats`` of both arms runs: nothing decided before it, within max_repeats."""
        return repeats <= self.design.max_repeats and not any(v.stop and v.repeats < repeats for v in self.looks)

    # ------------------------------------------------------------------ a look
    def look(self, repeats: int, a_dirs: Sequence[Path], b_dirs: Sequence[Path],
             aa_dirs: Sequence[Path] = ()) -> LookDecision | None:
        """The decision after ``repeats`` repeats of both arms (``a_dirs``/``b_dirs``: their evals 1..r;
        ``aa_dirs``: the A/A control's evals so far): the recorded one if an earlier session made it, else a new
        one, recorded. None before min_repeats (no look is planned there)."""
        if repeats < self.design.min_repeats or self.recorded(repeats) is not None:
            return self.recorded(repeats)
        a, b = arm_runs(a_dirs), arm_runs(b_dirs)
        if a is None or b is None:
            raise StoreError("a sequential look needs evals of both arms")
        return self.decide(repeats, a, b, arm_runs(aa_dirs))

    def decide(self, repeats: int, a: ArmRuns, b: ArmRuns, aa: ArmRuns | None = None) -> LookDecision | None:
        """:meth:`look` on the arms' runs (launch ids as recorded): pure but for the record it adds."""
        if repeats < self.design.min_repeats or self.recorded(repeats) is not None:
            return self.recorded(repeats)
        decision = decide_look_arms(self.design, repeats, a, b, aa)
        doc = _finite(asdict(decision))
        assert isinstance(doc, dict)
        entry = from_doc(LookDecision, {**doc, "n": decision.details.get("n")})
        self.looks.append(entry)
        self.looks.sort(key=lambda v: v.repeats)
        return entry

    # ------------------------------------------------------------------ the record
    def record(self, cost: Cost | None = None) -> SequentialRecord:
        """The ``sequential`` record: design, looks, outcome, and what stopping saved against running every
        repeat (``cost``: the arms' GPU-hours per repeat)."""
        last = self.last
        stopped = self.decided and last is not None
        saved = last.repeats_saved if stopped and last is not None else 0
        per_repeat = saved_gh = None
        if cost and self.repeats_run:
            per_repeat = (cost.a.gpu_hours + cost.b.gpu_hours) / self.repeats_run
            saved_gh = per_repeat * saved
        return SequentialRecord(
            design=asdict(self.design), estimator=ESTIMATOR, looks=list(self.looks), stopped=stopped,
            repeats_run=self.repeats_run, max_repeats=self.design.max_repeats,
            verdict=last.verdict if stopped and last else None, reason=last.reason if stopped and last else None,
            sentence=last.sentence if stopped and last else None, repeats_saved=saved,
            gpu_hours_per_repeat=per_repeat, gpu_hours_saved=saved_gh)


def apply_to_comparison(comparison: Comparison, record: SequentialRecord) -> Comparison:
    """A decided sequential run's verdict is the sequential decision: it becomes the comparison's
    ``verdict``, and ``test``, ``p``, ``test_alpha``, ``delta_ci`` and ``delta_df`` become those of the look that
    decided (its stage-wise p, repeated CI and t df), so every reader of comparison.json (and a sweep's
    adjustment) sees what decided; the fixed-design test of the same data is kept as ``verdict_fixed``,
    ``test_fixed``, ``p_fixed`` and ``delta_ci_fixed``. A comparison that is not comparable stays so, and the
    sequential verdict is never a claim that the fixed design's errors rule says request errors could change."""
    if not record.stopped or comparison.verdict == "not_comparable" or record.verdict is None:
        return replace(comparison, sequential=record)
    look = record.looks[-1] if record.looks else None
    verdict, reason, sentence = record.verdict, record.reason, record.sentence
    if comparison.errors.changes_verdict and verdict in ("improved", "regressed", "equivalent", "noninferior"):
        verdict, reason = "inconclusive", "errors"
        sentence = f"{record.sentence}; but {comparison.verdict_reason}"
    fixed = replace(comparison, sequential=replace(record, verdict=verdict, reason=reason, sentence=sentence),
                    verdict_fixed=comparison.verdict, verdict_reason_fixed=comparison.verdict_reason,
                    test_fixed=comparison.test, p_fixed=comparison.p, delta_ci_fixed=comparison.delta_ci,
                    verdict=verdict, verdict_reason=f"sequential design: {sentence}")
    if look is None or reason == "errors":
        return replace(fixed, test="error bounds at the looks (the decision recomputed with each arm's errored "
                                   "answers counted wrong)" if reason == "errors" else fixed.test,
                       p=None if reason == "errors" else fixed.p, test_alpha=None if reason == "errors" else
                       fixed.test_alpha)
    d = record.design
    alpha = float(d.get("alpha") or comparison.alpha)  # type: ignore[arg-type]
    margin_claim = verdict in ("equivalent", "noninferior") or (
        verdict == "inconclusive" and d.get("hypothesis") in ("equivalence", "noninferiority"))
    eq_alpha = d.get("alpha_equivalence")
    level = (float(eq_alpha) if isinstance(eq_alpha, int | float) else
             alpha / 2 if d.get("hypothesis") == "noninferiority" else alpha) if margin_claim else alpha
    df = look.details.get("df")
    return replace(fixed, test=SEQUENTIAL_TEST, p=look.p, test_alpha=level, p_floor=None,
                   delta_ci=look.repeated_ci if look.repeated_ci is not None else comparison.delta_ci,
                   delta_ci_method=SEQUENTIAL_CI if look.repeated_ci is not None else comparison.delta_ci_method,
                   delta_df=float(df) if isinstance(df, int | float) else None)
