"""The report's plots: matplotlib (Agg backend, imported lazily) rendered to inline SVG strings.

The SVG is generated here from numbers, with text drawn as paths, so it holds no model text and needs no
font or network access. Labels that come from configuration are cleaned of mathtext (``$``).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import Any, NotRequired, TypedDict

from harness.results.schema import ArmResult, Comparison, SweepRow

COLOR_A = "#4c72b0"
COLOR_B = "#dd8452"
VERDICT_COLORS = {
    "improved": "#2e7d32",
    "regressed": "#c62828",
    "equivalent": "#1565c0",
    "noninferior": "#00838f",
    "inconclusive": "#616161",
    "not_comparable": "#b26a00",
    "identical": "#2e7d32",
    "differs": "#c62828",
    "not_deterministic": "#b26a00",
}


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


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _rc(salt: str) -> dict[str, str | int | bool]:
    # A distinct salt per plot keeps clip-path ids unique when several SVGs share one page.
    return {"svg.fonttype": "path", "svg.hashsalt": f"abh-{salt}", "font.size": 10,
            "axes.spines.top": False, "axes.spines.right": False, "axes.titlesize": 11}


def _label(s: Any, width: int = 48) -> str:
    t = str(s).replace("\n", " ").replace("$", r"\$")
    return t if len(t) <= width else t[: width - 1] + "…"


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or math.isnan(x) or math.isinf(x):
        return None
    return float(x)


def _pair(x: Any) -> tuple[float, float] | None:
    if isinstance(x, list | tuple) and len(x) == 2:
        lo, hi = _finite(x[0]), _finite(x[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


_SUPERSCRIPT = str.maketrans("0123456789-−", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁻")
_MATHTEXT_POWER = re.compile(r"^\$\\mathdefault\{(?:(\d+)\\times\s*)?10\^\{\s*([-−]?\d+)\s*\}\}\$$")


def power_label(label: str) -> str:
    """A log axis' tick label as plain text with Unicode superscripts (``$\\mathdefault{10^{-4}}$`` ->
    ``10⁻⁴``, ``2\\times10^{-4}`` -> ``2×10⁻⁴``): the same label without a mathtext parse per tick (most of a
    log-axis plot's cost). Any other label is returned as it is."""
    m = _MATHTEXT_POWER.match(label)
    if m is None:
        return label
    return (f"{m.group(1)}×" if m.group(1) else "") + "10" + m.group(2).translate(_SUPERSCRIPT)


def log_axis(axis: Any) -> None:
    """Label ``axis`` (already on a log scale) with :func:`power_label`'s plain-text powers of ten."""
    from matplotlib.ticker import LogFormatterSciNotation

    class Powers(LogFormatterSciNotation):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return power_label(super().__call__(x, pos))

    axis.set_major_formatter(Powers())
    axis.set_minor_formatter(Powers(labelOnlyBase=False))


def _to_svg(fig: Any) -> str:
    plt = _plt()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    s = buf.getvalue()
    s = s[s.index("<svg"):]
    # Scale with the page: drop the fixed size, keep the viewBox.
    head, rest = s.split(">", 1)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    return head + ' class="plot" preserveAspectRatio="xMinYMin meet">' + rest


# ------------------------------------------------------------------------------------------ per arm
def accuracy_svg(arms: Sequence[ArmPlot]) -> str:
    """Per-arm accuracy (%): point, Wilson interval (thick), question-only bootstrap interval (thin), the
    launch-aware (two-level) bootstrap interval (dashed, when the arm has launches to resample), repeats (dots).

    ``arms``: [{label, accuracy, wilson, bootstrap, repeats, color}] from top to bottom.
    """
    plt = _plt()
    with plt.rc_context(_rc("accuracy")):
        fig, ax = plt.subplots(figsize=(11, 0.7 * len(arms) + 1.0))
        ys = list(range(len(arms)))[::-1]
        xs: list[float] = []
        for y, arm in zip(ys, arms, strict=True):
            col = arm.get("color", COLOR_A)
            acc = _finite(arm.get("accuracy"))
            w, b = _pair(arm.get("wilson")), _pair(arm.get("bootstrap"))
            if w:
                ax.plot([100 * w[0], 100 * w[1]], [y + 0.12] * 2, color=col, lw=5, alpha=0.55, solid_capstyle="butt",
                        label="Wilson interval" if y == ys[0] else None)
                xs += [100 * w[0], 100 * w[1]]
            if b:
                ax.plot([100 * b[0], 100 * b[1]], [y - 0.12] * 2, color=col, lw=1.6, marker="|", ms=9,
                        label="bootstrap interval (questions only)" if y == ys[0] else None)
                xs += [100 * b[0], 100 * b[1]]
            bl = _pair(arm.get("bootstrap_launch"))
            if bl:
                ax.plot([100 * bl[0], 100 * bl[1]], [y - 0.22] * 2, color=col, lw=1.2, ls="--", marker="|", ms=7,
                        label="launch-aware bootstrap (launches, then questions)" if y == ys[0] else None)
                xs += [100 * bl[0], 100 * bl[1]]
            reps = [100 * r for r in arm.get("repeats") or [] if r is not None and _finite(r) is not None]
            if len(reps) > 1:
                ax.scatter(reps, [y - 0.32] * len(reps), s=22, facecolors="white", edgecolors=col, zorder=3,
                           label="single runs" if y == ys[0] else None)
                xs += reps
            if acc is not None:
                ax.plot([100 * acc], [y + 0.12], "o", color=col, ms=8, zorder=4, mec="white")
                ax.annotate(f"{100 * acc:.2f} %", (100 * acc, y + 0.12), xytext=(0, 8), textcoords="offset points",
                            ha="center", fontsize=10, fontweight="bold", color=col)
                xs.append(100 * acc)
        ax.set_yticks(ys, [_label(a.get("label", "")) for a in arms])
        ax.set_ylim(min(ys) - 0.6, max(ys) + 0.65)
        if xs:
            lo, hi = min(xs), max(xs)
            pad = max(0.15, 0.12 * (hi - lo))
            ax.set_xlim(lo - pad, hi + pad)
        ax.set_xlabel("accuracy (%)")
        ax.grid(axis="x", color="#e5e5e5")
        ax.set_axisbelow(True)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False, fontsize=9)
        return _to_svg(fig)


# ------------------------------------------------------------------------------------------ delta
#: two reference lines closer than this share of the larger are drawn as one, with one label
COINCIDE = 0.1


def coincide(x: float, y: float) -> bool:
    """Two values a reader cannot tell apart on the plot's axis."""
    return abs(x - y) <= COINCIDE * max(abs(x), abs(y))


def delta_svg(c: Comparison) -> str:
    """Δ (B − A) in pp with its paired interval, the A/A noise band, ±MDE and ±margin on one axis."""
    plt = _plt()
    level = f"{100 * (1 - c.alpha):g} %"
    delta = _finite(c.delta)
    ci = _pair(c.delta_ci)
    unp = _pair(c.delta_ci_unpaired)
    nb = _pair(c.noise_band)
    mde = _finite(c.mde)
    margin = _finite(c.margin)
    col = VERDICT_COLORS.get(c.verdict, "#333333")
    with plt.rc_context(_rc("delta")):
        fig, ax = plt.subplots(figsize=(11, 2.6))
        xs = [0.0]
        if nb:
            ax.axvspan(100 * nb[0], 100 * nb[1], color="#9e9e9e", alpha=0.25, lw=0,
                       label=f"relaunch noise (A/A) ±{100 * nb[1]:.2f} pp")
            xs += [100 * nb[0], 100 * nb[1]]
        mde = mde if mde is not None and mde <= 1 else None  # beyond 100 pp no effect is detectable: not drawn
        if margin is not None and mde is not None and coincide(margin, mde):  # one line, one label
            for s in (-1, 1):
                ax.axvline(100 * s * margin, color="#1565c0", ls="--", lw=1.8,
                           label=f"margin ±{100 * margin:.2f} pp ≈ detectable effect ±{100 * mde:.2f} pp"
                           if s == 1 else None)
            xs += [-100 * max(margin, mde), 100 * max(margin, mde)]
            margin = mde = None
        # the margin in the lower half of the axis, the detectable effect in the upper half: apart, each is seen
        if margin is not None:
            for s in (-1, 1):
                ax.axvline(100 * s * margin, ymin=0.0, ymax=0.5, color="#1565c0", ls="--", lw=1.6,
                           label=f"margin ±{100 * margin:.2f} pp" if s == 1 else None)
            xs += [-100 * margin, 100 * margin]
        if mde is not None:
            for s in (-1, 1):
                ax.axvline(100 * s * mde, ymin=0.5, ymax=1.0, color="#b26a00", ls=":", lw=2.0,
                           label=f"detectable effect (80 % power) ±{100 * mde:.2f} pp" if s == 1 else None)
            xs += [-100 * mde, 100 * mde]
        ax.axvline(0, color="#222222", lw=0.9)
        if unp:
            ax.plot([100 * unp[0], 100 * unp[1]], [0, 0], color="#9e9e9e", lw=2, marker="|", ms=10,
                    label=f"unpaired {level} CI (for contrast)")
            xs += [100 * unp[0], 100 * unp[1]]
        if ci:
            ax.plot([100 * ci[0], 100 * ci[1]], [1, 1], color=col, lw=4, solid_capstyle="butt",
                    label=f"paired {level} CI of Δ")
            xs += [100 * ci[0], 100 * ci[1]]
        if delta is not None:
            # the page scrolls a narrow plot to this marker (report.js: its id)
            ax.plot([100 * delta], [1], "D", color=col, ms=9, mec="white", zorder=5, gid="focus-delta")
            if unp:
                ax.plot([100 * delta], [0], "D", color="#9e9e9e", ms=6, mec="white", zorder=5)
            ax.annotate(f"Δ = {100 * delta:+.2f} pp".replace("-", "\u2212"), (100 * delta, 1), xytext=(0, 10),
                        textcoords="offset points", ha="center", fontsize=10, fontweight="bold", color=col,
                        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.9}, zorder=6)
        span = max(abs(v) for v in xs) if xs else 1.0
        span = max(span, 0.25) * 1.18
        ax.set_xlim(-span, span)
        ax.set_ylim(-0.6, 1.75)
        ax.set_yticks([1, 0] if unp else [1], ["Δ, paired", "unpaired"] if unp else ["Δ, paired"])
        ax.set_xlabel("Δ = accuracy(B) − accuracy(A)   (percentage points)")
        ax.grid(axis="x", color="#eeeeee")
        ax.set_axisbelow(True)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, frameon=False, fontsize=9)
        return _to_svg(fig)


# ------------------------------------------------------------------------------------------ sweep
def forest_svg(rows: Sequence[SweepRow]) -> str:
    """One row per comparison: Δ with its interval, coloured by verdict; grey bar = ±MDE around 0."""
    plt = _plt()
    with plt.rc_context(_rc("forest")):
        n = max(1, len(rows))
        fig, ax = plt.subplots(figsize=(11, 0.42 * n + 1.3))
        xs = [0.0]
        ys = list(range(n))[::-1]
        seen: set[str] = set()
        for y, r in zip(ys, rows, strict=False):
            v = r.verdict or "unknown"
            col = VERDICT_COLORS.get(v, "#333333")
            mde = _finite(r.mde)
            if mde is not None:
                ax.plot([-100 * mde, 100 * mde], [y, y], color="#dddddd", lw=7, solid_capstyle="butt", zorder=1,
                        label="±detectable effect" if "mde" not in seen else None)
                seen.add("mde")
                xs += [-100 * mde, 100 * mde]
            ci = _pair(r.delta_ci)
            if ci:
                ax.plot([100 * ci[0], 100 * ci[1]], [y, y], color=col, lw=2, marker="|", ms=8, zorder=3)
                xs += [100 * ci[0], 100 * ci[1]]
            d = _finite(r.delta)
            if d is not None:
                ax.plot([100 * d], [y], "o", color=col, ms=7, zorder=4, mec="white",
                        label=v.replace("_", " ") if v not in seen else None)
                seen.add(v)
                xs.append(100 * d)
        ax.axvline(0, color="#222222", lw=0.9)
        ax.set_yticks(ys, [_label(r.label or r.job, 60) for r in rows] or [""])
        span = max(max(abs(x) for x in xs), 0.25) * 1.15
        ax.set_xlim(-span, span)
        ax.set_ylim(-0.7, n - 0.3)
        ax.set_xlabel("Δ = accuracy(B) − accuracy(A)   (percentage points)")
        ax.grid(axis="x", color="#eeeeee")
        ax.set_axisbelow(True)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=6, frameon=False, fontsize=9)
        return _to_svg(fig)
