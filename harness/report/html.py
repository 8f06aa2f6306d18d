"""Render report.html for a run / comparison directory and for a sweep directory.

jinja2 with autoescape on: every value that reaches the page is escaped, model outputs and question text
included. Only the plots (SVG generated here from numbers) and the page's own filter script are inserted
as markup. A Content-Security-Policy meta tag forbids any network fetch and any script but that one (by
hash), so even a rendering mistake could not run injected script or phone home.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import time
from pathlib import Path
from typing import TypedDict

import jinja2
from markupsafe import Markup

from harness import __version__
from harness.report import cost_section as cost
from harness.report import data, identity_section, packed, plots, words
from harness.report import divergence_section as report_divergence
from harness.report import routing_section as report_routing
from harness.report.cost_section import CostRow, LookRow, SequentialFacts
from harness.report.divergence_section import DivergenceView
from harness.report.headline import headline, scope
from harness.report.routing_section import RoutingView
from harness.report.views import ArmView, DiffView, FlipRow, KvRow, QuestionRow, RunRow
from harness.results import schema
from harness.results.fileio import atomic_write_text
from harness.results.records import JSON
from harness.results.schema import Arms, Comparison, SweepRow
from harness.serving.untrusted import printable

TEMPLATES = Path(__file__).parent / "templates"

#: The page's only script (templates/report.js): copy buttons, sortable tables, the flipped-question filter and
#: the question browser; allowed by its hash in the page's Content-Security-Policy, nothing else runs.
PAGE_JS = (TEMPLATES / "report.js").read_text(encoding="utf-8")


# ------------------------------------------------------------------------------------------ what the pages read
class VerdictView(TypedDict):
    """The verdict atop the page: its word, label and colour, the headline (after the badge: ``rest``) and the
    supporting facts."""

    word: str
    label: str
    color: str
    #: the headline's first words before the badge ("[instances only]"; "" when about the configurations)
    scope: str
    rest: str
    headline: str
    #: the plain facts under the verdict
    details: list[str]
    #: what a statistician needs: the "How this was decided" section
    how: list[str]


class PerfRow(TypedDict):
    """An arm's batch latency, output throughput and per-request p50, each the mean over its runs (None: no run
    recorded it)."""

    label: str
    runs: int
    latency_s: float | None
    throughput: float | None
    p50: float | None


class ReproduceRow(TypedDict):
    """A command of the Reproduce box: the id its copy button targets, its label and the command."""

    id: str
    label: str
    text: str | None


class DivergencePanel(DivergenceView):
    """The divergence section as the page shows it (``svg`` as markup), with the reference arm's label and the
    compared arm's."""

    ref_label: str
    cmp_label: str


class IdentityView(TypedDict):
    """The no-op proof's section of report.html (``identity``)."""

    reason: str
    detail: list[str]
    header: list[str]
    #: (title, rows, how many there are in all)
    tables: list[tuple[str, list[list[str]], int]]


class ComparisonContext(TypedDict):
    """What report.html of a run or comparison directory reads (templates/report.html.j2)."""

    kind: str
    servers: bool
    title: str
    experiment: str | None
    description: JSON
    simulated: bool
    c: Comparison | None
    names: dict[str, str]
    root: str
    verdict: VerdictView
    arms_c: Arms | None
    arm_views: list[ArmView]
    diff: DiffView | None
    identity: IdentityView | None
    acc_svg: Markup | None
    delta_svg: Markup | None
    div: DivergencePanel | None
    routing: RoutingView | None
    run_rows: list[RunRow]
    perf: list[PerfRow]
    flips: list[FlipRow]
    #: a large run's flipped rows packed (:func:`harness.report.packed.pack_flips`), drawn by the page's script
    #: instead of the template; None: the template draws them
    flips_data: Markup | None
    flips_total: int
    flip_counts: dict[str, int]
    max_flips: int
    cost_rows: list[CostRow]
    cost_estimated: list[str]
    seq: SequentialFacts | None
    look_rows: list[LookRow]
    provenance: list[KvRow]
    config_json: str | None
    notes: list[str]
    generated: str
    version: str
    questions_json: Markup | None
    #: None: plain JSON; else how the block is packed (harness.report.packed)
    questions_encoding: str | None
    outcomes_json: Markup
    outcomes: dict[str, str]
    n_questions: int
    reproduce: list[ReproduceRow]
    script: Markup
    csp: str


class SweepRowView(TypedDict):
    """A comparison of the sweep's table: its row of sweep_summary.json, the link to its report.html (None: no
    report below the sweep's directory), its verdict's colour and its KLD cell."""

    row: SweepRow
    link: str | None
    color: str
    kld: str


class SweepContext(TypedDict):
    """What report.html of a sweep directory reads (templates/sweep.html.j2)."""

    title: str
    experiment: str | None
    simulated: bool
    sentence: str
    rows: list[SweepRowView]
    correction: str
    forest_svg: Markup | None
    root: str
    kld: bool
    cost_rows: list[CostRow]
    generated: str
    version: str
    csp: str


def _json_for_script(value: list[QuestionRow] | dict[str, str]) -> Markup:
    """``value`` as JSON safe inside ``<script type="application/json">`` (no ``</script>`` can end it early)."""
    return _script_safe(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _script_safe(text: str) -> Markup:
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def _questions_block(questions: list[QuestionRow]) -> tuple[Markup | None, str | None]:
    """The question browser's data: plain JSON, or packed when large (:mod:`harness.report.packed`)."""
    if not questions:
        return None, None
    text, encoding = packed.pack(questions)
    return _script_safe(text), encoding


def _flips_block(flips: list[FlipRow]) -> Markup | None:
    """The flipped rows packed for the page's script when too many for the template (base64: nothing to escape)."""
    text = packed.pack_flips(flips)
    return None if text is None else Markup(text)


def _csp(script: str | None) -> str:
    src = "'none'"
    if script:
        digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
        src = f"'sha256-{digest}'"
    return (f"default-src 'none'; script-src {src}; style-src 'unsafe-inline'; img-src data:; "
            "font-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")


@functools.cache  # one per process: its templates compile once, not once per report (a test process renders many)
def _env() -> jinja2.Environment:
    # optimized=False: jinja's constant folding costs a fifth of compiling report.html.j2 (each command that
    # writes a report pays it) and renders the same page
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, optimized=False,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(pct=words.pct, pp=words.pp, ci_pp=words.ci_pp, ci_pct=words.ci_pct, pval=words.pval, effect_pp=words.effect_pp,
                       p_text=words.p_text, mass=words.mass, questions_line=words.questions_line, p_bound=words.p_bound, verdict_label=words.verdict_label,
                       colors=plots.VERDICT_COLORS, finite=data.finite)
    return env


def template(name: str) -> jinja2.Template:
    """The page template ``name`` of templates/, with the report's helpers (``pct``, ``pp``, ...) at hand."""
    return _env().get_template(name)


# ------------------------------------------------------------------------------------------ comparison
def comparison_context(root: Path) -> ComparisonContext:
    """What report.html shows. Arm names and "simulated" are the comparison's (comparison.json owns them);
    a run directory adds its manifest (launches, side checks, provenance)."""
    root = Path(root)
    c = data.load_comparison(root)
    manifest = data.load_manifest(root)
    notes: list[str] = []
    if c is None:
        status = manifest.get("status")
        missing_reason = ("the run did not produce a comparison (no comparison.json)"
                          + (f"; run status: {data.as_text(status)}" if status else ""))
        notes.append("This run has no comparison.json: it stopped before measuring or comparing. "
                     "What it recorded is shown below.")
        runs: dict[str, list[data.LoadedEval]] = {"a": [], "b": [], "aa": []}
        names = {"a": "A", "b": "B"}
    else:
        runs = data.load_runs(c, root)
        names = data.arm_names(c)
    for rs in runs.values():
        notes += [r.error for r in rs if r.error]
    simulated = bool(c and c.simulated)

    acc_svg = delta_svg = None
    if c is not None:
        acc_svg = Markup(plots.accuracy_svg([plots.arm_plot(c.arms.a, f"A: {names['a']}", plots.COLOR_A),
                                             plots.arm_plot(c.arms.b, f"B: {names['b']}", plots.COLOR_B)]))
        if data.finite(c.delta):
            delta_svg = Markup(plots.delta_svg(c))

    labels = {"a": f"A: {names['a']}", "b": f"B: {names['b']}", "aa": f"A/A: {names['a']}"}
    run_rows = [r.row(labels[role]) for role in ("a", "b", "aa") for r in runs[role]]
    perf: list[PerfRow] = []
    for role in ("a", "b"):
        rows = [r for r in run_rows if r["role"] == role]
        lat = [r["latency_s"] for r in rows if data.finite(r["latency_s"])]
        thr = [r["throughput"] for r in rows if data.finite(r["throughput"])]
        p50 = [r["p50"] for r in rows if data.finite(r["p50"])]
        perf.append({"label": labels[role], "runs": len(rows), "latency_s": sum(lat) / len(lat) if lat else None,
                     "throughput": sum(thr) / len(thr) if thr else None, "p50": sum(p50) / len(p50) if p50 else None})
    flips, flips_total = data.flipped_questions(c, runs) if c is not None else ([], 0)
    questions = data.all_questions(c, runs) if c is not None else []
    q_json, q_encoding = _questions_block(questions)
    reproduce: list[ReproduceRow] = [{"id": "cmd-abh", "label": "abh command", "text": data.abh_command(c, manifest)}]
    reproduce += [{"id": f"cmd-{v['role']}", "label": f"arm {v['role'].upper()} server ({v['name']})",
                   "text": v["command"]} for v in data.arm_views(manifest, names)]
    reproduce = [r for r in reproduce if r["text"]]
    counts = {k: sum(1 for f in flips if f["cat"] == k) for k in ("b", "a", "mixed")}

    div: DivergencePanel | None = None
    if c is not None and c.divergence is not None:
        sec = report_divergence.section(c.divergence)
        ref = "b" if sec["reference"] == "b" else "a"
        div = {**sec, "svg": Markup(sec["svg"]) if sec["svg"] else None,  # numbers only, drawn here
               "ref_label": labels_of(names)[ref], "cmp_label": labels_of(names)["a" if ref == "b" else "b"]}
    verdict = c.verdict if c is not None else "not_comparable"
    experiment = manifest.get("experiment")
    run_cost = cost.load_cost(root, manifest)
    seq = cost.load_sequential(root, manifest, c)
    title = f"{names['b']} vs {names['a']}" + (f" — {experiment}" if experiment else "")
    ctx: ComparisonContext = {
        "kind": "run" if manifest else "comparison",
        "servers": any(any(v for v in r["server"].values()) for r in run_rows),
        "title": title, "experiment": experiment,
        "description": data.obj(data.obj(manifest.get("config")).get("experiment")).get("description"),
        "simulated": simulated, "c": c, "names": names, "root": str(root),
        "verdict": {"word": verdict, "label": words.verdict_label(verdict),
                    "color": plots.VERDICT_COLORS.get(verdict or "", "#333333"),
                    "scope": scope(c) if c is not None else "",
                    # the headline, its verdict word drawn as the badge (one statement, not two)
                    "rest": headline(c).split(words.verdict_label(verdict), 1)[-1] if c is not None
                    else f": {missing_reason}",
                    "headline": headline(c) if c is not None else f"NOT COMPARABLE: {missing_reason}",
                    "details": words.verdict_facts(c) if c is not None else [],
                    "how": words.how_decided(c) if c is not None else []},
        "arms_c": c.arms if c is not None else None, "arm_views": data.arm_views(manifest, names), "diff": data.diff_view(manifest, names),
        "acc_svg": acc_svg, "delta_svg": delta_svg, "div": div,
        "routing": routing_view(c),
        "identity": identity_view(c), "run_rows": run_rows, "perf": perf,
        "flips": flips, "flips_data": _flips_block(flips), "flips_total": flips_total, "flip_counts": counts,
        "max_flips": data.MAX_FLIPS,
        "cost_rows": cost.cost_rows(run_cost) if run_cost else [],
        "cost_estimated": run_cost.estimated if run_cost else [],
        "seq": cost.sequential_facts(seq) if seq else None, "look_rows": cost.look_rows(seq) if seq else [],
        "provenance": data.provenance_rows(manifest, runs, c),
        "config_json": data.as_text(manifest["config"]) if manifest.get("config") is not None else None,
        "notes": notes, "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "version": __version__,
        "questions_json": q_json, "questions_encoding": q_encoding,
        "outcomes_json": _json_for_script(data.OUTCOMES), "outcomes": data.OUTCOMES, "n_questions": len(questions),
        "reproduce": reproduce,
        "script": Markup(PAGE_JS), "csp": _csp(PAGE_JS),
    }
    return ctx


def routing_view(c: Comparison | None) -> RoutingView | None:
    """The routing section (its plot as markup: numbers only, drawn here)."""
    if c is None or c.routing is None:
        return None
    view = report_routing.section(c.routing)
    return {**view, "svg": Markup(view["svg"]) if view["svg"] else None}


def identity_view(c: Comparison | None) -> IdentityView | None:
    """The no-op proof's section: its reason, detail lines and the tables of the questions whose outputs part."""
    i = None if c is None else c.identity
    if i is None:
        return None
    return {"reason": i.reason, "detail": identity_section.detail(i), "header": identity_section.HEADER,
            "tables": [("A vs B: where the outputs part", identity_section.rows(i.partings), len(i.partings)),
                       ("A vs A/A: where the floor's outputs part", identity_section.rows(i.partings_aa),
                        len(i.partings_aa))]}


def labels_of(names: dict[str, str]) -> dict[str, str]:
    return {"a": f"A · {names['a']}", "b": f"B · {names['b']}"}


def render_comparison(root: Path) -> str:
    return template("report.html.j2").render(**comparison_context(root))


# ------------------------------------------------------------------------------------------ sweep
def sweep_context(root: Path) -> SweepContext:
    s = schema.load_sweep_summary(Path(root) / schema.SWEEP_FILE)
    rows: list[SweepRowView] = []
    for r in s.comparisons:
        d = Path(r.dir)
        if not d.is_absolute():
            d = Path(root) / d
        cand = [d / "report.html", Path(root) / r.job / "report.html"]
        link = next((p for p in cand if p.exists()), None)
        rows.append({"row": r,
                     "link": (Path(r.job) / "report.html").as_posix() if link is not None and
                     link.parent.parent.resolve() == Path(root).resolve() else None,
                     "color": plots.VERDICT_COLORS.get(r.verdict, "#333333"), "kld": report_divergence.kld_cell(r)})
    return {"title": f"Sweep: {s.experiment}" if s.experiment else f"Sweep in {Path(root).resolve().name}",
            "experiment": s.experiment, "simulated": s.simulated, "sentence": words.sweep_sentence(s),
            "rows": rows, "correction": s.correction,
            "forest_svg": Markup(plots.forest_svg(s.comparisons)) if rows else None, "root": str(root),
            "kld": any(r.divergence for r in s.comparisons),
            "cost_rows": cost.cost_rows(s.cost) if s.cost else [],
            "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "version": __version__, "csp": _csp(None)}


def render_sweep(root: Path) -> str:
    return template("sweep.html.j2").render(**sweep_context(root))


def csp() -> str:
    """The Content-Security-Policy of a page without a script (for the other report pages)."""
    return _csp(None)


def write(path: Path, html: str) -> Path:
    atomic_write_text(path, printable(html))  # escaped, not only HTML-escaped: no raw control character
    return path
