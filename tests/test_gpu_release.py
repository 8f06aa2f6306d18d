"""After a stop, the next arm waits until the GPU memory the server held is released (fake nvidia-smi)."""

from __future__ import annotations

import threading
import time

from harness.engines import gpu


def _fake_smi(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "state"
    (state / "pids").parent.mkdir(exist_ok=True)
    state.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
case "$1" in
  --query-compute-apps=*) cat {state}/pids ;;
  --query-gpu=*) cat {state}/mem ;;
esac
""")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return state


def test_waits_until_the_server_pid_leaves_the_gpu_and_memory_drops(tmp_path, monkeypatch):
    state = _fake_smi(tmp_path, monkeypatch)
    (state / "pids").write_text("4242\n")
    (state / "mem").write_text("0, 1000\n1, 1000\n")
    baseline = gpu.gpu_snapshot()
    assert baseline == {"tool": "nvidia-smi", "pids": [4242], "used_mib": {"0": 1000.0, "1": 1000.0}}
    baseline = {"tool": "nvidia-smi", "pids": [], "used_mib": {"0": 1000.0, "1": 1000.0}}
    (state / "mem").write_text("0, 80000\n1, 80000\n")

    memory_back = threading.Event()

    def release():
        time.sleep(0.5)
        (state / "pids").write_text("")
        time.sleep(0.3)
        memory_back.set()
        (state / "mem").write_text("0, 1200\n1, 1100\n")

    threading.Thread(target=release, daemon=True).start()
    notes: list[str] = []
    out = gpu.wait_gpu_release({4242}, baseline, timeout_s=20, on_status=notes.append, poll_s=0.1)
    assert out["released"] is True and out["tool"] == "nvidia-smi"
    assert memory_back.is_set() and out["waited_s"] > 0  # it waited for both: the pid gone and the memory back


def test_gives_up_after_the_timeout_and_says_why(tmp_path, monkeypatch):
    state = _fake_smi(tmp_path, monkeypatch)
    (state / "pids").write_text("4242\n")
    (state / "mem").write_text("0, 80000\n")
    notes: list[str] = []
    out = gpu.wait_gpu_release({4242}, {"used_mib": {"0": 500.0}}, timeout_s=1.0, on_status=notes.append, poll_s=0.1)
    assert out["released"] is False and out["holders"] == [4242] and out["over_mib"] == {"0": 79500.0}
    assert any("not released" in n for n in notes)


def test_no_gpu_tool_means_nothing_to_wait_for(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu.wait_gpu_release({1}, None, timeout_s=5) == {"tool": None, "released": True, "waited_s": 0.0}
