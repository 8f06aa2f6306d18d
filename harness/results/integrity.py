"""What a stored eval's rows claim, checked before anything counts them (issue 22, item 6).

``samples.jsonl`` is a plain text file: anyone can flip ``correct`` to true, relabel an answer as another
question's or paste a row twice. Read back for a comparison or a resume, every row is therefore

* type-checked (:meth:`~harness.results.schema.SampleRecord.from_dict`): a row ``{}``, ``[1, 2]``, an index
  ``"5"`` or ``correct: "yes"`` is refused;
* rescored: ``correct`` and ``invalid`` recomputed from the stored output and label by the task's own scorer
  (:meth:`harness.tasks.gsm8k.GSM8K.score`) must be the stored values;
* matched to its question: its ``prompt_sha256`` must be the hash of that question's prompt, and its label the
  dataset's (from the eval's questions on a resume; from the dataset, when it can be found by its hash, and
  ``prompts.jsonl`` otherwise, on a comparison);
* unique: two different answers to one question are refused (an error row is superseded by an answer, as the
  resume rule says; identical copies are one row).

Anything else is a :class:`~harness.results.fileio.StoreError` naming the file and the line: the CLI exits 2.
The task is read from here because it is the one owner of what "correct" means and of its prompts.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.results import schema
from harness.results.fileio import StoreError, iter_jsonl
from harness.results.schema import SampleRecord
from harness.tasks import gsm8k

#: index -> (the sha256 of its prompt, or None where unknown; its label, or None where unknown)
Reference = Mapping[int, tuple[str | None, int | None]]

#: The fields two rows of one question must agree on to be the same answer.
_ANSWER_FIELDS = ("prompt_sha256", "output", "pred", "label", "correct", "invalid", "error")
_HINT = "the file was edited, or holds another eval's rows: restore it, or delete the row to have it asked again"


def read_rows(path: Path) -> dict[int, tuple[int, SampleRecord]]:
    """The rows of ``samples.jsonl`` by index, with their line numbers: each type-checked, duplicates resolved
    (an answer supersedes an error row; identical answers are one); StoreError for a malformed row or two
    different answers to one question."""
    out: dict[int, tuple[int, SampleRecord]] = {}
    for lineno, row in iter_jsonl(path):
        try:
            rec = SampleRecord.from_dict(row)
        except ValueError as e:
            raise StoreError(f"{path}: line {lineno}: {e}") from None
        seen = out.get(rec.index)
        if seen is None or seen[1].error is not None:
            out[rec.index] = (lineno, rec)
        elif rec.error is None and _answer(rec) != _answer(seen[1]):
            raise StoreError(f"{path}: lines {seen[0]} and {lineno} are two different answers to question "
                             f"{rec.index}; {_HINT}")
    return out


def _answer(rec: SampleRecord) -> tuple[Any, ...]:
    d = asdict(rec)
    return tuple(d[k] for k in _ANSWER_FIELDS)


def verify(path: Path, rows: Mapping[int, tuple[int, SampleRecord]], reference: Reference | None) -> None:
    """Each answered row's claims checked (see the module docstring); StoreError at the first that is false."""
    for lineno, rec in sorted(rows.values(), key=lambda x: x[0]):
        if rec.error is not None or rec.output is None:
            continue
        _, correct, invalid = gsm8k.GSM8K.score(rec.output, rec.label)
        where = f"{path}: line {lineno} (question {rec.index})"
        if (rec.correct, rec.invalid) != (correct, invalid):
            raise StoreError(f"{where}: correct={_js(rec.correct)}, invalid={_js(rec.invalid)}, but its output "
                             f"scores correct={_js(correct)}, invalid={_js(invalid)} against its label "
                             f"{rec.label}; {_HINT}")
        want_sha, want_label = (reference or {}).get(rec.index, (None, None))
        if want_sha is not None and rec.prompt_sha256 != want_sha:
            raise StoreError(f"{where}: its prompt hash is not question {rec.index}'s prompt (an answer to "
                             f"another question?); {_HINT}")
        if want_label is not None and rec.label != want_label:
            raise StoreError(f"{where}: label {rec.label}, but the dataset's answer to question {rec.index} is "
                             f"{want_label}; {_HINT}")


def _js(x: Any) -> str:
    return {True: "true", False: "false", None: "null"}.get(x, str(x))


# ------------------------------------------------------------------------------------------ the reference
def reference_for(root: Path, meta: Mapping[str, Any]) -> Reference | None:
    """What each question of the eval in ``root`` should hold: its prompt's sha256 and its label, from the
    dataset the eval names (found by its content hash: the embedded canonical set, or its ``dataset_source``)
    and the few-shot block its recipe makes; else the prompts its ``prompts.jsonl`` recorded (hashes only).
    None when neither is there."""
    rows = _dataset_rows(str(meta.get("dataset_source") or ""), str(meta.get("dataset_sha256") or ""))
    if rows is not None:
        shots = _few_shot(root, meta, rows)
        ref: dict[int, tuple[str | None, int | None]] = {}
        for i in meta.get("indices") or []:
            if isinstance(i, int) and 0 <= i < len(rows):
                sha = None if shots is None else _sha(shots + gsm8k.one_example(rows[i], False))
                ref[i] = (sha, gsm8k.get_answer_value(rows[i]["answer"]))
        return ref
    prompts = {i: (sha, None) for i, sha in _prompt_hashes(root).items()}
    return prompts or None


def questions_reference(questions: Iterable[gsm8k.Question]) -> Reference:
    """The reference of an eval about to run: its questions' own prompts and labels."""
    return {q.index: (q.prompt_sha256, q.label) for q in questions}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@functools.lru_cache(maxsize=8)
def _dataset_rows(source: str, sha256: str) -> list[dict[str, str]] | None:
    """The test rows whose content hash is ``sha256``: the embedded canonical set, or the file at ``source``
    (None when neither has that hash)."""
    try:
        if sha256 == gsm8k.CANONICAL_TEST_HASH:
            return gsm8k.read_embedded_test()
        if source and not source.startswith(gsm8k.HF_PREFIX) and Path(source).is_file():
            rows = gsm8k.read_jsonl(Path(source))
            return rows if gsm8k.content_hash(rows) == sha256 else None
    except gsm8k.DatasetError:
        return None
    return None


def _few_shot(root: Path, meta: Mapping[str, Any], rows: list[dict[str, str]]) -> str | None:
    """The eval's few-shot block: SGLang's recipe takes the test rows' first k; otherwise (heldout: train rows,
    which may not be here) the block a recorded prompt starts with. Trusted only when its hash is the one
    eval.json records (when it records one)."""
    recipe = meta.get("recipe")
    want = meta.get("shots_sha256")
    candidates: list[str] = []
    if isinstance(recipe, dict) and recipe.get("name") == "sglang" and isinstance(recipe.get("num_shots"), int):
        candidates.append(gsm8k.few_shot_block(rows[:recipe["num_shots"]]))
    for _, row in iter_jsonl(root / schema.PROMPTS_FILE):
        i, prompt = row.get("index"), row.get("prompt")
        if isinstance(i, int) and 0 <= i < len(rows) and isinstance(prompt, str):
            suffix = gsm8k.one_example(rows[i], False)
            if prompt.endswith(suffix):
                candidates.append(prompt[:-len(suffix)])
        break  # one recorded prompt tells the block
    for shots in candidates:
        if want is None or _sha(shots) == want:
            return shots
    return None


def _prompt_hashes(root: Path) -> dict[int, str]:
    """index -> sha256 of the prompt ``prompts.jsonl`` recorded for it."""
    out: dict[int, str] = {}
    for _, row in iter_jsonl(root / schema.PROMPTS_FILE):
        i, prompt = row.get("index"), row.get("prompt")
        if isinstance(i, int) and not isinstance(i, bool) and isinstance(prompt, str):
            out[i] = _sha(prompt)
    return out
