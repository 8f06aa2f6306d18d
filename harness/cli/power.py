"""``abh power``: the repeats and GPU-hours to detect an effect, from a finished run (``--from``) or from numbers
(``--n --p ...``); the plan itself is :mod:`harness.analysis.planning`'s."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.analysis import planning
from harness.cli.flags import HelpFormatter
from harness.stats import group_sequential as sq


def _effect_fraction(ap: argparse.ArgumentParser, pp: float, n: int | None) -> float:
    if not math.isfinite(pp) or pp <= 0 or pp >= 100:
        ap.error(f"--effect is in percentage points, in (0, 100): got {pp}")
    e = pp / 100
    if n is not None and e * n < 0.5:
        ap.error(f"--effect {pp:g} pp is {e * n:.2g} of {n} questions, less than half a question; --effect is in "
                 f"percentage points (0.3 means 0.3 pp)")
    return e


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="abh power",
                                 description="Repeats and GPU-hours needed to detect an effect (fixed and "
                                             "sequential designs), or the MDE of a design.",
                                 formatter_class=HelpFormatter)
    ap.add_argument("--from", dest="run_dir", type=Path, default=None, metavar="RUN_DIR",
                    help="a finished run directory to plan from (its noise, times and GPUs)")
    ap.add_argument("--n", type=int, default=None, help="questions per run (without --from)")
    ap.add_argument("--p", type=float, default=None, help="accuracy, a fraction (without --from)")
    ap.add_argument("--discordance", type=float, default=None, metavar="PSI",
                    help="run-to-run discordance ψ (A/A, a fraction) (without --from)")
    ap.add_argument("--repeats", type=int, default=None, metavar="R", help="runs per arm, for its MDE")
    ap.add_argument("--effect", type=float, default=None, metavar="PP", help="effect to detect, percentage points")
    ap.add_argument("--launch-sd", type=float, default=None, metavar="PP",
                    help="assumed sd of a launch's accuracy shift, percentage points (default: measured by --from's "
                         "run, else 0, a lower bound)")
    ap.add_argument("--aa-launches", type=int, default=None, metavar="N",
                    help="A/A control launches in the planned design (default: --from's run's, else 0)")
    ap.add_argument("--alpha", type=float, default=None, help="level (default: the run's stats.alpha, else 0.05)")
    ap.add_argument("--power", type=float, default=0.8, help="probability of detecting the effect, a fraction")
    ap.add_argument("--launch-s", type=float, default=None, help="seconds from spawn to ready per launch")
    ap.add_argument("--eval-s", type=float, default=None, help="seconds per eval")
    ap.add_argument("--gpus", type=int, default=None, help="GPUs per arm's server")
    ap.add_argument("--min-repeats", type=int, default=1, help="sequential: first look after this many repeats")
    ap.add_argument("--spending", choices=sq.SPENDING, default="obf", help="sequential alpha spending")
    ap.add_argument("--no-futility", action="store_true", help="sequential: never stop for futility")
    ap.add_argument("--json", action="store_true", help="print the plan as JSON (fractions, and effect_pp)")
    return ap


def power_main(argv: Sequence[str] | None = None) -> int:
    """``abh power``: plan from a finished run (``--from``) or from numbers (``--n --p ...``)."""
    ap = _parser()
    a = ap.parse_args(list(argv) if argv is not None else None)
    if a.alpha is not None:  # the comparison's own range of alpha (abh run, abh ab and abh compare: the same)
        from harness.analysis.compare_settings import settings_problem

        wrong = settings_problem("superiority", None, None, a.alpha, 0.0)
        if wrong is not None:
            ap.error(f"--alpha: {wrong}")
    if not 0 < a.power < 1:
        ap.error("--power must be in (0, 1)")
    for name in ("launch_s", "eval_s"):
        v = getattr(a, name)
        if v is not None and (not math.isfinite(v) or v < 0):
            ap.error(f"--{name.replace('_', '-')} must be >= 0 seconds")
    from harness.config import EngineConfig, ExperimentConfig
    from harness.util.ranges import check

    bad = check(EngineConfig, "gpus", a.gpus, "--gpus") or check(ExperimentConfig, "min_repeats", a.min_repeats,
                                                                  "--min-repeats")
    if bad:  # the ranges of the config keys these flags stand for
        ap.error(bad)
    if a.launch_sd is not None and (not math.isfinite(a.launch_sd) or not 0 <= a.launch_sd < 100):
        ap.error(f"--launch-sd is in percentage points, in [0, 100): got {a.launch_sd}")
    if a.aa_launches is not None and a.aa_launches < 0:
        ap.error("--aa-launches must be >= 0")
    launch_sd = None if a.launch_sd is None else a.launch_sd / 100
    plan: planning.Plan | None  # the sequential plan, when one is asked for
    if a.run_dir is not None:
        if a.effect is None:
            ap.error("--from needs --effect PP")
        if a.n is not None or a.p is not None or a.discordance is not None:
            ap.error("--from reads n, accuracy and discordance from the run; drop --n/--p/--discordance")
        try:
            plan = planning.plan_from_run(a.run_dir, _effect_fraction(ap, a.effect, None), a.alpha, a.power,
                                          a.launch_s, a.eval_s, a.gpus, a.min_repeats, a.spending,
                                          not a.no_futility, launch_sd, a.aa_launches)
        except planning.PlanError as e:
            print(f"abh power: {e}", file=sys.stderr)
            return 2
        print(json.dumps(plan, indent=2) if a.json else planning.format_plan(plan))
        return 0
    if a.n is None or a.p is None:
        ap.error("give --from RUN_DIR, or --n and --p")
    for name, val in (("p", a.p), ("discordance", a.discordance)):
        if val is not None and not 0 <= val <= 1:
            ap.error(f"--{name} is a fraction in [0, 1], got {val}")
    if a.n <= 0 or (a.repeats is not None and a.repeats <= 0):
        ap.error("--n and --repeats must be positive")
    alpha = 0.05 if a.alpha is None else a.alpha
    effect = None if a.effect is None else _effect_fraction(ap, a.effect, a.n)
    f = planning.power_figures(a.n, a.p, a.discordance, a.repeats, effect, alpha, a.power)
    plan = None
    if effect is not None and a.discordance is not None:
        per_repeat = None
        if a.launch_s is not None or a.eval_s is not None or a.gpus is not None:
            ls, es, g = a.launch_s or 0.0, a.eval_s or 0.0, a.gpus or 0
            per_repeat = planning.per_repeat_cost({"a": ls, "b": ls}, {"a": es, "b": es},
                                                  {"a": 0.0, "b": 0.0}, {"a": g, "b": g}, "options")
        plan = planning.make_plan(effect, a.n, a.discordance, alpha, a.power, per_repeat, a.min_repeats,
                                  a.spending, not a.no_futility,
                                  launch_sigma2=None if launch_sd is None else launch_sd**2,
                                  aa_launches=a.aa_launches or 0, launch_source=None if launch_sd is None
                                  else f"assumed: --launch-sd {a.launch_sd:g} pp")
    if a.json:
        print(json.dumps({**f, "plan": plan} if plan else f, indent=2))
        return 0
    pw = f"{100 * a.power:g} % power, alpha {alpha:g}"
    print(f"n = {a.n} questions, accuracy {100 * a.p:.2f} %; detectable effect at {pw}, by design:")
    print(f"  unpaired          {100 * f['mde_unpaired']:.2f} pp")
    if f["mde_paired"] is not None:
        print(f"  paired (psi {100 * a.discordance:.2f} %)  {100 * f['mde_paired']:.2f} pp")
    else:
        print("  paired            give --discordance PSI")
    if f["mde_repeats"] is not None:
        print(f"  {a.repeats} repeats per arm  {100 * f['mde_repeats']:.2f} pp")
    if f["repeats_needed"] is not None:
        print(f"  to detect {a.effect:.2f} pp ({effect * a.n:.1f} questions), question-level normal model (no "
              f"launch variance): {f['repeats_needed']} repeats per arm, or {f['n_needed_paired']} questions in one "
              "paired run" + ("; the plan below is the verdict's own test" if plan is not None else ""))
    elif effect is not None:
        print("  repeats needed: give --discordance PSI (the A/A discordance)")
    if plan is not None:
        print(planning.format_plan(plan))
    return 0


if __name__ == "__main__":
    sys.exit(power_main())
