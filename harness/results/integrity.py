"""What a stored eval's rows claim, checked before anything counts them: ``samples.jsonl`` is a plain text
file anyone can edit. Read back, every row is type-checked and unique (an error row is superseded by an
answer), and, given the task's :data:`RowCheck`, rescored by the task's scorer and matched to its question
(prompt hash and label). Anything else is a :class:`~harness.results.fileio.StoreError` naming the file and
the line (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from harness.results import prompt_store
from harness.results.eval_schema import SampleRecord, usual_record
from harness.results.fileio import StoreError, iter_lines
from harness.results.prompt_store import eval_prompts

#: index -> (the sha256 of its prompt, or None where unknown; its label, or None where unknown)
Reference = Mapping[int, tuple[str | None, Any]]
#: the task's scorer: (output, label) -> (pred, correct, invalid)
Scorer = Callable[[str, Any], tuple[Any, bool, bool]]
#: what the rows of the eval in a directory should hold, from its eval.json: (its reference, the task's scorer)
RowCheck = Callable[[Path, Mapping[str, Any]], tuple[Reference | None, Scorer | None]]

#: The fields two rows of one question must agree on to be the same answer.
_ANSWER_FIELDS = ("prompt_sha256", "output", "pred", "label", "correct", "invalid", "error")
_HINT = "the file was edited, or holds another eval's rows: restore it, or delete the row to have it asked again"


def read_rows(path: Path) -> dict[int, tuple[int, SampleRecord]]:
    """The rows of ``samples.jsonl`` by index, with their line numbers, type-checked and duplicates resolved;
    StoreError for a malformed row or two different answers to one question."""
    out: dict[int, tuple[int, SampleRecord]] = {}
    for lineno, rec in _records(path):
        seen = out.get(rec.index)
        if seen is None or seen[1].error is not None:
            out[rec.index] = (lineno, rec)
        elif rec.error is None and _answer(rec) != _answer(seen[1]):
            raise StoreError(f"{path}: lines {seen[0]} and {lineno} are two different answers to question "
                             f"{rec.index}; {_HINT}")
    return out


def _records(path: Path) -> Iterator[tuple[int, SampleRecord]]:
    """(line number, record) of each row of ``path``, as :func:`~harness.results.fileio.iter_jsonl` reads the rows
    and :meth:`SampleRecord.from_dict` checks them (the same records, the same errors). A row is parsed by orjson
    (a third of the stdlib's cost: a comparison reads thousands); a row orjson refuses, or whose record is not of
    the usual types (orjson reads an integer past 64 bits as a float), is read again the stdlib's way."""
    if not path.exists():
        return
    lines = path.read_bytes().split(b"\n")
    last = len(lines) - 1  # the unterminated tail: b"" when the file ends with a newline
    for k, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            rec = usual_record(orjson.loads(raw))
        except orjson.JSONDecodeError:
            rec = None
        if rec is None:
            row = next((r for _, r in iter_lines([raw + b"\n" if k < last else raw], path, start=k + 1)), None)
            if row is None:  # the torn last line a crash leaves
                return
            try:
                rec = SampleRecord.from_dict(row)
            except ValueError as e:
                raise StoreError(f"{path}: line {k + 1}: {e}") from None
        yield k + 1, rec


def _answer(rec: SampleRecord) -> tuple[Any, ...]:
    return tuple(getattr(rec, k) for k in _ANSWER_FIELDS)


def verify(path: Path, rows: Mapping[int, tuple[int, SampleRecord]], reference: Reference | None,
           score: Scorer | None) -> None:
    """Each answered row's claims checked (``score`` None: not rescored); StoreError at the first false."""
    for lineno, rec in sorted(rows.values(), key=lambda x: x[0]):
        if rec.error is not None or rec.output is None:
            continue
        correct, invalid = (rec.correct, rec.invalid) if score is None else score(rec.output, rec.label)[1:]
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


def prompt_hashes(root: Path) -> dict[int, str]:
    """index -> sha256 of the prompt text the eval recorded for it."""
    return {row["index"]: prompt_store.sha256(row["prompt"]) for row in eval_prompts(root)}


def first_prompt(root: Path) -> tuple[int, str] | None:
    """(index, prompt) of the first prompt the eval recorded (None when it holds none)."""
    row = prompt_store.first_prompt(root)
    return None if row is None else (row["index"], row["prompt"])
