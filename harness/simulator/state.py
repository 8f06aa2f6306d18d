"""What one launch of the simulated engine knows: the data, the arm's outcomes per pass, counters, generation."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import shlex
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness import __version__
from harness.simulator import model, text
from harness.simulator.config import SimConfig
from harness.tasks import gsm8k

SIM_VERSION = f"simulated-{__version__}"
EOS_TOKEN_ID = 2
CHARS_PER_TOKEN = 4


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
        self.cfg = cfg
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
        self.prefix_cache: set[str] = set()
        self._answers: dict[tuple[int, int], str] = {}
        #: how many times each question has been asked on this launch (its pass number)
        self._asked: dict[int, int] = {}
        self._pass: dict[int, list[bool]] = {}

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
            "launch_command": shlex.join([sys.executable, "-m", "harness.simulator", *self.argv[1:]]),
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

    def raw_generation(self, prompt: str, ignore_eos: bool, min_chars: int) -> tuple[str, bool]:
        """(text the "model" writes, whether it ends in EOS). Without EOS it is at least min_chars long."""
        q = gsm8k.question_from_prompt(prompt)
        i = self.index.get(q) if q is not None else None
        if i is None:
            raw = text.unknown_text(self.run_seed, prompt)
            start = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:4], "little")
        else:
            raw, start = self.answer_text(i), i + 1
        n = len(self.rows)
        k = 0
        while k < text.CONTINUATION_BLOCKS or (ignore_eos and len(raw) < min_chars):
            r = self.rows[(start + k) % n]
            raw += text.continuation_block(r["question"], r["answer"])
            k += 1
        return raw, not ignore_eos

    def complete(self, prompt: str, max_new: int, min_new: int, stops: list[str], stop_regex: list[str],
                 ignore_eos: bool, no_stop_trim: bool) -> dict[str, Any]:
        """One generation: text, finish reason and token counts (about 4 characters per token)."""
        prompt_tokens = max(1, len(prompt) // CHARS_PER_TOKEN)
        # A crude prefix cache: the few-shot block (everything before the last question) is cached once a
        # prompt with it, or the warm-up that is that block alone, has been seen; /flush_cache empties it.
        cached = 0
        k = prompt.rfind("Question:")
        if k > 0:
            key = hashlib.sha256(prompt[:k].encode()).hexdigest()
            if key in self.prefix_cache:
                cached = k // CHARS_PER_TOKEN
            else:
                self.prefix_cache.add(key)
        self.prefix_cache.add(hashlib.sha256(prompt.encode()).hexdigest())
        if max_new <= 0:
            return {"text": "", "finish": {"type": "length", "length": 0}, "prompt_tokens": prompt_tokens,
                    "completion_tokens": 0, "cached_tokens": cached}
        limit = max_new * CHARS_PER_TOKEN
        raw, eos = self.raw_generation(prompt, ignore_eos, limit + 1)
        floor = min_new * CHARS_PER_TOKEN
        best: tuple[int, int, Any] | None = None  # (start, end, matched)
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
            ctoks = min(max_new, best[1] // CHARS_PER_TOKEN + 1)
        elif eos and len(raw) <= limit:
            out, finish = raw, {"type": "stop", "matched": EOS_TOKEN_ID}
            ctoks = min(max_new, len(raw) // CHARS_PER_TOKEN + 1)
        else:
            out, finish, ctoks = raw[:limit], {"type": "length", "length": max_new}, max_new
        return {"text": out, "finish": finish, "prompt_tokens": prompt_tokens, "completion_tokens": ctoks,
                "cached_tokens": cached}
