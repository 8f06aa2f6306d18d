"""Server lifetimes for a run: launch, wait until ready, assert the side live, reuse, restart, stop.

A :class:`ServerPool` holds at most one live launch per arm. Each launch has an id (``<arm>-<n>`` over the run
directory's sessions; ``url:...`` for a server abh did not start), recorded with every eval it serves, so the
statistics know which runs shared a launch. Unless concurrent, acquiring an arm's server stops the others
first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.arms.arm import ResolvedArm
from harness.checks.live import run_live_checks
from harness.checks.result import assert_checks
from harness.engines import Engine
from harness.engines.process import StopInfo
from harness.measure.prompt_tokens import PromptTokens
from harness.orchestrate.interrupts import Interrupts
from harness.orchestrate.rundir import Manifest
from harness.results.fileio import OutputError


@dataclass
class Launch:
    """One launch of an arm's server: what served an eval."""

    id: str
    key: str
    engine: Engine
    #: Evals started on this launch (passes over the questions).
    passes: int = 0
    #: What this launch's tokenizer makes of each prompt: every pass's answers are checked against it.
    prompt_tokens: PromptTokens = field(default_factory=PromptTokens)


class ServerPool:
    """The run's live servers, at most one launch per arm (see the module docstring)."""

    def __init__(self, engines: dict[str, Engine], arms: dict[str, ResolvedArm], manifest: Manifest,
                 interrupts: Interrupts, say: Callable[[str], None], *, concurrent: bool,
                 detail: Callable[[str], None] | None = None):
        self.engines, self.arms, self.manifest = engines, arms, manifest
        self.interrupts, self.say, self.concurrent = interrupts, say, concurrent
        #: the lines a default terminal leaves to run.log (waiting, checks that passed, stops)
        self.detail = detail or say
        self.live: dict[str, Launch] = {}
        #: Arms whose server was launched (and passed its live checks) in this session.
        self.launched: set[str] = set()

    def acquire(self, key: str, role: str, *, fresh: bool = False, label: str = "") -> Launch:
        """A ready server of arm ``key`` for an eval of ``role``: its live launch when there is one it may
        reuse, else a new launch. ``fresh``: only a launch that has served no eval yet will do."""
        if not self.concurrent:
            for other in [k for k in self.live if k != key]:
                self.stop(other, "the next eval needs another arm's server")
        cur = self.live.get(key)
        if cur is not None:
            gone = cur.engine.alive()
            if gone is not None:
                self.stop(key, f"it is not serving ({gone}); launching it again")
            elif fresh and cur.passes:
                if cur.engine.launch_spec().launched:
                    self.stop(key, "the next eval needs a fresh launch")
                else:  # a server someone else started: the eval shares its launch, and the record says so
                    self.say(f"arm {key}'s server is not started by abh: the next eval reuses launch {cur.id}")
        return self.live.get(key) or self.launch(key, role, label)

    def launch(self, key: str, role: str, label: str = "") -> Launch:
        """Start arm ``key``'s server, wait until it serves, record its probe and assert its side live
        (:class:`~harness.checks.result.SideAssertionError` when a live check fails)."""
        engine = self.engines[key]
        launch = Launch(engine.launch_identity() or self.manifest.next_launch_id(key), key, engine)
        # a server abh did not start (abh ab's URLs) is checked, not launched
        verb = "checking the server of" if engine.kind == "external" else "launching"
        self.say(f"{label + ' ' if label else ''}{verb} arm {key} ({engine.kind}), launch {launch.id}")
        spawned = time.time()
        engine.prepare_launch()  # a GPU tool's answer can take seconds: Ctrl-C meanwhile acts at once
        engine.launch_id = launch.id
        with self.interrupts.deferred():
            engine.launch()
            self.live[key] = launch
        self.interrupts.check()
        engine.wait_ready(on_status=lambda s: self.detail(f"  waiting: {s}"))
        results = run_live_checks(self.arms[key], engine)
        self.manifest.record_launch(key, launch.id, role=role, url=engine.url, spawned=spawned,
                                    probe=engine.probe(), live_checks=[r.to_dict() for r in results])
        if not all(r.passed for r in results):
            self.manifest.record_arm_status(key, "side_check_failed")
            assert_checks(results, key)
        for r in results:
            self.detail(f"  side check {r.name}: PASS")
        self.launched.add(key)
        return launch

    def stop(self, key: str, why: str = "") -> StopInfo | None:
        """Stop arm ``key``'s live server (a signal waits until it is down)."""
        launch = self.live.pop(key, None)
        if launch is None:
            return None
        if launch.engine.launch_spec().launched:
            self.detail(f"stopping server of arm {key} (launch {launch.id})" + (f": {why}" if why else ""))
        else:
            self.detail(f"done with arm {key}'s server (launch {launch.id}): abh did not start it, it keeps running")
        with self.interrupts.deferred():
            # interrupted: the server is stopped, but its port and GPU memory are not waited for (nothing is
            # launched next; a hung GPU tool would hold Ctrl-C for its timeouts)
            info = launch.engine.stop(on_status=self.detail, settle=self.interrupts.signum is None)
            try:
                self.manifest.record_stop(key, launch.id, info)
            except OutputError as e:  # stopped all the same: the record is what failed (a full disk)
                self.say(f"server of arm {key} stopped, but the manifest could not record it: {e}")
                raise
        return info

    def stop_all(self) -> None:
        """Stop every live server; one that cannot be stopped does not keep the others up. A manifest that
        cannot be written does not either: its error is raised once every server is down."""
        unrecorded: OutputError | None = None
        for key in list(self.live):
            try:
                self.stop(key)
            except OutputError as e:
                unrecorded = unrecorded or e
            except Exception as e:  # noqa: BLE001 - keep stopping the others
                self.say(f"could not stop the server of arm {key}: {e}")
        if unrecorded is not None:
            raise unrecorded

    def log_tail(self, key: str, lines: int = 20) -> str:
        launch = self.live.get(key)
        return launch.engine.log_tail(lines) if launch is not None else self.engines[key].log_tail(lines)
