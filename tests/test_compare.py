"""abh compare / abh power on eval directories written with harness.store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.evals import N, make_eval, seed_vectors

from harness.cli_compare import compare_main as main
from harness.compare import CompareError, compare_dirs, format_summary
from harness.plan import power_main


def test_worked_example_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", b)
    rc = main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "cmp"), "--margin", "2"])
    assert rc == 0
    c = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    assert c["schema_version"] == 1 and c["kind"] == "abh.comparison"
    assert c["n"] == N and c["dropped_errors"] == 0
    assert (c["both"], c["a_only"], c["b_only"], c["neither"]) == (1237, 10, 14, 58)
    assert c["arms"]["a"]["accuracy"] == pytest.approx(1247 / N)
    assert c["arms"]["b"]["accuracy"] == pytest.approx(1251 / N)
    assert c["arms"]["a"]["repeats"] == [pytest.approx(1247 / N)]
    assert c["arms"]["a"]["dirs"] == [str(da)]
    lo, hi = c["arms"]["b"]["wilson"]
    assert lo < 1251 / N < hi
    assert c["delta"] == pytest.approx(4 / N)
    assert c["delta_ci"][0] < 0 < c["delta_ci"][1]
    assert c["delta_ci_score"][0] < 0 < c["delta_ci_score"][1]
    assert c["delta_ci"] == c["delta_ci_score"] and "Newcombe" in c["delta_ci_method"]
    assert c["delta_ci_bootstrap"][0] < 0 < c["delta_ci_bootstrap"][1]
    assert c["mcnemar_p"] == pytest.approx(0.5413, abs=1e-3)
    assert c["mcnemar_midp"] < c["mcnemar_p"]
    assert c["psi"] == pytest.approx(24 / N)
    assert c["mde_paired"] == pytest.approx(2.8016 * np.sqrt(24 / N / N), rel=1e-3)
    assert c["mde_unpaired"] == pytest.approx(0.0245, abs=0.001)
    assert c["mde"] == pytest.approx(c["mde_paired"], rel=0.01)
    assert c["mde"] == max(c["mde_paired"], c["mde_observed"])
    assert c["psi_aa"] is None and c["noise_band"] is None
    assert c["margin"] == pytest.approx(0.02)
    assert c["tost"]["equivalent"] is True and c["tost"]["method"] == "Newcombe paired score interval"
    assert -0.02 < c["tost"]["ci"][0] < 0 < c["tost"]["ci"][1] < 0.02
    assert c["verdict"] == "equivalent"
    assert sorted(c["flips"]) == c["flips"] and len(c["flips"]) == 24
    assert all(a[i] != b[i] for i in c["flips"])
    assert c["simulated"] is False
    out = capsys.readouterr().out
    assert "+0.30 pp" in out and "EQUIVALENT" in out and "McNemar exact p 0.541" in out
    assert "90 % Newcombe interval" in c["verdict_reason"]


def test_no_margin_gives_inconclusive_with_mde(tmp_path: Path):
    a, b = seed_vectors()
    c = compare_dirs([make_eval(tmp_path / "a", a)], [make_eval(tmp_path / "b", b)], None, 0.05, 0)
    assert c["verdict"] == "inconclusive"
    assert "MDE" in c["verdict_reason"] and "1.0" in c["verdict_reason"]
    assert c["tost"] is None


def test_repeats_use_cluster_and_permutation(tmp_path: Path):
    rng = np.random.default_rng(5)
    n = 400
    q = rng.uniform(0, 1, n)
    a_dirs = [make_eval(tmp_path / f"a{r}", rng.random(n) < q) for r in range(3)]
    b_dirs = [make_eval(tmp_path / f"b{r}", rng.random(n) < np.clip(q + 0.12, 0, 1)) for r in range(3)]
    aa = [make_eval(tmp_path / "aa", rng.random(n) < q)]
    c = compare_dirs(a_dirs, b_dirs, margin=None, alpha=0.05, seed=1, aa_dirs=aa, n_resamples=2000)
    assert c["test"] == "within_question_permutation"
    assert c["table_source"] == "repeat 1 of each arm"
    assert len(c["arms"]["a"]["repeats"]) == 3 and c["arms"]["b"]["n_runs"] == 3
    assert c["delta"] == pytest.approx(np.mean(c["arms"]["b"]["repeats"]) - np.mean(c["arms"]["a"]["repeats"]))
    assert c["delta"] > 0.05 and c["delta_ci"][0] > 0
    assert c["p_value"] < 0.01 and c["verdict"] == "improved"
    assert c["delta_ci"] == c["delta_ci_bootstrap"] and "cluster bootstrap" in c["delta_ci_method"]
    assert c["psi_aa"] is not None and 0.1 < c["psi_aa"] < 0.6
    assert c["noise_band"][1] == pytest.approx(1.96 * np.sqrt(c["psi_aa"] / (n * 3)), rel=1e-3)
    assert c["mde"] == max(c["mde_repeats"], c["mde_observed"])
    assert c["delta_ci_score"] is None
    assert c["aa_dirs"] == [str(aa[0])]
    # deterministic for a given seed
    c2 = compare_dirs(a_dirs, b_dirs, margin=None, alpha=0.05, seed=1, aa_dirs=aa, n_resamples=2000)
    assert c2["delta_ci"] == c["delta_ci"] and c2["p_value"] == c["p_value"]


def test_regressed(tmp_path: Path):
    rng = np.random.default_rng(6)
    a = rng.random(500) < 0.8
    b = a & (rng.random(500) < 0.85)
    c = compare_dirs([make_eval(tmp_path / "a", a)], [make_eval(tmp_path / "b", b)], None, 0.05, 0)
    assert c["verdict"] == "regressed" and c["delta"] < 0 and c["b_only"] == 0


def test_min_effect_blocks_small_significant_difference(tmp_path: Path):
    a = np.ones(4000, bool)
    b = a.copy()
    b[:40] = False    # Δ = -1 pp, highly significant
    c = compare_dirs([make_eval(tmp_path / "a", a)], [make_eval(tmp_path / "b", b)], None, 0.05, 0,
                     min_effect=0.02)
    assert c["mcnemar_p"] < 1e-6
    assert c["verdict"] == "inconclusive" and "declared effect" in c["verdict_reason"]


@pytest.mark.parametrize("key,value", [("dataset_sha256", "e" * 64), ("recipe", "heldout"), ("indices", None)])
def test_refuses_different_question_sets(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a[:100])
    if key == "dataset_sha256":
        db = make_eval(tmp_path / "b", b[:100], sha=value)
    elif key == "recipe":
        db = make_eval(tmp_path / "b", b[:100], recipe=value)
    else:
        db = make_eval(tmp_path / "b", b[:99])
    rc = main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "cmp")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "refusing to compare" in err and key in err
    assert not (tmp_path / "cmp" / "comparison.json").exists()
    with pytest.raises(CompareError):
        compare_dirs([da], [db], None, 0.05, 0)


def test_not_an_eval_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    da = make_eval(tmp_path / "a", [True, False, True])
    (tmp_path / "empty").mkdir()
    assert main(["--a", str(da), "--b", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "not an eval directory" in capsys.readouterr().err


def test_errors_are_dropped_not_wrong(tmp_path: Path):
    a, b = seed_vectors()
    # errors on questions that both arms would have answered right: dropping them keeps the table's b, c
    both_right = np.flatnonzero(a & b)
    da = make_eval(tmp_path / "a", a, errors=tuple(both_right[:5]))
    db = make_eval(tmp_path / "b", b, errors=tuple(both_right[5:10]))
    c = compare_dirs([da], [db], None, 0.05, 0)
    assert c["n"] == N - 10 and c["dropped_errors"] == 10
    assert (c["a_only"], c["b_only"]) == (10, 14) and c["both"] == 1227
    assert c["error_rate"] == pytest.approx(10 / N)
    assert c["verdict"] != "not_comparable"
    # above the threshold: not comparable
    db2 = make_eval(tmp_path / "b2", b, errors=tuple(both_right[5:40]))
    c2 = compare_dirs([da], [db2], None, 0.05, 0)
    assert c2["verdict"] == "not_comparable" and "request errors" in c2["verdict_reason"]
    assert c2["error_rate_exceeded"] is True and c["error_rate_exceeded"] is False
    c3 = compare_dirs([da], [db2], None, 0.05, 0, max_error_rate=0.05)
    assert c3["verdict"] != "not_comparable"


def test_failed_arm_side_check_and_simulated_flag(tmp_path: Path):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a, simulated=True)
    db = make_eval(tmp_path / "b", b, side_check={"passed": False, "check": "marker"})
    c = compare_dirs([da], [db], None, 0.05, 0)
    assert c["simulated"] is True
    assert c["verdict"] == "not_comparable" and "side check of arm B" in c["verdict_reason"]
    assert c["failures"] and c["error_rate_exceeded"] is False
    dc = make_eval(tmp_path / "c", b, status="failed")
    c = compare_dirs([da], [dc], None, 0.05, 0)
    assert c["verdict"] == "not_comparable" and "arm B failed" in c["verdict_reason"]
    c = compare_dirs([da], [make_eval(tmp_path / "d", b)], None, 0.05, 0, failures=["arm A crashed"])
    assert c["verdict"] == "not_comparable" and "arm A crashed" in c["verdict_reason"]


def test_simulated_banner_in_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a, simulated=True)
    db = make_eval(tmp_path / "b", b, simulated=True)
    assert main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "o"), "--resamples", "500"]) == 0
    assert "SIMULATED" in capsys.readouterr().out


def test_power_cli_json_and_text(capsys: pytest.CaptureFixture[str]):
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--effect",
                       str(400 / 1319), "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["mde_unpaired"] == pytest.approx(0.0245, abs=0.001)
    assert round(f["mde_paired"], 3) == 0.011
    assert f["repeats_needed"] == 13
    assert f["mde"] == f["mde_paired"]
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--repeats", "13",
                       "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["mde"] == f["mde_repeats"] and f["mde_repeats"] < 4 / 1319
    assert power_main(["--n", "1319", "--p", "0.946", "--discordance", "0.02", "--effect", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "2.47 pp" in out and "1.09 pp" in out and "repeats per arm" in out
    with pytest.raises(SystemExit):
        power_main(["--n", "1319", "--p", "94.6"])


def test_identical_small_evals_are_not_equivalent(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """No discordant pair on 20 questions: SE 0, but no equivalence claim and no [0, 0] interval."""
    a = np.arange(20) % 2 == 0
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", a)
    assert main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "o"), "--margin", "0.5",
                 "--resamples", "500"]) == 0
    out = capsys.readouterr().out
    c = json.loads((tmp_path / "o" / "comparison.json").read_text())
    assert c["b_only"] + c["a_only"] == 0 and c["delta_se"] == 0
    assert c["verdict"] == "inconclusive" and "EQUIVALENT" not in out
    lo, hi = c["delta_ci"]
    assert lo < -0.05 and hi > 0.05 and c["delta_ci"] == c["delta_ci_score"]
    t = c["tost"]
    assert not t["equivalent"] and t["p_equivalence"] > 0.05 and t["ci"][0] < -0.005 < 0.005 < t["ci"][1]
    assert "Newcombe interval" in c["verdict_reason"] and "TOST p = 0 " not in c["verdict_reason"]
    assert "[+0.00, +0.00]" not in out and "degenerate" in out


def test_identical_repeats_refuse_equivalence_and_fall_back_to_a_score_interval(tmp_path: Path):
    a = np.arange(30) % 3 == 0
    a_dirs = [make_eval(tmp_path / f"a{r}", a) for r in range(2)]
    b_dirs = [make_eval(tmp_path / f"b{r}", a) for r in range(2)]
    c = compare_dirs(a_dirs, b_dirs, margin=0.01, alpha=0.05, seed=0, n_resamples=500)
    assert c["delta_se"] == 0 and c["tost"]["degenerate"] and not c["tost"]["equivalent"]
    assert c["verdict"] == "inconclusive"
    assert c["delta_ci"][0] < -0.05 and c["delta_ci"][1] > 0.05 and "Newcombe" in c["delta_ci_method"]


def test_permutation_p_at_its_floor_is_written_as_a_bound(tmp_path: Path):
    rng = np.random.default_rng(8)
    n = 300
    a_dirs = [make_eval(tmp_path / f"a{r}", rng.random(n) < 0.5) for r in range(2)]
    b_dirs = [make_eval(tmp_path / f"b{r}", rng.random(n) < 0.8) for r in range(2)]
    c = compare_dirs(a_dirs, b_dirs, margin=None, alpha=0.05, seed=0, n_resamples=2000)
    assert c["p_value"] == pytest.approx(1 / 2001) and c["p_value_at_floor"] is True
    assert c["verdict"] == "improved" and "p < 0.0005" in c["verdict_reason"]
    text = format_summary(c)
    assert "within_question_permutation p < 0.0005" in text and "p = 0.0005" not in text


def test_refusal_names_the_differing_recipe_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a[:100], recipe={"name": "gsm8k-5shot", "num_questions": 1319, "shots": 5})
    db = make_eval(tmp_path / "b", b[:100], recipe={"name": "gsm8k-5shot", "num_questions": 100, "shots": 5})
    assert main(["--a", str(da), "--b", str(db), "--out", str(tmp_path / "o")]) == 2
    assert "recipe.num_questions: 1319 vs 100" in capsys.readouterr().err
    db2 = make_eval(tmp_path / "b2", b[:100], recipe={"name": "gsm8k-5shot", "num_questions": 1319})
    with pytest.raises(CompareError, match=r"recipe\.shots: 5 vs \(absent\)"):
        compare_dirs([da], [db2], None, 0.05, 0)
    db3 = make_eval(tmp_path / "b3", b[:99], recipe={"name": "gsm8k-5shot", "num_questions": 1319, "shots": 5})
    with pytest.raises(CompareError, match="indices: 100 vs 99 entries"):
        compare_dirs([da], [db3], None, 0.05, 0)


@pytest.mark.parametrize("layout", ["both_sides", "both_sides_other_spelling", "repeat_in_arm", "aa"])
def test_refuses_the_same_eval_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str):
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:50]), make_eval(tmp_path / "b", b[:50])
    args = {"both_sides": ["--a", str(da), "--b", str(da)],
            "both_sides_other_spelling": ["--a", str(da), "--b", str(tmp_path / "." / "a") + "/"],
            "repeat_in_arm": ["--a", str(da), "--a", str(da), "--b", str(db)],
            "aa": ["--a", str(da), "--b", str(db), "--aa", str(da)]}[layout]
    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "refusing to compare" in err and "given twice" in err
    assert not (tmp_path / "o" / "comparison.json").exists()
