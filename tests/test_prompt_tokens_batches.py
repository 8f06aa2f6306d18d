"""An eval learns every prompt's token count from /tokenize a batch of prompts at a time: the ids of every prompt at
once (a 13k-question task) are hundreds of MB of Python ints, of which only the counts are kept."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from harness.measure.evaluation import TOKENIZE_BATCH, _learn_prompt_tokens
from harness.measure.prompt_tokens import PromptTokens
from harness.measure.runner import PREPARE_IN_FLIGHT


def test_counts_are_learnt_a_batch_at_a_time() -> None:
    sizes: list[int] = []

    async def tokenize_all(texts: list[str], special: bool) -> list[list[int]]:
        sizes.append(len(texts))
        return [[7] * len(t) for t in texts]

    client = SimpleNamespace(api=SimpleNamespace(chat=False, name="sglang"), tokenize_all=tokenize_all)
    n = 2 * TOKENIZE_BATCH + 5
    pending = [SimpleNamespace(prompt="x" * (i % 11 + 1), prompt_sha256=f"h{i}") for i in range(n)]
    counts = PromptTokens()
    asyncio.run(_learn_prompt_tokens(client, counts, pending))  # type: ignore[arg-type]
    assert sizes == [TOKENIZE_BATCH, TOKENIZE_BATCH, 5]
    for i in (0, TOKENIZE_BATCH + 3, n - 1):  # every prompt's count, from its own batch
        key = PromptTokens.key("sglang", f"h{i}")
        assert counts.check(key, i % 11 + 1) is None
        assert counts.check(key, i % 11 + 2) is not None


def test_a_server_that_cannot_tokenize_a_list_is_asked_once() -> None:
    calls: list[int] = []

    async def tokenize_all(texts: list[str], special: bool) -> None:
        calls.append(len(texts))

    client = SimpleNamespace(api=SimpleNamespace(chat=False, name="vllm"), tokenize_all=tokenize_all)
    pending = [SimpleNamespace(prompt="p", prompt_sha256=f"h{i}") for i in range(3 * TOKENIZE_BATCH)]
    asyncio.run(_learn_prompt_tokens(client, PromptTokens(), pending))  # type: ignore[arg-type]
    assert calls == [TOKENIZE_BATCH]


def test_after_the_first_batch_two_are_asked_at_once() -> None:
    """The first batch alone, then the server makes one batch's answer while the last one's is read: never more
    than PREPARE_IN_FLIGHT batches' ids held, every prompt's count learnt."""
    in_flight, seen = 0, []

    async def tokenize_all(texts: list[str], special: bool) -> list[list[int]]:
        nonlocal in_flight
        in_flight += 1
        seen.append(in_flight)
        await asyncio.sleep(0)  # another batch may be sent meanwhile
        in_flight -= 1
        return [[7] * len(t) for t in texts]

    client = SimpleNamespace(api=SimpleNamespace(chat=False, name="sglang"), tokenize_all=tokenize_all)
    n = 5 * TOKENIZE_BATCH
    pending = [SimpleNamespace(prompt="x" * (i % 7 + 1), prompt_sha256=f"h{i}") for i in range(n)]
    counts = PromptTokens()
    asyncio.run(_learn_prompt_tokens(client, counts, pending))  # type: ignore[arg-type]
    assert seen[0] == 1 and max(seen) == PREPARE_IN_FLIGHT == 2 and len(seen) == 5
    for i in range(n):
        assert counts.check(PromptTokens.key("sglang", f"h{i}"), i % 7 + 2) is not None


def test_a_second_pass_on_a_launch_asks_only_the_prompts_not_counted_yet() -> None:
    """Every pass on one launch shares its counts: what its tokenizer counted for an earlier pass is not asked again,
    while a count only an answer set (not the tokenizer) still is."""
    asked: list[list[str]] = []

    async def tokenize_all(texts: list[str], special: bool) -> list[list[int]]:
        asked.append(texts)
        return [[7] * len(t) for t in texts]

    client = SimpleNamespace(api=SimpleNamespace(chat=False, name="sglang"), tokenize_all=tokenize_all)
    items = [SimpleNamespace(prompt="x" * (i + 1), prompt_sha256=f"h{i}") for i in range(6)]
    counts = PromptTokens()
    asyncio.run(_learn_prompt_tokens(client, counts, items[:3]))  # type: ignore[arg-type]
    assert counts.check(PromptTokens.key("sglang", "h4"), 5) is None  # set by an answer, not by the tokenizer
    asyncio.run(_learn_prompt_tokens(client, counts, items))  # type: ignore[arg-type]
    assert asked == [["x", "xx", "xxx"], ["xxxx", "xxxxx", "xxxxxx"]]
    asyncio.run(_learn_prompt_tokens(client, counts, items))  # type: ignore[arg-type]
    assert len(asked) == 2
    assert all(counts.check(PromptTokens.key("sglang", f"h{i}"), i + 2) is not None for i in range(6))
