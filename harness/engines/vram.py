"""Used VRAM per GPU on AMD, from ``amd-smi`` or ``rocm-smi``: what the GPU-memory release wait reads (a
container without the host's pid namespace cannot match the pids these tools report to the server's own).

* ``amd-smi metric --mem-usage --json``: a list of ``{"gpu": N, "mem_usage": {"used_vram": ...}}`` (or that
  list under ``"gpu_data"``), the value a number (MB), ``"283 MB"``, or ``{"value": 283, "unit": "MB"}``.
* ``rocm-smi --showmeminfo vram --json``: ``{"card0": {"VRAM Total Used Memory (B)": "7028736", ...}}``.
"""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

#: Bytes per unit as the tools print them (MB/GB are the binary MiB/GiB there).
_UNITS = {"B": 1, "KB": 1 << 10, "KIB": 1 << 10, "MB": 1 << 20, "MIB": 1 << 20, "GB": 1 << 30, "GIB": 1 << 30}


def run_tool(argv: list[str], timeout: float = 15.0) -> str | None:
    """A vendor tool's stdout, None when it cannot run or fails."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout if r.returncode == 0 else None


def _mib(value: Any, default_unit: str = "MB") -> float | None:
    """A memory amount as amd-smi prints it, in MiB."""
    unit = default_unit
    if isinstance(value, dict):
        unit = str(value.get("unit") or default_unit)
        value = value.get("value")
    if isinstance(value, str):
        m = re.match(r"^\s*([\d.]+)\s*([A-Za-z]*)\s*$", value)
        if not m:
            return None
        value, unit = m.group(1), m.group(2) or unit
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return None
    return amount * _UNITS.get(unit.upper(), 1 << 20) / (1 << 20)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def parse_amd_smi(text: str) -> dict[str, float]:
    """``amd-smi metric --mem-usage --json`` -> {gpu index: used MiB}."""
    data = _json(text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [data])
    used: dict[str, float] = {}
    for i, gpu in enumerate(data if isinstance(data, list) else []):
        if not isinstance(gpu, dict):
            continue
        mem = gpu.get("mem_usage") or gpu.get("memory_usage") or {}
        mib = _mib(mem.get("used_vram")) if isinstance(mem, dict) else None
        if mib is not None:
            used[str(gpu.get("gpu", i))] = mib
    return used


def parse_rocm_smi(text: str) -> dict[str, float]:
    """``rocm-smi --showmeminfo vram --json`` -> {card: used MiB}."""
    data = _json(text)
    used: dict[str, float] = {}
    for card, vals in (data.items() if isinstance(data, dict) else []):
        if not isinstance(vals, dict):
            continue
        for k, v in vals.items():
            if "used" in k.lower() and "(b)" in k.lower():
                mib = _mib(str(v), "B")
                if mib is not None:
                    used[str(card)] = mib
    return used


def amd_vram_used_mib(tool: str) -> dict[str, float]:
    """Used VRAM per GPU in MiB through ``tool`` (``amd-smi`` or ``rocm-smi``); {} when it cannot tell."""
    if tool == "amd-smi":
        out = run_tool([tool, "metric", "--mem-usage", "--json"])
        return parse_amd_smi(out) if out else {}
    if tool == "rocm-smi":
        out = run_tool([tool, "--showmeminfo", "vram", "--json"])
        return parse_rocm_smi(out) if out else {}
    return {}
