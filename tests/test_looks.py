"""The looks of a sequential run (harness.looks) and the design printed before a run (harness.rundesign):
estimate from stored evals against an independent computation, decisions, resume from recorded looks,
refusal of a changed design, the comparison's verdict; launches per arm, passes and the cost trade-off."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from helpers.docs import comparison
from helpers.evals import make_eval
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness.analysis.cost import EvalTime, LaunchTime, run_cost
from harness.orchestrate.design import describe, format_design, times_from_cost
from harness.orchestrate.schedule import plan_launches
from harness.orchestrate.sequential import Looks, apply_to_comparison, arm_runs, design_of
from harness.results.schema import SequentialRecord
from harness.stats.group_sequential import SequentialDesign, stagewise_p
from harness.stats.launch_looks import decide_look_arms
from harness.stats.launches import ArmRuns
from harness.stats.launchvar import launch_aware_test


def _cfg(*overrides: str):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def look_estimate(a_dirs: list[Path], b_dirs: list[Path]):
    """The launch-aware estimate of B - A over stored evals, as a look reads them."""
    a, b = arm_runs(a_dirs), arm_runs(b_dirs)
    assert a is not None and b is not None
    return launch_aware_test(a, b, None)


def _by_launch(dirs: list[Path]) -> list[np.ndarray]:
    """An arm's evals grouped by the launch that served them: one (passes, n) matrix per launch."""
    arm = arm_runs(dirs)
    assert arm is not None
    ids = np.asarray(arm.launches)
    return [arm.scores[ids == k] for k in arm.launch_ids()]


def _evals(root: Path, rng: np.random.Generator, p_a: float, p_b: float, repeats: int, n: int = 300,
           shared_launch: bool = False) -> tuple[list[Path], list[Path], np.ndarray, np.ndarray]:
    """Repeats of both arms; question difficulty shared by the arms (so runs are paired)."""
    base = rng.uniform(0, 1, n)
    a_dirs, b_dirs, a_m, b_m = [], [], [], []
    for r in range(1, repeats + 1):
        a = base < p_a + rng.normal(0, 0.01, n)
        b = base < p_b + rng.normal(0, 0.01, n)
        la = "a-1" if shared_launch else f"a-{r}"
        a_dirs.append(make_eval(root / "a" / f"r{r}", a, launch=la))
        b_dirs.append(make_eval(root / "b" / f"r{r}", b, launch=f"b-{r}"))
        a_m.append(a)
        b_m.append(b)
    return a_dirs, b_dirs, np.array(a_m, float), np.array(b_m, float)


def test_design_of_the_config() -> None:
    d = design_of(hc.typed(hc.Config, _cfg("experiment.sequential=true", "experiment.max_repeats=6",
                                           "stats.spending=pocock", "stats.futility=false", "stats.margin_pp=0.5",
                                           "stats.min_effect_pp=0.3")))
    assert (d.max_repeats, d.min_repeats, d.spending, d.futility, d.margin, d.alpha) == (6, 2, "pocock", False,
                                                                                          0.005, 0.05)
    assert d.hypothesis == "superiority" and d.tests_margin  # with a margin it also tests equivalence
    assert d.min_effect == pytest.approx(0.003)


def test_estimate_matches_an_independent_computation(tmp_path: Path) -> None:
    a_dirs, b_dirs, am, bm = _evals(tmp_path, np.random.default_rng(1), 0.8, 0.85, 3)
    est = look_estimate(a_dirs, b_dirs)
    d = bm.mean(0) - am.mean(0)  # one pass per launch: per question the mean over launches
    assert est.n == am.shape[1] and est.delta == pytest.approx(d.mean())
    # the launch-aware estimate of the same scores, launches as the evals record them
    ref = launch_aware_test(ArmRuns(am, ("a-1", "a-2", "a-3")), ArmRuns(bm, ("b-1", "b-2", "b-3")))
    assert est.se == pytest.approx(ref.se) and est.df == pytest.approx(ref.df) and est.df_launch == 4


def test_passes_on_one_launch_are_averaged_first(tmp_path: Path) -> None:
    a_dirs, b_dirs, am, bm = _evals(tmp_path, np.random.default_rng(2), 0.8, 0.8, 2, shared_launch=True)
    est = look_estimate(a_dirs, b_dirs)
    assert est.delta == pytest.approx((bm.mean(0) - am.mean(0)).mean())  # equal weights here: same value
    assert (est.launches_a, est.launches_b, est.df_launch) == (1, 2, 1)  # A's two passes share one launch
    # one launch for A's two passes: A contributes one cluster (its mean), B two
    assert [m.shape[0] for m in _by_launch(a_dirs)] == [2] and [m.shape[0] for m in _by_launch(b_dirs)] == [1, 1]


def test_looks_decide_record_and_resume(tmp_path: Path) -> None:
    a_dirs, b_dirs, _, _ = _evals(tmp_path, np.random.default_rng(3), 0.70, 0.90, 4)
    design = SequentialDesign(max_repeats=6, min_repeats=2)
    looks = Looks(design)
    assert looks.look(1, a_dirs[:1], b_dirs[:1]) is None  # before min_repeats: no look
    first = looks.look(2, a_dirs[:2], b_dirs[:2])
    assert first is not None and first.stop and first.verdict == "improved" and first.reason == "efficacy"
    expected = decide_look_arms(design, 2, arm_runs(a_dirs[:2]), arm_runs(b_dirs[:2]))
    assert first.z == pytest.approx(expected.z) and first.bound == pytest.approx(expected.bound)
    # what decided is recorded: the stage-wise p (below α: it stopped), the repeated CI, the t boundary
    assert first.p == pytest.approx(stagewise_p(design, 2, first.z)) and first.p < 0.05
    assert first.repeated_ci[0] > 0 and first.details["bound_t"] >= first.bound
    assert first.details["errors"]["action"] == "none" and first.details["df_launch"] == 2
    assert looks.decided and not looks.wants(3) and looks.wants(2)
    cost = run_cost([LaunchTime(r, 60.0, 200.0, 8) for r in ("a", "b", "a", "b")],
                    [EvalTime(r, 100.0) for r in ("a", "b", "a", "b")])
    rec = looks.record(cost)
    assert rec.stopped and rec.repeats_run == 2 and rec.repeats_saved == 4 and rec.verdict == "improved"
    per = (cost.a.gpu_hours + cost.b.gpu_hours) / 2
    assert rec.gpu_hours_per_repeat == pytest.approx(per) and rec.gpu_hours_saved == pytest.approx(4 * per)
    # a new session continues from the recorded looks (the manifest's JSON): nothing is recomputed or wanted
    again = Looks(design, rec.to_doc())
    assert again.decided and again.look(2, [], []) == first and again.repeats_run == 2


def test_a_changed_design_is_refused_on_resume(tmp_path: Path) -> None:
    a_dirs, b_dirs, _, _ = _evals(tmp_path, np.random.default_rng(4), 0.8, 0.8, 2)
    looks = Looks(SequentialDesign(max_repeats=6, min_repeats=2))
    looks.look(2, a_dirs, b_dirs)
    with pytest.raises(hc.ConfigError, match="spending 'obf' -> 'pocock'"):
        Looks(SequentialDesign(max_repeats=6, min_repeats=2, spending="pocock"), looks.record().to_doc())


def test_an_undecided_run_continues(tmp_path: Path) -> None:
    a_dirs, b_dirs, _, _ = _evals(tmp_path, np.random.default_rng(5), 0.8, 0.8, 2)
    looks = Looks(SequentialDesign(max_repeats=6, min_repeats=2, margin=None))
    d = looks.look(2, a_dirs, b_dirs)
    assert d is not None and not d.stop and d.reason == "continue"
    assert looks.wants(3) and not looks.decided
    rec = looks.record()
    assert not rec.stopped and rec.verdict is None and rec.gpu_hours_saved is None


def test_the_sequential_decision_is_the_comparisons_verdict() -> None:
    rec = SequentialRecord(design={}, estimator="", looks=[], stopped=True, repeats_run=2, max_repeats=6,
                           verdict="improved", reason="efficacy",
                           sentence="improved after 2 of at most 6 repeats: ...", repeats_saved=4,
                           gpu_hours_per_repeat=None, gpu_hours_saved=None)
    c = apply_to_comparison(comparison(verdict="inconclusive", verdict_reason="p = 0.06"), rec)
    assert c.verdict == "improved" and c.verdict_fixed == "inconclusive"
    assert c.verdict_reason.startswith("sequential design: improved") and c.sequential == rec
    bad = apply_to_comparison(comparison(verdict="not_comparable", verdict_reason="errors"), rec)
    assert bad.verdict == "not_comparable" and bad.verdict_fixed is None


def _launch_runs(rng: np.random.Generator, n: int, repeats: int, fix: float, shift_sd: float = 0.0
                 ) -> tuple[ArmRuns, ArmRuns]:
    """A fresh launch of both arms per repeat: B fixes a share ``fix`` of the questions A gets wrong; each
    launch flips 3 % of answers and shifts accuracy by N(0, shift_sd)."""
    base = rng.random(n) < 0.8
    fixed = ~base & (rng.random(n) < fix / 0.2)

    def launch(right: np.ndarray) -> np.ndarray:
        flip = rng.random(n) < 0.03 + max(0.0, rng.normal(0, shift_sd))
        return np.where(flip, ~right, right).astype(float)

    a = np.vstack([launch(base) for _ in range(repeats)])
    b = np.vstack([launch(base | fixed) for _ in range(repeats)])
    return (ArmRuns(a, tuple(f"a-{r}" for r in range(repeats))),
            ArmRuns(b, tuple(f"b-{r}" for r in range(repeats))))


def _run(looks: Looks, a: ArmRuns, b: ArmRuns) -> list:
    out = []
    for r in range(1, looks.design.max_repeats + 1):
        lk = looks.decide(r, ArmRuns(a.scores[:r], a.launches[:r]), ArmRuns(b.scores[:r], b.launches[:r]))
        if lk is not None:
            out.append(lk)
            if lk.stop:
                break
    return out


def test_a_look_needs_the_declared_effect_on_its_repeated_ci() -> None:
    """A clear +3 pp effect stops early without a declared effect; declared at 5 pp it never stops as
    improved: the repeated CI does not exclude effects below 5 pp, and the last look says so."""
    a, b = _launch_runs(np.random.default_rng(11), 1000, 6, 0.03)
    plain = _run(Looks(SequentialDesign(max_repeats=6, min_repeats=2)), a, b)
    assert plain[-1].verdict == "improved" and plain[-1].repeats < 6
    assert plain[-1].repeated_ci[0] > 0 and plain[-1].p < 0.05
    strict = _run(Looks(SequentialDesign(max_repeats=6, min_repeats=2, min_effect=0.05, futility=False)), a, b)
    assert [lk.verdict for lk in strict] == [None] * (len(strict) - 1) + ["inconclusive"] and len(strict) == 5
    assert "does not exclude effects smaller than the declared 5.00 pp" in strict[-1].sentence
    assert strict[-1].repeated_ci[0] < 0.05


def test_a_look_never_claims_what_the_error_bounds_do_not_share() -> None:
    """B errs on 3 % of the questions A gets right (errors depend on the arm: the gate bounds): the
    +3 pp effect on the answered questions never stops the run as improved, since counting B's unanswered
    questions wrong makes it a regression; the last look is inconclusive because of errors."""
    a, b = _launch_runs(np.random.default_rng(12), 1000, 6, 0.03)
    right = np.flatnonzero(a.scores.mean(axis=0) > 0.9)[:30]
    bs = b.scores.copy()
    bs[:, right] = np.nan
    b = ArmRuns(bs, b.launches)
    looks = _run(Looks(SequentialDesign(max_repeats=6, min_repeats=2)), a, b)
    assert all(lk.verdict != "improved" for lk in looks)
    last = looks[-1]
    assert last.repeats == 6 and last.verdict == "inconclusive" and last.reason == "errors"
    assert last.details["errors"]["action"] == "bound" and last.details["errors"]["bounds"]["against_b"] != "improved"
    assert "request errors could change the verdict" in last.sentence


def test_the_decided_look_replaces_the_fixed_test_p_and_interval() -> None:
    a, b = _launch_runs(np.random.default_rng(11), 1000, 6, 0.03)
    looks = Looks(SequentialDesign(max_repeats=6, min_repeats=2))
    last = _run(looks, a, b)[-1]
    fixed = comparison(verdict="improved", verdict_reason="fixed", test="fixed test", p=1e-6, delta_ci=[0.01, 0.05])
    c = apply_to_comparison(fixed, looks.record())
    assert c.test.startswith("group-sequential launch-aware") and c.p == last.p and c.test_alpha == 0.05
    assert c.delta_ci == last.repeated_ci and c.delta_ci_method.startswith("repeated confidence interval")
    assert c.delta_df == pytest.approx(last.details["df"])
    assert (c.test_fixed, c.p_fixed, c.delta_ci_fixed) == ("fixed test", 1e-6, [0.01, 0.05])
    # the fixed design's errors rule says errors could change the verdict: the sequential claim does not stand
    errs = comparison(verdict="inconclusive", verdict_reason="request errors could change the verdict: ...",
                      errors={"changes_verdict": True})
    g = apply_to_comparison(errs, looks.record())
    assert g.verdict == "inconclusive" and g.sequential.reason == "errors" and g.p is None
    assert "request errors could change the verdict" in g.verdict_reason and g.verdict_fixed == "inconclusive"


def test_looks_of_another_estimator_are_refused() -> None:
    a, b = _launch_runs(np.random.default_rng(13), 300, 2, 0.0)
    looks = Looks(SequentialDesign(max_repeats=6, min_repeats=2))
    looks.decide(2, a, b)
    doc = {**looks.record().to_doc(), "estimator": "question-level paired z: ..."}
    with pytest.raises(hc.ConfigError, match="another estimator"):
        Looks(SequentialDesign(max_repeats=6, min_repeats=2), doc)


# ------------------------------------------------------------------------------------------ the design
@dataclass(frozen=True)
class It:
    role: str
    arm_key: str
    fresh: bool = False
    is_eval: bool = True


def _items(repeats: int, fresh: bool, aa: bool = True, aa_fresh: bool = True) -> list[It]:
    items = [it for r in range(repeats) for it in (It("a", "x", fresh), It("b", "y", fresh))]
    return items + ([It("aa", "x", fresh or aa_fresh)] * 2 if aa else [])


def test_launches_follow_the_server_pool_rules() -> None:
    # one server at a time, interleaved: every switch of arm is a launch, whatever restart_per_repeat says
    assert len(plan_launches(_items(3, False, aa=False), concurrent=False)) == 6
    # both up at once, reused: one launch per arm; fresh: one per repeat
    conc = plan_launches(_items(3, False, aa=False), concurrent=True)
    assert [lc.passes for lc in conc] == [3, 3]
    assert len(plan_launches(_items(3, True, aa=False), concurrent=True)) == 6
    # blocked order, reused: A's three repeats share one launch
    blocked = [It("a", "x")] * 3 + [It("b", "y")] * 3
    assert [lc.passes for lc in plan_launches(blocked, concurrent=False)] == [3, 3]


def test_design_states_the_launch_noise_trade_off_and_cost() -> None:
    reuse = describe(_items(3, False), concurrent=True, gpus={"a": 8, "b": 8, "aa": 8})
    assert reuse["roles"]["a"]["launch_noise"] == "not sampled" and reuse["roles"]["aa"]["launches"] == 2
    text = "\n".join(format_design(reuse, 3, restart_per_repeat=False))
    assert "trade-off: A and B each reuse one launch" in text and "restart_per_repeat=true" in text
    assert "expected cost: unknown" in text
    cost = run_cost([LaunchTime("a", 600.0, 1000.0, 8), LaunchTime("b", 600.0, 1000.0, 8)],
                    [EvalTime("a", 300.0), EvalTime("b", 300.0)])
    times = times_from_cost(cost)
    assert times is not None and times["a"] == {"launch_s": 600.0, "eval_s": 300.0, "stop_s": 100.0, "scoring_s": 0.0}
    fresh = describe(_items(3, True), concurrent=True, gpus={"a": 8, "b": 8, "aa": 8}, times=times,
                     sequential={"max_repeats": 3, "min_repeats": 2, "expected_if_null": 2.6})
    assert fresh["roles"]["a"] == {"launches": 3, "evals": 3, "passes_per_launch": 1, "launch_noise": "sampled"}
    assert fresh["expected"]["gpu_hours"] == pytest.approx(8 * 8 * 1000.0 / 3600)  # 8 launches, one pass each
    text = "\n".join(format_design(fresh, 3, restart_per_repeat=False))
    assert "sequential, at most 3 repeats" in text and "restart_per_repeat=false does not apply" in text
    assert f"{8 * 8 * 1000.0 / 3600:.2f} GPU-hours" in text and "about 2.6 repeats are expected" in text
