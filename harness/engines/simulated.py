"""SIMULATED engine: the project's GSM8K server simulator (``python -m harness.simulator``) as a real process.

Every SimulatedEngineConfig knob becomes a flag; ready when ``GET /health_generate`` is 200. It says
SIMULATED: ``simulated`` is True and the simulator's own /get_server_info reports ``"simulated": true``.
"""

from __future__ import annotations

from harness.config import PROJECT_ROOT
from harness.engines.base import LaunchedEngine


class SimulatedEngine(LaunchedEngine):
    kind = "simulated"
    dist = "abh"
    ready_what = "GET /health_generate = 200 (SIMULATED)"
    probe_timeout_s = 10.0
    #: Fault injection simulates what happens to a server, not what an arm is: not an arm difference.
    diff_ignore = (*LaunchedEngine.diff_ignore, "startup_s", "crash_after", "hang_after", "error_rate",
                   "malformed_rate", "ignore_sigterm")

    @property
    def simulated(self) -> bool:
        return True

    def extra_pythonpath(self) -> list[str]:
        # the arm's interpreter may not have the harness installed; the simulator is part of it
        return [str(PROJECT_ROOT)]

    def server_args(self) -> list[str]:
        c = self.cfg
        args = ["--host", self.host, "--port", str(self.port)]
        data = getattr(c, "data", "")
        if data:
            args += ["--data", str(data)]
        args += ["--accuracy", str(c.accuracy), "--flip-rate", str(c.flip_rate), "--seed", str(c.seed)]
        noise = getattr(c, "noise", "")
        if noise:
            args += ["--noise", str(noise)]
        if c.run_seed is not None and int(c.run_seed) >= 0:
            args += ["--run-seed", str(c.run_seed)]
        args += ["--latency-s", str(c.latency_s), "--max-running-requests", str(c.max_running_requests)]
        if c.build:
            args += ["--build", str(c.build)]
        if c.model_path:
            args += ["--model-path", str(c.model_path)]
        args += ["--invalid-rate", str(c.invalid_rate), "--startup-s", str(c.startup_s),
                 "--crash-after", str(c.crash_after), "--hang-after", str(c.hang_after),
                 "--error-rate", str(c.error_rate), "--malformed-rate", str(c.malformed_rate)]
        if c.ignore_sigterm:
            args.append("--ignore-sigterm")
        return args

    def ready_check(self) -> tuple[bool, str]:
        return self._check_health("/health_generate")


ENGINE = SimulatedEngine
