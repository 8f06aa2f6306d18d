"""Render report.html for a run / comparison directory and for a sweep directory.

jinja2 with autoescape on: every value that reaches the page is escaped, model outputs and question text
included. Only the plots (SVG generated here from numbers) and the page's own filter script are inserted
as markup. A Content-Security-Policy meta tag forbids any network fetch and any script but that one (by
hash), so even a rendering mistake could not run injected script or phone home.
"""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from harness import __version__
from harness.report import data, plots, words
from harness.store import atomic_write_text

REPORT = "report.html"
TEMPLATES = Path(__file__).parent / "templates"

#: The page's only script: filter the flipped-question table by text and by category.
FILTER_JS = """(function () {
  var q = document.getElementById('flip-q'), s = document.getElementById('flip-cat');
  var n = document.getElementById('flip-n');
  if (!q || !s || !n) { return; }
  var rows = Array.prototype.slice.call(document.querySelectorAll('#flips tbody tr.flip'));
  function apply() {
    var t = q.value.toLowerCase(), c = s.value, k = 0;
    rows.forEach(function (r) {
      var ok = (!c || r.getAttribute('data-cat') === c) && (!t || r.textContent.toLowerCase().indexOf(t) >= 0);
      r.hidden = !ok;
      if (ok) { k++; }
    });
    n.textContent = String(k);
  }
  q.addEventListener('input', apply);
  s.addEventListener('change', apply);
  apply();
})();"""


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
    env.globals.update(pct=words.pct, pp=words.pp, ci_pp=words.ci_pp, ci_pct=words.ci_pct, pval=words.pval, p_text=words.p_text,
                       verdict_label=words.verdict_label, colors=plots.VERDICT_COLORS, finite=data.finite)
    return env


def _render(name: str, ctx: dict[str, Any]) -> str:
    return _env().get_template(name).render(**ctx)


# ------------------------------------------------------------------------------------------ comparison
def _names(c: dict[str, Any], manifest: dict[str, Any], runs: dict[str, list[data.Run]]) -> dict[str, str]:
    names: dict[str, str] = {}
    an = c.get("arm_names") if isinstance(c.get("arm_names"), dict) else {}
    marms = manifest.get("arms") if isinstance(manifest.get("arms"), dict) else {}
    cfg_x = (manifest.get("config") or {}).get("experiment") if isinstance(manifest.get("config"), dict) else None
    for role in ("a", "b"):
        name = an.get(role)
        if not name and isinstance(cfg_x, dict) and isinstance(marms.get(cfg_x.get(role)), dict):
            name = marms[cfg_x[role]].get("name")
        if not name:
            name = next((r.meta.get("arm") for r in runs[role] if r.meta.get("arm")), None)
        names[role] = str(name) if name else role.upper()
    return names


def comparison_context(root: Path) -> dict[str, Any]:
    root = Path(root)
    c = data.jread(root / "comparison.json")
    manifest = data.jread(root / "manifest.json")
    run_summary = data.jread(root / "summary.json")
    manifest = manifest if isinstance(manifest, dict) else {}
    run_summary = run_summary if isinstance(run_summary, dict) and run_summary.get("kind") != "abh.eval.summary" else {}
    notes: list[str] = []
    if not isinstance(c, dict):
        status = manifest.get("status")
        c = {"verdict": "not_comparable",
             "verdict_reason": "the run did not produce a comparison (no comparison.json)"
                               + (f"; run status: {data.as_text(status)}" if status else "")}
        notes.append("This run has no comparison.json: it stopped before measuring or comparing. "
                     "What it recorded is shown below.")
    runs = data.load_runs(c, root)
    names = _names(c, manifest, runs)
    for rs in runs.values():
        notes += [r.error for r in rs if r.error]
    engine_kind = ((manifest.get("config") or {}).get("engine") or {}).get("kind") \
        if isinstance(manifest.get("config"), dict) and isinstance(manifest["config"].get("engine"), dict) else None
    simulated = bool(c.get("simulated")) or bool(run_summary.get("simulated")) or engine_kind == "simulated" \
        or any(r.meta.get("simulated") or r.summary.get("simulated") for rs in runs.values() for r in rs)

    arms_c = c.get("arms") if isinstance(c.get("arms"), dict) else {}
    acc_svg = delta_svg = None
    if arms_c.get("a") and arms_c.get("b"):
        acc_svg = Markup(plots.accuracy_svg([
            {**arms_c["a"], "label": f"A: {names['a']}", "color": plots.COLOR_A},
            {**arms_c["b"], "label": f"B: {names['b']}", "color": plots.COLOR_B}]))
        if data.finite(c.get("delta")):
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
    flips, flips_total = data.flipped_questions(c, runs)
    counts = {k: sum(1 for f in flips if f["cat"] == k) for k in ("b", "a", "mixed")}

    verdict = c.get("verdict")
    experiment = manifest.get("experiment") or run_summary.get("experiment")
    title = f"{names['b']} vs {names['a']}" + (f" — {experiment}" if experiment else "")
    ctx = {
        "kind": "run" if manifest else "comparison",
        "title": title, "experiment": experiment,
        "description": ((manifest.get("config") or {}).get("experiment") or {}).get("description")
        if isinstance(manifest.get("config"), dict) and isinstance(manifest["config"].get("experiment"), dict)
        else None,
        "simulated": simulated, "c": c, "names": names, "root": str(root),
        "verdict": {"word": verdict, "label": words.verdict_label(verdict),
                    "color": plots.VERDICT_COLORS.get(verdict or "", "#333333"),
                    "sentence": words.verdict_sentence(c), "details": words.verdict_detail(c) if arms_c else []},
        "arms_c": arms_c, "arm_views": data.arm_views(manifest, names), "diff": data.diff_view(manifest, names),
        "acc_svg": acc_svg, "delta_svg": delta_svg, "run_rows": run_rows, "perf": perf,
        "flips": flips, "flips_total": flips_total, "flip_counts": counts, "max_flips": data.MAX_FLIPS,
        "provenance": data.provenance_rows(manifest, runs, c),
        "config_json": data.as_text(manifest["config"]) if manifest.get("config") is not None else None,
        "notes": notes, "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "version": __version__,
        "script": Markup(FILTER_JS) if flips else None, "csp": _csp(FILTER_JS if flips else None),
    }
    return ctx


def render_comparison(root: Path) -> str:
    return _render("report.html.j2", comparison_context(root))


# ------------------------------------------------------------------------------------------ sweep
def sweep_context(root: Path) -> dict[str, Any]:
    s = data.jread(Path(root) / "sweep_summary.json")
    s = s if isinstance(s, dict) else {}
    rows = [r for r in s.get("comparisons") or [] if isinstance(r, dict)]
    for r in rows:
        d = Path(str(r.get("dir") or ""))
        if not d.is_absolute():
            d = Path(root) / d
        cand = [d / "report.html", Path(root) / str(r.get("job") or "") / "report.html"]
        link = next((p for p in cand if p.exists()), None)
        r["_link"] = (Path(str(r.get("job"))) / "report.html").as_posix() if link is not None and \
            link.parent.parent.resolve() == Path(root).resolve() else None
        r["_color"] = plots.VERDICT_COLORS.get(r.get("verdict") or "", "#333333")
    return {
        "title": f"Sweep: {Path(root).resolve().name}", "simulated": bool(s.get("simulated")) or any(
            r.get("simulated") for r in rows),
        "sentence": words.sweep_sentence(s), "rows": rows, "correction": s.get("correction"),
        "forest_svg": Markup(plots.forest_svg(rows)) if rows else None, "root": str(root),
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "version": __version__, "csp": _csp(None),
    }


def render_sweep(root: Path) -> str:
    return _render("sweep.html.j2", sweep_context(root))


def write(path: Path, html: str) -> Path:
    atomic_write_text(path, html)
    return path
