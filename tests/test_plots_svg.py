"""The comparison's plots are SVG written directly (no matplotlib): well-formed, sized to the page, every label
escaped, the numbers they show, the marker the page scrolls to; a report of a comparison imports no matplotlib."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.report import plots, svg
from harness.report.divergence_section import kld_svg
from harness.results.schema import COMPARISON_FILE, Divergence, Histogram, KldHistogram, load_comparison
from tests.helpers.rundirs import build_run_dir

ROOT = Path(__file__).resolve().parents[1]
NS = "{http://www.w3.org/2000/svg}"


def _parse(s: str) -> ET.Element:
    root = ET.fromstring(s)
    assert root.tag == f"{NS}svg" and root.get("class") == "plot" and root.get("width") is None
    w, h = (float(v) for v in root.get("viewBox", "").split()[2:])
    assert w == svg.WIDTH and 60 < h < 600
    assert not [e for e in root.iter() if e.get("style") is not None]  # nothing the page's CSP has to allow
    return root


def _texts(root: ET.Element) -> list[str]:
    return [e.text or "" for e in root.iter(f"{NS}text")]


def test_the_accuracy_plot_shows_each_arm_its_intervals_and_runs() -> None:
    arm = {"label": "A: <b>base</b> & co", "color": plots.COLOR_A, "accuracy": 0.9284, "wilson": [0.913, 0.941],
           "bootstrap": [0.915, 0.94], "repeats": [0.9265, 0.9303], "bootstrap_launch": [0.913, 0.942]}
    other = {**arm, "label": "B: fix", "color": plots.COLOR_B, "accuracy": 0.9466, "wilson": [0.933, 0.957],
             "repeats": [0.9469], "bootstrap_launch": None}
    s = plots.accuracy_svg([arm, other])  # type: ignore[list-item]
    assert "<b>" not in s and "&lt;b&gt;base&lt;/b&gt; &amp; co" in s  # a label is text, never markup
    texts = _texts(_parse(s))
    assert {"92.84 %", "94.66 %", "A: <b>base</b> & co", "B: fix", "accuracy (%)", "single runs",
            "launch-aware bootstrap (launches, then questions)"} <= set(texts)
    assert {"91", "93", "95"} <= set(texts)  # the axis spans every interval
    rings = [e for e in _parse(s).iter(f"{NS}circle") if e.get("fill") == "white"]
    assert len(rings) == 2 + 1  # arm A's two runs, and the legend's; one run of B is no spread to show


@pytest.mark.parametrize("margin", [None, 0.01, 0.05])
def test_the_delta_plot_marks_the_estimate_its_intervals_and_references(tmp_path: Path,
                                                                         margin: float | None) -> None:
    run = build_run_dir(tmp_path / "run", n=300, repeats=2, aa=True, margin=margin, n_resamples=200)
    c = load_comparison(run / COMPARISON_FILE)
    if margin == 0.05:  # a margin a reader could not tell from the detectable effect: one line, one label
        c = dataclasses.replace(c, mde=0.048)
    assert c.delta is not None and c.mde is not None
    root = _parse(plots.delta_svg(c))
    texts = _texts(root)
    assert [e.get("id") for e in root.iter() if e.get("id")] == ["focus-delta"]  # report.js scrolls to it
    assert f"Δ = {100 * c.delta:+.2f} pp".replace("-", "\u2212") in texts
    assert "paired 95 % CI of Δ" in texts and "0" in texts and "Δ, paired" in texts
    if margin == 0.05:
        assert "margin ±5.00 pp ≈ detectable effect ±4.80 pp" in texts
    elif margin is not None:
        assert "margin ±1.00 pp" in texts and f"detectable effect (80 % power) ±{100 * c.mde:.2f} pp" in texts


def test_the_kld_plot_draws_both_sides_on_a_decade_axis() -> None:
    edges = [10.0 ** (e / 2) for e in range(-16, -3)]
    hist = KldHistogram(edges=edges, token_ab=Histogram(zeros=5, counts=[0, 1, 4, 9, 20, 30, 20, 9, 4, 1, 0, 0]),
                        question_ab=Histogram(zeros=0, counts=[0, 0, 0, 2, 8, 40, 8, 2, 0, 0, 0, 0]),
                        token_aa=Histogram(zeros=0, counts=[0, 2, 5, 9, 22, 28, 19, 9, 4, 1, 0, 0]))
    div = Divergence(verdict="indistinguishable", verdict_reason="", kld_mean=2e-5, kld_mean_aa=1.9e-5,
                     kld_histogram=hist)
    s = kld_svg(div)
    assert s is not None
    root = _parse(s)
    texts = _texts(root)
    assert {"10⁻⁷", "10⁻⁵", "share (%)", "A‖A′ (floor)", "KLD per token (nats); dashed: means"} <= set(texts)
    assert "A‖B, 5 % exactly 0" in texts  # zeros have no log: said in the legend
    # A‖B filled and outlined in both panels, A/A outlined where it has a histogram (per token only here)
    assert len([e for e in root.iter(f"{NS}path")]) == 2 + 2 + 1
    assert kld_svg(Divergence(verdict="not_measured", verdict_reason="")) is None


def test_ticks_are_round_and_inside_the_axis() -> None:
    assert [v for v, _ in svg.linear_ticks(90.8, 96.3)] == [91, 92, 93, 94, 95, 96]
    assert [t for _, t in svg.linear_ticks(-4.3, 4.3)][:3] == ["−4", "−3", "−2"]
    assert [t for _, t in svg.linear_ticks(0, 0.5)][-2:] == ["0.45", "0.50"]
    assert [t for _, t in svg.decade_ticks(3e-9, 2e-2)] == ["10⁻⁸", "10⁻⁷", "10⁻⁶", "10⁻⁵", "10⁻⁴", "10⁻³", "10⁻²"]
    assert [t for _, t in svg.decade_ticks(1e-12, 1)][:2] == ["10⁻¹²", "10⁻¹⁰"]
    x = svg.Scale(1e-6, 1e-2, 0, 400, log=True)
    assert (x(1e-6), x(1e-4), x(1e-2)) == (0, 200, 400)


def test_a_comparison_report_imports_no_matplotlib(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=60, repeats=2, aa=True, n_resamples=200)
    code = ("import sys; from harness.report import write_report; write_report(sys.argv[1]); "
            "print('matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, check=True, cwd=ROOT)
    assert r.stdout.strip() == "False", r.stderr
    html = (root / "report.html").read_text()
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg"') >= 2 and 'id="focus-delta"' in html


def test_the_routing_plot_draws_each_layer_and_breaks_the_floor_where_it_was_not_measured() -> None:
    from harness.report.routing_section import layer_svg
    from harness.results.routing_record import Routing, RoutingLayer

    def layer(i: int, aa: bool) -> RoutingLayer:
        return RoutingLayer(layer=i, rows=100, identical=0.8 + 0.01 * i, identical_aa=0.99 if aa else None,
                            jaccard=None, jaccard_aa=None, moved=0.2 + 0.1 * i, moved_aa=0.01 if aa else None,
                            load_shift=None)

    r = Routing(verdict="diverged", verdict_reason="", layers=[layer(i, i != 4) for i in range(1, 9)])
    s = layer_svg(r)
    assert s is not None
    root = _parse(s)
    texts = _texts(root)
    assert {"MoE layer", "identical expert sets (% of tokens)", "ids moved per token", "B vs A", "A/A floor"} <= set(texts)
    paths = list(root.iter(f"{NS}path"))
    assert len([p for p in paths if p.get("stroke-dasharray")]) == 2 * 2  # the floor's line broken at layer 4
    assert len(list(root.iter(f"{NS}circle"))) == 2 * 8  # a dot per layer in each panel
    assert layer_svg(Routing(verdict="not_measured", verdict_reason="")) is None


def test_the_forest_plot_draws_each_comparison_coloured_by_its_verdict_without_matplotlib() -> None:
    from harness.results.schema import SweepRow

    rows = [SweepRow(job="job0", dir="job0", label="flip=<0.02> & $x$", verdict="regressed", delta=-0.031,
                     delta_ci=[-0.045, -0.017], mde=0.012),
            SweepRow(job="job1", dir="job1", label="flip=0", verdict="inconclusive", delta=0.002,
                     delta_ci=[-0.009, 0.013], mde=0.012),
            SweepRow(job="job2", dir="job2", label="job2", missing=True)]
    code = ("import sys; from harness.report import plots; from tests.test_plots_svg import _forest_rows; "
            "plots.forest_svg(_forest_rows()); print('matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert r.stdout.strip() == "False", r.stderr
    s = plots.forest_svg(rows)
    root = _parse(s)
    texts = _texts(root)
    assert "flip=<0.02> & $x$" in texts and "&lt;0.02&gt; &amp; $x$" in s  # the label as text, escaped
    assert {"regressed", "inconclusive", "±detectable effect", "−4", "0"} <= set(texts)
    dots = [e for e in root.iter(f"{NS}circle") if e.get("stroke") == "white"]
    assert [d.get("fill") for d in dots] == [plots.VERDICT_COLORS["regressed"], plots.VERDICT_COLORS["inconclusive"]]
    x = [float(d.get("cx", "nan")) for d in dots]
    assert x[0] < x[1]  # Δ −3.1 pp left of +0.2 pp
    assert plots.forest_svg([]).startswith("<svg")  # a sweep with no comparison still draws its axis


def _forest_rows() -> list:
    from harness.results.schema import SweepRow

    return [SweepRow(job="job0", dir="job0", label="x", verdict="improved", delta=0.01, delta_ci=[0.0, 0.02])]
