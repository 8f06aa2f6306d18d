"""The fast readers of a comparison read what the plain ones did: samples.jsonl rows parsed by orjson and checked by
type (:func:`harness.results.eval_schema.usual_record`), the first prompt without the whole text store, a decimal
answer without ``ast.literal_eval``, the samples CSV from the rows' cells."""

from __future__ import annotations

import ast
import gzip
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.results import eval_schema, integrity, prompt_store, schema
from harness.results.fileio import StoreError, iter_jsonl
from harness.results.schema import PROMPTS_FILE, SampleRecord
from harness.tasks.gsm8k import INVALID, last_literal

ROW: dict[str, Any] = {"index": 3, "prompt_sha256": "ab", "output": "so 42", "pred": 42, "label": 42, "correct": True,
                       "invalid": False, "finish_reason": "stop", "prompt_tokens": 10, "completion_tokens": 5,
                       "latency_s": 0.25, "attempts": 1}

#: rows of every field's edge values: each is read as the field-by-field checks read it, or refused as they refuse it
EDITS: list[dict[str, Any]] = [
    {}, {"error": "timeout", "correct": None, "invalid": None, "output": None, "pred": None},
    {"error": "timeout"}, {"index": -1}, {"index": True}, {"index": 2.0}, {"index": 2**70}, {"prompt_sha256": 5},
    {"output": None}, {"pred": None}, {"pred": 1.5}, {"pred": float("nan")}, {"pred": float("inf")}, {"pred": True},
    {"pred": [1]}, {"pred": 2.0**70}, {"label": "x"}, {"label": None}, {"label": 1e300}, {"label": False},
    {"correct": None}, {"correct": 1}, {"invalid": "no"}, {"finish_reason": None}, {"finish_reason": 3},
    {"prompt_tokens": None}, {"prompt_tokens": -2}, {"completion_tokens": 1.0}, {"latency_s": None},
    {"latency_s": 3}, {"latency_s": -0.5}, {"latency_s": float("nan")}, {"latency_s": float("inf")},
    {"latency_s": True}, {"attempts": 0}, {"attempts": None}, {"score": 0.5}, {"score": 1}, {"score": 1.5},
    {"score": None}, {"score": True}, {"reasoning": "hm"}, {"reasoning": 1}, {"extra": {"nested": [1, 2]}},
]


def _checked_one_by_one(row: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``from_dict`` with the type check left out: the record or the refusal of the field-by-field checks."""
    with monkeypatch.context() as m:
        m.setattr(eval_schema, "usual_record", lambda d: None)  # where SampleRecord.from_dict reads it
        try:
            return SampleRecord.from_dict(row)
        except ValueError as e:
            return ("refused", str(e))


@pytest.mark.parametrize("edit", EDITS + [{"drop": k} for k in ROW])
def test_a_row_of_the_usual_types_is_the_record_the_checks_make(edit: dict[str, Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    row = {k: v for k, v in {**ROW, **edit}.items() if k not in ("drop", edit.get("drop"))}
    slow = _checked_one_by_one(row, monkeypatch)
    fast = schema.usual_record(row)
    assert fast is None or fast == slow  # accepted only as the checks accept it
    try:
        got: Any = SampleRecord.from_dict(row)
    except ValueError as e:
        got = ("refused", str(e))
    assert got == slow


def _plain_rows(path: Path) -> Any:
    """read_rows as it read before: the stdlib's parse, every row checked field by field."""
    out: dict[int, tuple[int, SampleRecord]] = {}
    try:
        for lineno, row in iter_jsonl(path):
            rec = SampleRecord.from_dict(row)
            seen = out.get(rec.index)
            if seen is None or seen[1].error is not None:
                out[rec.index] = (lineno, rec)
    except (StoreError, ValueError) as e:
        return ("refused", type(e).__name__)
    return out


@pytest.mark.parametrize("lines", [
    [json.dumps(ROW), "", json.dumps({**ROW, "index": 4}), "  "],
    [json.dumps(ROW), json.dumps({**ROW, "index": 4})[:-5]],  # a torn last line: a crash, dropped
    [json.dumps(ROW), json.dumps({**ROW, "index": 4})[:-5], json.dumps(ROW)],  # not last: not JSON
    ['{"index": 123456789012345678901234567890, ' + json.dumps(ROW)[1:]],  # past 64 bits: orjson reads a float
    ['{"latency_s": 1e400, ' + json.dumps(ROW)[1:]], ['{"latency_s": NaN, ' + json.dumps(ROW)[1:]],
    ['{"latency_s": 12345678901234567890123, ' + json.dumps(ROW)[1:]],
    [json.dumps({**ROW, "output": "\ud800 lone"})], ["\ufeff" + json.dumps(ROW)], ["[1, 2]"], [json.dumps(ROW) + "\r"],
    [json.dumps({**ROW, "output": "line\u2028sep \x0b"}, ensure_ascii=False)],
])
def test_samples_are_read_as_the_stdlib_read_them(lines: list[str], tmp_path: Path) -> None:
    for end in ("\n", ""):
        path = tmp_path / "samples.jsonl"
        path.write_bytes(("\n".join(lines) + end).encode("utf-8", "surrogatepass"))
        want = _plain_rows(path)
        try:
            got: Any = integrity.read_rows(path)
        except StoreError as e:
            got = ("refused", "StoreError" if want[1] == "StoreError" else type(e).__name__)
        if isinstance(want, tuple) and want[1] == "ValueError":  # a row the checks refuse: one line naming it
            assert isinstance(got, tuple)
        else:
            assert got == want
            if isinstance(got, dict):
                assert [type(r.latency_s) for _, r in got.values()] == [type(r.latency_s) for _, r in want.values()]


def _eval_with_store(root: Path, texts: list[str], stored: list[str]) -> Path:
    """An eval whose prompts.jsonl names ``texts`` and whose packed text store holds ``stored``."""
    root.mkdir(parents=True)
    sha = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    (root / PROMPTS_FILE).write_text("".join(json.dumps({"index": i, "prompt_sha256": s}) + "\n"
                                             for i, s in enumerate(sha)))
    store = root / prompt_store.TEXTS
    body = "".join(json.dumps({"prompt_sha256": hashlib.sha256(t.encode()).hexdigest(), "prompt": t}) + "\n"
                   for t in stored)
    prompt_store.packed(store).write_bytes(gzip.compress(body.encode(), mtime=0))
    (root / schema.EVAL_FILE).write_text(json.dumps({prompt_store.TEXTS_KEY: prompt_store.TEXTS}))
    return root


@pytest.mark.parametrize("stored", [["Q0", "Q1", "Q2"], ["Q2", "Q1", "Q0"], ["Q1", "Q2"], ["Q2"], []])
def test_the_first_prompt_is_the_first_row_every_reader_sees(stored: list[str], tmp_path: Path) -> None:
    root = _eval_with_store(tmp_path / "ev", ["Q0", "Q1", "Q2"], stored)
    prompt_store._READ.clear()
    first = next(prompt_store.eval_prompts(root), None)
    prompt_store._READ.clear()
    assert prompt_store.first_prompt(root) == first
    assert integrity.first_prompt(root) == (None if first is None else (first["index"], first["prompt"]))


def test_the_first_prompt_reads_the_store_no_further_than_its_text(tmp_path: Path) -> None:
    root = _eval_with_store(tmp_path / "ev", ["Q0", "Q1"], ["Q0"] + [f"other {i}" for i in range(5000)])
    gz = prompt_store.packed(root / prompt_store.TEXTS)
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])  # the store's second half lost
    prompt_store._READ.clear()
    assert integrity.first_prompt(root) == (0, "Q0")


def _literal_eval(answer: str, pattern: str) -> Any:
    numbers = re.findall(pattern, answer.replace(",", ""))
    if not numbers:
        return INVALID
    try:
        return ast.literal_eval(numbers[-1])
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return INVALID


@pytest.mark.parametrize("answer", ["12", "0", "00", "007", "0120", "x 5 y 60", "\u0663", "1" * 3999, "1" * 4001,
                                    "9" * 4300, "-5", "3.50", "1,000", "", "abc", "1e5", "0x1F", "1_000"])
@pytest.mark.parametrize("pattern", [r"\d+", r"-?[\d,]*\.?\d+", r"[\w.]+"])
def test_a_decimal_answer_is_what_literal_eval_made_of_it(answer: str, pattern: str) -> None:
    got, want = last_literal(answer, pattern), _literal_eval(answer, pattern)
    assert got == want and type(got) is type(want)
