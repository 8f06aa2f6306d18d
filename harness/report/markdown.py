"""``comparison.md``: the paste-ready result of a comparison, in GitHub-flavoured markdown.

Written beside ``comparison.json`` by ``abh compare`` (and ``abh report``): the arms' table (accuracy,
invalid answers, request errors), Δ with its interval, the test and p that decided the verdict, the verdict
sentence, the side checks and each arm's source refs (from the run's manifest when there is one; for a
comparison of stored evals, the servers' URL, build and version from eval.json), and the commands.

Everything here reads stored files only. Table cells are escaped (``|``, ``<``, ``>``, newlines), so an arm
name or a check's text cannot break the table or inject markup.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.report import cost_section as cost
from harness.report import data, words
from harness.report import divergence_section as report_divergence
from harness.results import schema
from harness.results.fileio import atomic_write_text
from harness.results.schema import Comparison
from harness.util.cmdline import redact_command

MARKDOWN = "comparison.md"


def cell(v: Any) -> str:
    """A value as one table cell: pipes escaped, markup neutralised, on one line."""
    s = "—" if v is None or v == "" else str(v)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
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


def _count(runs: list[data.Run], key: str) -> tuple[int | None, int | None]:
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


def _arm_rows(c: Comparison, runs: dict[str, list[data.Run]], names: dict[str, str]) -> list[list[str]]:
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
                result = {True: "PASS", False: "FAIL"}.get(ch["passed"], "not run")
                rows.append([view["role"].upper(), ch["name"], when, result, ch["expected"], ch["found"]])
    return rows


def _source_refs_run(manifest: Mapping[str, Any], names: dict[str, str]) -> list[list[str]]:
    rows = []
    arms: dict[str, Any] = manifest["arms"] if isinstance(manifest.get("arms"), dict) else {}
    for view in data.arm_views(manifest, names):
        arm = arms.get(view["key"]) or {}
        launch: dict[str, Any] = arm["launch"] if isinstance(arm.get("launch"), dict) else {}
        src: dict[str, Any] = launch["source"] if isinstance(launch.get("source"), dict) else {}
        patches = src.get("patches") or ([src["patch"]] if src.get("patch") else [])
        patch_txt = ", ".join(str(p.get("file", p)) if isinstance(p, dict) else str(p) for p in patches)
        commit = src.get("commit")
        dirty = " (dirty)" if src.get("dirty") else ""
        rows.append([view["role"].upper(), view["name"], src.get("kind") or "", src.get("tree") or src.get("path") or "",
                     src.get("ref") or "", f"{commit}{dirty}" if commit else "", patch_txt])
    return rows


def _servers(runs: dict[str, list[data.Run]]) -> list[list[str]]:
    rows = []
    for role in ("a", "b", "aa"):
        for r in runs[role]:
            s = r.server()
            rows.append([{"aa": "A/A"}.get(role, role.upper()), f"r{r.repeat}", s["url"] or "", s["build"] or "",
                         s["version"] or "", s["model_path"] or ""])
    return rows


def _commands(c: Comparison, manifest: Mapping[str, Any], names: dict[str, str]) -> list[str]:
    out = []
    if c.command:
        out.append(_fence(" ".join(shlex.quote(t) for t in redact_command(c.command))))
    for s in [] if out else manifest.get("sessions") or []:  # abh ab records its command in both
        if isinstance(s, dict) and s.get("argv"):
            out.append(_fence(" ".join(shlex.quote(t) for t in redact_command(_abh_run_argv(s["argv"])))))
            break  # the first session's command; resumes repeat it
    for view in data.arm_views(manifest, names):
        if view["command"]:
            out.append(f"<details><summary>server command of arm {view['role'].upper()} "
                       f"({cell(view['name'])})</summary>\n\n{_fence(view['command'])}\n\n</details>")
    return out


def _abh_run_argv(recorded: Sequence[Any]) -> list[str]:
    """The ``abh run`` command line of a session (``abh run`` records its argv as ``["abh run", ...]``)."""
    argv = [str(a) for a in recorded]
    if argv[0] == "abh run":
        return ["abh", "run", *argv[1:]]
    if Path(argv[0]).name == "abh" and argv[1:2] == ["run"]:
        return ["abh", "run", *argv[2:]]
    return argv


def render(root: Path) -> str:
    """The markdown of the comparison (or run) directory ``root``."""
    root = Path(root)
    c = data.load_comparison(root)
    if c is None:
        raise FileNotFoundError(f"{root} holds no {schema.COMPARISON_FILE}")
    manifest: dict[str, Any] = dict(data.load_manifest(root))
    names = data.arm_names(c)
    runs = data.load_runs(c, root)
    level = f"{100 * (1 - c.alpha):g} %"
    sim = "[SIMULATED] " if c.simulated else ""
    experiment = manifest.get("experiment")
    parts = [f"### {sim}abh: {cell(names['b'])} (B) vs {cell(names['a'])} (A)"
             + (f" — {cell(experiment)}" if experiment else "")
             + f": **{words.verdict_label(c.verdict)}**"]
    if c.simulated:
        parts.append("> **SIMULATED**: these numbers come from the harness's simulated engine, not a real model "
                     "server.")
    parts.append(f"> {cell(words.verdict_sentence(c))}")
    div = c.divergence
    if div is not None:
        parts.append(f"> {cell(report_divergence.combined_sentence(c))}")
    parts.append(table(["arm", "name", "accuracy", f"Wilson {level}", "runs", "per repeat", "invalid",
                        "request errors"], _arm_rows(c, runs, names), ["l", "l", "r", "r", "r", "l", "r", "r"]))
    test = (c.test or "").replace("_", " ")
    parts.append(table(["Δ (B − A)", f"{level} CI", "interval", "test (decided the verdict)", "p", "verdict"],
                       [[words.pp(c.delta), words.ci_pp(c.delta_ci), c.delta_ci_method, test,
                         words.p_text(c)[2:] if words.p_text(c).startswith("p <") else words.pval(c.p),
                         words.verdict_label(c.verdict)]], ["r", "r", "l", "l", "r", "l"]))
    facts = [f"**Verdict:** {cell(c.verdict_reason)}"]
    facts.append(f"**Questions:** {c.n} paired of {c.n_total} ({c.dropped_errors} without an answer from both "
                 "arms); "
                 f"MDE at 80 % power {words.pp(c.mde, signed=False)}"
                 + (f"; margin ±{words.pp(c.margin, signed=False)}" if c.margin is not None else ""))
    lv = c.launch_variance
    if lv is not None and lv.sd is not None:
        facts.append(f"**Launch variance:** sd {words.pp(lv.sd, signed=False)} per launch; {cell(lv.source)}")
    gate = c.errors.gate
    if gate is not None and gate.action != "none":
        facts.append(f"**Request errors:** {gate.action}: {cell(gate.reason)}")
    if div is not None:
        facts.append(f"**Divergence: {report_divergence.verdict_label(div.verdict)}** — "
                     f"{cell(report_divergence.sentence(div))}")
    seq = cost.load_sequential(root, manifest, c)
    if seq:
        facts.append(f"**Sequential:** {cell(cost.sequential_line(seq))}")
    run_cost = cost.load_cost(root, manifest)
    if run_cost:
        facts.append(f"**Cost:** {cell(cost.cost_line(run_cost))}")
    parts.append("  \n".join(facts))

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
    atomic_write_text(path, render(root))
    return path
