"""What the stored rows of a GSM8K eval must hold (this task's :data:`~harness.results.integrity.RowCheck`).

Each question's label and prompt hash come from the dataset the eval names, found by its content hash, with the
few-shot block its recipe makes (SGLang's: the test rows' first k; otherwise the block a recorded prompt starts
with, trusted when its hash is the ``shots_sha256`` eval.json records). Where the dataset cannot be found, the
prompts ``prompts.jsonl`` recorded give the hashes (no labels).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.results.integrity import Reference, Scorer, first_prompt, prompt_hashes
from harness.results.prompt_store import sha256
from harness.tasks import gsm8k, sources

#: the GSM8K recipes :meth:`~harness.tasks.gsm8k.GSM8K.score` grades (the others grade as their upstream does)
OWN_RECIPES = ("sglang", "sglang_8shot", "heldout")


def row_check(root: Path, meta: Mapping[str, Any]) -> tuple[Reference | None, Scorer | None]:
    """(the reference of the eval in ``root``, GSM8K's scorer); for another task or recipe, the prompts'
    hashes ``prompts.jsonl`` recorded and no rescoring."""
    recipe = meta.get("recipe")
    name = recipe.get("name") if isinstance(recipe, dict) else None
    if (meta.get("task") or "gsm8k") == "gsm8k" and name in OWN_RECIPES:
        return reference_for(root, meta), score
    return {i: (sha, None) for i, sha in prompt_hashes(root).items()} or None, None


def reference_for(root: Path, meta: Mapping[str, Any]) -> Reference | None:
    """Each question's prompt sha256 and label (see the module docstring); None when neither the dataset nor
    ``prompts.jsonl`` is there."""
    source, sha256 = str(meta.get("dataset_source") or ""), str(meta.get("dataset_sha256") or "")
    rows = _dataset_rows(source, sha256)
    if rows is None:
        return {i: (sha, None) for i, sha in prompt_hashes(root).items()} or None
    shots = _few_shot(root, meta, rows)
    return {i: _question(source, sha256, shots, i) for i in meta.get("indices") or []
            if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(rows)}


@functools.lru_cache(maxsize=1 << 15)
def _question(source: str, digest: str, shots: str | None, i: int) -> tuple[str | None, int]:
    """(the sha256 of question ``i``'s prompt after ``shots``, its label) in the dataset of hash ``digest``: the
    evals of a comparison share them (computed once, not once per eval)."""
    row = (_dataset_rows(source, digest) or [])[i]
    return None if shots is None else sha256(shots + gsm8k.one_example(row, False)), gsm8k.get_answer_value(row["answer"])


@functools.lru_cache(maxsize=1 << 15)
def _cached_score(output: str, label: int) -> tuple[int, bool, bool]:
    return gsm8k.GSM8K.score(output, label)


def score(output: str, label: Any) -> tuple[int, bool, bool]:
    """:meth:`~harness.tasks.gsm8k.GSM8K.score`, each (output, label) graded once: the evals of a comparison
    repeat most answers (two runs of one server agree on most questions)."""
    try:
        return _cached_score(output, label)
    except TypeError:  # an unhashable label (a tampered row): graded as it is, and found false
        return gsm8k.GSM8K.score(output, label)


@functools.lru_cache(maxsize=8)
def _dataset_rows(source: str, sha256: str) -> list[dict[str, str]] | None:
    """The test rows whose content hash is ``sha256``: the embedded canonical set, or the file at ``source``
    (None when neither has that hash)."""
    try:
        if sha256 == gsm8k.CANONICAL_TEST_HASH:
            return gsm8k.read_embedded_test()
        if source and not sources.is_hf(source) and Path(source).is_file():
            rows = gsm8k.read_jsonl(Path(source))
            return rows if gsm8k.content_hash(rows) == sha256 else None
    except gsm8k.DatasetError:
        return None
    return None


def _few_shot(root: Path, meta: Mapping[str, Any], rows: list[dict[str, str]]) -> str | None:
    """The eval's few-shot block (see the module docstring), or None when it cannot be trusted."""
    recipe, want = meta.get("recipe"), meta.get("shots_sha256")
    candidates: list[str] = []
    if isinstance(recipe, dict) and recipe.get("name") == "sglang" and isinstance(recipe.get("num_shots"), int):
        candidates.append(gsm8k.few_shot_block(rows[:recipe["num_shots"]]))
    recorded = first_prompt(root)
    if recorded is not None and 0 <= recorded[0] < len(rows):
        suffix = gsm8k.one_example(rows[recorded[0]], False)
        if recorded[1].endswith(suffix):
            candidates.append(recorded[1][:-len(suffix)])
    return next((shots for shots in candidates if want is None or sha256(shots) == want), None)
