"""The one-word verdict of a comparison, with the reason behind it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

VERDICTS = ("improved", "regressed", "equivalent", "inconclusive", "not_comparable")


@dataclass(frozen=True)
class Verdict:
    word: str
    reason: str


def _pp(x: float) -> str:
    return f"{100 * x:+.2f} pp"


def _interval(ci: Sequence[float], alpha: float, method: str | None) -> str:
    return (f"{100 * (1 - 2 * alpha):g} % {method or 'TOST'} interval "
            f"[{100 * ci[0]:+.2f}, {100 * ci[1]:+.2f}] pp")


def format_p(p: float, floor: float | None = None) -> str:
    """``p = 0.0123``; ``p < 1/R`` when a resampling p-value sits at its floor ``1/(R + 1)`` (R resamples:
    none exceeded the observed statistic, so the p-value is only bounded); ``p < 1e-300`` for an underflow."""
    if floor is not None and 0 < floor < 1 and p <= floor * (1 + 1e-9):
        return f"p < {floor / (1 - floor):.3g}"
    if p <= 0:
        return "p < 1e-300"
    return f"p = {p:.3g}"


def decide(*, delta: float, p_value: float, alpha: float = 0.05, mde: float | None = None,
           margin: float | None = None, equivalence_p: float | None = None,
           min_effect: float | None = None, failures: Sequence[str] = (),
           error_rate: float = 0.0, max_error_rate: float = 0.02, p_floor: float | None = None,
           equivalence_ci: Sequence[float] | None = None,
           equivalence_method: str | None = None) -> Verdict:
    """Verdict of B against A.

    - ``not_comparable``: any entry in ``failures`` (an arm failed, a side check failed, ...) or
      ``error_rate`` above ``max_error_rate``;
    - ``improved`` / ``regressed``: the test rejects (``p_value < alpha``) AND, when a practical effect
      size ``min_effect`` is declared, |Δ| reaches it; the sign of Δ (B - A) gives the direction;
    - ``equivalent``: a ``margin`` is declared and TOST passes (``equivalence_p < alpha``) and, when the
      TOST interval ``equivalence_ci`` (level 1 - 2α, from ``equivalence_method``) is given, it has
      non-zero width and lies inside (-margin, +margin) — never on a zero-width interval;
    - ``inconclusive`` otherwise, with the MDE in the reason.

    ``p_floor`` is the smallest value ``p_value`` can take (1/(R+1) for a test on R resamples); a p-value at
    the floor is written ``p < 1/R``.
    """
    problems = list(failures)
    if error_rate > max_error_rate:
        problems.append(f"request errors {100 * error_rate:.2f} % exceed {100 * max_error_rate:.2f} %")
    if problems:
        return Verdict("not_comparable", "; ".join(problems))
    p_txt = format_p(p_value, p_floor)
    eq_ci_ok = equivalence_ci is None or (
        equivalence_ci[1] > equivalence_ci[0] and margin is not None
        and -margin < equivalence_ci[0] and equivalence_ci[1] < margin)
    significant = p_value < alpha
    practical = min_effect is None or abs(delta) >= min_effect
    if significant and practical and delta != 0:
        word = "improved" if delta > 0 else "regressed"
        extra = f", |Δ| >= declared effect {100 * min_effect:.2f} pp" if min_effect is not None else ""
        return Verdict(word, f"Δ = {_pp(delta)}, {p_txt} < α = {alpha:g}{extra}")
    if margin is not None and equivalence_p is not None and equivalence_p < alpha and eq_ci_ok:
        ci_txt = ""
        if equivalence_ci is not None:
            ci_txt = f"; {_interval(equivalence_ci, alpha, equivalence_method)} inside the margin"
        return Verdict("equivalent", f"Δ = {_pp(delta)} within ±{100 * margin:.2f} pp "
                                     f"(TOST {format_p(equivalence_p)} < α = {alpha:g}{ci_txt})")
    mde_txt = f"; MDE at 80 % power = {100 * mde:.2f} pp" if mde is not None else ""
    if significant and not practical:
        why = (f"Δ = {_pp(delta)} is significant ({p_txt}) but below the declared effect "
               f"{100 * min_effect:.2f} pp")
    else:
        why = f"no detectable difference: Δ = {_pp(delta)}, {p_txt} >= α = {alpha:g}"
    if margin is not None:
        why += f"; not shown within ±{100 * margin:.2f} pp"
        if equivalence_ci is not None:
            tp = f", TOST {format_p(equivalence_p)}" if equivalence_p is not None else ""
            why += f" ({_interval(equivalence_ci, alpha, equivalence_method)}{tp})"
        elif equivalence_p is not None:
            why += f" (TOST {format_p(equivalence_p)})"
    return Verdict("inconclusive", why + mde_txt)
