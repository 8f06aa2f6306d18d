"""GPU cost and the sequential record in what a reviewer reads: report.html, comparison.md, the sweep summary
and its report (issue 13). The run directories are built by ``helpers.rundirs.build_run_dir``; the cost and
sequential blocks are written as ``abh run`` writes them (summary.json, manifest, comparison)."""

from __future__ import annotations

import html as htmlmod
import json
import re
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from helpers.docs import doc
from helpers.question_looks import decide_look
from helpers.rundirs import build_run_dir

from harness.analysis.cost import EvalTime, LaunchTime, run_cost, sum_costs
from harness.analysis.sweep import summarize_sweep
from harness.report import write_markdown, write_report, write_sweep_report
from harness.report.cost_section import cost_line, cost_rows, hms, look_rows, sequential_line
from harness.report.headline import headline
from harness.report.sweep_text import format_sweep
from harness.results import schema
from harness.results.schema import Cost, SequentialRecord
from harness.stats.group_sequential import SequentialDesign


def _text(html: str) -> str:
    return htmlmod.unescape(re.sub(r"<[^>]+>", " ", html))


def _cost(gpus: int = 8, launch_s: float = 1800.0, eval_s: float = 300.0) -> Cost:
    launches = [LaunchTime(r, launch_s, launch_s + eval_s + 20.0, gpus) for r in ("a", "b", "a", "b")]
    evals = [EvalTime(r, eval_s) for r in ("a", "b", "a", "b")]
    return run_cost(launches, evals)


def _add_run_summary(root: Path, **extra: object) -> None:
    c = json.loads((root / "comparison.json").read_text())
    schema.write_run_summary(root / "summary.json", schema.RunSummary(
        experiment="x", verdict=c["verdict"], verdict_reason=None, exit_code=0, **extra))  # type: ignore[arg-type]


def _sequential(stop_at: int = 3, max_repeats: int = 6, **over: object) -> SequentialRecord:
    d = SequentialDesign(max_repeats=max_repeats, min_repeats=2)
    looks = [doc(asdict(decide_look(d, k, 0.002 * k, 0.004, 500))) for k in range(2, stop_at)]
    looks.append(doc(asdict(decide_look(d, stop_at, 0.05, 0.004, 500))))
    last = looks[-1]
    return SequentialRecord.from_doc({**{"design": {"max_repeats": max_repeats, "min_repeats": 2, "spending": "obf", "alpha": 0.05,
                       "hypothesis": "superiority", "margin": None, "futility": True},
            "estimator": "question-level paired z", "looks": looks, "stopped": True, "repeats_run": stop_at,
            "max_repeats": max_repeats, "verdict": last["verdict"], "reason": last["reason"],
            "sentence": last["sentence"], "repeats_saved": last["repeats_saved"],
            "gpu_hours_per_repeat": 9.5, "gpu_hours_saved": 9.5 * last["repeats_saved"]}, **over})


def test_cost_rows_and_line_carry_every_figure() -> None:
    cost_rec = _cost()
    cost = doc(cost_rec)
    rows = {r["role"]: r for r in cost_rows(cost_rec)}
    assert set(rows) == {"a", "b", "total"}  # no aa: the A/A control had no launches of its own
    assert rows["total"]["launches"] == 4 and rows["total"]["gpus"] == 8
    assert rows["total"]["gpu_hours"] == f"{cost['total']['gpu_hours']:.2f}"
    assert rows["a"]["launch"] == "1 h 00 min" and rows["a"]["eval"] == "10 min 00 s"
    line = cost_line(cost_rec)
    assert line.startswith(f"{cost['total']['gpu_hours']:.2f} GPU-hours") and "(A 9.42, B 9.42)" in line
    assert "4 server launch(es)" in line and "estimated" not in line
    assert "estimated from timestamps: launch_s" in cost_line(replace(cost_rec, estimated=["launch_s"]))
    assert hms(None) == "n/a" and hms(59.6) == "1 min 00 s" and hms(7) == "7 s"


def test_run_report_and_markdown_show_the_cost(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=60, repeats=2)
    _add_run_summary(root, cost=_cost())
    cost = doc(_cost())
    text = _text(write_report(root).read_text())
    assert "Cost" in text and "GPU-hours = time each server was up" in text
    assert f"{cost['total']['gpu_hours']:.2f}" in text and f"{cost['a']['gpu_hours']:.2f}" in text
    md = write_markdown(root).read_text()
    assert f"**Cost:** {cost['total']['gpu_hours']:.2f} GPU-hours" in md
    assert sum("**Cost:**" in ln for ln in md.splitlines()) == 1


def test_cost_falls_back_to_the_manifest(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=40)
    m = json.loads((root / "manifest.json").read_text())
    m["cost"] = doc(_cost(gpus=2))
    (root / "manifest.json").write_text(json.dumps(m))
    text = _text(write_report(root).read_text())
    assert f"{m['cost']['total']['gpu_hours']:.2f}" in text and "servers up" in text


def test_a_run_without_cost_shows_no_cost_section(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=40)
    html = write_report(root).read_text()
    assert 'id="cost"' not in html and 'id="sequential"' not in html
    assert "**Cost:**" not in write_markdown(root).read_text()


def test_sequential_record_in_report_markdown_and_verdict(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path / "run", n=60, repeats=3)
    seq = _sequential(stop_at=3, max_repeats=6)
    assert seq.verdict == "improved" and seq.repeats_saved == 3
    c = schema.load_comparison(root / "comparison.json")
    c = replace(c, sequential=seq, verdict_fixed=c.verdict, verdict="improved", verdict_reason=seq.sentence)
    schema.write_comparison(root / "comparison.json", c)
    _add_run_summary(root, cost=_cost(), sequential=seq)
    html = write_report(root).read_text()
    text = _text(html)
    assert 'id="sequential"' in html and "3 of at most 6 repeats" in text
    assert "saved against the fixed design" in text and "3 repeat(s) per arm, 28.50 GPU-hours" in text
    rows = look_rows(seq)
    assert [r["repeats"] for r in rows] == [2, 3] and rows[-1]["decision"] == "improved"
    assert rows[0]["decision"] == "continue" and rows[0]["bound"].startswith("±")
    for r in rows:
        assert r["bound"] in text
    line = headline(c)
    assert "IMPROVED" in line and ("sequential: stopped after 3 of 6 repeats (the fixed-design test of the same "
                                   "data: inconclusive)") in line
    assert line.split(" ", 2)[2] in text and seq.sentence in text  # the headline, and why in the facts
    md = write_markdown(root).read_text()
    assert "**Sequential:** sequential design (obf alpha spending, at most 6 repeats per arm): stopped after 3" in md
    assert "saved 3 repeat(s) per arm against running all 6, 28.50 GPU-hours" in md


def test_an_undecided_sequential_run_says_how_to_continue() -> None:
    seq = _sequential(stopped=False, repeats_run=2)
    assert "rerun to continue" in sequential_line(seq)


def test_sweep_sums_the_jobs_costs(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    costs = [_cost(gpus=8), _cost(gpus=4, launch_s=600.0)]
    for k, cost in enumerate(costs):
        job = build_run_dir(sweep / f"job{k}_x={k}", n=80, seed=k, inject=False)
        _add_run_summary(job, cost=cost)
    failed = sweep / "job2_x=2"  # a job that failed mid-way: no comparison, but its manifest has a cost
    failed.mkdir()
    partial = _cost(gpus=1, launch_s=60.0)
    schema.write_manifest(failed / "manifest.json", {"experiment": "x", "cost": doc(partial)})
    s_rec = summarize_sweep(sweep, "holm")
    s = doc(s_rec)
    expected = doc(sum_costs([*costs, partial]))
    costs_doc, partial = [doc(c) for c in costs], doc(partial)
    assert s["cost"]["total"]["gpu_hours"] == pytest.approx(expected["total"]["gpu_hours"])
    assert s["cost"]["total"]["launches"] == 12 and s["cost"]["total"]["gpus"] == 8
    by_job = {r["job"]: r for r in s["comparisons"]}
    assert by_job["job0_x=0"]["gpu_hours"] == pytest.approx(costs_doc[0]["total"]["gpu_hours"])
    assert by_job["job2_x=2"]["missing"] and by_job["job2_x=2"]["gpu_hours"] == pytest.approx(
        partial["total"]["gpu_hours"])
    stored = schema.load_sweep_summary(sweep / "sweep_summary.json")
    assert stored.cost is not None and stored.cost.total.gpu_hours == pytest.approx(expected["total"]["gpu_hours"])
    text = format_sweep(s_rec)
    assert "cost of the sweep (3 jobs):" in text and f"{expected['total']['gpu_hours']:.2f} GPU-hours" in text
    html = _text(write_sweep_report(sweep).read_text())
    assert "Cost of the sweep" in html and f"{expected['total']['gpu_hours']:.2f}" in html
    assert f"{costs_doc[1]['total']['gpu_hours']:.2f}" in html  # the job's own column


def test_a_sweep_without_costs_has_no_cost_block(tmp_path: Path) -> None:
    build_run_dir(tmp_path / "job0_x=0", n=40, inject=False)
    s = summarize_sweep(tmp_path, "holm")
    assert "cost" not in doc(s) and "cost of the sweep" not in format_sweep(s)


def test_a_job_that_stopped_early_is_costed_from_its_launches(tmp_path: Path) -> None:
    job = tmp_path / "job0_x=0"
    job.mkdir()
    t0 = 1_700_000_000.0
    manifest = {"experiment": "x", "config": {"engine": {"kind": "sglang", "args": ["--tp", "4"]},
                                              "arms": {"a": {}, "b": {}}},
                "arms": {"a": {"launches": [{"id": "a-1", "role": "a", "spawned": t0, "ready": t0 + 600,
                                             "launch_s": 600.0, "stopped": t0 + 900, "server_s": 900.0}]}},
                "evals": {}, "sessions": [{"started": t0}]}
    schema.write_manifest(job / "manifest.json", manifest)  # type: ignore[arg-type]
    s = doc(summarize_sweep(tmp_path, "holm"))
    assert s["cost"]["total"]["gpu_hours"] == pytest.approx(900 * 4 / 3600)  # TP 4 from the flags
    assert s["comparisons"][0]["missing"] and s["comparisons"][0]["gpu_hours"] == pytest.approx(1.0)
