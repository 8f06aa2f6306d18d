"""Hostile servers (issue 22, items 1, 4, 5, 9, 10): whatever one answer is, it is that request's error (kept,
retried, counted), never the eval's; nothing huge is held; a trickle is cut; Retry-After is honoured; nothing a
server sends reaches the terminal raw. Real client, real (hand-rolled) HTTP server: tests/helpers/faultserver.py."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import TEST_JSONL
from helpers.faultserver import ANSI, FaultServer

from harness import exitcodes
from harness.cli.main import main as abh
from harness.results.eval_store import load_samples
from harness.serving.client import Client, ClientConfig, Reply, retry_after_s

SAMPLING = {"max_new_tokens": 512, "temperature": 0.0, "top_p": 1.0, "n": 1, "stop": [], "frequency_penalty": 0.0,
            "presence_penalty": 0.0}


def generate(url: str, n: int = 1, **cfg: object) -> list[Reply]:
    """``n`` generations through the real client (fast retries unless told otherwise)."""
    async def go() -> list[Reply]:
        settings = {"retries": 1, "backoff_s": 0.001, **cfg}
        async with Client(ClientConfig(url=url, **settings)) as c:  # type: ignore[arg-type]
            body = c.api.generation_body("Question: 1 + 1?\nAnswer:", SAMPLING)
            return list(await asyncio.gather(*(c.generate(body) for _ in range(n))))

    return asyncio.run(go())


def abh_eval(url: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    """``abh eval`` in this process (its exit code, stdout and stderr, as a command's)."""
    out_buf, err_buf = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out_buf), contextlib.redirect_stderr(err_buf):
        code = abh(["eval", "--url", url, "--out", str(out), "--data", str(TEST_JSONL), "--no-progress", *args])
    return subprocess.CompletedProcess([], code, out_buf.getvalue(), err_buf.getvalue())


# ------------------------------------------------------------------------------------------ item 1
MALFORMED = [
    ("bad_chunk", {}, "chunk"),
    ("truncated", {}, "ClientPayloadError"),
    ("meta", {"value": 7}, "meta_info is not an object: 7"),
    ("meta", {"value": [1]}, "meta_info is not an object: [1]"),
    ("tokens", {"value": "12"}, "completion_tokens is not a whole number >= 0: '12'"),
    ("tokens", {"value": 1.5}, "completion_tokens is not a whole number >= 0: 1.5"),
    ("tokens", {"value": -3}, "completion_tokens is not a whole number >= 0: -3"),
    ("tokens", {"value": True}, "completion_tokens is not a whole number >= 0: True"),
    ("finish", {"value": {"type": 5}}, "finish_reason is not a string: 5"),
    ("deep", {}, "nested too deep"),
]


@pytest.mark.parametrize("mode,kw,fragment", MALFORMED, ids=[f"{m}-{kw.get('value', '')}" for m, kw, _ in MALFORMED])
def test_a_malformed_answer_is_that_requests_error_and_retried(mode, kw, fragment):
    with FaultServer(mode, **kw) as srv:
        (reply,) = generate(srv.url)
    assert reply.error is not None and fragment in reply.error, reply.error
    assert reply.attempts == 2 and reply.text is None  # retried, then given up: an error, not an answer
    assert reply.completion_tokens is None


def test_an_integral_float_token_count_is_an_integer():
    with FaultServer("tokens", value=12.0) as srv:
        (reply,) = generate(srv.url)
    assert reply.error is None and reply.completion_tokens == 12 and isinstance(reply.completion_tokens, int)


def test_openai_usage_of_the_wrong_type_is_malformed():
    with FaultServer("tokens", value="many") as srv:
        (reply,) = generate(srv.url, api="openai", model="m")
    assert "usage.completion_tokens is not a whole number" in reply.error


@pytest.mark.parametrize("mode,kw", [("bad_chunk", {}), ("meta", {"value": 7}), ("tokens", {"value": "abc"}),
                                     ("deep", {})])
def test_abh_eval_keeps_counts_and_resumes_past_malformed_answers(mode, kw, tmp_path):
    out = tmp_path / "ev"
    with FaultServer(mode, every=4, **kw) as srv:  # the warm-up and every 4th question
        r = abh_eval(srv.url, out, "--num-questions", "12", "--parallel", "3", "--retries", "0")
    assert r.returncode == exitcodes.TOO_MANY_ERRORS, r.stderr
    assert "Traceback" not in r.stderr
    rows = load_samples(out)
    assert len(rows) == 12 and 1 <= sum(x.error is not None for x in rows) <= 4
    assert all(x.completion_tokens is None or isinstance(x.completion_tokens, int) for x in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == sum(x.error is not None for x in rows) and summary["complete"] is True
    with FaultServer("ok") as srv:  # the rerun sends the failed questions again, and the summary adds up
        r = abh_eval(srv.url, out, "--num-questions", "12", "--parallel", "3", "--retries", "0")
    assert r.returncode == exitcodes.OK, r.stderr
    assert json.loads((out / "summary.json").read_text())["errors"] == 0


# ------------------------------------------------------------------------------------------ item 4
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_answer_larger_than_the_request_can_need_is_refused_unread(chunked):
    with FaultServer("huge", size=8 * 1024 * 1024, chunked=chunked) as srv:
        t0 = time.monotonic()
        (reply,) = generate(srv.url, retries=0)
    assert reply.error is not None and reply.error.startswith("response too large"), reply.error
    assert ("8388" in reply.error) != chunked  # the size when the server said it, else the cap passed
    assert time.monotonic() - t0 < 5


def test_the_body_cap_is_derived_from_the_request_and_configurable():
    async def go(url: str, max_new: int, per_token: int) -> Reply:
        async with Client(ClientConfig(url=url, retries=0, max_bytes_per_token=per_token)) as c:
            return await c.generate(c.api.generation_body("x", {**SAMPLING, "max_new_tokens": max_new}))

    with FaultServer("huge", size=3 * 1024 * 1024) as srv:
        assert asyncio.run(go(srv.url, 512, 1024)).error.startswith("response too large")
        assert asyncio.run(go(srv.url, 3000, 1024)).error is None  # 3000 tokens may need 3 MiB
        assert asyncio.run(go(srv.url, 512, 8192)).error is None  # a more generous cap
    with pytest.raises(ValueError, match="max_bytes_per_token must be >= 1"):
        ClientConfig(url="http://127.0.0.1:1", max_bytes_per_token=0)


# ------------------------------------------------------------------------------------------ item 5
def test_a_trickled_body_is_cut_at_the_read_deadline():
    with FaultServer("trickle", rate=10) as srv:
        t0 = time.monotonic()
        (reply,) = generate(srv.url, read_timeout_s=0.5)
    assert "not complete 0.5 s after the headers" in reply.error and reply.attempts == 2
    assert time.monotonic() - t0 < 5


def test_the_watchdog_counts_answers_not_health_checks():
    """A server whose /health answers but which answers no request: stalled after progress_timeout_s (it used to
    reset the clock on every healthy probe and wait for the request timeout, an hour by default)."""
    async def go(url: str) -> tuple[str, float]:
        cfg = ClientConfig(url=url, stall_timeout_s=0.3, progress_timeout_s=1.5, health_timeout_s=1)
        async with Client(cfg) as c:
            req = asyncio.ensure_future(c.generate(c.api.generation_body("x", SAMPLING)))
            t0 = time.monotonic()
            reason = await asyncio.wait_for(c.watch_stall(), 10)
            req.cancel()
            await asyncio.gather(req, return_exceptions=True)
            return reason, time.monotonic() - t0

    with FaultServer("hang") as srv:
        reason, took = asyncio.run(go(srv.url))
    assert "although its health endpoint answers: the server is not serving" in reason
    assert 1.4 < took < 5
    assert srv.requests.count("GET /health_generate") >= 1  # it did ask, and the answer did not reset the clock


def test_progress_timeout_is_a_flag_of_abh_eval(tmp_path):
    """``--progress-timeout S``: a server that takes health checks but answers nothing stops a CI job after S
    seconds (exit 4), not the 20 minutes of the default; out of range is the field's own check, exit 2."""
    with FaultServer("hang") as srv:
        r = abh_eval(srv.url, tmp_path / "ev", "--num-questions", "2", "--stall-timeout", "0",
                     "--progress-timeout", "0.5")
    assert r.returncode == exitcodes.SERVER_FAILURE, r.stderr
    assert "although its health endpoint answers: the server is not serving" in r.stderr
    r = abh_eval("http://127.0.0.1:9", tmp_path / "ev2", "--progress-timeout", "-1")
    assert r.returncode == exitcodes.BAD_CONFIG and "--progress-timeout must be >= 0, not -1.0" in r.stderr


def test_progress_timeout_is_a_flag_of_abh_ab(tmp_path):
    """The same flag of ``abh ab``: the run's ``client.progress_timeout_s``, its range checked before any server
    is asked anything (the whole run against a hung server: the slow test below)."""
    from harness.cli import ab as ab_cli

    args = ab_cli._parser().parse_args(["http://h:1", "http://h:2", "--out", "o", "--progress-timeout", "30"])
    assert "client.progress_timeout_s=30.0" in ab_cli.overrides(args, ["http://h:1", "http://h:2"], ["A", "B"])
    err_buf = io.StringIO()
    with contextlib.redirect_stderr(err_buf), pytest.raises(SystemExit) as e:
        abh(["ab", "http://127.0.0.1:9", "http://127.0.0.1:8", "--out", str(tmp_path / "ab"),
             "--progress-timeout", "nan"])
    assert e.value.code == exitcodes.BAD_CONFIG and "--progress-timeout must be a finite number" in err_buf.getvalue()
    assert not (tmp_path / "ab").exists()


@pytest.mark.slow  # a whole abh ab run; the flag's plumbing and abh eval's are in the default run
def test_abh_ab_progress_timeout_stops_a_server_that_answers_health_only(tmp_path):
    with FaultServer("hang") as srv, FaultServer("hang") as other:
        err_buf = io.StringIO()
        with contextlib.redirect_stderr(err_buf), contextlib.redirect_stdout(io.StringIO()):
            code = abh(["ab", srv.url, other.url, "--out", str(tmp_path / "ab"), "--data", str(TEST_JSONL),
                        "--num-questions", "2", "--no-progress", "--stall-timeout", "0", "--progress-timeout", "0.5"])
    assert code == exitcodes.SERVER_FAILURE, err_buf.getvalue()
    assert "although its health endpoint answers" in err_buf.getvalue()


# ------------------------------------------------------------------------------------------ item 10
@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_retry_after_is_honoured_and_said():
    async def go(url: str) -> tuple[Reply, float, str | None, list[str]]:
        async with Client(ClientConfig(url=url, retries=2, backoff_s=0.001)) as c:
            t0 = time.monotonic()
            req = asyncio.ensure_future(c.generate(c.api.generation_body("x", SAMPLING)))
            await asyncio.sleep(0.5)
            during = c.status()
            reply = await req
            return reply, time.monotonic() - t0, during, c.notices

    with FaultServer("status", status=429, headers={"Retry-After": "2"}, body="slow down", limit=1) as srv:
        reply, took, during, notices = asyncio.run(go(srv.url))
    assert reply.error is None and reply.attempts == 2
    assert 1.9 < took < 5  # not the 1 ms backoff
    assert during == "1 waiting 2 s (Retry-After)"
    assert notices and "asked to retry after 2 s" in notices[0]


def test_retry_after_is_capped_by_the_request_timeout():
    async def go(url: str) -> float:
        async with Client(ClientConfig(url=url, retries=1, backoff_s=0.001, request_timeout_s=1.0)) as c:
            t0 = time.monotonic()
            await c.generate(c.api.generation_body("x", SAMPLING))
            return time.monotonic() - t0

    with FaultServer("status", status=429, headers={"Retry-After": "30"}, limit=1) as srv:
        assert 0.9 < asyncio.run(go(srv.url)) < 4


def test_retry_after_forms():
    assert retry_after_s("30") == 30 and retry_after_s(" 1.5 ") == 1.5 and retry_after_s("-4") == 0
    assert retry_after_s(None) is None and retry_after_s("soon") is None and retry_after_s("inf") is None
    from email.utils import formatdate

    assert 8 < retry_after_s(formatdate(time.time() + 10, usegmt=True)) <= 10


def test_abh_eval_says_it_honours_retry_after(tmp_path):
    with FaultServer("status", status=429, headers={"Retry-After": "1"}, limit=1) as srv:
        r = abh_eval(srv.url, tmp_path / "ev", "--num-questions", "2")
    assert r.returncode == exitcodes.OK, r.stderr
    assert "asked to retry after 1 s (HTTP Retry-After)" in r.stderr


# ------------------------------------------------------------------------------------------ item 9
def test_ansi_in_an_error_body_is_escaped():
    with FaultServer("status", status=500, body=ANSI, headers={"Server": "evil\x1b]0;t\x07"}) as srv:
        (reply,) = generate(srv.url)
    assert "\x1b" not in reply.error and "\x07" not in reply.error and "\x9b" not in reply.error
    assert "\\x1b]0;pwned\\x07" in reply.error and reply.server == "evil\\x1b]0;t\\x07"


def test_abh_eval_never_prints_a_servers_control_characters(tmp_path):
    with FaultServer("status", status=500, body=ANSI, limit=1) as srv:  # the warm-up fails, the rest answer
        r = abh_eval(srv.url, tmp_path / "ev", "--num-questions", "2", "--retries", "0")
    assert r.returncode == exitcodes.OK and "warm-up request failed" in r.stderr
    with FaultServer("status", status=404, body=ANSI, headers={"Server": "x\x1b[2J"}) as srv:
        r2 = abh_eval(srv.url, tmp_path / "ev2", "--num-questions", "2")
    assert r2.returncode == exitcodes.BAD_CONFIG and "does not serve the sglang API" in r2.stderr
    for text in (r.stderr, r.stdout, r2.stderr, r2.stdout):
        assert not any(c in text for c in "\x1b\x07\x9b"), text


def test_a_batched_tokenize_is_bounded_by_every_texts_characters():
    """/tokenize of 1319 prompts at once (the reference pass): the answer may hold one id per character of every
    prompt, not one per prompt (a 7 MB answer was cut at 2.4 MB)."""
    from harness.serving.wire import for_api

    texts = ["x" * 900] * 1319
    for api in ("sglang", "openai", "vllm"):
        assert for_api(api, "m").reply_tokens({"prompt": texts, "add_special_tokens": True}) == 900 * 1319
    assert for_api("openai", "m").reply_tokens({"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 1, "echo": True}) == 1 + 5
