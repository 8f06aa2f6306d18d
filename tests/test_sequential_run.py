"""`abh run` with sequential repeats and cost accounting, end to end on the simulated engine (issue 13): a clear
effect stops early with ``improved``, a null effect does not stop for efficacy, every look is recorded and a
rerun continues from the recorded looks, a changed design is refused, ``summary.json`` holds the cost per arm,
and ``abh power --from`` plans from the run. Config validation of the sequential keys.

500 questions (not 200): the question-level test's information comes from questions, not only repeats. On the
simulator's first 200 questions the baseline scores 95.7 % against 99 %, about 6 questions of difference, and
a 6-question effect never reaches the first looks' O'Brien-Fleming boundaries however many repeats run (it
stopped at the last look, 6 of 6). At 500 questions the same arms differ by about 30 questions (z near 6).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.runs import abh, abh_run, abh_run_here, interrupt_run
from hydra import compose, initialize_config_dir

import harness.config as hc
from harness import exitcodes
from harness.results.fileio import read_json
from harness.results.records import to_doc
from harness.results.schema import load_comparison, load_run_summary

#: the accuracy design alone: the divergence's scoring passes (extra launches after the looks) are tested elsewhere
FAST = ("progress=false", "task.num_questions=500", "client.parallel=500", "engine.startup_s=0.2",
        "divergence.enabled=false")
SEQ = ("experiment.sequential=true", "experiment.max_repeats=6")


#: The sequential run end to end (six server launches, ~15 s) is slow. The default run keeps its parts: the looks'
#: decisions, records, resume and refused design changes (test_looks.py), the cost per arm (test_cost.py,
#: test_cost_report.py), `abh power --from` (test_plan.py), and below the config and the dry run's design.
E2E = pytest.mark.slow


@pytest.fixture(scope="module")
def improved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("seq")
    run_dir = root / "improved"
    r = abh_run(f"hydra.run.dir={run_dir}", *FAST, *SEQ, "engine.gpus=8", "arms.b.engine.accuracy=0.99", cwd=root)
    return run_dir, r


@E2E
def test_a_clear_effect_stops_early_with_improved(improved: tuple[Path, object]) -> None:
    run_dir, r = improved
    assert r.returncode == 0, r.stderr[-3000:]
    s = to_doc(load_run_summary(run_dir / "summary.json"))
    seq = s["sequential"]
    assert s["verdict"] == "improved" and seq["verdict"] == "improved" and seq["reason"] == "efficacy"
    assert seq["repeats_run"] < 6 and s["repeats"] == seq["repeats_run"]
    assert seq["repeats_saved"] == 6 - seq["repeats_run"]
    assert [look["repeats"] for look in seq["looks"]] == list(range(2, seq["repeats_run"] + 1))
    last = seq["looks"][-1]
    assert last["stop"] and abs(last["z"]) >= last["bound"]
    assert all(not look["stop"] for look in seq["looks"][:-1])
    # only the repeats the decision needed were run (plus the A/A control)
    assert sorted(p.name for p in (run_dir / "evals" / "a").iterdir()) == [f"r{k}" for k in range(1, seq["repeats_run"] + 1)]
    assert not (run_dir / "evals" / "b" / f"r{seq['repeats_run'] + 1}").exists()
    # the verdict line says it is the sequential decision; comparison.json carries it too
    assert "sequential: stopped after" in r.stdout.strip().splitlines()[-1]  # the headline says it
    assert r.stdout.strip().splitlines()[-1].startswith("[SIMULATED] IMPROVED +") and "sequential: stopped after" in r.stdout
    c = to_doc(load_comparison(run_dir / "comparison.json"))
    assert c["verdict"] == "improved" and c["sequential"]["repeats_run"] == seq["repeats_run"] and "verdict_fixed" in c
    # every look was recorded in the manifest as it was made
    m = read_json(run_dir / "manifest.json")
    assert m["sequential"]["looks"] == seq["looks"] and m["planned_design"]["roles"]["a"]["launches"] == 6
    # the design was printed before the first launch
    assert r.stderr.index("design: sequential, at most 6 repeats") < r.stderr.index("launching arm")
    assert "launch-to-launch noise sampled" in r.stderr


@E2E
def test_summary_holds_the_cost_per_arm(improved: tuple[Path, object]) -> None:
    run_dir, r = improved
    s = to_doc(load_run_summary(run_dir / "summary.json"))
    cost = s["cost"]
    seq = s["sequential"]
    for role in ("a", "b", "aa", "total"):  # the A/A control runs on fresh launches of its own
        block = cost[role]
        for key in ("launch_s", "eval_s", "server_s", "gpus", "gpu_hours"):
            assert key in block, (role, key)
        assert block["server_s"] >= block["launch_s"] + block["eval_s"] * 0.5 > 0
        assert block["gpu_hours"] == pytest.approx(block["server_s"] * 8 / 3600)
    assert cost["a"]["launches"] == cost["b"]["launches"] == seq["repeats_run"] and cost["aa"]["launches"] == 2
    assert cost["total"]["gpu_hours"] == pytest.approx(sum(cost[k]["gpu_hours"] for k in ("a", "b", "aa")))
    assert cost["estimated"] == []  # every launch recorded spawn, ready and stop
    per = (cost["a"]["gpu_hours"] + cost["b"]["gpu_hours"]) / seq["repeats_run"]
    assert seq["gpu_hours_saved"] == pytest.approx(per * seq["repeats_saved"])
    assert read_json(run_dir / "manifest.json")["cost"] == cost
    assert f"  cost: {cost['total']['launches']} launch(es)" in r.stdout and "GPU-hours" in r.stdout  # engine.gpus=8
    html = (run_dir / "report.html").read_text()
    assert 'id="cost"' in html and 'id="sequential"' in html and "saved against the fixed design" in html
    md = (run_dir / "comparison.md").read_text()
    assert "**Cost:**" in md and "**Sequential:**" in md


@E2E
def test_power_from_the_run_prints_repeats_and_gpu_hours(improved: tuple[Path, object]) -> None:
    run_dir, _ = improved
    # 2 pp: the honest plan (launch variance, the verdict's t) reaches no design for much smaller effects here
    r = abh("power", "--from", str(run_dir), "--effect", "2", "--json", cwd=run_dir.parent)
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["repeats"]["fixed"] >= 1 and plan["repeats"]["sequential_worst"] >= plan["repeats"]["fixed"]
    assert plan["gpu_hours"]["fixed"] > 0 and plan["gpu_hours"]["sequential_worst"] > 0
    assert plan["per_repeat"]["gpus"] == {"a": 8, "b": 8} and plan["per_repeat"]["source"] == "recorded"


@E2E
def test_a_rerun_continues_from_the_recorded_looks(improved: tuple[Path, object],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, first = improved
    before = read_json(run_dir / "manifest.json")
    code = abh_run_here(f"hydra.run.dir={run_dir}", *FAST, *SEQ, "engine.gpus=8", "arms.b.engine.accuracy=0.99")
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    after = read_json(run_dir / "manifest.json")
    assert after["sequential"]["looks"] == before["sequential"]["looks"]
    assert {k: len(v.get("launches", [])) for k, v in after["arms"].items()} == \
        {k: len(v.get("launches", [])) for k, v in before["arms"].items()}  # nothing launched again
    assert "already complete, kept" in err and "launching arm" not in err
    assert to_doc(load_run_summary(run_dir / "summary.json"))["verdict"] == "improved"
    # the design printed on resume knows the launch times now
    assert "expected cost:" in err and "GPU-hours" in err.split("expected cost:")[1].splitlines()[0]


@E2E
def test_a_changed_design_is_refused(improved: tuple[Path, object], capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, _ = improved
    code = abh_run_here(f"hydra.run.dir={run_dir}", *FAST, *SEQ, "engine.gpus=8", "arms.b.engine.accuracy=0.99",
                        "stats.spending=pocock")
    assert code == exitcodes.BAD_CONFIG
    assert "another sequential design (changed: spending 'obf' -> 'pocock')" in capsys.readouterr().err


@E2E
def test_a_null_effect_does_not_stop_for_efficacy_and_resumes_mid_way(tmp_path: Path) -> None:
    """Both arms at 93 %; fixed per-launch noise seeds per arm make the run deterministic (each arm's launches
    then answer alike, so the looks see one draw of null noise). Interrupted after its first look, the rerun
    keeps that look and continues from repeat 3."""
    run_dir = tmp_path / "null"
    args = [f"hydra.run.dir={run_dir}", *FAST, *SEQ, "stats.margin_pp=null", "experiment.aa_control=false",
            "arms.b.engine.accuracy=0.93", "+arms.a.engine.run_seed=11", "+arms.b.engine.run_seed=12",
            "experiment.allowed_differences=[engine.build,engine.run_seed]"]

    def first_look_recorded() -> bool:
        m = run_dir / "manifest.json"
        try:
            return len(read_json(m).get("sequential", {}).get("looks", [])) >= 1
        except (OSError, ValueError):
            return False

    cut = interrupt_run(args, tmp_path, first_look_recorded)
    assert cut.returncode == exitcodes.INTERRUPTED, cut.stderr[-2000:]
    looks_before = read_json(run_dir / "manifest.json")["sequential"]["looks"]
    assert looks_before[0]["repeats"] == 2 and not looks_before[0]["stop"]
    r = abh_run(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    s = to_doc(load_run_summary(run_dir / "summary.json"))
    seq = s["sequential"]
    assert seq["looks"][0] == looks_before[0]  # the recorded look, not a new one
    assert seq["reason"] != "efficacy" and s["verdict"] == "inconclusive"
    assert all(abs(look["z"]) < look["bound"] for look in seq["looks"])
    assert "evals/a/r1: already complete, kept" in r.stderr


# ------------------------------------------------------------------------------------------ config
def _cfg(*overrides: str):
    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("overrides,message", [
    (["experiment.sequential=true"], "experiment.sequential=true needs experiment.max_repeats"),
    (["experiment.sequential=true", "experiment.max_repeats=1"], "max_repeats=1 is below experiment.min_repeats=2"),
    (["experiment.sequential=true", "experiment.max_repeats=4", "experiment.min_repeats=0"], "min_repeats must be >= 1"),
    (["experiment.max_repeats=4"], "only used with experiment.sequential=true"),
    (["experiment.sequential=true", "experiment.max_repeats=4", "stats.spending=linear"], "stats.spending must be one of obf, pocock"),
    (["engine.gpus=-1"], "engine.gpus must be >= 0"),
    (["+arms.a.engine.gpus=two"], "arms.a.engine.gpus must be an integer"),
])
def test_nonsense_sequential_config_is_one_clear_line(overrides: list[str], message: str) -> None:
    with pytest.raises(hc.ConfigError, match=message) as e:
        hc.validate(_cfg(*overrides))
    assert len(str(e.value).splitlines()) == 1  # "bad config: " and the one problem, on one line


def test_the_sequential_keys_compose_with_their_defaults() -> None:
    cfg = _cfg()
    assert cfg.experiment.sequential is False and cfg.experiment.max_repeats is None
    assert cfg.experiment.min_repeats == 2 and cfg.engine.gpus is None
    assert cfg.stats.spending == "obf" and cfg.stats.futility is True
    hc.validate(_cfg("experiment.sequential=true", "experiment.max_repeats=6", "engine.gpus=8"))


def test_a_bad_sequential_config_exits_2_before_any_server(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = abh_run_here(f"hydra.run.dir={tmp_path / 'x'}", "experiment.sequential=true")
    assert code == exitcodes.BAD_CONFIG and "needs experiment.max_repeats" in capsys.readouterr().err
    assert not (tmp_path / "x" / "manifest.json").exists()


def test_a_dry_run_prints_the_design_and_its_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.stats.group_sequential import SequentialDesign, operating_characteristics

    code = abh_run_here(f"hydra.run.dir={tmp_path / 'dry'}", "dry_run=true", *SEQ, "engine.gpus=4",
                        "stats.margin_pp=null")
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]
    null = operating_characteristics(SequentialDesign(max_repeats=6, min_repeats=2), 0.0)["expected_repeats"]
    assert 2 < null < 6
    assert (f"design: sequential, at most 6 repeats per arm (first look after repeat 2; about {null:.1f} expected "
            "without an effect)") in err
    assert "6 launch(es), 6 eval(s), up to 1 pass(es) per launch, 4 GPU(s) per launch" in err
    assert "expected cost: unknown" in err and not (tmp_path / "dry" / "manifest.json").exists()
