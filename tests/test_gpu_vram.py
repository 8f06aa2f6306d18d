"""On AMD the GPU-memory release wait reads VRAM (fake ``amd-smi`` / ``rocm-smi`` on PATH): in a container
without the host's pid namespace the tools' pids never match the server's, so only the memory tells."""

from __future__ import annotations

import json
import threading
import time

import pytest

from harness.engines import process
from harness.engines.vram import amd_vram_used_mib, parse_amd_smi, parse_rocm_smi

AMD_SMI = """#!/bin/sh
case "$1" in
  process) cat {state}/procs ;;
  metric) cat {state}/mem ;;
  *) exit 1 ;;
esac
"""
ROCM_SMI = """#!/bin/sh
case "$*" in
  --showpids) cat {state}/procs ;;
  "--showmeminfo vram --json") cat {state}/mem ;;
  *) exit 1 ;;
esac
"""


def fake_tool(tmp_path, monkeypatch, name: str, script: str):
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    tool = bin_dir / name
    tool.write_text(script.format(state=state))
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return state


def amd_mem(*used_mb: float, style: str = "dict") -> str:
    def val(v: float):
        return {"dict": {"value": v, "unit": "MB"}, "str": f"{v:g} MB", "num": v}[style]
    return json.dumps([{"gpu": i, "mem_usage": {"total_vram": val(196592), "used_vram": val(u)}}
                       for i, u in enumerate(used_mb)])


def rocm_mem(*used_bytes: int) -> str:
    return json.dumps({f"card{i}": {"VRAM Total Memory (B)": str(206158430208), "VRAM Total Used Memory (B)": str(u)}
                       for i, u in enumerate(used_bytes)})


def test_amd_smi_formats():
    for style in ("dict", "str", "num"):
        assert parse_amd_smi(amd_mem(283, 1024, style=style)) == {"0": 283.0, "1": 1024.0}
    wrapped = json.dumps({"gpu_data": json.loads(amd_mem(10))})
    assert parse_amd_smi(wrapped) == {"0": 10.0}
    gib = json.dumps([{"gpu": 3, "mem_usage": {"used_vram": {"value": 2, "unit": "GB"}}}])
    assert parse_amd_smi(gib) == {"3": 2048.0}
    assert parse_amd_smi("not json") == {} and parse_amd_smi(json.dumps([{"gpu": 0}])) == {}


def test_rocm_smi_format():
    assert parse_rocm_smi(rocm_mem(7028736, 1 << 30)) == {"card0": 7028736 / (1 << 20), "card1": 1024.0}
    assert parse_rocm_smi("{}") == {} and parse_rocm_smi("garbage") == {}


@pytest.mark.parametrize("tool", ["amd-smi", "rocm-smi"])
def test_snapshot_reads_vram(tmp_path, monkeypatch, tool):
    state = fake_tool(tmp_path, monkeypatch, tool, AMD_SMI if tool == "amd-smi" else ROCM_SMI)
    (state / "procs").write_text("")
    (state / "mem").write_text(amd_mem(100, 200) if tool == "amd-smi" else rocm_mem(100 << 20, 200 << 20))
    snap = process.gpu_snapshot()
    assert snap["tool"] == tool and snap["pids"] == []
    assert sorted(snap["used_mib"].values()) == [100.0, 200.0]
    assert amd_vram_used_mib(tool) == snap["used_mib"]


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
@pytest.mark.parametrize("tool", ["amd-smi", pytest.param("rocm-smi", marks=pytest.mark.slow)])  # the tool's parse: above
def test_release_waits_for_vram_when_no_pid_is_visible(tmp_path, monkeypatch, tool):
    """The container case: the tool lists no pid we know, yet the memory is still held."""
    state = fake_tool(tmp_path, monkeypatch, tool, AMD_SMI if tool == "amd-smi" else ROCM_SMI)
    mem = (lambda *mb: amd_mem(*mb)) if tool == "amd-smi" else (lambda *mb: rocm_mem(*(int(m) << 20 for m in mb)))
    (state / "procs").write_text("")
    (state / "mem").write_text(mem(500, 500))
    baseline = process.gpu_snapshot()
    (state / "mem").write_text(mem(180000, 180000))  # the stopped server's memory, not yet released

    memory_back = threading.Event()

    def release():
        time.sleep(0.6)
        memory_back.set()
        (state / "mem").write_text(mem(600, 550))

    threading.Thread(target=release, daemon=True).start()
    out = process.wait_gpu_release({4242}, baseline, timeout_s=20, poll_s=0.1)
    assert out["released"] is True and out["tool"] == tool and memory_back.is_set() and out["waited_s"] > 0
    # and when it never comes back, the wait says so
    (state / "mem").write_text(mem(180000, 500))
    notes: list[str] = []
    out = process.wait_gpu_release({4242}, baseline, timeout_s=1.0, on_status=notes.append, poll_s=0.1)
    assert out["released"] is False and out["holders"] == [] and list(out["over_mib"].values()) == [179500.0]
    assert any("not released" in n for n in notes)
