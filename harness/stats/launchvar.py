"""The accuracy test of B against A with a launch component estimated from every launch of the run.

A launch can shift the accuracy of every question alike, which cancels out of sd(d_i): the launch, not the
pass, is the replicate. A launch x question ANOVA per configuration g (A with the A/A control's launches, and
B) gives V = τ̂²_A/L_A + τ̂²_B/L_B + h (τ̂²_g = MS_L,g / n; h the question x arm interaction), referred to
Student's t with Satterthwaite's df. With no configuration on two launches the result is the question-level
test (:mod:`.consistent`), qualified. Reasons and calibration: docs/statistics.md and docs/calibration.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import chdtri, ndtr, ndtri

from .consistent import consistent_paired
from .dist import t_ppf, t_sf
from .launches import ArmRuns, launch_means, question_means
from .verdict import ALPHA

METHOD = "launch-aware t-test (launch and question components, Satterthwaite df)"

#: draws of the launch variance estimates behind :func:`power_launch_aware` (fixed seed: a plan is reproducible)
POWER_DRAWS = 8_000
#: draws of the launches' accuracies when the plan simulates them (heavy-tailed launch shifts)
SIMULATED_DRAWS = 10_000
METHOD_QUESTION = "question-level test (mid-p sign-flip and Tango score, no launch component)"
QUALIFICATION_NO_LAUNCHES = ("valid only if launches do not shift accuracy: no configuration has two launches, "
                             "so the launch-to-launch variance cannot be estimated from this run (run the A/A "
                             "control on fresh launches, or restart per repeat)")


@dataclass(frozen=True)
class LaunchVariance:
    """Variance components of launch means (two-way ANOVA, launch x question, pooled over configurations)."""

    #: σ̂²_L, truncated at 0 (accuracy² scale: a launch's accuracy shift has sd sqrt(sigma2))
    sigma2: float
    sigma2_raw: float
    #: pooled between-launch and residual mean squares (per launch x question cell)
    ms_launch: float
    ms_resid: float
    #: each configuration's residual mean square (None where it has one launch)
    ms_resid_by_group: tuple[float | None, ...]
    df_launch: int
    df_resid: int
    questions: int
    launches: tuple[int, ...]
    groups: tuple[str, ...]
    #: each configuration's between-launch mean square (None where it has one launch)
    ms_launch_by_group: tuple[float | None, ...] = ()


def variance_components(tables: Sequence[np.ndarray], names: Sequence[str] | None = None) -> LaunchVariance:
    """σ²_L and σ²_e from per-configuration ``(L_g, n)`` tables of launch means over the same n questions (no
    NaN); a configuration with one launch adds nothing."""
    ys = [np.atleast_2d(np.asarray(y, dtype=float)) for y in tables]
    names = tuple(names) if names is not None else tuple(f"g{j}" for j in range(len(ys)))
    if not ys or any(y.shape[1] != ys[0].shape[1] for y in ys):
        raise ValueError("launch tables must share their questions")
    if any(np.isnan(y).any() for y in ys):
        raise ValueError("launch tables hold NaN: restrict them to questions every launch answered")
    n = ys[0].shape[1]
    ss_l = ss_e = 0.0
    df_l = df_e = 0
    by_group: list[float | None] = []
    launch_by_group: list[float | None] = []
    for y in ys:
        L = y.shape[0]
        if L < 2 or n < 2:
            by_group.append(None)
            launch_by_group.append(None)
            continue
        m, q = y.mean(axis=1), y.mean(axis=0)
        g = float(y.mean())
        sl = n * float(np.sum((m - g) ** 2))
        se = float(np.sum((y - m[:, None] - q[None, :] + g) ** 2))
        ss_l, ss_e = ss_l + sl, ss_e + se
        df_l, df_e = df_l + L - 1, df_e + (L - 1) * (n - 1)
        by_group.append(se / ((L - 1) * (n - 1)))
        launch_by_group.append(sl / (L - 1))
    if df_l == 0:
        nan = float("nan")
        return LaunchVariance(nan, nan, nan, nan, tuple(by_group), 0, 0, n, tuple(y.shape[0] for y in ys), names,
                              tuple(launch_by_group))
    ms_l, ms_e = ss_l / df_l, ss_e / df_e
    raw = (ms_l - ms_e) / n
    return LaunchVariance(max(raw, 0.0), raw, ms_l, ms_e, tuple(by_group), df_l, df_e, n,
                          tuple(y.shape[0] for y in ys), names, tuple(launch_by_group))


@dataclass(frozen=True)
class LaunchAwareResult:
    """The accuracy test of B against A with its variance decomposition (proportions as fractions)."""

    delta: float
    se: float
    #: degrees of freedom of the t reference (inf for the question-level fallback)
    df: float
    t: float
    p: float
    ci: tuple[float, float]
    alpha: float
    significant: bool
    n: int
    launches_a: int
    launches_b: int
    launches_aa: int
    #: 1/L_A + 1/L_B
    k: float
    #: the parts of V = var_launch + var_heterogeneity (var_question = S²_d/n, var_noise = e)
    var_launch: float
    var_heterogeneity: float
    var_question: float
    var_noise: float
    sigma2_launch: float
    df_launch: int
    variance_source: str
    method: str
    qualification: str | None
    components: LaunchVariance | None
    #: Welch-Satterthwaite df of the launch term alone (each configuration's launch variance on its own df)
    df_launch_term: float | None = None


def _source(la: int, laa: int, lb: int, comp: LaunchVariance) -> str:
    la_cfg = comp.launches[0]
    parts = []
    if la_cfg >= 2:
        if laa and la == 1:
            parts.append(f"the A/A control's launches with arm A's one ({la_cfg} launches of A)")
        elif laa:
            parts.append(f"A's {la_cfg} launches ({la} of arm A, {la_cfg - la} of the A/A control)")
        else:
            parts.append(f"arm A's {la_cfg} launches")
    if lb >= 2:
        parts.append(f"arm B's {lb} launches")
    return (f"σ²_L from the between-launch variation within {' and '.join(parts)}, pooled, df {comp.df_launch} "
            f"({comp.questions} questions every launch answered)")


def launch_aware_test(a: ArmRuns, b: ArmRuns, aa: ArmRuns | None = None, *, alpha: float = ALPHA,
                      keep: np.ndarray | None = None, include_aa_in_estimate: bool = False) -> LaunchAwareResult:
    """Two-sided test of Δ = 0 and the (1 - α) interval of Δ = mean_i (B̄_i - Ā_i) over ``keep`` (default: the
    questions both arms answered), the launch variance from every launch, the A/A control's included. Δ uses
    arm A's runs only unless ``include_aa_in_estimate`` (then L_A counts the A/A launches too)."""
    am, bm = question_means(a), question_means(b)
    cfg = a if aa is None else a.concat(aa)
    if include_aa_in_estimate:
        am = question_means(cfg)
    answered = ~(np.isnan(am) | np.isnan(bm))
    keep = answered if keep is None else np.asarray(keep, dtype=bool) & answered
    n = int(keep.sum())
    if n < 2:
        raise ValueError(f"only {n} question(s) answered by both arms; nothing to compare")
    d = bm[keep] - am[keep]
    delta = float(d.mean())
    var_q = float(np.var(d, ddof=1)) / n
    la = len(cfg.launch_ids()) if include_aa_in_estimate else len(a.launch_ids())
    lb = len(b.launch_ids())
    laa = len(cfg.launch_ids()) - len(a.launch_ids())
    k = 1.0 / la + 1.0 / lb
    tabs = [launch_means(cfg)[:, keep], launch_means(b)[:, keep]]
    ok = ~np.isnan(np.vstack(tabs)).any(axis=0)  # the questions every launch answered
    comp = variance_components([t[:, ok] for t in tabs], ("A", "B")) if ok.sum() >= 2 else None

    if comp is None or comp.df_launch == 0:
        c = consistent_paired(d, alpha)
        se = math.sqrt(var_q)
        why = QUALIFICATION_NO_LAUNCHES if comp is not None else (
            "valid only if launches do not shift accuracy: fewer than two questions were answered by every "
            "launch, so the launch-to-launch variance cannot be estimated")
        return LaunchAwareResult(delta, se, math.inf, delta / se if se > 0 else 0.0, c.p, c.ci, alpha,
                                 c.significant, n, la, lb, laa, k, 0.0, var_q, var_q, math.nan, math.nan, 0,
                                 "none: no configuration with two launches", METHOD_QUESTION, why, comp)

    mse_a, mse_b = (comp.ms_resid if m is None else m for m in comp.ms_resid_by_group)
    n_c = comp.questions
    # each configuration's variance of a launch accuracy over the n questions of Δ: MS_L,g / n_c, adjusted
    # for the questions some launch missed (σ̂²_L,g + MS_E / n = MS_L,g / n when n_c = n)
    tau2 = [math.nan if m is None else m / n_c + comp.ms_resid * (1.0 / n - 1.0 / n_c)
            for m in comp.ms_launch_by_group]
    df_g = [L - 1 for L in comp.launches]
    cv = combine_variance(tau2[0], tau2[1], mse_a / n, mse_b / n, df_g[0], df_g[1], la, lb, var_q, n,
                          comp.df_resid)
    v, df, var_l, het = float(cv.var), float(cv.df), float(cv.var_launch), float(cv.var_heterogeneity)
    noise = mse_a / la / n + mse_b / lb / n
    se = math.sqrt(v)
    t = delta / se
    p = min(1.0, 2 * float(t_sf(abs(t), df)))
    q = float(t_ppf(1 - alpha / 2, df))
    ci = (max(-1.0, delta - q * se), min(1.0, delta + q * se))
    qual = ("one launch per arm: σ²_L comes from the A/A control's launches only; it assumes B's launches "
            "vary as A's do") if la == 1 and lb == 1 else None
    src = _source(len(a.launch_ids()), laa, lb, comp)
    return LaunchAwareResult(delta, se, df, t, p, ci, alpha, p < alpha, n, la, lb, laa, k, var_l, het, var_q,
                             noise, comp.sigma2, comp.df_launch, src, METHOD, qual, comp,
                             df_launch_term=float(cv.df_launch))


@dataclass(frozen=True)
class CombinedVariance:
    """:func:`combine_variance`: V, its df and parts (arrays when the inputs are: the planner's draws)."""

    var: np.ndarray
    df: np.ndarray
    var_launch: np.ndarray
    var_heterogeneity: np.ndarray
    #: df of the launch term alone (Welch-Satterthwaite)
    df_launch: np.ndarray


def combine_variance(tau2_a: float | np.ndarray, tau2_b: float | np.ndarray, noise_a: float, noise_b: float,
                     df_a: int, df_b: int, la: int, lb: int, var_q: float | np.ndarray, n: int,
                     df_e: int) -> CombinedVariance:
    """V = Var(Δ̂) and its Satterthwaite df ν = (b'_A + b'_B + h)² / (b'_A²/df_A + b'_B²/df_B + [h > 0]
    (S⁴_d/(n²(n - 1)) + e²/df_E)), b'_g = :func:`df_weight` / L_g, clipped to [min(df_A, df_B), n - 1 + df_L].
    ``tau2_g`` = MS_L,g / n on ``df_g`` = L_g - 1 (df 0 borrows the other's), ``noise_g`` = MS_E,g / n,
    ``var_q`` = S²_d / n. Vectorised over ``tau2_a`` / ``tau2_b``: the planner runs the verdict's own
    arithmetic on draws of them."""
    ta, tb = np.asarray(tau2_a, dtype=float), np.asarray(tau2_b, dtype=float)
    if df_a == 0:
        ta = tb
    if df_b == 0:
        tb = ta
    var_l = np.maximum(ta / la + tb / lb, 0.0)
    fa, fb = df_weight(ta, noise_a, df_a) / la, df_weight(tb, noise_b, df_b) / lb
    if df_a and df_b:
        den_l = fa**2 / df_a + fb**2 / df_b
        low = float(min(df_a, df_b))
    else:   # one estimate serves both terms: they are one term on its df
        den_l = (fa + fb) ** 2 / max(df_a, df_b)
        low = float(max(df_a, df_b))
    e = noise_a / la + noise_b / lb
    het = np.maximum(0.0, np.asarray(var_q, dtype=float) - e)
    den = den_l + np.where(het > 0, var_q**2 / (n - 1) + e**2 / max(df_e, 1), 0.0)
    v = np.maximum(var_l + het, 1.0 / n**2)   # one question's worth: identical launches cannot claim anything
    with np.errstate(divide="ignore", invalid="ignore"):   # identical launches: no variance, the launch df
        df = np.where(den > 0, (fa + fb + het) ** 2 / den, float(df_a + df_b))
        df_l = np.where(den_l > 0, (fa + fb) ** 2 / den_l, float(df_a + df_b))
    df, df_l = np.clip(df, low, float(n - 1 + df_a + df_b)), np.clip(df_l, low, float(df_a + df_b))
    return CombinedVariance(v, df, var_l, np.broadcast_to(het, v.shape).copy(), df_l)


#: in the df, a launch variance beyond this many times its within-launch-noise part (clearly a launch
#: variance, not noise) enters at its upper confidence limit at this level (see :func:`df_weight`)
DF_EXCESS_OVER_NOISE = 4.0
DF_UPPER_LEVEL = 0.95


def df_weight(tau2: np.ndarray, noise: float, df: int) -> np.ndarray:
    """A configuration's launch-accuracy variance as it enters Satterthwaite's df (not V): at no less than
    its within-launch-noise part ``noise``, and its part beyond ``DF_EXCESS_OVER_NOISE`` x ``noise`` at its
    upper ``DF_UPPER_LEVEL`` confidence limit (τ̂² df / χ²_{1-level, df}). Why: the df from the realised
    estimates grow exactly when the term on fewer df is small by chance, i.e. when |t| is large (7 % of true
    nulls with B's launches 6x as noisy as A's); docs/calibration.md measures the threshold."""
    t = np.asarray(tau2, dtype=float)
    if df <= 0:
        return np.maximum(t, noise)
    up = df / float(chdtri(df, DF_UPPER_LEVEL)) - 1.0
    return np.maximum(t, noise) + up * np.maximum(t - DF_EXCESS_OVER_NOISE * noise, 0.0)


def power_launch_aware(effect: float, n: int, sigma2_launch: float | tuple[float, float], noise_per_launch: float,
                       launches_a: int, launches_b: int, launches_aa: int = 0, heterogeneity: float = 0.0,
                       alpha: float = ALPHA, tails: str = "normal") -> float:
    """Power of :func:`launch_aware_test` to detect ``effect`` with L_A and L_B launches per arm plus L_AA
    launches of the A/A control, n questions: a launch's accuracy has variance σ²_L,g + ``noise_per_launch``,
    and Δ̂ ~ N(effect, τ²_A/L_A + τ²_B/L_B) while the verdict's V̂ also holds the question x arm term
    ``heterogeneity`` (putting it in Var(Δ̂) too under-planned). The power averages the chance that |Δ̂|
    clears t_{1-α/2, ν} sqrt(V̂) over draws τ̂²_g = τ²_g χ²_df/df, V̂ and ν from :func:`combine_variance`."""
    s2 = sigma2_launch if isinstance(sigma2_launch, tuple) else (sigma2_launch, sigma2_launch)
    tau_a, tau_b = max(s2[0], 0.0) + noise_per_launch, max(s2[1], 0.0) + noise_per_launch
    v_true = tau_a / launches_a + tau_b / launches_b
    e = noise_per_launch * (1.0 / launches_a + 1.0 / launches_b)
    var_q = e + max(heterogeneity, 0.0)
    df_a, df_b = launches_a + launches_aa - 1, launches_b - 1
    if v_true <= 0 and var_q <= 0:
        return 1.0
    if df_a + df_b == 0:
        return float(_power_given(effect, v_true, np.array([var_q]), np.array([math.inf]), alpha).mean())
    if tails != "normal":
        return _power_simulated(effect, (max(s2[0], 0.0), max(s2[1], 0.0)), noise_per_launch, launches_a,
                                launches_b, launches_aa, var_q, n, alpha, tails)
    rng = np.random.default_rng(0)
    wa = rng.chisquare(df_a, POWER_DRAWS) / df_a if df_a else np.full(POWER_DRAWS, np.nan)
    wb = rng.chisquare(df_b, POWER_DRAWS) / df_b if df_b else np.full(POWER_DRAWS, np.nan)
    # the residual df of the ANOVA (launches x questions), large: the noise is known to it
    df_e = max((df_a + df_b) * (n - 1), 1)
    cv = combine_variance(tau_a * wa, tau_b * wb, noise_per_launch, noise_per_launch, df_a, df_b, launches_a,
                          launches_b, var_q, n, df_e)
    return float(_power_given(effect, v_true, cv.var, cv.df, alpha).mean())


#: the launch shifts' tails the plan can assume: "normal", or "t3" (Student-t with 3 df scaled to the
#: launch variance: an occasional launch far off)
LAUNCH_TAILS = ("normal", "t3")


def _power_simulated(effect: float, tau_s: tuple[float, float], noise: float, la: int, lb: int, laa: int,
                     var_q: float, n: int, alpha: float, tails: str) -> float:
    """The verdict's rejection rate on simulated launch accuracies σ_L,g U + sqrt(noise) Z (U of unit variance
    with the given tails): with heavy tails the sample variance of a few launches is usually below σ²_L (and
    Δ̂ large with it when it is not), so the verdict rejects more often than under normal shifts."""
    if tails not in LAUNCH_TAILS:
        raise ValueError(f"launch tails must be one of {', '.join(LAUNCH_TAILS)}: got {tails!r}")
    rng = np.random.default_rng(0)
    draws = SIMULATED_DRAWS

    def launches(sd: float, L: int) -> np.ndarray:
        if tails == "t3":   # Z / sqrt(χ²₃/3), from normals: numpy's standard_t is ~10x slower
            u = rng.standard_normal((draws, L)) / np.sqrt(np.sum(rng.standard_normal((3, draws, L)) ** 2, axis=0))
        else:
            u = rng.standard_normal((draws, L))
        return sd * u + math.sqrt(noise) * rng.standard_normal((draws, L))

    ya, yb = launches(math.sqrt(tau_s[0]), la + laa), launches(math.sqrt(tau_s[1]), lb)
    d = effect + yb.mean(axis=1) - ya[:, :la].mean(axis=1)
    df_a, df_b = la + laa - 1, lb - 1
    ta = ya.var(axis=1, ddof=1) if df_a else np.full(draws, np.nan)
    tb = yb.var(axis=1, ddof=1) if df_b else np.full(draws, np.nan)
    cv = combine_variance(ta, tb, noise, noise, df_a, df_b, la, lb, var_q, n, max((df_a + df_b) * (n - 1), 1))
    # the p of each draw, not its t quantile: scipy's t inverse is ~20x slower per draw
    return float(np.mean(2 * t_sf(np.abs(d) / np.sqrt(cv.var), cv.df) < alpha))


def _power_given(effect: float, v_true: float, v_hat: np.ndarray, df: np.ndarray, alpha: float) -> np.ndarray:
    """P(|Δ̂| > t_{1-α/2,df} sqrt(v_hat)) for Δ̂ ~ N(effect, v_true), per draw."""
    c = np.where(np.isinf(df), ndtri(1 - alpha / 2), t_ppf(1 - alpha / 2, np.where(np.isinf(df), 1.0, df)))
    half = c * np.sqrt(v_hat)
    sd = max(math.sqrt(v_true), 1e-300)   # no noise at all: Δ̂ is the effect
    return ndtr((effect - half) / sd) + ndtr((-effect - half) / sd)


def launches_needed(effect: float, n: int, sigma2_launch: float | tuple[float, float], noise_per_launch: float,
                    launches_aa: int = 0, heterogeneity: float = 0.0, alpha: float = ALPHA, power: float = 0.8,
                    most: int = 200, tails: str = "normal") -> int | None:
    """Fewest launches per arm (a fresh launch per repeat) whose :func:`power_launch_aware` reaches ``power``;
    None beyond ``most``."""
    def enough(launches: int) -> bool:
        return power_launch_aware(effect, n, sigma2_launch, noise_per_launch, launches, launches, launches_aa,
                                  heterogeneity, alpha, tails) >= power

    # one launch per arm without an A/A launch is the question-level test, whose power can exceed that of two
    # launches on 2 df; from two launches on, power grows with the launches, so a bisection finds the fewest
    if enough(1):
        return 1
    # doubling from 2 first: a plan's cost grows with the launches it simulates, and most answers are small
    lo, hi = 1, 2
    while hi < most and not enough(hi):
        lo, hi = hi, min(2 * hi, most)
    if hi > most or (hi == most and not enough(most)):
        return None
    while hi - lo > 1:  # not enough at lo, enough at hi
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi
