"""The verdict in one plain sentence, the same on every surface (terminal, ``run.log``, ``summary.json``,
``comparison.md``, the report's hero): ``[SIMULATED] IMPROVED +1.9 pp: B gets more questions right (95 % CI
+0.9 to +2.9 pp) · assumes B's launches vary like A's · outputs within relaunch noise``.

It is read in five seconds; the test's details are under "How this was decided" (``words.how_decided``). A
qualifier that changes what the verdict means stays here, in words. One sentence per measurement
(:data:`SENTENCES`): a new measurement adds its function there.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import TextIO

from harness.analysis.routing import share_words
from harness.report import identity_section, words
from harness.results.schema import Comparison
from harness.stats.accuracy import QUALIFIED_A_ONE, QUALIFIED_AA_ONLY, QUALIFIED_B_ONE

SEP = " · "
#: ANSI colour of each verdict on a terminal (green: shown good, red: shown bad or no result, yellow: undecided)
COLOURS = {"improved": "32", "equivalent": "32", "noninferior": "32", "regressed": "31", "not_comparable": "31",
           "inconclusive": "33", "identical": "32", "differs": "31", "not_deterministic": "33"}

#: the first words of a verdict about the two server instances only (one launch per configuration), and of one
#: the user made about the configurations by stating that launches do not shift accuracy
INSTANCES_ONLY = "[instances only]"
ASSUMED = "[assumes no launch shift]"


def scope(c: Comparison) -> str:
    """What the verdict is about, as its first words ("" when about the configurations, with no assumption)."""
    if not c.instances_only or c.verdict == "not_comparable":
        return ""
    return ASSUMED if "no_launch_shift" in c.assumptions else INSTANCES_ONLY


def digits(ci: Sequence[float] | None) -> int:
    """Decimals of a difference in pp that its interval supports: 1 when the interval is 1 pp wide or wider."""
    if not ci or len(ci) != 2 or not all(isinstance(v, int | float) and math.isfinite(v) for v in ci):
        return 2
    return 1 if abs(ci[1] - ci[0]) >= 0.01 else 2


def interval(c: Comparison) -> str:
    """``95 % CI +0.9 to +2.9 pp`` (the verdict's interval, at its level)."""
    d = digits(c.delta_ci)
    lo, hi = c.delta_ci if c.delta_ci and len(c.delta_ci) == 2 else (None, None)
    level = f"{100 * (c.delta_ci_level or 1 - c.alpha):g} % CI"
    return f"{level} {words.pp(lo, digits=d).removesuffix(' pp')} to {words.pp(hi, digits=d)}"


def _margin(c: Comparison) -> str:
    return f"{100 * c.margin:g} pp" if c.margin is not None else ""


def _margin_clause(c: Comparison) -> str | None:
    """What the margin shows, when a margin was asked and the verdict does not already say more: nothing beside
    IMPROVED (a significant gain is trivially within any loss margin); beside REGRESSED, whether the loss stays
    within the margin; beside INCONCLUSIVE, what the margin could show."""
    if c.margin is None or c.tost is None or c.verdict in ("equivalent", "noninferior", "not_comparable",
                                                          "improved"):
        return None
    m = _margin(c)
    if c.verdict == "regressed":
        return f"the loss is within the {m} margin" if c.tost.noninferior else None
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
    return "no accuracy difference detected" + (f" (detectable effect {words.effect_pp(c.mde)})"
                                                 if c.mde is not None else "")


#: the statistics' conditions of a verdict, in the headline's words
PLAIN_ASSUMPTIONS = {QUALIFIED_AA_ONLY: "assumes B's launches vary like A's",
                     QUALIFIED_B_ONE: "assumes B's launches vary like A's",
                     QUALIFIED_A_ONE: "assumes A's launches vary like B's"}


def _assumption(c: Comparison) -> str | None:
    """The assumption about launches the verdict rests on, in words (without where the statistics took the
    launch variance from: "How this was decided" says that)."""
    q = c.qualification
    if not q:
        return None
    if q in PLAIN_ASSUMPTIONS:
        return PLAIN_ASSUMPTIONS[q]
    return q.split(": ", 1)[-1] if q.startswith("launch variance from") else q


def accuracy(c: Comparison) -> str:
    """The accuracy verdict: its word, the difference, how sure, and the qualifiers that change its meaning."""
    label = words.verdict_label(c.verdict)
    if c.verdict == "not_comparable":
        return f"{label}: {c.verdict_reason or 'an arm failed'}"
    if c.identity is not None:  # the no-op proof: its own words
        return f"{label}{identity_section.headline_rest(c.identity)}"
    first = scope(c)
    d = words.pp(c.delta, digits=digits(c.delta_ci))
    if c.verdict == "improved":
        body = f"{d}: B gets more questions right ({interval(c)})"
    elif c.verdict == "regressed":
        body = f"{d}: B gets fewer questions right ({interval(c)})"
    elif c.verdict == "equivalent":
        body = f"{d} ({interval(c)}): within ±{_margin(c)}"
    elif c.verdict == "noninferior":
        body = f"{d} ({interval(c)}): no loss beyond {_margin(c)}"
    else:
        body = f"{d} ({interval(c)})"
    parts = [f"{first + ' ' if first else ''}{label} {body}"]
    clauses = [_undecided(c)] if c.verdict == "inconclusive" else []
    margin = _margin_clause(c)
    if clauses or margin:
        parts.append("; ".join(x for x in (*clauses, margin) if x))
    if c.verdict != "inconclusive" and c.errors.changes_verdict:
        parts.append("request errors could change it")
    assumption = _assumption(c)
    if assumption:
        parts.append(assumption)
    seq = c.sequential
    if seq is not None and seq.stopped:
        fixed = c.verdict_fixed
        parts.append(f"sequential: stopped after {seq.repeats_run} of {seq.max_repeats} repeats"
                     + (f" (the fixed-design test of the same data: {words.verdict_label(fixed).lower()})"
                        if fixed and fixed != c.verdict else ""))
    return SEP.join(parts)


def outputs(c: Comparison) -> str | None:
    """The outputs' divergence verdict, when it was measured (or said why not)."""
    div = c.divergence
    if div is None or c.verdict == "not_comparable":
        return None
    if div.verdict == "diverged":
        return "outputs differ beyond relaunch noise"
    if div.verdict == "indistinguishable":
        return "outputs within relaunch noise"
    return "outputs not measured"


def routing(c: Comparison) -> str | None:
    """The MoE routing's verdict, when it was asked for: a defect in the seed's words (the dropped expert, the id
    out of range, on which layers), else where B's routing sits against the A/A floor."""
    r = c.routing
    if r is None or c.verdict == "not_comparable":
        return None
    if any(s.defect for s in r.sides.values()):
        return r.sentence or None
    if r.verdict == "diverged":
        floor = f" vs A/A {share_words(r.identical_aa)}" if r.identical_aa is not None else ""
        same = f" (identical expert sets on {share_words(r.identical)} of tokens{floor})" if r.identical is not None else ""
        return "routing differs beyond relaunch noise" + same
    if r.verdict == "indistinguishable":
        return "routing within relaunch noise"
    return "routing not measured"


#: the plain verdict sentences of the headline, in order: one function per measurement
SENTENCES: list[Callable[[Comparison], str | None]] = [accuracy, outputs, routing]


def compose(sentences: Sequence[str | None], simulated: bool = False) -> str:
    """The headline of plain verdict sentences (None: not measured, left out), ``[SIMULATED]`` first."""
    return ("[SIMULATED] " if simulated else "") + SEP.join(s for s in sentences if s)


def headline(c: Comparison) -> str:
    """The comparison's verdict as the one line every surface shows."""
    return compose([f(c) for f in SENTENCES], c.simulated)


def coloured(line: str, verdict: str | None, stream: TextIO) -> str:
    """``line`` with its verdict word coloured when ``stream`` is a terminal (and NO_COLOR is unset)."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()) or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return line
    code = COLOURS.get(verdict or "", "0")
    return f"\033[1;{code}m{line}\033[0m"
