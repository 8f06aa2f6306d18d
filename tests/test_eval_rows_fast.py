"""An eval's per-question writes made cheaply, byte for byte as before: the text store's row of a prompt that
starts with the shared few-shot head (the head escaped once), rows encoded by one kept encoder, and a prompt's
digest made once per question."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from harness.results import fileio
from harness.results.eval_schema import PROMPTS_FILE as PROMPTS
from harness.results.eval_schema import SAMPLES_FILE as SAMPLES
from harness.results.eval_schema import SampleRecord
from harness.results.eval_store import EvalStore
from harness.results.fileio import OutputError
from harness.results.prompt_store import TEXTS, PromptTexts
from harness.tasks.interface import Item

#: characters JSON escapes, leaves alone, or cannot encode to UTF-8 alone (lone surrogates)
ALPHABET = ['a', '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "\ud800", "\udc00", "😀", " ", "/",
            "\x08", "\x0c", "\r"]


def test_a_text_row_with_a_shared_head_is_the_bytes_json_dumps_makes(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = PromptTexts(tmp_path / "prompt_texts.jsonl")
    heads = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40))) for _ in range(3)]
    for i in range(2000):
        head = heads[i % 3]
        rest = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))
        text = head + rest if i % 5 else rest  # a text that does not start with the head: written whole
        sha = f"s{i}\u00e9"
        want = json.dumps({"prompt_sha256": sha, "prompt": text}, ensure_ascii=False) + "\n"
        assert store._row(sha, text, head) == want, (head, rest)


def test_a_kept_encoder_writes_what_json_dumps_writes() -> None:
    rng = random.Random(3)
    for i in range(500):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30)))
        row = {"index": i, "output": text, "pred": [1.5, float("nan"), float("inf"), None, True][i % 5],
               "label": 2**70, "reasoning": {"nested": [text, -0.0]}}
        assert fileio.dumps_unicode(row) == json.dumps(row, ensure_ascii=False)


def test_an_items_digest_is_made_once_and_not_part_of_its_value() -> None:
    a, b = Item(1, "ask", 3, 1, head="head "), Item(1, "ask", 3, 1, head="head ")
    digest = a.prompt_sha256
    assert digest == hashlib.sha256(b"head ask").hexdigest() == a.prompt_sha256
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)  # b's digest not made yet: equal all the same
    assert "sha" not in repr(a)


def _rec(i: int, sha: str) -> SampleRecord:
    return SampleRecord(index=i, prompt_sha256=sha, output="#### 1", pred=1, label=1, correct=True, invalid=False,
                        finish_reason="stop", prompt_tokens=10, completion_tokens=5, latency_s=0.1, attempts=1)


def test_queued_rows_wait_for_the_flush_and_are_the_rows_append_writes(tmp_path: Path) -> None:
    meta = {"dataset_sha256": "d" * 64, "recipe": "r", "indices": [0, 1, 2], "task": "gsm8k"}
    files = (SAMPLES, PROMPTS, TEXTS)
    written = {}
    for how in ("append", "queue"):
        root = tmp_path / how
        store = EvalStore(root)
        store.open(meta)
        for i in range(3):
            text = f"shared head, question {i}"
            sha = hashlib.sha256(text.encode()).hexdigest()
            getattr(store, how)(_rec(i, sha), text, "shared head, ")
            if how == "queue":  # nothing on disk before the flush
                assert all(not (root / f).exists() or (root / f).read_bytes() == b"" for f in files)
        store.flush()
        written[how] = {f: (root / f).read_bytes() for f in files}
        store.close()
    assert written["queue"] == written["append"] and written["append"][SAMPLES].count(b"\n") == 3


def test_a_flush_that_fails_is_the_failure_of_every_later_row(tmp_path: Path) -> None:
    store = EvalStore(tmp_path / "ev")
    store.open({"dataset_sha256": "d" * 64, "recipe": "r", "indices": [0, 1], "task": "gsm8k"})
    store.queue(_rec(0, "a" * 64), "p0")
    assert store._samples_f is not None
    store._samples_f.close()
    store._samples_f = open("/dev/full", "ab", buffering=0)  # every write fails as on a full disk: ENOSPC
    with pytest.raises(OutputError):
        store.flush()
    with pytest.raises(OutputError):
        store.queue(_rec(1, "b" * 64), "p1")
    store.close()  # what failed is not raised again on the way out
