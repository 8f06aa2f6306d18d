"""GPUs, through whichever vendor tool exists (``nvidia-smi``, ``amd-smi``, ``rocm-smi``): the inventory a run
records, and the snapshot taken before a server starts that :func:`wait_gpu_release` compares with after a
stop, so the next arm does not start on a full GPU."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from typing import TypedDict

from harness.engines.vram import amd_vram_used_mib, run_tool

StatusFn = Callable[[str], None]


class GpuSnapshot(TypedDict):
    """Which processes hold a GPU, and the memory each GPU uses (MiB, by the tool's GPU index)."""

    tool: str | None
    pids: list[int]
    used_mib: dict[str, float]


class GpuRelease(TypedDict, total=False):
    """How the GPUs came back after a stop (the stop record's ``gpu``): ``holders`` and ``over_mib`` when they
    did not within the timeout."""

    tool: str | None
    released: bool
    waited_s: float
    #: the server's pids still on a GPU
    holders: list[int]
    #: MiB above the pre-launch level, per GPU
    over_mib: dict[str, float]


TOOLS = ("nvidia-smi", "amd-smi", "rocm-smi")


def gpu_tool() -> str | None:
    """The first vendor tool on PATH, or None."""
    return next((tool for tool in TOOLS if shutil.which(tool)), None)


def gpu_inventory() -> list[dict[str, str]] | None:
    """The GPUs of this machine: ``[{"name", "driver", "memory"}]`` (nvidia-smi) or the tool's raw report
    (AMD); None without a tool or when it fails."""
    tool = gpu_tool()
    if tool is None:
        return None
    if tool == "nvidia-smi":
        out = run_tool([tool, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                       timeout=20)
        if out is None:
            return None
        return [dict(zip(("name", "driver", "memory"), (x.strip() for x in line.split(",")), strict=False))
                for line in out.splitlines() if line.strip()]
    amd = ["static", "--asic", "--driver"] if "amd" in tool else ["--showproductname", "--showdriverversion"]
    out = run_tool([tool, *amd], timeout=20)
    return None if out is None else [{"tool": tool, "report": out[-4000:]}]


def gpu_snapshot() -> GpuSnapshot | None:
    """GPU processes and used memory per GPU (MiB), from whichever vendor tool exists; None without one."""
    tool = gpu_tool()
    if tool is None:
        return None
    pids: set[int] = set()
    used: dict[str, float] = {}
    if tool == "nvidia-smi":
        out = run_tool([tool, "--query-compute-apps=pid", "--format=csv,noheader,nounits"])
        pids = {int(x) for x in re.findall(r"^\s*(\d+)", out or "", re.M)}
        out = run_tool([tool, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"])
        for m in re.finditer(r"^\s*(\d+)\s*,\s*([\d.]+)", out or "", re.M):
            used[m.group(1)] = float(m.group(2))
    elif tool == "amd-smi":
        out = run_tool([tool, "process", "--json"])
        pids = {int(x) for x in re.findall(r'"pid"\s*:\s*(\d+)', out or "")}
        used = amd_vram_used_mib(tool)  # VRAM, not only pids: a container may not see the host's pids
    else:  # rocm-smi
        out = run_tool([tool, "--showpids"])
        pids = {int(x) for x in re.findall(r"^\s*(\d+)\s+\S", out or "", re.M)}
        used = amd_vram_used_mib(tool)
    return {"tool": tool, "pids": sorted(pids), "used_mib": used}


def wait_gpu_release(server_pids: set[int], baseline: GpuSnapshot | None, timeout_s: float,
                     on_status: StatusFn | None = None, slack_mib: float = 1024.0,
                     poll_s: float = 1.0) -> GpuRelease:
    """Wait until no server pid holds a GPU and used memory is back near its pre-launch level."""
    t0 = time.monotonic()
    snap = gpu_snapshot()
    if snap is None:
        return {"tool": None, "released": True, "waited_s": 0.0}
    last_note = 0.0
    while True:
        holders = sorted(set(snap["pids"]) & server_pids)
        over: dict[str, float] = {}
        if baseline and baseline.get("used_mib"):
            for gpu, mib in snap["used_mib"].items():
                base = baseline["used_mib"].get(gpu)
                if base is not None and mib > base + slack_mib:
                    over[gpu] = mib - base
        waited = time.monotonic() - t0
        if not holders and not over:
            return {"tool": snap["tool"], "released": True, "waited_s": waited}
        if waited >= timeout_s:
            if on_status:
                on_status(f"GPU memory not released after {timeout_s:.0f} s ({snap['tool']}): "
                          f"server pids still on a GPU {holders}, MiB above the pre-launch level {over}")
            return {"tool": snap["tool"], "released": False, "waited_s": waited, "holders": holders,
                    "over_mib": over}
        if on_status and time.monotonic() - last_note > 10:
            last_note = time.monotonic()
            on_status(f"waiting for the GPU memory of the stopped server to be released ({snap['tool']}: "
                      f"pids {holders}, MiB above baseline {over}; {waited:.0f}/{timeout_s:.0f} s)")
        time.sleep(poll_s)
        snap = gpu_snapshot() or {"tool": None, "pids": [], "used_mib": {}}
