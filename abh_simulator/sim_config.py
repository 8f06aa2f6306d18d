"""SimConfig: every knob of the simulated engine, and the only place their defaults are written.

The harness's ``engine=simulated`` schema (:class:`harness.config.SimulatedEngineConfig`) inherits this
dataclass, so each field here is ``engine.<field>`` with the same default, and the simulator's command line
(``--<field-with-dashes>``) is generated from the same fields: a knob added here is a config key and a flag
without a second list anywhere.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field, fields
from typing import Any

#: Where run-to-run noise is drawn (see abh_simulator.model.split_flip_rate).
NOISE_MODES = ("launch", "pass", "mixed")
#: Knobs whose flag has a second spelling.
FLAG_ALIASES = {"run_seed": ["--random-seed"]}


def _knob(default: Any, help: str, **meta: Any) -> Any:
    return field(default=default, metadata={"help": help, **meta})


@dataclass
class SimConfig:
    """All knobs of the simulated engine (the CLI flags, one to one)."""

    host: str = _knob("127.0.0.1", "bind address")
    port: int = _knob(0, "port; 0 picks a free one (printed in the ready line)")
    data: str = _knob("", "GSM8K test JSONL (or a directory with test.jsonl) the simulator answers from; "
                          "empty = the canonical test set embedded in the package")
    answer_key: str = _knob("", "answer key of the tasks whose prompts the simulator does not parse (MMLU, GPQA, MGSM, "
                                "the chat GSM8K): written by the run that launches it (abh_simulator.answer_key)")
    reasoning: bool = _knob(False, "chat answers also carry reasoning apart (message.reasoning_content), as a "
                                   "reasoning model's server with a reasoning parser returns it")
    seed: int = _knob(0, "seeds the per-question difficulties (shared by all arms of a comparison)")
    ability: float | None = _knob(None, "arm ability a: P(correct_i) = sigmoid(a - d_i); when set it is used "
                                        "instead of accuracy")
    accuracy: float = _knob(0.945, "target expected accuracy of the arm (the ability is solved from it)")
    difficulty_sd: float = _knob(3.0, "spread of the per-question difficulties")
    flip_rate: float = _knob(0.02, "share of questions two runs of this arm disagree on (run-to-run noise)")
    run_seed: int = _knob(-1, "per-launch noise seed; negative = random per launch, like SGLang's --random-seed")
    noise: str = _knob("pass", "where run-to-run noise is drawn: 'pass' (anew on every pass over the questions, "
                               "as dynamic batching does), 'launch' (once per server launch: passes on one "
                               "launch repeat verbatim) or 'mixed' (half the flip rate each way)",
                       choices=NOISE_MODES)
    deterministic: bool = _knob(False, "deterministic inference (as SGLang's --enable-deterministic-inference promises): "
                                       "no run-to-run noise (flip_rate, logprob_noise and routing_noise taken as 0, a fixed run "
                                       "seed), so every launch answers and scores each request identically")
    invalid_rate: float = _knob(0.0, "share of outputs with no digits")
    latency_s: float = _knob(0.0, "service time per request, seconds")
    max_running_requests: int = _knob(0, "requests served at once, others queue (0 = unlimited)")
    build: str = _knob("", "build label reported by /get_server_info")
    model_path: str = _knob("simulated/gsm8k", "model path reported by the server")
    # ---- teacher-forced scoring: the next-token model behind logprobs (abh_simulator.logprobs)
    vocab_size: int = _knob(32000, "vocabulary size of the toy tokenizer and the next-token model")
    logit_shift: float = _knob(0.0, "size (nats, sd per logit) of this build's perturbation of the next-token "
                                    "logits, keyed by the build label; 0 = identical to any other build; never "
                                    "changes the answers (accuracy)")
    logprob_noise: float = _knob(0.025, "run-to-run noise on the logits (sd, nats), drawn where noise says")
    # ---- MoE routing as SGLang returns it (abh_simulator.experts)
    enable_return_routed_experts: bool = _knob(True, "serve return_routed_experts (SGLang's "
                                                     "--enable-return-routed-experts; on by default here)")
    routed_experts_bug: bool = _knob(False, "the shared-slot bug: the gate routes top-(k-1) and returns its shared "
                                            "marker (id num_experts) in the last slot")
    num_experts: int = _knob(256, "routed experts per MoE layer (ids 0..num_experts-1)")
    topk: int = _knob(6, "routed experts per token (num_experts_per_tok)")
    num_layers: int = _knob(4, "MoE layers in the routed-experts capture")
    unrouted_layers: int = _knob(0, "leading layers of the capture the gate does not fill (dense or hash-routed "
                                    "layers: their rows stay zero, as SGLang returns them)")
    routing_noise: float = _knob(0.0001, "share of (token, MoE layer) rows whose near-tied k-th and (k+1)-th experts "
                                         "swap, drawn anew on every launch (the routing's A/A floor; 0 with "
                                         "deterministic)")
    routing_shift: float = _knob(0.0, "share of (token, MoE layer) rows whose near tie this build flips, keyed by "
                                      "the build label, the same on every launch: a kernel change that flips "
                                      "near-tied experts")
    # ---- faults (what happens to a server; not a property of the arm)
    startup_s: float = _knob(0.0, "seconds before the server is ready: /health and /health_generate answer "
                                  "503 meanwhile, as SGLang does until its warm-up ends")
    crash_after: int = _knob(0, "os._exit(1) after serving N generate requests (0 = never)")
    hang_after: int = _knob(0, "after N generate requests, never answer again (0 = never)")
    error_rate: float = _knob(0.0, "share of attempts answered 500/503")
    malformed_rate: float = _knob(0.0, "share of 200 responses with a truncated or non-JSON body")
    ignore_sigterm: bool = _knob(False, "ignore SIGTERM (tests kill escalation)")

    def problems(self) -> list[str]:
        """What is wrong with these values, one ``name: reason`` line each (empty when valid)."""
        out: list[str] = []
        if not 0.0 < self.accuracy < 1.0:
            out.append(f"accuracy must be strictly between 0 and 1, not {self.accuracy}")
        if self.noise not in NOISE_MODES:
            out.append(f"noise must be one of {', '.join(NOISE_MODES)}, not {self.noise!r}")
        for name in ("flip_rate", "invalid_rate", "error_rate", "malformed_rate", "routing_noise", "routing_shift"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                out.append(f"{name} must be in [0, 1], not {v}")
        for name in ("latency_s", "startup_s", "difficulty_sd", "max_running_requests", "crash_after",
                     "hang_after", "logit_shift", "logprob_noise"):
            if getattr(self, name) < 0:
                out.append(f"{name} must be >= 0, not {getattr(self, name)}")
        if self.vocab_size < 1000:
            out.append(f"vocab_size must be >= 1000, not {self.vocab_size}")
        if not 0 <= self.unrouted_layers < self.num_layers:
            out.append(f"unrouted_layers must be in [0, num_layers), not {self.unrouted_layers}")
        if self.num_layers < 1:
            out.append(f"num_layers must be >= 1, not {self.num_layers}")
        if not 1 <= self.topk <= self.num_experts:
            out.append(f"topk must be in [1, num_experts={self.num_experts}], not {self.topk}")
        if self.routed_experts_bug and self.topk < 2:
            out.append("topk must be >= 2 with routed_experts_bug (k-1 routed ids plus the shared marker)")
        return out

    def effective(self) -> SimConfig:
        """The knobs a launch runs with: with ``deterministic``, no run-to-run noise and a fixed run seed."""
        if not self.deterministic:
            return self
        return dataclasses.replace(self, flip_rate=0.0, logprob_noise=0.0, routing_noise=0.0, run_seed=0)

    def validate(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))


def knob_types() -> dict[str, type]:
    """Each knob's value type (``float | None`` -> float)."""
    hints = typing.get_type_hints(SimConfig)
    out: dict[str, type] = {}
    for f in fields(SimConfig):
        t = hints[f.name]
        args = [a for a in typing.get_args(t) if a is not type(None)]
        out[f.name] = args[0] if args else t
    return out


def flag(name: str) -> str:
    """The command-line flag of a knob: ``flip_rate`` -> ``--flip-rate``."""
    return "--" + name.replace("_", "-")


def default_of(name: str) -> Any:
    f = next(f for f in fields(SimConfig) if f.name == name)
    return f.default if f.default is not dataclasses.MISSING else None


def to_argv(values: dict[str, Any]) -> list[str]:
    """Flags for the given knob values (unknown names ignored). ``None`` and ``""`` are left out (the default
    applies), so is a negative ``run_seed`` (random) and ``accuracy`` when ``ability`` is set; a bool is
    ``--name`` / ``--no-name`` only when it differs from its default."""
    argv: list[str] = []
    types = knob_types()
    for f in fields(SimConfig):
        if f.name not in values:
            continue
        v = values[f.name]
        if v is None or v == "" or (f.name == "run_seed" and int(v) < 0):
            continue
        if f.name == "accuracy" and values.get("ability") is not None:
            continue
        if types[f.name] is bool:
            if bool(v) != bool(default_of(f.name)):
                argv.append(flag(f.name) if v else "--no-" + flag(f.name)[2:])
            continue
        argv += [flag(f.name), str(v)]
    return argv
