"""An eval's packed prompts are read as far as a reader asks: the first prompt (which the few-shot check needs)
costs one line, not the whole file; a reader of every row still hears of a damaged file."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from harness.results.fileio import StoreError
from harness.results.integrity import first_prompt
from harness.results.prompt_store import eval_prompts, packed
from harness.results.schema import PROMPTS_FILE


def _packed_eval(root: Path, n: int) -> Path:
    root.mkdir(parents=True)
    rows = [{"index": i, "prompt_sha256": hashlib.sha256(f"Question {i}?".encode()).hexdigest(),
             "prompt": f"Question {i}?"} for i in range(n)]
    raw = "".join(json.dumps(r) + "\n" for r in rows).encode()
    packed(root / PROMPTS_FILE).write_bytes(gzip.compress(raw, mtime=0))
    return root


def test_the_first_prompt_reads_one_line_of_a_packed_file(tmp_path: Path) -> None:
    root = _packed_eval(tmp_path / "ev", 5000)
    gz = packed(root / PROMPTS_FILE)
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])  # the file's second half lost
    assert first_prompt(root) == (0, "Question 0?")
    with pytest.raises(StoreError, match="not a readable gzip file"):
        list(eval_prompts(root))


def test_every_row_of_a_whole_packed_file_is_read(tmp_path: Path) -> None:
    root = _packed_eval(tmp_path / "ev", 300)
    assert [r["index"] for r in eval_prompts(root)] == list(range(300))
