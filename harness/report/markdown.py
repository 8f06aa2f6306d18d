"""``comparison.md``: the paste-ready result of a comparison in GitHub-flavoured markdown, from stored files
only. Table cells are escaped, so an arm name or a check's text cannot break the table or inject markup.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.report import cost_section as cost
from harness.report import data, identity_section, words
from harness.report import divergence_section as report_divergence
from harness.report import routing_section as report_routing
from harness.report.headline import headline, outputs
from harness.results import schema
from harness.results.fileio import atomic_write_text
from harness.results.records import JSON
from harness.results.schema import Comparison, Identity, SweepSummary
from harness.serving.untrusted import printable

MARKDOWN = "comparison.md"
#: a side check's result as a table cell (by its ``passed``; anything else: "not run")
CHECK_RESULTS: dict[bool | None, str] = {True: "PASS", False: "FAIL"}


def cell(v: Any) -> str:
    """A value as one table cell: pipes escaped, markup neutralised (link and image syntax too), control
    characters shown as escapes, on one line."""
    s = "—" if v is None or v == "" else printable(str(v))
    s = s.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return " ".join(s.split())


def prose(v: Any) -> str:
    """Text of ours with values inside (the headline) on one line: readable as written ("[SIMULATED]",
    "[-7.42, +7.42]" kept), but no link, image or HTML can be made of it, and control characters show as
    escapes."""
    s = printable(str(v)).replace("\\", "\\\\")
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = s.replace("](", "\\](").replace("][", "\\][").replace("![", "!\\[").replace("*", "\\*")
    return " ".join(s.split())


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A GFM table; ``align`` per column: "l" or "r"."""
    align = align or ["l"] * len(header)
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "| " + " | ".join("---:" if a == "r" else ":---" for a in align) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _fence(text: str, lang: str = "sh") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _count(runs: list[data.LoadedEval], key: str) -> tuple[int | None, int | None]:
    """(sum of ``key`` over the runs' summaries, sum of answered), None when a run lacks it."""
    vals = [r.summary.get(key) for r in runs]
    answered = [r.summary.get("answered") for r in runs]
    if not runs or any(not isinstance(v, int) for v in vals):
        return None, None
    ans = sum(a for a in answered if isinstance(a, int)) if all(isinstance(a, int) for a in answered) else None
    return sum(v for v in vals if isinstance(v, int)), ans


def _rate(k: int | None, of: int | None) -> str:
    if k is None:
        return "n/a"
    return f"{k} ({100 * k / of:.2f} %)" if of else str(k)


def _arm_rows(c: Comparison, runs: dict[str, list[data.LoadedEval]], names: dict[str, str]) -> list[list[str]]:
    rows = []
    for role, arm in (("a", c.arms.a), ("b", c.arms.b)):
        rs = [r for r in runs[role] if r.error is None]
        invalid, answered = _count(rs, "invalid")
        errors, _ = _count(rs, "errors")
        missing, _ = _count(rs, "missing")
        err_txt = _rate(errors, sum(r.summary.get("n") or 0 for r in rs) or None)
        if missing:
            err_txt += f", {missing} missing"
        reps = arm.repeats
        rows.append([role.upper(), names[role], words.pct(arm.accuracy), words.ci_pct(arm.wilson),
                     str(arm.n_runs), " · ".join(words.pct(x) for x in reps) if len(reps) > 1 else "",
                     _rate(invalid, answered), err_txt])
    return rows


def _checks(manifest: Mapping[str, Any], names: dict[str, str]) -> list[list[str]]:
    rows = []
    for view in data.arm_views(manifest, names):
        for when, checks in (("static", view["static_checks"]), ("live", view["live_checks"])):
            for ch in checks:
                result = CHECK_RESULTS.get(ch["passed"], "not run")
                rows.append([view["role"].upper(), ch["name"], when, result, ch["expected"], ch["found"]])
    return rows


def _source_refs_run(manifest: Mapping[str, Any], names: dict[str, str]) -> list[list[JSON]]:
    """Each arm's source as its launch recorded it (``launch.source``), the stored values as they are."""
    rows: list[list[JSON]] = []
    arms = data.obj(manifest.get("arms"))
    for view in data.arm_views(manifest, names):
        src = data.obj(data.obj(data.obj(arms.get(view["key"])).get("launch")).get("source"))
        patches = src.get("patches") or ([src["patch"]] if src.get("patch") else [])
        patch_txt = ", ".join(str(p.get("file", p)) if isinstance(p, dict) else str(p)
                              for p in (patches if isinstance(patches, list) else [patches]))
        commit = src.get("commit")
        dirty = " (dirty)" if src.get("dirty") else ""
        rows.append([view["role"].upper(), view["name"], src.get("kind") or "",
                     portable(str(src.get("tree") or src.get("path") or "")),
                     src.get("ref") or "", f"{commit}{dirty}" if commit else "", patch_txt])
    return rows


def _servers(runs: dict[str, list[data.LoadedEval]]) -> list[list[str]]:
    rows = []
    for role in ("a", "b", "aa"):
        for r in runs[role]:
            s = r.server()
            rows.append([{"aa": "A/A"}.get(role, role.upper()), f"r{r.repeat}", s["url"] or "", s["build"] or "",
                         s["version"] or "", s["model_path"] or ""])
    return rows


#: the abh checkout (the simulator's data and the package live under it)
CHECKOUT = Path(__file__).resolve().parents[2]
_ABS_PATH = re.compile(r"(?<![\w$.~/])/(?:[\w.+@%-]+/)*[\w.+@%-]+")


def portable(text: str) -> str:
    """A command without this machine's paths, for a review pasted elsewhere: the interpreter of a venv as
    ``python``, the abh checkout as ``$ABH_REPO``, the home directory as ``$HOME``, any other absolute path as
    ``<path>/NAME`` (its last part kept)."""
    home, repo = str(Path.home()), str(CHECKOUT)

    def one(m: re.Match[str]) -> str:
        p = m.group(0)
        if re.search(r"/bin/python[\d.]*$", p):
            return "python"
        for root, name in ((repo, "$ABH_REPO"), (home, "$HOME")):
            if root not in ("", "/") and (p == root or p.startswith(root + "/")):
                return name + p[len(root):]
        return f"<path>/{p.rsplit('/', 1)[-1]}"

    return _ABS_PATH.sub(one, text)


def _commands(c: Comparison, manifest: Mapping[str, Any], names: dict[str, str]) -> list[str]:
    command = data.abh_command(c, manifest)
    out = [_fence(portable(command))] if command else []
    for view in data.arm_views(manifest, names):
        if view["command"]:
            out.append(f"<details><summary>server command of arm {view['role'].upper()} "
                       f"({cell(view['name'])})</summary>\n\n{_fence(portable(view['command']))}\n\n</details>")
    if out:
        out.append("Paths: `$ABH_REPO` is the abh checkout, `python` the arm's interpreter, `<path>/NAME` a path "
                   "of the machine that ran it (report.html beside this file has them in full).")
    return out


def _identity(i: Identity) -> list[str]:
    """The no-op proof: its lines, then where the outputs part (A vs B, and A vs A/A when the floor is not zero)."""
    out = ["#### No-op proof", "  \n".join(cell(d) for d in identity_section.detail(i))]
    for title, ps in (("A vs B", i.partings), ("A vs A/A (the floor)", i.partings_aa)):
        if ps:
            more = f", the first {identity_section.MAX_ROWS} shown" if len(ps) > identity_section.MAX_ROWS else ""
            out.append(f"{title}: {len(ps)} question(s) whose outputs part{more}")
            out.append(table(identity_section.HEADER, identity_section.rows(ps)))
    return out


def _how_decided(c: Comparison, level: str) -> str:
    """The statistician's details, folded: the test and its p, the design, launch variance, ψ, the reason."""
    test = (c.test or "").replace("_", " ")
    rows = table(["Δ (B − A)", f"{level} CI", "interval", "test (decided the verdict)", "p"],
                 [[words.pp(c.delta), words.ci_pp(c.delta_ci), c.delta_ci_method, test,
                   words.p_text(c)[2:] if words.p_text(c).startswith("p <") else words.pval(c.p)]],
                 ["r", "r", "l", "l", "r"])
    lines = [cell(x) for x in words.how_decided(c)]
    boot = c.diagnostics.get("delta_ci_bootstrap_launch")
    if isinstance(boot, list) and len(boot) == 2:
        lines.append(f"launch-aware bootstrap: Δ {words.ci_pp(boot)} (launches, then questions, resampled; beside "
                     f"the verdict's {words.ci_pp(c.delta_ci)})")
    div = c.divergence
    if div is not None:
        lines.append(f"divergence: {cell(report_divergence.sentence(div))}")
    if div is not None and div.partings is not None:
        lines.append(f"first diverging tokens: {cell(report_divergence.partings_text(div))}")
    return ("<details><summary>How this was decided</summary>\n\n" + rows + "\n\n" + "  \n".join(lines)
            + "\n\n</details>")


def render(root: Path) -> str:
    """The markdown of the comparison (or run) directory ``root``."""
    root = Path(root)
    c = data.load_comparison(root)
    if c is None:
        raise FileNotFoundError(f"{root} holds no {schema.COMPARISON_FILE}")
    manifest = data.load_manifest(root)
    names = data.arm_names(c)
    runs = data.load_runs(c, root)
    level = f"{100 * (1 - c.alpha):g} %"
    sim = "[SIMULATED] " if c.simulated else ""
    experiment = manifest.get("experiment")
    # the verdict first, stated once: the headline every surface shares
    parts = [f"> **{prose(headline(c))}**",
             f"### {sim}abh: {cell(names['b'])} (B) vs {cell(names['a'])} (A)"
             + (f" — {cell(experiment)}" if experiment else "")]
    if c.simulated:
        parts.append("> SIMULATED: these numbers come from the harness's simulated engine, not a real model server.")
    parts.append(table(["arm", "name", "accuracy", f"Wilson {level}", "runs", "per repeat", "invalid",
                        "request errors"], _arm_rows(c, runs, names), ["l", "l", "r", "r", "r", "l", "r", "r"]))
    facts = [f"**Δ (B − A):** {words.pp(c.delta)}, {level} CI {words.ci_pp(c.delta_ci)}",
             f"**Questions:** {cell(words.questions_line(c).removeprefix('questions: '))}"]
    if c.mde is not None:
        facts.append(f"**Detectable effect (80 % power):** {words.effect_pp(c.mde)}"
                     + (f"; margin ±{words.pp(c.margin, signed=False)}" if c.margin is not None else ""))
    if c.instances_only and c.verdict != "not_comparable":
        facts.append("**Scope:** these two server instances only (one launch per arm: a launch-wide accuracy shift "
                     "cannot be told from the change); " + (
                         "**assumed** by the user (`--assume-no-launch-shift`): launches do not shift accuracy"
                         if "no_launch_shift" in c.assumptions else
                         "`--fail-on` does not act on it without `--assume-no-launch-shift`"))
    elif c.assumptions:
        facts.append(f"**Assumptions stated:** {cell(', '.join(c.assumptions))}")
    gate = c.errors.gate
    if gate is not None and gate.action != "none":
        facts.append(f"**Request errors:** {gate.action}: {cell(gate.reason)}")
    out = outputs(c)
    if out:
        facts.append(f"**Outputs:** {cell(out.removeprefix('outputs '))}")
    if c.routing is not None:
        facts.append(f"**Routing:** {cell(c.routing.sentence)}")
        facts += [f"- {cell(f)}" for f in report_routing.facts(c.routing)[1:]]
    seq = cost.load_sequential(root, manifest, c)
    if seq:
        facts.append(f"**Sequential:** {cell(cost.sequential_line(seq))}")
    run_cost = cost.load_cost(root, manifest)
    if run_cost:
        facts.append(f"**Cost:** {cell(cost.cost_line(run_cost))}")
    parts.append("  \n".join(facts))
    parts.append(_how_decided(c, level))

    if c.identity is not None:
        parts += _identity(c.identity)
    parts.append("#### Side checks")
    checks = _checks(manifest, names)
    if checks:
        parts.append(table(["arm", "check", "when", "result", "expected", "found"], checks))
    elif manifest:
        parts.append("No side check was recorded for either arm.")
    else:
        parts.append("None: abh did not launch these servers (`abh compare` of stored evals, `abh ab` of running "
                     "servers), so it asserted nothing about them. Their own account of themselves is below.")

    parts.append("#### Sources")
    if manifest.get("arms"):
        parts.append(table(["arm", "name", "source", "tree", "ref", "commit", "patches"],
                           _source_refs_run(manifest, names)))
    servers = _servers(runs)
    if servers and (not manifest.get("arms") or any(any(x for x in row[2:]) for row in servers)):
        parts.append(table(["arm", "run", "server URL", "build", "version", "model"], servers))

    parts.append("#### Commands")
    parts += _commands(c, manifest, names) or ["No command recorded."]
    return "\n\n".join(parts) + "\n"


def write(root: Path) -> Path:
    """Write ``root/comparison.md``; return its path."""
    path = Path(root) / MARKDOWN
    atomic_write_text(path, printable(render(root)))  # no control character reaches a pasted review
    return path


def render_sweep(s: SweepSummary) -> str:
    """The markdown of a sweep: every comparison's Δ, interval, p before and after the sweep's adjustment, KLD
    and verdict, each job's directory and overrides, the sweep's cost."""
    sim = "[SIMULATED] " if s.simulated else ""
    parts = [f"### {sim}abh sweep" + (f" of {cell(s.experiment)}" if s.experiment else "")
             + f": {len(s.comparisons)} comparison(s)", f"> {cell(words.sweep_sentence(s))}"]
    kld = any(r.divergence for r in s.comparisons)
    rows = [[r.label or r.job, words.pp(r.delta), words.ci_pp(r.delta_ci), words.p_bound(r.p, r.p_value_floor),
             words.p_bound(r.p_adjusted, r.p_value_floor, raw=r.p)]
            + ([report_divergence.kld_cell(r)] if kld else [])
            + [words.verdict_label(r.verdict) + (f" (unadjusted: {words.verdict_label(r.verdict_unadjusted)})"
                                                 if (r.verdict_unadjusted or r.verdict) != r.verdict else ""),
               f"`{r.job}`"] for r in s.comparisons]
    header = ["comparison", "Δ (B − A)", "CI (1 − α)", "p", f"p ({s.correction})"] + (["KLD (A/A)"] if kld else [])
    parts.append(table([*header, "verdict", "job"], rows,
                       ["l", "r", "r", "r", "r"] + (["r"] if kld else []) + ["l", "l"]))
    notes = [f"p adjusted across {len(s.comparisons)} comparisons by {s.correction}."]
    if kld:
        notes.append("KLD: mean nats/token A‖B, in brackets the A/A floor's; * = diverged beyond the floor, its p "
                     f"adjusted across the jobs by {s.correction} as accuracy's.")
    if s.cost:
        notes.append(f"**Cost:** {cell(cost.cost_line(s.cost))}")
    if s.missing:
        notes.append(f"{len(s.missing)} job(s) produced no comparison (failed or interrupted; counted with p = 1): "
                     f"{', '.join(s.missing)}.")
    parts.append("  \n".join(notes))
    jobs = [[f"`{r.job}`", cell(" ".join(r.overrides)) or "—"] for r in s.comparisons]
    parts.append("#### Jobs\n\n" + table(["directory", "overrides"], jobs))
    return "\n\n".join(parts) + "\n"


def write_sweep(root: Path) -> Path:
    """Write ``root/comparison.md`` of a sweep directory from its sweep_summary.json; return its path."""
    path = Path(root) / MARKDOWN
    atomic_write_text(path, render_sweep(schema.load_sweep_summary(Path(root) / schema.SWEEP_FILE)))
    return path
