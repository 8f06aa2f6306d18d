"""No redirect is followed for an inference server: a 3xx is an error naming its Location, and the credentials
(a URL's userinfo as basic auth, the bearer key) never reach where it points. A capture server on another
127.0.0.1 port records every Authorization header it gets; the redirecting server sends every request there."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from aiohttp import web
from conftest import TEST_JSONL
from helpers.aioserver import ThreadedApp

from harness import exitcodes
from harness.cli.main import main as abh_main
from harness.measure.divergence_pass import ScoringOptions, score_pass
from harness.measure.evaluation import EvalOptions, WrongServer, run_eval
from harness.serving.client import Client, ClientConfig, Redirected, served_model, unreachable
from harness.serving.wire import ScoreRequest
from harness.tasks import gsm8k

PASSWORD = "redirectpw7"
KEY = "key0that0must0stay0home"
BASIC = "Basic " + base64.b64encode(f"user:{PASSWORD}".encode()).decode()


class Capture(ThreadedApp):
    """Answers anything 200 and records each request's path and Authorization header."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str | None]] = []

    def routes(self, app: web.Application) -> None:
        async def any_(request: web.Request) -> web.Response:
            self.seen.append((request.path, request.headers.get("Authorization")))
            return web.json_response({"model_path": "capture", "text": "#### 1", "meta_info": {}})

        app.router.add_route("*", "/{tail:.*}", any_)


class Redirecting(ThreadedApp):
    """307s the requests ``redirects`` selects to the same path on ``target``; answers the others as a simulated
    SGLang server's health and model endpoints would."""

    def __init__(self, target: str, redirects: Any = lambda method, path: True) -> None:
        super().__init__()
        self.target, self.redirects = target, redirects
        self.seen: list[str] = []

    def routes(self, app: web.Application) -> None:
        async def any_(request: web.Request) -> web.Response:
            self.seen.append(f"{request.method} {request.path}")
            if self.redirects(request.method, request.path):
                return web.Response(status=307, headers={"Location": self.target + request.path})
            if request.path in ("/health", "/health_generate"):
                return web.json_response({})
            if request.path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info"):
                return web.json_response({"model_path": "m"})
            return web.json_response({"error": "no such route"}, status=404)

        app.router.add_route("*", "/{tail:.*}", any_)


@pytest.fixture
def capture():
    with Capture() as c:
        yield c


def with_userinfo(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@")


# ------------------------------------------------------------------------------------------ urllib probes
def test_the_probes_follow_no_redirect_and_name_the_location(capture):
    with Redirecting(capture.url) as srv:
        for probe in (lambda: unreachable(with_userinfo(srv.url)),
                      lambda: unreachable(srv.url, headers={"Authorization": f"Bearer {KEY}"}),
                      lambda: served_model(with_userinfo(srv.url)),
                      lambda: served_model(srv.url, {"Authorization": f"Bearer {KEY}"})):
            with pytest.raises(Redirected) as e:
                probe()
            assert "HTTP 307" in str(e.value) and capture.url in str(e.value) and "\n" not in str(e.value)
        assert srv.seen  # asked, and answered 307
    assert capture.seen == []


def test_abh_ab_refuses_a_redirecting_server_in_one_line_and_sends_it_no_credential(capture, tmp_path, capsys,
                                                                                     monkeypatch):
    monkeypatch.setenv("ABH_REDIRECT_KEY", KEY)
    for redirects in (lambda m, p: True, lambda m, p: p in ("/model_info", "/get_model_info")):
        with Redirecting(capture.url) as ok, Redirecting(capture.url, redirects) as srv:
            ok.redirects = lambda m, p: False
            capsys.readouterr()
            code = abh_main(["ab", with_userinfo(ok.url), with_userinfo(srv.url), "--out", str(tmp_path / "run"),
                             "--data", str(TEST_JSONL), "--num-questions", "3", "--no-progress",
                             "--api-key-env", "ABH_REDIRECT_KEY"])
            err = capsys.readouterr().err
        assert code == exitcodes.BAD_CONFIG, err
        [line] = err.strip().splitlines()
        assert line.startswith(f"abh ab: error: server B at {srv.url}") and f"redirect to {capture.url}/" in line
        assert PASSWORD not in err and KEY not in err
        assert not (tmp_path / "run").exists()
    assert capture.seen == []


# ------------------------------------------------------------------------------------------ aiohttp requests
def test_no_client_request_follows_a_redirect(capture):
    async def go(url: str) -> None:
        cfg = ClientConfig(url=with_userinfo(url), api="sglang", retries=2, backoff_s=0.01, api_key=KEY)
        async with Client(cfg) as c:
            reply = await c.generate({"text": "1 + 1 =", "sampling_params": {"max_new_tokens": 4}})
            assert reply.error is not None and f"redirect to {capture.url}/generate" in reply.error
            assert reply.attempts == 1  # not retried: a redirect is no transient fault
            scored = await c.score(ScoreRequest([1, 2, 3], [4, 5], top_k=2))
            assert scored.error is not None and "HTTP 307" in scored.error and scored.scores is None
            with pytest.raises(ValueError, match="redirect"):
                await c.post_json("/tokenize", {"text": "x"})
            with pytest.raises(Redirected):
                await c.get_json("/get_server_info")
            assert "redirect" in (await c.probe_health(5.0) or "")

    with Redirecting(capture.url) as srv:
        asyncio.run(go(srv.url))
        assert len(srv.seen) >= 5
    assert capture.seen == []


def test_an_eval_against_a_redirecting_server_is_refused_and_sends_it_nothing(capture, tmp_path):
    """The health and model endpoints answer; every generation is redirected: the warm-up says so (exit 2 in
    abh eval), and no question is sent on to the capture server."""
    test = gsm8k.load(TEST_JSONL, "test")
    with Redirecting(capture.url, lambda m, p: m == "POST") as srv:
        cfg = ClientConfig(url=with_userinfo(srv.url), api="sglang", parallel=4, retries=1, backoff_s=0.01,
                           api_key=KEY)
        with pytest.raises(WrongServer, match=f"redirect to {capture.url}/generate"):
            run_eval(test, gsm8k.RecipeConfig(num_questions=3), cfg, tmp_path / "ev", None,
                     EvalOptions(progress=False))
        # without the warm-up, each question is that request's error, naming the Location
        summary = run_eval(test, gsm8k.RecipeConfig(num_questions=3), cfg, tmp_path / "ev2", None,
                           EvalOptions(progress=False, warmup=False))
        assert summary["errors"] == 3
    assert capture.seen == []


def test_abh_eval_waiting_for_a_redirecting_server_stops_at_once(capture, tmp_path, capsys):
    """--wait-ready polls the health endpoint: a redirect there is the wrong URL (exit 2 at once), not a server loading."""
    with Redirecting(capture.url) as srv:
        capsys.readouterr()
        code = abh_main(["eval", "--url", with_userinfo(srv.url), "--out", str(tmp_path / "ev"), "--data",
                         str(TEST_JSONL), "--num-questions", "3", "--no-progress", "--wait-ready", "600"])
        err = capsys.readouterr().err
        assert srv.seen == ["GET /health_generate"]  # asked once
    assert code == exitcodes.BAD_CONFIG and f"redirect to {capture.url}/health_generate" in err and PASSWORD not in err
    assert capture.seen == []


def test_a_scoring_pass_against_a_redirecting_server_sends_it_nothing(capture, tmp_path, sim_server):
    from test_scoring import _eval

    s = sim_server("--build", "a")
    ev = _eval(s.url, tmp_path / "a", n=4)
    with Redirecting(capture.url, lambda m, p: m == "POST") as srv:
        cfg = ClientConfig(url=with_userinfo(srv.url), api="sglang", parallel=4, retries=1, backoff_s=0.01,
                           api_key=KEY)
        meta = score_pass(ev, cfg, tmp_path / "pass", ScoringOptions(progress=False))
    assert meta["status"] == "not_measured" and f"redirect to {capture.url}/" in str(meta["reason"])
    assert capture.seen == []
