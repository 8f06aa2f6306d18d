"""Eval directories as harness.results.eval_store writes them, for the comparison tests."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from harness.results.eval_store import EvalStore, summarize
from harness.results.schema import SampleRecord

N = 1319


def make_eval(root: Path, correct: np.ndarray | list, *, errors: tuple[int, ...] = (), sha: str = "d" * 64,
              recipe: str = "sglang-gsm8k-5shot", simulated: bool = False, **extra) -> Path:
    """Write an eval directory: question i is right iff correct[i]; indices in ``errors`` errored."""
    n = len(correct)
    meta = {"dataset_sha256": sha, "recipe": recipe, "indices": list(range(n)), "task": "gsm8k", **extra}
    if simulated:
        meta["simulated"] = True
    store = EvalStore(root)
    store.open(meta)
    rows = []
    for i, ok in enumerate(correct):
        err = "HTTP 500" if i in errors else None
        # rows as the harness writes them: the output scores `correct` against the label, the hash is the prompt's
        rec = SampleRecord(index=i, prompt_sha256=prompt_sha(i), output=None if err else f"#### {1 if ok else 2}",
                           pred=None if err else (1 if ok else 2), label=1, correct=None if err else bool(ok),
                           invalid=None if err else False, finish_reason=None if err else "stop",
                           prompt_tokens=10, completion_tokens=5, latency_s=0.1, attempts=1, error=err)
        store.append(rec, prompt=f"Question {i}")
        rows.append(rec)
    store.write_summary({**summarize(rows, n, 1.0), "complete": True})
    store.close()
    return root


def prompt_sha(i: int) -> str:
    """The sha256 of the prompt :func:`make_eval` records for question ``i``."""
    return hashlib.sha256(f"Question {i}".encode()).hexdigest()


def seed_vectors() -> tuple[np.ndarray, np.ndarray]:
    """The seed's arms in a shuffled question order: 1237 both, 10 A only, 14 B only, 58 neither."""
    cells = np.r_[np.zeros(1237), np.ones(10), 2 * np.ones(14), 3 * np.ones(58)]
    cells = np.random.default_rng(0).permutation(cells)
    return np.isin(cells, (0, 1)), np.isin(cells, (0, 2))
