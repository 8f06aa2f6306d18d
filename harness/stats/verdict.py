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


def decide(*, delta: float, p_value: float, alpha: float = 0.05, mde: float | None = None,
           margin: float | None = None, equivalence_p: float | None = None,
           min_effect: float | None = None, failures: Sequence[str] = (),
           error_rate: float = 0.0, max_error_rate: float = 0.02) -> Verdict:
    """Verdict of B against A.

    - ``not_comparable``: any entry in ``failures`` (an arm failed, a side check failed, ...) or
      ``error_rate`` above ``max_error_rate``;
    - ``improved`` / ``regressed``: the test rejects (``p_value < alpha``) AND, when a practical effect
      size ``min_effect`` is declared, |Δ| reaches it; the sign of Δ (B - A) gives the direction;
    - ``equivalent``: a ``margin`` is declared and TOST passes (``equivalence_p < alpha``);
    - ``inconclusive`` otherwise, with the MDE in the reason.
    """
    problems = list(failures)
    if error_rate > max_error_rate:
        problems.append(f"request errors {100 * error_rate:.2f} % exceed {100 * max_error_rate:.2f} %")
    if problems:
        return Verdict("not_comparable", "; ".join(problems))
    significant = p_value < alpha
    practical = min_effect is None or abs(delta) >= min_effect
    if significant and practical and delta != 0:
        word = "improved" if delta > 0 else "regressed"
        extra = f", |Δ| >= declared effect {100 * min_effect:.2f} pp" if min_effect is not None else ""
        return Verdict(word, f"Δ = {_pp(delta)}, p = {p_value:.3g} < α = {alpha:g}{extra}")
    if margin is not None and equivalence_p is not None and equivalence_p < alpha:
        return Verdict("equivalent", f"Δ = {_pp(delta)} within ±{100 * margin:.2f} pp "
                                     f"(TOST p = {equivalence_p:.3g} < α = {alpha:g})")
    mde_txt = f"; MDE at 80 % power = {100 * mde:.2f} pp" if mde is not None else ""
    if significant and not practical:
        why = (f"Δ = {_pp(delta)} is significant (p = {p_value:.3g}) but below the declared effect "
               f"{100 * min_effect:.2f} pp")
    else:
        why = f"no detectable difference: Δ = {_pp(delta)}, p = {p_value:.3g} >= α = {alpha:g}"
    if margin is not None:
        why += f"; not shown within ±{100 * margin:.2f} pp" + (
            f" (TOST p = {equivalence_p:.3g})" if equivalence_p is not None else "")
    return Verdict("inconclusive", why + mde_txt)
