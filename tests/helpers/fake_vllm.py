"""A tiny OpenAI-compatible server with vLLM's answers, for the id-scoring tests: a word-level tokenizer that
may add a BOS token (as a tokenizer.json post-processor does), ``/tokenize``, ``/v1/completions`` with a text or
a list of ids as the prompt, ``echo`` (tokens, ``token_logprobs``, ``top_logprobs`` keyed by text,
``text_offset``) and ``prompt_logprobs`` (keyed by id, with ``rank`` and ``decoded_token``).

Its offsets are vLLM 0.32's, as recorded from a real server with a BOS-adding tokenizer
(/work/notes/vllm_cpu_responses.md, "BOS: echo text_offset"): a running sum of the tokens' texts starting at
the BOS token's text, while the echoed ``text`` is the prompt without it. The "model" is a fixed function of
(previous id, id), so any two requests agree on every logprob: :meth:`FakeVLLM.logprob` is the truth a test
compares with.
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

from aiohttp import web

from helpers.aioserver import ThreadedApp

BOS_ID, BOS_TEXT = 1, "<|im_start|>"
_PIECE = re.compile(r"\s*\w+|\s*[^\w\s]|\s+")
#: Candidate next tokens at every position (besides the one that comes): the model's top-k come from these.
#: the model's vocabulary besides the texts it tokenizes: more than the 20 alternatives a scoring pass asks for
#: (a real vocabulary's tens of thousands), so that every position has all k of them
_COMMON = [" the", " 7", ".", "\n", " is", " and", " of", " 3", " a", ":", " to", " in", " it", " was", " for",
           " on", " with", " 4", " 5", " 12", " he", " she", " at", " by"]


def _tid(text: str) -> int:
    return 100 + zlib.crc32(text.encode()) % 50000


class FakeVLLM(ThreadedApp):
    """``bos``: the tokenizer adds BOS (id 1) with special tokens; ``tokenize``: serve ``POST /tokenize``;
    ``prompt_logprobs``: honour the field (else ignore it, as a server that does not know it)."""

    def __init__(self, bos: bool = True, tokenize: bool = True, prompt_logprobs: bool = True,
                 answer: str = " Tom has 3 + 4 = 7 apples.\n#### 7") -> None:
        super().__init__()
        self.bos, self.tokenize, self.prompt_logprobs, self.answer = bos, tokenize, prompt_logprobs, answer
        self.texts: dict[int, str] = {BOS_ID: BOS_TEXT}
        self.requests: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ tokenizer and model
    def encode(self, text: str, special: bool = True) -> list[int]:
        ids = [BOS_ID] if special and self.bos else []
        for piece in _PIECE.findall(text):
            i = _tid(piece)
            self.texts[i] = piece
            ids.append(i)
        return ids

    def logprob(self, prev: int, tid: int) -> float:
        """log p(tid | prev): a fixed function, not normalised (a test only compares numbers)."""
        return -0.05 - (zlib.crc32(f"{prev}:{tid}".encode()) % 997) / 100.0

    def top(self, prev: int, k: int) -> list[tuple[int, float]]:
        cands = {_tid(t) for t in _COMMON}
        for t in _COMMON:
            self.texts.setdefault(_tid(t), t)
        ranked = sorted(((c, self.logprob(prev, c)) for c in cands), key=lambda x: -x[1])
        return ranked[:k]

    def rank(self, prev: int, tid: int) -> int:
        lp = self.logprob(prev, tid)
        return 1 + sum(1 for c, v in self.top(prev, 10) if v > lp and c != tid)

    # ------------------------------------------------------------------ routes
    def routes(self, app: web.Application) -> None:
        async def models(request: web.Request) -> web.Response:
            return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

        async def health(request: web.Request) -> web.Response:
            return web.Response(text="")

        async def tokenize(request: web.Request) -> web.Response:
            if not self.tokenize:
                return web.json_response({"detail": "Not Found"}, status=404)
            body = await request.json()
            if not isinstance(body.get("prompt"), str):  # vLLM's TokenizeCompletionRequest: one string
                return web.json_response({"error": {"message": "prompt: Input should be a valid string",
                                                    "code": 400}}, status=400)
            ids = self.encode(body["prompt"], bool(body.get("add_special_tokens", True)))
            return web.json_response({"count": len(ids), "max_model_len": 2048, "tokens": ids, "token_strs": None})

        async def completions(request: web.Request) -> web.Response:
            body = await request.json()
            self.requests.append(body)
            return web.json_response(self.complete(body))

        app.router.add_get("/v1/models", models)
        app.router.add_get("/health", health)
        app.router.add_post("/tokenize", tokenize)
        app.router.add_post("/v1/completions", completions)

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["prompt"]
        ids = list(prompt) if isinstance(prompt, list) else self.encode(prompt)
        text = "".join(self.texts.get(i, "") for i in ids if i != BOS_ID) if isinstance(prompt, list) else prompt
        k_echo, k_prompt = body.get("logprobs"), body.get("prompt_logprobs")
        max_tokens = int(body.get("max_tokens", 16))
        if k_echo is not None or k_prompt is not None or max_tokens <= 1:  # a scoring request or the probe: greedy
            gen = [self.top(ids[-1], 1)[0][0]] if max_tokens else []
        else:
            gen = self.encode(self.answer, special=False)
        gen_text = "".join(self.texts[i] for i in gen)
        choice: dict[str, Any] = {"index": 0, "text": (text if body.get("echo") else "") + gen_text,
                                  "finish_reason": "length", "stop_reason": None, "logprobs": None,
                                  "prompt_logprobs": None}
        if k_echo is not None:
            full = ids + gen if body.get("echo") else gen
            start = 0 if body.get("echo") else len(ids)
            tokens, lps, tops, offsets, off = [], [], [], [], 0
            for p, tid in enumerate(full, start=start):
                tokens.append(self.texts[tid])
                offsets.append(off)
                off += len(self.texts[tid])
                if p == 0:
                    lps.append(None)
                    tops.append(None)
                    continue
                prev = (ids + gen)[p - 1]
                lps.append(self.logprob(prev, tid))
                top = {self.texts[c]: v for c, v in self.top(prev, int(k_echo))}
                top[self.texts[tid]] = self.logprob(prev, tid)
                tops.append(top)
            choice["logprobs"] = {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens,
                                  "top_logprobs": tops}
        if k_prompt is not None and self.prompt_logprobs:
            rows: list[Any] = [None]
            for p in range(1, len(ids)):
                prev, tid = ids[p - 1], ids[p]
                d = {str(c): {"logprob": v, "rank": r + 1, "decoded_token": self.texts[c]}
                     for r, (c, v) in enumerate(self.top(prev, int(k_prompt)))}
                d.setdefault(str(tid), {"logprob": self.logprob(prev, tid), "rank": self.rank(prev, tid),
                                        "decoded_token": self.texts[tid]})
                rows.append(d)
            choice["prompt_logprobs"] = rows
        return {"id": "cmpl-fake", "object": "text_completion", "model": "fake", "choices": [choice],
                "usage": {"prompt_tokens": len(ids), "completion_tokens": len(gen),
                          "total_tokens": len(ids) + len(gen)}}


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
