"""harness.analysis.cost: GPUs from engine configs, per-arm and total cost, sweep sums, reading a manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.docs import doc

from harness.analysis import cost as C


@pytest.mark.parametrize("engine,args,env,expected", [
    ({"kind": "sglang", "gpus": 4, "args": ["--tp", "8"]}, [], {}, 4),                        # explicit wins
    ({"kind": "simulated"}, [], {}, 0),
    ({"kind": "llamacpp", "env": {"CUDA_VISIBLE_DEVICES": "0"}}, [], {}, 0),                 # CPU engine
    ({"kind": "external"}, [], {}, 0),
    ({"kind": "sglang"}, [], {}, 1),
    ({"kind": "sglang", "args": ["--tp", "8"]}, [], {}, 8),
    ({"kind": "sglang", "args": ["--tp-size=4", "--dp-size", "2"]}, [], {}, 8),
    ({"kind": "vllm", "args": ["--tensor-parallel-size", "2", "--data-parallel-size", "2",
                               "--pipeline-parallel-size", "2"]}, [], {}, 8),
    # the seed: TP8 with DP8 attention runs on 8 GPUs, not 64
    ({"kind": "sglang", "args": ["--tensor-parallel-size", "8", "--dp", "8", "--enable-dp-attention"]}, [], {}, 8),
    ({"kind": "sglang", "args": ["--tp", "2"]}, ["--tp", "4"], {}, 4),                          # arm flags win
    ({"kind": "sglang", "env": {"HIP_VISIBLE_DEVICES": "0,1,2,3"}}, [], {}, 4),
    ({"kind": "vllm"}, [], {"CUDA_VISIBLE_DEVICES": ""}, 0),
    ({"kind": "sglang", "env": {"CUDA_VISIBLE_DEVICES": "0,1"}}, ["--tp", "1"], {}, 1),       # flags over devices
])
def test_count_gpus(engine: dict, args: list, env: dict, expected: int) -> None:
    assert C.count_gpus(engine, args, env)[0] == expected


def test_count_gpus_names_its_source_and_refuses_nonsense() -> None:
    assert C.count_gpus({"kind": "sglang", "args": ["--tp", "8", "--dp", "8", "--enable-dp-attention"]})[1] \
        == "tp 8 x pp 1 (dp attention inside tp)"
    with pytest.raises(ValueError, match="tensor parallel"):
        C.count_gpus({"kind": "sglang", "args": ["--tp", "eight"]})
    with pytest.raises(ValueError):
        C.count_gpus({"kind": "sglang", "gpus": -1})


def doc_of_cost(*args, **kwargs):
    return doc(C.cost_from_manifest(*args, **kwargs))


def test_run_cost_per_arm_and_total() -> None:
    launches = [C.LaunchTime("a", 1800, 2400, 8), C.LaunchTime("b", 1700, 2300, 8),
                C.LaunchTime("a", 1900, 2500, 8)]
    evals = [C.EvalTime("a", 300), C.EvalTime("b", 310), C.EvalTime("a", 290), C.EvalTime("aa", 280)]
    c = doc(C.run_cost(launches, evals))
    assert set(c) == {"a", "b", "total", "estimated"}  # the A/A evals ran on A's servers: counted in a
    assert c["a"] == {"launches": 2, "evals": 3, "launch_s": 3700.0, "eval_s": 870.0, "server_s": 4900.0,
                      "gpus": 8, "gpu_hours": pytest.approx(4900 * 8 / 3600), "scoring_passes": 0, "scoring_s": 0.0,
                      "scoring_gpu_hours": 0.0}
    assert c["total"]["gpu_hours"] == pytest.approx((2400 + 2300 + 2500) * 8 / 3600)
    assert c["total"]["launches"] == 3 and c["total"]["evals"] == 4 and c["total"]["gpus"] == 8
    for k in C.FIELDS:
        assert k in c["a"] and k in c["total"]
    own = doc(C.run_cost([*launches, C.LaunchTime("aa", 100, 500, 8)], evals))
    assert own["aa"]["launches"] == 1 and own["aa"]["eval_s"] == 280 and own["a"]["evals"] == 2
    with pytest.raises(ValueError):
        C.run_cost([C.LaunchTime("c", 1, 1, 1)], [])


def test_sum_costs_over_a_sweep() -> None:
    j1 = C.run_cost([C.LaunchTime("a", 10, 100, 2), C.LaunchTime("b", 10, 100, 2)],
                    [C.EvalTime("a", 50), C.EvalTime("b", 50)])
    j2 = C.run_cost([C.LaunchTime("a", 20, 200, 4), C.LaunchTime("b", 20, 200, 4),
                     C.LaunchTime("aa", 20, 150, 4)], [C.EvalTime("aa", 60)])
    s_rec = C.sum_costs([j1, None, j2])
    s, j1, j2 = doc(s_rec), doc(j1), doc(j2)
    assert s["a"]["server_s"] == 300 and s["b"]["launches"] == 2 and s["aa"]["server_s"] == 150
    assert s["total"]["gpu_hours"] == pytest.approx(j1["total"]["gpu_hours"] + j2["total"]["gpu_hours"])
    assert s["total"]["gpus"] == 4
    assert "GPU-hours" in C.format_cost(s_rec) and "aa" in C.format_cost(s_rec)


def test_cost_from_manifest_recorded_and_estimated(tmp_path: Path) -> None:
    recorded = {
        "config": {"engine": {"kind": "sglang", "args": ["--tp", "8"]}, "arms": {"a": {}, "b": {}}},
        "sessions": [{"started": 1000.0}],
        "arms": {"a": {"instances": [{"id": "a@1600", "role": "a", "spawned": 1000, "ready": 1600,
                                      "stopped": 2000, "gpus": 8}]},
                 "b": {"instances": [{"id": "b@2600", "role": "b", "launch_s": 590.0, "server_s": 1010.0}]}},
        "evals": {"evals/a/r1": {"role": "a", "instances": ["a@1600"], "status": "complete",
                                 "summary": {"latency_s": 350.0}},
                  "evals/b/r1": {"role": "b", "instances": ["b@2600"], "status": "complete",
                                 "summary": {"latency_s": 360.0}}},
    }
    c = doc_of_cost(recorded)
    assert c["estimated"] == []
    assert c["a"]["launch_s"] == 600 and c["a"]["server_s"] == 1000 and c["a"]["eval_s"] == 350
    assert c["b"]["gpus"] == 8 and c["b"]["server_s"] == 1010  # GPUs from the config's --tp 8
    # an older manifest: no launch times; ready from the instance id, eval times from summary.json
    old = {"config": {"engine": {"kind": "simulated"}}, "sessions": [{"started": 100.0}],
           "arms": {"a": {"instances": [{"id": "a@130"}]}, "b": {"instances": [{"id": "b@131"}]}},
           "evals": {"evals/a/r1": {"role": "a", "instances": ["a@130"], "started": 131, "ended": 140},
                     "evals/b/r1": {"role": "b", "instances": ["b@131"], "started": 141, "ended": 150}}}
    (tmp_path / "evals/a/r1").mkdir(parents=True)
    (tmp_path / "evals/a/r1/summary.json").write_text(json.dumps({"latency_s": 8.5}))
    c = doc_of_cost(old, tmp_path, gpus={"a": 2})
    assert set(c["estimated"]) == {"launch_s", "server_s", "eval_s"}
    assert c["a"]["launch_s"] == 30 and c["a"]["eval_s"] == 8.5 and c["a"]["server_s"] == 38.5
    assert c["a"]["gpu_hours"] == pytest.approx(38.5 * 2 / 3600)
    assert c["b"]["launch_s"] == 1 and c["b"]["eval_s"] == 9 and c["b"]["gpus"] == 0


def test_scoring_passes_are_counted_apart_on_the_launches_they_ran_on() -> None:
    """A scoring pass runs on a launch an eval holds: it adds no launch, and its time and GPU-hours are shown
    apart (part of the role's server time, not added to it)."""
    launches = [C.LaunchTime("a", 100, 700, 8), C.LaunchTime("b", 100, 700, 8), C.LaunchTime("aa", 100, 500, 8)]
    evals = [C.EvalTime("a", 200), C.EvalTime("b", 200), C.EvalTime("aa", 200)]
    scoring = [C.ScoringRecord("a", 90, 8), C.ScoringRecord("b", 120, 8), C.ScoringRecord("aa", 60, 8)]
    c = C.run_cost(launches, evals, scoring=scoring)
    assert c.total.launches == 3 and c.total.scoring_passes == 3 and c.total.scoring_s == 270
    assert c.a.scoring_gpu_hours == pytest.approx(90 * 8 / 3600) and c.aa is not None and c.aa.scoring_passes == 1
    assert c.total.gpu_hours == pytest.approx((700 + 700 + 500) * 8 / 3600)  # server time already holds them
    assert "3 scoring pass(es)" in C.format_cost(c) and "of them scoring" in C.format_cost(c)
    manifest = {"config": {"engine": {"kind": "simulated"}}, "sessions": [{"started": 0.0}],
                "arms": {"a": {"launches": [{"id": "a-1", "role": "a", "spawned": 0, "ready": 10, "stopped": 100,
                                             "gpus": 2}]}},
                "evals": {"evals/a/r1": {"role": "a", "launches": ["a-1"], "status": "complete",
                                         "summary": {"latency_s": 30.0}}},
                "scoring": {"evals/a/r1": {"pass": "ref", "arm": "a", "launch": "a-1", "wall_s": 20.0}}}
    m = C.cost_from_manifest(manifest)
    assert m.a.scoring_passes == 1 and m.a.scoring_s == 20.0 and m.a.scoring_gpu_hours == pytest.approx(20 * 2 / 3600)
