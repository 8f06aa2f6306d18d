"""A comparison's settings and their ranges (hypothesis, margin, minimum effect, alpha, error limit), and the errors
a comparison raises: light enough for ``harness.config`` to check a run's ``stats.*`` before anything starts
(:mod:`harness.analysis.comparison`, which applies them, loads numpy and the statistics)."""

from __future__ import annotations

import math

from harness.stats.verdict import NEEDS_MARGIN, QUESTIONS

__all__ = ["CompareError", "CompareSettingsError", "settings_problem"]


class CompareError(RuntimeError):
    """The evals cannot be compared (different question sets, recipes or datasets; unreadable dirs)."""


class CompareSettingsError(CompareError):
    """The comparison's settings are wrong (not the evals): ``setting`` names the parameter of
    :func:`compare_dirs` (hypothesis, margin, min_effect, alpha, max_error_rate) to fix."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


def settings_problem(hypothesis: str, margin: float | None, min_effect: float | None, alpha: float,
                     max_error_rate: float) -> CompareSettingsError | None:
    """The first setting of a comparison that is out of its range (fractions, not pp), or None."""
    if hypothesis not in QUESTIONS:
        return CompareSettingsError("hypothesis", f"unknown hypothesis {hypothesis!r} ({' | '.join(QUESTIONS)})")
    if hypothesis in NEEDS_MARGIN and margin is None:
        return CompareSettingsError("margin", f"hypothesis {hypothesis} needs a margin")
    if margin is not None and not (math.isfinite(margin) and 0 < margin <= 1):
        return CompareSettingsError("margin", f"the margin must be in (0, 100] pp, not {margin * 100:g}")
    if min_effect is not None and not (math.isfinite(min_effect) and 0 <= min_effect <= 1):
        return CompareSettingsError("min_effect", f"the minimum effect must be in [0, 100] pp, not {min_effect * 100:g}")
    if margin is not None and min_effect is not None and 0 < min_effect < margin:
        return CompareSettingsError("min_effect", f"the minimum effect {min_effect * 100:g} pp is below the margin "
                                    f"{margin * 100:g} pp: an effect inside the margin counts as no difference, so "
                                    "it cannot also be a practical improvement")
    if not (math.isfinite(alpha) and 0 < alpha < 1):
        return CompareSettingsError("alpha", f"alpha must be in (0, 1), not {alpha:g}")
    if not (math.isfinite(max_error_rate) and 0 <= max_error_rate <= 1):
        return CompareSettingsError("max_error_rate", f"the error limit must be in [0, 1], not {max_error_rate:g}")
    return None
