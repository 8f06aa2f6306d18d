"""The result on the terminal: by default a few plain lines above the headline (which the command prints
last); with ``--verbose`` the statistician's summary and the cost per arm.
"""

from __future__ import annotations

from harness.analysis.cost import gpu_hours
from harness.report import words
from harness.report.cost_section import hms
from harness.report.divergence_section import kld
from harness.report.headline import digits, interval, outputs
from harness.results.schema import Comparison, Cost

#: the most plain result lines above the headline (warnings come on top of them: each is worth its line)
MAX_LINES = 8


def cost_text(cost: Cost) -> str:
    """``4 launches, 6 evals, 4 scoring passes; servers up 3 min 16 s; no GPU`` (GPU-hours when GPUs were used)."""
    t = cost.total
    passes = f", {t.scoring_passes} scoring pass(es)" if t.scoring_passes else ""
    gpu = f"{gpu_hours(t.gpu_hours)} GPU-hours" if t.gpus else "no GPU"
    return f"{t.launches} launch(es), {t.evals} eval(s){passes}; servers up {hms(t.server_s)}; {gpu}"


def result_lines(c: Comparison, title: str, cost: Cost | None = None,
                 how: str = "--verbose, comparison.md or report.html") -> list[str]:
    """The plain result: ``title`` (experiment and arms), then at most :data:`MAX_LINES` lines in all, then the
    warnings; ``how``: where the statistician's details are."""
    a, b = c.arms.a, c.arms.b
    out = [title]
    if c.verdict != "not_comparable":
        out.append(f"  accuracy: A {words.pct(a.accuracy)}, B {words.pct(b.accuracy)} on {c.n} questions"
                   + (f" ({c.n_total - c.n} of {c.n_total} without an answer from both)" if c.n_total != c.n
                      else ""))
        out.append(f"  B − A: {words.pp(c.delta, digits=digits(c.delta_ci))} ({interval(c)}), {words.p_text(c)}")
        out.append(f"  {words.questions_line(c)}")
        if c.mde is not None:
            noise = (f"; a second launch of A moves accuracy by up to ±{words.pp(c.noise_band[1], signed=False)}"
                     if c.noise_band is not None else "")
            out.append(f"  {words.detectable(c)}{noise}")
    div = c.divergence
    said = outputs(c)
    if div is not None and said and div.verdict in ("diverged", "indistinguishable"):
        out.append(f"  {said} (KLD {kld(div.kld_mean)} nats/token vs A/A {kld(div.kld_mean_aa)})")
    elif said:
        out.append(f"  {said}" + (f": {div.verdict_reason}" if div is not None and div.verdict_reason else ""))
    if cost is not None:
        out.append(f"  cost: {cost_text(cost)}")
    out.append(f"  how this was decided: {how}")
    out = out[:MAX_LINES]
    out += [f"  warning: {w}" for w in c.warnings]
    return out
