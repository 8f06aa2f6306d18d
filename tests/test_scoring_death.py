"""A server that dies in the middle of a scoring pass: the pass says so (ServerGone; abh ab and abh run exit 4),
keeps what it scored as a partial pass (``partial: true``, status not_measured), a rerun asks only the questions
it lacks and ends bit-identical to a pass that never stopped; and no divergence verdict rests on a handful of
questions (``divergence.min_scored_share``), whether the server died or answered most requests with errors.
The servers die by the simulator's fault injection (``--crash-after``: after serving N requests), never by a
timer."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest
import requests
from aiohttp import ClientSession, web
from conftest import TEST_JSONL, SimServer
from helpers.aioserver import ThreadedApp
from helpers.docs import divergence_doc as compute_divergence

from harness import exitcodes
from harness.analysis.divergence import compute_divergence as divergence_of
from harness.measure.divergence_pass import ScoringOptions, _read_inputs, score_pass
from harness.measure.evaluation import EvalOptions, run_eval
from harness.results.fileio import read_json
from harness.results.score_blocks import load_scores
from harness.results.token_store import ScoresWriter, scores_status
from harness.serving.client import ClientConfig, ServerGone
from harness.stats.verdict import DEFAULT_MIN_SCORED_SHARE
from harness.tasks import gsm8k
from harness.util.ranges import Range, range_of

N = 20


def _cfg(url: str, parallel: int = 8) -> ClientConfig:
    return ClientConfig(url=url, api="sglang", parallel=parallel, retries=1, backoff_s=0.01)


def _received(s: SimServer) -> int:
    return int(requests.get(s.url + "/get_server_info", timeout=5).json()["requests_received"])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One simulator (a fixed launch noise: every launch of it scores alike), arm A's eval of N questions on it and
    its reference pass."""
    a = SimServer("--build", "a", "--run-seed", "2", "--noise", "launch").wait_ready()
    try:
        ev = tmp_path_factory.mktemp("death") / "a"
        run_eval(gsm8k.load(TEST_JSONL, "test"), gsm8k.RecipeConfig(num_questions=N),
                 ClientConfig(url=a.url, parallel=32), ev, None, EvalOptions(progress=False))
        assert score_pass(ev, _cfg(a.url, 32), ev, ScoringOptions(progress=False, batch=1))["status"] == "ok"
        yield a, ev
    finally:
        a.stop()


def test_a_server_that_dies_mid_pass_leaves_a_partial_pass_that_a_rerun_resumes(served, sim_server, tmp_path):
    a, ev = served
    opts = ScoringOptions(progress=False, batch=1, reference_scores=ev)
    # another launch of the same server serves 6 scoring requests, then its process exits: the rest are refused
    dying = sim_server("--build", "a", "--run-seed", "2", "--noise", "launch", "--crash-after", "6",
                       "--max-running-requests", "2")
    with pytest.raises(ServerGone, match="refuses connections"):
        score_pass(ev, _cfg(dying.url), tmp_path / "b", opts)
    meta = read_json(tmp_path / "b" / "scores.json")
    assert meta["partial"] is True and meta["status"] == "not_measured" and "partial pass" in meta["reason"]
    assert meta["questions"] == 6 and meta["errors"] == 0, meta["error_examples"]  # the refused requests are missing, not errors
    assert meta["missing"] == N - 6 and meta["questions_planned"] == N
    assert scores_status(tmp_path / "b")[0] == "not_measured"
    d = compute_divergence(ev, tmp_path / "b", ev)
    assert d["verdict"] == "not_measured" and "partial pass" in d["verdict_reason"]

    # the rerun (on a live launch of the same server) asks only the missing questions
    before = _received(a)
    resumed = score_pass(ev, _cfg(a.url), tmp_path / "b", opts)
    assert _received(a) - before == N - 6
    assert resumed["status"] == "ok" and resumed["partial"] is False and resumed["missing"] == 0
    assert resumed["questions"] == N and resumed["resumes"] == 1 and resumed["pass_id"] == meta["pass_id"]
    # ... and ends where a pass that never stopped ends, bit for bit
    whole = score_pass(ev, _cfg(a.url), tmp_path / "whole", opts)
    assert whole["questions"] == N
    got, want = load_scores(tmp_path / "b"), load_scores(tmp_path / "whole")
    for col in ("questions", "offsets", "token_id", "logprob", "top_ids", "top_logprobs", "ref_top_logprobs"):
        np.testing.assert_array_equal(getattr(got, col), getattr(want, col), err_msg=col)
    # a complete pass is not asked again
    before = _received(a)
    assert score_pass(ev, _cfg(a.url), tmp_path / "b", opts)["questions"] == N
    assert _received(a) - before == 0


def test_a_reference_pass_that_dies_resumes_with_the_ids_it_tokenized(served, sim_server, tmp_path):
    """The reference pass tokenizes every question once (``score_inputs.parquet``, what the other passes send): a
    partial one keeps its ids, and the resumed pass ends as the unbroken one did (ids, offsets, scores)."""
    a, shared = served
    ev = tmp_path / "a"
    shutil.copytree(shared, ev)
    for name in ("scores.json", "scores.parquet", "score_inputs.parquet"):
        (ev / name).unlink()
    dying = sim_server("--build", "a", "--run-seed", "2", "--noise", "launch", "--crash-after", "7",
                       "--max-running-requests", "2")
    with pytest.raises(ServerGone):
        score_pass(ev, _cfg(dying.url), ev, ScoringOptions(progress=False, batch=1))
    meta = read_json(ev / "scores.json")
    assert meta["partial"] is True and meta["by_ids"] is True and 0 < meta["questions"] < N
    assert (ev / "score_inputs.parquet").is_file()
    before = _received(a)
    resumed = score_pass(ev, _cfg(a.url), ev, ScoringOptions(progress=False, batch=1))
    # the missing questions, and the one request that asks whether the server scores ids
    assert _received(a) - before == meta["missing"] + 1
    assert resumed["questions"] == N and resumed["resumes"] == 1
    got, want = load_scores(ev), load_scores(shared)
    for col in ("questions", "offsets", "token_id", "logprob", "top_ids", "top_logprobs", "text_offset"):
        np.testing.assert_array_equal(getattr(got, col), getattr(want, col), err_msg=col)
    assert _read_inputs(ev / "score_inputs.parquet") == _read_inputs(shared / "score_inputs.parquet")


def test_a_reference_pass_whose_server_goes_while_it_tokenizes_resumes_as_unbroken(served, tmp_path, monkeypatch):
    """The reference pass tokenizes its first chunk of questions, then the others while it scores: the server gone
    on a later chunk's /tokenize stops it as a dying server stops its scoring (ServerGone, a partial pass with the
    ids it has), and the resumed pass ends as the unbroken one did."""
    import harness.measure.divergence_pass as dp

    a, shared = served
    ev = tmp_path / "a"
    shutil.copytree(shared, ev)
    for name in ("scores.json", "scores.parquet", "score_inputs.parquet"):
        (ev / name).unlink()
    calls: list[int] = []

    class Dying(dp.Client):  # type: ignore[misc,valid-type]
        async def tokenize_all(self, texts, special):  # type: ignore[no-untyped-def]
            calls.append(len(texts))
            if len(calls) == 3:  # the first chunk's prompts and references, then the server is gone
                raise ServerGone("the server went away")
            return await super().tokenize_all(texts, special)

    monkeypatch.setattr(dp, "TOKENIZE_CHUNK", 4)
    monkeypatch.setattr(dp, "Client", Dying)
    with pytest.raises(ServerGone, match="went away"):
        score_pass(ev, _cfg(a.url), ev, ScoringOptions(progress=False, batch=1))
    meta = read_json(ev / "scores.json")
    assert meta["partial"] is True and meta["by_ids"] is True and meta["missing"] > 0
    assert meta["questions"] < N and (ev / "score_inputs.parquet").is_file()
    resumed = score_pass(ev, _cfg(a.url), ev, ScoringOptions(progress=False, batch=1))
    assert resumed["status"] == "ok" and resumed["questions"] == N and resumed["resumes"] == 1
    assert resumed["questions_planned"] == read_json(shared / "scores.json")["questions_planned"]
    got, want = load_scores(ev), load_scores(shared)
    for col in ("questions", "offsets", "token_id", "logprob", "top_ids", "top_logprobs", "text_offset"):
        np.testing.assert_array_equal(getattr(got, col), getattr(want, col), err_msg=col)
    assert _read_inputs(ev / "score_inputs.parquet") == _read_inputs(shared / "score_inputs.parquet")


def test_a_pass_whose_reference_pass_changed_is_scored_afresh(served, tmp_path):
    """The rows a pass keeps are those of the reference pass it scored against: a new reference pass (its
    ``pass_id``) makes the next pass start over."""
    a, shared = served
    ev = tmp_path / "a"
    shutil.copytree(shared, ev)
    opts = ScoringOptions(progress=False, batch=1, reference_scores=ev)
    first = score_pass(ev, _cfg(a.url), tmp_path / "b", opts)
    (ev / "scores.json").unlink()  # the reference pass is scored anew
    assert score_pass(ev, _cfg(a.url, 32), ev, ScoringOptions(progress=False, batch=1))["status"] == "ok"
    before = _received(a)
    again = score_pass(ev, _cfg(a.url), tmp_path / "b", opts)
    assert again["pass_id"] != first["pass_id"] and again["resumes"] == 0 and again["questions"] == N
    assert _received(a) - before == N


class Failing(ThreadedApp):
    """A proxy in front of a simulator that answers HTTP 500 to the scoring requests after the first ``keep``,
    up to ``fail`` of them (a live server whose requests error), and passes everything else on."""

    def __init__(self, target: str, keep: int, fail: int) -> None:
        super().__init__()
        self.target, self.keep, self.fail, self.scoring = target, keep, fail, 0

    def routes(self, app: web.Application) -> None:
        async def any_(request: web.Request) -> web.Response:
            body = await request.read()
            if request.method == "POST" and request.path == "/generate":
                self.scoring += 1
                if self.keep < self.scoring <= self.keep + self.fail:
                    return web.json_response({"error": "injected"}, status=500)
            async with ClientSession() as s, s.request(request.method, self.target + request.path, data=body,
                                                       headers={"Content-Type": "application/json"}) as r:
                return web.Response(body=await r.read(), status=r.status, content_type="application/json")

        app.router.add_route("*", "/{tail:.*}", any_)


def test_a_pass_with_many_request_errors_gives_no_verdict_and_the_rerun_asks_only_those(served, tmp_path):
    """A live server answers most scoring requests with an error: the pass is whole (status ok) but counts them,
    the divergence says too few questions were scored, and the next pass into it asks only the failed ones."""
    a, ev = served
    opts = ScoringOptions(progress=False, batch=1, reference_scores=ev)
    with Failing(a.url, keep=4, fail=N - 6) as proxy:
        meta = score_pass(ev, replace(_cfg(proxy.url), retries=0), tmp_path / "b", opts)
    assert meta["status"] == "ok" and meta["errors"] == N - 6 and meta["questions"] == 6, meta
    d = compute_divergence(ev, tmp_path / "b", ev)
    assert d["verdict"] == "not_measured" and f"only 6 of the {N} questions" in d["verdict_reason"]
    before = _received(a)
    again = score_pass(ev, _cfg(a.url), tmp_path / "b", opts)
    assert _received(a) - before == N - 6 and again["errors"] == 0 and again["questions"] == N


# ------------------------------------------------------------------------------------------ too few questions
def _pass(root, questions, errors=(), planned=None, shift=0.0):
    rng = np.random.default_rng(7)
    with ScoresWriter(root, top_k=3, meta={} if planned is None else {"questions_planned": planned}) as w:
        for q in questions:
            lps = np.sort(np.log(rng.dirichlet(np.ones(3), 4)), axis=1)[:, ::-1] - shift * (q % 3)
            w.add(q, np.arange(4) + 10, lps[:, 0], np.tile([10, 11, 12], (4, 1)), lps)
        for q in errors:
            w.record_error(q, "HTTP 500: simulated fault")
    return root


def test_a_divergence_from_a_handful_of_questions_is_not_measured(tmp_path):
    """B's server answered 2 of 40 scoring requests (alive, every other one an error): no verdict, and the
    reason says how many were scored; a pass that did not record its plan counts its errors instead."""
    ref = _pass(tmp_path / "ref", range(40), planned=N)
    ab = _pass(tmp_path / "ab", [0, 1], errors=range(2, 40), shift=0.5)
    aa = _pass(tmp_path / "aa", range(40))
    d = divergence_of(ref, ab, aa, n_resamples=99)
    assert d.verdict == "not_measured" and d.questions == 0
    assert "only 2 of the 40 questions" in d.verdict_reason and "divergence.min_scored_share 0.95" in d.verdict_reason
    assert divergence_of(ref, ab, aa, n_resamples=99, min_scored_share=0.0).verdict != "not_measured"
    # the reference pass's own errors count: 38 scored of 40 asked is 95 %, 37 is too few
    assert divergence_of(_pass(tmp_path / "r38", range(38), errors=(38, 39)), _pass(tmp_path / "b38", range(38)),
                         aa, n_resamples=99).verdict != "not_measured"
    d = divergence_of(_pass(tmp_path / "r37", range(37), errors=(37, 38, 39)), _pass(tmp_path / "b37", range(37)),
                      aa, n_resamples=99)
    assert d.verdict == "not_measured" and "only 37 of the 40" in d.verdict_reason


def test_min_scored_share_is_a_config_key_with_a_range_and_a_default():
    from harness.config import DivergenceConfig

    assert DivergenceConfig().min_scored_share == DEFAULT_MIN_SCORED_SHARE == 0.95
    assert range_of(DivergenceConfig, "min_scored_share") == Range(0, 1)



# ------------------------------------------------------------------------------------------ whole runs (slow)
@pytest.mark.slow  # ~6 s, two abh ab runs; the default run: the pass itself dies and resumes (above)
def test_abh_ab_whose_server_dies_mid_scoring_exits_4_and_the_rerun_asks_only_the_rest(sim_server, tmp_path, capsys,
                                                                                     monkeypatch):
    from test_ab import ab_here

    from harness.cli import ab as ab_cli

    overrides = ab_cli.overrides  # the client's retries as they are, with a backoff of milliseconds
    # one question per scoring request: the server's crash is counted in requests
    monkeypatch.setattr(ab_cli, "overrides", lambda *args: [*overrides(*args), "client.backoff_s=0.01",
                                                            "divergence.batch=1"])
    a = sim_server("--accuracy", "0.9", "--run-seed", "1")
    a2 = sim_server("--accuracy", "0.9", "--run-seed", "3")
    # B's warm-up and its eval's 40 questions, then 6 scoring requests: its process exits in the compared pass
    b = sim_server("--accuracy", "0.9", "--run-seed", "2", "--crash-after", str(1 + N + 6),
                   "--max-running-requests", "2")
    root = tmp_path / "run"
    code, _, err = ab_here(capsys, a.url, b.url, root, "--aa", a2.url, "--num-questions", str(N))
    assert code == exitcodes.SERVER_FAILURE, err[-3000:]
    [line] = [ln for ln in err.splitlines() if ln.startswith("[abh] error:")]
    assert f"server of arm b (launch url:{b.url}) failed during scoring evals/b/r1" in line
    assert "refuses connections" in line and "rerun the same command to resume" in line and "Traceback" not in err
    meta = read_json(root / "evals/b/r1/scores.json")
    assert meta["partial"] is True and meta["questions"] == 6 and meta["missing"] == N - 6
    assert read_json(root / "manifest.json")["scoring"]["evals/b/r1"]["status"] == "failed"
    assert not (root / "comparison.json").exists()  # no verdict from a run whose server died

    b.stop()
    again = SimServer("--accuracy", "0.9", "--run-seed", "2", port=b.port).wait_ready()  # the same URL, restarted
    try:
        code, out, err = ab_here(capsys, a.url, again.url, root, "--aa", a2.url, "--num-questions", str(N))
        assert code == exitcodes.OK, err[-3000:]
        assert _received(again) == N - 6  # its eval is complete: only the missing scoring requests
    finally:
        again.stop()
    assert "scoring evals/a/r1: already scored, kept" in err
    d = read_json(root / "comparison.json")["divergence"]
    assert d["verdict"] in ("diverged", "indistinguishable") and d["questions"] == N, d["verdict_reason"]
    resumed = read_json(root / "evals/b/r1/scores.json")
    assert resumed["resumes"] == 1 and resumed["partial"] is False and resumed["pass_id"] == meta["pass_id"]


@pytest.mark.slow  # a whole abh run with three launched servers; the default run: the pass itself (above)
def test_abh_run_whose_server_dies_mid_scoring_exits_4_with_its_log(tmp_path, capsys):
    from helpers.runs import ONE_EACH, abh_run_here

    run_dir = tmp_path / "run"
    # arm b's warm-up and 40 questions, then 6 scoring requests
    args = (f"hydra.run.dir={run_dir}", "progress=false", "report=false", f"task.num_questions={N}",
            "client.parallel=40", "client.backoff_s=0.01", "divergence.batch=1", *ONE_EACH)  # requests = questions
    code = abh_run_here(*args, f"+arms.b.engine.crash_after={1 + N + 6}")
    err = capsys.readouterr().err
    assert code == exitcodes.SERVER_FAILURE, err[-3000:]
    assert "server of arm b (launch b-1) failed during scoring evals/b/r1" in err
    assert "last lines of its log" in err and "simulated crash" in err and "Traceback" not in err
    meta = read_json(run_dir / "evals/b/r1/scores.json")
    assert meta["partial"] is True and 0 < meta["questions"] < N
    code = abh_run_here(*args)  # the fault is no part of the config: the rerun resumes
    err = capsys.readouterr().err
    assert code == exitcodes.OK, err[-3000:]
    assert "evals/b/r1: already complete, kept" in err and "scoring evals/a/r1: already scored, kept" in err
    resumed = read_json(run_dir / "evals/b/r1/scores.json")
    assert resumed["resumes"] == 1 and resumed["questions"] == N and resumed["partial"] is False
    d = read_json(run_dir / "comparison.json")["divergence"]
    assert d["verdict"] in ("diverged", "indistinguishable") and d["questions"] == N, d["verdict_reason"]
