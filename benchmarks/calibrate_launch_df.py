"""Candidate variance / df rules for the launch-aware verdict, on the greedy generator
(tests/helpers/greedy_generator.py, not the simulator), seed design by default: FPR at every launch-shift
size, coverage of the true Δ, and power at +1.5 pp with no launch shift beside the question-level test's.

Each experiment is reduced to the statistics the verdict uses (Δ̂, S²_d/n, each configuration's launch-accuracy
variance τ̂²_g = MS_L,g/n and within-launch noise MS_E,g/n), vectorised over experiments; every candidate is a
function of those. The rule in the product (``current``) is checked against
:func:`harness.stats.launchvar.launch_aware_test` on the first experiments of every row.

    python benchmarks/calibrate_launch_df.py [--experiments 2000] [--rows all | "PREFIX,PREFIX"]
                                             [--methods all | "RULE;RULE"] [--bound]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from calibrate_power import wilson  # noqa: E402  (this directory, the script's own)
from helpers import greedy_generator as G  # noqa: E402
from scipy.special import chdtri  # noqa: E402

from harness.stats.consistent import consistent_paired  # noqa: E402
from harness.stats.dist import t_ppf, t_sf  # noqa: E402
from harness.stats.launchvar import (  # noqa: E402
    DF_EXCESS_OVER_NOISE,
    DF_UPPER_LEVEL,
    combine_variance,
    df_weight,
    launch_aware_test,
)

EFFECT = 0.015
SEED = G.Design(flip_base=0.2)
CHUNK = 100

#: rows: (label, design changes, with the effect?)
ROWS: dict[str, tuple[dict[str, Any], bool]] = {
    "null, no shift": ({"shift": "none"}, False),
    "null, t3 sd 0.02": ({"shift": "t3", "shift_sd": 0.02}, False),
    "null, t3 sd 0.05": ({"shift": "t3", "shift_sd": 0.05}, False),
    "null, t3 sd 0.1": ({"shift": "t3", "shift_sd": 0.1}, False),
    "null, t3 sd 0.15": ({"shift": "t3", "shift_sd": 0.15}, False),
    "null, t3 sd 0.3": ({"shift": "t3", "shift_sd": 0.3}, False),
    "null, normal sd 0.05": ({"shift": "normal", "shift_sd": 0.05}, False),
    "null, normal sd 0.1": ({"shift": "normal", "shift_sd": 0.1}, False),
    "null, B 0.30 vs A 0.05 (normal)": ({"shift": "normal", "shift_sd": 0.05, "b_shift_sd": 0.3}, False),
    "null, B 0.10 vs A 0.0167 (normal)": ({"shift": "normal", "shift_sd": 0.0167, "b_shift_sd": 0.1}, False),
    "null, B 0.05 vs A 0 (normal)": ({"shift": "normal", "shift_sd": 0.0, "b_shift_sd": 0.05}, False),
    "power, no shift": ({"shift": "none", "delta": EFFECT}, True),
    "power, t3 sd 0.15": ({"shift": "t3", "shift_sd": 0.15, "delta": EFFECT}, True),
}


@dataclass(frozen=True)
class Stats:
    """Per-experiment statistics (arrays over experiments) of one design."""

    delta: np.ndarray
    var_q: np.ndarray
    tau_a: np.ndarray
    tau_b: np.ndarray
    s_a: np.ndarray
    s_b: np.ndarray
    df_a: int
    df_b: int
    la: int
    lb: int
    n: int
    df_e: int
    reject_q: np.ndarray


def _anova(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(MS_L / n, MS_E / n) per experiment of ``(E, L, n)`` launch tables."""
    _, L, n = y.shape
    m = y.mean(axis=2)
    q = y.mean(axis=1)
    g = y.mean(axis=(1, 2))
    ms_l = n * np.sum((m - g[:, None]) ** 2, axis=1) / (L - 1)
    r = y - m[:, :, None] - q[:, None, :] + g[:, None, None]
    ms_e = np.sum(r**2, axis=(1, 2)) / ((L - 1) * (n - 1))
    return ms_l / n, ms_e / n


def statistics(d: G.Design, exps: int, seed: int, check: int = 3) -> Stats:
    rng = np.random.default_rng(seed)
    parts: list[tuple[np.ndarray, ...]] = []
    checked = 0
    for start in range(0, exps, CHUNK):
        m = min(CHUNK, exps - start)
        ya, yaa, yb = G.draw(d, m, rng)
        cfg = np.concatenate([ya, yaa], axis=1)
        dd = yb.mean(axis=1) - ya.mean(axis=1)
        delta = dd.mean(axis=1)
        var_q = dd.var(axis=1, ddof=1) / d.n
        ta, sa = _anova(cfg)
        tb, sb = _anova(yb)
        rq = np.array([consistent_paired(dd[e]).p < 0.05 for e in range(m)])
        parts.append((delta, var_q, ta, tb, sa, sb, rq))
        while checked < check and checked < m:   # the product's verdict on the same data
            e = checked
            r = launch_aware_test(G.arm_runs(ya[e], d.launches_a, 1, "a"), G.arm_runs(yb[e], d.launches_b, 1, "b"),
                                  G.arm_runs(yaa[e], d.launches_aa, 1, "aa"))
            v, df = current(_one(parts[-1], e, d))
            assert math.isclose(r.se**2, float(v[0]), rel_tol=1e-9), (r.se**2, v)
            assert math.isclose(r.df, float(df[0]), rel_tol=1e-9), (r.df, df)
            vv, dfv = METHODS[CURRENT](_one(parts[-1], e, d))   # the vectorised rule is the product's
            assert math.isclose(float(vv[0]), float(v[0]), rel_tol=1e-9), (vv, v)
            assert math.isclose(float(dfv[0]), float(df[0]), rel_tol=1e-9), (dfv, df)
            checked += 1
    cat = [np.concatenate([p[j] for p in parts]) for j in range(7)]
    la, lb = d.launches_a, d.launches_b
    df_a, df_b = la + d.launches_aa - 1, lb - 1
    return Stats(cat[0], cat[1], cat[2], cat[3], cat[4], cat[5], df_a, df_b, la, lb, d.n,
                 (df_a + df_b) * (d.n - 1), cat[6])


def _one(p: tuple[np.ndarray, ...], e: int, d: G.Design) -> Stats:
    la, lb = d.launches_a, d.launches_b
    df_a, df_b = la + d.launches_aa - 1, lb - 1
    return Stats(*(x[e:e + 1] for x in p[:6]), df_a, df_b, la, lb, d.n,  # type: ignore[arg-type]
                 (df_a + df_b) * (d.n - 1), p[6][e:e + 1])


# ---- candidate rules: each maps Stats to (V, df) -------------------------------------------------------------

def _pooled_noise(s: Stats) -> np.ndarray:
    return (s.s_a * s.df_a + s.s_b * s.df_b) / (s.df_a + s.df_b)


def current(s: Stats) -> tuple[np.ndarray, np.ndarray]:
    """The product's rule (combine_variance), per experiment (its noise arguments are scalars)."""
    v, df = np.empty_like(s.delta), np.empty_like(s.delta)
    for e in range(len(s.delta)):
        cv = combine_variance(s.tau_a[e], s.tau_b[e], float(s.s_a[e]), float(s.s_b[e]), s.df_a, s.df_b, s.la, s.lb,
                              s.var_q[e], s.n, s.df_e)
        v[e], df[e] = float(cv.var), float(cv.df)
    return v, df


def _satterthwaite(s: Stats, fa: np.ndarray, fb: np.ndarray, dfa: np.ndarray | float, dfb: np.ndarray | float,
                   het: np.ndarray) -> np.ndarray:
    e = s.s_a / s.la + s.s_b / s.lb
    den = fa**2 / dfa + fb**2 / dfb + np.where(het > 0, s.var_q**2 / (s.n - 1) + e**2 / s.df_e, 0.0)
    return np.clip((fa + fb + het) ** 2 / den, min(s.df_a, s.df_b), s.n - 1 + s.df_a + s.df_b)


def no_df_rule(s: Stats) -> tuple[np.ndarray, np.ndarray]:
    """The current V, Satterthwaite's df from max(τ̂²_g, noise) without the upper-limit rule."""
    e = s.s_a / s.la + s.s_b / s.lb
    het = np.maximum(0.0, s.var_q - e)
    v = s.tau_a / s.la + s.tau_b / s.lb + het
    fa, fb = np.maximum(s.tau_a, s.s_a) / s.la, np.maximum(s.tau_b, s.s_b) / s.lb
    return v, _satterthwaite(s, fa, fb, s.df_a, s.df_b, het)


def _weights(s: Stats) -> tuple[np.ndarray, np.ndarray]:
    fa = np.array([float(df_weight(s.tau_a[e], float(s.s_a[e]), s.df_a)) for e in range(len(s.delta))]) / s.la
    fb = np.array([float(df_weight(s.tau_b[e], float(s.s_b[e]), s.df_b)) for e in range(len(s.delta))]) / s.lb
    return fa, fb


def unbiased_h(s: Stats) -> tuple[np.ndarray, np.ndarray]:
    """V = b + (S²_d/n - e) untruncated (floored at b/2), the current df."""
    e = s.s_a / s.la + s.s_b / s.lb
    b = s.tau_a / s.la + s.tau_b / s.lb
    v = np.maximum(b + s.var_q - e, b / 2)
    het = np.maximum(0.0, s.var_q - e)
    fa, fb = _weights(s)
    return v, _satterthwaite(s, fa, fb, s.df_a, s.df_b, het)


def floor_in_v(s: Stats) -> tuple[np.ndarray, np.ndarray]:
    """τ'_g = max(τ̂²_g, noise_g) in V (σ̂²_L truncated at 0); a term at its floor counts on the residual df."""
    e = s.s_a / s.la + s.s_b / s.lb
    het = np.maximum(0.0, s.var_q - e)
    fa, fb = np.maximum(s.tau_a, s.s_a) / s.la, np.maximum(s.tau_b, s.s_b) / s.lb
    dfa = np.where(s.tau_a > s.s_a, s.df_a, s.df_e)
    dfb = np.where(s.tau_b > s.s_b, s.df_b, s.df_e)
    return fa + fb + het, _satterthwaite(s, fa, fb, dfa, dfb, het)


def max_v_question(s: Stats) -> tuple[np.ndarray, np.ndarray]:
    """V = max(V_current, S²_d/n): the question-level variance (df n - 1) when it is the larger."""
    v, df = df_rule(DF_EXCESS_OVER_NOISE)(s)
    big = s.var_q > v
    return np.where(big, s.var_q, v), np.where(big, s.n - 1.0, df)


def floor_in_v_launch_df(s: Stats) -> tuple[np.ndarray, np.ndarray]:
    """τ'_g = max(τ̂²_g, noise_g) in V, the current df (a floor that only adds: conservative)."""
    e = s.s_a / s.la + s.s_b / s.lb
    het = np.maximum(0.0, s.var_q - e)
    v = np.maximum(s.tau_a, s.s_a) / s.la + np.maximum(s.tau_b, s.s_b) / s.lb + het
    fa, fb = _weights(s)
    return v, _satterthwaite(s, fa, fb, s.df_a, s.df_b, het)


def _rule_weight(t: np.ndarray, s: np.ndarray, df: int, excess: float) -> np.ndarray:
    """df_weight with the excess threshold ``excess`` (inf: no upper-limit rule), vectorised over the noise."""
    up = df / float(chdtri(df, DF_UPPER_LEVEL)) - 1.0
    return np.maximum(t, s) + (0.0 if math.isinf(excess) else up * np.maximum(t - excess * s, 0.0))


def df_rule(excess: float, floor: float = 0.0) -> Callable[[Stats], tuple[np.ndarray, np.ndarray]]:
    """The current V floored at ``floor`` x (e + h) (the part of Var(Δ̂) known to many df), Satterthwaite's df
    with the upper-limit rule beyond ``excess`` x the noise."""
    def rule(s: Stats) -> tuple[np.ndarray, np.ndarray]:
        e = s.s_a / s.la + s.s_b / s.lb
        het = np.maximum(0.0, s.var_q - e)
        v = np.maximum(s.tau_a / s.la + s.tau_b / s.lb + het, floor * (e + het))
        fa = _rule_weight(s.tau_a, s.s_a, s.df_a, excess) / s.la
        fb = _rule_weight(s.tau_b, s.s_b, s.df_b, excess) / s.lb
        return np.maximum(v, 1.0 / s.n**2), _satterthwaite(s, fa, fb, s.df_a, s.df_b, het)
    return rule


#: the product's rule (:data:`harness.stats.launchvar.DF_EXCESS_OVER_NOISE`), vectorised
CURRENT = f"rule x{DF_EXCESS_OVER_NOISE:g} (= current, vectorised)"
METHODS: dict[str, Callable[[Stats], tuple[np.ndarray, np.ndarray]]] = {
    CURRENT: df_rule(DF_EXCESS_OVER_NOISE), "rule x3 (before)": df_rule(3.0), "rule x5": df_rule(5.0),
    "rule x8": df_rule(8.0), "floor 0.7, rule x3": df_rule(3.0, 0.7), "floor 0.7, no rule": df_rule(math.inf, 0.7),
    "floor 0.85, no rule": df_rule(math.inf, 0.85), "floor 0.7, rule x5": df_rule(5.0, 0.7),
    "floor 0.7, rule x4": df_rule(4.0, 0.7),
    "no df rule": no_df_rule, "unbiased h": unbiased_h, "floor in V, residual df": floor_in_v,
    "max(V, S2d/n)": max_v_question, "floor in V, launch df": floor_in_v_launch_df}


def evaluate(row: str, exps: int, seed: int, methods: list[str]) -> list[str]:
    kw, effect = ROWS[row]
    d = SEED.with_(**kw)
    s = statistics(d, exps, seed)
    true = 0.0 if effect else G.true_null_delta(d)
    out = []
    for name in methods:
        v, df = METHODS[name](s)
        se = np.sqrt(v)
        p = 2 * t_sf(np.abs(s.delta) / se, df)
        q = t_ppf(0.975, df)
        cover = np.abs(s.delta - true) <= q * se
        rej = int(np.sum(p < 0.05))
        cov = wilson(int(cover.sum()), exps) if not effect else "-"
        out.append(f"| {row} | {name} | {wilson(rej, exps)} | {cov} | {float(np.median(df)):.1f} | "
                   f"{wilson(int(s.reject_q.sum()), exps)} | {paired_gap(s.reject_q, p < 0.05) if effect else '-'} |")
    return out


def paired_gap(first: np.ndarray, second: np.ndarray) -> str:
    """The difference of two rejection rates on the same experiments, in points, with its 95 % half-width
    (the paired difference's: discordant experiments only)."""
    n = len(first)
    gap = float(np.mean(first) - np.mean(second))
    var = (float(np.mean(first & ~second)) + float(np.mean(second & ~first)) - gap**2) / n
    return f"{100 * gap:.1f} ± {100 * 1.959964 * math.sqrt(max(var, 0.0)):.1f}"


def power_bound(s: Stats, alpha: float, draws: int = 2_000_000) -> tuple[float, float]:
    """The most power any test of (Δ̂, b = τ̂²_A/L_A + τ̂²_B/L_B) can have at the power row's alternative with
    no launch shift, holding its size <= ``alpha`` at every launch variance σ²_L >= 0 (equal in both arms):
    a linear programme over the rejection probability φ(|Z|, W) on a grid, Z = Δ̂ / sqrt(e + h), W = b / e,
    in the normal model the verdict assumes (b ~ (1 + σ²_L/s) e (χ²_{df_A}/df_A + χ²_{df_B}/df_B)/2 at
    L_A = L_B; h the question x arm term, known to n df). The alternative's mean of Z, the spread of Δ̂ and
    h / e are the row's. Returns (the bound, the power of the z test on S²_d/n: the question-level test)."""
    from scipy.optimize import linprog
    from scipy.special import ndtr

    e = s.s_a / s.la + s.s_b / s.lb
    r = float(np.mean(np.maximum(s.var_q - e, 0.0)) / np.mean(e))
    mu = float(np.mean(s.delta) / math.sqrt(np.mean(s.var_q)))
    spread = float(np.var(s.delta) / np.mean(s.var_q))
    rng = np.random.default_rng(0)
    x = (rng.chisquare(s.df_a, draws) / s.df_a + rng.chisquare(s.df_b, draws) / s.df_b) / 2
    zb = np.linspace(0.0, 7.0, 141)
    wb = np.append(np.concatenate([[0.0], np.exp(np.linspace(math.log(1e-3), math.log(1e4), 199))]), np.inf)

    def zprob(var: float, mean: float = 0.0) -> np.ndarray:
        sd = math.sqrt(var)
        f = ndtr((zb - mean) / sd) - ndtr((-zb - mean) / sd)
        return np.append(np.diff(f), 1.0 - f[-1])

    def wprob(rho: float) -> np.ndarray:
        return np.histogram(x * rho, wb)[0] / draws

    rhos = np.concatenate([[1.0], 1.0 + np.exp(np.linspace(math.log(0.01), math.log(2000.0), 70))])
    size = np.array([np.outer(zprob(1.0 + (rho - 1.0) / (1.0 + r)), wprob(rho)).ravel() for rho in rhos])
    alt = np.outer(zprob(spread, mu), wprob(1.0)).ravel()
    res = linprog(-alt, A_ub=size, b_ub=np.full(len(rhos), alpha), bounds=(0, 1), method="highs")
    return float(-res.fun), float(ndtr(mu / math.sqrt(spread) - 1.959964 / math.sqrt(spread))
                                  + ndtr(-mu / math.sqrt(spread) - 1.959964 / math.sqrt(spread)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--rows", default="all")
    ap.add_argument("--methods", default="all")
    ap.add_argument("--seed", type=int, default=3232)
    ap.add_argument("--bound", action="store_true", help="the linear programme's power bound (power_bound) only")
    a = ap.parse_args()
    if a.bound:
        st = statistics(SEED.with_(**ROWS["power, no shift"][0]), a.experiments, a.seed, check=0)
        for alpha in (0.05, 0.055, 0.06):
            b, z = power_bound(st, alpha)
            print(f"size <= {100 * alpha:g} % at every launch variance: power <= {100 * b:.1f} % "
                  f"(the z test on S²_d/n: {100 * z:.1f} %)", flush=True)
        return
    rows = list(ROWS) if a.rows == "all" else [r for r in ROWS if any(r.startswith(x) for x in a.rows.split(","))]
    methods = list(METHODS) if a.methods == "all" else a.methods.split(";")
    t0 = time.perf_counter()
    print(f"greedy generator, seed design, {a.experiments} experiments per row; % [95 % Wilson]")
    print("| row | rule | rejections | coverage of the true Δ | median df | question-level test rejections | "
          "gap to it (power rows, points ± 95 %) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:   # a row's seed by its place in ROWS: the same experiments whichever rows are asked
        for line in evaluate(row, a.experiments, a.seed + 17 * list(ROWS).index(row), methods):
            print(line, flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
