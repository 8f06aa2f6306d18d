"""The package's layering, read from the source: no import cycles (TYPE_CHECKING and function-local imports
included), and the rooms that must not depend on one another do not."""

from __future__ import annotations

import textwrap
from pathlib import Path

from helpers.import_graph import cycles, import_graph

HARNESS = Path(__file__).resolve().parents[1] / "harness"


def test_no_import_cycles_among_harness_modules():
    graph = import_graph(HARNESS)
    assert "harness.arms.arm" in graph and "harness.engines.base" in graph  # the graph covers the package
    assert cycles(graph) == []


def test_layering():
    graph = import_graph(HARNESS)
    # an arm is config turned into something launchable: it knows no engine; engines take a ResolvedArm
    assert not {m for m in graph["harness.arms.arm"] if m.startswith("harness.engines")}
    assert "harness.arms.arm" in graph["harness.engines.base"]
    # the files run by path in an arm's own interpreter use the standard library only
    assert graph["harness.arms.checks.source_probe"] == set() and graph["harness.engines.launcher"] == set()
    # one owner each: dotted-key matching and command formatting
    assert "harness.util.keys" in graph["harness.arms.armdiff"] and "harness.util.keys" in graph["harness.orchestrate.rundir"]
    assert "harness.util.cmdline" in graph["harness.engines.base"] and "harness.util.cmdline" in graph["harness.report.data"]


def test_the_graph_sees_type_checking_relative_and_local_imports(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.b import B\n",
        "sub/__init__.py": "from . import b\n",
        "sub/b.py": "def f():\n    from ..c import g\n    return g\n",
        "c.py": "import pkg.a\nimport os\n",
        "d.py": "from pkg import c, nothing_here\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    graph = import_graph(pkg)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.sub.b"}, "pkg.sub": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.c"},
                     "pkg.c": {"pkg.a"}, "pkg.d": {"pkg", "pkg.c"}}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
