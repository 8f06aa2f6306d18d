"""The report's plots as inline SVG (:mod:`harness.report.svg`): the comparison's accuracy and Δ, the sweep's
forest plot; numbers and escaped labels only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from harness.report import svg
from harness.report.svg import INK
from harness.report.words import finite as _finite
from harness.results.schema import ArmResult, Comparison, SweepRow

COLOR_A = "#4c72b0"
COLOR_B = "#dd8452"
VERDICT_COLORS = {"improved": "#2e7d32", "regressed": "#c62828", "equivalent": "#1565c0",
                  "noninferior": "#00838f", "inconclusive": "#616161", "not_comparable": "#b26a00",
                  "identical": "#2e7d32", "differs": "#c62828", "not_deterministic": "#b26a00"}


class ArmPlot(TypedDict):
    """An arm as the accuracy plot draws it: its label and colour, accuracy, both intervals, each run's accuracy."""

    label: str
    color: str
    accuracy: float
    wilson: list[float]
    bootstrap: list[float]
    repeats: list[float | None]
    bootstrap_launch: NotRequired[list[float] | None]


def arm_plot(arm: ArmResult, label: str, color: str) -> ArmPlot:
    return {"label": label, "color": color, "accuracy": arm.accuracy, "wilson": arm.wilson,
            "bootstrap": arm.bootstrap, "repeats": arm.repeats, "bootstrap_launch": arm.bootstrap_launch}


def _label(s: Any, width: int = 48) -> str:
    t = str(s).replace("\n", " ")
    return t if len(t) <= width else t[: width - 1] + "…"


def _pair(x: Any) -> tuple[float, float] | None:
    if isinstance(x, list | tuple) and len(x) == 2:
        lo, hi = _finite(x[0]), _finite(x[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


# ------------------------------------------------------------------------------------------ per arm
#: an arm's row in the accuracy plot, and where each of its marks sits in it (viewBox units, down from its centre)
ROW = 50.0
_OFFSET = {"wilson": -6.0, "bootstrap": 6.0, "launch": 11.0, "repeats": 16.0}


def accuracy_svg(arms: Sequence[ArmPlot]) -> str:
    """Per-arm accuracy (%): point, Wilson interval (thick), question-only bootstrap interval (thin), the
    launch-aware (two-level) bootstrap interval (dashed, when the arm has launches to resample), repeats (dots).

    ``arms``: [{label, accuracy, wilson, bootstrap, repeats, color}] from top to bottom.
    """
    labels = [_label(a.get("label", ""), 48) for a in arms]
    left = max([60.0] + [svg.text_width(t, 10) + 16 for t in labels])
    top = 26.0
    bottom = top + ROW * len(arms)
    xs = [100 * v for a in arms for v in _arm_values(a)]
    lo, hi = (min(xs), max(xs)) if xs else (0.0, 100.0)
    pad = max(0.15, 0.12 * (hi - lo))
    scale = svg.Scale(lo - pad, hi + pad, left, svg.WIDTH - 20)
    legend = [("thick", COLOR_A, "Wilson interval"), ("line", COLOR_A, "bootstrap interval (questions only)")]
    if any(_pair(a.get("bootstrap_launch")) for a in arms):
        legend.append(("dashed", COLOR_A, "launch-aware bootstrap (launches, then questions)"))
    if any(len(_repeats(a)) > 1 for a in arms):
        legend.append(("ring", COLOR_A, "single runs"))
    fig = svg.Figure(height=0)
    fig.x_axis(scale, top - 20, bottom, "accuracy (%)")
    fig.y_spine(left, top - 20, bottom)
    for i, (arm, label) in enumerate(zip(arms, labels, strict=True)):
        y = top + ROW * (i + 0.5)
        fig.text(left - 8, y + 3.5, label, 10, anchor="end")
        _draw_arm(fig, scale, arm, y)
    fig.height = fig.legend(legend, bottom + 52) + 4
    return fig.svg()


def _repeats(arm: ArmPlot) -> list[float]:
    return [100 * r for r in arm.get("repeats") or [] if r is not None and _finite(r) is not None]


def _arm_values(arm: ArmPlot) -> list[float]:
    """Every number the arm's row draws (fractions), to fit the axis to."""
    out = [v for k in ("wilson", "bootstrap", "bootstrap_launch") for v in _pair(arm.get(k)) or ()]
    reps = _repeats(arm)
    out += [r / 100 for r in reps] if len(reps) > 1 else []
    acc = _finite(arm.get("accuracy"))
    return out + ([acc] if acc is not None else [])


def _draw_arm(fig: svg.Figure, x: svg.Scale, arm: ArmPlot, y: float) -> None:
    col = arm.get("color", COLOR_A)
    w, b, bl = _pair(arm.get("wilson")), _pair(arm.get("bootstrap")), _pair(arm.get("bootstrap_launch"))
    if w:
        fig.line(x(100 * w[0]), y + _OFFSET["wilson"], x(100 * w[1]), y + _OFFSET["wilson"], col, 5, opacity=0.55)
    for pair, key, width, dash, tick in ((b, "bootstrap", 1.6, None, 4.5), (bl, "launch", 1.2, "4 3", 3.5)):
        if pair:
            yy = y + _OFFSET[key]
            fig.line(x(100 * pair[0]), yy, x(100 * pair[1]), yy, col, width, dash)
            for v in pair:
                fig.line(x(100 * v), yy - tick, x(100 * v), yy + tick, col, 1.2)
    reps = _repeats(arm)
    if len(reps) > 1:
        for r in reps:
            fig.circle(x(r), y + _OFFSET["repeats"], 3.5, "white", col, 1.2)
    acc = _finite(arm.get("accuracy"))
    if acc is not None:
        fig.circle(x(100 * acc), y + _OFFSET["wilson"], 4.5, col, "white", 1.0)
        fig.text(x(100 * acc), y + _OFFSET["wilson"] - 9, f"{100 * acc:.2f} %", 10, color=col, bold=True)


# ------------------------------------------------------------------------------------------ delta
#: two reference lines closer than this share of the larger are drawn as one, with one label
COINCIDE = 0.1


def coincide(x: float, y: float) -> bool:
    """Two values a reader cannot tell apart on the plot's axis."""
    return abs(x - y) <= COINCIDE * max(abs(x), abs(y))


def delta_svg(c: Comparison) -> str:
    """Δ (B − A) in pp with its paired interval, the A/A noise band, ±MDE and ±margin on one axis."""
    level = f"{100 * (1 - c.alpha):g} %"
    delta, ci, unp, nb = _finite(c.delta), _pair(c.delta_ci), _pair(c.delta_ci_unpaired), _pair(c.noise_band)
    mde, margin = _finite(c.mde), _finite(c.margin)
    mde = mde if mde is not None and mde <= 1 else None  # beyond 100 pp no effect is detectable: not drawn
    col = VERDICT_COLORS.get(c.verdict, "#333333")
    legend: list[tuple[str, str, str]] = []
    xs = [0.0] + [100 * v for p in (nb, unp, ci) if p for v in p]
    one_line = margin is not None and mde is not None and coincide(margin, mde)
    xs += [100 * s * v for v in (margin, mde) if v is not None for s in (-1, 1)]
    span = max(max(abs(v) for v in xs), 0.25) * 1.18
    labels = ["Δ, paired", "unpaired"] if unp else ["Δ, paired"]
    left = max(svg.text_width(t, 10) for t in labels) + 16
    top, bottom = 8.0, 128.0
    x = svg.Scale(-span, span, left, svg.WIDTH - 20)
    y = svg.Scale(-0.6, 1.75, bottom, top)
    fig = svg.Figure(height=0)
    fig.x_axis(x, top, bottom, "Δ = accuracy(B) − accuracy(A)   (percentage points)", grid="#eeeeee")
    if nb:
        fig.rect(x(100 * nb[0]), top, x(100 * nb[1]) - x(100 * nb[0]), bottom - top, "#9e9e9e", 0.25)
        legend.append(("box", "#9e9e9e", f"relaunch noise (A/A) ±{100 * nb[1]:.2f} pp"))
    mid = (top + bottom) / 2
    if one_line and margin is not None and mde is not None:  # one line, one label
        _pm_lines(fig, x, margin, top, bottom, "#1565c0", 1.8, "5 3")
        legend.append(("dashed", "#1565c0", f"margin ±{100 * margin:.2f} pp ≈ detectable effect ±{100 * mde:.2f} pp"))
    else:  # the margin in the lower half of the axis, the detectable effect in the upper half: apart, each is seen
        if margin is not None:
            _pm_lines(fig, x, margin, mid, bottom, "#1565c0", 1.6, "5 3")
            legend.append(("dashed", "#1565c0", f"margin ±{100 * margin:.2f} pp"))
        if mde is not None:
            _pm_lines(fig, x, mde, top, mid, "#b26a00", 2.0, "1.5 3")
            legend.append(("dotted", "#b26a00", f"detectable effect (80 % power) ±{100 * mde:.2f} pp"))
    fig.line(x(0), top, x(0), bottom, INK, 0.9)
    fig.y_spine(left, top, bottom)
    if unp:
        _interval(fig, x, unp, y(0), "#9e9e9e", 2.0)
        legend.append(("line", "#9e9e9e", f"unpaired {level} CI (for contrast)"))
    if ci:
        fig.line(x(100 * ci[0]), y(1), x(100 * ci[1]), y(1), col, 4.0)
        legend.append(("thick", col, f"paired {level} CI of Δ"))
    for i, t in enumerate(labels):
        fig.text(left - 8, y(1 - i) + 3.5, t, 10, anchor="end")
    if delta is not None:
        # the page scrolls a narrow plot to this marker (report.js: its id)
        fig.diamond(x(100 * delta), y(1), 6.0, col, ident="focus-delta")
        if unp:
            fig.diamond(x(100 * delta), y(0), 4.0, "#9e9e9e")
        note = f"Δ = {100 * delta:+.2f} pp".replace("-", "\u2212")
        w = svg.text_width(note, 10)
        fig.rect(x(100 * delta) - w / 2 - 3, y(1) - 27, w + 6, 15, "white", 0.9)
        fig.text(x(100 * delta), y(1) - 15, note, 10, color=col, bold=True)
    fig.height = fig.legend(legend, bottom + 52) + 4
    return fig.svg()


def _pm_lines(fig: svg.Figure, x: svg.Scale, v: float, y0: float, y1: float, color: str, width: float,
              dash: str) -> None:
    for s in (-1, 1):
        fig.line(x(100 * s * v), y0, x(100 * s * v), y1, color, width, dash)


def _interval(fig: svg.Figure, x: svg.Scale, pair: tuple[float, float], y: float, color: str, width: float) -> None:
    fig.line(x(100 * pair[0]), y, x(100 * pair[1]), y, color, width)
    for v in pair:
        fig.line(x(100 * v), y - 5, x(100 * v), y + 5, color, 1.2)


# ------------------------------------------------------------------------------------------ sweep
#: a comparison's row in the forest plot (viewBox units)
FOREST_ROW = 30.0


def forest_svg(rows: Sequence[SweepRow]) -> str:
    """One row per comparison: Δ with its interval, coloured by verdict; grey bar = ±MDE around 0."""
    labels = [_label(r.label or r.job, 60) for r in rows]
    left = max([60.0] + [svg.text_width(t, 10) + 16 for t in labels])
    top = 8.0 + 9 + 7 + 8  # room for the legend's row above the plot
    bottom = top + FOREST_ROW * max(1, len(rows))
    xs = [0.0] + [100 * s * v for r in rows for v in (_finite(r.mde),) if v is not None for s in (-1, 1)]
    xs += [100 * v for r in rows for v in (_pair(r.delta_ci) or ())]
    xs += [100 * v for r in rows for v in (_finite(r.delta),) if v is not None]
    span = max(max(abs(v) for v in xs), 0.25) * 1.15
    x = svg.Scale(-span, span, left, svg.WIDTH - 20)
    fig = svg.Figure(height=bottom + 40)
    fig.x_axis(x, top, bottom, "Δ = accuracy(B) − accuracy(A)   (percentage points)", grid="#eeeeee")
    legend: dict[str, tuple[str, str, str]] = {}
    for i, (r, label) in enumerate(zip(rows, labels, strict=True)):
        y = top + FOREST_ROW * (i + 0.5)
        v = r.verdict or "unknown"
        col = VERDICT_COLORS.get(v, "#333333")
        fig.text(left - 8, y + 3.5, label, 10, anchor="end")
        mde, ci, d = _finite(r.mde), _pair(r.delta_ci), _finite(r.delta)
        if mde is not None:
            fig.line(x(-100 * mde), y, x(100 * mde), y, "#dddddd", 7)
            legend.setdefault("mde", ("thick", "#bbbbbb", "±detectable effect"))
        if ci:
            _interval(fig, x, ci, y, col, 2.0)
        if d is not None:
            fig.circle(x(100 * d), y, 4.5, col, "white", 1.0)
            legend.setdefault(v, ("dot", col, v.replace("_", " ")))
    fig.line(x(0), top, x(0), bottom, INK, 0.9)
    fig.y_spine(left, top, bottom)
    fig.legend(list(legend.values()), 14, columns=6)
    return fig.svg()
