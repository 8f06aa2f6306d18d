"""harness.analysis.planning: ``abh power`` from a finished run (--from) and from numbers; --effect in percentage points."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness import stats
from harness.analysis import planning as P
from harness.cli.power import power_main
from harness.results.eval_store import EvalStore, summarize
from harness.results.fileio import atomic_write_json
from harness.results.schema import SampleRecord
from harness.stats import group_sequential as sq

N = 1319


def make_eval(root: Path, correct: np.ndarray, simulated: bool = False, **meta: object) -> None:
    """An eval directory whose question i is right iff correct[i]."""
    store = EvalStore(root)
    store.open({"dataset_sha256": "d" * 64, "recipe": "sglang", "indices": list(range(len(correct))),
                "simulated": simulated, **meta})
    rows = [SampleRecord(index=i, prompt_sha256="0" * 64, output=f"#### {2 - int(ok)}", pred=2 - int(ok), label=1, correct=bool(ok),
                         invalid=False, finish_reason="stop", prompt_tokens=1, completion_tokens=1, latency_s=0.1,
                         attempts=1) for i, ok in enumerate(correct)]
    for r in rows:
        store.append(r)
    store.write_summary(summarize(rows, len(rows), 300.0))
    store.close()


def make_run(root: Path, *, flips: float = 0.02, same_launch: bool = False, with_manifest: bool = True,
             simulated: bool = False) -> Path:
    """A finished run: 2 repeats per arm, each on its own launch (or one launch per arm), identical arms
    with ``flips`` of the questions re-drawn per run; launches of 600 s and evals of 300 s on 8 GPUs."""
    rng = np.random.default_rng(5)
    base = rng.random(N) < 0.945
    for role in ("a", "b"):
        for r in (1, 2):
            x = base.copy()
            redraw = rng.random(N) < flips
            x[redraw] = rng.random(int(redraw.sum())) < 0.5
            inst = f"{role}@{1000 if same_launch else 1000 * r}"
            make_eval(root / f"evals/{role}/r{r}", x, role=role, repeat=r, instance=inst, simulated=simulated)
    if with_manifest:
        insts = {role: [{"id": f"{role}@{1000 * r}", "role": role, "launch_s": 600.0, "server_s": 960.0}
                        for r in (1, 2)] for role in ("a", "b")}
        evals = {f"evals/{role}/r{r}": {"role": role, "instances": [f"{role}@{1000 * r}"], "status": "complete"}
                 for role in ("a", "b") for r in (1, 2)}
        atomic_write_json(root / "manifest.json", {
            "config": {"engine": {"kind": "sglang", "args": ["--tp", "8"]}, "arms": {"a": {}, "b": {}},
                       "stats": {"alpha": 0.05}},
            "sessions": [{"started": 0.0}], "arms": {k: {"instances": v} for k, v in insts.items()},
            "evals": evals})
    return root


def test_plan_from_run_dir(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run")
    p = P.plan_from_run(run, 0.01)
    nz = p["noise"]
    assert nz["fresh_launch_pairs"] == 2 and nz["same_launch_pairs"] == 0
    assert 0.01 < nz["sigma2"] < 0.03 and nz["sigma2"] == pytest.approx(np.mean(list(nz["psi_within"].values())))
    # the fixed design is the verdict's own test's (its launch variance, t reference), not the normal model's
    lp = p["launch"]
    assert lp["source"].startswith("measured") and lp["aa_launches"] == p["launch"]["aa_launches"]
    assert p["repeats"]["fixed"] == stats.launchvar.launches_needed(0.01, N, lp["sigma2"], lp["noise_per_launch"],
                                                                    lp["aa_launches"], lp["heterogeneity"],
                                                                    tails=P.PLAN_TAILS)
    assert p["fixed"]["power"] >= 0.8 > P.design_power(0.01, N, lp["sigma2"], lp["noise_per_launch"],
                                                       p["repeats"]["fixed"] - 1, p["repeats"]["fixed"] - 1,
                                                       lp["aa_launches"])
    pr = p["per_repeat"]
    assert pr["source"] == "recorded" and pr["gpus"] == {"a": 8, "b": 8}
    assert pr["launch_s"]["a"] == 600 and pr["eval_s"]["b"] == 300 and pr["stop_s"]["a"] == 60
    assert pr["gpu_hours"] == pytest.approx(2 * 8 * 960 / 3600)
    assert p["gpu_hours"]["fixed"] == pytest.approx(p["repeats"]["fixed"] * pr["gpu_hours"])
    s = p["sequential"]
    k = s["repeats"]["worst"]
    assert k >= p["repeats"]["fixed"] and s["power"] >= 0.8
    assert s["repeats"]["expected"] < k and s["repeats"]["expected_if_null"] < k
    assert p["gpu_hours"]["sequential_worst"] == pytest.approx(k * pr["gpu_hours"])
    assert p["gpu_hours"]["sequential_expected"] < p["gpu_hours"]["fixed"]
    # the design it reports is the one the look decisions use
    d = sq.SequentialDesign(max_repeats=k)
    assert s["design"]["bounds"] == pytest.approx(list(d.efficacy_bounds()))
    # the smallest design: one repeat fewer would not reach the power
    if k - 1 >= p["repeats"]["fixed"]:
        drift = 0.01 / math.sqrt(2 * (lp["sigma2"] + lp["noise_per_launch"]) / (k - 1))
        assert sq.operating_characteristics(sq.SequentialDesign(max_repeats=k - 1), drift)["power"] < 0.8


def test_plan_warns_when_launches_were_shared_and_overrides_win(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", same_launch=True, simulated=True)
    p = P.plan_from_run(run, 0.01, launch_s=1800.0, gpus=8)
    assert p["noise"]["fresh_launch_pairs"] == 0 and p["noise"]["same_launch_pairs"] == 2
    assert any("shared a server launch" in n for n in p["notes"])
    assert p["simulated"] is True
    assert p["per_repeat"]["launch_s"] == {"a": 1800.0, "b": 1800.0} and "--launch-s" in p["per_repeat"]["source"]


def test_plan_without_manifest_and_refusals(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", with_manifest=False)
    p = P.plan_from_run(run, 0.01)
    assert p["per_repeat"] is None and p["gpu_hours"]["fixed"] is None and p["repeats"]["fixed"] >= 1
    with pytest.raises(P.PlanError, match="no evals"):
        P.plan_from_run(tmp_path, 0.01)
    with pytest.raises(P.PlanError, match="percentage points"):
        P.plan_from_run(run, 0.0001)


def test_power_cli_from_run_json_and_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path / "run")
    assert power_main(["--from", str(run), "--effect", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "abh.plan" and out["effect_pp"] == pytest.approx(1) and out["effect"] == pytest.approx(0.01)
    for key in ("fixed", "sequential_expected", "sequential_expected_if_null", "sequential_worst"):
        assert key in out["repeats"] and key in out["gpu_hours"]
    assert out["repeats"]["fixed"] > 1 and out["gpu_hours"]["fixed"] > 0
    assert power_main(["--from", str(run), "--effect", "1"]) == 0
    text = capsys.readouterr().out
    assert "fixed design:" in text and "sequential design:" in text and "GPU-hours" in text
    assert power_main(["--from", str(tmp_path / "nope"), "--effect", "0.3"]) == 2


@pytest.mark.parametrize("argv,msg", [
    (["--n", "1319", "--p", "0.946", "--effect", "0"], "percentage points"),
    (["--n", "1319", "--p", "0.946", "--effect", "150"], "percentage points"),
    (["--n", "1319", "--p", "0.946", "--effect", "nan"], "percentage points"),
    (["--n", "1319", "--p", "0.946", "--effect", "0.003"], "less than half a question"),
    (["--n", "1319", "--p", "94.6"], "fraction"),
    (["--n", "1319", "--p", "0.9", "--discordance", "2"], "fraction"),
    (["--effect", "0.3"], "--from RUN_DIR, or --n and --p"),
    (["--from", "x"], "--effect"),
    (["--from", "x", "--effect", "0.3", "--n", "100"], "drop --n"),
])
def test_power_cli_refuses_nonsense(argv: list[str], msg: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        power_main(argv)
    assert e.value.code == 2 and msg in capsys.readouterr().err


@pytest.mark.slow  # abh power simulates its plan: the file keeps the fast ones
def test_power_cli_old_options_with_effect_in_pp(capsys: pytest.CaptureFixture[str]) -> None:
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--effect",
                         str(100 * 4 / 1319), "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["mde_unpaired"] == pytest.approx(0.0245, abs=0.001)
    assert round(f["mde_paired"], 3) == 0.011
    assert f["repeats_needed"] == 13 and f["effect"] == pytest.approx(4 / 1319)
    # the plan: the verdict's t test, the launch variance assumed 0 and said so; an effect on 4 questions is
    # within the question-level noise of Δ however many launches are run (the normal model said 13 repeats)
    assert "assumed 0" in f["plan"]["launch"]["source"] and f["plan"]["sequential"] is None
    assert stats.launchvar.launches_needed(4 / 1319, 1319, 0.0, 0.01 / 1319, 0, 4 / 1319 * (1 - 4 / 1319) / 1319) is None
    assert any("no design of up to 200 launches" in n for n in f["plan"]["notes"])
    assert f["plan"]["fixed"]["power"] < 0.8
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--repeats", "13",
                         "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["mde"] == f["mde_repeats"] and f["mde_repeats"] < 4 / 1319 and "plan" not in f
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--effect", "0.3",
                         "--gpus", "8", "--launch-s", "1800", "--eval-s", "300"]) == 0
    out = capsys.readouterr().out
    assert "2.47 pp" in out and "1.09 pp" in out and "repeats per arm" in out and "GPU-hours" in out
    # 8 GPUs x 2 arms x (1800 + 300) s per repeat
    assert f"{16 * 2100 / 3600:.2f} GPU-hours" in out


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_make_plan_edge_cases() -> None:
    p = P.make_plan(0.003, N, 0.0)
    assert any("zero noise" in n for n in p["notes"])
    tiny = P.make_plan(0.002, N, 0.02)  # 2.6 questions: below the 6-question floor
    assert any("add questions" in n for n in tiny["notes"])
    far = P.make_plan(0.0008, N, 0.5)
    assert far["sequential"] is None and far["repeats"]["sequential_worst"] is None


def test_a_plan_from_evals_without_launch_ids_counts_one_launch_per_server(tmp_path: Path) -> None:
    """Passes of one server are one launch (as the comparison counts them), so no launch variance is measured
    from them; the same evals with a launch id each measure it."""
    rng = np.random.default_rng(9)
    base = rng.random(N) < 0.9
    for with_ids in (False, True):
        root = tmp_path / ("ids" if with_ids else "noids")
        for role in ("a", "b"):
            for r in (1, 2, 3):
                x = base.copy()
                redraw = rng.random(N) < 0.05
                x[redraw] = rng.random(int(redraw.sum())) < 0.5
                ids = {"launch": f"{role}-{r}"} if with_ids else {}
                make_eval(root / f"evals/{role}/r{r}", x, role=role, repeat=r, url=f"http://127.0.0.1:{3000 if role == 'a' else 3001}",
                          **ids)
        sigma2, _, _, source = P.launch_from_runs(P._runs(root))
        if with_ids:
            assert sigma2 is not None and source.startswith("measured")
        else:
            assert sigma2 is None and "not measurable" in source


def test_abh_power_checks_its_flags_by_the_config_fields(capsys):
    from harness.cli.power import power_main

    for flags, message in ((["--gpus", "-1"], "--gpus must be >= 0, not -1"),
                           (["--min-repeats", "0"], "--min-repeats must be >= 1, not 0"),
                           (["--alpha", "1.2"], "--alpha: alpha must be in (0, 1), not 1.2")):
        with pytest.raises(SystemExit) as e:
            power_main(["--n", "100", "--p", "0.9", *flags])
        assert e.value.code == 2 and message in capsys.readouterr().err
