"""The report's divergence section: the verdict in words, the KLD distribution plot (A/B against A/A) and the
questions whose outputs diverge most, the first diverging token marked. KLD is in nats per token; model text
is returned as plain strings for the autoescaping template.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from harness.analysis.identity import counts_text
from harness.report import plots, svg
from harness.report.texts import Split, split_at, word_end
from harness.report.words import finite as _num
from harness.report.words import pct, pval, verdict_label
from harness.results.schema import Divergence, Histogram, PartingCounts, SweepRow
from harness.stats.verdict import ALPHA, at_floor

VERDICT_COLORS = {"diverged": "#c62828", "indistinguishable": "#1565c0", "not_measured": "#616161"}
COLOR_AB = plots.COLOR_B
COLOR_AA = "#7f7f7f"


class PercentileRow(TypedDict):
    """A statistic of the per-token KLD (mean, a percentile, max) of A‖B and of the A/A floor, as text."""

    label: str
    ab: str
    aa: str


class TopRow(TypedDict):
    """A question of the "diverge most" table: its KLDs as text, and both greedy texts split around the first
    divergence (None: no text stored)."""

    question: int
    tokens: int
    text_identical: bool | None
    kld_text: str
    kld_aa_text: str
    d_text: str
    same_top_text: str
    a: Split | None
    b: Split | None


class DivergenceView(TypedDict):
    """The report's divergence section: the verdict in words, its facts, the KLD percentiles, the plot (SVG)
    and the questions that diverge most."""

    verdict: str
    #: the arm whose greedy texts were scored ("a" or "b")
    reference: str
    label: str
    color: str
    sentence: str
    facts: list[str]
    percentiles: list[PercentileRow]
    svg: str | None
    rows: list[TopRow]


def kld(x: Any) -> str:
    """A KLD (nats/token) for reading: 0.021, 0.0003, 2.1e-06, 0; n/a."""
    v = _num(x)
    if v is None:
        return "n/a"
    if v == 0:
        return "0"
    if abs(v) >= 1e-4:
        return f"{v:.2g}" if abs(v) < 0.1 else f"{v:.3g}"
    m, e = f"{v:.1e}".split("e")  # always an exponent (":.2g" writes 9.99e-05 as 0.0001)
    return f"{m.removesuffix('.0')}e{int(e)}"


def effect_kld(x: Any, ci: Any) -> str:
    """A KLD difference to the digits its interval supports: one below a hundredth of the interval's width is
    ``0`` (not ``-1.8e-7``)."""
    v = _num(x)
    if (v is not None and isinstance(ci, list | tuple) and len(ci) == 2 and _num(ci[0]) is not None
            and _num(ci[1]) is not None and abs(v) < abs(float(ci[1]) - float(ci[0])) / 100):
        return "0"
    return kld(x)


def texts_identical(div: Divergence, digits: int = 1) -> str:
    """``96.4 % vs 97.3 %`` (A vs B beside A vs A'), or what there is when the floor has no second text."""
    if div.text_identical_rate_aa is None:
        return f"{pct(div.text_identical_rate, digits)} (A/A: no second text of A to compare)"
    return f"{pct(div.text_identical_rate, digits)} vs {pct(div.text_identical_rate_aa, digits)}"


def _p(div: Divergence) -> str:
    if div.p is None:
        return "p = n/a"
    if at_floor(div.p, div.p_floor) and div.p_floor:
        return f"p < {div.p_floor / (1 - div.p_floor):.2g}"
    return f"p = {pval(div.p)}"


def launch_clause(div: Divergence) -> str:
    """``B's 3 launches 1.9x A's 4 [1.2, 3.1]``: the launch-level test in one clause ("" without one)."""
    lt = div.launch_test
    if lt is None:
        return ""
    ci = f" [{lt.ratio_ci[0]:.2g}, {lt.ratio_ci[1]:.2g}]" if lt.ratio_ci else ""
    return f"B's {lt.launches_b} launch(es) {lt.ratio:.2g}x A's {lt.launches_a}{ci}"


def sentence(div: Divergence | None) -> str:
    """The divergence verdict as one quotable sentence (with the launch-level test and the assumption the
    verdict rests on, one clause each)."""
    if div is None:
        return "outputs not measured: no scoring pass ran"
    ab, aa = kld(div.kld_mean), kld(div.kld_mean_aa)
    over = f"{launch_clause(div)}, " if div.launch_test is not None else ""
    qual = f"; {div.qualification}" if div.qualification else ""
    if div.verdict == "diverged":
        return f"outputs differ beyond relaunch noise: KLD {ab} vs {aa} nats/token ({over}{_p(div)}){qual}"
    if div.verdict == "indistinguishable":
        s = f"outputs within relaunch noise: KLD {ab} vs {aa} nats/token ({over}{_p(div)})"
        lt = div.launch_test
        if lt is not None and lt.ratio_mde:
            s += f"; this run could detect a KLD ratio of about {lt.ratio_mde:.2g}"
        elif lt is None and div.effect_mde:
            s += f"; this run could detect about {kld(div.effect_mde)} nats/token above the floor"
        return s + qual
    return f"outputs not measured: {div.verdict_reason or 'no scores'}"


def terminal_line(div: Divergence | None) -> str:
    """One line for the terminal summary."""
    if div is None:
        return "divergence: NOT MEASURED (no scoring pass)"
    if div.verdict not in ("diverged", "indistinguishable"):
        return f"divergence: NOT MEASURED — {div.verdict_reason or 'no scores'}"
    ci = div.effect_ci
    ci_txt = f" [{kld(ci[0])}, {kld(ci[1])}]" if ci else ""
    top = (f"same top token {pct(div.same_top_rate, 1)} vs {pct(div.same_top_rate_aa, 1)}; "
           if div.same_top_rate is not None and div.same_top_rate_aa is not None else "")
    test = (f"launch-level test: {launch_clause(div)}" if div.launch_test is not None else
            f"{effect_kld(div.effect, ci)} above the floor{ci_txt}")
    qual = f"; {div.qualification}" if div.qualification else ""
    return (f"divergence: {verdict_label(div.verdict)} — KLD {kld(div.kld_mean)} vs A/A "
            f"{kld(div.kld_mean_aa)} nats/token, {test}, {_p(div)}{qual}; {top}"
            f"texts identical {texts_identical(div)} "
            f"({div.tokens} tokens, {div.questions} questions)"
            + (f"; {partings_line(div)}" if div.partings is not None else ""))


def partings_text(div: Divergence) -> str:
    """The questions whose texts part by their first diverging token, A vs B beside A vs A'."""
    def part(c: PartingCounts | None) -> str:
        return "n/a" if c is None else counts_text(c)

    gap = f" (near-tie: within {div.near_tie_nats:g} nats in the reference pass)" if div.near_tie_nats else ""
    return f"A vs B {part(div.partings)}; A vs A' {part(div.partings_aa)}{gap}"


def partings_line(div: Divergence) -> str:
    return f"first diverging tokens: {partings_text(div)}"


def kld_cell(row: SweepRow) -> str:
    """A sweep row's divergence in one cell, ``0.023 (0.0003) *``: mean KLD A‖B, in brackets the A/A floor's,
    ``*`` when diverged beyond it; "not measured", or "n/a" when the job did not score."""
    word = row.divergence
    if not word:
        return "n/a"
    if word not in ("diverged", "indistinguishable"):
        return "not measured"
    return f"{kld(row.kld)} ({kld(row.kld_aa)})" + (" *" if word == "diverged" else "")


def facts(div: Divergence) -> list[str]:
    """Supporting facts under the divergence sentence."""
    out: list[str] = []
    if div.verdict not in ("diverged", "indistinguishable"):
        out.append(f"why: {div.verdict_reason or 'no scores'}")
    if div.tokens:
        s = f"{div.tokens} reference tokens of {div.questions} questions scored by every pass"
        dropped = {k: v for k, v in div.questions_dropped.items() if v}
        if dropped:
            s += " (dropped: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in dropped.items()) + ")"
        out.append(s + f"; top-k = {div.top_k}")
    lt = div.launch_test
    if lt is not None:
        out.append(f"launch-level test (the verdict's): {launch_clause(div)}, mean launch KLD "
                   f"{kld(float(sum(lt.kld_launch_b) / len(lt.kld_launch_b)))} vs "
                   f"{kld(float(sum(lt.kld_launch_a) / len(lt.kld_launch_a)))} nats/token; one-sided t-test of log "
                   f"KLD over launches, {lt.df or 0:g} df, {_p(div)}"
                   + (f", permutation p = {pval(lt.p_permutation)}" if lt.p_permutation is not None else ""))
    pq = div.per_question
    if pq is not None:
        ci = pq.effect_ci
        alpha = div.alpha or ALPHA
        ci_txt = f", {100 * (1 - alpha):g} % CI [{kld(ci[0])}, {kld(ci[1])}]" if ci else ""
        role = " (diagnostic)" if lt is not None else ""
        p_txt = (f"p < {pq.p_floor / (1 - pq.p_floor):.2g}" if pq.p_floor and at_floor(pq.p, pq.p_floor)
                 else f"p = {pval(pq.p)}")
        out.append(f"KLD above the A/A floor{role}: {effect_kld(pq.effect, ci)} nats/token{ci_txt}; one-sided sign-flip "
                   f"test with questions as the unit, {p_txt}")
    if div.qualification:
        out.append(f"assumes: {div.qualification}")
    if div.same_top_rate is not None:
        out.append(f"same top token: {pct(div.same_top_rate)} (A/A {pct(div.same_top_rate_aa)}); "
                   f"RMS Δlogprob of the reference token: {_g(div.rms_dlogprob)} "
                   f"(A/A {_g(div.rms_dlogprob_aa)}) nats")
    if div.text_questions:
        s = (f"greedy texts identical: {pct(div.text_identical_rate)} of {div.text_questions} questions A vs B, "
             + (f"{pct(div.text_identical_rate_aa)} A vs A'" if div.text_identical_rate_aa is not None else
                "A vs A' not compared (no second text of A)"))
        if div.first_divergence_median is not None:
            s += f"; where they differ, the first diverging token is at median position {div.first_divergence_median:g}"
        out.append(s)
    if div.partings is not None:
        out.append(partings_line(div))
    out.append(f"method: {div.kl_method}" if div.kl_method else "method: n/a")
    return out


def _g(x: Any) -> str:
    v = _num(x)
    return "n/a" if v is None else f"{v:.3g}"


def percentile_rows(div: Divergence) -> list[PercentileRow]:
    """[{label, ab, aa}] for a table: mean, 99.9 / 99 / 95 / 90 percentiles, median, max of per-token KLD."""
    p_ab = div.kld_percentiles or {}
    p_aa = div.kld_percentiles_aa or {}
    rows: list[PercentileRow] = [{"label": "mean", "ab": kld(div.kld_mean), "aa": kld(div.kld_mean_aa)}]
    for key in ("99.9", "99", "95", "90", "50"):
        rows.append({"label": "median" if key == "50" else f"{key} %", "ab": kld(p_ab.get(key)),
                     "aa": kld(p_aa.get(key))})
    rows.append({"label": "max", "ab": kld(div.kld_max), "aa": kld(div.kld_max_aa)})
    return rows


# ------------------------------------------------------------------------------------------ plot
def fitted(edges: list[float], counts: list[list[int]], marks: list[float]) -> tuple[float, float]:
    """The histogram's axis fitted to the data: from the first to the last bin any side fills (one bin of room
    each side) and the marked means; all of ``edges`` when no bin holds anything."""
    filled = [i for cs in counts for i, n in enumerate(cs) if n > 0]
    if not filled:
        return edges[0], edges[-1]
    lo = edges[max(min(filled) - 1, 0)]
    hi = edges[min(max(filled) + 2, len(edges) - 1)]
    inside = [m for m in marks if edges[0] <= m <= edges[-1]]
    return min([lo, *inside]), max([hi, *inside])




def kld_svg(div: Divergence) -> str | None:
    """Per-token and per-question KLD distributions, A/B against A/A, on a log axis (inline SVG); None when
    there is nothing to draw. Zeros (identical distributions) are given in the legend, not on the log axis."""
    hist = div.kld_histogram
    if hist is None:
        return None
    fig = svg.Figure(height=svg.PANEL_BOTTOM + 40)
    for (left, width), unit, title, sides in (
            (svg.PANELS[0], "token", "per token", ((hist.token_ab, "ab"), (hist.token_aa, "aa"))),
            (svg.PANELS[1], "question", "per question (test unit)", ((hist.question_ab, "ab"), (hist.question_aa, "aa")))):
        means = ((div.kld_mean, COLOR_AB), (div.kld_mean_aa, COLOR_AA)) if unit == "token" else ()
        _kld_panel(fig, hist.edges, sides, [(m, c) for m, c in means if m and m > 0], left, width,
                   f"KLD {title} (nats)" + ("; dashed: means" if unit == "token" else ""))
    return fig.svg()


def _kld_panel(fig: svg.Figure, edges: list[float], sides: tuple[tuple[Histogram | None, str], ...],
               means: list[tuple[float, str]], left: float, width: float, xlabel: str) -> None:
    """One panel: each side's shares per bin as stairs on a log axis, the means dashed, a legend inside."""
    drawn = [(h, side) for h, side in sides if h is not None and h.zeros + sum(h.counts) > 0]
    lo, hi = fitted(edges, [h.counts for h, _ in drawn], [m for m, _ in means])
    shares = {side: [100 * c / (h.zeros + sum(h.counts)) for c in h.counts] for h, side in drawn}
    top_share = max([v for sh in shares.values() for v in sh] + [1.0]) * 1.05
    x = svg.Scale(lo, hi, left, left + width, log=True)
    y = svg.Scale(0.0, top_share, svg.PANEL_BOTTOM, svg.PANEL_TOP)
    fig.x_axis(x, svg.PANEL_TOP, svg.PANEL_BOTTOM, xlabel, grid="#eeeeee")
    fig.y_axis(y, left, "share (%)")
    legend = []
    for h, side in drawn:
        color, name = (COLOR_AB, "A‖B") if side == "ab" else (COLOR_AA, "A‖A′ (floor)")
        zeros = 100 * h.zeros / (h.zeros + sum(h.counts))
        steps = _stairs(edges, shares[side], lo, hi)
        points = [(x(e), y(v)) for e, v in steps]
        if side == "ab":
            fig.path(points, "none", 0, fill=color, opacity=0.35, close=True)
        fig.path(points, color, 1.6)
        legend.append(("fill" if side == "ab" else "line", color,
                       name + (f", {zeros:.0f} % exactly 0" if zeros >= 0.5 else "")))
    for m, color in means:
        mx = x(min(max(m, lo), hi))
        fig.line(mx, svg.PANEL_TOP, mx, svg.PANEL_BOTTOM, color, 1.2, "4 3")
    fig.legend(legend, svg.PANEL_TOP + 12, columns=1, left=left + 4, size=8, width=0)  # in the panel's top left corner


def _stairs(edges: list[float], shares: list[float], lo: float, hi: float) -> list[tuple[float, float]]:
    """The outline of a histogram (bin edges, share) from the axis' ``lo`` to ``hi``, down to 0 at both ends."""
    out = [(lo, 0.0)]
    for e0, e1, v in zip(edges, edges[1:], shares, strict=False):
        a, b = max(e0, lo), min(e1, hi)
        if a < b:
            out += [(a, v), (b, v)]
    return out + [(out[-1][0], 0.0)]


# ------------------------------------------------------------------------------------------ top questions
def _outputs(d: Any) -> dict[int, str | None]:
    if not d:
        return {}
    from harness.results.eval_store import load_samples

    try:
        return {s.index: s.output for s in load_samples(Path(str(d)))}
    except (OSError, ValueError):
        return {}


def top_rows(div: Divergence, texts_a: Mapping[int, str | None] | None = None,
             texts_b: Mapping[int, str | None] | None = None) -> list[TopRow]:
    """The questions that diverge most, each with both greedy texts split around the first divergence.

    Texts default to ``samples.jsonl`` of ``div["dirs"]["ref"]`` (arm A) and ``["ab"]`` (arm B). A's mark is
    the diverging reference token when its span is known (``first_divergence_span``), else the word from
    the first differing character; B's mark is the word from that character.
    """
    ta = texts_a if texts_a is not None else _outputs(div.dirs.get("ref"))
    tb = texts_b if texts_b is not None else _outputs(div.dirs.get("ab"))
    rows: list[TopRow] = []
    for q in div.top_questions:
        c = q.first_divergence_char
        span = q.first_divergence_span
        a_start, a_end = (span[0], span[1]) if span and len(span) == 2 else (c, None)
        text_a, text_b = ta.get(q.question), tb.get(q.question)
        b_end = word_end(text_b, c) if text_b is not None and c is not None else None
        rows.append({"question": q.question, "tokens": q.tokens, "text_identical": q.text_identical,
                     "kld_text": kld(q.kld), "kld_aa_text": kld(q.kld_aa), "d_text": kld(q.d),
                     "same_top_text": pct(q.same_top_rate, 1), "a": split_at(text_a, a_start, a_end),
                     "b": split_at(text_b, a_start, b_end)})
    return rows


def section(div: Divergence | None) -> DivergenceView:
    """Everything the template's divergence section shows."""
    word = div.verdict if div is not None else "not_measured"
    measured = div is not None and word in ("diverged", "indistinguishable")
    return {"verdict": word, "reference": div.reference if div is not None else "a",
            "label": verdict_label(word), "color": VERDICT_COLORS.get(word, "#333333"),
            "sentence": sentence(div), "facts": facts(div) if div is not None else [],
            "percentiles": percentile_rows(div) if div is not None and measured else [],
            "svg": kld_svg(div) if div is not None and measured else None,
            "rows": top_rows(div) if div is not None and measured else []}
