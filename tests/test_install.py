"""The install contract: .ci/run runs exactly the README's install and test commands, from requirements.lock, with
the portable llama.cpp build the engine's SIGILL message recommends, and the dev tools pinned exactly."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from harness.engines.llamacpp import PORTABLE_CMAKE_ARGS, REBUILD_COMMAND

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()
LOCK = (ROOT / "requirements.lock").read_text()
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def commands(text: str) -> list[str]:
    """Shell commands (continuation lines joined, comments dropped) of a script or of a README's bash blocks."""
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S) if "```" in text else [text]
    out = []
    for block in blocks:
        for cmd in re.sub(r"\\\n\s*", "", block).splitlines():
            cmd = cmd.split(" #", 1)[0].strip()
            if cmd and not cmd.startswith("#"):
                out.append(cmd)
    return out


#: The README's sections that hold its install and test commands (the quick start's also show abh at work).
SETUP_SECTIONS = ("## Quick start", "## Tests")


def setup_section() -> str:
    out = []
    for title in SETUP_SECTIONS:
        start = README.index(f"\n{title}\n")
        out.append(README[start:README.index("\n## ", start + 1)])
    return "".join(out)


def is_usage(cmd: str) -> bool:
    """A quick-start command that uses abh (``abh run``, ``abh ab``, copying an experiment), not one that installs
    or tests it."""
    return cmd.split()[0] in ("abh", "cp")


def locked() -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)==(\S+)", LOCK, re.M)}


def test_ci_runs_exactly_the_readme_install_and_test_commands():
    readme = [c for c in commands(setup_section()) if not is_usage(c)]
    assert "abh run" in commands(setup_section())  # the quick start runs the demo
    ci = commands(CI)
    # venv, fast install, full install, lint+types, default tests, slow tests, the slow tests' vLLM/SGLang venvs
    assert len(readme) == 7
    for cmd in readme:
        assert cmd in ci, f"README command not run by .ci/run: {cmd}"
    installs = [c for c in readme if "pip install" in c]
    assert installs and all("-c requirements.lock" in c for c in installs if "--no-deps" not in c.split("&&")[0])
    assert 'CI=true' in CI and "scripts/check_lock.py" in CI


def test_the_portable_build_flags_have_one_value():
    readme_flags = re.findall(r'CMAKE_ARGS="([^"]+)"', setup_section())
    ci_flags = re.findall(r'CMAKE_ARGS="([^"]+)"', CI)
    assert readme_flags == [PORTABLE_CMAKE_ARGS] and ci_flags == [PORTABLE_CMAKE_ARGS]
    assert "-DGGML_NATIVE=OFF" in PORTABLE_CMAKE_ARGS and "-DGGML_AVX512=OFF" in PORTABLE_CMAKE_ARGS
    assert PORTABLE_CMAKE_ARGS in REBUILD_COMMAND and "--no-cache-dir" in REBUILD_COMMAND


def test_dev_tools_are_pinned_exactly_and_as_the_lock_pins_them():
    pins = locked()
    dev = PYPROJECT["project"]["optional-dependencies"]["dev"]
    for tool in ("pytest", "pytest-timeout", "pytest-xdist", "ruff", "mypy"):
        spec = next(d for d in dev if re.match(rf"{tool}\b(?!-)", d))
        assert spec == f"{tool}=={pins[tool]}", spec
    assert PYPROJECT["project"]["optional-dependencies"]["cpu"] == [
        f"llama-cpp-python[server]=={pins['llama-cpp-python']}"]


def test_every_dependency_is_in_the_lock():
    pins = locked()
    deps = [*PYPROJECT["project"]["dependencies"],
            *(d for extra in ("dev", "cpu", "hf") for d in PYPROJECT["project"]["optional-dependencies"][extra])]
    for dep in deps:
        name = re.match(r"[A-Za-z0-9][\w.-]*", dep).group(0).lower()  # type: ignore[union-attr]
        assert name in pins, f"{name} is not pinned in requirements.lock (run scripts/lock.sh)"
    assert any(d.startswith("orjson") for d in PYPROJECT["project"]["dependencies"])  # bench_json.py decided it
    assert not any(d.startswith("datasets") for d in PYPROJECT["project"]["dependencies"])  # the hf extra
