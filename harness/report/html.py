"""Render report.html for a run / comparison directory and for a sweep directory.

jinja2 with autoescape on: every value that reaches the page is escaped, model outputs and question text
included. Only the plots (SVG generated here from numbers) and the page's own filter script are inserted
as markup. A Content-Security-Policy meta tag forbids any network fetch and any script but that one (by
hash), so even a rendering mistake could not run injected script or phone home.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from harness import __version__
from harness.report import cost_section as cost
from harness.report import data, plots, words
from harness.report import divergence_section as report_divergence
from harness.report.headline import headline
from harness.results import schema
from harness.results.fileio import atomic_write_text
from harness.results.records import to_doc
from harness.serving.untrusted import printable

TEMPLATES = Path(__file__).parent / "templates"

#: The page's only script (templates/report.js): copy buttons, sortable tables, the flipped-question filter and
#: the question browser; allowed by its hash in the page's Content-Security-Policy, nothing else runs.
PAGE_JS = (TEMPLATES / "report.js").read_text(encoding="utf-8")


def _json_for_script(value: Any) -> Markup:
    """``value`` as JSON safe inside ``<script type="application/json">`` (no ``</script>`` can end it early)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _csp(script: str | None) -> str:
    src = "'none'"
    if script:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        src = f"'sha256-{digest}'"
    return (f"default-src 'none'; script-src {src}; style-src 'unsafe-inline'; img-src data:; "
            "font-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(pct=words.pct, pp=words.pp, ci_pp=words.ci_pp, ci_pct=words.ci_pct, pval=words.pval, effect_pp=words.effect_pp,
                       p_text=words.p_text, p_bound=words.p_bound, verdict_label=words.verdict_label,
                       colors=plots.VERDICT_COLORS, finite=data.finite)
    return env


def _render(name: str, ctx: dict[str, Any]) -> str:
    return _env().get_template(name).render(**ctx)


# ------------------------------------------------------------------------------------------ comparison
def comparison_context(root: Path) -> dict[str, Any]:
    """What report.html shows. Arm names and "simulated" are the comparison's (comparison.json owns them);
    a run directory adds its manifest (launches, side checks, provenance)."""
    root = Path(root)
    c = data.load_comparison(root)
    manifest: dict[str, Any] = dict(data.load_manifest(root))
    notes: list[str] = []
    if c is None:
        status = manifest.get("status")
        missing_reason = ("the run did not produce a comparison (no comparison.json)"
                          + (f"; run status: {data.as_text(status)}" if status else ""))
        notes.append("This run has no comparison.json: it stopped before measuring or comparing. "
                     "What it recorded is shown below.")
        runs: dict[str, list[data.Run]] = {"a": [], "b": [], "aa": []}
        names = {"a": "A", "b": "B"}
    else:
        runs = data.load_runs(c, root)
        names = data.arm_names(c)
    for rs in runs.values():
        notes += [r.error for r in rs if r.error]
    simulated = bool(c and c.simulated)

    acc_svg = delta_svg = None
    if c is not None:
        acc_svg = Markup(plots.accuracy_svg([
            {**to_doc(c.arms.a), "label": f"A: {names['a']}", "color": plots.COLOR_A},
            {**to_doc(c.arms.b), "label": f"B: {names['b']}", "color": plots.COLOR_B}]))
        if data.finite(c.delta):
            delta_svg = Markup(plots.delta_svg(c))

    labels = {"a": f"A: {names['a']}", "b": f"B: {names['b']}", "aa": f"A/A: {names['a']}"}
    run_rows = [r.row(labels[role]) for role in ("a", "b", "aa") for r in runs[role]]
    perf = []
    for role in ("a", "b"):
        rows = [r for r in run_rows if r["role"] == role]
        lat = [r["latency_s"] for r in rows if data.finite(r["latency_s"])]
        thr = [r["throughput"] for r in rows if data.finite(r["throughput"])]
        p50 = [r["p50"] for r in rows if data.finite(r["p50"])]
        perf.append({"label": labels[role], "runs": len(rows), "latency_s": sum(lat) / len(lat) if lat else None,
                     "throughput": sum(thr) / len(thr) if thr else None, "p50": sum(p50) / len(p50) if p50 else None})
    flips, flips_total = data.flipped_questions(c, runs) if c is not None else ([], 0)
    questions = data.all_questions(c, runs) if c is not None else []
    reproduce = [{"id": "cmd-abh", "label": "abh command", "text": data.abh_command(c, manifest)}]
    reproduce += [{"id": f"cmd-{v['role']}", "label": f"arm {v['role'].upper()} server ({v['name']})",
                   "text": v["command"]} for v in data.arm_views(manifest, names)]
    reproduce = [r for r in reproduce if r["text"]]
    counts = {k: sum(1 for f in flips if f["cat"] == k) for k in ("b", "a", "mixed")}

    div = None
    if c is not None and c.divergence is not None:
        div = report_divergence.section(c.divergence)
        div["svg"] = Markup(div["svg"]) if div["svg"] else None  # numbers only, drawn here
        ref = "b" if div["reference"] == "b" else "a"
        div["ref_label"] = labels_of(names)[ref]
        div["cmp_label"] = labels_of(names)["a" if ref == "b" else "b"]
    verdict = c.verdict if c is not None else "not_comparable"
    experiment = manifest.get("experiment")
    run_cost = cost.load_cost(root, manifest)
    seq = cost.load_sequential(root, manifest, c)
    title = f"{names['b']} vs {names['a']}" + (f" — {experiment}" if experiment else "")
    ctx = {
        "kind": "run" if manifest else "comparison",
        "servers": any(any(v for v in r["server"].values()) for r in run_rows),
        "title": title, "experiment": experiment,
        "description": ((manifest.get("config") or {}).get("experiment") or {}).get("description")
        if isinstance(manifest.get("config"), dict) and isinstance(manifest["config"].get("experiment"), dict)
        else None,
        "simulated": simulated, "c": c, "names": names, "root": str(root),
        "verdict": {"word": verdict, "label": words.verdict_label(verdict),
                    "color": plots.VERDICT_COLORS.get(verdict or "", "#333333"),
                    # the headline, its verdict word drawn as the badge (one statement, not two)
                    "rest": headline(c).split(words.verdict_label(verdict), 1)[-1] if c is not None
                    else f": {missing_reason}",
                    "headline": headline(c) if c is not None else f"NOT COMPARABLE: {missing_reason}",
                    "details": words.verdict_detail(c) if c is not None else []},
        "arms_c": c.arms if c is not None else None, "arm_views": data.arm_views(manifest, names), "diff": data.diff_view(manifest, names),
        "acc_svg": acc_svg, "delta_svg": delta_svg, "div": div, "run_rows": run_rows, "perf": perf,
        "flips": flips, "flips_total": flips_total, "flip_counts": counts, "max_flips": data.MAX_FLIPS,
        "cost_rows": cost.cost_rows(run_cost) if run_cost else [],
        "cost_estimated": run_cost.estimated if run_cost else [],
        "seq": cost.sequential_facts(seq) if seq else None, "look_rows": cost.look_rows(seq) if seq else [],
        "provenance": data.provenance_rows(manifest, runs, c),
        "config_json": data.as_text(manifest["config"]) if manifest.get("config") is not None else None,
        "notes": notes, "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "version": __version__,
        "questions_json": _json_for_script(questions) if questions else None,
        "outcomes_json": _json_for_script(data.OUTCOMES), "outcomes": data.OUTCOMES, "n_questions": len(questions),
        "reproduce": reproduce, "toc": [],
        "script": Markup(PAGE_JS), "csp": _csp(PAGE_JS),
    }
    return ctx


def labels_of(names: dict[str, str]) -> dict[str, str]:
    return {"a": f"A · {names['a']}", "b": f"B · {names['b']}"}


def render_comparison(root: Path) -> str:
    return _render("report.html.j2", comparison_context(root))


# ------------------------------------------------------------------------------------------ sweep
def sweep_context(root: Path) -> dict[str, Any]:
    s = schema.load_sweep_summary(Path(root) / schema.SWEEP_FILE)
    rows: list[dict[str, Any]] = []
    for r in s.comparisons:
        d = Path(r.dir)
        if not d.is_absolute():
            d = Path(root) / d
        cand = [d / "report.html", Path(root) / r.job / "report.html"]
        link = next((p for p in cand if p.exists()), None)
        rows.append({**to_doc(r),
                     "_link": (Path(r.job) / "report.html").as_posix() if link is not None and
                     link.parent.parent.resolve() == Path(root).resolve() else None,
                     "_color": plots.VERDICT_COLORS.get(r.verdict, "#333333"), "_kld": report_divergence.kld_cell(r)})
    return {
        "title": f"Sweep: {s.experiment}" if s.experiment else f"Sweep in {Path(root).resolve().name}",
        "experiment": s.experiment, "simulated": s.simulated,
        "sentence": words.sweep_sentence(s), "rows": rows, "correction": s.correction,
        "forest_svg": Markup(plots.forest_svg(rows)) if rows else None, "root": str(root),
        "kld": any(r.divergence for r in s.comparisons),
        "cost_rows": cost.cost_rows(s.cost) if s.cost else [],
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "version": __version__, "csp": _csp(None),
    }


def render_sweep(root: Path) -> str:
    return _render("sweep.html.j2", sweep_context(root))


def csp() -> str:
    """The Content-Security-Policy of a page without a script (for the other report pages)."""
    return _csp(None)


def render_template(name: str, ctx: dict[str, Any]) -> str:
    return _render(name, ctx)


def write(path: Path, html: str) -> Path:
    atomic_write_text(path, printable(html))  # escaped, not only HTML-escaped: no raw control character
    return path
