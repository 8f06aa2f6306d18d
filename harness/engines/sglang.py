"""SGLang: ``python -m sglang.launch_server --model-path M --host H --port P`` + engine.args + arm.args.

Ready when ``GET /health_generate`` is 200 (it runs a 1-token generation; 503 while starting).
"""

from __future__ import annotations

from harness.engines.base import LaunchedEngine


class SGLangEngine(LaunchedEngine):
    kind = "sglang"
    dist = "sglang"
    ready_what = "GET /health_generate = 200"
    probe_timeout_s = 60.0

    def server_args(self) -> list[str]:
        args: list[str] = []
        if self.cfg.model_path:
            args += ["--model-path", str(self.cfg.model_path)]
        return [*args, "--host", self.host, "--port", str(self.port)]

    def ready_check(self) -> tuple[bool, str]:
        return self._check_health("/health_generate")


ENGINE = SGLangEngine
