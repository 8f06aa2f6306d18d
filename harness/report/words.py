"""Numbers and verdicts in words: the sentence a reviewer can quote from the report.

All inputs are proportions as fractions (as in ``comparison.json``); everything shown is in percent or
percentage points (pp). The number formatters accept ``None`` (and anything not a number) and then say "n/a".
"""

from __future__ import annotations

import math
from typing import Any

from harness.analysis.identity import detail as identity_detail
from harness.results.schema import Comparison, SweepSummary
from harness.stats.verdict import at_floor

VERDICT_LABELS = {"improved": "IMPROVED", "regressed": "REGRESSED", "equivalent": "EQUIVALENT",
                  "noninferior": "NON-INFERIOR", "inconclusive": "INCONCLUSIVE",
                  "not_comparable": "NOT COMPARABLE", "identical": "IDENTICAL", "differs": "DIFFERS",
                  "not_deterministic": "NOT DETERMINISTIC", "diverged": "DIVERGED",
                  "indistinguishable": "INDISTINGUISHABLE", "not_measured": "NOT MEASURED"}


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return None if math.isnan(x) else float(x)


def finite(x: Any) -> float | None:
    """``x`` as a float when it is a finite number (not a bool), else None."""
    v = _num(x)
    return None if v is None or math.isinf(v) else v


def pct(x: Any, digits: int = 2) -> str:
    """0.9454 -> '94.54 %'."""
    v = _num(x)
    return "n/a" if v is None else f"{100 * v:.{digits}f} %"


def pp(x: Any, signed: bool = True, digits: int = 2) -> str:
    """0.003 -> '+0.30 pp' (a true minus sign for negatives)."""
    v = _num(x)
    if v is None:
        return "n/a"
    s = f"{100 * v:+.{digits}f}" if signed else f"{100 * v:.{digits}f}"
    return s.replace("-", "\u2212") + " pp"


def effect_pp(x: Any) -> str:
    """An effect size the design can detect (MDE, smallest detectable effect): ``4.62 pp``; one past 100 pp or
    infinite (too few questions or repeats) is "none (no effect up to 100 pp is detectable)"."""
    if isinstance(x, int | float) and not isinstance(x, bool) and (math.isinf(x) or x > 1):
        return "none (no effect up to 100 pp is detectable)"
    return pp(x, signed=False)


def ci_pp(ci: Any, digits: int = 2) -> str:
    """[lo, hi] -> '[−0.43, +1.04] pp'."""
    if not isinstance(ci, list | tuple) or len(ci) != 2 or _num(ci[0]) is None or _num(ci[1]) is None:
        return "n/a"
    lo, hi = (f"{100 * float(v):+.{digits}f}".replace("-", "\u2212") for v in ci)
    return f"[{lo}, {hi}] pp"


def ci_pct(ci: Any, digits: int = 2) -> str:
    """[lo, hi] -> '[93.20, 95.61] %'."""
    if not isinstance(ci, list | tuple) or len(ci) != 2 or _num(ci[0]) is None or _num(ci[1]) is None:
        return "n/a"
    return f"[{100 * float(ci[0]):.{digits}f}, {100 * float(ci[1]):.{digits}f}] %"


def pval(p: Any) -> str:
    v = _num(p)
    if v is None:
        return "n/a"
    return f"{v:.3g}"


def p_bound(p: Any, floor: Any = None, raw: Any = None) -> str:
    """A p-value for a table cell: ``0.0213``; ``< 0.0001`` when a resampling test's p sits at its floor
    (:func:`harness.stats.verdict.at_floor`: p is only bounded by 1/R, as :func:`harness.stats.format_p` writes
    it); an adjusted p (``raw``: the p it was adjusted from) of such a p is a bound too: ``≤ 0.0003``."""
    v, f = _num(p), _num(floor)
    adjusted = raw is not None
    if v is None:
        return "n/a"
    if f is not None and at_floor(_num(raw) if adjusted else v, f):
        return f"≤ {pval(v)}" if adjusted else f"< {f / (1 - f):.3g}"
    return pval(v)


def p_text(c: Comparison) -> str:
    """The p that decided the verdict: ``p = 0.0213``, ``p < 0.0001`` at a Monte Carlo floor, or "n/a"."""
    if c.p is not None and at_floor(c.p, c.p_floor):
        assert c.p_floor is not None
        return f"p < {c.p_floor / (1 - c.p_floor):.2g}"
    return f"p = {pval(c.p)}"


def test_text(c: Comparison) -> str:
    """``<test>, p = ...`` of the test that decided the verdict (what decided it when no p did)."""
    if not c.test:
        return "no test decided the verdict"
    if c.p is None:
        return f"decided by {c.test}"
    return f"{c.test}, {p_text(c)}"


def verdict_label(word: str | None) -> str:
    return VERDICT_LABELS.get(word or "", (word or "unknown").upper().replace("_", " "))


def mass(x: Any) -> str:
    """A paired table's cell: a whole count as it is, question mass (repeats) to one decimal."""
    v = _num(x)
    if v is None:
        return "—"
    return f"{v:g}" if v == int(v) else f"{v:.1f}"


def detectable(c: Comparison) -> str:
    """The one detectable effect every surface names: ``detectable effect 1.37 pp (80 % power)``."""
    return f"detectable effect {effect_pp(c.mde)} (80 % power)"


def questions_line(c: Comparison) -> str:
    """The paired questions in whole questions: who got which right (one run per arm), or on how many questions
    each arm was right more often over its repeats (the per-question means, explained here once)."""
    if c.table_source == "one run per arm":
        return (f"questions: {c.both:g} right in both, {c.b_only:g} only B right, {c.a_only:g} only A right, "
                f"{c.neither:g} wrong in both")
    better = c.diagnostics.get("questions_better")
    if isinstance(better, dict) and all(isinstance(better.get(k), int) for k in ("a", "b", "same")):
        return (f"questions: B right more often on {better['b']}, A on {better['a']}, the same on "
                f"{better['same']} (each question's share of right answers over its arm's repeats)")
    return (f"questions: B ahead on {c.b_only:.1f}, A on {c.a_only:.1f} (question mass: each question's share of "
            "right answers over its arm's repeats)")


def launch_variance_line(c: Comparison) -> str | None:
    """The launch-to-launch variance the test used; one estimated at zero is said as such, beside the t-test
    that still carries the uncertainty of that estimate (so "sd 0.00" under "t-test (4.1 df)" does not puzzle)."""
    lv = c.launch_variance
    if lv is None or lv.sd is None:
        return None
    if round(100 * lv.sd, 2) == 0:
        df = f" ({c.delta_df:.1f} df)" if c.delta_df is not None else ""
        return (f"launch variance: none measurable (estimated sd {pp(lv.sd, signed=False)} per launch; {lv.source});"
                f" the t reference{df} still carries the uncertainty of that estimate")
    return f"launch variance: sd {pp(lv.sd, signed=False)} per launch; {lv.source}"


def verdict_facts(c: Comparison) -> list[str]:
    """The few plain facts under the verdict: accuracy of each arm, the questions, the detectable effect and the
    noise between launches, warnings. The statistician's details are :func:`how_decided`."""
    runs = (f" ({c.arms.a.n_runs} and {c.arms.b.n_runs} runs)" if c.arms.a.n_runs > 1 or c.arms.b.n_runs > 1
            else "")
    out = [f"accuracy: A {pct(c.arms.a.accuracy)}, B {pct(c.arms.b.accuracy)} on {c.n} questions{runs}"]
    if c.n_total != c.n:
        out[0] += f" ({c.n_total - c.n} of {c.n_total} without an answer from both arms)"
    out.append(questions_line(c))
    noise = (f"; a second launch of A moves accuracy by up to ±{pp(c.noise_band[1], signed=False)}"
             if c.noise_band is not None else "")
    if c.mde is not None:
        out.append(detectable(c) + noise)
    e = c.errors
    if e.rate_a > 0 or e.rate_b > 0:
        out.append(f"request errors: A {pct(e.rate_a)}, B {pct(e.rate_b)}")
    for w in c.warnings:
        out.append(f"warning: {w}")
    return out


def how_decided(c: Comparison) -> list[str]:
    """What a statistician needs to check the verdict: design, unit of inference, launch variance, the test and
    its p, the A/A noise band and ψ, the reason."""
    out = []
    s = f"{c.n} questions paired"
    if c.n_total != c.n:
        s += f" of {c.n_total} ({c.n_total - c.n} without an answer from both arms)"
    out.append(s + f"; runs per arm: A {c.arms.a.n_runs}, B {c.arms.b.n_runs}")
    d = c.design
    out.append(f"design: {d.kind} (launches A {d.launches.get('a')}, B {d.launches.get('b')}); unit of "
               f"inference: {d.unit}")
    lv = launch_variance_line(c)
    if lv:
        out.append(lv)
    if d.cannot_resolve:
        out.append(f"cannot resolve: {d.cannot_resolve}")
    if c.identity is not None:
        out += identity_detail(c.identity)
    if c.test:
        out.append(f"decided by: {test_text(c)}" + (f" (α = {c.test_alpha:g})" if c.test_alpha is not None else ""))
    if c.mde is not None:
        out.append(f"{detectable(c)}: {c.mde_method}")
    e = c.errors
    if e.gate is not None and e.gate.action != "none":
        out.append(f"request errors: {e.gate.action}: {e.gate.reason}")
    if c.noise_band is not None:
        out.append(f"A/A noise band of Δ: ±{pp(c.noise_band[1], signed=False)} (ψ_AA = {pct(c.psi_aa)}, "
                   f"{c.psi_aa_source or 'source not recorded'})")
    else:
        out.append("A/A noise band: not measured (no arm ran twice)")
    if c.verdict_reason:
        out.append(f"reason: {c.verdict_reason}")
    return out


def sweep_sentence(s: SweepSummary) -> str:
    counts: dict[str, int] = {}
    for r in s.comparisons:
        counts[r.verdict or "unknown"] = counts.get(r.verdict or "unknown", 0) + 1
    parts = ", ".join(f"{k} {verdict_label(w).lower()}" for w, k in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{len(s.comparisons)} comparison(s): {parts or 'none'}; p adjusted across the sweep by {s.correction}"
