"""Is this answer the answer to this question? A server or proxy that answers a request with another request's
answer would be graded a wrong answer; its ``prompt_tokens`` gives it away, checked against the count the
server's tokenizer makes of the prompt (not the chat API's: its count includes the template), else its first
answer to that prompt on the same launch. A mismatch is that request's error, retried as any other.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.serving.wire import NOT_THIS_REQUEST

#: where an expected count came from, for the message
BY_TOKENIZER = "its /tokenize"
BY_FIRST_ANSWER = "its first answer to this prompt"


class PromptTokens:
    """The token count of each prompt on one server launch (keyed by the protocol and the prompt's digest: a
    chat prompt counts its template), shared by every pass on that launch."""

    def __init__(self) -> None:
        self._counts: dict[str, tuple[int, str]] = {}

    @staticmethod
    def key(api: str, prompt_sha256: str) -> str:
        return f"{api}:{prompt_sha256}"

    def learn(self, keys: Sequence[str], counts: Sequence[int]) -> None:
        """What the server's tokenizer made of these prompts (it overrides what a first answer said)."""
        for key, n in zip(keys, counts, strict=True):
            self._counts[key] = (n, BY_TOKENIZER)

    def tokenized(self, key: str) -> bool:
        """Whether the server's tokenizer has counted the prompt ``key`` (its count need not be asked again)."""
        have = self._counts.get(key)
        return have is not None and have[1] == BY_TOKENIZER

    def check(self, key: str, got: int | None) -> str | None:
        """Why an answer counting ``got`` prompt tokens cannot answer the prompt ``key``, or None (the first
        answer to a prompt of unknown count sets it)."""
        if got is None:
            return None
        have = self._counts.setdefault(key, (got, BY_FIRST_ANSWER))
        if have[0] == got:
            return None
        return (f"{NOT_THIS_REQUEST}: prompt_tokens {got}, but this prompt is {have[0]} tokens on "
                f"this server ({have[1]})")
