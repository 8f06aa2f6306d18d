"""``abh compare --lm-eval`` on sample files written by the real lm-evaluation-harness (PyPI ``lm-eval``, in its
own venv made by scripts/lmeval_venv.sh) against two simulated servers (the project's simulator speaks the OpenAI
completions API), with a local task yaml so no hub is needed: the paired table abh reports is the one computed by
hand from the two files."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness import exitcodes
from harness.results import schema
from harness.tasks import gsm8k
from tests.helpers.runs import abh

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
N = 40


def lmeval_python() -> str:
    """The venv's interpreter (made on first use: ``pip install lm-eval[api]``)."""
    out = subprocess.run(["bash", str(ROOT / "scripts" / "lmeval_venv.sh")], capture_output=True, text=True,
                         timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def run_lm_eval(py: str, url: str, tasks_dir: Path, out: Path) -> None:
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)  # lm-eval's own venv, not this checkout
    cmd = [py, "-m", "lm_eval", "--model", "local-completions", "--model_args",
           f"model=simulated/gsm8k,base_url={url}/v1/completions,tokenizer_backend=None,num_concurrent=4",
           "--include_path", str(tasks_dir), "--tasks", "gsm8k_local", "--log_samples", "--output_path", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=out.parent)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-4000:])


def by_hand(a_file: Path, b_file: Path, filt: str) -> dict[str, int]:
    """The paired table of one filter's exact_match, straight from the two samples files."""
    def scores(p: Path) -> dict[int, float]:
        rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        return {r["doc_id"]: r["exact_match"] for r in rows if r["filter"] == filt}

    a, b = scores(a_file), scores(b_file)
    assert set(a) == set(b) == set(range(N))
    t = {"both": 0, "a_only": 0, "b_only": 0, "neither": 0}
    for d in a:
        t["both" if a[d] and b[d] else "a_only" if a[d] else "b_only" if b[d] else "neither"] += 1
    return t


def test_compare_lm_eval_samples_of_two_real_lm_eval_runs(tmp_path, sim_server):
    py = lmeval_python()
    lm_dir = subprocess.run([py, "-c", "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    data = tmp_path / "data"
    data.mkdir()
    test_rows = gsm8k.read_embedded_test()[:N]
    (data / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test_rows), encoding="utf-8")
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in gsm8k.train_head().rows), encoding="utf-8")
    tasks_dir = tmp_path / "tasks"
    tasks_dir.mkdir()
    (tasks_dir / "gsm8k_local.yaml").write_text(
        f"include: {lm_dir}/tasks/gsm8k/gsm8k.yaml\ntask: gsm8k_local\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    train: {data / 'train.jsonl'}\n    test: {data / 'test.jsonl'}\n",
        encoding="utf-8")
    sides = {}
    for name, acc, seed in (("a", "0.55", "1"), ("b", "0.75", "2")):
        server = sim_server("--data", str(data / "test.jsonl"), "--accuracy", acc, "--run-seed", seed,
                            "--flip-rate", "0.1")
        run_lm_eval(py, server.url, tasks_dir, tmp_path / f"lm_{name}")
        files = sorted((tmp_path / f"lm_{name}").rglob("samples_gsm8k_local_*.jsonl"))
        assert len(files) == 1
        sides[name] = files[0]
    out = tmp_path / "cmp"
    done = abh("compare", "--lm-eval", str(tmp_path / "lm_a"), str(tmp_path / "lm_b"), "--out", str(out),
               "--a-name", "base", "--b-name", "fix", cwd=tmp_path)
    assert done.returncode == exitcodes.OK, done.stderr
    tc = schema.load_tasks(out / schema.TASKS_FILE)
    keys = {r.key for r in tc.rows}
    assert keys == {"gsm8k_local__strict-match__exact_match", "gsm8k_local__flexible-extract__exact_match"}
    for r in tc.rows:
        filt = r.key.split("__")[1]
        c = schema.load_comparison(out / r.dir / schema.COMPARISON_FILE)
        want = by_hand(sides["a"], sides["b"], filt)
        assert {"both": c.both, "a_only": c.a_only, "b_only": c.b_only, "neither": c.neither} == want, filt
        assert want["both"] + want["a_only"] > 0 and want["both"] + want["b_only"] > 0  # real answers, some right
        assert c.n == N and c.delta == pytest.approx((want["b_only"] - want["a_only"]) / N)
        assert c.arm_names is not None and c.arm_names.b == "fix"
    md = (out / "comparison.md").read_text(encoding="utf-8")
    assert "| task | recipe |" in md and (out / "report.html").exists()
