"""`abh eval` against the simulated engine: bookkeeping, resume, retries, errors apart from wrong answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from aiohttp import web
from conftest import TEST_JSONL, free_port
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.measure.evaluation import run_eval
from harness.results.eval_store import load_eval
from harness.results.fileio import read_jsonl
from harness.results.prompt_store import eval_prompts
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k
from harness.tasks.gsm8k import RecipeConfig


@pytest.fixture(scope="module")
def test_set():
    return gsm8k.load(TEST_JSONL)


def abh(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli.main", *args], capture_output=True, text=True, **kw)


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_full_1319_at_parallel_1319_bookkeeping(sim_server, tmp_path):
    s = sim_server("--accuracy", "0.8", "--run-seed", "3")
    out = tmp_path / "ev"
    r = abh("eval", "--url", s.url, "--out", str(out), "--data", str(TEST_JSONL), "--no-progress")
    assert r.returncode == 0, r.stderr
    meta, samples, summary = load_eval(out)
    assert [x.index for x in samples] == list(range(1319))
    rows = read_jsonl(out / "samples.jsonl")
    assert len(rows) == 1319 and len({x["index"] for x in rows}) == 1319
    prompts = list(eval_prompts(out))  # each text once in the eval's text store, named by hash from prompts.jsonl
    assert len(prompts) == len(read_jsonl(out / "prompts.jsonl")) == 1319
    task = gsm8k.GSM8K(gsm8k.load(TEST_JSONL), RecipeConfig())
    by_index = {p["index"]: p for p in prompts}
    for q in task.questions[:50]:
        assert by_index[q.index]["prompt"] == q.prompt
    assert summary["n"] == 1319 and summary["errors"] == 0 and summary["complete"]
    assert summary["correct"] == sum(1 for x in samples if x.correct)
    assert summary["accuracy"] == pytest.approx(summary["correct"] / 1319)
    assert 0.7 < summary["accuracy"] < 0.9
    assert summary["simulated"] is True and meta["simulated"] is True
    assert summary["schema_version"] == 1 and summary["dataset_sha256"] == gsm8k.CANONICAL_TEST_HASH
    assert summary["output_throughput"] > 0 and summary["latency_s"] > 0
    assert "Accuracy:" in r.stdout and "Errors: 0/1319" in r.stdout
    # every row parsed as SGLang would
    for x in samples[:100]:
        assert x.pred == gsm8k.get_answer_value(x.output) and x.correct == (x.pred == x.label)


@pytest.mark.slow  # a whole run of processes: the Ctrl-C/SIGTERM mid-eval resume tests stay in the default run
def test_killed_midway_resumes_without_loss_or_duplicates(sim_server, tmp_path):
    s = sim_server("--accuracy", "0.9", "--latency-s", "0.05", "--max-running-requests", "20")
    out = tmp_path / "ev"
    cmd = [sys.executable, "-m", "harness.cli.main", "eval", "--url", s.url, "--out", str(out), "--data",
           str(TEST_JSONL), "--no-progress", "--num-questions", "200", "--parallel", "200"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        if (out / "samples.jsonl").exists() and len(read_jsonl(out / "samples.jsonl")) >= 30:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    partial = read_jsonl(out / "samples.jsonl")
    assert 0 < len(partial) < 200
    # a torn last line, as a crash mid-write leaves it
    with (out / "samples.jsonl").open("a") as f:
        f.write('{"index": 199, "prompt_sha')
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rows = read_jsonl(out / "samples.jsonl")
    assert sorted(x["index"] for x in rows) == list(range(200))
    assert len(read_jsonl(out / "prompts.jsonl")) == 200
    meta, samples, summary = load_eval(out)
    assert meta["resumes"] == 1 and summary["resumed"] and summary["complete"]
    # what was on disk before the kill is kept as it was
    kept = {x["index"]: x for x in rows}
    for x in partial:
        assert kept[x["index"]] == x


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_resume_refuses_a_different_question_set(sim_server, tmp_path):
    s = sim_server()
    out = tmp_path / "ev"
    base = ["eval", "--url", s.url, "--out", str(out), "--data", str(TEST_JSONL), "--no-progress"]
    assert abh(*base, "--num-questions", "5").returncode == 0
    r = abh(*base, "--num-questions", "6")
    assert r.returncode == exitcodes.BAD_CONFIG
    assert "already holds an eval with a different" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_5xx_bursts_are_retried(sim_server, tmp_path, test_set):
    s = sim_server("--error-rate", "0.5", "--malformed-rate", "0.1", "--run-seed", "1")
    out = tmp_path / "ev"
    summary = run_eval(test_set, RecipeConfig(num_questions=200),
                       ClientConfig(url=s.url, parallel=200, retries=20, backoff_s=0.001), out)
    _, samples, _ = load_eval(out)
    assert summary["errors"] == 0, [x.error for x in samples if x.error][:3]
    assert max(x.attempts for x in samples) > 1  # retries happened
    assert sum(x.attempts for x in samples) > 250


class FourXX:
    """A server that answers 400 to /generate and counts the requests."""

    def __init__(self, status: int = 400):
        self.status, self.count = status, 0

    def app(self) -> web.Application:
        async def generate(request: web.Request) -> web.Response:
            self.count += 1
            return web.json_response({"error": "unknown sampling param"}, status=self.status)

        async def info(request: web.Request) -> web.Response:
            return web.json_response({"model_path": "x"})

        a = web.Application()
        a.router.add_post("/generate", generate)
        a.router.add_get("/get_model_info", info)
        return a


def _serve_in_thread(app: web.Application, port: int):
    import asyncio
    import threading

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    listening = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        listening.set()
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert listening.wait(60), "the test server never listened"  # the event, not a guess at how long it takes
    return loop, runner


def test_4xx_is_not_retried_and_errors_are_not_wrong_answers(tmp_path, test_set):
    srv = FourXX(400)
    port = free_port()
    loop, runner = _serve_in_thread(srv.app(), port)
    try:
        out = tmp_path / "ev"
        summary = run_eval(test_set, RecipeConfig(num_questions=10),
                           ClientConfig(url=f"http://127.0.0.1:{port}", parallel=10, retries=5, backoff_s=0.01),
                           out, opts=None)
    finally:
        import asyncio

        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
    # 1 warm-up + 10 questions, each sent exactly once
    assert srv.count == 11
    _, samples, _ = load_eval(out)
    assert all(x.attempts == 1 and x.error and "HTTP 400" in x.error for x in samples)
    assert all(x.correct is None for x in samples)  # an error is never a wrong answer
    assert summary["errors"] == 10 and summary["correct"] == 0 and summary["accuracy"] is None


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_errors_recorded_then_retried_on_rerun(sim_server, tmp_path, test_set):
    s = sim_server("--error-rate", "1.0")
    out = tmp_path / "ev"
    summary = run_eval(test_set, RecipeConfig(num_questions=20),
                       ClientConfig(url=s.url, parallel=20, retries=1, backoff_s=0.01), out)
    assert summary["errors"] == 20 and summary["accuracy"] is None and summary["answered"] == 0
    good = sim_server("--accuracy", "0.9")
    summary = run_eval(test_set, RecipeConfig(num_questions=20), ClientConfig(url=good.url, parallel=20), out)
    assert summary["errors"] == 0 and summary["answered"] == 20
    assert len(read_jsonl(out / "samples.jsonl")) == 20


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_hang_is_bounded_by_the_request_timeout(sim_server, tmp_path, test_set):
    s = sim_server("--hang-after", "6")
    out = tmp_path / "ev"
    t0 = time.monotonic()
    summary = run_eval(test_set, RecipeConfig(num_questions=10),
                       ClientConfig(url=s.url, parallel=10, retries=0, request_timeout_s=1.5), out)
    assert time.monotonic() - t0 < 20
    assert summary["errors"] >= 5 and summary["answered"] + summary["errors"] == 10
    _, samples, _ = load_eval(out)
    assert any("Timeout" in (x.error or "") for x in samples)


def test_openai_api(sim_server, tmp_path, test_set):
    s = sim_server("--accuracy", "0.9")
    out = tmp_path / "ev"
    summary = run_eval(test_set, RecipeConfig(num_questions=30),
                       ClientConfig(url=s.url, api="openai", parallel=30), out)
    assert summary["errors"] == 0 and summary["answered"] == 30 and summary["accuracy"] > 0.6


def test_bad_input_gives_one_clear_message(tmp_path):
    r = abh("eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "x"), "--data", str(tmp_path / "no.jsonl"))
    assert r.returncode == exitcodes.BAD_CONFIG and "not found" in r.stderr and "Traceback" not in r.stderr
    r = abh("eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "x"), "--data", str(TEST_JSONL),
            "--parallel", "0")
    assert r.returncode == exitcodes.BAD_CONFIG and "parallel" in r.stderr


def test_no_heavy_imports_on_the_eval_path():
    code = ("import sys, harness.cli.main, harness.measure.evaluation, harness.serving.client, harness.tasks.gsm8k, harness.results.eval_store;"
            "bad=[m for m in ('matplotlib','pandas','scipy','datasets','pyarrow','hydra') if m in sys.modules];"
            "print(bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert json.loads(r.stdout.replace("'", '"')) == []


@pytest.mark.parametrize("sig", [signal.SIGINT,
                                 # SIGTERM mid-eval: in the default run at the `abh run` level (test_run.py)
                                 pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_ctrl_c_or_sigterm_mid_eval_keeps_answers_and_exits_resumable(sim_server, tmp_path, sig):
    s = sim_server("--accuracy", "0.9", "--latency-s", "0.05", "--max-running-requests", "10")
    out = tmp_path / "ev"
    cmd = [sys.executable, "-m", "harness.cli.main", "eval", "--url", s.url, "--out", str(out), "--data",
           str(TEST_JSONL), "--no-progress", "--num-questions", "150", "--parallel", "150"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        if (out / "samples.jsonl").exists() and len(read_jsonl(out / "samples.jsonl")) >= 15:
            break
        time.sleep(0.05)
    p.send_signal(sig)
    _, err = p.communicate(timeout=PATIENCE_S)
    assert p.returncode == 128 + sig, err
    assert "Rerun the same command to resume" in err and "Traceback" not in err
    kept = read_jsonl(out / "samples.jsonl")
    assert 0 < len(kept) < 150 and all(x["error"] is None for x in kept)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and "interrupted" in summary["aborted"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(x["index"] for x in read_jsonl(out / "samples.jsonl")) == list(range(150))


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_resume_records_each_session_and_refuses_another_api(sim_server, tmp_path, test_set):
    s1 = sim_server("--accuracy", "0.9", "--build", "one")
    out = tmp_path / "ev"
    run_eval(test_set, RecipeConfig(num_questions=20), ClientConfig(url=s1.url, parallel=20), out)
    # drop half the answers, as an interruption would, then resume on another server instance
    rows = read_jsonl(out / "samples.jsonl")[:10]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s2 = sim_server("--accuracy", "0.9", "--build", "two")
    summary = run_eval(test_set, RecipeConfig(num_questions=20), ClientConfig(url=s2.url, parallel=20), out)
    meta, samples, _ = load_eval(out)
    assert [x["url"] for x in meta["sessions"]] == [s1.url, s2.url]
    assert [x["server"]["build"] for x in meta["sessions"]] == ["one", "two"]
    assert summary["output_throughput"] == pytest.approx(summary["output_tokens"] / summary["latency_s"])
    r = abh("eval", "--url", s2.url, "--api", "openai", "--out", str(out), "--data", str(TEST_JSONL),
            "--num-questions", "20", "--no-progress")
    assert r.returncode == exitcodes.BAD_CONFIG and "different api ('sglang' -> 'openai')" in r.stderr


def test_too_many_questions_is_refused_before_any_request(tmp_path):
    r = abh("eval", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "x"), "--data", str(TEST_JSONL),
            "--num-questions", "5000")
    assert r.returncode == exitcodes.BAD_CONFIG and "5000 questions asked for; the test set has 1319" in r.stderr
    assert not (tmp_path / "x").exists()


def test_default_data_is_the_embedded_set(sim_server, tmp_path):
    s = sim_server("--accuracy", "0.9")
    r = abh("eval", "--url", s.url, "--out", str(tmp_path / "x"), "--num-questions", "5", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "x" / "eval.json").read_text())["dataset_source"] == str(TEST_JSONL.resolve())


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_server_that_dies_under_abh_eval_is_a_server_failure_not_errors(sim_server, tmp_path):
    s = sim_server("--accuracy", "0.9", "--crash-after", "60", "--latency-s", "0.01", "--max-running-requests", "8")
    out = tmp_path / "ev"
    r = abh("eval", "--url", s.url, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", "300",
            "--parallel", "300", "--retries", "1", "--no-progress")
    assert r.returncode == exitcodes.SERVER_FAILURE, r.stderr[-2000:]
    assert "refuses connections" in r.stderr
    rows = read_jsonl(out / "samples.jsonl")
    assert 0 < len(rows) < 300
    assert all(x["error"] is None for x in rows)  # the rest are missing (sent again on resume), not errors
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == 0 and summary["missing"] == 300 - len(rows)
