"""Divergence end to end (issue 11): arms of equal accuracy whose next-token distributions differ
(``engine.logit_shift``) are ``diverged`` above the A/A floor and identical builds ``indistinguishable`` —
through ``abh compare`` over evals and scoring passes made against real simulator processes, and through
``abh run`` (the scoring phase after the evals, resume, signals); an engine that cannot score gives
``not_measured``; and, slow, real llama.cpp logprobs (f16 vs q8_0 KV keys) where accuracy cannot tell."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import TEST_JSONL, SimServer
from helpers.aioserver import FakeServer
from helpers.docs import comparison as make_comparison
from helpers.docs import doc
from helpers.llamacpp import needs_llamacpp
from helpers.runs import abh_run, abh_run_here, interrupt_run, log_has

from harness import exitcodes
from harness.cli.compare import compare_main
from harness.measure.divergence_pass import ScoringOptions, score_pass
from harness.measure.evaluation import EvalOptions, run_eval
from harness.results.fileio import read_json
from harness.results.schema import Comparison
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k

N = 100


def _measure(root: Path, shift: str) -> dict[str, Path]:
    """Evals of A and B (B's build perturbed by ``shift``; the same accuracy), A's reference pass, B's pass and
    the A/A floor on a fresh launch of A: the layout abh run writes."""
    test = gsm8k.load(TEST_JSONL, "test")
    dirs = {"a": root / "evals/a/r1", "b": root / "evals/b/r1", "aa": root / "evals/aa/r1"}

    def cfg(s: SimServer) -> ClientConfig:
        return ClientConfig(url=s.url, parallel=64)

    # launch noise with fixed per-launch seeds: three launches, three draws, the same every time the test runs
    a1 = SimServer("--build", "a", "--noise", "launch", "--run-seed", "1").wait_ready()
    b1 = SimServer("--build", "b", "--logit-shift", shift, "--noise", "launch", "--run-seed", "2").wait_ready()
    try:
        for role, s in (("a", a1), ("b", b1)):
            run_eval(test, gsm8k.RecipeConfig(num_questions=N), cfg(s), dirs[role], None, EvalOptions(progress=False))
        score_pass(dirs["a"], cfg(a1), dirs["a"], ScoringOptions(progress=False))
        score_pass(dirs["a"], cfg(b1), dirs["b"], ScoringOptions(progress=False, reference_scores=dirs["a"]))
    finally:
        a1.stop()
        b1.stop()
    a2 = SimServer("--build", "a", "--noise", "launch", "--run-seed", "3").wait_ready()  # the floor: a FRESH launch
    try:
        score_pass(dirs["a"], cfg(a2), dirs["aa"], ScoringOptions(progress=False, reference_scores=dirs["a"]))
    finally:
        a2.stop()
    return dirs


# Slow (~7 s each, three simulator launches and three scoring passes): the default run has abh compare on real
# scores (not_measured, below), the diverged verdict through abh run (below) and indistinguishable from stored
# scores (test_divergence.py).
@pytest.mark.slow
@pytest.mark.parametrize("shift, verdict", [("0.3", "diverged"), ("0", "indistinguishable")])
def test_abh_compare_resolves_what_accuracy_cannot(tmp_path, capsys, shift, verdict):
    dirs = _measure(tmp_path, shift)
    out = tmp_path / "cmp"
    code = compare_main(["--a", str(dirs["a"]), "--b", str(dirs["b"]), "--aa", str(dirs["aa"]), "--out", str(out),
                         "--margin", "2"])
    assert code == exitcodes.OK
    c = read_json(out / "comparison.json")
    # accuracy: the builds answer alike (logit_shift never changes an answer)
    assert c["verdict"] not in ("improved", "regressed") and c["aa_dirs"] == []  # the floor is no accuracy run
    assert c["arms"]["a"]["accuracy"] > 0.85 and c["arms"]["b"]["accuracy"] > 0.85
    d = c["divergence"]
    assert d["verdict"] == verdict, d["verdict_reason"]
    assert d["reference"] == "a" and d["dirs"] == {"ref": str(dirs["a"]), "ab": str(dirs["b"]), "aa": str(dirs["aa"])}
    assert d["tokens"] > 5 * N and d["questions"] == N and d["top_k"] == 20
    assert 0 < d["kld_mean_aa"] < 0.005  # launch noise on the logits only
    if verdict == "diverged":
        assert d["kld_mean"] > 10 * d["kld_mean_aa"] and d["p"] < 0.01 and d["effect_ci"][0] > 0
        assert d["same_top_rate"] < d["same_top_rate_aa"]
    else:
        assert d["kld_mean"] < 2 * d["kld_mean_aa"] and d["p"] >= 0.05
    assert d["scoring"]["ref"]["wall_s"] > 0 and d["scoring"]["ab"]["tokens"] == d["tokens"]
    printed = capsys.readouterr().out
    said = "outputs differ beyond relaunch noise" if verdict == "diverged" else "outputs within relaunch noise"
    assert f"  {said} (KLD" in printed  # the result line, with its numbers
    md = (out / "comparison.md").read_text()
    assert (" · outputs differ beyond relaunch noise" if verdict == "diverged" else " · outputs within relaunch noise") in md
    html = (out / "report.html").read_text()
    assert 'id="divergence"' in html and 'id="headline"' in html and "A‖A′ (floor)" in html


def test_abh_compare_without_scores_has_no_divergence_and_a_missing_floor_is_not_measured(tmp_path):
    from helpers.evals import make_eval

    a = make_eval(tmp_path / "a", [True, False] * 20)
    b = make_eval(tmp_path / "b", [True, True] * 20)
    assert compare_main(["--a", str(a), "--b", str(b), "--out", str(tmp_path / "c1")]) == exitcodes.OK
    assert "divergence" not in read_json(tmp_path / "c1" / "comparison.json")
    assert 'id="divergence"' not in (tmp_path / "c1" / "report.html").read_text()


def test_an_engine_that_cannot_score_gives_not_measured_in_abh_compare(tmp_path):
    test = gsm8k.load(TEST_JSONL, "test")
    with FakeServer() as srv:
        cfg = ClientConfig(url=srv.url, parallel=8)
        for role in ("a", "b"):
            run_eval(test, gsm8k.RecipeConfig(num_questions=6), cfg, tmp_path / role, None, EvalOptions(progress=False))
        score_pass(tmp_path / "a", cfg, tmp_path / "a", ScoringOptions(progress=False))
        score_pass(tmp_path / "a", cfg, tmp_path / "b", ScoringOptions(progress=False, reference_scores=tmp_path / "a"))
    assert compare_main(["--a", str(tmp_path / "a"), "--b", str(tmp_path / "b"), "--out", str(tmp_path / "c")]) == 0
    d = read_json(tmp_path / "c" / "comparison.json")["divergence"]
    assert d["verdict"] == "not_measured" and "per-token logprobs" in d["verdict_reason"]
    assert d["kld_mean"] is None and d["p"] is None
    assert " · outputs not measured**" in (tmp_path / "c" / "comparison.md").read_text()


# ------------------------------------------------------------------------------------------ abh run
#: No run-to-run noise on the logits: each launch draws its noise seed at random, so with noise a test of identical
#: builds would say diverged 5 % of the time (as it should); without, the floor is exactly 0 and the verdicts fixed.
#: 40 questions: with no noise the floor is exactly 0, so the shift is detected on any number of questions, and
#: each scoring pass costs in proportion.
N_RUN = 40
RUN = ("progress=false", f"task.num_questions={N_RUN}", "client.parallel=100", "experiment.repeats=1",
       "experiment.aa_control=false", "stats.margin_pp=2", "engine.logprob_noise=0")
#: B's build differs only in its next-token distributions; the same accuracy as A
SHIFTED = ("arms.b.engine.accuracy=0.93", "+arms.b.engine.logit_shift=0.3",
           "experiment.allowed_differences=[engine.build,engine.logit_shift]")


def _shifted_run(tmp_path: Path) -> tuple[Path, str]:
    """`abh run` of the shifted arms: the run directory and the printed summary."""
    run_dir = tmp_path / "run"
    r = abh_run(f"hydra.run.dir={run_dir}", *RUN, *SHIFTED, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir, r.stdout


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_abh_run_scores_by_default_and_finds_the_divergence(tmp_path, capsys):
    run_dir, stdout = _shifted_run(tmp_path)
    c = read_json(run_dir / "comparison.json")
    d = c["divergence"]
    assert c["verdict"] not in ("improved", "regressed")
    assert d["verdict"] == "diverged" and d["kld_mean"] > 0.01 and d["kld_mean_aa"] == 0, d["verdict_reason"]
    assert d["dirs"] == {"ref": str(run_dir / "evals/a/r1"), "ab": str(run_dir / "evals/b/r1"),
                         "aa": str(run_dir / "evals/aa/r1")}
    assert "  outputs differ beyond relaunch noise (KLD" in stdout and " · outputs differ beyond relaunch noise" in stdout.strip().splitlines()[-1]
    s = read_json(run_dir / "summary.json")
    assert s["divergence"]["verdict"] == "diverged" and s["verdict"] == c["verdict"]
    m = read_json(run_dir / "manifest.json")
    sc = m["scoring"]
    assert {k: v["pass"] for k, v in sc.items()} == {"evals/a/r1": "ref", "evals/b/r1": "ab", "evals/aa/r1": "aa"}
    assert all(v["status"] == "ok" and v["wall_s"] > 0 for v in sc.values())
    # the floor ran on a launch of A that served nothing else: not the reference pass's launch
    assert sc["evals/aa/r1"]["launch"] != sc["evals/a/r1"]["launch"]
    served = {lid for ev in m["evals"].values() for lid in ev.get("launches", [])}
    assert sc["evals/aa/r1"]["launch"] not in served
    assert sc["evals/aa/r1"]["launch"] in {x["id"] for x in m["arms"]["a"]["launches"]}
    assert set(m["evals"]) == {"evals/a/r1", "evals/b/r1"}  # the floor is no accuracy eval
    assert 'id="divergence"' in (run_dir / "report.html").read_text()

    # a rerun keeps the evals and the passes (in this process: no server is needed)
    assert abh_run_here(f"hydra.run.dir={run_dir}", *RUN, *SHIFTED) == 0
    err = capsys.readouterr().err
    assert "scoring evals/aa/r1: already scored, kept" in err
    assert read_json(run_dir / "comparison.json")["divergence"]["kld_mean"] == d["kld_mean"]


@pytest.mark.slow  # three scoring passes again (the default run keeps the passes of a rerun, above)
def test_a_changed_divergence_setting_redoes_only_the_passes(tmp_path, capsys):
    """divergence.* changes no digest: the evals are kept, only the passes are redone (in this process)."""
    run_dir, _ = _shifted_run(tmp_path)
    assert abh_run_here(f"hydra.run.dir={run_dir}", *RUN, *SHIFTED, "divergence.top_k=3") == 0
    err = capsys.readouterr().err
    assert "already complete, kept" in err and "already scored" not in err
    assert read_json(run_dir / "comparison.json")["divergence"]["top_k"] == 3


@pytest.mark.slow  # ~10 s; the default run: indistinguishable in abh compare (above), the floor pass in abh run (above)
def test_abh_run_identical_builds_are_indistinguishable(tmp_path):
    r = abh_run(f"hydra.run.dir={tmp_path / 'same'}", *RUN, "arms.b.engine.accuracy=0.93",
                "experiment.aa_control=true", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    d = read_json(tmp_path / "same" / "comparison.json")["divergence"]
    assert d["verdict"] == "indistinguishable" and d["kld_mean"] == d["kld_mean_aa"] == 0, d["verdict_reason"]
    # with the A/A control, the floor pass goes beside its eval: A vs A' greedy texts are compared too
    assert d["dirs"]["aa"] == str(tmp_path / "same" / "evals/aa/r1") and d["text_questions_aa"] == N_RUN


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_abh_run_without_divergence_scores_nothing(tmp_path, capsys):
    """In this process (the servers are real processes)."""
    code = abh_run_here(f"hydra.run.dir={tmp_path / 'off'}", *RUN, "divergence.enabled=false", "report=false")
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert "divergence" not in read_json(tmp_path / "off" / "comparison.json")
    assert not (tmp_path / "off" / "evals/a/r1/scores.json").exists() and "scoring" not in err


@pytest.mark.slow  # ~25 s; the default run: signals in the other phases (test_run.py), resumed scoring (above)
def test_a_signal_during_scoring_stops_the_servers_and_a_rerun_scores_again(tmp_path):
    run_dir = tmp_path / "run"
    args = [f"hydra.run.dir={run_dir}", "progress=false", "task.num_questions=40", "client.parallel=2",
            "experiment.repeats=1", "experiment.aa_control=false", "engine.latency_s=0.15", "report=false"]
    res = interrupt_run(args, tmp_path, when=lambda: log_has(run_dir, "scoring evals/a/r1"), sig=signal.SIGINT,
                        after_s=0.5)
    assert res.returncode == exitcodes.INTERRUPTED, res.stderr[-2000:]
    assert res.children and res.survivors() == []
    assert "Traceback" not in res.stderr and "servers stopped, results kept" in res.stderr
    assert not (run_dir / "evals/a/r1/scores.parquet").exists()  # a pass is all or nothing
    assert not (run_dir / "evals/a/r1/scores.json").exists()
    r = abh_run(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "evals/a/r1: already complete, kept" in r.stderr
    d = read_json(run_dir / "comparison.json")["divergence"]
    assert d["verdict"] in ("diverged", "indistinguishable") and d["questions"] == 40


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_divergence_switched_off_says_why_before_the_evals(tmp_path, capsys):
    """An experiment whose divergence is off by default (off_reason) says so with the design, before a question."""
    code = abh_run_here(f"hydra.run.dir={tmp_path / 'run'}", "dry_run=true", "divergence.enabled=false",
                        "divergence.off_reason=too slow on this engine")
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    assert "divergence: not measured: too slow on this engine" in out.out + out.err


# ------------------------------------------------------------------------------------------ real llama.cpp
@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.timeout(3600)  # llama-cpp-python ranks the whole vocabulary for every echoed token (~0.1 s of CPU each)
@needs_llamacpp()
def test_cpu_smollm2_kv_q8_keys_diverge_where_accuracy_cannot_tell(tmp_path):
    """Divergence is off by default in cpu_smollm2 (its cost); switched on, it sees the q8_0 keys. Zero shots and
    short answers: every echoed token costs a full ranking of the vocabulary, and the keys part on short contexts
    too (8 questions are what a sign-flip test needs to reach p < 0.05 with a question or two tied)."""
    run_dir = tmp_path / "cpu"
    r = abh_run("experiment=cpu_smollm2", "task.num_questions=8", "task.num_shots=0", "task.max_new_tokens=48",
                "divergence.enabled=true", f"hydra.run.dir={run_dir}", "progress=false", cwd=tmp_path, timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    c = read_json(run_dir / "comparison.json")
    assert c["verdict"] in ("inconclusive", "equivalent", "noninferior")  # accuracy cannot separate the arms
    d = c["divergence"]
    assert d["verdict"] == "diverged", d["verdict_reason"]
    assert d["kld_mean"] > 3 * d["kld_mean_aa"] and d["questions"] >= 5  # 5 sign flips: p >= 1/32
    assert all(read_json(run_dir / rel / "scores.json")["by_ids"] is False
               for rel in ("evals/a/r1", "evals/b/r1", "evals/aa/r1"))  # llama-cpp-python scores text
    assert "outputs differ beyond relaunch noise (KLD" in r.stdout


# ------------------------------------------------------------------------------------------ report safety
def test_model_text_in_the_divergence_section_is_escaped(tmp_path):
    """The most diverging questions show both arms' greedy texts: untrusted, escaped like every other model text,
    with the first diverging token marked by the template, not by the text."""
    from helpers.rundirs import INJECT_INDEX, SCRIPT_ALERT, build_run_dir

    from harness.report import write_markdown, write_report
    from harness.results import schema

    root = build_run_dir(tmp_path / "run", n=40)
    c = schema.load_comparison(root / "comparison.json")
    ref, ab = root / "evals/a/r1", root / "evals/b/r1"
    div = {
        "verdict": "diverged", "verdict_reason": "test", "reference": "a", "kld_mean": 0.02, "kld_mean_aa": 0.0003,
        "p": 0.0001, "p_floor": 0.0001, "p_at_floor": True, "alpha": 0.05, "effect": 0.0197,
        "effect_ci": [0.01, 0.03], "tokens": 400, "questions": 40, "top_k": 20, "same_top_rate": 0.9,
        "same_top_rate_aa": 0.99, "kld_histogram": None, "dirs": {"ref": str(ref), "ab": str(ab), "aa": None},
        "top_questions": [{"question": INJECT_INDEX, "tokens": 12, "kld": 0.05, "kld_aa": 0.001, "d": 0.049,
                           "same_top_rate": 0.8, "rms_dlogprob": None, "text_identical": False,
                           "first_divergence": None, "first_divergence_char": 3, "first_divergence_source": None,
                           "first_divergence_span": None, "text_identical_aa": None, "first_divergence_aa": None}]}
    schema.write_comparison(root / "comparison.json", replace(c, divergence=schema.Divergence.from_doc(div)))
    html = write_report(root).read_text()
    section = html[html.index('id="divergence"'):html.index('id="runs"')]
    assert SCRIPT_ALERT not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section and "&lt;img src=x" in section
    assert section.count('<mark class="fd"') == 2  # A's and B's texts, at the first differing character
    assert 'http-equiv="Content-Security-Policy" content="default-src' in html  # the CSP stays
    assert " · outputs differ beyond relaunch noise" in write_markdown(root).read_text()


# ------------------------------------------------------------------------------------------ sweeps
def test_a_sweep_shows_the_kld_column(tmp_path):
    from harness.analysis.sweep import summarize_sweep
    from harness.report import write_sweep_report
    from harness.report.sweep_text import format_sweep
    from harness.results.schema import write_comparison

    def comparison(div: dict | None) -> Comparison:
        return make_comparison(n=1319, delta=0.0, delta_ci=[-0.01, 0.01], p=0.9, mde=0.01, verdict="inconclusive",
                               alpha=0.05, simulated=True,
                               divergence=None if div is None else {"verdict_reason": "", **div})

    write_comparison(tmp_path / "job0_shift=0.3" / "comparison.json", comparison(
        {"verdict": "diverged", "kld_mean": 0.0231, "kld_mean_aa": 0.00033}))
    write_comparison(tmp_path / "job1_shift=0" / "comparison.json", comparison(
        {"verdict": "indistinguishable", "kld_mean": 0.00033, "kld_mean_aa": 0.00033}))
    write_comparison(tmp_path / "job2_shift=9" / "comparison.json", comparison(
        {"verdict": "not_measured", "kld_mean": None, "kld_mean_aa": None}))
    write_comparison(tmp_path / "job3_off" / "comparison.json", comparison(None))
    s_rec = summarize_sweep(tmp_path, "holm")
    s = doc(s_rec)
    rows = {r["job"]: r for r in s["comparisons"]}
    assert rows["job0_shift=0.3"]["kld"] == 0.0231 and rows["job0_shift=0.3"]["divergence"] == "diverged"
    assert rows["job3_off"]["divergence"] is None
    text = format_sweep(s_rec)
    assert "KLD (A/A)" in text and "0.023 (0.00033) *" in text and "0.00033 (0.00033)  " in text
    assert "not measured" in text and "n/a" in text
    html = write_sweep_report(tmp_path).read_text()
    assert "KLD A‖B (A/A)" in html and "0.023 (0.00033) *" in html


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_the_scoring_passes_take_no_launch_of_their_own_and_the_design_says_so(tmp_path, capsys):
    """One server at a time, a restart per repeat (the seed's design): the passes ride on the evals' launches, the
    floor on the A/A control's first, and every other launch gets one pass (A r2, B r2, A/A r2); the run makes
    exactly the launches the design printed (in this process), and the divergence is tested over launches."""
    run_dir = tmp_path / "restart"
    code = abh_run_here(f"hydra.run.dir={run_dir}", *RUN, "experiment.restart_per_repeat=true",
                        "experiment.concurrent_servers=false", "experiment.repeats=2", "experiment.aa_control=true",
                        "report=false")
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    m = read_json(run_dir / "manifest.json")
    made = [x["id"] for arm in m["arms"].values() for x in arm["launches"]]
    assert len(made) == m["planned_design"]["launches"] == 6  # A 2 + B 2 + A/A 2: no launch for a pass
    assert m["planned_design"]["scoring"] == {"passes": 6, "own_launches": 0, "floor_server": False}
    assert "design: 2 repeat(s) per arm, one server at a time: 6 server launch(es), scoring passes included" in err
    assert "scoring: 6 pass(es) for the divergence" in err and "no launch of their own" in err
    sc = m["scoring"]
    served = {rel: ev["launches"][0] for rel, ev in m["evals"].items()}
    assert set(sc) == {"evals/a/r1", "evals/b/r1", "evals/aa/r1", "evals/a/r2", "evals/b/r2", "evals/aa/r2"}
    assert all(sc[rel]["launch"] == served[rel] for rel in sc)          # each on its eval's launch
    assert len({sc[rel]["launch"] for rel in sc}) == 6                   # one pass per launch
    cost = read_json(run_dir / "summary.json")["cost"]
    assert cost["total"]["launches"] == 6 and cost["total"]["scoring_passes"] == 6 and cost["total"]["scoring_s"] > 0
    div = read_json(run_dir / "comparison.json")["divergence"]
    lt = div["launch_test"]
    assert (lt["launches_a"], lt["launches_b"]) == (3, 2) and div["test"] == lt["method"] and div["p"] == lt["p"]
    assert lt["dirs_a"][0].endswith("evals/aa/r1") and lt["dirs_b"][0].endswith("evals/b/r1")
    assert div["per_question"]["test"].startswith("one-sided sign-flip") and "qualification" not in div
