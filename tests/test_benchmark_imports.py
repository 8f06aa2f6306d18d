"""The benchmarks and scripts are not imported by the test run: each name they import from abh's packages must
still exist (a module that moved broke ``benchmarks/bench_json.py`` at import, unseen)."""

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
