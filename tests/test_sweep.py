"""Sweep summary: p adjusted across the sweep, verdicts that survive the adjustment, labels of swept keys."""

from __future__ import annotations

import pytest
from helpers.docs import comparison, doc

from harness.analysis.sweep import summarize_sweep, swept_labels
from harness.report.sweep_text import format_sweep
from harness.results.schema import Comparison, write_comparison


def _comparison(p: float, verdict: str, delta: float, **over) -> Comparison:
    return comparison(arms={"b": {"accuracy": 0.9 + delta}}, n=1319, delta=delta, delta_ci=[delta - 0.01, delta + 0.01],
                      p=p, test="paired sign-flip test", mde=0.01, verdict=verdict, alpha=0.05, simulated=True, **over)


def test_holm_adjusted_verdicts_and_labels(tmp_path):
    jobs = {"job0_x=1,n=100": (0.01, "improved", 0.02), "job1_x=2,n=100": (0.04, "regressed", -0.02),
            "job2_x=3,n=100": (0.5, "inconclusive", 0.0)}
    for job, (p, v, d) in jobs.items():
        write_comparison(tmp_path / job / "comparison.json", _comparison(p, v, d))
    s_rec = summarize_sweep(tmp_path, "holm")
    s = doc(s_rec)
    rows = {r["label"]: r for r in s["comparisons"]}
    assert set(rows) == {"x=1", "x=2", "x=3"}
    assert rows["x=1"]["p_adjusted"] == pytest.approx(0.03) and rows["x=1"]["verdict"] == "improved"
    assert rows["x=2"]["p_adjusted"] == pytest.approx(0.08) and rows["x=2"]["verdict"] == "inconclusive"
    assert rows["x=2"]["verdict_unadjusted"] == "regressed"
    assert (tmp_path / "sweep_summary.json").exists()
    text = format_sweep(s_rec)
    assert "inconclusive (unadjusted: regressed)" in text and "SIMULATED" in text
    bh_rec = summarize_sweep(tmp_path, "bh")
    bh = doc(bh_rec)
    assert {r["label"]: r["p_adjusted"] for r in bh["comparisons"]}["x=2"] == pytest.approx(0.06)


def test_swept_labels_keep_only_what_varies():
    assert swept_labels([["a=1", "b=2"], ["a=1", "b=3"]]) == ["b=2", "b=3"]
    assert swept_labels([["a=1"]]) == ["a=1"]


def test_a_job_without_comparison_still_counts_in_the_family(tmp_path):
    write_comparison(tmp_path / "job0_x=1" / "comparison.json", _comparison(0.02, "improved", 0.02))
    (tmp_path / "job1_x=2").mkdir()  # failed or interrupted: no comparison.json
    s_rec = summarize_sweep(tmp_path, "holm")
    s = doc(s_rec)
    rows = {r["label"]: r for r in s["comparisons"]}
    assert s["missing"] == ["job1_x=2"] and rows["x=2"]["verdict"] == "not_comparable"
    assert rows["x=1"]["p_adjusted"] == pytest.approx(0.04)  # Holm over 2, not 1
    assert "1 job(s) produced no comparison" in format_sweep(s_rec)
    from harness.report import write_sweep_report

    assert write_sweep_report(tmp_path).exists()


def test_floored_p_reads_as_a_bound_and_the_sweep_is_titled_by_its_experiment(tmp_path):
    from harness.report import write_sweep_report
    from harness.results import schema

    floor = 1 / 10001  # a permutation test on 10000 permutations: p is at most 1/R
    at_floor = _comparison(floor, "improved", 0.03, p_floor=floor)
    write_comparison(tmp_path / "job0_x=1" / "comparison.json", at_floor)
    write_comparison(tmp_path / "job1_x=2" / "comparison.json", _comparison(0.2, "inconclusive", 0.0))
    for job in ("job0_x=1", "job1_x=2"):
        schema.write_manifest(tmp_path / job / "manifest.json", {"experiment": "shared-slot-fix"})
    s_rec = summarize_sweep(tmp_path, "holm")
    s = doc(s_rec)
    assert s["experiment"] == "shared-slot-fix"
    assert schema.load_sweep_summary(tmp_path / "sweep_summary.json").experiment == "shared-slot-fix"
    text = format_sweep(s_rec)
    row = next(line for line in text.splitlines() if line.startswith("x=1"))
    assert "< 0.0001" in row and "≤ 0.0002" in row  # Holm: 2 x the bound is a bound
    assert "sweep of shared-slot-fix" in text
    html = write_sweep_report(tmp_path).read_text()
    assert "<h1>Sweep: shared-slot-fix</h1>" in html and tmp_path.name not in html.split("<h1>")[1].split("</h1>")[0]
    assert "&lt; 0.0001" in html and ">0.0001<" not in html
    # named explicitly, it wins
    assert summarize_sweep(tmp_path, "holm", experiment="other").experiment == "other"


def test_a_comparison_of_unknown_version_is_refused_not_misread(tmp_path):
    from harness.results import schema
    from harness.results.fileio import atomic_write_json, read_json

    write_comparison(tmp_path / "job0_x=1" / "comparison.json", _comparison(0.02, "improved", 0.02))
    doc = read_json(tmp_path / "job0_x=1" / "comparison.json")
    atomic_write_json(tmp_path / "job0_x=1" / "comparison.json", {**doc, "schema_version": 5})
    with pytest.raises(schema.SchemaError, match="schema_version 5"):
        summarize_sweep(tmp_path, "holm")


def test_short_job_directories_are_mapped_to_the_overrides_their_manifest_recorded(tmp_path):
    from harness.report import write_markdown
    from harness.results import schema

    for k, value in enumerate(("0.02", "0.04")):
        job = tmp_path / f"job{k}"
        write_comparison(job / "comparison.json", _comparison(0.3, "inconclusive", 0.0))
        schema.write_manifest(job / "manifest.json", {"experiment": "demo", "sessions": [
            {"argv": ["abh", "run", "task.num_questions=50", f"engine.flip_rate={value}"]}]})
    s = summarize_sweep(tmp_path, "holm")
    assert [(r.job, r.overrides, r.label) for r in s.comparisons] == [
        ("job0", ["task.num_questions=50", "engine.flip_rate=0.02"], "engine.flip_rate=0.02"),
        ("job1", ["task.num_questions=50", "engine.flip_rate=0.04"], "engine.flip_rate=0.04")]
    md = write_markdown(tmp_path).read_text()
    assert "| engine.flip_rate=0.04 |" in md and "| `job1` | task.num_questions=50 engine.flip_rate=0.04 |" in md
    assert "abh sweep of demo: 2 comparison(s)" in md
def test_a_sequential_jobs_stage_wise_p_is_what_the_sweep_adjusts(tmp_path):
    """A sequential run's comparison carries the deciding look's stage-wise p (and its test), not the fixed
    design's: the sweep adjusts that p; a qualified verdict is marked in the table."""
    import numpy as np

    from harness.orchestrate.sequential import Looks, apply_to_comparison
    from harness.stats.group_sequential import SequentialDesign
    from harness.stats.launches import ArmRuns

    rng = np.random.default_rng(1)
    base = rng.random(1000) < 0.8
    fixed = ~base & (rng.random(1000) < 0.15)
    looks = Looks(SequentialDesign(max_repeats=6, min_repeats=2))
    for r in range(2, 7):
        a = ArmRuns(np.vstack([np.where(rng.random(1000) < 0.03, ~base, base) for _ in range(r)]).astype(float),
                    tuple(f"a{k}" for k in range(r)))
        b = ArmRuns(np.vstack([np.where(rng.random(1000) < 0.03, ~(base | fixed), base | fixed) for _ in range(r)])
                    .astype(float), tuple(f"b{k}" for k in range(r)))
        if looks.decide(r, a, b).stop:
            break
    seq = apply_to_comparison(_comparison(1e-9, "improved", 0.02), looks.record())
    assert seq.p == looks.looks[-1].p and seq.p_fixed == 1e-9 and seq.verdict == "improved"
    write_comparison(tmp_path / "job0_x=1" / "comparison.json", seq)
    write_comparison(tmp_path / "job1_x=2" / "comparison.json",
                     _comparison(0.5, "inconclusive", 0.0, qualification="valid only if launches do not shift accuracy"))
    s = summarize_sweep(tmp_path, "holm")
    rows = {r.label: r for r in s.comparisons}
    assert rows["x=1"].p == seq.p and rows["x=1"].p_adjusted == pytest.approx(min(1.0, 2 * seq.p))
    assert rows["x=1"].test == seq.test and rows["x=1"].test.startswith("group-sequential")
    text = format_sweep(s)
    assert "inconclusive †" in text and "(† valid only if launches do not shift accuracy)" in text
