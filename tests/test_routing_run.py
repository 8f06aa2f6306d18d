"""Whole runs with routing: the simulated rehearsal of the seed experiment (dsv4_shared_slot_simulated) finds the
seed's routing defect on every MoE layer while accuracy cannot tell the arms apart, and a kernel-like change that
flips near-tied experts on 2 % of the (token, layer) rows is found against the A/A floor."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.runs import abh_run_here

from harness.results import schema
from harness.results.fileio import read_json

QUICK = ("progress=false", "client.parallel=64")


@pytest.mark.slow
def test_the_seed_rehearsal_names_the_dropped_expert_and_the_out_of_range_id_on_every_moe_layer(tmp_path: Path):
    run_dir = tmp_path / "seed"
    code = abh_run_here(f"hydra.run.dir={run_dir}", "experiment=dsv4_shared_slot_simulated", "task.num_questions=120",
                        *QUICK)
    assert code in (0, 5)
    c = schema.load_comparison(run_dir / "comparison.json")
    assert c.verdict not in ("improved", "regressed", "not_comparable")  # accuracy cannot tell the arms apart
    r = c.routing
    assert r is not None and r.verdict == "diverged"
    assert r.sides["a"].defect == ("5 routed experts per token instead of 6 and an id out of range (384) on 100 % of "
                                   "tokens in every MoE layer")
    assert r.sides["a"].routed_layers == 58 and r.sides["a"].layers == 61 and r.sides["b"].defect is None
    assert r.launch_test is not None and (r.launch_test.launches_a, r.launch_test.launches_b) == (4, 3)
    assert r.identical_aa is not None and 0.999 < r.identical_aa < 1.0  # near ties differ between launches
    line = read_json(run_dir / "summary.json")["headline"]
    assert ("routing diverged: without the fix 5 routed experts per token instead of 6 and an id out of range (384) "
            "on 100 % of tokens in every MoE layer; with the fix 6 in range") in line
    assert line in (run_dir / "comparison.md").read_text()
    html = (run_dir / "report.html").read_text()
    assert 'id="routing"' in html and 'class="qlink"' in html


@pytest.mark.slow
def test_a_near_tie_change_on_2_percent_of_rows_is_found_against_the_floor(tmp_path: Path):
    run_dir = tmp_path / "shift"
    code = abh_run_here(f"hydra.run.dir={run_dir}", "experiment=demo", "task.num_questions=120", *QUICK,
                        "divergence.routing=true",  # the demo itself measures no routing
                        "experiment.concurrent_servers=false", "experiment.restart_per_repeat=true",
                        "engine.routing_noise=0.002", "+arms.b.engine.routing_shift=0.02", "arms.b.engine.accuracy=0.93",
                        "experiment.allowed_differences=[engine.build,engine.routing_shift]")
    assert code in (0, 5)
    r = schema.load_comparison(run_dir / "comparison.json").routing
    assert r is not None and r.verdict == "diverged", r.verdict_reason if r else None
    assert all(s.defect is None for s in r.sides.values())
    assert r.moved is not None and r.moved_aa is not None and r.moved > 0.015 and r.moved_aa < 0.008
