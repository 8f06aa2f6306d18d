"""The comparison of two arms' score matrices: the design, the test, the interval, errors and the verdict.

Inference is at the level that is exchangeable under the design that was run:

- **questions** (default): per question, each arm's mean (passes averaged within a launch, then launches;
  errored runs skipped), d_i = B_i - A_i, and the paired sign-flip test of Δ = mean d_i
  (:mod:`.signflip`; mid-p, exact). The interval is Tango's score interval (:mod:`.score`) of the
  effective table of the d_i. Runs that repeat verbatim leave every d_i unchanged: no extra evidence.
- **launches**: when an arm's launches differ in accuracy more than question-level noise explains (Cochran's
  Q over the launches of each arm, p < α), the launch-wide shifts are the noise that matters: the test is
  Welch's t on launch accuracies (an arm with one launch borrows the other arm's launch variance) and the
  interval its t interval. One launch per arm cannot detect such a shift at all: the design says so.

Errors: each arm's error rate, a paired test of whether they differ, and the verdict recomputed with each
arm's unanswered questions (no answered run) counted wrong and the other's right, both ways; if the
verdict changes, it becomes ``inconclusive`` and the reason says why. A question with some answered runs
uses them (its errored runs are skipped), so repeats make transient errors nearly free. The MDE then
includes the adverse bound's shift of Δ (an effect must clear it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from itertools import combinations
from typing import Any

import numpy as np

from .dist import t_ppf, t_sf
from .equivalence import score_tost, t_tost
from .launches import ArmRuns, launch_accuracies, launch_heterogeneity, question_means
from .power import mde_paired_exact, mde_t
from .repeats import discordance
from .score import effective_table, score_interval
from .signflip import signflip_test
from .verdict import Evidence, Verdict, decide

SIGNFLIP = "paired sign-flip test over questions (mid-p)"
LAUNCH_T = "Welch t-test over launches"
SCORE_CI = "Tango score interval"
LAUNCH_CI = "t interval over launches"


# ------------------------------------------------------------------------------------------ design
def describe_design(a: ArmRuns, b: ArmRuns, heterogeneity: dict[str, Any] | None, unit: str) -> dict[str, Any]:
    """Which design was run (launches per arm, passes per launch) and what it can and cannot resolve."""
    la, lb = len(a.launch_ids()), len(b.launch_ids())
    pa, pb = a.passes_per_launch(), b.passes_per_launch()
    if la == 1 and lb == 1:
        kind = "one run per arm" if pa == [1] and pb == [1] else "one launch per arm, repeated passes"
        cannot = ("one launch per arm cannot separate a launch-wide accuracy shift (something fixed for a "
                  "server launch that moves every answer alike) from the change: run each arm on several "
                  "launches (experiment.restart_per_repeat=true) to resolve it")
    elif la >= 2 and lb >= 2:
        kind = "several launches per arm"
        cannot = (f"launch-wide shifts too small for Cochran's Q over {la} + {lb} launches to detect are treated "
                  "as absent (more launches per arm resolve smaller ones)")
    else:
        kind = "several launches for one arm only"
        cannot = ("the arm with one launch has no launch-to-launch variation of its own; it is assumed equal "
                  "to the other arm's")
    notes = []
    if max(pa + pb) > 1:
        notes.append("repeated passes on one launch add evidence only through answers that vary from pass to "
                      "pass; verbatim repeats add none")
    if unit == "launch":
        notes.append("launches differ in accuracy beyond question-level noise: launches are the unit")
    return {"kind": kind, "launches": {"a": la, "b": lb}, "passes_per_launch": {"a": pa, "b": pb},
            "unit": unit, "launch_heterogeneity": heterogeneity, "cannot_resolve": cannot, "notes": notes}


# ------------------------------------------------------------------------------------------ A/A noise
def within_arm_psi(arm: ArmRuns) -> dict[str, Any] | None:
    """Mean discordance over pairs of runs of one configuration, split by whether the pair shares a launch.
    The value reported is the across-launch one when any pair spans two launches (it includes launch noise),
    else the within-launch one (passes on one server only)."""
    across: list[float] = []
    within: list[float] = []
    for i, j in combinations(range(arm.n_runs), 2):
        v = discordance(arm.scores[i], arm.scores[j])
        if not np.isnan(v):
            (within if arm.launches[i] == arm.launches[j] else across).append(v)
    if not across and not within:
        return None
    return {"value": float(np.mean(across or within)), "source": "across launches" if across else "within one launch",
            "across_launches": float(np.mean(across)) if across else None,
            "within_launch": float(np.mean(within)) if within else None, "pairs": len(across) + len(within)}


def psi_aa_block(a_cfg: ArmRuns, b: ArmRuns, psi_ab: float, n: int) -> dict[str, Any]:
    """ψ_AA: each arm's within-arm discordance, pooled evenly over the arms that have one, with its
    source, and a warning when it is ~0 while the A/B discordance is clearly above 0."""
    per = {"a": within_arm_psi(a_cfg), "b": within_arm_psi(b)}
    vals = [v["value"] for v in per.values() if v is not None]
    pooled = float(np.mean(vals)) if vals else None
    sources = sorted({v["source"] for v in per.values() if v is not None})
    warning = None
    if pooled is not None and psi_ab * n >= 10 and pooled < psi_ab / 4:
        warning = (f"A/A discordance ψ_AA = {100 * pooled:.2f} % is far below the A/B discordance ψ = "
                   f"{100 * psi_ab:.2f} %: the repeated runs probably share a launch and do not sample "
                   "launch-to-launch noise (run the A/A control on a fresh launch); the noise band is not a guide")
    return {"psi_aa": pooled, "per_arm": {k: (v["value"] if v else None) for k, v in per.items()},
            "detail": per, "source": " and ".join(sources) if sources else None, "warning": warning}


# ------------------------------------------------------------------------------------------ core
def launch_t(a: ArmRuns, b: ArmRuns, keep: np.ndarray, delta: float, a_config: ArmRuns | None = None) -> dict[str, Any]:
    """SE and Welch-Satterthwaite df of Δ from the arms' launch accuracies over the questions ``keep``.
    An arm with one launch borrows the pooled launch variance of the configurations with several
    (``a_config``: arm A's configuration including its A/A launches, default ``a``)."""
    ms = [m[~np.isnan(m)] for m in (launch_accuracies(a, keep), launch_accuracies(b, keep))]
    src = [m[~np.isnan(m)] for m in (launch_accuracies(a_config or a, keep), ms[1])]
    multi = [m for m in src if m.size >= 2]
    pooled_df = sum(m.size - 1 for m in multi)
    if pooled_df == 0:
        raise ValueError("launch-level inference needs a configuration with two or more launches")
    pooled = sum(float(np.var(m, ddof=1)) * (m.size - 1) for m in multi) / pooled_df
    comps = [(float(np.var(m, ddof=1)) / m.size, m.size - 1) for m in ms if m.size >= 2]
    single = [m for m in ms if m.size < 2]
    if single:   # the arms with one launch share one borrowed estimate: one component, its df once
        comps.append((pooled * sum(1.0 / max(m.size, 1) for m in single), pooled_df))
    var = sum(v for v, _ in comps)
    df = var**2 / sum(v**2 / d for v, d in comps) if var > 0 else float(pooled_df)
    se = math.sqrt(var)
    p = float(2 * t_sf(abs(delta) / se, df)) if se > 0 else 1.0
    return {"se": se, "df": float(df), "p": p, "launch_accuracies_a": ms[0].tolist(),
            "launch_accuracies_b": ms[1].tolist()}


def analyse(a: ArmRuns, b: ArmRuns, *, aa: ArmRuns | None = None, alpha: float = 0.05,
            margin: float | None = None, compute_mde: bool = True) -> dict[str, Any]:
    """Statistics of B against A over the questions both arms answered at least once (no verdict).

    Returns the paired set (``keep``), per-question means, Δ, the test (name, p), the (1 - α) interval,
    the TOST / non-inferiority block when ``margin`` is set, the MDE of the test used and the design.
    """
    am, bm = question_means(a), question_means(b)
    keep = ~(np.isnan(am) | np.isnan(bm))
    n = int(keep.sum())
    if n < 2:
        raise ValueError(f"only {n} question(s) answered by both arms; nothing to compare")
    d = bm[keep] - am[keep]
    delta = float(d.mean())
    a_cfg = a if aa is None else a.concat(aa)
    het = launch_heterogeneity([a_cfg, b])
    unit = "launch" if het is not None and het["p"] < alpha else "question"
    table = effective_table(d)
    res: dict[str, Any] = {"keep": keep, "n": n, "a_means": am[keep], "b_means": bm[keep], "d": d,
                           "delta": delta, "table": table, "unit": unit, "tost": None, "mde": None,
                           "design": describe_design(a, b, het, unit)}
    if unit == "question":
        sf = signflip_test(d)
        lo, hi = score_interval(table["b"], table["c"], table["n"], alpha)
        res.update(test=SIGNFLIP, p=sf["p"], p_floor=sf["p_floor"], ci=[float(lo), float(hi)],
                   ci_method=SCORE_CI, se=math.sqrt(float(np.sum((d - delta) ** 2))) / n, signflip=sf)
        if margin is not None:
            res["tost"] = score_tost(table["b"], table["c"], table["n"], margin, alpha)
        if compute_mde:
            # chance disagreement: the part of the (effective) discordance that is not the observed effect
            psi_noise = 2 * min(table["b"], table["c"]) / table["n"]
            res["mde"] = mde_paired_exact(table["n"], psi_noise, alpha)
    else:
        lt = launch_t(a, b, keep, delta, a_cfg)
        tq = float(t_ppf(1 - alpha / 2, lt["df"]))
        res.update(test=LAUNCH_T, p=lt["p"], p_floor=None, ci=[delta - tq * lt["se"], delta + tq * lt["se"]],
                   ci_method=LAUNCH_CI, se=lt["se"], launch_t=lt)
        if margin is not None:
            res["tost"] = t_tost(delta, lt["se"], lt["df"], margin, alpha)
        if compute_mde and lt["se"] > 0:
            res["mde"] = mde_t(lt["se"], lt["df"], alpha)
    return res


def evidence(res: dict[str, Any]) -> Evidence:
    t = res["tost"] or {}
    return Evidence(delta=res["delta"], p=res["p"], test=res["test"], ci=res["ci"], ci_method=res["ci_method"],
                    ci_tost=t.get("ci"), p_equivalence=t.get("p_equivalence"),
                    p_noninferiority=t.get("p_noninferiority"), mde=res.get("mde"), p_floor=res.get("p_floor"))


# ------------------------------------------------------------------------------------------ errors
def error_rates(arm: ArmRuns) -> float:
    return float(np.isnan(arm.scores).mean()) if arm.scores.size else 0.0


def unanswered(arm: ArmRuns) -> np.ndarray:
    """Questions the arm has no answer for in any run (errored or missing everywhere)."""
    return np.isnan(arm.scores).all(axis=0)


def impute_unanswered(arm: ArmRuns, value: float) -> ArmRuns:
    """The arm with its unanswered questions scored ``value`` (1 right, 0 wrong) in every run. A question
    with some answered runs keeps using those: its errored runs are skipped, not imputed."""
    return arm.with_scores(np.where(unanswered(arm)[None, :], value, arm.scores))


def error_block(a: ArmRuns, b: ArmRuns) -> dict[str, Any]:
    """Per-arm error rates (share of runs x questions errored or missing), the questions each arm has no
    answer for, and the paired sign-flip test (mid-p; the mid-p McNemar test for one run per arm) over
    questions of whether the arms' error shares differ."""
    ea, eb = np.isnan(a.scores).mean(axis=0), np.isnan(b.scores).mean(axis=0)
    return {"rate_a": error_rates(a), "rate_b": error_rates(b),
            "unanswered_a": int(unanswered(a).sum()), "unanswered_b": int(unanswered(b).sum()),
            "test": "paired sign-flip test over questions of the error shares (mid-p)",
            "p": signflip_test(eb - ea)["p"]}


def compare_arms(a: ArmRuns, b: ArmRuns, *, aa: ArmRuns | None = None, hypothesis: str = "superiority",
                 alpha: float = 0.05, margin: float | None = None, min_effect: float | None = None,
                 failures: Sequence[str] = (), max_error_rate: float = 0.02,
                 compute_mde: bool = True) -> dict[str, Any]:
    """Analysis and verdict of B against A, with the error bounds (see the module docstring)."""
    if a.scores.shape[1] != b.scores.shape[1]:
        raise ValueError("arms are not aligned by question")
    res = analyse(a, b, aa=aa, alpha=alpha, margin=margin, compute_mde=compute_mde)
    errs = error_block(a, b)
    error_rate = max(errs["rate_a"], errs["rate_b"])
    verdict_of = partial(decide, hypothesis=hypothesis, alpha=alpha, margin=margin, min_effect=min_effect)
    v = verdict_of(evidence(res), failures=failures, error_rate=error_rate, max_error_rate=max_error_rate)
    bounds: dict[str, Any] = {}
    main_word = v.word
    if v.word != "not_comparable" and (errs["unanswered_a"] or errs["unanswered_b"]):
        for name, va, vb in (("against_b", 1.0, 0.0), ("against_a", 0.0, 1.0)):
            r = analyse(impute_unanswered(a, va), impute_unanswered(b, vb), aa=aa, alpha=alpha, margin=margin,
                        compute_mde=False)
            bv = verdict_of(evidence(r))
            bounds[name] = {"delta": r["delta"], "ci": r["ci"], "test": r["test"], "p": r["p"], "verdict": bv.word}
        if {bounds[k]["verdict"] for k in bounds} != {v.word}:
            why = (f"request errors could change the verdict: counting B's unanswered questions wrong and A's "
                   f"right gives {bounds['against_b']['verdict']} (Δ = {100 * bounds['against_b']['delta']:+.2f} pp), "
                   f"the reverse {bounds['against_a']['verdict']} (Δ = {100 * bounds['against_a']['delta']:+.2f} pp); "
                   f"unanswered questions A {errs['unanswered_a']}, B {errs['unanswered_b']} (error rates A "
                   f"{100 * errs['rate_a']:.2f} %, B {100 * errs['rate_b']:.2f} %); without them: {v.word}, "
                   f"Δ = {100 * res['delta']:+.2f} pp")
            v = Verdict("inconclusive", why, "errors")
        # the bounds must agree for a verdict: an effect must also clear the adverse bound's shift
        shift = max(res["delta"] - bounds["against_b"]["delta"], bounds["against_a"]["delta"] - res["delta"], 0.0)
        errs["mde_allowance"] = shift
        if res["mde"] is not None:
            res["mde_test"] = res["mde"]
            res["mde"] = res["mde"] + shift
    errs.update(bounds=bounds or None,
                changes_verdict=bool(bounds) and {bounds[k]["verdict"] for k in bounds} != {main_word})
    res.update(verdict=v, errors=errs, error_rate=error_rate)
    return res
