"""SIMULATED engine: a GSM8K-serving "LLM" HTTP server for rehearsals, tests and power planning.

It is NOT a model. It speaks SGLang's native API (``POST /generate``) and OpenAI's (``POST /v1/completions``)
plus the usual side endpoints, and answers GSM8K test questions correctly with a per-question probability.
Everything it reports says ``simulated``.

Start it as a real process::

    python -m harness.simulator --port 30000 --accuracy 0.95 --build fix

Model of correctness
--------------------
* Each test question ``i`` (row index in ``--data``) has a latent difficulty ``d_i ~ Normal(0, sd)`` and a
  uniform ``u_i ~ U(0, 1)``, both drawn from ``--seed`` and ``i`` only (never from the arm).
* An arm has an ability ``a`` (``--ability``, or ``--accuracy p`` solved by bisection so that the
  *expected* accuracy ``mean_i sigmoid(a - d_i)`` is ``p``). Its base outcome on question ``i`` is
  ``u_i < sigmoid(a - d_i)``: deterministic in (seed, i, a), and monotone in ``a`` (a higher ability only
  turns wrong answers into right ones), so arms of close ability agree on most questions (paired design).
* Run-to-run noise (``--flip-rate f``): each launch draws, from ``--run-seed`` (random per launch unless
  set, like SGLang's ``--random-seed``), which base outcomes it changes. About ``f/2`` of the questions
  change per launch, balanced between right->wrong and wrong->right so a run's expected accuracy stays at
  the arm's base accuracy; two launches of the same arm therefore disagree on about ``f`` of the questions
  (the A/A discordance psi_AA). Within one launch the same request always gets the same answer.
* A request's question is the LAST ``Question: ...\\nAnswer:`` block of its prompt. Unknown questions get a
  random (wrong) number.

Output text is a GSM8K-style rationale ending in ``#### N`` followed, like a base model, by a hallucinated
next ``Question: ...`` block and then EOS; stop strings (``"Question"`` in SGLang's recipe) trim it, and
``max_new_tokens`` truncates it (about 4 characters per token).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import re
import resource
import shlex
import signal
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

from aiohttp import web

from harness import __version__

SIM_VERSION = f"simulated-{__version__}"
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"
DEFAULT_ACCURACY = 0.90
DEFAULT_DIFFICULTY_SD = 3.0
EOS_TOKEN_ID = 2
CHARS_PER_TOKEN = 4
#: Hallucinated ``Question: ...`` blocks a "base model" writes after its answer before it emits EOS.
CONTINUATION_BLOCKS = 3

#: sampling_params keys SGLang accepts; anything else is HTTP 400 (as newer SGLang does).
ALLOWED_SAMPLING_KEYS = frozenset({
    "skip_special_tokens", "spaces_between_special_tokens", "max_new_tokens", "min_new_tokens", "n",
    "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k", "min_p",
    "frequency_penalty", "presence_penalty", "repetition_penalty", "ignore_eos", "regex", "json_schema",
    "ebnf", "structural_tag", "no_stop_trim", "custom_params", "sampling_seed", "logit_bias",
    "stream_interval", "thinking_budget",
})


# ============================================================================================ config
@dataclass
class SimConfig:
    """All knobs of the simulated engine (the CLI flags, one to one)."""

    host: str = "127.0.0.1"
    port: int = 30000
    data: str = str(DEFAULT_DATA)
    #: seeds the per-question difficulties and uniforms (shared by all arms of a comparison)
    seed: int = 0
    #: arm ability; when None, solved from ``accuracy``
    ability: float | None = None
    #: target expected accuracy of the arm (used when ``ability`` is None; default 0.90)
    accuracy: float | None = None
    difficulty_sd: float = DEFAULT_DIFFICULTY_SD
    #: expected share of questions two launches of the same arm disagree on
    flip_rate: float = 0.02
    #: per-launch seed; None draws a random one (reported by /get_server_info)
    run_seed: int | None = None
    #: where run-to-run noise is re-drawn: "launch" (once per server launch) or "pass" (also on every
    #: further pass over the questions on the same server, as dynamic batching does on a real server)
    noise: str = "launch"
    invalid_rate: float = 0.0
    latency_s: float = 0.0
    max_running_requests: int = 0
    build: str = ""
    model_path: str = "simulated/gsm8k"
    startup_s: float = 0.0
    crash_after: int = 0
    hang_after: int = 0
    error_rate: float = 0.0
    malformed_rate: float = 0.0
    ignore_sigterm: bool = False
    #: raw argv the server was launched with (for ``launch_command``)
    argv: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.ability is not None and self.accuracy is not None:
            raise ValueError("give either --ability or --accuracy, not both")
        if self.accuracy is not None and not 0.0 < self.accuracy < 1.0:
            raise ValueError("--accuracy must be strictly between 0 and 1")
        if self.noise not in ("launch", "pass"):
            raise ValueError("--noise must be launch or pass")
        for name in ("flip_rate", "invalid_rate", "error_rate", "malformed_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1], not {v}")
        for name in ("latency_s", "startup_s", "difficulty_sd"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")
        for name in ("max_running_requests", "crash_after", "hang_after"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0")


# ====================================================================================== pure model
def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@lru_cache(maxsize=16)
def question_draws(seed: int, n: int, difficulty_sd: float = DEFAULT_DIFFICULTY_SD
                   ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(difficulties d_i, uniforms u_i) for questions 0..n-1; each depends only on (seed, i)."""
    ds, us = [], []
    for i in range(n):
        rng = random.Random(f"abh-sim/q/{seed}/{i}")
        ds.append(rng.gauss(0.0, 1.0) * difficulty_sd)
        us.append(rng.random())
    return tuple(ds), tuple(us)


def solve_probabilities(ability: float, seed: int = 0, n: int = 1319,
                        difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> list[float]:
    """Per-question probability of a correct answer, sigmoid(ability - d_i)."""
    ds, _ = question_draws(seed, n, difficulty_sd)
    return [_sigmoid(ability - d) for d in ds]


def expected_accuracy(ability: float, seed: int = 0, n: int = 1319,
                      difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> float:
    """Expected accuracy over questions 0..n-1 of an arm with this ability (pure; no I/O)."""
    if n <= 0:
        raise ValueError("n must be positive")
    return sum(solve_probabilities(ability, seed, n, difficulty_sd)) / n


def ability_for_accuracy(accuracy: float, seed: int = 0, n: int = 1319,
                         difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> float:
    """The ability whose expected accuracy over questions 0..n-1 is ``accuracy`` (bisection)."""
    if not 0.0 < accuracy < 1.0:
        raise ValueError("accuracy must be strictly between 0 and 1")
    lo, hi = -60.0, 60.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if expected_accuracy(mid, seed, n, difficulty_sd) < accuracy:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def base_outcomes(ability: float, seed: int = 0, n: int = 1319,
                  difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> list[bool]:
    """Base (noise-free) outcome per question: u_i < sigmoid(ability - d_i). Monotone in ability."""
    _, us = question_draws(seed, n, difficulty_sd)
    return [u < p for u, p in zip(us, solve_probabilities(ability, seed, n, difficulty_sd), strict=True)]


def flip_probabilities(base_accuracy: float, flip_rate: float) -> tuple[float, float]:
    """(P(right->wrong), P(wrong->right)) per launch: f/4 of the questions each way, capped at 1.

    Balanced so that a launch's expected accuracy equals the base accuracy; two launches then disagree
    on about ``flip_rate`` of the questions. At a base accuracy of exactly 0 or 1 only one direction
    exists and it gets f/2.
    """
    if flip_rate <= 0:
        return 0.0, 0.0
    a = base_accuracy
    if a >= 1.0:
        return min(1.0, flip_rate / 2), 0.0
    if a <= 0.0:
        return 0.0, min(1.0, flip_rate / 2)
    return min(1.0, flip_rate / (4 * a)), min(1.0, flip_rate / (4 * (1 - a)))


def run_outcomes(base: list[bool], flip_rate: float, run_seed: int | str) -> list[bool]:
    """One launch's outcomes: the base outcomes with this launch's flips (deterministic in run_seed)."""
    if not base:
        return []
    down, up = flip_probabilities(sum(base) / len(base), flip_rate)
    rng = random.Random(f"abh-sim/run/{run_seed}")
    out = []
    for b in base:
        v = rng.random()
        out.append((v >= down) if b else (v < up))
    return out


def simulate_accuracy(ability: float, seed: int = 0, n: int = 1319, flip_rate: float = 0.02,
                      run_seed: int = 0, difficulty_sd: float = DEFAULT_DIFFICULTY_SD) -> float:
    """Accuracy of one simulated launch (without invalid outputs), for power planning without a server."""
    out = run_outcomes(base_outcomes(ability, seed, n, difficulty_sd), flip_rate, run_seed)
    return sum(out) / n


# ======================================================================================= data/text
_ANNOT = re.compile(r"<<[^>]*>>")


def _label(answer: str) -> tuple[str, int]:
    """(text after '#### ', its value as SGLang's parser reads it: last digit run, commas removed)."""
    text = answer.split("####")[-1].strip()
    digits = re.findall(r"\d+", text.replace(",", ""))
    return text, int(digits[-1]) if digits else 0


def _rationale_lines(answer: str) -> list[str]:
    # "Question" would hit SGLang's stop string mid-answer (test row 138 starts "Questions Mark ...").
    lines = [ln.strip().replace("Question", "question") for ln in _ANNOT.sub("", answer).split("\n")]
    return [ln for ln in lines if ln and not ln.startswith("####")]


def _wrong_number(label_value: int, key: str) -> int:
    rng = random.Random(f"abh-sim/wrong/{key}")
    off = rng.choice([-10, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 10])
    if rng.random() < 0.25 and label_value > 1:
        off = label_value  # a doubled answer: a classic slip
    w = label_value + off
    if w < 0 or w == label_value:
        w = label_value + abs(off)
    return w


def extract_question(prompt: str) -> str | None:
    """The question of the LAST ``Question: ...\\nAnswer:`` block of a prompt (stripped)."""
    k = prompt.rfind("Question:")
    if k < 0:
        return None
    rest = prompt[k + len("Question:"):]
    j = rest.find("\nAnswer:")
    return (rest[:j] if j >= 0 else rest).strip()


def load_rows(path: str | Path) -> list[dict[str, str]]:
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "test.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"GSM8K data file not found: {p} (pass --data PATH to a test.jsonl)")
    rows = []
    with p.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                obj = json.loads(line)
                rows.append({"question": obj["question"], "answer": obj["answer"]})
    if not rows:
        raise ValueError(f"{p} holds no rows")
    return rows


# ============================================================================================ state
class SimError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class SimState:
    """Everything one server launch knows: the data, the arm's outcomes and the fault counters."""

    def __init__(self, cfg: SimConfig):
        cfg.validate()
        self.cfg = cfg
        self.rows = load_rows(cfg.data)
        self.data_sha256 = hashlib.sha256(Path(cfg.data).expanduser().read_bytes()).hexdigest() \
            if Path(cfg.data).expanduser().is_file() else ""
        n = len(self.rows)
        self.index = {}
        for i, r in enumerate(self.rows):
            self.index.setdefault(r["question"].strip(), i)
        self.labels = [_label(r["answer"]) for r in self.rows]
        self.target_accuracy = cfg.accuracy if cfg.ability is None else None
        if cfg.ability is not None:
            self.ability = float(cfg.ability)
        else:
            self.ability = ability_for_accuracy(cfg.accuracy if cfg.accuracy is not None else DEFAULT_ACCURACY,
                                                cfg.seed, n, cfg.difficulty_sd)
            if self.target_accuracy is None:
                self.target_accuracy = DEFAULT_ACCURACY
        self.run_seed = cfg.run_seed if cfg.run_seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
        self.expected_accuracy = expected_accuracy(self.ability, cfg.seed, n, cfg.difficulty_sd)
        self.base = base_outcomes(self.ability, cfg.seed, n, cfg.difficulty_sd)
        self.base_accuracy = sum(self.base) / n
        self.outcomes = run_outcomes(self.base, cfg.flip_rate, self.run_seed)
        self.run_accuracy = sum(self.outcomes) / n
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
        #: how many times each question has been asked on this launch (noise="pass" re-draws per pass)
        self._asked: dict[int, int] = {}
        self._pass_outcomes: dict[int, list[bool]] = {0: self.outcomes}

    # ------------------------------------------------------------------ status
    def starting(self) -> bool:
        return time.monotonic() - self.t0 < self.cfg.startup_s

    def hung(self) -> bool:
        return self.cfg.hang_after > 0 and self.received >= self.cfg.hang_after

    def server_info(self) -> dict[str, Any]:
        args = {k: v for k, v in asdict(self.cfg).items() if k != "argv"}
        args.update(random_seed=self.run_seed, run_seed=self.run_seed, ability=self.ability)
        argv = self.cfg.argv or sys.argv
        return {
            **args,
            "version": SIM_VERSION,
            "simulated": True,
            "engine": "simulated",
            "build": self.cfg.build,
            "model_path": self.cfg.model_path,
            "served_model_name": self.cfg.model_path,
            "launch_command": shlex.join([sys.executable, "-m", "harness.simulator", *argv[1:]]),
            "server_args": args,
            "simulation": {
                "num_questions": len(self.rows),
                "data_file_sha256": self.data_sha256,
                "target_accuracy": self.target_accuracy,
                "ability": self.ability,
                "expected_accuracy": self.expected_accuracy,
                "base_accuracy": self.base_accuracy,
                "run_accuracy": self.run_accuracy,
                "flip_probabilities": flip_probabilities(self.base_accuracy, self.cfg.flip_rate),
            },
            "requests_received": self.received,
            "requests_completed": self.completed,
        }

    # ------------------------------------------------------------------ text
    def _outcome(self, i: int, k: int) -> bool:
        """Outcome of question i on its k-th pass (k=0: this launch's outcomes)."""
        if k not in self._pass_outcomes:
            self._pass_outcomes[k] = run_outcomes(self.base, self.cfg.flip_rate, f"{self.run_seed}/pass{k}")
        return self._pass_outcomes[k][i]

    def _answer_text(self, i: int) -> str:
        """The answer (without continuation) this launch gives question i; cached, deterministic."""
        k = 0
        if self.cfg.noise == "pass":
            k = self._asked.get(i, 0)
            self._asked[i] = k + 1
        txt = self._answers.get((i, k))
        if txt is not None:
            return txt
        row = self.rows[i]
        label_text, label_value = self.labels[i]
        lines = _rationale_lines(row["answer"])
        if self.invalid[i]:
            txt = " I am not sure how to work this out from the information given."
        elif self._outcome(i, k):
            txt = " " + "\n".join([*lines, f"#### {label_text}"])
        else:
            w = _wrong_number(label_value, f"{self.cfg.seed}/{i}")
            body = lines[:-1] if len(lines) > 1 else []
            txt = " " + "\n".join([*body, f"So the answer is {w}.", f"#### {w}"])
        self._answers[(i, k)] = txt
        return txt

    def _unknown_text(self, prompt: str) -> str:
        h = hashlib.sha256(f"{self.run_seed}/{prompt}".encode()).digest()
        w = int.from_bytes(h[:4], "little") % 1000
        return f" Let me think step by step.\nThe result is {w}.\n#### {w}"

    def raw_generation(self, prompt: str, ignore_eos: bool, min_chars: int) -> tuple[str, bool]:
        """(text the "model" writes, whether it ends in EOS). Without EOS it is at least min_chars long."""
        q = extract_question(prompt)
        i = self.index.get(q) if q is not None else None
        if i is None:
            raw, start = self._unknown_text(prompt), int.from_bytes(
                hashlib.sha256(prompt.encode()).digest()[:4], "little")
        else:
            raw, start = self._answer_text(i), i + 1
        n = len(self.rows)
        k = 0
        while k < CONTINUATION_BLOCKS or (ignore_eos and len(raw) < min_chars):
            r = self.rows[(start + k) % n]
            raw += "\n\nQuestion: " + r["question"] + "\nAnswer: " + _ANNOT.sub("", r["answer"])
            k += 1
        return raw, not ignore_eos

    def complete(self, prompt: str, max_new: int, min_new: int, stops: list[str], stop_regex: list[str],
                 ignore_eos: bool, no_stop_trim: bool) -> dict[str, Any]:
        """One generation: text, finish reason and token counts."""
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
            text = raw[:best[1]] if no_stop_trim else raw[:best[0]]
            finish: dict[str, Any] = {"type": "stop", "matched": best[2]}
            ctoks = min(max_new, best[1] // CHARS_PER_TOKEN + 1)
        elif eos and len(raw) <= limit:
            text, finish = raw, {"type": "stop", "matched": EOS_TOKEN_ID}
            ctoks = min(max_new, len(raw) // CHARS_PER_TOKEN + 1)
        else:
            text, finish, ctoks = raw[:limit], {"type": "length", "length": max_new}, max_new
        return {"text": text, "finish": finish, "prompt_tokens": prompt_tokens, "completion_tokens": ctoks,
                "cached_tokens": cached}


# ========================================================================================= handlers
def _err(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "code": status, "object": "error"},
                              "object": "error", "message": message, "code": status}, status=status)


def _as_str_list(v: Any, name: str) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise SimError(400, f"{name} must be a string or a list of strings")


def _as_int(v: Any, name: str, default: int, lo: int = 0) -> int:
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise SimError(400, f"{name} must be an integer >= {lo}, not {v!r}")
    return v


def _check_common(temperature: Any, top_p: Any) -> None:
    if temperature is not None and (not isinstance(temperature, int | float) or temperature < 0):
        raise SimError(400, f"temperature must be a number >= 0, not {temperature!r}")
    if top_p is not None and (not isinstance(top_p, int | float) or not 0 < top_p <= 1):
        raise SimError(400, f"top_p must be in (0, 1], not {top_p!r}")


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SimError(400, "request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise SimError(400, "request body must be a JSON object")
    return body


async def _forever() -> None:
    await asyncio.Event().wait()


class _Handlers:
    def __init__(self, st: SimState):
        self.st = st

    # -------------------------------------------------------------- fault/admission wrapper
    async def _serve(self, request: web.Request, work) -> web.StreamResponse:
        st, cfg = self.st, self.st.cfg
        if st.starting():
            return _err(503, "simulated server is starting (--startup-s)")
        try:
            body = await _read_json(request)
            prepared = work(body, validate_only=True)
        except SimError as e:
            return _err(e.status, str(e))
        st.received += 1
        if cfg.hang_after > 0 and st.received > cfg.hang_after:
            await _forever()  # simulated hang: never answers
        if cfg.crash_after > 0 and st.received > cfg.crash_after:
            await _forever()  # the process is about to exit
        t0 = time.perf_counter()
        try:
            if cfg.error_rate > 0 and st.fault_rng.random() < cfg.error_rate:
                status = st.fault_rng.choice([500, 503])
                resp: web.Response = _err(status, f"simulated fault (--error-rate {cfg.error_rate})")
            else:
                if st.sem is not None:
                    async with st.sem:
                        if cfg.latency_s > 0:
                            await asyncio.sleep(cfg.latency_s)
                        obj = work(body, prepared=prepared, t0=t0)
                else:
                    if cfg.latency_s > 0:
                        await asyncio.sleep(cfg.latency_s)
                    obj = work(body, prepared=prepared, t0=t0)
                payload = json.dumps(obj)
                if cfg.malformed_rate > 0 and st.fault_rng.random() < cfg.malformed_rate:
                    if st.fault_rng.random() < 0.5:
                        payload = payload[: max(1, len(payload) // 2)]
                    else:
                        payload = "<html><body>502 Bad Gateway (simulated)</body></html>"
                resp = web.Response(text=payload, content_type="application/json")
        except SimError as e:
            resp = _err(e.status, str(e))
        st.completed += 1
        if cfg.crash_after > 0 and st.completed >= cfg.crash_after and not st.exiting:
            st.exiting = True
            print(f"simulated crash: exiting after {st.completed} generate requests (--crash-after)",
                  file=sys.stderr, flush=True)
            asyncio.get_running_loop().call_later(0.05, os._exit, 1)
        return resp

    # -------------------------------------------------------------- SGLang /generate
    def _sglang(self, body: dict[str, Any], validate_only: bool = False, prepared: Any = None,
                t0: float = 0.0) -> Any:
        if validate_only:
            if body.get("stream"):
                raise SimError(400, "streaming is not supported by the simulated engine")
            text = body.get("text")
            if text is None:
                raise SimError(400, "the simulated engine needs 'text' (input_ids are not supported)")
            texts = [text] if isinstance(text, str) else text
            if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
                raise SimError(400, "text must be a string or a non-empty list of strings")
            sp = body.get("sampling_params") or {}
            if isinstance(sp, list):
                sp = sp[0] if sp else {}
            if not isinstance(sp, dict):
                raise SimError(400, "sampling_params must be an object")
            unknown = sorted(set(sp) - ALLOWED_SAMPLING_KEYS)
            if unknown:
                raise SimError(400, f"Unknown sampling parameter(s): {', '.join(unknown)}")
            _check_common(sp.get("temperature"), sp.get("top_p"))
            params = {
                "max_new": _as_int(sp.get("max_new_tokens"), "max_new_tokens", 128),
                "min_new": _as_int(sp.get("min_new_tokens"), "min_new_tokens", 0),
                "stops": _as_str_list(sp.get("stop"), "stop"),
                "stop_regex": _as_str_list(sp.get("stop_regex"), "stop_regex"),
                "ignore_eos": bool(sp.get("ignore_eos") or False),
                "no_stop_trim": bool(sp.get("no_stop_trim") or False),
            }
            n = _as_int(sp.get("n"), "n", 1, lo=1)
            return texts, params, n, isinstance(text, list)
        texts, params, n, batched = prepared
        out = []
        for t in texts:
            for _ in range(n):
                r = self.st.complete(t, **params)
                out.append({"text": r["text"], "meta_info": {
                    "id": uuid.uuid4().hex,
                    "prompt_tokens": r["prompt_tokens"],
                    "completion_tokens": r["completion_tokens"],
                    "cached_tokens": r["cached_tokens"],
                    "finish_reason": r["finish"],
                    "e2e_latency": time.perf_counter() - t0,
                    "simulated": True,
                }})
        return out if (batched or n > 1) else out[0]

    async def generate(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._sglang)

    # -------------------------------------------------------------- OpenAI /v1/completions
    def _openai(self, body: dict[str, Any], validate_only: bool = False, prepared: Any = None,
                t0: float = 0.0) -> Any:
        if validate_only:
            if body.get("stream"):
                raise SimError(400, "streaming is not supported by the simulated engine")
            prompt = body.get("prompt")
            prompts = [prompt] if isinstance(prompt, str) else prompt
            if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) for p in prompts):
                raise SimError(400, "prompt must be a string or a non-empty list of strings")
            _check_common(body.get("temperature"), body.get("top_p"))
            params = {
                "max_new": _as_int(body.get("max_tokens"), "max_tokens", 16),
                "min_new": _as_int(body.get("min_tokens"), "min_tokens", 0),
                "stops": _as_str_list(body.get("stop"), "stop"),
                "stop_regex": [],
                "ignore_eos": bool(body.get("ignore_eos") or False),
                "no_stop_trim": bool(body.get("include_stop_str_in_output") or False),
            }
            n = _as_int(body.get("n"), "n", 1, lo=1)
            model = body.get("model") or self.st.cfg.model_path
            return prompts, params, n, model
        prompts, params, n, model = prepared
        choices, pt, ct = [], 0, 0
        for p in prompts:
            for _ in range(n):
                r = self.st.complete(p, **params)
                choices.append({"index": len(choices), "text": r["text"],
                                "finish_reason": r["finish"]["type"], "logprobs": None,
                                "stop_reason": r["finish"].get("matched")})
                ct += r["completion_tokens"]
            pt += r["prompt_tokens"]
        return {"id": "cmpl-" + uuid.uuid4().hex, "object": "text_completion", "created": int(time.time()),
                "model": model, "choices": choices, "simulated": True,
                "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}}

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._openai)

    # -------------------------------------------------------------- side endpoints
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def health_generate(self, request: web.Request) -> web.Response:
        if self.st.starting():
            return web.Response(status=503, text="starting (simulated)")
        if self.st.hung():
            await _forever()
        return web.Response(text="")

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.st.server_info())

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.st.cfg.model_path, "tokenizer_path": self.st.cfg.model_path,
                                  "is_generation": True, "simulated": True, "engine": "simulated",
                                  "build": self.st.cfg.build})

    async def flush_cache(self, request: web.Request) -> web.Response:
        self.st.prefix_cache.clear()
        return web.Response(text="Cache flushed (simulated).\n")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.st.cfg.model_path, "object": "model", "created": int(time.time()),
            "owned_by": "simulated", "root": self.st.cfg.model_path, "max_model_len": 32768}]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": SIM_VERSION, "simulated": True})


def build_app(cfg: SimConfig) -> web.Application:
    """The simulated engine as an aiohttp application (loads the data and draws this launch's outcomes)."""
    st = SimState(cfg)
    h = _Handlers(st)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app["sim"] = st

    async def _on_startup(app: web.Application) -> None:
        st.t0 = time.monotonic()

    app.on_startup.append(_on_startup)
    r = app.router
    r.add_post("/generate", h.generate)
    r.add_post("/v1/completions", h.completions)
    r.add_get("/health", h.health)
    r.add_get("/health_generate", h.health_generate)
    for p in ("/get_server_info", "/server_info"):
        r.add_get(p, h.server_info)
    for p in ("/get_model_info", "/model_info"):
        r.add_get(p, h.model_info)
    r.add_route("POST", "/flush_cache", h.flush_cache)
    r.add_get("/flush_cache", h.flush_cache)
    r.add_get("/v1/models", h.models)
    r.add_get("/version", h.version)
    return app


# ============================================================================================== CLI
def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


def parse_args(argv: list[str] | None = None) -> SimConfig:
    d = SimConfig()
    p = argparse.ArgumentParser(
        prog="python -m harness.simulator",
        description="SIMULATED GSM8K inference server (SGLang /generate + OpenAI /v1/completions). "
                    "Not a model: a rehearsal, test and power-planning tool.")
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=int, default=d.port, help="0 picks a free port (printed in the ready line)")
    p.add_argument("--data", default=d.data, help="GSM8K test JSONL (question/answer)")
    p.add_argument("--seed", type=int, default=d.seed, help="question difficulties seed (shared across arms)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--ability", type=float, default=None, help="arm ability a: P(correct_i)=sigmoid(a-d_i)")
    g.add_argument("--accuracy", type=float, default=None,
                   help=f"target expected accuracy (solves the ability; default {DEFAULT_ACCURACY})")
    p.add_argument("--difficulty-sd", type=float, default=d.difficulty_sd)
    p.add_argument("--flip-rate", type=float, default=d.flip_rate,
                   help="share of questions two launches of this arm disagree on (run-to-run noise)")
    p.add_argument("--run-seed", "--random-seed", dest="run_seed", type=int, default=None,
                   help="per-launch noise seed (default: random per launch)")
    p.add_argument("--noise", choices=["launch", "pass"], default=d.noise,
                   help="re-draw run-to-run noise once per launch, or on every pass over the questions")
    p.add_argument("--invalid-rate", type=float, default=d.invalid_rate, help="share of outputs with no digits")
    p.add_argument("--latency-s", type=float, default=d.latency_s, help="service time per request")
    p.add_argument("--max-running-requests", type=int, default=d.max_running_requests,
                   help="requests served at once, others queue (0 = unlimited)")
    p.add_argument("--build", default=d.build, help="build label reported by /get_server_info")
    p.add_argument("--model-path", default=d.model_path)
    p.add_argument("--startup-s", type=float, default=d.startup_s, help="503 on /health_generate for this long")
    p.add_argument("--crash-after", type=int, default=d.crash_after,
                   help="os._exit(1) after serving N generate requests (0 = never)")
    p.add_argument("--hang-after", type=int, default=d.hang_after,
                   help="after N generate requests, never answer again (0 = never)")
    p.add_argument("--error-rate", type=float, default=d.error_rate, help="share of attempts answered 500/503")
    p.add_argument("--malformed-rate", type=float, default=d.malformed_rate,
                   help="share of 200 responses with a truncated / non-JSON body")
    p.add_argument("--ignore-sigterm", action="store_true", help="ignore SIGTERM (test kill escalation)")
    a = p.parse_args(argv)
    cfg = SimConfig(**{f.name: getattr(a, f.name) for f in fields(SimConfig) if f.name != "argv"},
                    argv=[sys.argv[0], *(sys.argv[1:] if argv is None else argv)])
    try:
        cfg.validate()
    except ValueError as e:
        p.error(str(e))
    return cfg


async def serve(cfg: SimConfig) -> None:
    app = build_app(cfg)
    st: SimState = app["sim"]
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, cfg.host, cfg.port, backlog=4096, reuse_address=True)
    await site.start()
    port = cfg.port
    server = getattr(site, "_server", None)
    if server is not None and getattr(server, "sockets", None):
        port = server.sockets[0].getsockname()[1]
    cfg.port = port
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if cfg.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print(f"SIMULATED engine (not a model): build={cfg.build!r} model_path={cfg.model_path!r} "
          f"ability={st.ability:.3f} expected_accuracy={st.expected_accuracy:.4f} "
          f"run_seed={st.run_seed} flip_rate={cfg.flip_rate} questions={len(st.rows)}",
          file=sys.stderr, flush=True)
    print(f"simulated server ready on http://{cfg.host}:{port}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    _raise_nofile()
    try:
        asyncio.run(serve(cfg))
    except (FileNotFoundError, ValueError) as e:
        print(f"simulator: {e}", file=sys.stderr, flush=True)
        return 2
    except OSError as e:
        print(f"simulator: cannot listen on {cfg.host}:{cfg.port}: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
