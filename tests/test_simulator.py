"""The simulated engine as a real subprocess: APIs, correctness model, run-to-run noise, faults, load."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import time
from dataclasses import fields

import aiohttp
import pytest
import requests
from conftest import SimServer
from helpers.waiting import PATIENCE_S

from abh_simulator.model import (
    ability_for_accuracy,
    base_outcomes,
    expected_accuracy,
    flip_probabilities,
    launch_outcomes,
    pass_outcomes,
    run_outcomes,
    split_flip_rate,
)
from abh_simulator.sim_config import SimConfig
from harness.tasks.gsm8k import EMBEDDED_TEST as DATA
from harness.tasks.gsm8k import question_from_prompt

SP = {"skip_special_tokens": True, "spaces_between_special_tokens": True, "max_new_tokens": 512,
      "min_new_tokens": 0, "n": 1, "stop": ["Question", "Assistant:", "<|separator|>"], "stop_token_ids": [],
      "stop_regex": [], "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
      "frequency_penalty": 0.0, "presence_penalty": 0.0, "ignore_eos": False, "regex": None,
      "json_schema": None}


def _rows() -> list[dict[str, str]]:
    with DATA.open() as f:
        return [json.loads(line) for line in f if line.strip()]


ROWS = _rows()
SHOTS = "".join("Question: " + r["question"] + "\nAnswer: " + r["answer"] + "\n\n" for r in ROWS[:5])


def prompt(i: int) -> str:
    return SHOTS + "Question: " + ROWS[i]["question"] + "\nAnswer:"


def parse(text: str) -> int:
    nums = re.findall(r"\d+", text.replace(",", ""))
    return int(nums[-1]) if nums else -9999999


def label(i: int) -> int:
    return parse(ROWS[i]["answer"])


async def _batch(url: str, bodies: list[dict], path: str = "/generate", timeout: float = PATIENCE_S) -> list:
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=timeout)) as s:
        async def one(b: dict):
            async with s.post(url + path, json=b) as r:
                return r.status, await r.text()
        return await asyncio.gather(*(one(b) for b in bodies))


def batch(url: str, indices, sp: dict | None = None, path: str = "/generate") -> list:
    bodies = [{"text": prompt(i), "sampling_params": sp or SP} for i in indices]
    return asyncio.run(_batch(url, bodies, path))


def texts(url: str, indices) -> list[str]:
    out = batch(url, indices)
    assert all(st == 200 for st, _ in out), [o for o in out if o[0] != 200][:3]
    return [json.loads(body)["text"] for _, body in out]


# ------------------------------------------------------------------------------------- pure model
def test_python_api_model():
    a80, a85 = ability_for_accuracy(0.80), ability_for_accuracy(0.85)
    assert a80 < a85
    assert expected_accuracy(a80) == pytest.approx(0.80, abs=1e-6)
    lo, hi = base_outcomes(a80), base_outcomes(a85)
    assert all(h or not low for low, h in zip(lo, hi, strict=True))  # higher ability only gains
    assert base_outcomes(a80) == lo  # deterministic
    down, up = flip_probabilities(0.9, 0.02)
    assert 0.9 * down == pytest.approx(0.1 * up)
    r1, r2 = run_outcomes(lo, 0.1, 1), run_outcomes(lo, 0.1, 2)
    assert 0.06 < sum(x != y for x, y in zip(r1, r2, strict=True)) / len(lo) < 0.14
    assert question_from_prompt(prompt(7)) == ROWS[7]["question"].strip()


# ------------------------------------------------------------------------------- one SimConfig
def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    import harness.config as hc

    with initialize_config_dir(str(hc.CONFIG_DIR), version_base="1.3"):
        return compose("config", overrides=["engine=simulated", *overrides])


def _other_value(name: str, default):
    """A valid value of knob ``name`` that is not its default."""
    special = {"noise": "mixed", "data": "/some/test.jsonl", "host": "127.0.0.2", "port": 12345,
               "run_seed": 7, "ability": 1.5, "accuracy": 0.5, "build": "b1", "model_path": "m/x"}
    if name in special:
        return special[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 3
    if isinstance(default, float):
        return round(min(0.9, default + 0.125), 3)
    return "x"


def test_every_simconfig_knob_is_an_engine_key_with_the_same_default():
    """SimConfig is the only source of the simulator's defaults: each field is engine.<field> with the same
    default, settable from the command line, and reaches the simulator's flags unchanged (round trip)."""
    from omegaconf import OmegaConf

    import harness.config as hc
    from abh_simulator.__main__ import parse_args
    from abh_simulator.sim_config import knob_types, to_argv
    from harness.config import SimulatedEngineConfig

    engine = _compose().engine
    names = [f.name for f in fields(SimConfig)]
    assert len(names) >= 20
    # the default experiment (the demo) sets a few knobs itself: those are its values, not defaults
    demo_sets = OmegaConf.load(hc.CONFIG_DIR / "experiment" / "demo.yaml").engine
    for f in fields(SimConfig):
        assert engine[f.name] == demo_sets.get(f.name, f.default), f.name
        assert getattr(SimulatedEngineConfig(), f.name) == f.default, f.name
    assert engine.accuracy == 0.945 and engine.noise == "pass" and engine.port == 0  # one value, not two
    overrides = {n: _other_value(n, getattr(SimConfig(), n)) for n in names}
    cli = [f"engine.{n}={'null' if v is None else str(v).lower() if isinstance(v, bool) else v}"
           for n, v in overrides.items()]
    set_engine = _compose(*cli).engine
    types = knob_types()
    for n, v in overrides.items():
        assert set_engine[n] == v, n
        assert isinstance(set_engine[n], types[n]), n
    values = {n: set_engine[n] for n in names}
    parsed = parse_args(to_argv(values))
    want = {**values, "accuracy": SimConfig().accuracy}  # ability is set, so accuracy is not passed
    assert {n: getattr(parsed, n) for n in names} == want
    without_ability = {**values, "ability": None}
    assert parse_args(to_argv(without_ability)).accuracy == values["accuracy"]
    assert parse_args([]) == SimConfig()  # the command line's defaults are SimConfig's


def test_bad_simulator_values_fail_config_validation_in_one_message():
    import harness.config as hc

    cfg = _compose("engine.noise=sometimes", "engine.flip_rate=1.5")
    with pytest.raises(hc.ConfigError) as e:
        hc.validate(cfg)
    assert "engine.noise must be one of launch, pass, mixed" in str(e.value)
    assert "engine.flip_rate must be in [0, 1]" in str(e.value)
    cfg = _compose("arms.b.engine.accuracy=1.5")
    with pytest.raises(hc.ConfigError, match="arms.b.engine.accuracy must be strictly between 0 and 1"):
        hc.validate(cfg)


# ------------------------------------------------------------------------------------------ APIs
def test_side_endpoints_and_warmup(sim_server):
    # no pass-to-pass noise: the texts of one question asked through two APIs are compared (by default each ask is
    # a new pass, and a launch's random seed flipped question 5 between them in ~1 run in 100)
    s = sim_server("--build", "fix", "--model-path", "sim/Qwen-7B", "--accuracy", "0.9", "--flip-rate", "0")
    for path in ("/get_server_info", "/server_info"):
        info = requests.get(s.url + path, timeout=5).json()
        assert info["simulated"] is True and info["engine"] == "simulated"
        assert info["build"] == "fix" and info["version"].startswith("simulated-")
        assert info["model_path"] == "sim/Qwen-7B" and "--build fix" in info["launch_command"]
        assert info["accuracy"] == 0.9 and isinstance(info["run_seed"], int)
    for path in ("/get_model_info", "/model_info"):
        mi = requests.get(s.url + path, timeout=5).json()
        assert mi == mi | {"model_path": "sim/Qwen-7B", "is_generation": True, "simulated": True}
    assert requests.get(s.url + "/v1/models", timeout=5).json()["data"][0]["id"] == "sim/Qwen-7B"
    assert requests.get(s.url + "/health_generate", timeout=5).status_code == 200
    assert requests.post(s.url + "/flush_cache", timeout=5).status_code == 200
    assert requests.get(s.url + "/flush_cache", timeout=5).status_code == 200
    # SGLang's warm-up: the shots alone with max_new_tokens 0
    w = requests.post(s.url + "/generate", json={"text": SHOTS, "sampling_params": {**SP, "max_new_tokens": 0}},
                      timeout=PATIENCE_S).json()
    assert w["text"] == "" and w["meta_info"]["completion_tokens"] == 0
    assert w["meta_info"]["finish_reason"]["type"] == "length"
    r = requests.post(s.url + "/generate", json={"text": prompt(5), "sampling_params": SP}, timeout=5).json()
    meta = r["meta_info"]
    assert set(meta) >= {"id", "prompt_tokens", "completion_tokens", "cached_tokens", "finish_reason",
                         "e2e_latency"}
    assert meta["finish_reason"] == {"type": "stop", "matched": "Question"} and "Question" not in r["text"]
    n_prompt = requests.post(s.url + "/tokenize", json={"prompt": prompt(5)}, timeout=5).json()["count"]
    assert meta["cached_tokens"] > 0 and meta["prompt_tokens"] == n_prompt
    # unknown sampling_params key -> 400, as newer SGLang
    bad = requests.post(s.url + "/generate", json={"text": prompt(5), "sampling_params": {**SP, "bogus": 1}},
                        timeout=PATIENCE_S)
    assert bad.status_code == 400 and "bogus" in bad.text
    # no stop strings: the "base model" runs on into the next question until max_new_tokens
    r = requests.post(s.url + "/generate", json={"text": prompt(5), "sampling_params": {"max_new_tokens": 64}},
                      timeout=PATIENCE_S).json()
    assert r["meta_info"]["finish_reason"]["type"] == "length" and r["meta_info"]["completion_tokens"] == 64
    assert requests.post(s.url + "/tokenize", json={"prompt": r["text"]}, timeout=5).json()["count"] == 64
    # OpenAI completions
    o = requests.post(s.url + "/v1/completions", json={"model": "sim/Qwen-7B", "prompt": prompt(5),
                                                       "max_tokens": 512, "stop": SP["stop"]}, timeout=PATIENCE_S).json()
    assert o["object"] == "text_completion" and o["choices"][0]["finish_reason"] == "stop"
    full = requests.post(s.url + "/generate", json={"text": prompt(5), "sampling_params": SP}, timeout=5).json()
    assert o["choices"][0]["text"] == full["text"] and full["text"].startswith(r["text"])
    assert o["usage"]["total_tokens"] == o["usage"]["prompt_tokens"] + o["usage"]["completion_tokens"]


# --------------------------------------------------------------------------- correctness model
def _two_arms(sim_server, k: int) -> None:
    """Two builds at 80 % and 85 % with no run noise, on the first ``k`` questions: every output has the
    answer line; the outcomes are exactly the solved ability's on the whole set; the better arm only gains."""
    n = len(ROWS)
    lo = sim_server("--accuracy", "0.80", "--flip-rate", "0", "--build", "baseline")
    hi = sim_server("--accuracy", "0.85", "--flip-rate", "0", "--build", "fix")
    res = {}
    for name, s in (("lo", lo), ("hi", hi)):
        out = texts(s.url, range(k))
        res[name] = [parse(t) == label(i) for i, t in enumerate(out)]
        for i, t in enumerate(out):
            if res[name][i]:
                assert t.rstrip().endswith("#### " + ROWS[i]["answer"].split("####")[-1].strip())
            else:
                assert t.rstrip().splitlines()[-1].startswith("#### ")
        # no run noise: exactly the base outcomes of the solved ability
        target = 0.80 if name == "lo" else 0.85
        assert res[name] == base_outcomes(ability_for_accuracy(target, 0, n), 0, n)[:k]
        if k == n:
            assert abs(sum(res[name]) / n - target) < 0.03
    b = sum(x and not y for x, y in zip(res["lo"], res["hi"], strict=True))
    c = sum(y and not x for x, y in zip(res["lo"], res["hi"], strict=True))
    assert b == 0 and c > 0  # the better arm is strictly better and only gains
    assert (b + c) / k < 0.10  # ... and agrees on most questions


@pytest.mark.slow
def test_two_arms_paired_and_correct_on_300_questions(sim_server):
    _two_arms(sim_server, 300)


@pytest.mark.slow  # all 1319 questions (the first 300 are in the default run, above)
def test_two_arms_paired_and_correct(sim_server):
    _two_arms(sim_server, len(ROWS))


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_high_accuracy_arm_and_invalid(sim_server):
    s = sim_server("--accuracy", "0.98", "--flip-rate", "0")
    out = texts(s.url, range(100))
    assert sum(parse(t) == label(i) for i, t in enumerate(out)) >= 93
    inv = sim_server("--invalid-rate", "1.0")
    assert all(not re.search(r"\d", t) for t in texts(inv.url, range(20)))


def _disagree(x: list[bool], y: list[bool]) -> float:
    return sum(a != b for a, b in zip(x, y, strict=True)) / len(x)


def test_noise_modes_in_the_pure_model():
    """Where the flips are drawn: launch (once per launch), pass (every pass), mixed (half each)."""
    base = base_outcomes(ability_for_accuracy(0.9))
    f = 0.1
    rates = {}
    for noise in ("launch", "pass", "mixed"):
        l1, l2 = launch_outcomes(base, f, noise, 1), launch_outcomes(base, f, noise, 2)
        p11, p12 = pass_outcomes(l1, f, noise, 1, 0), pass_outcomes(l1, f, noise, 1, 1)
        p21 = pass_outcomes(l2, f, noise, 2, 0)
        rates[noise] = (_disagree(p11, p12), _disagree(p11, p21))
        for out in (p11, p12, p21):
            assert abs(sum(out) / len(out) - sum(base) / len(base)) < 0.02  # balanced: accuracy kept
    assert rates["launch"][0] == 0.0 and 0.07 < rates["launch"][1] < 0.13
    assert 0.07 < rates["pass"][0] < 0.13 and 0.07 < rates["pass"][1] < 0.13
    assert 0.03 < rates["mixed"][0] < 0.07 and 0.07 < rates["mixed"][1] < 0.13
    assert split_flip_rate(f, "mixed") == (f / 2, f / 2)
    with pytest.raises(ValueError, match="noise"):
        split_flip_rate(f, "sometimes")


# The modes themselves are test_noise_modes_in_the_pure_model; one server run checks --noise reaches the model,
# the others are slow.
@pytest.mark.parametrize("noise", ["launch", pytest.param("pass", marks=pytest.mark.slow),
                                   pytest.param("mixed", marks=pytest.mark.slow)])
@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_noise_modes_on_real_servers(sim_server, noise):
    """Two passes on one launch: verbatim under launch, different under pass; under mixed they differ less
    than two launches do (500 questions at flip rate 0.2 keep it quick; at accuracy 0.7 two draws disagree on
    about 0.18 of them, half of that per component under mixed)."""
    n = 500
    a = sim_server("--accuracy", "0.7", "--flip-rate", "0.2", "--run-seed", "1", "--noise", noise)
    b = sim_server("--accuracy", "0.7", "--flip-rate", "0.2", "--run-seed", "2", "--noise", noise)
    a1, a2 = texts(a.url, range(n)), texts(a.url, range(n))
    b1 = texts(b.url, range(n))
    right = [[parse(t) == label(i) for i, t in enumerate(run)] for run in (a1, a2, b1)]
    within, between = _disagree(right[0], right[1]), _disagree(right[0], right[2])
    for r in right:
        assert abs(sum(r) / n - 0.7) < 0.08
    if noise == "launch":
        assert a1 == a2 and 0.12 < between < 0.24, between  # every pass on one launch repeats verbatim
    elif noise == "pass":
        assert a1 != a2 and 0.12 < within < 0.24 and 0.12 < between < 0.24, (within, between)
    else:
        assert 0.05 < within < 0.14 and 0.12 < between < 0.24 and within < between, (within, between)
    assert requests.get(a.url + "/server_info", timeout=5).json()["simulation"]["noise"] == noise


# ------------------------------------------------------------------------------------------ faults
def test_error_rate_and_malformed(sim_server):
    s = sim_server("--error-rate", "1.0")
    assert all(st in (500, 503) for st, _ in batch(s.url, range(10)))
    m = sim_server("--malformed-rate", "1.0")
    for st, body in batch(m.url, range(10)):
        assert st == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(body)


def test_crash_after(sim_server):
    s = sim_server("--crash-after", "3")
    for i in range(3):
        assert requests.post(s.url + "/generate", json={"text": prompt(i), "sampling_params": SP},
                             timeout=PATIENCE_S).status_code == 200
    assert s.proc.wait(timeout=PATIENCE_S) == 1
    with pytest.raises(requests.ConnectionError):
        requests.post(s.url + "/generate", json={"text": prompt(4), "sampling_params": SP}, timeout=2)


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_hang_after(sim_server):
    s = sim_server("--hang-after", "1")
    assert requests.post(s.url + "/generate", json={"text": prompt(0), "sampling_params": SP},
                         timeout=PATIENCE_S).status_code == 200
    with pytest.raises(requests.Timeout):
        requests.post(s.url + "/generate", json={"text": prompt(1), "sampling_params": SP}, timeout=0.5)
    for path in ("/health_generate", "/health"):
        with pytest.raises(requests.Timeout):
            requests.get(s.url + path, timeout=0.5)


@pytest.mark.slow
def test_startup_delay_answers_503_on_health_until_ready():
    """Like SGLang until its warm-up ends: /health and /health_generate (one handler) and requests say 503."""
    s = SimServer("--startup-s", "1.5")
    try:
        t0 = time.monotonic()
        while True:  # the process is listening (not ready) within a second or so
            try:
                codes = {p: requests.get(s.url + p, timeout=5).status_code for p in ("/health", "/health_generate")}
                break
            except requests.ConnectionError:
                assert time.monotonic() - t0 < 10
                time.sleep(0.05)
        assert codes == {"/health": 503, "/health_generate": 503}
        assert requests.post(s.url + "/generate", json={"text": prompt(0), "sampling_params": SP},
                             timeout=PATIENCE_S).status_code == 503
        s.wait_ready(path="/health")
        assert time.monotonic() - t0 >= 1.4
        assert requests.get(s.url + "/health_generate", timeout=5).status_code == 200
        assert requests.post(s.url + "/generate", json={"text": prompt(0), "sampling_params": SP},
                             timeout=PATIENCE_S).status_code == 200
    finally:
        s.stop()


def test_sigterm(sim_server):
    s = sim_server()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=PATIENCE_S) == 0
    stubborn = sim_server("--ignore-sigterm")
    stubborn.proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert stubborn.proc.poll() is None
    assert requests.get(stubborn.url + "/health", timeout=5).status_code == 200


# ------------------------------------------------------------------------------------------- load
@pytest.mark.slow
def test_full_concurrency_1319(sim_server):
    s = sim_server("--latency-s", "0.5")
    t0 = time.monotonic()
    out = batch(s.url, range(len(ROWS)))
    elapsed = time.monotonic() - t0
    assert len(out) == 1319 and all(st == 200 for st, _ in out)
    assert elapsed < 60, elapsed  # served concurrently, not one by one (660 s), even on a loaded machine


def test_max_running_requests_queue(sim_server):
    s = sim_server("--latency-s", "0.2", "--max-running-requests", "5")
    t0 = time.monotonic()
    out = batch(s.url, range(20))
    assert all(st == 200 for st, _ in out)
    assert time.monotonic() - t0 >= 0.75  # 4 waves of 5
