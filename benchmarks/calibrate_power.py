"""Calibration of the accuracy verdict, the launch-aware bootstrap and ``abh power``'s plan against a second
independent generator (tests/helpers/greedy_generator.py: greedy answers, heavy-tailed per-question flip rates,
launch shifts on the log-odds scale), through the product's functions:
:func:`harness.stats.launchvar.launch_aware_test` (the verdict's test, p and interval),
:func:`harness.stats.repeats.launch_bootstrap` (the two-level bootstrap of comparison.json) and
:func:`harness.analysis.planning.design_power` (the plan's power for a design).

    python benchmarks/calibrate_power.py [--experiments 2000] [--jobs 2] [--resamples 499] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from helpers import greedy_generator as G  # noqa: E402
from helpers.vectorised_stats import launch_bootstrap_delta  # noqa: E402

from harness.analysis.planning import design_power  # noqa: E402
from harness.stats.consistent import consistent_paired  # noqa: E402
from harness.stats.launchvar import launch_aware_test  # noqa: E402

EFFECT = 0.015
FLIP = 0.2
CHUNK = 200
SEED = G.Design(flip_base=FLIP)
DESIGNS = {"seed (A 3 + B 3 + A/A 2, n 1319)": SEED,
           "demo (A 1 x 2 passes + B 1 x 2 + A/A 2 launches)": SEED.with_(launches_a=1, launches_b=1,
                                                                          launches_aa=2, passes=2),
           "seed design, n 198": SEED.with_(n=198)}
SHIFTS: dict[str, dict[str, Any]] = {"none": {"shift": "none"}, "t3 sd 0.15": {"shift": "t3", "shift_sd": 0.15},
                                     "t3 sd 0.3": {"shift": "t3", "shift_sd": 0.3},
                                     "B 0.30 vs A 0.05 (normal)": {"shift": "normal", "shift_sd": 0.05,
                                                                   "b_shift_sd": 0.3}}


#: the shifts of the designs other than the seed
FEW_SHIFTS = ("none", "t3 sd 0.15", "t3 sd 0.3")


def wilson(k: float, n: float) -> str:
    z = 1.959964
    p = k / n
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{100 * p:5.1f} [{100 * (c - h):4.1f}, {100 * (c + h):4.1f}]"


def run(d: G.Design, exps: int, seed: int, resamples: int) -> dict[str, float]:
    """Counts over ``exps`` experiments: rejections, verdict CI / bootstrap covering the truth (under the null
    the configurations' true Δ, :func:`greedy_generator.true_null_delta`; d.delta's realised Δ is not known
    exactly: coverage only under the null), question-level rejections."""
    out = {"reject": 0, "cover": 0, "cover_boot": 0, "boot": 0, "reject_q": 0, "delta_sum": 0.0}
    rng = np.random.default_rng(seed)
    true = G.true_null_delta(d) if d.delta == 0 else 0.0
    for start in range(0, exps, CHUNK):
        m = min(CHUNK, exps - start)
        ya, yaa, yb = G.draw(d, m, rng)
        for e in range(m):
            a = G.arm_runs(ya[e], d.launches_a, d.passes, "a")
            aa = G.arm_runs(yaa[e], d.launches_aa, d.passes, "aa")
            b = G.arm_runs(yb[e], d.launches_b, d.passes, "b")
            assert a is not None and b is not None
            r = launch_aware_test(a, b, aa)
            out["reject"] += r.p < 0.05
            out["delta_sum"] += r.delta
            out["cover"] += r.ci[0] <= true <= r.ci[1]
            dq = yb[e].mean(axis=0) - ya[e].mean(axis=0)
            out["reject_q"] += consistent_paired(dq).p < 0.05
            if resamples and d.delta == 0 and r.df_launch > 0:
                lb = launch_bootstrap_delta(a, b, aa, np.ones(d.n, dtype=bool), r.df, n_resamples=resamples,
                                            seed=int(rng.integers(2**32)))
                if lb is not None:
                    out["boot"] += 1
                    out["cover_boot"] += lb[0] <= true <= lb[1]
    return out


def truth(d: G.Design, seed: int, exps: int = 60) -> tuple[float, float, float]:
    """The plan's inputs for a design's generator: each configuration's σ²_L (the population variance of a
    launch's accuracy shift, :func:`greedy_generator.launch_accuracy_variance`) and the within-launch noise
    σ²_e / n (MS_E / n averaged over ``exps`` experiments of 8 launches per configuration)."""
    s_a = G.launch_accuracy_variance(d)
    s_b = G.launch_accuracy_variance(d, d.b_shift_sd) if d.b_shift_sd is not None else s_a
    big = d.with_(launches_a=8, launches_b=8, launches_aa=0, passes=1, delta=0.0)
    ya, _, yb = G.draw(big, exps, np.random.default_rng(seed))
    noise = []
    for e in range(exps):
        r = launch_aware_test(G.arm_runs(ya[e], 8, 1, "a"), G.arm_runs(yb[e], 8, 1, "b"))  # type: ignore[arg-type]
        assert r.components is not None
        noise.append(r.components.ms_resid / d.n)
    return s_a, s_b, float(np.mean(noise))


def verdict_row(args: tuple[str, str, int, int, int]) -> str:
    dname, sname, exps, seed, resamples = args
    d = DESIGNS[dname].with_(**SHIFTS[sname])
    r0 = run(d, exps, seed, resamples)
    r1 = run(d.with_(delta=EFFECT), exps, seed + 1, 0)
    boot = wilson(r0["cover_boot"], r0["boot"]) if r0["boot"] else "n/a (one launch per configuration)"
    return (f"| {dname} | {sname} | {wilson(r0['reject'], exps)} | {wilson(r0['cover'], exps)} | {boot} | "
            f"{wilson(r1['reject'], exps)} | {wilson(r1['reject_q'], exps)} |")


def power_row(args: tuple[str, int, int, int]) -> str:
    sname, launches, exps, seed = args
    d = SEED.with_(launches_a=launches, launches_b=launches, delta=EFFECT, **SHIFTS[sname])
    s_a, s_b, noise = truth(d, seed + 7)
    r = run(d, exps, seed, 0)
    # the plan is asked for the effect the generator has: the mean Δ̂ (unbiased for the true Δ; B's 20
    # questions are not all wrong for A, whose flips get some right: 1.3 pp, not the nominal 1.5)
    effect = float(r["delta_sum"]) / exps
    s2 = (max(s_a, 0.0), max(s_b, 0.0))
    planned = design_power(effect, d.n, s2, noise, launches, launches, d.launches_aa)
    normal = design_power(effect, d.n, s2, noise, launches, launches, d.launches_aa, tails="normal")
    return (f"| {sname} | {launches} | {100 * effect:.2f} | {100 * planned:5.1f} | {100 * normal:5.1f} | "
            f"{wilson(r['reject'], exps)} | {100 * (planned - r['reject'] / exps):+5.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--resamples", type=int, default=499)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=2032)
    ap.add_argument("--sections", default="verdict,power")
    ap.add_argument("--designs", default="", help="only the designs whose label starts with this")
    ap.add_argument("--shifts", default="", help="only these launch shifts (';'-separated labels); a row keeps "
                    "its seed (its place in the full table): the same experiments whichever rows are asked")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    exps = a.experiments
    lines = [f"Against tests/helpers/greedy_generator.py (flip base {FLIP}), {exps} experiments per row, α = 5 %; "
             "cells % [95 % Wilson interval]."]
    print(lines[0], flush=True)
    t0 = time.perf_counter()

    def emit(x: str = "") -> None:
        lines.append(x)
        print(x, flush=True)

    with ProcessPoolExecutor(a.jobs) as ex:
        if "verdict" in a.sections:
            emit("\n| design | launch shift (log-odds) | FPR | coverage, verdict CI | coverage, launch bootstrap | "
                 f"power +{100 * EFFECT:g} pp | question-level test's power |")
            emit("|---|---|---|---|---|---|---|")
            items = [(dn, sn, exps, a.seed + 10 * i, a.resamples) for i, (dn, sn) in enumerate(
                [(dn, sn) for dn in DESIGNS for sn in SHIFTS if dn.startswith("seed (") or sn in FEW_SHIFTS])
                if dn.startswith(a.designs) and (not a.shifts or sn in a.shifts.split(";"))]
            for row in ex.map(verdict_row, items):
                emit(row)
        if "power" in a.sections:
            emit(f"\n`abh power` planned vs achieved, seed design (A/A 2, n 1319), B's effect nominally "
                 f"+{100 * EFFECT:g} pp, the plan (design_power) given the true Δ, each configuration's true launch "
                 "variance and noise:\n")
            emit("| launch shift | launches per arm | true Δ pp | planned % (t3 tails, the plan's) | "
                 "planned % (normal tails) | achieved | planned - achieved |")
            emit("|---|---|---|---|---|---|---|")
            items2 = [(sn, L, exps, a.seed + 1000 + 10 * i) for i, (sn, L) in enumerate(
                [(sn, L) for sn in ("none", "t3 sd 0.15", "t3 sd 0.3") for L in range(1, 7)])
                if not a.shifts or sn in a.shifts.split(";")]
            for row in ex.map(power_row, items2):
                emit(row)
    emit(f"\n({time.perf_counter() - t0:.0f} s)")
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
