"""The no-op proof on a REAL engine: llama.cpp on the CPU (SmolLM2-135M) with deterministic inference (a fixed
thread count, one request at a time). The A/A floor is exactly zero; the same build on both arms is IDENTICAL with
its bound; the KV-cache change (f16 vs q8_0 keys) DIFFERS, with where the outputs part; with the scoring passes
the floor's logprobs are bit-identical too and the first diverging tokens have positions and gaps. Few questions
and short answers: llama-cpp-python answers one question at a time and its scoring pass is slow."""

from __future__ import annotations

import pytest
from helpers.llamacpp import needs_llamacpp
from helpers.runs import abh_run

from harness.results.fileio import read_json

pytestmark = [pytest.mark.slow, pytest.mark.real_model, needs_llamacpp()]
BASE = ("experiment=cpu_smollm2", "stats.hypothesis=identical", "experiment.aa_control=true",
        "engine.deterministic=true", "task.num_questions=2", "task.num_shots=1", "task.max_new_tokens=48",
        "progress=false", "report=false",
        # llama_cpp is imported from the venv inside the abh checkout, so the launcher records that checkout's git
        # state, which a shared box may move between two launches: it says nothing about llama.cpp's build
        "experiment.allowed_differences=[args,fingerprint.git.commit,fingerprint.git.describe,fingerprint.git.dirty]")


def _run(tmp_path, name, *args, timeout=1800):
    r = abh_run(f"hydra.run.dir={tmp_path / name}", *BASE, *args, cwd=tmp_path, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    c = read_json(tmp_path / name / "comparison.json")
    m = read_json(tmp_path / name / "manifest.json")
    assert all(arm["deterministic"]["requested"] and arm["deterministic"]["flags"] == ["--n_threads_batch", "2"]
               for arm in m["arms"].values())
    return r, c


@pytest.mark.timeout(1800)
def test_the_same_build_on_both_arms_is_identical_with_its_bound(tmp_path):
    r, c = _run(tmp_path, "same", "arms/cpu_smollm2@arms.b=kv_f16", "divergence.enabled=false")
    i = c["identity"]
    assert c["verdict"] == i["verdict"] == "identical", i["reason"]
    assert i["questions"] == 2 and i["floor_passes"] == 2 and i["partings_aa"] == []  # the floor: exactly zero
    assert i["upper_bound"] == pytest.approx(1 - 0.05 ** (1 / 2))
    assert r.stdout.strip().splitlines()[-1].startswith("IDENTICAL on all 2 questions")


@pytest.mark.timeout(1800)
def test_the_kv_cache_change_differs_where_the_outputs_part(tmp_path):
    r, c = _run(tmp_path, "kv", "divergence.enabled=false")
    i = c["identity"]
    assert c["verdict"] == "differs" and i["differing"] >= 1 and i["partings_aa"] == [], i["reason"]
    assert all(p["char"] is not None and p["text_a"] != p["text_b"] for p in i["partings"])
    assert "DIFFERS on" in r.stdout.strip().splitlines()[-1]


@pytest.mark.timeout(3600)  # four scoring passes by llama-cpp-python (it ranks the vocabulary for each token)
def test_with_the_scoring_passes_the_first_diverging_tokens_are_classified(tmp_path):
    r, c = _run(tmp_path, "kvs", "divergence.enabled=true", timeout=3600)
    i = c["identity"]
    assert c["verdict"] == "differs" and i["floor_logprobs"] == "identical", i["reason"]
    assert i["logprobs_ab"] == "differ"
    for p in i["partings"]:
        assert p["position"] is not None and p["token_a"] is not None
    k = i["counts"]
    assert k["parted"] == i["differing"] == k["near_tie"] + k["divergence"] + k["unclassified"]
    assert "(first divergence: " in r.stdout.strip().splitlines()[-1]  # the headline classifies them
