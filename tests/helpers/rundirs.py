"""Run and comparison directories exactly as the harness stores them (EvalStore + compare_dirs + a
manifest.json of the run's shape), for the report tests, the browser test and benchmarks/bench_report.py."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from harness.analysis.comparison import compare_dirs
from harness.results import schema
from harness.results.eval_store import EvalStore, load_samples, summarize
from harness.results.schema import SampleRecord

SCRIPT_ALERT = "<script>alert(1)</script>"
SCRIPT_TITLE = "<script>document.title='pwned'</script>"
BOLD = "<b>bold claim</b>"
INJECT_INDEX = 3  # a question B gets right and A wrong, whose outputs carry markup

SEED_ENV = {
    "SGLANG_HACK_FLASHMLA_BACKEND": "unified_kv_triton", "SGLANG_OPT_FUSE_COMPRESS_NORM_ROPE": "1",
    "SGLANG_USE_AITER": "1", "SGLANG_SHARED_EXPERT_TP1": "1", "MORI_SHMEM_HEAP_SIZE": "8G",
    "HF_TOKEN": "***REDACTED***",
}
SEED_ARGV = ["/opt/venv-{arm}/bin/python3", "-m", "sglang.launch_server", "--model-path",
             "deepseek-ai/DeepSeek-V4-Pro", "--tensor-parallel-size", "8", "--dp", "8", "--enable-dp-attention",
             "--ep-size", "8", "--moe-a2a-backend", "mori", "--attention-backend", "dsv4", "--page-size", "256",
             "--kv-cache-dtype", "fp8_e4m3", "--enforce-shared-experts-fusion", "--context-length", "16384",
             "--mem-fraction-static", "0.78", "--host", "127.0.0.1", "--port", "{port}"]


# ------------------------------------------------------------------------------------------ builders
def _dataset(root: Path, n: int, source: Path | None) -> tuple[Path, list[dict[str, str]]]:
    if source is not None:
        rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()][:n]
        return source, rows
    rows = []
    for i in range(n):
        a, b = 3 + i, 7 + 2 * i
        q = f"Question {i}: Tom has {a} apples & buys {b} more <i>red</i> ones. How many apples now?"
        rows.append({"question": q, "answer": f"{a} + {b} = <<{a}+{b}={a + b}>>{a + b}\n#### {a + b}"})
    path = root / "data" / "test.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, rows


def _output(row: dict[str, str], pred: int) -> str:
    steps = re.sub(r"<<[^>]*>>", "", row["answer"].split("####")[0]).strip()
    return f" {steps}\nThe answer is {pred}."


def _write_eval(d: Path, rows: list[dict[str, str]], src: Path, correct: np.ndarray, *, arm: str, role: str,
                repeat: int, simulated: bool, rng: np.random.Generator, outputs: dict[int, str] | None = None,
                errors: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    n = len(rows)
    meta = {"task": "gsm8k", "recipe": {"name": "sglang", "num_questions": n, "num_shots": 5, "max_new_tokens": 512},
            "dataset_sha256": "f" * 64, "dataset_source": str(src), "dataset_canonical": n == 1319,
            "indices": list(range(n)), "api": "sglang", "url": "http://127.0.0.1:30000", "simulated": simulated,
            "arm": arm, "role": role, "repeat": repeat, "launch": f"{role}-{repeat}"}  # a fresh launch per eval
    lat = rng.gamma(4.0, 2.5, size=n)
    with EvalStore(d) as st:
        st.open(meta)
        for i, row in enumerate(rows):
            label = int(row["answer"].split("####")[-1].strip().replace(",", ""))
            if i in errors:
                rec = SampleRecord(i, f"{i:064x}", None, None, label, None, None, None, None, None, None, 4,
                                   "HTTP 503: server overloaded")
                st.append(rec)
                continue
            ok = bool(correct[i])
            pred = label if ok else label + 1 + int(rng.integers(0, 9))
            out = (outputs or {}).get(i) or _output(row, pred)
            prompt = "Question: shot\nAnswer: 1\n\nQuestion: " + row["question"] + "\nAnswer:"
            rec = SampleRecord(i, hashlib.sha256(prompt.encode()).hexdigest(), out, pred, label, ok, False, "stop",
                               900 + i % 50, int(60 + rng.integers(0, 120)), float(lat[i]), 1)
            st.append(rec, prompt)
        st.write_summary({**summarize(load_samples(d), n, float(lat.max()) + 3.0), "complete": True,
                          "simulated": simulated})


def build_run_dir(root: Path, *, n: int = 60, repeats: int = 1, aa: bool = False, simulated: bool = True,
                  p_a: float = 0.90, p_b: float = 0.93, flip: float = 0.02, margin: float | None = 0.01,
                  seed: int = 0, dataset: Path | None = None, inject: bool = True, run: bool = True,
                  names: tuple[str, str] = ("baseline", "fix"), n_resamples: int = 2000,
                  errors: set[int] = frozenset()) -> Path:  # type: ignore[assignment]
    """A run directory (or, with ``run=False``, a comparison directory) as the harness writes it."""
    root.mkdir(parents=True, exist_ok=True)
    src, rows = _dataset(root, n, dataset)
    n = len(rows)
    rng = np.random.default_rng(seed)
    u = rng.random(n)
    base = {"a": u < p_a, "b": u < p_b}
    inj: dict[str, dict[int, str]] = {"a": {}, "b": {}}
    if inject:
        base["a"][INJECT_INDEX], base["b"][INJECT_INDEX] = False, True
        inj["a"][INJECT_INDEX] = f" I think {SCRIPT_ALERT} {SCRIPT_TITLE} so 1."
        inj["b"][INJECT_INDEX] = f" {BOLD} & <img src=x onerror=alert(2)> The answer is " \
                                 f"{rows[INJECT_INDEX]['answer'].split('####')[-1].strip()}."
    dirs: dict[str, list[Path]] = {"a": [], "b": [], "aa": []}
    plan = [("a", r) for r in range(1, repeats + 1)] + [("b", r) for r in range(1, repeats + 1)]
    plan += [("aa", r) for r in (1, 2)] if aa else []
    for role, r in plan:
        arm = "b" if role == "b" else "a"
        c = base[arm] ^ (rng.random(n) < flip / 2)
        if inject:
            c[INJECT_INDEX] = base[arm][INJECT_INDEX]
        d = root / "evals" / role / f"r{r}" if run else root / f"{role}{r}"
        _write_eval(d, rows, src, c, arm=names[0] if arm == "a" else names[1], role=role, repeat=r,
                    simulated=simulated, rng=rng, outputs=inj[arm], errors=errors if role == "b" else set())
        dirs[role].append(d)
    out = root if run else root / "cmp"
    comp = compare_dirs(dirs["a"], dirs["b"], aa_dirs=dirs["aa"], margin=margin, n_resamples=n_resamples)
    comp = replace(comp, arm_names=schema.ArmNames(a=names[0], b=names[1]))  # the caller names the arms
    if run:
        schema.write_manifest(root / "manifest.json", _manifest(root, names, repeats, aa, simulated, dirs, n))
        schema.write_run_summary(root / "summary.json", schema.RunSummary(
            experiment="shared-slot-fix", verdict=comp.verdict, verdict_reason=comp.verdict_reason, exit_code=0,
            simulated=simulated))
    schema.write_comparison(out / "comparison.json", comp)
    return out


def _manifest(root: Path, names: tuple[str, str], repeats: int, aa: bool, simulated: bool,
              dirs: dict[str, list[Path]], n: int) -> dict[str, Any]:
    def arm(key: str, name: str, side: str, port: int) -> dict[str, Any]:
        argv = [t.format(arm=key, port=port) for t in SEED_ARGV]
        fp = "0f3c9a1" if key == "baseline" else "7be2d40"
        return {
            "name": name, "side": side,
            "launch": {"argv": argv, "env": SEED_ENV, "source": {"tree": f"/src/sglang-{key}", "commit": fp,
                                                                "patch": None if key == "baseline" else
                                                                "arms/shared-slot/fix.patch"},
                       "fingerprint": fp, "python": f"/opt/venv-{key}/bin/python3"},
            "static_checks": [{"name": "patch applied" if key == "fix" else "patch absent", "kind": "source",
                               "passed": True, "expected": "num_fused_shared_experts=0 on per-rank path"
                               if key == "fix" else "unpatched select_experts",
                               "found": "topk.py:412 matches" if key == "fix" else "topk.py:412 original",
                               "evidence": {"file": "python/sglang/srt/layers/moe/topk.py", "line": 412,
                                            "text": "num_fused_shared_experts=0 if has_per_rank_fused_shared_slots()"
                                            " else num_fused_shared_experts"}}],
            "live_checks": [{"name": f"server reports the {name} build", "kind": "http", "passed": True,
                             "expected": name, "found": name,
                             "evidence": f'GET /get_server_info -> {{"build": "{name}", "version": "0.5.6"}}'}],
            "instances": [{"id": f"{key}@1760000000", "probe": {"version": "0.5.6", "build": name},
                           "url": f"http://127.0.0.1:{port}"}],
        }

    evals = {}
    for role, ds in dirs.items():
        for k in range(1, len(ds) + 1):
            evals[f"evals/{role}/r{k}"] = {"arm": names[1] if role == "b" else names[0], "role": role, "repeat": k,
                                          "status": "done", "summary": {"n": n}}
    return {
        "schema_version": 1, "kind": "abh.run", "experiment": "shared-slot-fix",
        "config": {"experiment": {"name": "shared-slot-fix", "a": "baseline", "b": "fix", "repeats": repeats,
                                  "aa_control": aa, "description": "DeepSeek-V4-Pro shared-slot routing fix"},
                   "engine": {"kind": "simulated" if simulated else "sglang"}, "stats": {"margin_pp": 1.0}},
        "provenance": {"harness_version": "0.1.0", "harness_commit": "4996bf4", "harness_dirty": False,
                       "host": "mi355x-node07", "platform": "Linux-6.8", "python": "3.11.9",
                       "gpus": [{"name": "AMD Instinct MI355X", "driver": "6.4"}]},
        "dataset": {"sha256": "f" * 64, "source": "/data/gsm8k/test.jsonl", "canonical": n == 1319, "rows": n},
        "sessions": [{"started": 1760000000.0, "ended": 1760003600.0, "pid": 4242, "resume": False,
                      "argv": ["abh", "run", "experiment=shared-slot-fix", "hf_token=abc"]}],
        "arms": {"baseline": arm("baseline", names[0], "without fix", 30000),
                 "fix": arm("fix", names[1], "with fix", 30001)},
        "arm_diff": {"differences": [{"key": "source.patch", "values": {"baseline": None,
                                                                        "fix": "arms/shared-slot/fix.patch"}},
                                     {"key": "python", "values": {"baseline": "/opt/venv-baseline/bin/python3",
                                                                  "fix": "/opt/venv-fix/bin/python3"}}],
                     "disallowed": [], "allowed": ["source.patch", "python"]},
        "evals": evals, "status": {"code": 0, "verdict": "done"},
    }
