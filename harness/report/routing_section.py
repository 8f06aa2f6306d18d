"""The routing as every surface shows it, from a stored comparison's ``routing`` (:mod:`harness.analysis.routing`):
the headline's clause, the facts of comparison.md and report.html, the per-layer plot and the questions where B's
routing parts from A's (linked to the question browser)."""

from __future__ import annotations

from typing import TypedDict

from harness.analysis.routing import share_words
from harness.report import svg
from harness.results.routing_record import Routing, RoutingSide

COLOR_AB, COLOR_AA = "#c0392b", "#7f8c8d"
#: verdict -> badge colour (a defect on either side is red whatever the test says)
COLORS = {"diverged": "#c0392b", "indistinguishable": "#2e7d32", "not_measured": "#7f8c8d"}


def side_fact(s: RoutingSide) -> str:
    ids = f"{s.routed_per_token} in range" if s.routed_per_token is not None else "in range: " + ", ".join(
        f"{k} ids on {v} rows" for k, v in s.in_range_per_row.items())
    text = (f"{s.label} (launch {s.launch or '?'}): top-{s.top_k} rows of {s.num_experts or 'an unknown number of'} "
            f"experts, {s.routed_layers} of {s.layers} layers routed, {s.rows} (token, layer) rows, {ids} per row")
    if s.rows_out_of_range:
        ids_out = ", ".join(f"{k} ({v}x)" for k, v in list(s.out_of_range_ids.items())[:6])
        text += f"; out of range: {s.rows_out_of_range} rows in {s.layers_out_of_range} layers, ids {ids_out}"
    return text + (f" — DEFECT: {s.defect}" if s.defect else "")


def facts(r: Routing) -> list[str]:
    """comparison.md's and report.html's lines about the routing."""
    out = [f"verdict: {r.verdict.replace('_', ' ')} ({r.verdict_reason})"]
    if r.identical is not None:
        out.append(f"B vs A: identical expert sets on {share_words(r.identical)} of (token, layer) rows, mean Jaccard "
                   f"{r.jaccard:.4f}, {r.moved:.4f} ids moved per row; A/A: {share_words(r.identical_aa)}, "
                   + (f"{r.jaccard_aa:.4f}, {r.moved_aa:.4f}" if r.jaccard_aa is not None and r.moved_aa is not None
                      else "n/a")
                   + f" ({r.questions} questions" + (f", {r.questions_dropped} not routed by every pass)"
                                                     if r.questions_dropped else ")"))
    out += [side_fact(s) for s in r.sides.values()]
    shifted = sorted((x for x in r.layers if x.load_shift is not None), key=lambda x: -(x.load_shift or 0.0))[:3]
    if shifted:
        out.append("expert load, B against A (share of tokens moved between experts): "
                   + "; ".join(f"layer {x.layer} {share_words(x.load_shift)}"
                               + (f", gained {', '.join(f'#{e} +{d}' for e, d in x.gained)}" if x.gained else "")
                               + (f", lost {', '.join(f'#{e} {d}' for e, d in x.lost)}" if x.lost else "")
                               for x in shifted))
    return out


class RoutingRow(TypedDict):
    question: int
    tokens: int
    parted: str
    parted_aa: str
    first: str


class RoutingView(TypedDict):
    verdict: str
    label: str
    color: str
    sentence: str
    facts: list[str]
    svg: str | None
    rows: list[RoutingRow]


def rows(r: Routing) -> list[RoutingRow]:
    return [{"question": q.question, "tokens": q.tokens, "parted": share_words(q.parted),
             "parted_aa": share_words(q.parted_aa) if q.parted_aa is not None else "n/a",
             "first": f"token {q.first_token}, layer {q.first_layer}" if q.first_token is not None else "-"}
            for q in r.top_questions]


def layer_svg(r: Routing) -> str | None:
    """Per routed layer: the share of (token, layer) rows whose expert set B (and the A/A floor) kept identical to
    the reference pass's, and the ids moved per row."""
    layers = [x for x in r.layers if x.identical is not None]
    if not layers:
        return None
    xs = [float(x.layer) for x in layers]
    fig = svg.Figure(height=svg.PANEL_BOTTOM + 60)
    for (left, width), key, title in ((svg.PANELS[0], "identical", "identical expert sets (% of tokens)"),
                                      (svg.PANELS[1], "moved", "ids moved per token")):
        scale = 100.0 if key == "identical" else 1.0
        ab = [scale * float(getattr(x, key) or 0.0) for x in layers]
        aa = [None if getattr(x, key + "_aa") is None else scale * float(getattr(x, key + "_aa")) for x in layers]
        _layer_panel(fig, xs, ab, aa, left, width, title)
    return fig.svg()


def _layer_panel(fig: svg.Figure, xs: list[float], ab: list[float], aa: list[float | None], left: float,
                 width: float, title: str) -> None:
    """One panel: B vs A per layer (a line with dots), the A/A floor dashed where it was measured."""
    values = ab + [v for v in aa if v is not None]
    lo, hi = min(values), max(values)
    pad = 0.05 * (hi - lo) or max(abs(hi) * 0.05, 0.5)
    x = svg.Scale(min(xs) - 0.5, max(xs) + 0.5, left, left + width)
    y = svg.Scale(lo - pad, hi + pad, svg.PANEL_BOTTOM, svg.PANEL_TOP)
    fig.x_axis(x, svg.PANEL_TOP, svg.PANEL_BOTTOM, "MoE layer", grid=None)
    fig.y_axis(y, left, title)
    fig.path([(x(u), y(v)) for u, v in zip(xs, ab, strict=True)], COLOR_AB, 1.6)
    for u, v in zip(xs, ab, strict=True):
        fig.circle(x(u), y(v), 1.8, COLOR_AB)
    legend = [("line", COLOR_AB, "B vs A")]
    runs: list[list[tuple[float, float]]] = [[]]
    for u, w in zip(xs, aa, strict=True):  # a layer the floor did not measure breaks its line
        if w is None:
            runs.append([])
        else:
            runs[-1].append((x(u), y(w)))
    for pts in runs:
        if len(pts) > 1:
            fig.path(pts, COLOR_AA, 1.6, dash="5 3")
    if any(v is not None for v in aa):
        legend.append(("dashed", COLOR_AA, "A/A floor"))
    fig.legend(legend, svg.PANEL_BOTTOM + 50, columns=2, left=left, size=8, width=width)  # below: lines fill the panel


def section(r: Routing) -> RoutingView:
    return {"verdict": r.verdict, "label": r.verdict.replace("_", " ").upper(),
            "color": "#c0392b" if any(s.defect for s in r.sides.values()) else COLORS.get(r.verdict, "#333333"),
            "sentence": r.sentence, "facts": facts(r), "svg": layer_svg(r) if r.layers else None, "rows": rows(r)}
