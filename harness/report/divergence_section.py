"""The report's divergence section: the verdict in words, the KLD distribution plot (A/B against A/A) and
the questions whose outputs diverge most, with both arms' texts and the first diverging token marked.

Input is the ``divergence`` object of ``comparison.json`` (:func:`harness.analysis.divergence.compute_divergence`);
KLD is in nats per token. Functions accept ``None`` and missing keys and then say "n/a". Model text is
returned as plain strings (split into before / marked / after) for the autoescaping template; the plot
holds numbers only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.report import plots
from harness.report.words import pct, pp, pval

VERDICT_LABELS = {"diverged": "DIVERGED", "indistinguishable": "INDISTINGUISHABLE",
                  "not_measured": "NOT MEASURED"}
VERDICT_COLORS = {"diverged": "#c62828", "indistinguishable": "#1565c0", "not_measured": "#616161"}
COLOR_AB = plots.COLOR_B
COLOR_AA = "#7f7f7f"
#: characters of context kept before the first divergence and after the marked token
CONTEXT_CHARS = 600


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return None if math.isnan(x) or math.isinf(x) else float(x)


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


def _p(div: Mapping[str, Any]) -> str:
    p, floor = _num(div.get("p")), _num(div.get("p_floor"))
    if p is None:
        return "p = n/a"
    if div.get("p_at_floor") and floor:
        return f"p < {floor / (1 - floor):.2g}"
    return f"p = {pval(p)}"


def verdict_label(word: str | None) -> str:
    return VERDICT_LABELS.get(word or "", (word or "unknown").upper().replace("_", " "))


def sentence(div: Mapping[str, Any] | None) -> str:
    """The divergence verdict as one quotable sentence."""
    if not div:
        return "outputs not measured: no scoring pass ran"
    word = div.get("verdict")
    ab, aa = kld(div.get("kld_mean")), kld(div.get("kld_mean_aa"))
    if word == "diverged":
        return f"outputs diverge beyond A/A noise: KLD {ab} vs {aa} nats/token ({_p(div)})"
    if word == "indistinguishable":
        s = f"outputs indistinguishable from A/A noise: KLD {ab} vs {aa} nats/token ({_p(div)})"
        mde = _num(div.get("effect_mde"))
        return s + (f"; this run could detect about {kld(mde)} nats/token above the floor" if mde else "")
    return f"outputs not measured: {div.get('verdict_reason') or 'no scores'}"


def short(div: Mapping[str, Any] | None) -> str:
    """``diverge (KLD 0.02 nats/token vs A/A 0.0003)``: the outputs half of the combined sentence."""
    if not div or div.get("verdict") not in ("diverged", "indistinguishable"):
        return "not measured"
    verb = "diverge" if div["verdict"] == "diverged" else "indistinguishable from A/A"
    return f"{verb} (KLD {kld(div.get('kld_mean'))} nats/token vs A/A {kld(div.get('kld_mean_aa'))})"


def accuracy_phrase(c: Mapping[str, Any]) -> str:
    """The accuracy half of the combined sentence, from a comparison's verdict."""
    word = c.get("verdict")
    tost = c.get("tost") if isinstance(c.get("tost"), dict) else None
    margin = _num(c.get("margin"))
    alpha = _num(c.get("alpha")) or 0.05
    if word == "improved":
        return f"B better by {pp(c.get('delta'))}"
    if word == "regressed":
        return f"B worse by {pp(c.get('delta'))}"
    if word == "equivalent":
        return f"equivalent within ±{pp(margin, signed=False)}"
    if word == "noninferior":
        return f"non-inferior within {pp(margin, signed=False)}"
    if word == "not_comparable":
        return "not comparable"
    if tost and margin is not None and (_num(tost.get("p_noninferiority")) or 1.0) < alpha:
        return f"non-inferior within {pp(margin, signed=False)}"
    mde = _num(c.get("mde"))
    return "no detectable difference" + (f" (MDE {pp(mde, signed=False)})" if mde is not None else "")


def combined_sentence(c: Mapping[str, Any]) -> str:
    """Both instruments in one sentence: ``accuracy: ...; outputs: ...`` (``c`` is comparison.json)."""
    div = c.get("divergence") if isinstance(c.get("divergence"), dict) else None
    return f"accuracy: {accuracy_phrase(c)}; outputs: {short(div)}"


def terminal_line(div: Mapping[str, Any] | None) -> str:
    """One line for the terminal summary."""
    if not div:
        return "divergence: NOT MEASURED (no scoring pass)"
    word = div.get("verdict")
    if word not in ("diverged", "indistinguishable"):
        return f"divergence: NOT MEASURED — {div.get('verdict_reason') or 'no scores'}"
    ci = div.get("effect_ci")
    ci_txt = f" [{kld(ci[0])}, {kld(ci[1])}]" if isinstance(ci, list | tuple) and len(ci) == 2 else ""
    return (f"divergence: {verdict_label(word)} — KLD {kld(div.get('kld_mean'))} vs A/A "
            f"{kld(div.get('kld_mean_aa'))} nats/token, {kld(div.get('effect'))} above the floor{ci_txt}, "
            f"{_p(div)}; same top token {pct(div.get('same_top_rate'), 1)} vs {pct(div.get('same_top_rate_aa'), 1)}; "
            f"texts identical {pct(div.get('text_identical_rate'), 1)} vs {pct(div.get('text_identical_rate_aa'), 1)} "
            f"({div.get('tokens')} tokens, {div.get('questions')} questions)")


def kld_cell(row: Mapping[str, Any]) -> str:
    """A sweep row's divergence in one cell, ``0.023 (0.0003) *``: mean KLD A‖B, in brackets the A/A floor's,
    ``*`` when diverged beyond it; "not measured", or "n/a" when the job did not score."""
    word = row.get("divergence")
    if not word:
        return "n/a"
    if word not in ("diverged", "indistinguishable"):
        return "not measured"
    return f"{kld(row.get('kld'))} ({kld(row.get('kld_aa'))})" + (" *" if word == "diverged" else "")


def facts(div: Mapping[str, Any]) -> list[str]:
    """Supporting facts under the divergence sentence."""
    out: list[str] = []
    if div.get("verdict") not in ("diverged", "indistinguishable"):
        out.append(f"why: {div.get('verdict_reason') or 'no scores'}")
    if div.get("tokens"):
        s = f"{div.get('tokens')} reference tokens of {div.get('questions')} questions scored by every pass"
        dropped = {k: v for k, v in (div.get("questions_dropped") or {}).items() if v}
        if dropped:
            s += " (dropped: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in dropped.items()) + ")"
        out.append(s + f"; top-k = {div.get('top_k')}")
    if _num(div.get("effect")) is not None:
        ci = div.get("effect_ci")
        alpha = _num(div.get("alpha")) or 0.05
        ci_txt = f", {100 * (1 - alpha):g} % CI [{kld(ci[0])}, {kld(ci[1])}]" if isinstance(ci, list) else ""
        out.append(f"KLD above the A/A floor: {kld(div.get('effect'))} nats/token{ci_txt}; one-sided sign-flip "
                   f"test with questions as the unit, {_p(div)}")
    if _num(div.get("same_top_rate")) is not None:
        out.append(f"same top token: {pct(div.get('same_top_rate'))} (A/A {pct(div.get('same_top_rate_aa'))}); "
                   f"RMS Δlogprob of the reference token: {_g(div.get('rms_dlogprob'))} "
                   f"(A/A {_g(div.get('rms_dlogprob_aa'))}) nats")
    if div.get("text_questions"):
        s = (f"greedy texts identical: {pct(div.get('text_identical_rate'))} of {div.get('text_questions')} "
             f"questions A vs B, {pct(div.get('text_identical_rate_aa'))} A vs A'")
        fd = _num(div.get("first_divergence_median"))
        if fd is not None:
            s += f"; where they differ, the first diverging token is at median position {fd:g}"
        out.append(s)
    out.append(f"method: {div.get('kl_method')}" if div.get("kl_method") else "method: n/a")
    return out


def _g(x: Any) -> str:
    v = _num(x)
    return "n/a" if v is None else f"{v:.3g}"


def percentile_rows(div: Mapping[str, Any]) -> list[dict[str, str]]:
    """[{label, ab, aa}] for a table: mean, 99.9 / 99 / 95 / 90 percentiles, median, max of per-token KLD."""
    p_ab = div.get("kld_percentiles") or {}
    p_aa = div.get("kld_percentiles_aa") or {}
    rows = [{"label": "mean", "ab": kld(div.get("kld_mean")), "aa": kld(div.get("kld_mean_aa"))}]
    for key in ("99.9", "99", "95", "90", "50"):
        rows.append({"label": "median" if key == "50" else f"{key} %", "ab": kld(p_ab.get(key)),
                     "aa": kld(p_aa.get(key))})
    rows.append({"label": "max", "ab": kld(div.get("kld_max")), "aa": kld(div.get("kld_max_aa"))})
    return rows


# ------------------------------------------------------------------------------------------ plot
def _shares(h: Any, total: int) -> list[float] | None:
    if not isinstance(h, dict) or not isinstance(h.get("counts"), list) or total <= 0:
        return None
    return [100 * c / total for c in h["counts"]]


def kld_svg(div: Mapping[str, Any]) -> str | None:
    """Per-token and per-question KLD distributions, A/B against A/A, on a log axis (inline SVG); None when
    there is nothing to draw. Zeros (identical distributions) are given in the legend, not on the log axis."""
    hist = div.get("kld_histogram")
    if not isinstance(hist, dict) or not isinstance(hist.get("edges"), list):
        return None
    edges = [float(e) for e in hist["edges"]]
    plt = plots._plt()
    with plt.rc_context(plots._rc("divergence")):
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.0))
        for ax, unit, title in ((axes[0], "token", "per token"), (axes[1], "question", "per question (test unit)")):
            for side, color, name in (("ab", COLOR_AB, "A‖B"), ("aa", COLOR_AA, "A‖A′ (floor)")):
                h = hist.get(f"{unit}_{side}")
                if not isinstance(h, dict):
                    continue
                total = int(h.get("zeros", 0)) + sum(int(c) for c in h.get("counts", []))
                shares = _shares(h, total)
                if shares is None:
                    continue
                zeros = 100 * int(h.get("zeros", 0)) / total
                label = name + (f", {zeros:.0f} % exactly 0" if zeros >= 0.5 else "")
                if side == "ab":
                    ax.stairs(shares, edges, color=color, fill=True, alpha=0.35, lw=0)
                ax.stairs(shares, edges, color=color, lw=1.6, label=label)
            mean_ab = _num(div.get("kld_mean")) if unit == "token" else None
            mean_aa = _num(div.get("kld_mean_aa")) if unit == "token" else None
            for m, color in ((mean_ab, COLOR_AB), (mean_aa, COLOR_AA)):
                if m and m > 0:
                    ax.axvline(min(max(m, edges[0]), edges[-1]), color=color, ls="--", lw=1.2)
            ax.set_xscale("log")
            ax.set_xlim(edges[0], edges[-1])
            ax.set_xlabel(f"KLD {title} (nats)" + ("; dashed: means" if unit == "token" else ""))
            ax.set_ylabel("share (%)")
            ax.grid(axis="x", color="#eeeeee")
            ax.set_axisbelow(True)
            ax.legend(loc="upper left", frameon=False, fontsize=8)
        return plots._to_svg(fig)


# ------------------------------------------------------------------------------------------ top questions
def _outputs(d: Any) -> dict[int, str | None]:
    if not d:
        return {}
    from harness.results.eval_store import load_samples

    try:
        return {s.index: s.output for s in load_samples(Path(str(d)))}
    except (OSError, ValueError):
        return {}


def _word_end(text: str, start: int) -> int:
    """End of the word starting at ``start``: the next whitespace after at least one character."""
    i = start + 1
    while i < len(text) and not text[i].isspace():
        i += 1
    return min(i, len(text))


def split_at(text: str | None, start: int | None, end: int | None,
             context: int = CONTEXT_CHARS) -> dict[str, str] | None:
    """{before, mark, after} of a text around the marked span (cut to ``context`` characters each side)."""
    if text is None:
        return None
    if start is None:
        return {"before": text[: 2 * context] + ("…" if len(text) > 2 * context else ""), "mark": "", "after": ""}
    start = max(0, min(start, len(text)))
    end = max(start, min(end if end is not None else _word_end(text, start), len(text)))
    lo = max(0, start - context)
    hi = min(len(text), end + context)
    return {"before": ("…" if lo > 0 else "") + text[lo:start], "mark": text[start:end],
            "after": text[end:hi] + ("…" if hi < len(text) else "")}


def top_rows(div: Mapping[str, Any], texts_a: Mapping[int, str | None] | None = None,
             texts_b: Mapping[int, str | None] | None = None) -> list[dict[str, Any]]:
    """The questions that diverge most, each with both greedy texts split around the first divergence.

    Texts default to ``samples.jsonl`` of ``div["dirs"]["ref"]`` (arm A) and ``["ab"]`` (arm B). A's mark is
    the diverging reference token when its span is known (``first_divergence_span``), else the word from
    the first differing character; B's mark is the word from that character.
    """
    dirs = div.get("dirs") or {}
    ta = texts_a if texts_a is not None else _outputs(dirs.get("ref"))
    tb = texts_b if texts_b is not None else _outputs(dirs.get("ab"))
    rows = []
    for q in div.get("top_questions") or []:
        if not isinstance(q, dict):
            continue
        idx = q.get("question")
        c = q.get("first_divergence_char")
        span = q.get("first_divergence_span")
        a_start, a_end = (span[0], span[1]) if isinstance(span, list) and len(span) == 2 else (c, None)
        text_a, text_b = (ta.get(idx), tb.get(idx)) if idx is not None else (None, None)
        b_end = _word_end(text_b, c) if text_b is not None and isinstance(c, int) else None
        rows.append({
            **q,
            "kld_text": kld(q.get("kld")), "kld_aa_text": kld(q.get("kld_aa")), "d_text": kld(q.get("d")),
            "same_top_text": pct(q.get("same_top_rate"), 1),
            "a": split_at(text_a, a_start, a_end),
            "b": split_at(text_b, a_start, b_end),
        })
    return rows


def section(div: Mapping[str, Any] | None, comparison: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything the template's divergence section shows."""
    div = div or {}
    word = div.get("verdict") or "not_measured"
    measured = word in ("diverged", "indistinguishable")
    return {
        "verdict": word,
        "reference": div.get("reference") or "a",
        "label": verdict_label(word),
        "color": VERDICT_COLORS.get(word, "#333333"),
        "sentence": sentence(div) if div else sentence(None),
        "combined": combined_sentence(comparison) if comparison else None,
        "facts": facts(div) if div else [],
        "percentiles": percentile_rows(div) if measured else [],
        "svg": kld_svg(div) if measured else None,
        "rows": top_rows(div) if measured else [],
    }
