"""The no-op proof on every surface (``comparison.json`` ``identity``, :mod:`harness.analysis.identity`): the
headline's words, the verdict's detail lines (terminal, report), the markdown section and the report's table of
the questions whose outputs part, each with where, both tokens and the near-tie classification."""

from __future__ import annotations

from harness.report import words
from harness.results.schema import Identity, Parting, PartingCounts

#: partings shown in the markdown and the report (comparison.json lists them all)
MAX_ROWS = 50


def counts_text(c: PartingCounts) -> str:
    """``3 parted: 1 near-tie, 2 real divergences, 0 unclassified``."""
    return (f"{c.parted} parted: {c.near_tie} near-tie, {c.divergence} real "
            f"divergence{'s' if c.divergence != 1 else ''}, {c.unclassified} unclassified")


def bound_text(i: Identity) -> str:
    return (f"per-question difference rate ≤ {words.pct(i.upper_bound)} ({100 * (1 - i.alpha):g} %, exact)"
            if i.upper_bound is not None else "no bound")


def headline_rest(i: Identity) -> str:
    """What follows the verdict word in the headline."""
    if i.verdict == "identical":
        lp = ", logprobs too" if i.floor_logprobs == "identical" else ""
        return f" on all {i.questions} questions · {bound_text(i)} · A/A floor exactly zero{lp}"
    if i.verdict == "differs":
        return (f" on {i.differing} of {i.questions} questions (first divergence: {i.counts.near_tie} near-tie, "
                f"{i.counts.divergence} real, {i.counts.unclassified} unclassified; A/A: 0 parted) · A/A floor "
                "exactly zero: the difference is the change")
    if i.verdict == "not_deterministic":
        return (f": the A/A floor is not zero (A/A {counts_text(i.counts_aa)}; A/B {counts_text(i.counts)}); "
                f"first: {i.floor_difference}")
    return f": {i.reason}"


def detail(i: Identity) -> list[str]:
    """The proof's lines under the verdict."""
    out = [f"no-op proof over {i.questions} questions: {i.differing} differ between A and B; {bound_text(i)}",
           f"first diverging token (near-tie: a logprob gap of at most {i.near_tie_nats:g} nats in the reference "
           f"pass): A/B {counts_text(i.counts)}; A/A {counts_text(i.counts_aa)}",
           f"floor: {i.floor_passes} further pass(es) of A compared; logprobs {i.floor_logprobs.replace('_', ' ')}"
           + (f"; first difference: {i.floor_difference}" if i.floor_difference else "")]
    if i.logprobs_ab != "not_scored":
        out.append(f"B's scoring pass against A's reference pass: logprobs {i.logprobs_ab}")
    return out


def _where(p: Parting) -> str:
    return f"token {p.position}" if p.position is not None else f"char {p.char}"


def _token(text: str, tok: int | None) -> str:
    return f"{text!r}" + (f" (id {tok})" if tok is not None else "")


def _gap(p: Parting) -> str:
    if p.gap is None:
        return "n/a"
    return f"{'≥ ' if p.gap_is_bound else ''}{p.gap:.3f}"


def rows(ps: list[Parting]) -> list[list[str]]:
    """One row per parting (at most :data:`MAX_ROWS`): question, where, A's token, B's, gap (nats), kind."""
    return [[str(p.question), _where(p), _token(p.text_a, p.token_a), _token(p.text_b, p.token_b), _gap(p),
             (p.kind or "unclassified").replace("_", "-")] for p in ps[:MAX_ROWS]]


HEADER = ["question", "parts at", "A's token", "other's token", "gap (nats)", "kind"]
