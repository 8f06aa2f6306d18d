"""Process management shared by every engine that launches a server: :class:`ServerProcess` (an argv list in its
own process group, logged to the run directory, stopped on every path), :func:`wait_until_ready`, ports, log
tails. Every live server is also stopped at interpreter exit (atexit); a harness killed with SIGKILL is covered
by the launcher's parent-death guards (launcher.py)."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Literal, TypedDict

import psutil

from harness.engines.gpu import GpuRelease, GpuSnapshot, StatusFn, gpu_snapshot, wait_gpu_release
from harness.results import fileio
from harness.util.redact import redact_argv, redact_text


class EngineError(RuntimeError):
    """A server failed to start, died, hung or could not be stopped; ``log_tail`` holds its last output."""

    def __init__(self, message: str, log_tail: str = "", log_path: str | None = None):
        full = message
        if log_tail:
            full += f"\n--- last lines of {log_path or 'the server log'} ---\n{log_tail.rstrip()}"
        super().__init__(full)
        self.reason = message
        self.log_tail = log_tail
        self.log_path = log_path


class PortInUseError(EngineError):
    """The configured port is taken by another process."""


# ----------------------------------------------------------------------------------------- ports
def connect_host(host: str) -> str:
    """The address to connect to for a server bound to ``host`` (wildcards mean loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel takes clients' local ports from (Linux's ``ip_local_port_range``)."""
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


_PORT_HEADROOM = 512  # room above a picked port for the ports a server derives from it (SGLang: +233 ...)


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A port nothing holds on ``host``, below the ephemeral range (there, no client connection can take it,
    or a port derived from it, before the bind); the kernel's own pick when that range is too small."""
    lo, _ = ephemeral_ports()
    top = lo - _PORT_HEADROOM
    if top > 10_000:
        rng = random.SystemRandom()
        for _ in range(50):
            port = rng.randint(10_000, top)
            if not port_in_use(host, port):
                return port
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    """True when a socket is bound/listening on (host, port): the check servers with SO_REUSEADDR face."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def check_port_free(host: str, port: int) -> None:
    if port_in_use(host, port):
        raise PortInUseError(f"port {port} on {host} is already in use (set engine.port=0 to pick a free "
                             f"one, or stop whatever listens there)")


def busy_ports(ports: Sequence[int], host: str = "127.0.0.1") -> list[int]:
    """The ports of ``ports`` taken on ``host`` (by default loopback, where SGLang binds derived ports)."""
    out = []
    for p in ports:
        try:
            if port_in_use(host, int(p)):
                out.append(int(p))
        except OSError:
            continue  # an address we cannot bind at all: not ours to check
    return out


def check_ports_free(ports: Sequence[int], why: str, host: str = "127.0.0.1") -> None:
    """:class:`PortInUseError` naming each taken port of ``ports`` (``why``: how the server uses them)."""
    busy = busy_ports(ports, host)
    if busy:
        raise PortInUseError(f"port(s) {', '.join(map(str, busy))} on {host} ({why}) already in use: the server "
                             "would fail to bind them (set engine.port=0 to pick a free range, or stop whatever "
                             "listens there)")


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while busy_ports([port], host):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


# ------------------------------------------------------------------------------------------ logs
def redact_log_file(path: str | Path | None, max_bytes: int = 256 * 1024 * 1024) -> None:
    """Once the server has stopped, rewrite its log with secrets redacted (a server may print its args,
    --api-key included). Atomic; logs larger than ``max_bytes`` are left as they are."""
    p = Path(path) if path else None
    if p is None or not p.is_file() or p.stat().st_size > max_bytes:
        return
    text = p.read_text(errors="replace")
    clean = redact_text(text)
    if clean != text:
        fileio.atomic_write_text(p, clean)


def read_log_tail(path: str | Path | None, start: int = 0, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a log file from byte offset ``start`` on ('' when there is none)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            begin = max(start, end - max_bytes)
            f.seek(begin)
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    return "\n".join(text.splitlines()[-lines:])


#: Lines of a server's log that say nothing about why it failed (model loading, progress bars, access lines of
#: answered requests, blank lines): left out of the tail printed on a failure (the log file keeps them).
LOG_NOISE = re.compile(
    r"^\s*$"
    # llama.cpp's loading and per-request dumps
    r"|^(create_tensor|llama_graph_n_input_tensors|load_tensors|llama_kv_cache\w*|llama_model_loader|print_info|"
    r"llm_load_print_meta|llm_load_tensors|llama_context|graph_reserve|sched_reserve|resolve_fused_ops|"
    r"set_abort_callback|llama_perf_context_print|clip_model_loader|load|done_getting_tensors|init_tokenizer):"
    r"|^\.{8,}$|^Llama\.generate: \d+ prefix-match hit|^(Model metadata|Available chat formats|Using chat \w+_token)"
    r"|^CPU : SSE3"
    # safetensors shards and progress bars (tqdm), uvicorn's access lines of answered requests
    r"|Loading (safetensors|pt|bin) checkpoint shards|\d+%\s*(Completed\s*)?\|"
    r"|^INFO:\s+[\d.:]+ - \"[A-Z]+ \S+ HTTP/[\d.]+\" [234]\d\d\b")


def quiet_tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text`` that are not :data:`LOG_NOISE`, with how many were left out."""
    every = text.splitlines()
    kept = [line for line in every if not LOG_NOISE.search(line)]
    dropped = len(every) - len(kept)
    note = [f"({dropped} loading and progress line(s) left out; the log file has them)"] if dropped else []
    return "\n".join(kept[-lines:] + note)


#: The last line of a Python traceback: ``SomeError: message`` (a worker's ``(EngineCore_DP0 pid=12)`` prefix and a
#: dotted module path allowed).
EXCEPTION_LINE = re.compile(r"^(?:\(\w+ pid=\d+\)\s*)?(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit)\b:?\s.*\S")
#: Exceptions that only say another process failed ("see root cause above"): never the root cause themselves.
WRAPPER_EXCEPTION = re.compile(r"root cause above|initialization failed|EngineDeadError|Failed core proc", re.I)


def root_cause(text: str) -> str:
    """The exception line that says why a server died, from its log: the last traceback's own message, not the
    wrapper a parent process raised about a child's failure ('' when the log holds no traceback)."""
    found = [line.strip() for line in text.splitlines() if EXCEPTION_LINE.match(line.strip())]
    causes = [line for line in found if not WRAPPER_EXCEPTION.search(line)]
    return (causes or found or [""])[-1][:400]


# ------------------------------------------------------------------------------------- processes
_LIVE: set[ServerProcess] = set()
_LIVE_LOCK = threading.Lock()


#: What a server's death by a signal usually means (the one line the user reads before the log tail).
SIGNAL_CAUSES = {
    signal.SIGILL: "it executed an instruction this CPU cannot run: the engine was built for another CPU",
    signal.SIGKILL: "usually the kernel's out-of-memory killer (see `dmesg`), or someone killed it",
    signal.SIGSEGV: "a crash in native code (a kernel, a driver or an extension module)",
    signal.SIGABRT: "native code aborted (a failed assertion or an uncaught C++ exception)",
    signal.SIGBUS: "a bad memory mapping: a truncated model file or too little shared memory (/dev/shm)",
}


def describe_exit(code: int, sigill_hint: str = "") -> str:
    """How a server process ended, in one line: the exit code, or the signal (``-N`` from Popen, ``128 + N``
    from a shell) and what it usually means; ``sigill_hint`` (a rebuild command) follows a SIGILL."""
    signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
    try:
        sig = signal.Signals(signum) if signum else None
    except ValueError:
        sig = None
    if sig is None:
        return f"server process killed by signal {signum} (exit code {code})" if code < 0 \
            else f"server process exited with code {code}"
    cause = SIGNAL_CAUSES.get(sig, "")
    if sig == signal.SIGILL and sigill_hint:
        cause = f"{cause}; {sigill_hint}"
    return f"server process was killed by {sig.name} (exit code {code})" + (f": {cause}" if cause else "")


class StopInfo(TypedDict, total=False):
    """How a server was stopped (:meth:`ServerProcess.stop`; the manifest's ``launches[].stop``)."""

    pid: int | None
    #: ``SIGTERM``, ``SIGTERM, then SIGINT``, ``SIGKILL``, ``SIGKILL (still running)``, ``already exited`` or
    #: ``never started``
    how: str
    #: resident memory of the server's processes just before the stop (what the host gets back)
    rss_mib: float
    returncode: int | None
    #: processes of the server still alive after the stop, and whether there are none
    leftover_pids: list[int]
    memory_released: bool
    #: the port is free again (absent when the stop was given no host and port); absent with ``gpu`` when the
    #: stop waited for neither (an interrupted run)
    port_free: bool
    gpu: GpuRelease
    seconds: float


class ServerProcess:
    """One server process group: start, poll, log tail, stop (idempotent)."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], cwd: str | Path, log_path: str | Path,
                 name: str = "server", sigill_hint: str = ""):
        if isinstance(argv, str) or not argv:
            raise ValueError("argv must be a non-empty list of strings (never a shell string)")
        self.argv = [str(a) for a in argv]
        self.env = dict(env)
        self.cwd = str(cwd)
        self.log_path = Path(log_path)
        self.name = name
        self.sigill_hint = sigill_hint
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_offset = 0
        self._log: IO[bytes] | None = None
        self._known: dict[int, float] = {}  # pid -> create_time of the group and its descendants
        self.stop_info: StopInfo | None = None
        self.gpu_baseline: GpuSnapshot | None = None

    # ------------------------------------------------------------------ start
    def start(self, gpu_baseline: GpuSnapshot | None | Literal["now"] = "now") -> None:
        """Start the server; ``gpu_baseline``: the GPUs' use before it, when the caller asked already (outside the
        section a signal must not cut); "now": asked here."""
        if self.proc is not None:
            raise RuntimeError(f"{self.name}: already started")
        self.gpu_baseline = gpu_snapshot() if gpu_baseline == "now" else gpu_baseline
        fileio.make_dirs(self.log_path.parent)  # no planted link on the way: the launcher writes beside the log
        fileio.make_dirs(self.cwd)
        self._log = fileio.open_append(self.log_path)  # owned by this object, closed in stop()
        self._log.write(f"\n===== abh: {time.strftime('%Y-%m-%d %H:%M:%S')} launching {self.name}: "
                        f"{subprocess.list2cmdline(redact_argv(self.argv))}\n".encode())
        self._log.flush()
        self.log_offset = self._log.tell()
        try:
            self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
                                         close_fds=True)
        except OSError as e:
            self._log.close()
            self._log = None
            raise EngineError(f"cannot start {self.name}: {self.argv[0]}: {e}") from e
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._remember_tree()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def exit_reason(self) -> str | None:
        """None while the process runs; otherwise how it ended."""
        if self.proc is None:
            return "server process was never started"
        code = self.proc.poll()
        return None if code is None else describe_exit(code, self.sigill_hint)

    def tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log that say something (loading noise left out), redacted."""
        return redact_text(quiet_tail(read_log_tail(self.log_path, self.log_offset, 20 * lines), lines))

    def last_line(self) -> str:
        for line in reversed(read_log_tail(self.log_path, self.log_offset, lines=20, max_bytes=8192).splitlines()):
            if line.strip():
                return line.strip()[:300]
        return ""

    def root_cause(self) -> str:
        """The exception that killed the server, from this launch's log (tracebacks are long: read deep), redacted."""
        return redact_text(root_cause(read_log_tail(self.log_path, self.log_offset, lines=4000, max_bytes=512 * 1024)))

    # ------------------------------------------------------------------ the process tree
    def _remember_tree(self) -> None:
        """Record the pids of the group and of all descendants (some servers start new sessions)."""
        if self.proc is None:
            return
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        procs += self._group()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                self._known[p.pid] = p.create_time()

    def _group(self) -> list[psutil.Process]:
        """The live (not zombie) processes of the server's process group."""
        out = []
        with contextlib.suppress(psutil.Error):
            for p in psutil.process_iter(["pid", "status"]):
                with contextlib.suppress(OSError):
                    if self.proc is not None and os.getpgid(p.pid) == self.proc.pid \
                            and p.info["status"] != psutil.STATUS_ZOMBIE:
                        out.append(p)
        return out

    def rss_mib(self) -> float:
        """Resident memory of the server's live processes (the group and its descendants), in MiB."""
        total = 0
        for pid in self._alive_known():
            with contextlib.suppress(psutil.Error):
                total += psutil.Process(pid).memory_info().rss
        return round(total / (1 << 20), 1)

    def _alive_known(self) -> list[int]:
        out = []
        for pid, ctime in self._known.items():
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)  # a pid reused by another process has another create_time
                if not (ctime and abs(p.create_time() - ctime) > 0.01) and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
        return out

    def _signal_group(self, sig: int) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def _group_exists(self) -> bool:
        if self.proc is None:
            return False
        try:
            os.killpg(self.proc.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return bool(self._group())

    # ------------------------------------------------------------------ stop
    def _wait_stopped(self, stop_timeout_s: float, interrupt_after_s: float | None,
                      on_status: StatusFn | None) -> str:
        """Wait up to ``stop_timeout_s`` for the process after SIGTERM, sending SIGINT after ``interrupt_after_s``;
        which signal it stopped on (TimeoutExpired: it did not)."""
        assert self.proc is not None
        if interrupt_after_s is None or interrupt_after_s >= stop_timeout_s:
            self.proc.wait(stop_timeout_s)
            return "SIGTERM"
        try:
            self.proc.wait(interrupt_after_s)
            return "SIGTERM"
        except subprocess.TimeoutExpired:
            if on_status:
                on_status(f"{self.name} (pid {self.proc.pid}) still runs {interrupt_after_s:g} s after SIGTERM "
                          f"(busy): SIGINT")
            self._signal_group(signal.SIGINT)
        self.proc.wait(stop_timeout_s - interrupt_after_s)
        return "SIGTERM, then SIGINT"

    def stop(self, stop_timeout_s: float = 60.0, on_status: StatusFn | None = None, host: str | None = None,
             port: int | None = None, release_timeout_s: float = 300.0, settle: bool = True,
             interrupt_after_s: float | None = None) -> StopInfo:
        """Stop the server (idempotent): SIGTERM to the group, SIGINT after ``interrupt_after_s`` (uvicorn's
        "force quit"), SIGKILL after ``stop_timeout_s``; then (``settle``: not for an interrupted run, a hung
        GPU tool would hold Ctrl-C) wait for port and GPUs."""
        if self.stop_info is not None:
            return self.stop_info
        info: StopInfo = {"pid": self.pid}
        t0 = time.monotonic()
        if self.proc is None:
            self.stop_info = {**info, "how": "never started"}
            return self.stop_info
        if self.proc.poll() is None:
            self._remember_tree()
        server_pids = set(self._known)
        info["rss_mib"] = self.rss_mib()  # what the host gets back once the processes are gone (CPU servers)
        if self.proc.poll() is None:
            if on_status:
                on_status(f"stopping {self.name} (pid {self.proc.pid}): SIGTERM to its process group")
            self._signal_group(signal.SIGTERM)
            try:
                info["how"] = self._wait_stopped(stop_timeout_s, interrupt_after_s, on_status)
            except subprocess.TimeoutExpired:
                if on_status:
                    on_status(f"{self.name} (pid {self.proc.pid}) ignored SIGTERM for {stop_timeout_s:.0f} s: "
                              "SIGKILL")
                self._signal_group(signal.SIGKILL)
                info["how"] = "SIGKILL"
                try:
                    self.proc.wait(30)
                except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
                    info["how"] = "SIGKILL (still running)"
        else:
            info["how"] = "already exited"
        info["returncode"] = self.proc.poll()
        # Whatever is left of the group or its descendants (workers, the launcher's watchdog) goes now.
        self._signal_group(signal.SIGKILL)
        for pid in self._alive_known():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (self._group_exists() or self._alive_known()) and time.monotonic() < deadline:
            time.sleep(0.05)
        info["leftover_pids"] = self._alive_known()
        info["memory_released"] = not info["leftover_pids"]
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None
        redact_log_file(self.log_path)
        with _LIVE_LOCK:
            _LIVE.discard(self)
        if settle and host is not None and port:
            info["port_free"] = wait_port_free(host, port, min(release_timeout_s, 60.0))
            if not info["port_free"] and on_status:
                on_status(f"port {port} on {host} is still in use after stopping {self.name}")
        if settle:
            info["gpu"] = wait_gpu_release(server_pids, self.gpu_baseline, release_timeout_s, on_status)
        info["seconds"] = time.monotonic() - t0
        self.stop_info = info
        return info


def wait_until_ready(proc: ServerProcess, check: Callable[[], tuple[bool, str]], what: str, timeout_s: float,
                     interval_s: float = 2.0, on_status: StatusFn | None = None,
                     status_every_s: float = 5.0) -> float:
    """Poll ``check`` until it returns (True, _); return the seconds waited. Before each poll the process must be
    alive. On death or timeout: :class:`EngineError` with the log tail."""
    t0 = time.monotonic()
    last_status = -1e9
    detail = "not polled yet"
    while True:
        reason = proc.exit_reason()
        if reason is not None:
            cause = proc.root_cause()
            raise EngineError(f"{proc.name}: {reason} while waiting for {what} (after "
                              f"{time.monotonic() - t0:.1f} s)" + (f"; root cause: {cause}" if cause else ""),
                              proc.tail(), str(proc.log_path))
        ok, detail = check()
        elapsed = time.monotonic() - t0
        if ok:
            proc._remember_tree()
            return elapsed
        if elapsed >= timeout_s:
            raise EngineError(f"{proc.name}: not ready after {timeout_s:.0f} s waiting for {what} "
                              f"(last answer: {detail}); raise engine.ready_timeout_s if it is still loading",
                              proc.tail(), str(proc.log_path))
        if on_status and time.monotonic() - last_status >= status_every_s:
            last_status = time.monotonic()
            line = proc.last_line()
            # a refused connection while the process lives means it is loading
            if "ConnectionError" in detail or "ConnectTimeout" in detail:
                detail = "not listening yet: the server is loading"
            on_status(f"{proc.name}: waiting for {what} ({elapsed:.0f}/{timeout_s:.0f} s, pid {proc.pid}, "
                      f"{detail})" + (f"; log: {line}" if line else ""))
        time.sleep(max(0.0, min(interval_s, timeout_s - elapsed)))


# ------------------------------------------------------------------------------ exit-path safety
def stop_all(stop_timeout_s: float = 10.0) -> None:
    """Stop every server this interpreter started that is still running (atexit, signal handlers)."""
    with _LIVE_LOCK:
        live = list(_LIVE)
    for p in live:
        with contextlib.suppress(Exception):
            p.stop(stop_timeout_s=stop_timeout_s, release_timeout_s=5.0)


atexit.register(stop_all)
