"""``abh run stats.hypothesis=identical`` end to end with the SIMULATED engine (real server processes): a
deterministic engine and the same arm proves a no-op, a changed arm differs, a non-deterministic engine is
not_deterministic (never identical); with and without the scoring passes."""

from pathlib import Path

import pytest
from helpers.runs import abh_run, abh_run_here

from harness.cli.main import main as abh
from harness.results.fileio import read_json

N = 30
RUN = ("progress=false", f"task.num_questions={N}", "client.parallel=100", "experiment.repeats=1",
       "experiment.aa_control=true", "stats.margin_pp=null", "stats.hypothesis=identical")
SAME = ("arms.b.engine.accuracy=0.93",)  # B: the baseline's accuracy, another build label


def _run(tmp_path: Path, name: str, *args: str, report: bool = False) -> dict:
    code = abh_run_here(f"hydra.run.dir={tmp_path / name}", *RUN, *args, f"report={str(report).lower()}")
    assert code == 0
    return read_json(tmp_path / name / "comparison.json")


@pytest.mark.slow  # a whole run of processes (~5-15 s of CPU): the slow suite (.ci/run runs it), so the default run stays under 2 min
def test_identical_with_its_bound_and_the_floor_logprobs(tmp_path, capsys):
    c = _run(tmp_path, "same", "engine.deterministic=true", *SAME, report=True)
    i = c["identity"]
    assert c["verdict"] == i["verdict"] == "identical" and c["hypothesis"] == "identical"
    assert i["questions"] == N and i["differing"] == 0 and i["floor_logprobs"] == "identical"
    assert i["upper_bound"] == pytest.approx(1 - 0.05 ** (1 / N))
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith(f"[SIMULATED] IDENTICAL on all {N} questions") and "≤ 9.50 %" in out[-1]
    md = (tmp_path / "same" / "comparison.md").read_text()
    assert "#### No-op proof" in md and "floor: 2 further pass(es) of A compared; logprobs identical" in md
    html = (tmp_path / "same" / "report.html").read_text()
    assert 'id="identity"' in html and "No-op proof" in html
    m = read_json(tmp_path / "same" / "manifest.json")
    assert m["arms"]["a"]["deterministic"]["requested"] is True
    assert "--deterministic" in m["arms"]["a"]["launch"]["argv"]
    # abh compare of the same evals (their scoring passes beside them) gives the same proof
    ev = tmp_path / "same" / "evals"
    common = ["--a", str(ev / "a/r1"), "--b", str(ev / "b/r1"), "--hypothesis", "identical"]
    assert abh(["compare", *common, "--out", str(tmp_path / "cmp")]) == 2  # no floor
    assert "needs an A/A floor" in capsys.readouterr().err
    assert abh(["compare", *common, "--aa", str(ev / "aa/r1"), "--aa", str(ev / "aa/r2"),
                "--out", str(tmp_path / "cmp")]) == 0
    again = read_json(tmp_path / "cmp" / "comparison.json")["identity"]
    assert {k: again[k] for k in ("verdict", "upper_bound", "floor_logprobs", "logprobs_ab")} == {
        k: i[k] for k in ("verdict", "upper_bound", "floor_logprobs", "logprobs_ab")}


@pytest.mark.slow  # a whole run of processes (~5-15 s of CPU): the slow suite (.ci/run runs it), so the default run stays under 2 min
def test_a_changed_arm_differs_with_every_question_listed(tmp_path, capsys):
    c = _run(tmp_path, "diff", "engine.deterministic=true", "arms.b.engine.accuracy=0.6", "divergence.enabled=false")
    i = c["identity"]
    assert c["verdict"] == "differs" and i["differing"] == len(i["partings"]) > 0
    assert i["differing_questions"] == [p["question"] for p in i["partings"]]
    assert all(p["char"] is not None and p["text_a"] != p["text_b"] for p in i["partings"])
    assert i["counts_aa"]["parted"] == 0 and i["floor_logprobs"] == "not_scored"
    assert f"DIFFERS on {i['differing']} of {N} questions" in capsys.readouterr().out


@pytest.mark.slow  # a whole run of processes (~5 s of CPU): the slow suite (.ci/run runs it)
@pytest.mark.parametrize("scoring", ["divergence.enabled=true", "divergence.enabled=false"])
def test_a_non_deterministic_engine_is_not_deterministic(tmp_path, capsys, scoring):
    # run-to-run noise on 30 % of the questions: some A/A pass parts from A's (all 30 repeat: p ~ 0.7^30)
    c = _run(tmp_path, "nd", "engine.flip_rate=0.3", *SAME, scoring)
    i = c["identity"]
    assert c["verdict"] == "not_deterministic" and i["upper_bound"] is None
    assert i["floor_difference"].startswith("question ")
    assert "NOT DETERMINISTIC: the A/A floor is not zero" in capsys.readouterr().out


@pytest.mark.slow  # the identical proof through the command's own process, with no scoring pass (~15 s)
def test_identical_without_scoring_through_the_command(tmp_path):
    r = abh_run(f"hydra.run.dir={tmp_path / 'x'}", *RUN, "engine.deterministic=true", *SAME,
                "divergence.enabled=false", "report=false", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"IDENTICAL on all {N} questions" in r.stdout.strip().splitlines()[-1]


def test_identical_needs_a_floor(tmp_path, capsys):
    assert abh_run_here(f"hydra.run.dir={tmp_path / 'x'}", *RUN, "experiment.aa_control=false") == 2
    err = capsys.readouterr().err
    assert "needs an A/A floor" in err and "Traceback" not in err
