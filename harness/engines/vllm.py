"""vLLM: ``vllm serve MODEL`` run as ``python -m vllm.entrypoints.cli.main serve MODEL --host H --port P ...``.

Ready when ``GET /health`` is 200 and a 1-token ``/v1/completions`` works.
"""

from __future__ import annotations

from harness.engines.base import EngineError, LaunchedEngine


class VLLMEngine(LaunchedEngine):
    kind = "vllm"
    dist = "vllm"
    ready_what = "GET /health = 200 and a 1-token /v1/completions"
    probe_timeout_s = 60.0
    stack_probe = True

    def server_args(self) -> list[str]:
        if not self.cfg.model_path:
            raise EngineError("the vllm engine needs engine.model_path (vllm serve MODEL)")
        return ["serve", str(self.cfg.model_path), "--host", self.host, "--port", str(self.port)]

    def ready_check(self) -> tuple[bool, str]:
        ok, detail = self._check_health("/health")
        if not ok:
            return ok, detail
        return self._check_one_token()


ENGINE = VLLMEngine
