"""The no-op proof on every surface (``comparison.json`` ``identity``, :mod:`harness.analysis.identity`): the
headline's words, the verdict's detail lines (terminal, report), the markdown section and the report's table of
the questions whose outputs part, each with where, both tokens and the near-tie classification."""

from __future__ import annotations

from harness.analysis.identity import bound_text, counts_text, detail
from harness.results.schema import Identity, Parting

#: the proof's lines are analysis.identity's (the terminal prints them too); the report shows them from here
__all__ = ["HEADER", "MAX_ROWS", "detail", "headline_rest", "rows"]

#: partings shown in the markdown and the report (comparison.json lists them all)
MAX_ROWS = 50


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
