"""SGLang: ``python -m sglang.launch_server --model-path M --host H --port P`` + engine.args + arm.args.

Ready when ``GET /health_generate`` is 200 (a 1-token generation). Besides ``--port``, SGLang binds ports it
derives from it (``PortArgs.init_new`` in ``python/sglang/srt/server_args.py``), checked free before launch (a
clear error, not a server that dies while loading): with ``--enable-dp-attention`` on one node, a block from
``--port + 233`` (mirrored below ``--port`` near the top of the port space, or at ``--dist-init-addr``'s
port), and ``--nccl-port`` as given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.engines.base import LaunchedEngine
from harness.engines.preflight import Preflight, parse_server_flags
from harness.engines.process import EngineError
from harness.util.cmdline import parse_flags

#: The module whose ``ServerArgs`` parses SGLang's flags (the preflight asks the arm's own copy).
SERVER_ARGS_MODULE = "sglang.srt.server_args"
#: SGLang's ``ZMQ_TCP_PORT_DELTA``.
ZMQ_TCP_PORT_DELTA = 233
#: Ports of the block besides the per-DP-rank ones (dist-init, tokenizer, detokenizer, rpc, metrics,
#: scheduler-input, load collector, nccl in newer versions), with room to spare.
_BLOCK = 8
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]", ""}

#: Appended to the ready-timeout message: what to do when the weights were not on disk yet.
COLD_START_HINT = (
    "If this was the first launch on this machine, the weights may still be downloading from the Hugging Face "
    "hub (the server log shows the download): fetch them once beforehand (`hf download MODEL` or "
    "`huggingface-cli download MODEL`, with HF_TOKEN set if the repo is gated), then rerun with "
    "engine.env.HF_HUB_OFFLINE=1 or engine.model_path=/path/to/the/local/snapshot, or raise "
    "engine.ready_timeout_s. A rerun of the same command resumes the run.")


def _flags(args: Sequence[str]) -> dict[str, str | bool]:
    """Each flag's value as argparse keeps it: the last one given."""
    return {k: v[-1] if isinstance(v, list) else v for k, v in parse_flags(args).items() if k[0] == "-"}


def _int(v: str | bool | None, default: int) -> int:
    try:
        return int(v) if isinstance(v, str) else default
    except ValueError:
        return default


def _dp(f: dict[str, str | bool]) -> int:
    return _int(f.get("--dp") or f.get("--dp-size") or f.get("--data-parallel-size"), 1)


def dp_attention_ranks(args: Sequence[str]) -> int:
    """How many DP attention ranks (each with its own scheduler) a server started with ``args`` runs: ``--dp
    N`` with ``--enable-dp-attention``, or ``--attn-dp-size N`` (current SGLang's spelling); else 1."""
    f = _flags(args)
    attn = _int(f.get("--attn-dp-size"), 0)
    if attn > 0:
        return attn
    return max(1, _dp(f)) if f.get("--enable-dp-attention") else 1


def derived_ports(port: int, args: Sequence[str]) -> list[int]:
    """The ports an SGLang server started with ``--port port`` and ``args`` binds besides ``port``."""
    f = _flags(args)
    ports = [_int(f.get("--nccl-port"), 0)]  # 0 (not given) is dropped below
    dist = f.get("--dist-init-addr")
    dist_port = 0
    if isinstance(dist, str) and ":" in dist:
        host, _, p = dist.rpartition(":")
        dist_port = _int(p, 0) if host in _LOCAL_HOSTS else 0
    if f.get("--enable-dp-attention") and _int(f.get("--nnodes"), 1) == 1:
        span = _BLOCK + max(_dp(f), 1)
        base = dist_port or port + ZMQ_TCP_PORT_DELTA
        if not dist_port and base + span > 65535:
            base = port - ZMQ_TCP_PORT_DELTA
        ports += range(base, base + span + 1)
    elif dist_port:
        ports.append(dist_port)
    return sorted(set(p for p in ports if 0 < p < 65536 and p != port))


class SGLangEngine(LaunchedEngine):
    kind = "sglang"
    dist = "sglang"
    ready_what = "GET /health_generate = 200"
    probe_timeout_s = 60.0
    stack_probe = True
    deterministic_flags = ("--enable-deterministic-inference",)
    deterministic_promise = (
        "--enable-deterministic-inference (batch-invariant ops): GPUs with the FlashInfer, FlashAttention 3 or "
        "Triton attention backend only (docs.sglang.io/advanced_features/deterministic_inference.html); "
        "the preflight has each arm's own SGLang parse the flag")

    #: the attention backends SGLang's deterministic inference supports (its docs, above)
    DETERMINISTIC_BACKENDS = ("flashinfer", "fa3", "triton")

    def deterministic_caveat(self) -> str | None:
        flags = _flags(self.user_args())
        named = {str(v) for k, v in flags.items()
                 if k in ("--attention-backend", "--prefill-attention-backend", "--decode-attention-backend")}
        outside = sorted(b for b in named if b not in self.DETERMINISTIC_BACKENDS)
        if outside:
            return (f"attention backend {', '.join(outside)} is not among those SGLang promises it for "
                    f"({', '.join(self.DETERMINISTIC_BACKENDS)}): the A/A floor decides")
        return None

    def server_args(self) -> list[str]:
        model = ["--model-path", str(self.cfg.model_path)] if self.cfg.model_path else []
        return [*model, "--host", self.host, "--port", str(self.port)]

    def ready_check(self) -> tuple[bool, str]:
        return self._check_health("/health_generate")

    def derived_ports(self) -> list[int]:
        return derived_ports(self.port, self.user_args())

    def preflight(self) -> Preflight:
        """The launch's flags parsed by the arm's own ``sglang.srt.server_args``."""
        return parse_server_flags(self.arm, SERVER_ARGS_MODULE, [*self.server_args(), *self.user_args()],
                                  self.launch_spec().env, what="flags parsed by its sglang.srt.server_args")

    def wait_ready(self, on_status: Callable[[str], None] | None = None) -> float:
        try:
            return super().wait_ready(on_status)
        except EngineError as e:
            if "not ready after" not in e.reason:
                raise
            raise EngineError(f"{e.reason}. {COLD_START_HINT}", e.log_tail, e.log_path) from None


ENGINE = SGLangEngine
