"""Compare stored evals of two arms: :func:`compare_dirs` -> :class:`harness.results.schema.Comparison`.

Pure of any command line (``abh compare`` is :mod:`harness.cli.compare`, ``abh power`` :mod:`harness.analysis.planning`).
Each ``--a``/``--b`` directory is one stored eval (``harness.results.eval_store``); several per arm are repeats. Each
eval's ``eval.json`` may name the server ``launch`` it ran on (``abh run`` records it); evals without one
are each their own launch. Questions are aligned by index.

The statistics are :func:`harness.stats.compare_arms` (see :mod:`harness.stats.accuracy`): per question,
each arm's mean over its runs (passes averaged within a launch first, then launches; an errored run is
skipped, so a question uses the runs it has), d_i = B_i - A_i, and

- the verdict's test: the launch-aware t-test of Δ = mean d_i, its launch variance estimated from every launch
  of A, of the A/A control (``--aa``) and of B (``launch_variance`` says from which, ``delta_df`` its df); with
  one launch per configuration the question-level test (mid-p sign-flip and Tango score), and the verdict
  is qualified ("valid only if launches do not shift accuracy", ``qualification``);
- the interval ``delta_ci`` (level 1 - α) inverts that test: ``p < α`` exactly when 0 is outside it; TOST /
  non-inferiority (``--margin``) use the same statistic;
- the MDE of that test at 80 % power (the t approximation; exact binomial sums for the question-level test);
- errors: each arm's error rate, and the gate ``errors.gate``: when the errors do not depend on the arm
  (exact McNemar test of the unanswered indicators) the questions unanswered in either arm are left out;
  when they do, the verdict is recomputed with one arm's unanswered questions counted wrong and the other's
  right (both ways) and is ``inconclusive`` if that changes it. Above ``max_error_rate`` the arms are
  ``not_comparable``.

``test`` and ``p`` are the test and p-value that decided the verdict (the superiority test, the TOST or the
non-inferiority test, compared with ``test_alpha``); other p-values are under ``diagnostics`` only.

Refused (exit 2): evals of different datasets, recipes or question indices (the first differing field is
named, e.g. ``recipe.num_questions: 1319 vs 100``) and the same eval directory given twice (on both sides,
twice for one arm, or also as ``--aa``).

ψ_AA (A/A discordance): each arm's mean discordance between its own runs (A together with the ``--aa``
runs), pooled evenly over the arms; labelled by whether the pairs span launches (only then does it
include launch-to-launch noise).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness import exitcodes, stats
from harness.analysis import determinism, identity
from harness.analysis.compare_settings import CompareError, settings_problem
from harness.analysis.launch_ids import NOTES, launch_ids
from harness.results import schema
from harness.results.eval_store import ScoredEval, StoreError, load_scored
from harness.results.records import JSON
from harness.results.schema import ArmResult, Arms, Comparison, EvalMeta, EvalSummary, IdenticalOutputs
from harness.stats.accuracy import Analysis
from harness.stats.verdict import ALPHA, DEFAULT_MAX_ERROR_RATE, IDENTICAL
from harness.tasks.row_check import row_check

KIND = schema.COMPARISON
SCHEMA_VERSION = schema.WRITES[KIND]
IDENTITY_KEYS = ("dataset_sha256", "recipe", "indices")


class IncomparableEvals(CompareError):
    """The evals asked different things (dataset, recipe or questions: e.g. servers of different models)."""


# ------------------------------------------------------------------------------------------ loading
def _load_run(path: Path) -> ScoredEval:
    """One eval directory with its scores (CompareError when it cannot be read or lacks its identity)."""
    try:
        run = load_scored(path, row_check)  # every row's claims checked against its question
    except StoreError as e:
        raise CompareError(f"cannot read eval {path}: {e}") from None
    missing = [k for k in IDENTITY_KEYS if k not in run.meta]
    if missing:
        raise CompareError(f"{path}/eval.json lacks {', '.join(missing)}")
    return run


def _short(v: Any, width: int = 40) -> str:
    s = json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else v
    return s if len(s) <= width else s[:width - 1] + "…"


def _first_difference(x: Any, y: Any, path: str) -> str | None:
    """The first place where x and y differ, as ``path.key: x vs y`` (None when equal)."""
    if x == y:
        return None
    if isinstance(x, dict) and isinstance(y, dict):
        for k in sorted(set(x) | set(y), key=str):
            if k not in x or k not in y:
                return (f"{path}.{k}: {_short(x[k]) if k in x else '(absent)'} vs "
                        f"{_short(y[k]) if k in y else '(absent)'}")
            diff = _first_difference(x[k], y[k], f"{path}.{k}")
            if diff:
                return diff
    if isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            return f"{path}: {len(x)} vs {len(y)} entries"
        for i, (u, v) in enumerate(zip(x, y, strict=True)):
            diff = _first_difference(u, v, f"{path}[{i}]")
            if diff:
                return diff
    return f"{path}: {_short(x)} vs {_short(y)}"


def _check_same_questions(runs: Sequence[ScoredEval]) -> None:
    ref = runs[0]
    for r in runs[1:]:
        for key in IDENTITY_KEYS:
            diff = _first_difference(ref.meta.get(key), r.meta.get(key), key)
            if diff:
                what = {"dataset_sha256": "dataset", "recipe": "recipe", "indices": "question set"}[key]
                raise IncomparableEvals(
                    f"refusing to compare: {ref.dir} and {r.dir} have a different {what} ({diff}); "
                    "only runs of the same dataset, recipe and question indices are comparable")


def _check_distinct(a_dirs: Sequence[Path], b_dirs: Sequence[Path], aa_dirs: Sequence[Path]) -> None:
    """Refuse an eval directory given twice: comparing a run with itself, or counting it twice as repeats."""
    seen: dict[Path, str] = {}
    for arm, dirs in (("--a", a_dirs), ("--b", b_dirs), ("--aa", aa_dirs)):
        for p in dirs:
            key = Path(p).resolve()
            if key in seen:
                raise CompareError(
                    f"refusing to compare: eval {p} is given twice ({seen[key]} and {arm}); comparing a run "
                    "with itself, or counting it twice as a repeat, is a mistake — give distinct eval directories")
            seen[key] = arm


def _arm_failed(src: Any) -> bool:
    return src.get("failed") is True or src.get("arm_failed") is True or src.get("status") == "failed"


def _side_check_failed(src: Any) -> bool:
    side = src.get("side_check")
    return src.get("side_check_passed") is False or (isinstance(side, dict) and side.get("passed") is False)


def _failures(run: ScoredEval, arm: str) -> list[str]:
    """Reasons why a run cannot be used, from eval.json / summary.json.

    Recognised: ``failed: true``, ``status: "failed"`` or ``arm_failed: true`` (the arm failed) and
    ``side_check_passed: false`` or ``side_check: {"passed": false}`` (its side assertion failed), in
    either file.
    """
    out: list[str] = []
    for src in (run.meta, run.summary or {}):
        if _arm_failed(src):
            out.append(f"arm {arm} failed ({run.dir})")
        if _side_check_failed(src):
            out.append(f"side check of arm {arm} failed ({run.dir})")
    return sorted(set(out))


def failure_exit(meta: EvalMeta, summary: EvalSummary | None) -> int:
    """The exit code ``abh run`` gives the failure an eval records (0 when none): a failed side check is 3
    (side assertion failed), a failed arm 4 (server failure)."""
    srcs = (meta, summary or {})
    if any(_side_check_failed(s) for s in srcs):
        return exitcodes.SIDE_ASSERTION_FAILED
    if any(_arm_failed(s) for s in srcs):
        return exitcodes.SERVER_FAILURE
    return exitcodes.OK


def _is_simulated(run: ScoredEval) -> bool:
    return bool(run.meta.get("simulated")) or bool((run.summary or {}).get("simulated"))


def _pair(lo_hi: tuple[float, float] | tuple[np.ndarray, np.ndarray]) -> list[float]:
    return [float(lo_hi[0]), float(lo_hi[1])]


# ------------------------------------------------------------------------------------------ comparison
def _arm(runs: Sequence[ScoredEval], launches: Sequence[str]) -> stats.ArmRuns:
    return stats.ArmRuns(np.vstack([r.scores for r in runs]), tuple(launches))


def _count(x: float) -> float:
    """A table count: whole when it is (one run per arm, or verbatim repeats), else a fraction."""
    return int(round(x)) if abs(x - round(x)) < 1e-9 else float(x)


def _table(am: np.ndarray, bm: np.ndarray) -> dict[str, float]:
    """The paired table of per-question arm means (question mass; whole counts for one run per arm).
    The four counts sum to n exactly and Δ = (b_only - a_only) / n."""
    both, a_only = _count(float(np.minimum(am, bm).sum())), _count(float(np.maximum(am - bm, 0).sum()))
    b_only = _count(float(np.maximum(bm - am, 0).sum()))
    return {"both": both, "a_only": a_only, "b_only": b_only, "neither": _count(am.size - (both + a_only + b_only))}


def _basis(v: stats.Verdict, res: Analysis, alpha: float) -> tuple[str | None, float | None, float | None]:
    """(test, p, level it was compared with) of the claim that decided the verdict."""
    t = res.tost
    method = "launch-aware t-test" if res.unit == "launch-aware" else "Tango score test"
    if v.basis == "equivalence" and t is not None:
        return f"TOST ({method}, ±margin)", t.p_equivalence, alpha
    if v.basis == "noninferiority" and t is not None:
        return f"non-inferiority ({method}, one-sided at -margin)", t.p_noninferiority, alpha / 2
    if v.basis == "superiority":
        return res.test, res.p, alpha
    if v.basis == "errors":
        return "error bounds (the verdict recomputed with each arm's errored answers counted wrong)", None, None
    return None, None, None


def _diagnostics(res: Analysis, A: stats.ArmRuns, B: stats.ArmRuns, alpha: float, n_resamples: int,
                 seed: int, psi_aa: float | None, r_eff: float) -> dict[str, JSON]:
    """Secondary figures, for reading: none of them decided the verdict."""
    n, d, keep = res.n, res.d, res.keep
    a1, b1 = A.scores[0][keep], B.scores[0][keep]
    ok = ~(np.isnan(a1) | np.isnan(b1))
    t1 = stats.paired_table(a1[ok].astype(bool), b1[ok].astype(bool))
    psi = float(np.abs(d).mean())
    q = stats.consistent_paired(d, alpha)
    out: dict[str, JSON] = {
        "note": "secondary figures for reading; the verdict rests on `test` and `p` only",
        "mcnemar_first_runs": {"table": dict(t1.as_dict()), "exact_p": float(stats.mcnemar_exact(t1.a_only, t1.b_only)),
                               "midp": float(stats.mcnemar_midp(t1.a_only, t1.b_only))},
        "effective_table": {k: float(v) for k, v in res.table.items()},
        # the question-level test (no launch component): what the verdict would rest on if launches never shifted
        "question_level": {"p": q.p, "p_signflip": q.p_signflip, "p_score": q.p_score, "ci": list(q.ci),
                           "ci_tango": list(q.ci_tango)},
        "delta_ci_bootstrap_bca": _pair(stats.paired_bootstrap_ci(res.a_means, res.b_means, alpha,
                                                                  n_resamples, "bca", seed=seed)),
        "delta_ci_bootstrap_percentile": _pair(stats.paired_bootstrap_ci(res.a_means, res.b_means, alpha,
                                                                         n_resamples, "percentile", seed=seed)),
        "mde_normal_paired": stats.mde_paired(n, psi, alpha) if psi > 0 else None,
        "mde_normal_repeats": stats.mde_repeats(n, psi_aa, r_eff, alpha) if psi_aa else None,
    }
    if res.signflip is not None:
        out["signflip_exact_p"] = float(stats.signflip_test(d, mid_p=False).p)
    lv = res.launch
    if lv is not None and lv.df_launch > 0:
        out["launch_aware"] = {"t": lv.t, "df": lv.df, "se": lv.se, "var_noise": lv.var_noise,
                               "sigma2_launch": lv.sigma2_launch}
    return out


#: what the per-arm and paired bootstrap intervals resample (they predate the launch-aware one)
BOOTSTRAP_QUESTIONS = "question-only: questions resampled, launch-to-launch variation not in the interval"
LAUNCH_BOOTSTRAP_METHOD = ("two-level cluster bootstrap: each arm's launches (deviations scaled by sqrt(L/(L-1))), "
                           "then questions (paired), percentile interval widened by t(df)/z")


def _launch_bootstrap(res: Analysis, A: stats.ArmRuns, B: stats.ArmRuns, AA: stats.ArmRuns | None, alpha: float,
                      n_resamples: int, seed: int) -> stats.LaunchBootstrap | None:
    """The two-level bootstrap beside the verdict's interval (None without a configuration of two launches)."""
    lv = res.launch
    if lv is None or lv.df_launch == 0:
        return None
    return stats.launch_bootstrap(A, B, AA, res.keep, lv.df, alpha, n_resamples,
                                  seed=np.random.default_rng([seed, 1]))


def _launch_bootstrap_block(lb: stats.LaunchBootstrap | None) -> dict[str, JSON]:
    if lb is None:
        return {"delta_ci_bootstrap_launch": None,
                "delta_ci_bootstrap_launch_method": "none: no configuration has two launches to resample"}
    return {"delta_ci_bootstrap_launch": _pair(lb.delta), "delta_ci_bootstrap_launch_method": LAUNCH_BOOTSTRAP_METHOD,
            "delta_ci_bootstrap_launch_source": lb.source,
            "delta_ci_bootstrap_scope": BOOTSTRAP_QUESTIONS + " (delta_ci_bootstrap_bca, _percentile)"}


def compare_dirs(a_dirs: Sequence[Path], b_dirs: Sequence[Path], margin: float | None = None,
                 alpha: float = ALPHA, seed: int = 0, *, aa_dirs: Sequence[Path] = (),
                 max_error_rate: float = DEFAULT_MAX_ERROR_RATE, min_effect: float | None = None,
                 n_resamples: int = 10_000, failures: Sequence[str] = (),
                 hypothesis: str = "superiority", assume_no_launch_shift: bool = False,
                 launches_from_passes: bool = False) -> Comparison:
    """The comparison of arm B against arm A (the content of comparison.json; proportions as fractions).

    ``hypothesis`` is the question asked: superiority | noninferiority | equivalence (the last two need
    ``margin``, a fraction); ``min_effect`` (fraction) is the declared practical effect an improved /
    regressed verdict must be shown to exceed; ``failures`` are extra not-comparable reasons from the
    caller (e.g. a runner that knows an arm failed). ``assume_no_launch_shift``: the user states that launches
    do not shift accuracy (recorded in ``assumptions``; the gate then acts on an instances-only verdict);
    ``launches_from_passes``: evals without a launch id each ran on a launch of their own
    (:mod:`harness.analysis.launch_ids`).
    """
    if not a_dirs or not b_dirs:
        raise CompareError("need at least one eval directory per arm (--a and --b)")
    wrong = settings_problem(hypothesis, margin, min_effect, alpha, max_error_rate)
    if wrong is not None:
        raise wrong
    _check_distinct(a_dirs, b_dirs, aa_dirs)
    a_runs = [_load_run(Path(p)) for p in a_dirs]
    b_runs = [_load_run(Path(p)) for p in b_dirs]
    aa_runs = [_load_run(Path(p)) for p in aa_dirs]
    return compare_runs(a_runs, b_runs, aa_runs, margin=margin, alpha=alpha, seed=seed,
                        max_error_rate=max_error_rate, min_effect=min_effect, n_resamples=n_resamples,
                        failures=failures, hypothesis=hypothesis, assume_no_launch_shift=assume_no_launch_shift,
                        launches_from_passes=launches_from_passes)


def compare_runs(a_runs: Sequence[ScoredEval], b_runs: Sequence[ScoredEval], aa_runs: Sequence[ScoredEval] = (),
                 *, margin: float | None = None, alpha: float = ALPHA, seed: int = 0,
                 max_error_rate: float = DEFAULT_MAX_ERROR_RATE, min_effect: float | None = None,
                 n_resamples: int = 10_000, failures: Sequence[str] = (), hypothesis: str = "superiority",
                 assume_no_launch_shift: bool = False, launches_from_passes: bool = False) -> Comparison:
    """:func:`compare_dirs` of evals already read (its settings checked): everything after the loading."""
    a_runs, b_runs, aa_runs = list(a_runs), list(b_runs), list(aa_runs)
    _check_same_questions(a_runs + b_runs + aa_runs)
    first = a_runs[0]
    indices = first.questions if first.questions is not None else np.asarray(first.meta["indices"])
    n_total = int(indices.size)
    (a_ids, b_ids), missing_ids = launch_ids([a_runs + aa_runs, b_runs], launches_from_passes)
    A, B = _arm(a_runs, a_ids[:len(a_runs)]), _arm(b_runs, b_ids)
    AA = _arm(aa_runs, a_ids[len(a_runs):]) if aa_runs else None

    fails = list(failures)
    for r in a_runs + aa_runs:
        fails += _failures(r, "A")
    for r in b_runs:
        fails += _failures(r, "B")
    try:
        # the no-op question is decided on the outputs (identity, below); the accuracy beside it is superiority's
        cmp = stats.compare_arms(A, B, aa=AA, hypothesis="superiority" if hypothesis == IDENTICAL else hypothesis,
                                 alpha=alpha, margin=margin,
                                 min_effect=min_effect, failures=fails, max_error_rate=max_error_rate)
    except ValueError as e:
        raise too_few_answered(e, A, B, n_total, max_error_rate) from None
    res, v = cmp.analysis, cmp.verdict
    qualification = res.qualification
    if missing_ids is not None:  # how the launches were counted is part of what the verdict rests on
        note = NOTES[missing_ids]
        qualification = f"{note}; {qualification}" if qualification else note
        if v.word != "not_comparable":
            v = stats.Verdict(v.word, f"{v.reason}; {note}", v.basis)
    n, keep = res.n, res.keep
    seeds = np.random.default_rng(seed).integers(0, 2**32, size=3)

    boot = _launch_bootstrap(res, A, B, AA, alpha, n_resamples, seed)
    table = _table(res.a_means, res.b_means)
    psi = float(np.abs(res.d).mean())
    aa_blk = stats.psi_aa_block(A if AA is None else A.concat(AA), B, psi, n)
    la, lb = res.design.launches["a"], res.design.launches["b"]
    r_eff = stats.effective_repeats(la, lb)
    psi_aa = aa_blk.psi_aa
    noise = stats.noise_band(psi_aa, n, la, lb, alpha) if psi_aa is not None else None
    test, p, test_alpha = _basis(v, res, alpha)
    ident = _identical_outputs(a_runs + aa_runs, b_runs, a_ids, b_ids)
    out = Comparison(
        simulated=any(_is_simulated(r) for r in a_runs + b_runs + aa_runs), hypothesis=hypothesis,
        verdict=v.word, verdict_reason=v.reason, test=test, p=p, test_alpha=test_alpha,
        p_floor=res.p_floor if v.basis == "superiority" else None,
        n=n, n_total=n_total, dropped_errors=n_total - n, error_rate=cmp.error_rate,
        error_rate_per_run={str(r.dir): float(np.isnan(r.scores).mean()) if n_total else 0.0
                            for r in a_runs + b_runs},
        max_error_rate=max_error_rate, error_rate_exceeded=bool(cmp.error_rate > max_error_rate),
        errors=cmp.errors, failures=sorted(set(fails)), alpha=alpha, seed=seed, n_resamples=n_resamples,
        dataset_sha256=a_runs[0].meta.get("dataset_sha256"), recipe=a_runs[0].meta.get("recipe"),
        design=res.design,
        arms=Arms(a=_arm_result(A, res.a_means, a_runs, keep, alpha, n_resamples, int(seeds[0]),
                                boot.a if boot else None),
                  b=_arm_result(B, res.b_means, b_runs, keep, alpha, n_resamples, int(seeds[1]),
                                boot.b if boot else None)),
        aa_dirs=[str(r.dir) for r in aa_runs],
        table_source=("one run per arm" if A.n_runs == 1 and B.n_runs == 1 else
                      "per-question means over each arm's runs (counts are question mass)"),
        both=table["both"], a_only=table["a_only"], b_only=table["b_only"], neither=table["neither"],
        psi=psi, delta=res.delta, delta_se=res.se, delta_ci=res.ci, delta_ci_level=1 - alpha,
        delta_ci_method=res.ci_method,
        delta_ci_unpaired=_pair(stats.unpaired_diff_ci(res.a_means.sum(), n, res.b_means.sum(), n, alpha)),
        psi_aa=psi_aa, psi_aa_per_arm=aa_blk.per_arm, psi_aa_source=aa_blk.source, identical_outputs=ident,
        noise_band=[-noise, noise] if noise is not None else None, repeats_effective=r_eff, mde=res.mde,
        mde_method=(f"exact power (80 %) of the mid-p sign-flip test at α = {alpha:g}" if res.unit == "question"
                    else f"t approximation (80 %) for the launch-aware t-test ({res.df:.1f} df) at α = {alpha:g}")
                   + (" plus the error bounds' shift of Δ" if cmp.errors.mde_allowance else ""),
        mde_unpaired=stats.mde_unpaired(n, float((res.a_means.mean() + res.b_means.mean()) / 2), alpha),
        detectable_floor=stats.mde_floor(n, alpha),
        margin=margin, min_effect=min_effect, tost=res.tost,
        warnings=[w for w in (aa_blk.warning,) if w] + determinism.warnings(ident),
        flips=[int(i) for i in indices[keep][res.d != 0]],
        diagnostics={**_diagnostics(res, A, B, alpha, n_resamples, int(seeds[2]), psi_aa, r_eff),
                     **_launch_bootstrap_block(boot),
                     # whole questions (the table's cells are question mass with repeats)
                     "questions_better": {"a": int((res.d < 0).sum()), "b": int((res.d > 0).sum()),
                                          "same": int((res.d == 0).sum())}},
        qualification=qualification, delta_df=res.df, launch_variance=res.launch_variance,
        instances_only=res.unit == "question",
        assumptions=[NO_LAUNCH_SHIFT] if assume_no_launch_shift else [],
        launch_ids_missing=missing_ids,
    )
    if hypothesis != IDENTICAL:
        return out
    return identity.apply(out, identity.prove_dirs([r.dir for r in a_runs], [r.dir for r in b_runs],
                                                   [r.dir for r in aa_runs], alpha=alpha))


def _arm_result(arm: stats.ArmRuns, means: np.ndarray, runs: list[ScoredEval], keep: np.ndarray, alpha: float,
                n_resamples: int, seed: int, launch_ci: tuple[float, float] | None) -> ArmResult:
    """One arm of the comparison over the compared questions ``keep`` (``means``: its per-question means)."""
    acc, n = float(means.mean()), int(keep.sum())
    per_run = [float(np.nanmean(x)) if np.isfinite(x).any() else None for x in arm.scores[:, keep]]
    return ArmResult(accuracy=acc, wilson=_pair(stats.wilson_interval(acc * n, n, alpha)),
                     bootstrap=_pair(stats.accuracy_bootstrap_ci(means, alpha, n_resamples, seed=seed)),
                     repeats=per_run, n_runs=arm.n_runs, launches=list(arm.launches),
                     error_rate=float(np.isnan(arm.scores).mean()), dirs=[str(r.dir) for r in runs],
                     bootstrap_kind=BOOTSTRAP_QUESTIONS, bootstrap_launch=_pair(launch_ci) if launch_ci else None)


def _identical_outputs(a_runs: list[ScoredEval], b_runs: list[ScoredEval], a_ids: Sequence[str],
                       b_ids: Sequence[str]) -> IdenticalOutputs:
    """Each arm's share of identical outputs across its passes (``a_runs``: A's and the A/A control's)."""
    # abh's GSM8K recipes are greedy: an eval that does not record its temperature ran at 0
    temps = {r.meta.get("temperature", 0.0) for r in a_runs + b_runs}
    return determinism.identical_outputs({"a": [(lid, r.outputs) for lid, r in zip(a_ids, a_runs, strict=True)],
                                          "b": [(lid, r.outputs) for lid, r in zip(b_ids, b_runs, strict=True)]},
                                         temps.pop() if len(temps) == 1 else None)


#: ``assumptions`` entry of ``--assume-no-launch-shift`` (``stats.assume_no_launch_shift``)
NO_LAUNCH_SHIFT = "no_launch_shift"


class TooFewAnswered(CompareError):
    """Fewer than two questions answered by both arms; ``exit_code`` says whether request errors (5: not
    comparable) or the evals themselves (2: fewer than two questions asked) are why."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def too_few_answered(e: ValueError, a: stats.ArmRuns, b: stats.ArmRuns, n_total: int,
                     max_error_rate: float) -> CompareError:
    """Why the arms cannot be compared when the statistics refuse (fewer than two questions both answered)."""
    if n_total < 2:
        return TooFewAnswered(f"the evals hold {n_total} question(s): a paired comparison needs at least two "
                              "(ask for more questions)", exitcodes.BAD_CONFIG)
    rates = {name: float(np.isnan(arm.scores).mean()) for name, arm in (("A", a), ("B", b))}
    if max(rates.values()) > 0:
        worst = max(rates, key=lambda k: rates[k])
        both = int((np.isfinite(a.scores).any(axis=0) & np.isfinite(b.scores).any(axis=0)).sum())
        return TooFewAnswered(f"only {both} question(s) answered by both arms: {100 * rates[worst]:.2f} % of arm "
                              f"{worst}'s answers were lost to request errors (--max-error-rate "
                              f"{100 * max_error_rate:g} %); the arms are not comparable", exitcodes.TOO_MANY_ERRORS)
    return CompareError(str(e))


def _pp(x: float | None, signed: bool = True) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:+.2f}" if signed else f"{100 * x:.2f}"


def _ci(ci: list[float] | None) -> str:
    return "n/a" if ci is None else f"[{_pp(ci[0])}, {_pp(ci[1])}] pp"


def _effect(x: float | None) -> str:
    """A detectable effect in pp; past 100 pp (or infinite) none is detectable, said so instead of "inf pp"."""
    if x is None:
        return "n/a"
    return "none (no effect up to 100 pp is detectable)" if not math.isfinite(x) or x > 1 else f"{_pp(x, False)} pp"


def _questions(c: Comparison) -> str:
    """The paired questions in whole questions (with repeats: on how many each arm was right more often)."""
    if c.table_source == "one run per arm":
        return f"questions: both right {c.both:g}, only A {c.a_only:g}, only B {c.b_only:g}, neither {c.neither:g}"
    better = c.diagnostics.get("questions_better")
    if isinstance(better, dict):
        return (f"questions: A right more often on {better.get('a')}, B on {better.get('b')}, the same on "
                f"{better.get('same')} (each question's share of right answers over its arm's repeats)")
    return (f"questions (question mass: each question's share of right answers over its arm's repeats): only A "
            f"{c.a_only:.1f}, only B {c.b_only:.1f}")


def _margin_line(c: Comparison) -> str:
    """The margin's interval, and what it shows only where the verdict asks it: beside a significant difference
    it shows nothing the verdict does not (never "not shown equivalent" under IMPROVED)."""
    t = c.tost
    assert t is not None
    head = f"margin ±{_pp(t.margin, False)} pp: {100 * t.ci_level:g} % interval {_ci(t.ci)}"
    if c.verdict == "improved":
        return head + "; the gain is significant: the margin is not needed"
    if c.verdict == "regressed":
        return head + ("; the loss stays within the margin" if t.noninferior else "; the loss exceeds the margin")
    if c.hypothesis == "noninferiority":
        return head + ("; non-inferior" if t.noninferior else "; non-inferiority not shown")
    return head + ("; equivalent" if t.equivalent else "; non-inferior, equivalence not shown" if t.noninferior
                   else "; neither equivalence nor non-inferiority shown")


def format_summary(c: Comparison) -> str:
    """A readable summary of a comparison, in percentage points: the verdict, the test and the p that
    decided it, the interval at the level α sets, the design and what it cannot resolve."""
    a, b = c.arms.a, c.arms.b
    level = f"{100 * (1 - c.alpha):g} %"
    lines = []
    if c.simulated:
        lines.append("*** SIMULATED: results come from the simulated engine, not a real server ***")
    d = c.design
    lines.append(f"design: {d.kind} (launches A {d.launches['a']}, B {d.launches['b']}; passes per launch "
                 f"A {d.passes_per_launch['a']}, B {d.passes_per_launch['b']}); unit of inference: {d.unit}")
    lv = c.launch_variance
    if lv is not None and lv.sd is not None:
        zero = round(100 * lv.sd, 2) == 0  # said as none, beside the t reference that still carries its df
        lines.append(f"  launch variance: {'none measurable (estimated ' if zero else ''}sd {_pp(lv.sd, False)} pp "
                     f"per launch{')' if zero else ''}; {lv.source}"
                     + ("; the t reference still carries the uncertainty of that estimate" if zero else ""))
    if d.cannot_resolve:
        lines.append(f"  cannot resolve: {d.cannot_resolve}")
    if c.launch_ids_missing:
        lines.append(f"  {NOTES[c.launch_ids_missing]}")
    if c.instances_only and c.verdict != "not_comparable":
        lines.append("  scope: the verdict is about these two server instances only; " + (
            "assumed (--assume-no-launch-shift): launches do not shift accuracy, so it stands for the "
            "configurations" if NO_LAUNCH_SHIFT in c.assumptions else
            "--fail-on acts on it only with --assume-no-launch-shift"))
    lines.append(f"questions: {c.n} compared of {c.n_total} ({c.dropped_errors} without an answer from "
                 f"both arms); runs: A {a.n_runs}, B {b.n_runs}")
    for name, arm in (("A", a), ("B", b)):
        lines.append(f"  {name}: accuracy {_pp(arm.accuracy, False)} %  Wilson "
                     f"[{_pp(arm.wilson[0], False)}, {_pp(arm.wilson[1], False)}]  errors "
                     f"{_pp(arm.error_rate, False)} %")
    lines.append(f"  {_questions(c)}; psi {_pp(c.psi, False)} %")
    lines.append(f"  delta (B - A) {_pp(c.delta)} pp; {level} CI {_ci(c.delta_ci)} ({c.delta_ci_method})")
    if c.psi_aa is not None and c.noise_band is not None:
        lines.append(f"  A/A: psi_AA {_pp(c.psi_aa, False)} % ({c.psi_aa_source}), noise band of delta "
                     f"±{_pp(c.noise_band[1], False)} pp")
    if c.identity is not None:
        lines += [f"  {line}" for line in identity.detail(c.identity)]
    identical = determinism.summary_line(c.identical_outputs or {})
    if identical:
        lines.append(f"  {identical}")
    if c.mde is not None:
        lines.append(f"  detectable effect (80 % power): {_effect(c.mde)} ({c.mde_method})")
    if c.tost is not None:
        lines.append(f"  {_margin_line(c)}")
    e = c.errors
    if e.rate_a > 0 or e.rate_b > 0:
        line = f"  errors: A {_pp(e.rate_a, False)} %, B {_pp(e.rate_b, False)} %"
        if e.gate is not None and e.gate.action != "none":
            line += f"; {e.gate.action}: {e.gate.reason}"
        if e.bounds:
            line += (f"; verdict if errors counted against B / against A: {e.bounds.against_b.verdict} / "
                     f"{e.bounds.against_a.verdict}")
        lines.append(line)
    for w in c.warnings:
        lines.append(f"  warning: {w}")
    if c.p is not None:
        lines.append(f"test: {c.test}, {stats.format_p(c.p, c.p_floor)} (α = {c.test_alpha:g})")
    elif c.test is not None:
        lines.append(f"decided by: {c.test}")
    lines.append(f"why: {c.verdict_reason}")  # the verdict itself is the headline (harness.report.headline)
    return "\n".join(lines)
