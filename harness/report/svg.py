"""A small SVG writer for the report's plots: shapes and text on linear or logarithmic axes, as one inline
``<svg>`` string (matplotlib would cost a second of CPU for a few lines and points). Only presentation
attributes (no ``style``, so the page's Content-Security-Policy needs nothing) and XML-escaped text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

#: the figure's width in viewBox units: 11 in at 72 units per inch, as the plots had; the page scales it
WIDTH = 792.0
FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"
GRID = "#e5e5e5"
INK = "#222222"
#: the two panels of a side-by-side figure: each one's left edge and width, and the plot areas' top and bottom
PANELS = ((52.0, 330.0), (448.0, 330.0))
PANEL_TOP, PANEL_BOTTOM = 8.0, 170.0
#: a character's mean advance at font size 1 (DejaVu Sans), to size the room a label needs
CHAR_W = 0.6
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _n(v: float) -> str:
    """A coordinate as short text: two decimals, no trailing zeros."""
    s = f"{v:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def text_width(s: str, size: float) -> float:
    return len(s) * CHAR_W * size


@dataclass
class Scale:
    """Data to viewBox units along one axis, linear or logarithmic (``log``: both ends > 0)."""

    lo: float
    hi: float
    px0: float
    px1: float
    log: bool = False

    def __call__(self, v: float) -> float:
        if self.log:
            lo, hi, v = math.log10(self.lo), math.log10(self.hi), math.log10(max(v, self.lo * 1e-3))
        else:
            lo, hi = self.lo, self.hi
        return self.px0 + (v - lo) / (hi - lo) * (self.px1 - self.px0) if hi != lo else self.px0

    def ticks(self) -> list[tuple[float, str]]:
        """(value, label) of the axis' ticks: decades on a log axis, round steps on a linear one."""
        return decade_ticks(self.lo, self.hi) if self.log else linear_ticks(self.lo, self.hi)


def linear_ticks(lo: float, hi: float, most: int = 10) -> list[tuple[float, str]]:
    """Ticks at a round step (1, 2, 2.5 or 5 times a power of ten) giving at most ``most`` ticks in [lo, hi]."""
    if not hi > lo:
        return [(lo, f"{lo:g}")]
    raw = (hi - lo) / most
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) + (1 if round(step / mag, 6) == 2.5 else 0)
    first = math.ceil(lo / step - 1e-9)
    out = []
    for k in range(first, int(math.floor(hi / step + 1e-9)) + 1):
        v = k * step
        out.append((v, f"{v:.{decimals}f}".replace("-", "−") if abs(v) > step * 1e-9 else "0"))
    return out


def decade_ticks(lo: float, hi: float) -> list[tuple[float, str]]:
    """Ticks at the powers of ten in [lo, hi], labelled ``10⁻⁴``; every other one when there are many."""
    first, last = math.ceil(math.log10(lo) - 1e-9), math.floor(math.log10(hi) + 1e-9)
    every = 1 if last - first < 7 else 2
    return [(10.0 ** e, "10" + str(e).translate(_SUPERSCRIPT)) for e in range(first, last + 1, every)]


@dataclass
class Figure:
    """An SVG drawing in viewBox units (y down), built element by element."""

    height: float
    width: float = WIDTH
    parts: list[str] = field(default_factory=list)

    def line(self, x1: float, y1: float, x2: float, y2: float, color: str, width: float = 1.0,
             dash: str | None = None, opacity: float | None = None) -> None:
        self.parts.append(f'<line x1="{_n(x1)}" y1="{_n(y1)}" x2="{_n(x2)}" y2="{_n(y2)}" stroke="{color}" '
                          f'stroke-width="{_n(width)}"{_dash(dash)}{_opacity("stroke", opacity)}/>')

    def rect(self, x: float, y: float, w: float, h: float, color: str, opacity: float | None = None) -> None:
        self.parts.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0))}" height="{_n(max(h, 0))}" '
                          f'fill="{color}"{_opacity("fill", opacity)}/>')

    def circle(self, x: float, y: float, r: float, fill: str, stroke: str = "none", width: float = 1.0) -> None:
        self.parts.append(f'<circle cx="{_n(x)}" cy="{_n(y)}" r="{_n(r)}" fill="{fill}" stroke="{stroke}" '
                          f'stroke-width="{_n(width)}"/>')

    def path(self, points: Sequence[tuple[float, float]], stroke: str, width: float = 1.0, fill: str = "none",
             opacity: float | None = None, close: bool = False, ident: str | None = None,
             dash: str | None = None) -> None:
        d = "M" + " L".join(f"{_n(x)} {_n(y)}" for x, y in points) + (" Z" if close else "")
        fill_op = _opacity("fill", opacity) if fill != "none" else ""
        self.parts.append(f'<path{_ident(ident)} d="{d}" fill="{fill}"{fill_op} stroke="{stroke}" '
                          f'stroke-width="{_n(width)}"{_dash(dash)} stroke-linejoin="round"/>')

    def diamond(self, x: float, y: float, r: float, fill: str, ident: str | None = None) -> None:
        self.path([(x, y - r), (x + r, y), (x, y + r), (x - r, y)], "white", 1.0, fill=fill, close=True,
                  ident=ident)

    def text(self, x: float, y: float, s: str, size: float = 10, anchor: str = "middle", color: str = INK,
             bold: bool = False, rotate: bool = False) -> None:
        turn = f' transform="rotate(-90 {_n(x)} {_n(y)})"' if rotate else ""
        weight = ' font-weight="bold"' if bold else ""
        self.parts.append(f'<text x="{_n(x)}" y="{_n(y)}" font-size="{_n(size)}" text-anchor="{anchor}" '
                          f'fill="{color}"{weight}{turn}>{escape(s, quote=False)}</text>')

    def x_axis(self, scale: Scale, top: float, bottom: float, label: str, grid: str | None = GRID) -> None:
        """Grid lines (none: ``grid`` None) and tick labels of ``scale`` below the plot area [top, bottom], and the
        axis' label."""
        for v, name in scale.ticks():
            x = scale(v)
            if grid is not None:
                self.line(x, top, x, bottom, grid, 0.8)
            self.line(x, bottom, x, bottom + 3.5, INK, 0.8)
            self.text(x, bottom + 14, name, 10)
        self.line(min(scale.px0, scale.px1), bottom, max(scale.px0, scale.px1), bottom, INK, 0.8)
        self.text((scale.px0 + scale.px1) / 2, bottom + 30, label, 10)

    def legend(self, items: Sequence[tuple[str, str, str]], y: float, columns: int = 3, left: float = 0.0,
               size: float = 9, width: float | None = None) -> float:
        """``(kind, colour, label)`` entries (kind: thick, line, dashed, dotted, box, ring, dot, fill) in rows of at
        most ``columns`` (fewer when the labels need the room), from ``y`` down, centred across ``width`` from
        ``left`` (0: left-aligned at ``left``); returns the y below the last row."""
        width = self.width - left if width is None else width
        col_w = max([text_width(t, size) + 34 for _, _, t in items] + [1.0])
        columns = max(1, min(columns, len(items), int(width // col_w) if width else 1))
        rows = math.ceil(len(items) / columns)
        x0 = left + max(0.0, (width - columns * col_w) / 2)
        for i, (kind, color, label) in enumerate(items):
            row, col = divmod(i, columns)
            x, yy = x0 + col * col_w + 4, y + row * (size + 7)
            _swatch(self, kind, color, x, yy - size / 3)
            self.text(x + 26, yy, label, size, anchor="start")
        return y + rows * (size + 7)

    def y_spine(self, x: float, top: float, bottom: float) -> None:
        self.line(x, top, x, bottom, INK, 0.8)

    def y_axis(self, scale: Scale, left: float, label: str, most: int = 6) -> None:
        """The spine at ``left``, round ticks of ``scale`` (linear, y down) labelled, and the axis' label turned."""
        top, bottom = min(scale.px0, scale.px1), max(scale.px0, scale.px1)
        self.y_spine(left, top, bottom)
        for v, name in linear_ticks(scale.lo, scale.hi, most):
            self.line(left - 3.5, scale(v), left, scale(v), INK, 0.8)
            self.text(left - 6, scale(v) + 3.5, name, 10, anchor="end")
        self.text(left - 36, (top + bottom) / 2, label, 10, rotate=True)

    def svg(self) -> str:
        """The figure as an inline SVG that scales with the page (no fixed size, its viewBox kept)."""
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(self.width)} {_n(self.height)}" '
                f'class="plot" preserveAspectRatio="xMinYMin meet" font-family="{FONT}">'
                + "".join(self.parts) + "</svg>")


def _swatch(fig: Figure, kind: str, color: str, x: float, y: float) -> None:
    if kind == "box":
        fig.rect(x, y - 5, 20, 10, color, 0.35)
    elif kind == "fill":
        fig.rect(x, y - 5, 20, 10, color, 0.35)
        fig.line(x, y - 5, x + 20, y - 5, color, 1.6)
    elif kind in ("ring", "dot"):
        fig.circle(x + 10, y, 3.5, "white" if kind == "ring" else color, color, 1.2)
    else:
        dash = {"dashed": "4 3", "dotted": "1.5 2.5"}.get(kind)
        fig.line(x, y, x + 20, y, color, {"thick": 5.0}.get(kind, 1.6), dash, 0.55 if kind == "thick" else None)


def _dash(dash: str | None) -> str:
    return f' stroke-dasharray="{dash}"' if dash else ""


def _opacity(what: str, opacity: float | None) -> str:
    return f' {what}-opacity="{_n(opacity)}"' if opacity is not None else ""


def _ident(ident: str | None) -> str:
    return f' id="{ident}"' if ident else ""
