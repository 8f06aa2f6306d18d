"""Numbers and verdicts in words: the sentence a reviewer can quote from the report.

All inputs are proportions as fractions (as in ``comparison.json``); everything shown is in percent or
percentage points (pp). Functions accept ``None`` and missing keys and then say "n/a".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

VERDICT_LABELS = {
    "improved": "IMPROVED",
    "regressed": "REGRESSED",
    "equivalent": "EQUIVALENT",
    "noninferior": "NON-INFERIOR",
    "inconclusive": "INCONCLUSIVE",
    "not_comparable": "NOT COMPARABLE",
}


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return None if math.isnan(x) else float(x)


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


def p_bound(p: Any, floor: Any = None, at_floor: Any = False, adjusted: bool = False) -> str:
    """A p-value for a table cell: ``0.0213``; ``< 0.0001`` when a resampling test's p sits at its floor
    1/(R+1) (none of R resamples reached the observed statistic: p is only bounded by 1/R, as
    :func:`harness.stats.format_p` writes it); an ``adjusted`` p of such a p is a bound too: ``≤ 0.0003``."""
    v, f = _num(p), _num(floor)
    if v is None:
        return "n/a"
    if at_floor is True and f is not None and 0 < f < 1:
        return f"≤ {pval(v)}" if adjusted else f"< {f / (1 - f):.3g}"
    return pval(v)


def p_text(c: Mapping[str, Any]) -> str:
    """The p that decided the verdict: ``p = 0.0213``, ``p < 0.0001`` at a Monte Carlo floor, or "n/a"."""
    v, f = _num(c.get("p")), _num(c.get("p_floor"))
    if v is not None and f is not None and v <= f * (1 + 1e-9):
        return f"p < {f / (1 - f):.2g}"
    return f"p = {pval(c.get('p'))}"


def test_text(c: Mapping[str, Any]) -> str:
    """``<test>, p = ...`` of the test that decided the verdict (what decided it when no p did)."""
    test = c.get("test")
    if not test:
        return "no test decided the verdict"
    if _num(c.get("p")) is None:
        return f"decided by {test}"
    return f"{test}, {p_text(c)}"


def verdict_label(word: str | None) -> str:
    return VERDICT_LABELS.get(word or "", (word or "unknown").upper().replace("_", " "))


def verdict_sentence(c: Mapping[str, Any]) -> str:
    """The verdict of a comparison as one quotable sentence (B against A), naming the decisive test."""
    word = c.get("verdict")
    alpha = _num(c.get("alpha")) or 0.05
    level = f"{100 * (1 - alpha):g} %"
    delta = pp(c.get("delta"))
    ci = ci_pp(c.get("delta_ci"))
    margin = _num(c.get("margin"))
    mde = _num(c.get("mde"))
    tost = c.get("tost") if isinstance(c.get("tost"), dict) else None
    seq = c.get("sequential") if isinstance(c.get("sequential"), dict) else None
    if seq and seq.get("stopped") and word != "not_comparable":
        fixed = c.get("verdict_fixed")
        also = (f"; the fixed-design test of the same data says {verdict_label(fixed).lower()}"
                if fixed and fixed != word else "")
        return (f"sequential design: {seq.get('sentence') or word} (Δ = {delta}, {level} CI {ci}){also}")
    reason = c.get("verdict_reason") or ""
    if word == "not_comparable":
        return (f"not comparable: {reason or 'an arm failed'}; no accuracy conclusion can be "
                "drawn from this run")
    if word in ("improved", "regressed"):
        verb = "improves" if word == "improved" else "regresses"
        return f"B {verb} accuracy: Δ = {delta} ({level} CI {ci}; {test_text(c)})"
    if word == "equivalent":
        tci = ci_pp(tost.get("ci")) if tost else "n/a"
        tl = f"{100 * (1 - 2 * alpha):g} %"
        return (f"equivalent: the arms are within ±{pp(margin, signed=False)} of each other "
                f"(Δ = {delta}, {tl} CI {tci} inside the margin; {test_text(c)})")
    if word == "noninferior":
        return (f"non-inferior: B is not worse than A by {pp(margin, signed=False)} or more "
                f"(Δ = {delta}, {level} CI {ci} lies above −{pp(margin, signed=False)}; {test_text(c)})")
    if word == "inconclusive":
        if (c.get("errors") or {}).get("changes_verdict"):
            return (f"inconclusive: request errors could decide the comparison — {reason} "
                    f"(Δ without errored answers = {delta}, {level} CI {ci})")
        if mde is not None:
            s = f"no detectable difference; this run could only detect effects larger than {pp(mde, signed=False)}"
        else:
            s = "no detectable difference at this run's power"
        if "declared effect" in reason:
            s = (f"a statistically significant difference ({p_text(c)}) not shown to reach the declared effect "
                 f"of {pp(c.get('min_effect'), signed=False)}")
        if margin is not None:
            claim = "B no worse than A by" if c.get("hypothesis") == "noninferiority" else "the arms within ±"
            s += f", and it could not show {claim}{pp(margin, signed=False)}"
        return s + f" (Δ = {delta}, {level} CI {ci}; {test_text(c)})"
    return f"{word or 'no verdict'}: {reason}".strip()


def verdict_detail(c: Mapping[str, Any]) -> list[str]:
    """Short supporting facts under the verdict sentence."""
    out = []
    n, nt = c.get("n"), c.get("n_total")
    runs_a = (c.get("arms", {}).get("a") or {}).get("n_runs")
    runs_b = (c.get("arms", {}).get("b") or {}).get("n_runs")
    if n is not None:
        s = f"{n} questions paired"
        if nt is not None and nt != n:
            s += f" of {nt} ({nt - n} without an answer from both arms)"
        if runs_a or runs_b:
            s += f"; runs per arm: A {runs_a}, B {runs_b}"
        out.append(s)
    d = c.get("design") if isinstance(c.get("design"), dict) else None
    if d:
        la, lb = (d.get("launches") or {}).get("a"), (d.get("launches") or {}).get("b")
        out.append(f"design: {d.get('kind')} (launches A {la}, B {lb}); unit of inference: {d.get('unit')}")
        if d.get("cannot_resolve"):
            out.append(f"cannot resolve: {d['cannot_resolve']}")
    if c.get("test"):
        alpha_t = _num(c.get("test_alpha"))
        out.append(f"decided by: {test_text(c)}" + (f" (α = {alpha_t:g})" if alpha_t is not None else ""))
    e = c.get("errors") if isinstance(c.get("errors"), dict) else None
    if e and ((_num(e.get("rate_a")) or 0) > 0 or (_num(e.get("rate_b")) or 0) > 0):
        out.append(f"request errors: A {pct(e.get('rate_a'))}, B {pct(e.get('rate_b'))} "
                   f"(difference p = {pval(e.get('p'))})")
    nb = c.get("noise_band")
    if isinstance(nb, list) and len(nb) == 2 and _num(nb[1]) is not None:
        out.append(f"A/A noise band of Δ: ±{pp(nb[1], signed=False)} (ψ_AA = {pct(c.get('psi_aa'))}, "
                   f"{c.get('psi_aa_source') or 'source n/a'})")
    else:
        out.append("A/A noise band: not measured (no arm ran twice)")
    for w in c.get("warnings") or []:
        out.append(f"warning: {w}")
    if c.get("verdict_reason"):
        out.append(f"reason: {c['verdict_reason']}")
    return out


def sweep_sentence(s: Mapping[str, Any]) -> str:
    rows = s.get("comparisons") or []
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("verdict") or "unknown"] = counts.get(r.get("verdict") or "unknown", 0) + 1
    parts = ", ".join(f"{k} {verdict_label(w).lower()}" for w, k in sorted(counts.items(), key=lambda kv: -kv[1]))
    corr = s.get("correction") or "no"
    return f"{len(rows)} comparison(s): {parts or 'none'}; p adjusted across the sweep by {corr}"
