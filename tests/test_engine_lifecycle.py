"""Engine lifecycle on the SIMULATED engine, through the Engine classes: start, ready, faults, stop, cleanup."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import TEST_JSONL, free_port, pid_alive
from helpers.waiting import PATIENCE_S

from harness.arms.arm import ResolvedArm
from harness.config import SimulatedEngineConfig
from harness.engines import EngineError, PortInUseError, create_engine
from harness.measure.evaluation import EvalOptions, ServerGone, run_eval
from harness.results.eval_store import SUMMARY, load_samples
from harness.results.fileio import read_json
from harness.serving.client import ClientConfig
from harness.tasks import gsm8k

pytestmark = pytest.mark.skipif(not TEST_JSONL.exists(), reason=f"GSM8K test set not found at {TEST_JSONL}")


def sim(run_dir: Path, label: str = "s", **kw):
    kw.setdefault("ready_timeout_s", 30.0)
    cfg = SimulatedEngineConfig(data=str(TEST_JSONL), **kw)
    return create_engine(cfg, ResolvedArm(key="a", name="a"), run_dir, label)


def wait_gone(pid: int, timeout: float = PATIENCE_S) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def eval_args(url: str, out: Path, n: int, parallel: int = 4, **client):
    test = gsm8k.load(TEST_JSONL, "test")
    recipe = gsm8k.RecipeConfig(num_questions=n)
    ccfg = ClientConfig(url=url, api="sglang", parallel=parallel, **client)
    return test, recipe, ccfg, out


def test_ready_probe_stop(tmp_path):
    with sim(tmp_path, build="b7") as e:
        e.launch()
        assert e.alive() is None
        e.wait_ready()
        info = e.probe()
        assert e.simulated and info["simulated"] is True
        assert info["server_info"]["build"] == "b7" and info["server_info"]["simulated"] is True
        fp = info["fingerprint"]
        assert fp["pid"] == e.pid and fp["module"] == "abh_simulator"
        assert fp["modules"]["abh_simulator"]["file"].endswith("abh_simulator/__init__.py")
        assert fp["guards"]["pdeathsig"] is True and fp["guards"]["watchdog_pid"]
        pid, watchdog = e.pid, fp["guards"]["watchdog_pid"]
        assert pid_alive(watchdog)
    assert e.alive() == "server was stopped by the harness"
    assert wait_gone(pid) and wait_gone(watchdog)
    first = e.stop()
    assert first["how"] == "SIGTERM" and first["port_free"] is True and first["leftover_pids"] == []
    assert e.stop() is first  # idempotent


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_slow_start_reports_what_it_waits_for(tmp_path):
    seen: list[str] = []
    with sim(tmp_path, startup_s=1.5) as e:
        e.launch()
        waited = e.wait_ready(seen.append)
        assert waited >= 1.3
    assert seen and all("waiting for GET /health_generate" in s for s in seen)
    assert any("; log: simulated server ready" in s or "; log: SIMULATED engine" in s for s in seen)


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_ready_timeout_carries_the_log_tail(tmp_path):
    with sim(tmp_path, startup_s=30, ready_timeout_s=4.0) as e:  # time for the banner on a loaded machine
        e.launch()
        with pytest.raises(EngineError, match=r"not ready after 4 s") as ei:
            e.wait_ready()
    assert "SIMULATED engine" in ei.value.log_tail


def test_death_while_starting_carries_the_log_tail(tmp_path):
    with sim(tmp_path, accuracy=1.5) as e:  # the simulator refuses it and exits 2
        e.launch()
        with pytest.raises(EngineError, match="server process exited with code 2 while waiting") as ei:
            e.wait_ready()
        assert "--accuracy must be strictly between 0 and 1" in ei.value.log_tail
        assert "--accuracy must be strictly between 0 and 1" in str(ei.value)
        assert e.alive() == "server process exited with code 2"


@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_death_mid_run_keeps_samples_and_resumes(tmp_path):
    out = tmp_path / "eval"
    with sim(tmp_path, "crash", crash_after=20, latency_s=0.02) as e:
        e.launch()
        e.wait_ready()
        with pytest.raises(ServerGone, match="server process exited with code 1"):
            run_eval(*eval_args(e.url, out, 60), opts=EvalOptions(progress=False, abort_check=e.alive))
        assert "simulated crash" in e.log_tail()
    kept = load_samples(out)
    assert 5 <= len(kept) < 60 and all(r.error is None for r in kept)
    summary = read_json(out / SUMMARY)
    assert summary["aborted"] == "server process exited with code 1" and summary["complete"] is False
    # a fresh server: the rerun sends only the missing questions
    with sim(tmp_path, "again") as e2:
        e2.launch()
        e2.wait_ready()
        s = run_eval(*eval_args(e2.url, out, 60), opts=EvalOptions(progress=False, abort_check=e2.alive))
    assert s["complete"] and len(load_samples(out)) == 60 and s["resumed"]


@pytest.mark.slow
def test_hang_times_out_requests_as_errors(tmp_path):
    out = tmp_path / "eval"
    with sim(tmp_path, hang_after=5) as e:  # the warm-up + 4 questions are answered, then nothing
        e.launch()
        e.wait_ready()
        t0 = time.monotonic()
        s = run_eval(*eval_args(e.url, out, 10, parallel=10, request_timeout_s=1.0, retries=0),
                     opts=EvalOptions(progress=False, abort_check=e.alive))
        assert time.monotonic() - t0 < 20
        assert e.alive() is None  # hung, not dead
        stop = e.stop()
    assert stop["how"] == "SIGTERM"
    rows = load_samples(out)
    errors = [r for r in rows if r.error is not None]
    assert s["errors"] == len(errors) == 6
    assert all(r.correct is None for r in errors)  # an error is never a wrong answer
    assert all("Timeout" in r.error for r in errors)


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_server_ignoring_sigterm_gets_sigkill(tmp_path):
    e = sim(tmp_path, ignore_sigterm=True, stop_timeout_s=1.0)
    e.launch()
    e.wait_ready()
    pid = e.pid
    t0 = time.monotonic()
    info = e.stop()
    assert info["how"] == "SIGKILL" and info["returncode"] == -signal.SIGKILL
    assert 1.0 <= time.monotonic() - t0 < 10
    assert wait_gone(pid) and info["leftover_pids"] == []


def test_server_busy_after_sigterm_gets_sigint_within_the_stop_timeout(tmp_path):
    """A server that waits out SIGTERM (uvicorn finishing a busy request) is sent SIGINT, its force quit, after
    the engine's interrupt_after_s, and stops on it long before stop_timeout_s would SIGKILL it."""
    e = sim(tmp_path, ignore_sigterm=True, stop_timeout_s=60.0)
    e.launch()
    e.wait_ready()
    pid = e.pid
    statuses: list[str] = []
    t0 = time.monotonic()
    info = e.proc.stop(60.0, statuses.append, interrupt_after_s=0.5)
    assert info["how"] == "SIGTERM, then SIGINT" and info["returncode"] != -signal.SIGKILL
    assert 0.5 <= time.monotonic() - t0 < 30
    assert any("SIGINT" in s for s in statuses), statuses
    assert wait_gone(pid) and info["leftover_pids"] == []


def test_interrupt_after_is_not_sent_to_a_server_that_stops_on_sigterm(tmp_path):
    e = sim(tmp_path)
    e.launch()
    e.wait_ready()
    info = e.proc.stop(60.0, interrupt_after_s=30.0)
    assert info["how"] == "SIGTERM"


def test_configured_port_taken_is_a_clear_error(tmp_path):
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        e = sim(tmp_path, port=port)
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            e.launch()
        assert e.pid is None and e.alive() == "server was not launched"


DRIVER = textwrap.dedent("""
    import sys, time
    from harness.arms.arm import ResolvedArm
    from harness.config import SimulatedEngineConfig
    from harness.engines import create_engine
    from harness.orchestrate.interrupts import Interrupts

    cfg = SimulatedEngineConfig(data=sys.argv[2], ready_timeout_s=30, stop_timeout_s=5)
    engine = create_engine(cfg, ResolvedArm(key="a", name="a"), sys.argv[1], "driver")
    with Interrupts(), engine:  # the run's SIGINT/SIGTERM handling unwinds the block, which stops the server
        engine.launch()
        engine.wait_ready()
        fp = engine.fingerprint() or {}
        print("PIDS", engine.pid, fp.get("guards", {}).get("watchdog_pid"), flush=True)
        while True:
            time.sleep(0.1)
""")


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, marks=pytest.mark.slow),  # the handler SIGTERM takes
                                 signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_no_server_outlives_the_harness(tmp_path, sig):
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), str(tmp_path), str(TEST_JSONL)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    try:
        line = b""
        deadline = time.monotonic() + PATIENCE_S
        while not line.startswith(b"PIDS") and time.monotonic() < deadline:
            r, _, _ = select.select([proc.stdout], [], [], 0.5)
            if r:
                line = proc.stdout.readline()
                if not line and proc.poll() is not None:
                    break
        assert line.startswith(b"PIDS"), f"driver did not start a server: {line!r}"
        _, server_pid, watchdog_pid = line.decode().split()
        server_pid, watchdog_pid = int(server_pid), int(watchdog_pid)
        assert pid_alive(server_pid) and pid_alive(watchdog_pid)
        os.kill(proc.pid, sig)
        proc.wait(PATIENCE_S)
        assert wait_gone(server_pid), f"server pid {server_pid} outlived the harness ({sig.name})"
        assert wait_gone(watchdog_pid), f"watchdog pid {watchdog_pid} outlived the harness ({sig.name})"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout:
            proc.stdout.close()


def test_fingerprint_written_atomically_as_json(tmp_path):
    with sim(tmp_path) as e:
        e.launch()
        e.wait_ready()
        path = Path(e.launch_spec().fingerprint_path)
        fp = json.loads(path.read_text())
        assert fp["kind"] == "abh.fingerprint" and fp["python"]["executable"]
        assert not list(path.parent.glob(".fingerprint.*"))  # no temp file left behind


def test_death_by_sigill_names_the_cause_and_the_rebuild_command(tmp_path):
    """A server built for another CPU dies of SIGILL at start (llama-cpp-python's native build on an AMX Xeon):
    the error says so in one line, with the portable rebuild command (the same as the README's)."""
    from harness.config import LlamaCppEngineConfig
    from harness.engines.llamacpp import PORTABLE_CMAKE_ARGS

    (tmp_path / "abh_sigill_server.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    cfg = LlamaCppEngineConfig(module="abh_sigill_server", model_file=str(gguf), fingerprint=False,
                               env={"PYTHONPATH": str(tmp_path)}, ready_timeout_s=30.0, poll_interval_s=0.1)
    with create_engine(cfg, ResolvedArm(key="a", name="a"), tmp_path, "a-1") as e:
        e.launch()
        with pytest.raises(EngineError) as ei:
            e.wait_ready()
    msg = str(ei.value).splitlines()[0]
    assert "killed by SIGILL (exit code -4): it executed an instruction this CPU cannot run" in msg
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in msg and "--force-reinstall" in msg


@pytest.mark.parametrize(("code", "want"), [
    (-4, "killed by SIGILL (exit code -4): it executed an instruction this CPU cannot run"),
    (132, "killed by SIGILL (exit code 132)"),  # as a shell reports it
    (-9, "killed by SIGKILL (exit code -9): usually the kernel's out-of-memory killer"),
    (-11, "killed by SIGSEGV (exit code -11): a crash in native code"),
    (-15, "killed by SIGTERM (exit code -15)"),
    (2, "exited with code 2"),
    (0, "exited with code 0"),
])
def test_exit_descriptions_name_the_signal_and_its_usual_cause(code, want):
    from harness.engines.process import describe_exit

    assert want in describe_exit(code)
    assert "rebuild" not in describe_exit(code)
    assert describe_exit(-4, "rebuild it").endswith("; rebuild it")
