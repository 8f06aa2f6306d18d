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
        """Every simulator knob the engine config sets becomes its flag (``flip_rate`` -> ``--flip-rate``),
        so a knob added to the simulator needs no second list here."""
        from dataclasses import fields

        from harness.simulator import SimConfig

        c = self.cfg
        args = ["--host", self.host, "--port", str(self.port)]
        for f in fields(SimConfig):
            if f.name in ("host", "port", "argv") or not hasattr(c, f.name):
                continue
            value = getattr(c, f.name)
            if value is None or value == "" or (f.name == "run_seed" and int(value) < 0):
                continue  # unset: the simulator's default (run_seed -1: random per launch)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                args += [flag] if value else []
            else:
                args += [flag, str(value)]
        return args

    def ready_check(self) -> tuple[bool, str]:
        return self._check_health("/health_generate")


ENGINE = SimulatedEngine
