"""The benchmarks and scripts are not imported by the test run, nor are the slow tests' helpers by the default
run: each name they import from abh's packages must still exist (a module that moved broke
``benchmarks/bench_json.py`` at import, unseen), and the test helpers import nothing relatively (a helper moved
out of harness.stats kept ``from .accuracy import``, which failed only in the slow suite)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> list[tuple[str, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.split(".")[0] in ("harness", "abh_simulator")):
            out += [(node.module, a.name) for a in node.names if a.name != "*"]
    return out


def _resolves(module: str, name: str) -> bool:
    m = importlib.import_module(module)
    if hasattr(m, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return False
    return True


def test_every_name_the_benchmarks_and_scripts_import_from_abh_exists() -> None:
    files = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "scripts").rglob("*.py"))
    assert len(files) > 10
    missing = [f"{f.relative_to(ROOT)}: from {m} import {n}" for f in files for m, n in _imports(f)
               if not _resolves(m, n)]
    assert missing == []


def test_the_test_helpers_import_nothing_relatively() -> None:
    relative = [f"{f.relative_to(ROOT)}:{node.lineno}" for f in sorted((ROOT / "tests").rglob("*.py"))
                for node in ast.walk(ast.parse(f.read_text())) if isinstance(node, ast.ImportFrom) and node.level]
    assert relative == []
