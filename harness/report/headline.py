"""The verdict in one line, the same on every surface: the terminal's last line, ``run.log``, ``summary.json``
(``headline``), ``comparison.md`` and the report.

``IMPROVED +1.33 pp [+0.52, +2.21], p = 0.0014 · non-inferior within 1 pp · outputs indistinguishable (KLD ...)``

A verdict about the two server instances only (one launch per configuration, e.g. ``abh ab`` without ``--aa``)
says so in its first words, ``[instances only] REGRESSED ...``; with ``--assume-no-launch-shift`` they are
``[assumes no launch shift] REGRESSED ...`` (after ``[SIMULATED]`` for a simulated run).

The first word is the verdict of the question asked (``stats.hypothesis``); what the margin shows follows
it, worded so it cannot read as a second verdict: under superiority an inconclusive result that is shown
non-inferior says "no improvement shown; non-inferior within 1 pp", not "inconclusive" beside
"non-inferior". Then the outputs' divergence, when it was measured. Reads a stored comparison only.
"""

from __future__ import annotations

import os
from typing import TextIO

from harness.report import divergence_section, identity_section, routing_section, words
from harness.results.schema import Comparison

SEP = " · "
#: ANSI colour of each verdict on a terminal (green: shown good, red: shown bad or no result, yellow: undecided)
COLOURS = {"improved": "32", "equivalent": "32", "noninferior": "32", "regressed": "31", "not_comparable": "31",
           "inconclusive": "33", "identical": "32", "differs": "31", "not_deterministic": "33"}


def _margin(c: Comparison) -> str:
    return f"{100 * c.margin:g} pp" if c.margin is not None else ""


def _numbers(c: Comparison) -> str:
    ci = words.ci_pp(c.delta_ci).removesuffix(" pp")
    return f"{words.pp(c.delta)} {ci}, {words.p_text(c)}"


def _margin_clause(c: Comparison) -> str | None:
    """What the margin shows, when a margin was set and it is not the verdict itself."""
    if c.margin is None or c.tost is None or c.verdict in ("equivalent", "noninferior", "not_comparable"):
        return None
    m = _margin(c)
    if c.tost.equivalent:
        return f"equivalent within ±{m}"
    if c.tost.noninferior:
        return f"non-inferior within {m}"
    if c.hypothesis == "noninferiority":
        return f"non-inferiority not shown (margin {m})"
    return f"not shown within ±{m}"


def _undecided(c: Comparison) -> str:
    """Why an inconclusive result is one, in a few words."""
    if c.errors.changes_verdict:
        return "request errors could decide it"
    if "declared effect" in (c.verdict_reason or ""):
        return f"significant, not shown to reach the declared effect of {words.pp(c.min_effect, signed=False)}"
    if c.tost is not None and c.margin is not None and c.tost.noninferior and not c.tost.equivalent:
        return "no improvement shown"
    return "no difference shown" + (f" (MDE {words.effect_pp(c.mde)})" if c.mde is not None else "")


def _outputs(c: Comparison) -> str | None:
    div = c.divergence
    if div is None:
        return None
    if div.verdict not in ("diverged", "indistinguishable"):
        return "outputs not measured"
    return "outputs " + divergence_section.short(div)


#: the first words of a verdict about the two server instances only (one launch per configuration), and of one
#: the user made about the configurations by stating that launches do not shift accuracy
INSTANCES_ONLY = "[instances only]"
ASSUMED = "[assumes no launch shift]"


def scope(c: Comparison) -> str:
    """What the verdict is about, as its first words ("" when about the configurations, with no assumption)."""
    if not c.instances_only or c.verdict == "not_comparable":
        return ""
    return ASSUMED if "no_launch_shift" in c.assumptions else INSTANCES_ONLY


def headline(c: Comparison) -> str:
    """The comparison's verdict as the one line every surface shows."""
    label = words.verdict_label(c.verdict)
    sim = "[SIMULATED] " if c.simulated else ""
    if c.verdict == "not_comparable":
        return f"{sim}{label}: {c.verdict_reason or 'an arm failed'}"
    if c.identity is not None:  # the no-op proof: its words, then the outputs' divergence
        out = _outputs(c)
        return SEP.join([f"{sim}{label}{identity_section.headline_rest(c.identity)}", *([out] if out else [])])
    first = scope(c)
    head = f"{sim}{first + ' ' if first else ''}{label} {_numbers(c)}"
    if c.verdict == "equivalent":
        head += f" within ±{_margin(c)}"
    elif c.verdict == "noninferior":
        head += f" within {_margin(c)}"
    undecided = [_undecided(c)] if c.verdict == "inconclusive" else []
    margin = _margin_clause(c)
    parts = [head]
    if undecided or margin:
        parts.append("; ".join(x for x in (*undecided, margin) if x))
    if c.qualification:  # the condition the verdict holds under (one launch per configuration)
        parts.append(c.qualification)
    seq = c.sequential
    if seq is not None and seq.stopped:
        fixed = c.verdict_fixed
        parts.append(f"sequential: stopped after {seq.repeats_run} of {seq.max_repeats} repeats"
                     + (f" (the fixed-design test of the same data: {words.verdict_label(fixed).lower()})"
                        if fixed and fixed != c.verdict else ""))
    out = _outputs(c)
    if out:
        parts.append(out)
    routing = routing_section.clause(c.routing)
    if routing:
        parts.append(routing)
    return SEP.join(parts)


def coloured(line: str, verdict: str | None, stream: TextIO) -> str:
    """``line`` with its verdict word coloured when ``stream`` is a terminal (and NO_COLOR is unset)."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()) or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return line
    code = COLOURS.get(verdict or "", "0")
    return f"\033[1;{code}m{line}\033[0m"
