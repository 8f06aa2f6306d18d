"""An eval's per-question writes made cheaply, byte for byte as before: the text store's row of a prompt that
starts with the shared few-shot head (the head escaped once), rows encoded by one kept encoder, and a prompt's
digest made once per question."""

from __future__ import annotations

import hashlib
import json
import random

from harness.results import fileio
from harness.results.prompt_store import PromptTexts
from harness.tasks.interface import Item

#: characters JSON escapes, leaves alone, or cannot encode to UTF-8 alone (lone surrogates)
ALPHABET = ['a', '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "\ud800", "\udc00", "😀", " ", "/",
            "\x08", "\x0c", "\r"]


def test_a_text_row_with_a_shared_head_is_the_bytes_json_dumps_makes(tmp_path) -> None:
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
