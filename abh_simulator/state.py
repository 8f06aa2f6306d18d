"""What one launch of the simulated engine knows: the data, the arm's outcomes per pass, counters, generation."""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import os
import random
import re
import shlex
import sys
import time
from array import array
from collections.abc import Sequence
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from abh_simulator import model, text
from abh_simulator.sim_config import SimConfig
from abh_simulator.tokens import EOS_ID, Tokenizer
from harness import __version__
from harness.tasks import gsm8k

if TYPE_CHECKING:  # numpy-backed; imported on first use so that the server starts fast
    from abh_simulator.logprobs import NextTokenModel, Scores

SIM_VERSION = f"simulated-{__version__}"
EOS_TOKEN_ID = EOS_ID


#: How every hallucinated block starts (SGLang's stop string "Question" ends in it)
_BLOCK_HEAD = "\n\nQuestion:"


class SimError(Exception):
    """A request the engine refuses: HTTP ``status`` with ``message``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def data_file(data: str) -> Path:
    """The JSONL file the simulator answers from: ``data`` (a file, or a directory with test.jsonl), or the
    embedded test set when ``data`` is empty."""
    if not data:
        return gsm8k.EMBEDDED_TEST
    p = Path(data).expanduser()
    return p / "test.jsonl" if p.is_dir() else p


def known_texts(rows: list[dict[str, str]]) -> list[str]:
    """Every text the simulator reads or writes, so the tokenizer gives each of their pieces its own id."""
    fixed = [text.INVALID_TEXT, text.unknown_text(0, ""), text.continuation_block("q", "a"),
             " So the answer is 0.\n#### 0", "0123456789"]
    return fixed + [r["question"] for r in rows] + [r["answer"] for r in rows] \
        + [text.strip_annotations(r["answer"]) for r in rows]


def load_rows(data: str) -> list[dict[str, str]]:
    """The rows (any GSM8K-shaped JSONL; canonical or not: the run checks that, the simulator answers)."""
    rows = gsm8k.read_embedded_test() if not data else gsm8k.read_jsonl(data_file(data))
    if not rows:
        raise gsm8k.DatasetError(f"{data_file(data)} holds no rows")
    return rows


class SimState:
    """Everything one server launch knows: the data, the arm's outcomes and the fault counters."""

    def __init__(self, cfg: SimConfig, argv: list[str] | None = None):
        cfg.validate()
        self.cfg = cfg = cfg.effective()
        self.argv = list(argv) if argv is not None else list(sys.argv)
        self.rows = load_rows(cfg.data)
        path = data_file(cfg.data)
        self.data_sha256 = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        n = len(self.rows)
        self.index: dict[str, int] = {}
        for i, r in enumerate(self.rows):
            self.index.setdefault(r["question"].strip(), i)
        if cfg.ability is not None:
            self.ability = float(cfg.ability)
            self.target_accuracy: float | None = None
        else:
            self.ability = model.ability_for_accuracy(cfg.accuracy, cfg.seed, n, cfg.difficulty_sd)
            self.target_accuracy = cfg.accuracy
        self.run_seed = cfg.run_seed if cfg.run_seed >= 0 else int.from_bytes(os.urandom(4), "little") >> 1
        self.expected_accuracy = model.expected_accuracy(self.ability, cfg.seed, n, cfg.difficulty_sd)
        self.base = model.base_outcomes(self.ability, cfg.seed, n, cfg.difficulty_sd)
        self.base_accuracy = sum(self.base) / n
        self.launch = model.launch_outcomes(self.base, cfg.flip_rate, cfg.noise, self.run_seed)
        self.launch_accuracy = sum(self.launch) / n
        inv = random.Random(f"abh-sim/invalid/{self.run_seed}")
        self.invalid = [inv.random() < cfg.invalid_rate for _ in range(n)]
        self.fault_rng = random.Random(f"abh-sim/faults/{self.run_seed}")
        self.t0 = time.monotonic()
        self.received = 0
        self.completed = 0
        self.exiting = False
        self.sem = asyncio.Semaphore(cfg.max_running_requests) if cfg.max_running_requests > 0 else None
        #: sha256 of a cached prompt prefix -> its length in tokens (None: a whole prompt, never asked for)
        self.prefix_cache: dict[str, int | None] = {}
        #: how many times each token sequence has been scored on this launch (its scoring pass number)
        self._scored: dict[bytes, int] = {}
        self._answers: dict[tuple[int, int], str] = {}
        self._blocks: dict[int, str] = {}
        #: how many times each question has been asked on this launch (its pass number)
        self._asked: dict[int, int] = {}
        self._pass: dict[int, list[bool]] = {}
        #: the tasks answered from the run's answer key: per task, its launch outcomes and passes
        from abh_simulator.answer_key import AnswerKey

        self.key = AnswerKey(cfg.answer_key)
        self._keyed: dict[str, list[bool]] = {}
        self._keyed_pass: dict[tuple[str, int], list[bool]] = {}
        self._keyed_asked: dict[tuple[str, int], int] = {}

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """The toy tokenizer (built on first use: it reads every row)."""
        return Tokenizer(self.cfg.vocab_size, known_texts(self.rows))

    @cached_property
    def lm(self) -> NextTokenModel:
        """The next-token model behind logprobs."""
        from abh_simulator.logprobs import NextTokenModel

        c = self.cfg
        return NextTokenModel(c.seed, c.vocab_size, c.build, c.logit_shift, c.logprob_noise, c.noise, self.run_seed)

    # ------------------------------------------------------------------ status
    def starting(self) -> bool:
        return time.monotonic() - self.t0 < self.cfg.startup_s

    def hung(self) -> bool:
        return self.cfg.hang_after > 0 and self.received >= self.cfg.hang_after

    def server_info(self) -> dict[str, Any]:
        args = asdict(self.cfg)
        args.update(random_seed=self.run_seed, run_seed=self.run_seed, ability=self.ability)
        launch_rate, pass_rate = model.split_flip_rate(self.cfg.flip_rate, self.cfg.noise)
        return {
            **args,
            "version": SIM_VERSION,
            "simulated": True,
            "engine": "simulated",
            "build": self.cfg.build,
            "model_path": self.cfg.model_path,
            "served_model_name": self.cfg.model_path,
            "launch_command": shlex.join([sys.executable, "-m", "abh_simulator", *self.argv[1:]]),
            "server_args": args,
            "simulation": {
                "num_questions": len(self.rows),
                "data_file": str(data_file(self.cfg.data)),
                "data_file_sha256": self.data_sha256,
                "target_accuracy": self.target_accuracy,
                "ability": self.ability,
                "expected_accuracy": self.expected_accuracy,
                "base_accuracy": self.base_accuracy,
                "launch_accuracy": self.launch_accuracy,
                "noise": self.cfg.noise,
                "flip_rate_per_launch": launch_rate,
                "flip_rate_per_pass": pass_rate,
                "flip_probabilities": model.flip_probabilities(self.base_accuracy, self.cfg.flip_rate),
            },
            "requests_received": self.received,
            "requests_completed": self.completed,
        }

    # ------------------------------------------------------------------ outcomes and text
    def outcome(self, i: int, k: int) -> bool:
        """Outcome of question i on its pass k on this launch."""
        if k not in self._pass:
            self._pass[k] = model.pass_outcomes(self.launch, self.cfg.flip_rate, self.cfg.noise, self.run_seed, k)
        return self._pass[k][i]

    def answer_text(self, i: int) -> str:
        """The answer (without continuation) this launch gives question i on its next pass; deterministic."""
        k = self._asked.get(i, 0)
        self._asked[i] = k + 1
        if model.split_flip_rate(self.cfg.flip_rate, self.cfg.noise)[1] == 0:
            k = 0  # no per-pass noise: every pass is pass 0
        txt = self._answers.get((i, k))
        if txt is None:
            txt = text.answer_text(self.rows[i]["answer"], self.outcome(i, k), self.invalid[i],
                                   f"{self.cfg.seed}/{i}")
            self._answers[(i, k)] = txt
        return txt

    def keyed_outcome(self, task: str, position: int, n: int) -> bool:
        """Outcome of a keyed task's question on its next pass on this launch: the arm's ability on that task's
        own draw of difficulties, with this launch's and this pass's noise, as for GSM8K's questions."""
        c = self.cfg
        if task not in self._keyed:
            salt = int.from_bytes(hashlib.sha256(f"{c.seed}/{task}".encode()).digest()[:4], "little")
            base = model.base_outcomes(self.ability, salt, n, c.difficulty_sd)
            self._keyed[task] = model.launch_outcomes(base, c.flip_rate, c.noise, f"{self.run_seed}/{task}")
        k = self._keyed_asked.get((task, position), 0)
        self._keyed_asked[(task, position)] = k + 1
        if model.split_flip_rate(c.flip_rate, c.noise)[1] == 0:
            k = 0
        if (task, k) not in self._keyed_pass:
            self._keyed_pass[(task, k)] = model.pass_outcomes(self._keyed[task], c.flip_rate, c.noise,
                                                              f"{self.run_seed}/{task}", k)
        return self._keyed_pass[(task, k)][position]

    def raw_parts(self, prompt: str, ignore_eos: bool, min_tokens: int, chat: bool = False) -> tuple[list[str], bool]:
        """(the text the "model" writes, in parts: the answer, then each hallucinated block; whether it ends in EOS).
        Without EOS it has more than min_tokens tokens. A chat answer ends after the answer (an instruct model's
        EOS); a completion runs on as a base model does."""
        entry = self.key.lookup(hashlib.sha256(prompt.encode()).hexdigest()) if self.key.by_sha else None
        if entry is not None:
            return [entry.right if self.keyed_outcome(entry.task, entry.position, entry.n) else entry.wrong], True
        q = gsm8k.question_from_prompt(prompt)
        i = self.index.get(q) if q is not None else None
        if i is None:
            raw = text.unknown_text(self.run_seed, prompt)
            start = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "little")
        else:
            raw, start = self.answer_text(i), i + 1
        if chat and not ignore_eos:
            return [raw.lstrip(" ")], True
        n = len(self.rows)
        count = len(self.tokenizer.encode(raw)) if ignore_eos else 0
        parts = [raw]
        k = 0
        while k < text.CONTINUATION_BLOCKS or (ignore_eos and count <= min_tokens):
            block = self._block((start + k) % n)
            # its head apart (a part every block shares): a stop string there needs no more of the block's pieces
            parts += [block[:len(_BLOCK_HEAD)], block[len(_BLOCK_HEAD):]] if block.startswith(_BLOCK_HEAD) else [block]
            count += len(self.tokenizer.encode(block)) if ignore_eos else 0
            k += 1
        return parts, not ignore_eos

    def _block(self, i: int) -> str:
        """Row ``i`` as a hallucinated block (made once: every generation writes three)."""
        got = self._blocks.get(i)
        if got is None:
            got = self._blocks[i] = text.continuation_block(self.rows[i]["question"], self.rows[i]["answer"])
        return got

    def complete(self, prompt: str, max_new: int, min_new: int, stops: list[str], stop_regex: list[str],
                 ignore_eos: bool, no_stop_trim: bool, prompt_ids: list[int] | None = None,
                 chat: bool = False) -> dict[str, Any]:
        """One generation: the returned text, the finish reason, the generated token ids (stop-string tokens
        and EOS included, as SGLang counts them) and token counts, all in the toy tokenizer's tokens."""
        ids = self.tokenizer.encode(prompt) if prompt_ids is None else list(prompt_ids)
        # A crude prefix cache: the few-shot block (everything before the last question) is cached once a
        # prompt with it, or the warm-up that is that block alone, has been seen; /flush_cache empties it.
        cached = 0
        k = prompt.rfind("Question:")
        if k > 0:
            key = hashlib.sha256(prompt[:k].encode()).hexdigest()
            if key in self.prefix_cache:
                n_prefix = self.prefix_cache[key]
                if n_prefix is None:  # seen as a whole prompt (the warm-up): count it once
                    n_prefix = self.prefix_cache[key] = len(self.tokenizer.encode(prompt[:k]))
                cached = n_prefix
            else:
                self.prefix_cache[key] = len(self.tokenizer.encode(prompt[:k]))
        self.prefix_cache.setdefault(hashlib.sha256(prompt.encode()).hexdigest(), None)
        if max_new <= 0:
            return {"text": "", "finish": {"type": "length", "length": 0}, "prompt_ids": ids,
                    "output_ids": [], "prompt_tokens": len(ids), "completion_tokens": 0, "cached_tokens": cached}
        parts, eos = self.raw_parts(prompt, ignore_eos, max_new, chat)
        raw = "".join(parts)
        ends, raw_ids = self.tokenizer.encode_parts(parts, _needed(raw, min_new, stops, stop_regex))
        limit = ends[max_new - 1] if len(ends) >= max_new else len(raw)
        floor = ends[min_new - 1] if 0 < min_new <= len(ends) else (len(raw) if min_new > 0 else 0)
        best: tuple[int, int, Any] | None = None  # (start, end, matched), in characters
        for s in stops:
            if s:
                j = raw.find(s, max(0, floor - len(s) + 1))
                while 0 <= j and j + len(s) <= floor:
                    j = raw.find(s, j + 1)
                if j >= 0 and j + len(s) <= limit and (best is None or j < best[0]):
                    best = (j, j + len(s), s)
        for pat in stop_regex:
            try:
                m = re.compile(pat).search(raw, max(0, floor))
            except re.error:
                raise SimError(400, f"invalid stop_regex {pat!r}") from None
            if m and m.end() <= limit and (best is None or m.start() < best[0]):
                best = (m.start(), m.end(), pat)
        if best is not None:
            out = raw[:best[1]] if no_stop_trim else raw[:best[0]]
            finish: dict[str, Any] = {"type": "stop", "matched": best[2]}
            out_ids = raw_ids[:bisect.bisect_left(ends, best[1]) + 1]  # up to the token ending the stop
        elif eos and len(ends) < max_new:
            out, finish = raw, {"type": "stop", "matched": EOS_TOKEN_ID}
            out_ids = [*raw_ids, EOS_TOKEN_ID]
        else:
            out, finish, out_ids = raw[:limit], {"type": "length", "length": max_new}, raw_ids[:max_new]
        return {"text": out, "finish": finish, "prompt_ids": ids, "output_ids": out_ids, "prompt_tokens": len(ids),
                "completion_tokens": len(out_ids), "cached_tokens": cached}

    # ------------------------------------------------------------------ token-level models
    def score(self, ids: list[int], start: int, top_k: int = 0, requested: list[int] | None = None,
              states: list[int] | None = None) -> Scores:
        """Teacher-forced scores of positions max(start, 1)..len(ids)-1; repeated scoring of the same
        sequence on this launch counts as a new pass (for pass/mixed noise)."""
        return self.score_many([(ids, start, top_k, requested, states)])[0]

    def score_many(self, asks: Sequence[tuple[list[int], int, int, list[int] | None, list[int] | None]]) -> list[Scores]:
        """:meth:`score` of each (ids, start, top_k, requested, states), in order, in one vectorised pass."""
        from abh_simulator.logprobs import Ask

        out = []
        for ids, start, top_k, requested, states in asks:
            key = hashlib.blake2b(array("q", ids).tobytes(), digest_size=16).digest()
            k = self._scored.get(key, 0)
            self._scored[key] = k + 1
            out.append(Ask(ids, range(max(start, 1), len(ids)), top_k, requested or (), k, states))
        return self.lm.score_many(out)

    def routed_experts(self, ids: list[int], start: int, states: list[int] | None = None) -> tuple[str, str]:
        """SGLang's ``meta_info["routed_experts"]`` for the sequence ``ids`` (prompt + generated tokens): rows for
        positions start..len(ids)-2, base64 in the dtype ``SGLANG_ROUTED_EXPERTS_DTYPE`` asks for where the ids fit
        (see abh_simulator.experts); (payload, its dtype: ``meta_info["routed_experts_dtype"]``)."""
        from abh_simulator import experts
        from abh_simulator.hashing import context_states

        cfg = self.cfg
        st = states if states is not None else context_states(ids, cfg.seed)
        arr = experts.routed_experts(st, start, len(ids) - 1, cfg.seed, cfg.num_experts, cfg.topk,
                                     cfg.num_layers, cfg.routed_experts_bug, cfg.routing_noise, self.run_seed,
                                     cfg.routing_shift, cfg.build)
        arr[:, :cfg.unrouted_layers] = 0
        return experts.encode(arr, os.environ.get("SGLANG_ROUTED_EXPERTS_DTYPE", "int32"))


def _needed(raw: str, min_new: int, stops: list[str], stop_regex: list[str]) -> int | None:
    """How many characters of a generation's ``raw`` text :meth:`SimState.complete` reads the tokens of: up to the end
    of the last of the stop strings' first matches (the earliest stop is among them, and a token count below
    max_new there leaves every one of them within reach); all of them (None) when none matches, with a minimum
    length, or with a pattern that does not compile (complete says so)."""
    if min_new > 0:
        return None
    ends = [j + len(s) for s in stops if s and (j := raw.find(s)) >= 0]
    for pat in stop_regex:
        try:
            m = re.compile(pat).search(raw)
        except re.error:
            return None
        if m:
            ends.append(m.end())
    return max(ends) if ends else None
