"""`abh eval` when things go wrong: a URL that serves something else, bad arguments, a hung server, signals
during the warm-up, a server still loading (issue 14, items 1, 2, 5, 8)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web
from conftest import TEST_JSONL, SimServer, free_port
from helpers.aioserver import ThreadedApp
from helpers.waiting import PATIENCE_S

from harness import exitcodes
from harness.results.fileio import read_jsonl
from harness.serving.client import Client, ClientConfig


def abh_eval(*args: str, timeout: float = PATIENCE_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli.main", "eval", "--data", str(TEST_JSONL), "--no-progress",
                           *args], capture_output=True, text=True, timeout=timeout)


def one_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """`python -m http.server`: answers GET with files and 501 to POST; its URL and its log (a line per request)."""
    port = free_port()
    log = tmp_path / "http_server.log"
    with log.open("w") as f:
        p = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                             stdout=subprocess.DEVNULL, stderr=f)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    import requests

    while True:
        try:
            requests.get(url, timeout=1)
            break
        except requests.RequestException:
            assert time.monotonic() < deadline and p.poll() is None, "http.server never listened"
            time.sleep(0.05)
    yield url, log
    p.kill()
    p.wait(10)


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_url_that_serves_something_else_is_refused_at_once(http_server, tmp_path):
    http_server, log = http_server
    r = abh_eval("--url", http_server, "--out", str(tmp_path / "ev"))
    # at once: asked once, not each of the 1319 questions (counted by the server, not by a clock)
    assert log.read_text().count('"POST /generate') == 1, log.read_text()[-2000:]
    assert r.returncode == exitcodes.BAD_CONFIG
    line = one_line(r.stderr)
    assert "does not serve the sglang API" in line and "POST /generate answered HTTP 501" in line
    assert "SimpleHTTP" in line  # says what was found
    assert not (tmp_path / "ev").exists()
    r = abh_eval("--url", http_server, "--api", "openai", "--out", str(tmp_path / "ev"))
    assert r.returncode == exitcodes.BAD_CONFIG
    assert "GET /v1/models answered HTTP 404" in one_line(r.stderr)
    assert not (tmp_path / "ev").exists()


class StatusServer(ThreadedApp):
    """Answers every POST with one status and counts them."""

    def __init__(self, status: int):
        super().__init__()
        self.status, self.count = status, 0

    def routes(self, app: web.Application) -> None:
        async def post(request: web.Request) -> web.Response:
            self.count += 1
            return web.Response(status=self.status, text="no")

        app.router.add_post("/generate", post)


@pytest.mark.parametrize("status,attempts", [(404, 1), (405, 1), (501, 1), (503, 3), (429, 3)])
def test_not_served_statuses_are_not_retried(status, attempts):
    async def go(url: str):
        async with Client(ClientConfig(url=url, retries=2, backoff_s=0.001)) as c:
            return await c.generate(c.api.generation_body("x", {}))

    with StatusServer(status) as srv:
        reply = asyncio.run(go(srv.url))
    assert reply.attempts == attempts and srv.count == attempts
    assert reply.error.startswith(f"HTTP {status}") and reply.not_served == (status in (404, 405, 501))


def test_bad_url_or_out_is_one_line_and_creates_nothing(tmp_path):
    r = abh_eval("--url", "not-a-url", "--out", str(tmp_path / "x"))
    assert r.returncode == exitcodes.BAD_CONFIG and "not-a-url" in one_line(r.stderr)
    assert not (tmp_path / "x").exists()
    r = abh_eval("--url", "http://127.0.0.1:notaport", "--out", str(tmp_path / "x"))
    assert r.returncode == exitcodes.BAD_CONFIG and "not a valid URL" in one_line(r.stderr)
    f = tmp_path / "file"
    f.write_text("keep me")
    r = abh_eval("--url", "http://127.0.0.1:9", "--out", str(f))
    assert r.returncode == exitcodes.BAD_CONFIG and "exists and is not a directory" in one_line(r.stderr)
    assert f.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_help_shows_defaults():
    r = subprocess.run([sys.executable, "-m", "harness.cli.main", "eval", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    for frag in ("--parallel P requests in flight (default: 1319)", "(default: 180.0)", "(default: 3600.0)",
                 "(default: sglang)", "--stall-timeout"):
        assert frag in text, frag
    assert "(default: None)" not in text and "(default: )" not in text


@pytest.mark.slow  # a whole run of processes: the slow suite (.ci/run runs it)
def test_a_server_that_hangs_mid_eval_stops_the_eval_with_exit_4(sim_server, tmp_path):
    s = sim_server("--accuracy", "0.9", "--hang-after", "41", "--latency-s", "0.01", "--max-running-requests", "4")
    out = tmp_path / "ev"
    stall = 2.0
    t0 = time.monotonic()
    r = abh_eval("--url", s.url, "--out", str(out), "--num-questions", "100", "--parallel", "100",
                 "--stall-timeout", str(stall))
    took = time.monotonic() - t0
    assert r.returncode == exitcodes.SERVER_FAILURE, r.stderr
    line = one_line(r.stderr)
    assert "the server is hung" in line and "GET /health_generate did not answer" in line
    # the stall, the health probe (capped at the stall), start-up (slow on a loaded machine): far below the hour
    # of the request timeout that bounded it before
    assert took < 2 * stall + 30, took
    rows = read_jsonl(out / "samples.jsonl")
    assert len(rows) == 40  # 41 requests reached the server, one of them the warm-up
    assert all(x["error"] is None for x in rows)  # in-flight ones were cancelled, not stored as errors
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False and "hung" in summary["aborted"] and summary["missing"] == 60
    # a rerun against a healthy server sends only what is missing
    good = sim_server("--accuracy", "0.9")
    r = abh_eval("--url", good.url, "--out", str(out), "--num-questions", "100", "--parallel", "100")
    assert r.returncode == 0, r.stderr
    rows2 = read_jsonl(out / "samples.jsonl")
    assert sorted(x["index"] for x in rows2) == list(range(100))
    assert {x["index"]: x for x in rows2 if x["index"] in {y["index"] for y in rows}} == \
        {x["index"]: x for x in rows}


@pytest.mark.slow  # 5 s of waiting on a slow server; the hang path itself is in the default run (above)
def test_a_slow_but_healthy_server_is_not_called_hung(sim_server, tmp_path):
    s = sim_server("--accuracy", "0.9", "--latency-s", "2.5")
    r = abh_eval("--url", s.url, "--out", str(tmp_path / "ev"), "--num-questions", "4", "--stall-timeout", "1")
    assert r.returncode == 0, r.stderr


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness.cli.main", "eval", "--data", str(TEST_JSONL),
                             "--no-progress", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_a_request(server: SimServer, p: subprocess.Popen, timeout: float = PATIENCE_S) -> None:
    """Until the simulator has taken a generation request (the warm-up, in flight for its ``--latency-s``): the
    event itself, however long abh eval takes to start on a loaded machine."""
    import requests

    deadline = time.monotonic() + timeout
    while requests.get(server.url + "/get_server_info", timeout=10).json()["requests_received"] < 1:
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "abh eval sent no request"
        time.sleep(0.05)


def _wait_for_line(p: subprocess.Popen, text: str) -> list[str]:
    """The stderr lines of ``p`` up to the first holding ``text`` (read as they come: the event, not a guess at
    how long it takes); the process's stderr pipe is read to its end by ``communicate`` afterwards."""
    assert p.stderr is not None
    lines = []
    for line in p.stderr:
        lines.append(line)
        if text in line:
            return lines
    raise AssertionError(f"{text!r} never said: {''.join(lines)[-2000:]}")


@pytest.mark.parametrize("sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_signal_during_the_warm_up_is_honoured(sim_server, tmp_path, sig):
    s = sim_server("--accuracy", "0.9", "--latency-s", "15")
    out = tmp_path / "ev"
    p = _start("--url", s.url, "--out", str(out), "--num-questions", "20")
    _wait_for_a_request(s, p)  # the warm-up request is in flight (it takes 15 s)
    t0 = time.monotonic()
    p.send_signal(sig)
    _, err = p.communicate(timeout=PATIENCE_S)
    assert time.monotonic() - t0 < 10  # not the warm-up's 15 s (room for a loaded machine's exit)
    assert p.returncode == 128 + sig, err
    assert "interrupted by" in one_line(err)
    assert not out.exists()  # a fresh eval writes nothing before its first answer


@pytest.mark.slow  # the default run: the warm-up signal (SIGINT) above and a resumed eval's interruption (test_eval.py)
def test_signal_during_the_warm_up_of_a_resumed_eval_keeps_its_answers(sim_server, tmp_path):
    fast = sim_server("--accuracy", "0.9")
    out = tmp_path / "ev"
    assert abh_eval("--url", fast.url, "--out", str(out), "--num-questions", "20").returncode == 0
    rows = read_jsonl(out / "samples.jsonl")[:12]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    slow = sim_server("--accuracy", "0.9", "--latency-s", "15")
    p = _start("--url", slow.url, "--out", str(out), "--num-questions", "20")
    _wait_for_a_request(slow, p)  # the warm-up request is in flight
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=PATIENCE_S)
    assert p.returncode == 130, err
    assert "Rerun the same command to resume" in one_line(err)
    key = lambda r: r["index"]  # noqa: E731
    assert sorted(read_jsonl(out / "samples.jsonl"), key=key) == sorted(rows, key=key)  # kept as they were
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aborted"] == "interrupted by SIGINT" and summary["missing"] == 8


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_waiting_for_a_loading_server_says_so(tmp_path):
    port = free_port()
    out = tmp_path / "ev"
    p = _start("--url", f"http://127.0.0.1:{port}", "--out", str(out), "--num-questions", "5",
               "--wait-ready", "120")
    # abh eval has started and found nothing listening (however long its start took), then the server starts,
    # 503 for a while
    said = _wait_for_line(p, "waiting for the server to load")
    s = SimServer("--accuracy", "0.9", "--startup-s", "1", port=port)
    try:
        _, rest = p.communicate(timeout=PATIENCE_S)
    finally:
        s.stop()
    err = "".join(said) + rest
    assert p.returncode == 0, err
    assert "ConnectionError" not in err and "ClientConnectorError" not in err and "Traceback" not in err
    assert len(read_jsonl(Path(out) / "samples.jsonl")) == 5
