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
    """``p = 0.0213``, or ``p < 0.0001`` when a permutation test's p sits at its floor 1/(R+1)."""
    cell = p_bound(c.get("p_value"), c.get("p_value_floor"), c.get("p_value_at_floor"))
    return f"p {cell}" if cell.startswith("<") else f"p = {cell}"


def verdict_label(word: str | None) -> str:
    return VERDICT_LABELS.get(word or "", (word or "unknown").upper().replace("_", " "))


def verdict_sentence(c: Mapping[str, Any]) -> str:
    """The verdict of a comparison as one quotable sentence (B against A)."""
    word = c.get("verdict")
    alpha = _num(c.get("alpha")) or 0.05
    level = f"{100 * (1 - alpha):g} %"
    delta = pp(c.get("delta"))
    ci = ci_pp(c.get("delta_ci"))
    p = p_text(c)
    margin = _num(c.get("margin"))
    mde = _num(c.get("mde"))
    tost = c.get("tost") if isinstance(c.get("tost"), dict) else None
    seq = c.get("sequential") if isinstance(c.get("sequential"), dict) else None
    if seq and seq.get("stopped") and word != "not_comparable":
        fixed = c.get("verdict_fixed")
        also = (f"; the fixed-design test of the same data says {verdict_label(fixed).lower()}"
                if fixed and fixed != word else "")
        return (f"sequential design: {seq.get('sentence') or word} (Δ = {delta}, {level} CI {ci}){also}")
    if word == "not_comparable":
        return (f"not comparable: {c.get('verdict_reason') or 'an arm failed'}; no accuracy conclusion can be "
                "drawn from this run")
    if word in ("improved", "regressed"):
        verb = "improves" if word == "improved" else "regresses"
        return f"B {verb} accuracy: Δ = {delta} ({level} CI {ci}, {p})"
    if word == "equivalent":
        tp = pval(tost.get("p_equivalence")) if tost else "n/a"
        return (f"equivalent: the arms are within ±{pp(margin, signed=False)} of each other "
                f"(Δ = {delta}, {level} CI {ci}; TOST p = {tp})")
    if word == "inconclusive":
        if mde is not None:
            s = f"no detectable difference; this run could only detect effects larger than {pp(mde, signed=False)}"
        else:
            s = "no detectable difference at this run's power"
        reason = c.get("verdict_reason") or ""
        if "significant" in reason and "below the declared effect" in reason:
            s = (f"a statistically significant difference ({p}) smaller than the declared effect of "
                 f"{pp(c.get('min_effect'), signed=False)}")
        if margin is not None:
            s += f", and it could not show the arms within ±{pp(margin, signed=False)}"
        return s + f" (Δ = {delta}, {level} CI {ci})"
    return f"{word or 'no verdict'}: {c.get('verdict_reason') or ''}".strip()


def verdict_detail(c: Mapping[str, Any]) -> list[str]:
    """Short supporting facts under the verdict sentence."""
    out = []
    n, nt = c.get("n"), c.get("n_total")
    runs_a = (c.get("arms", {}).get("a") or {}).get("n_runs")
    runs_b = (c.get("arms", {}).get("b") or {}).get("n_runs")
    if n is not None:
        s = f"{n} questions paired"
        if nt is not None and nt != n:
            s += f" of {nt} ({nt - n} dropped for request errors, {pct(c.get('error_rate'))})"
        if runs_a or runs_b:
            s += f"; runs per arm: A {runs_a}, B {runs_b}"
        out.append(s)
    if c.get("test"):
        out.append(f"test: {str(c['test']).replace('_', ' ')}, {p_text(c)}"
                   f"; exact McNemar p = {pval(c.get('mcnemar_p'))} (repeat 1)")
    nb = c.get("noise_band")
    if isinstance(nb, list) and len(nb) == 2 and _num(nb[1]) is not None:
        out.append(f"A/A noise band of Δ: ±{pp(nb[1], signed=False)} (ψ_AA = {pct(c.get('psi_aa'))})")
    else:
        out.append("A/A noise band: not measured (no arm ran twice)")
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
