"""`abh ab` against a server behind a tampering proxy (tests/helpers/tamperproxy.py in front of the simulator): an
answer to another request, an impossible logprob or a token id twice among the alternatives is that request's
error with its reason, counted; a run with more of them than ``stats.max_error_rate`` is not comparable (exit
5). The same proxy passing everything through gives a clean verdict (the control)."""

from __future__ import annotations

import pytest
from conftest import TEST_JSONL, SimServer
from helpers.tamperproxy import TamperProxy

from harness import exitcodes
from harness.cli import ab as ab_cli
from harness.cli.main import main as cli_main
from harness.results.fileio import read_json, read_jsonl
from harness.serving.wire import NOT_THIS_REQUEST

N = "12"


@pytest.fixture(scope="module")
def servers():
    """Arm A's server, the same server's twin for B (same seed: B answers as A does) and a second launch of A
    for the A/A floor."""
    sims = [SimServer("--accuracy", "0.9", "--run-seed", seed, "--noise", "launch") for seed in ("1", "1", "3")]
    try:
        yield [s.wait_ready() for s in sims]
    finally:
        for s in sims:
            s.stop()


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries as they are, with a backoff of milliseconds (the retries are what is tested, not their timing)."""
    overrides = ab_cli.overrides
    monkeypatch.setattr(ab_cli, "overrides", lambda *a: [*overrides(*a), "client.backoff_s=0.001"])


def ab(capsys: pytest.CaptureFixture[str], url_a: str, url_b: str, out, *extra: str) -> tuple[int, str, str]:
    """``abh ab`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = cli_main(["ab", url_a, url_b, "--out", str(out), "--data", str(TEST_JSONL), "--num-questions", N,
                     "--parallel", N, "--no-progress", *extra])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_answers_swapped_between_requests_are_errors_and_the_run_is_not_comparable(servers, tmp_path, capsys):
    sa, sb, _ = servers
    with TamperProxy(sb.url, "pass") as proxy:  # the control: the same proxy, honest
        code, out, err = ab(capsys, sa.url, proxy.url, tmp_path / "clean")
    assert code == 0, err
    assert read_json(tmp_path / "clean" / "comparison.json")["error_rate"] == 0
    with TamperProxy(sb.url, "swap") as proxy:
        code, out, err = ab(capsys, sa.url, proxy.url, tmp_path / "swapped")
        assert proxy.tampered >= int(N)
    assert code == exitcodes.TOO_MANY_ERRORS, err
    rows = read_jsonl(tmp_path / "swapped" / "evals" / "b" / "r1" / "samples.jsonl")
    errors = [r["error"] for r in rows if r["error"]]
    assert len(errors) >= int(N) // 2, rows  # a swapped answer to a prompt of the same length passes unseen
    assert all(e.startswith(f"{NOT_THIS_REQUEST}: prompt_tokens ") and "(its /tokenize)" in e for e in errors)
    assert all(r["error"] is None for r in read_jsonl(tmp_path / "swapped" / "evals" / "a" / "r1" / "samples.jsonl"))
    assert f"got answers to other requests from {proxy.url} (counted as request errors), e.g. {NOT_THIS_REQUEST}" \
        in err
    # past the error limit, or (most answers swapped) too few questions left to compare at all: exit 5 either way
    assert "the arms are not comparable" in err
    assert "rerun the same command to retry the failed requests" in err.lower()
    if (tmp_path / "swapped" / "comparison.json").exists():
        assert read_json(tmp_path / "swapped" / "comparison.json")["error_rate_exceeded"]


@pytest.mark.parametrize("mode", ["nan", *(pytest.param(m, marks=pytest.mark.slow)  # kin: test_wire_plausible.py
                                           for m in ("inf", "positive", "duplicate"))])
@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_impossible_logprobs_in_the_scoring_pass_are_its_errors_with_the_reason(servers, tmp_path, capsys,
                                                                                 mode: str):
    sa, sb, sa2 = servers
    want = {"nan": "impossible logprob of an alternative nan", "inf": "impossible logprob inf",
            "positive": "impossible logprob 0.5", "duplicate": "twice among the alternatives"}[mode]
    with TamperProxy(sb.url, mode, skip=1) as proxy:  # the first scoring request (the probe) honest
        code, out, err = ab(capsys, sa.url, proxy.url, tmp_path / mode, "--aa", sa2.url)
        assert proxy.tampered >= int(N) - 1
    assert code == 0, err  # accuracy is unaffected: generation answers pass unchanged
    scores = read_json(tmp_path / mode / "evals" / "b" / "r1" / "scores.json")
    assert scores["errors"] == int(N) - 1 and scores["questions"] == 1
    assert want in str(scores["error_examples"]) and "reference token 0" in str(scores["error_examples"])
    divergence = read_json(tmp_path / mode / "comparison.json")["divergence"]
    assert divergence["verdict"] == "not_measured", divergence


@pytest.mark.slow  # the control of the test above; test_ab.py measures the divergence without a proxy
def test_honest_scores_through_the_proxy_measure_the_divergence(servers, tmp_path, capsys):
    sa, sb, sa2 = servers
    with TamperProxy(sb.url, "pass") as proxy:
        code, out, err = ab(capsys, sa.url, proxy.url, tmp_path / "run", "--aa", sa2.url)
    assert code == 0, err
    assert read_json(tmp_path / "run" / "evals" / "b" / "r1" / "scores.json")["errors"] == 0
    assert read_json(tmp_path / "run" / "comparison.json")["divergence"]["verdict"] != "not_measured"


@pytest.mark.slow  # kin: test_wire_plausible.py::test_the_first_answer_to_a_prompt_sets_its_count_and_the_tokenizer...
def test_without_a_tokenizer_for_every_prompt_the_first_pass_on_a_launch_sets_the_counts(tmp_path, capsys):
    """vLLM's /tokenize takes one text: the prompts' counts are the launch's first answers, and the second pass
    on the same launch, swapped, is caught against them."""
    from helpers.fake_vllm import FakeVLLM

    with FakeVLLM() as a, FakeVLLM() as b, TamperProxy(b.url, "swap", skip=int(N) + 1) as proxy:  # r1: honest
        code, _, err = ab(capsys, a.url, proxy.url, tmp_path / "run", "--api", "vllm", "--repeats", "2")
        assert proxy.tampered >= int(N) // 2
    assert code == exitcodes.TOO_MANY_ERRORS, err
    assert all(r["error"] is None for r in read_jsonl(tmp_path / "run" / "evals" / "b" / "r1" / "samples.jsonl"))
    errors = [r["error"] for r in read_jsonl(tmp_path / "run" / "evals" / "b" / "r2" / "samples.jsonl") if r["error"]]
    assert errors and all(e.startswith(f"{NOT_THIS_REQUEST}: prompt_tokens ") for e in errors)
    assert all("(its first answer to this prompt)" in e for e in errors)
