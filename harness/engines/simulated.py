"""SIMULATED engine: the project's GSM8K server simulator (``python -m abh_simulator``) as a real process,
every SimConfig knob a flag. It says SIMULATED: ``simulated`` is True and its /get_server_info reports it.
"""

from __future__ import annotations

import hashlib

from harness.config import PROJECT_ROOT
from harness.engines.base import LaunchedEngine


def launch_seed(run_seed: int, launch_id: str) -> int:
    """A launch's own seed drawn from the run's ``run_seed`` and its launch id (a negative run_seed stays
    negative: random per launch)."""
    if run_seed < 0:
        return run_seed
    return int.from_bytes(hashlib.sha256(f"{run_seed}/{launch_id}".encode()).digest()[:4], "little") >> 1


class SimulatedEngine(LaunchedEngine):
    kind = "simulated"
    dist = "abh"
    ready_what = "GET /health_generate = 200 (SIMULATED)"
    probe_timeout_s = 10.0
    #: Fault injection simulates what happens to a server, not what an arm is: not an arm difference.
    diff_ignore = (*LaunchedEngine.diff_ignore, "startup_s", "crash_after", "hang_after", "error_rate",
                   "malformed_rate", "ignore_sigterm")

    deterministic_promise = ("SIMULATED: --deterministic drops the run-to-run noise (no flips, no logprob noise, a "
                             "fixed run seed): every launch answers and scores each request identically")

    def deterministic_args(self) -> list[str]:
        return []  # the knob is a SimConfig field: server_args passes --deterministic already

    @property
    def simulated(self) -> bool:
        return True

    def extra_pythonpath(self) -> list[str]:
        # the arm's interpreter may not have the harness installed; the simulator is part of it
        return [str(PROJECT_ROOT)]

    def server_args(self) -> list[str]:
        """Every simulator knob of the engine config becomes its flag (``flip_rate`` -> ``--flip-rate``) through
        the simulator's own mapping, so a knob added to SimConfig needs no second list here."""
        from dataclasses import fields

        from abh_simulator.sim_config import SimConfig, to_argv

        values = {f.name: getattr(self.cfg, f.name) for f in fields(SimConfig) if hasattr(self.cfg, f.name)}
        values.update(host=self.host, port=self.port, run_seed=self.run_seed())
        return to_argv(values)

    def run_seed(self) -> int:
        """The launch's ``--run-seed``: engine.run_seed, or with ``seed_by_launch`` :func:`launch_seed`."""
        seed = int(self.cfg.run_seed)
        return launch_seed(seed, self.launch_id) if self.cfg.seed_by_launch and self.launch_id else seed

    def launch(self) -> None:
        if self.cfg.seed_by_launch:
            self._spec = None  # the command carries this launch's seed
        super().launch()

    def ready_check(self) -> tuple[bool, str]:
        return self._check_health("/health_generate")


ENGINE = SimulatedEngine
