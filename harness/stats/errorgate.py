"""Do request errors depend on the arm? The gate that decides between dropping unanswered questions and
bounding the verdict by them.

Bounding on every unanswered question (no answered run in an arm): the verdict is
recomputed with one arm's unanswered questions counted wrong and the other's right, both ways, and becomes
``inconclusive`` when either bound changes it. With 1 % persistent errors on both arms, independent of the
arm, that rule decides almost every experiment (power 13 % instead of 84 % at Δ = +1.5 pp, 3 launches): a
1 % imbalance in each direction is a ±1 pp swing of Δ, as large as the effect.

**Gate.** Per question, u_Ai = 1 when arm A has no answer to question i in any run (u_Bi for B). Under
"errors do not depend on the arm" (the two arms' error indicators are exchangeable on every question, e.g.
a prompt too long for both, or independent failures at the same rate), the discordant questions (errored
in A only: b; in B only: c) split Binomial(b + c, 1/2): the exact McNemar test of u_A against u_B
(:func:`harness.stats.paired.mcnemar_exact`, two-sided, at ``alpha_gate``).

- no unanswered question: ``none``;
- the test does not reject: ``drop``: the questions unanswered in either arm are left out and the paired
  test runs on the rest. Valid when errors are not informative of the errored arm's answer beyond the
  question itself (under H0 the pairs that remain are still exchangeable);
- the test rejects (the error pattern differs between the arms): ``bound``, the rule above.

The gate rejects with probability <= alpha_gate when errors do not depend on the arm, so it costs at most
that share of experiments the bounds' loss of power. Errors that cluster by launch (an outage) make the
McNemar test reject more often than alpha_gate: the safe direction (more bounding, never less).
"""

from __future__ import annotations

import numpy as np

from .launches import ArmRuns
from .outcomes import ErrorGate
from .paired import mcnemar_exact
from .verdict import ALPHA


# the same two helpers as harness.stats.accuracy (not imported from there: analysis is to call this module)
def unanswered(arm: ArmRuns) -> np.ndarray:
    """Questions the arm has no answer for in any run (errored or missing everywhere)."""
    return np.isnan(arm.scores).all(axis=0)


def impute_unanswered(arm: ArmRuns, value: float) -> ArmRuns:
    """The arm with its unanswered questions scored ``value`` in every run (answered runs kept)."""
    return arm.with_scores(np.where(unanswered(arm)[None, :], value, arm.scores))


def error_gate(a: ArmRuns, b: ArmRuns, alpha: float = ALPHA) -> ErrorGate:
    """The gate of the module docstring for two arms aligned by question."""
    if a.scores.shape[1] != b.scores.shape[1]:
        raise ValueError("arms are not aligned by question")
    ua, ub = unanswered(a), unanswered(b)
    a_only, b_only, both = int(np.sum(ua & ~ub)), int(np.sum(~ua & ub)), int(np.sum(ua & ub))
    p = float(mcnemar_exact(a_only, b_only))
    na, nb = int(ua.sum()), int(ub.sum())
    if na == 0 and nb == 0:
        return ErrorGate(0, 0, 0, 0, 0, 1.0, alpha, "none", "every question answered by both arms")
    counts = f"unanswered A only {a_only}, B only {b_only}, both {both}"
    if p < alpha:
        return ErrorGate(na, nb, a_only, b_only, both, p, alpha, "bound",
                         f"the arms' errors differ ({counts}; McNemar p = {p:.3g} < {alpha:g}): the verdict must "
                         "hold with each arm's unanswered questions counted wrong and the other's right")
    return ErrorGate(na, nb, a_only, b_only, both, p, alpha, "drop",
                     f"errors do not depend on the arm ({counts}; McNemar p = {p:.3g} >= {alpha:g}): the "
                     f"{a_only + b_only + both} questions unanswered in either arm are left out")
