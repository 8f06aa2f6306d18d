"""Calibration of the statistics against an independent generator (tests/helpers/indep_generator.py), through
the product's functions: ``compare_arms`` (the comparison), ``Looks`` (sequential looks) and
``compute_divergence`` (the seed design's divergence verdict).

Prints markdown tables of false-positive rate / coverage / power, each with its 95 % Wilson interval, for
every design: the accuracy verdict (launch-aware test, error gate); errors; the p / interval agreement;
sequential looks; the launch-level divergence test; and the divergence planning table (A launches needed).
2000 experiments per row by default (about 12 minutes with --jobs 2; --experiments 200 for a quick look).

    python benchmarks/calibrate_stats.py [--experiments 2000] [--sections accuracy,errors,consistency,sequential,divergence]
                                         [--jobs 1] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from helpers import indep_generator as G  # noqa: E402
from helpers.vectorised_stats import consistent_table  # noqa: E402

from harness.stats.kld_launches import launch_power, launches_needed  # noqa: E402

SEED_DEFAULT = G.AccuracyScenario()   # n 1319, beta difficulty, 90 %, A 3 + B 3 launches + A/A 2, 1 pass
NULL, EFFECT = 0.0, 0.015

# (label, scenario overrides, effect for the power row)
ACCURACY: list[tuple[str, dict[str, Any], float]] = []
for shift in ("none", "normal", "t3"):
    ACCURACY.append((f"A 3 + B 3 launches + A/A 2 (seed default), shift {shift}", {"shift": shift}, EFFECT))
for shift in ("none", "normal", "t3"):
    ACCURACY.append((f"1 launch per arm + A/A 2, shift {shift}",
                     {"shift": shift, "launches_a": 1, "launches_b": 1}, EFFECT))
for shift in ("none", "t3"):
    ACCURACY.append((f"1 launch per arm, no A/A (qualified), shift {shift}",
                     {"shift": shift, "launches_a": 1, "launches_b": 1, "launches_aa": 0}, EFFECT))
for shift in ("none", "normal"):
    ACCURACY.append((f"passes share a launch: 1 launch x 3 passes per arm, A/A 1 x 3, shift {shift}",
                     {"shift": shift, "launches_a": 1, "launches_b": 1, "launches_aa": 1, "passes": 3,
                      "pass_repeat": 0.5}, EFFECT))
ACCURACY.append(("3 launches x 2 passes per arm + A/A 2 x 2, shift normal",
                 {"shift": "normal", "passes": 2, "pass_repeat": 0.5}, EFFECT))
for shift in ("none", "normal"):
    ACCURACY.append((f"seed default, n 200, logit-normal difficulty, shift {shift}",
                     {"shift": shift, "n": 200, "difficulty": "logitnormal"}, 0.05))
ACCURACY.append(("seed default, n 50, logit-normal, accuracy 70 %, shift normal",
                 {"shift": "normal", "n": 50, "difficulty": "logitnormal", "accuracy": 0.7}, 0.10))
ACCURACY.append(("seed default, shift normal, per-question effects (mixed; Δ = 0 on average)",
                 {"shift": "normal", "effect": "mixed"}, EFFECT))
ACCURACY.append(("seed default, shift normal, uniform log-odds effect", {"shift": "normal", "effect": "uniform"},
                 EFFECT))

ERRORS: list[tuple[str, dict[str, Any]]] = [
    ("no errors, no shift", {}),
    ("1 % persistent, both arms, independent", {"errors": "both_indep"}),
    ("1 % persistent, both arms, same questions", {"errors": "both_shared"}),
    ("1 % persistent, B only (random)", {"errors": "b_only"}),
    ("1 % persistent, B only, informative (B's wrong answers)", {"errors": "b_informative"}),
    ("1 % persistent, both independent, + 0.5 % transient", {"errors": "both_indep", "transient_rate": 0.005}),
    ("no errors, shift normal", {"shift": "normal"}),
    ("1 % persistent, both independent, shift normal", {"errors": "both_indep", "shift": "normal"}),
]

SEQUENTIAL: list[tuple[str, dict[str, Any]]] = [
    ("shift N(0, 0.1)", {"shift": "normal", "shift_sd": 0.1}),
    ("shift t3, sd 0.1", {"shift": "t3", "shift_sd": 0.1}),
    ("shift N(0, 0.15)", {"shift": "normal", "shift_sd": 0.15}),
    ("no shift", {}),
]
#: B errs on 1.5 % of the questions A gets right: counted against B, the +1.5 pp effect is gone
SEQ_ERRORS = {"errors": "b_on_a_right", "error_rate": 0.015}

DIV_DESIGNS = ((1, 3), (2, 3), (3, 3), (4, 3), (5, 3), (2, 2), (4, 1))
#: the seed default design, through compute_divergence (the floor + 3 more A launches, 3 B launches)
DIV_PRODUCT = (4, 3)
DIV_NOISE = (0.0, 0.1, 0.3)
#: B's build shift (logit sd) for KLD ratios of about 1.5, 2 and 3 over the A/A floor
DIV_SHIFTS = {1.5: 0.036, 2.0: 0.051, 3.0: 0.072}


def _acc_row(args: tuple[str, dict[str, Any], float, int, int]) -> str:
    label, over, effect, exps, seed = args
    s = SEED_DEFAULT.with_(**over)
    r0 = G.accuracy_rates(s, exps, seed)
    r1 = G.accuracy_rates(s.with_(delta=effect), exps, seed + 1)
    return (f"| {label} | {r0['reject'].fmt()} | {r0['cover'].fmt()} | {100 * effect:g} | "
            f"{r1['reject'].fmt()} | {r1['cover'].fmt()} | {r0['fallback'].fmt()} |")


def _err_row(args: tuple[str, dict[str, Any], int, int]) -> str:
    label, over, exps, seed = args
    s = SEED_DEFAULT.with_(**over)
    r0 = G.accuracy_rates(s, exps, seed)
    r1 = G.accuracy_rates(s.with_(delta=EFFECT), exps, seed + 1)
    return f"| {label} | {r0['reject'].fmt()} | {r1['reject'].fmt()} | {r1['bound'].fmt()} |"


def _seq_row(args: tuple[str, dict[str, Any], int, int]) -> str:
    label, over, exps, seed = args
    s = SEED_DEFAULT.with_(**over)
    r0 = G.sequential_rates(s, exps, seed)
    r1 = G.sequential_rates(s.with_(delta=EFFECT), exps, seed + 1)
    return (f"| {label} | {r0['reject'].fmt()} | {r1['reject'].fmt()} | {r1['repeats']:.2f} |")  # type: ignore[union-attr]


def _seq_err_row(args: tuple[int, int]) -> str:
    exps, seed = args
    r = G.sequential_rates(SEED_DEFAULT.with_(delta=EFFECT, **SEQ_ERRORS), exps, seed)
    return (f"| B errs on 1.5 % of A's right answers, Δ = +1.5 pp | {r['reject'].fmt()} | "  # type: ignore[union-attr]
            f"{r['errors_rule_inconclusive'].fmt()} | {r['improved_despite_errors'].k} / {exps} |")  # type: ignore[union-attr]


def _div_null_row(args: tuple[float, int, int]) -> tuple[str, float]:
    sd, exps, seed = args
    s = G.DivergenceScenario(scale_sd=sd, launches_a=1, launches_aa=5, launches_b=3)
    r = G.divergence_rates(s, exps, seed, DIV_DESIGNS, product=DIV_PRODUCT, n_resamples=199)
    cells = " | ".join(r[f"launch_{a}_{b}"].fmt() for a, b in DIV_DESIGNS)  # type: ignore[union-attr]
    prod = r[f"product_{DIV_PRODUCT[0]}_{DIV_PRODUCT[1]}"].fmt()  # type: ignore[union-attr]
    return (f"| {sd:g} | {r['question_1_1'].fmt()} | {prod} | {cells} | {r['sd_log']:.3f} |",  # type: ignore[union-attr]
            float(r["sd_log"]))  # type: ignore[arg-type]


def _div_power_row(args: tuple[float, float, int, int]) -> str:
    sd, ratio, exps, seed = args
    s = G.DivergenceScenario(scale_sd=sd, shift=DIV_SHIFTS[ratio], launches_a=1, launches_aa=5, launches_b=3)
    r = G.divergence_rates(s, exps, seed, DIV_DESIGNS, product=DIV_PRODUCT, n_resamples=199)
    cells = " | ".join(r[f"launch_{a}_{b}"].fmt() for a, b in DIV_DESIGNS)  # type: ignore[union-attr]
    prod = r[f"product_{DIV_PRODUCT[0]}_{DIV_PRODUCT[1]}"].fmt()  # type: ignore[union-attr]
    return f"| {sd:g} | {r['ratio']:.2f} | {r['question_1_1'].fmt()} | {prod} | {cells} |"  # type: ignore[union-attr]


def _map(fn: Callable[[Any], Any], items: list[Any], jobs: int) -> list[Any]:
    if jobs <= 1:
        out = []
        for it in items:
            t0 = time.perf_counter()
            out.append(fn(it))
            print(f"  ... {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        return out
    with ProcessPoolExecutor(jobs) as ex:
        return list(ex.map(fn, items))


def grid_consistency(max_n: int = 120) -> str:
    tables = levels = disagree = tango_alone = 0
    import numpy as np

    for n in range(1, max_n + 1):
        b, c = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        m = b + c <= n
        b, c = b[m], c[m]
        tables += b.size
        for alpha in (0.01, 0.05, 0.1):
            r = consistent_table(b, c, np.full(b.shape, n), alpha)
            outside = (r["lo"] > 0) | (r["hi"] < 0)
            disagree += int(np.sum(outside != (r["p"] < alpha)))
            old_out = (r["lo_tango"] > 0) | (r["hi_tango"] < 0)
            tango_alone += int(np.sum(old_out != (r["p_signflip"] < alpha)))
            levels += b.size
    return (f"every table (b, c) with b + c <= n <= {max_n} ({tables} tables) at α = 0.01, 0.05, 0.1 "
            f"({levels} decisions): the mid-p sign-flip p with Tango's interval (the verdict's pair before issue 25) "
            f"{tango_alone} disagreements; the comparison's question-level test {disagree}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--sections", default="accuracy,errors,consistency,sequential,divergence")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=2025)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    exps, seed, sections = a.experiments, a.seed, set(a.sections.split(","))
    lines: list[str] = [f"Calibration against tests/helpers/indep_generator.py, {exps} experiments per cell, "
                        "α = 5 %; cells are % [95 % Wilson interval]."]

    def emit(x: str = "") -> None:
        lines.append(x)
        print(x, flush=True)

    print(lines[0])
    t0 = time.perf_counter()
    if "accuracy" in sections:
        emit("\n### Accuracy: the comparison's verdict (compare_arms: launch-aware test, error gate)\n")
        emit("n 1319, Beta(0.54, 0.06) difficulty (90 %), launch noise sd 0.3 per question, launch shift sd 0.15 "
             "(log-odds) unless stated; effect concentrated on few questions; 1 pass per launch unless stated. "
             "FPR and power count `improved` / `regressed` verdicts; coverage is `delta_ci`'s; the last column is "
             "the share with no launch replication (the question-level test, qualified).\n")
        emit("| design | FPR | coverage (Δ=0) | Δ pp | power | coverage (Δ) | question-level |")
        emit("|---|---|---|---|---|---|---|")
        for row in _map(_acc_row, [(lab, o, e, exps, seed + 10 * i) for i, (lab, o, e) in enumerate(ACCURACY)],
                        a.jobs):
            emit(row)
    if "errors" in sections:
        emit("\n### Errors: the gate (exact McNemar of unanswered indicators; drop or bound)\n")
        emit("Seed default design (3 + 3 launches + A/A 2), n 1319, Δ = +1.5 pp for power.\n")
        emit("| errors | FPR | power | bounded (share) |")
        emit("|---|---|---|---|")
        for row in _map(_err_row, [(lab, o, exps, seed + 500 + 10 * i) for i, (lab, o) in enumerate(ERRORS)], a.jobs):
            emit(row)
    if "consistency" in sections:
        emit("\n### p and interval agreement\n")
        emit("- exhaustive grid, one run per arm: " + grid_consistency())
        emit("\n| design (n 200, logit-normal, Δ = +5 pp) | disagreements | power |")
        emit("|---|---|---|")
        for label, over in (("one run per arm", {"launches_a": 1, "launches_b": 1, "launches_aa": 0}),
                            ("3 launches per arm, no A/A", {"launches_aa": 0}),
                            ("3 + 3 launches + A/A 2", {})):
            s = SEED_DEFAULT.with_(n=200, difficulty="logitnormal", delta=0.05, **over)
            r = G.accuracy_rates(s, exps, seed + 900)
            emit(f"| {label} | {r['disagree'].k} / {exps} | {r['reject'].fmt()} |")
    if "sequential" in sections:
        emit("\n### Sequential (Looks: fresh launch of both arms per repeat, min 2, max 6 repeats, OBF, futility)\n")
        emit("| launch shift | FPR | power (+1.5 pp) | mean repeats |")
        emit("|---|---|---|---|")
        for row in _map(_seq_row, [(lab, o, exps, seed + 700 + 10 * i) for i, (lab, o) in enumerate(SEQUENTIAL)],
                        a.jobs):
            emit(row)
        emit("\n| errors depend on the arm | improved | errors rule inconclusive | improved while the errors rule "
             "says inconclusive |")
        emit("|---|---|---|---|")
        emit(_seq_err_row((exps, seed + 790)))
    if "divergence" in sections:
        emit("\n### Divergence: size (Δ = 0) when the noise scale varies by launch (lognormal sd)\n")
        emit("Reference on A's first launch; m_A = A's other launches (arm A's + A/A), m_B = B's launches; "
             "per-question = the per-question test with one A/A launch and one B launch; product = "
             "compute_divergence on the seed default design (4, 3).\n")
        head = " | ".join(f"launch ({ma}, {mb})" for ma, mb in DIV_DESIGNS)
        emit(f"| scale sd | per-question (1, 1) | product (4, 3) | {head} | sd of log K |")
        emit("|" + "---|" * (4 + len(DIV_DESIGNS)))
        sds = {}
        for (row, sdl), sd in zip(_map(_div_null_row, [(sd, exps, seed + 300 + i) for i, sd in enumerate(DIV_NOISE)],
                                       a.jobs), DIV_NOISE, strict=True):
            emit(row)
            sds[sd] = sdl
        emit("\n### Divergence: power (B's build shift giving the KLD ratio shown)\n")
        emit(f"| scale sd | KLD ratio | per-question (1, 1) | product (4, 3) | {head} |")
        emit("|" + "---|" * (4 + len(DIV_DESIGNS)))
        items = [(sd, ratio, exps, seed + 400 + 10 * i + j) for i, sd in enumerate(DIV_NOISE[1:])
                 for j, ratio in enumerate(DIV_SHIFTS)]
        for row in _map(_div_power_row, items, a.jobs):
            emit(row)
        emit("\n### Divergence planning (noncentral t, sd of log K from the size runs above, m_B = 3)\n")
        emit("| scale sd | sd log K | ratio | power of (4, 3) | A launches needed for 80 % (m_B 3) | "
             "with m_B = m_A |")
        emit("|---|---|---|---|---|---|")
        for sd, sdl in sds.items():
            for ratio in (1.25, 1.5, 2.0, 3.0):
                need = launches_needed(ratio, sdl, 3)
                eq = next((m for m in range(2, 65) if launch_power(ratio, sdl, m, m) >= 0.8), None)
                emit(f"| {sd:g} | {sdl:.3f} | {ratio:g} | {100 * launch_power(ratio, sdl, 4, 3):.1f} | "
                     f"{need if need is not None else '> 64'} | {eq if eq is not None else '> 64'} |")
    emit(f"\n(total {time.perf_counter() - t0:.0f} s)")
    if a.out:
        a.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
