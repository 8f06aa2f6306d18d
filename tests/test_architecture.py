"""The package's layering, read from the source: no import cycles (TYPE_CHECKING and function-local imports
included), and the rooms that must not depend on one another do not."""

from __future__ import annotations

import ast
import functools
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.import_graph import cycles, forget, import_graph, outside_imports, parse

HARNESS = Path(__file__).resolve().parents[1] / "harness"


@pytest.fixture(scope="module", autouse=True)
def _forget_the_trees() -> Iterator[None]:
    """The parsed modules (~800k AST nodes) dropped when this file's tests end: held to the session's end, they
    make each of pytest's closing garbage collections walk them all (seconds of CPU per worker)."""
    yield
    for cached in (harness_graph, _nodes, _definitions):
        cached.cache_clear()
    forget()


@functools.cache
def harness_graph() -> dict[str, frozenset[str]]:
    """The package's import graph, read once per test process (parsing every module is most of these tests' cost)."""
    return {m: frozenset(deps) for m, deps in import_graph(HARNESS).items()}


def test_no_import_cycles_among_harness_modules():
    graph = harness_graph()
    assert "harness.arms.arm" in graph and "harness.engines.base" in graph  # the graph covers the package
    assert cycles(graph) == []


def test_layering():
    graph = harness_graph()
    # an arm is config turned into something launchable: it knows no engine; engines take a ResolvedArm
    assert not {m for m in graph["harness.arms.arm"] if m.startswith("harness.engines")}
    assert "harness.arms.arm" in graph["harness.engines.base"]
    # the files run by path in an arm's own interpreter use the standard library only
    assert graph["harness.checks.source_probe"] == set() and graph["harness.engines.launcher"] == set()
    # one owner each: dotted-key matching and command formatting
    assert "harness.util.keys" in graph["harness.checks.armdiff"] and "harness.util.keys" in graph["harness.orchestrate.rundir"]
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


# ------------------------------------------------------------------------------------------ the plan of the house
def _tree(path: Path) -> ast.Module:
    return parse(path)  # the import graph's parse: each module parsed once for every test of the file


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_tree(path)))


def _modules() -> list[Path]:
    return sorted(p for p in HARNESS.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_ground_floor_holds_at_most_six_modules():
    ground = sorted(p.name for p in HARNESS.glob("*.py"))
    assert len(ground) <= 6, ground
    folders = sorted(p.name for p in HARNESS.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert {"cli", "arms", "checks", "serving", "measure", "results", "analysis", "orchestrate", "stats", "util"} <= set(folders)


def test_no_two_modules_share_a_file_stem():
    stems: dict[str, list[str]] = {}
    for p in _modules():
        if p.stem not in ("__init__", "__main__"):
            stems.setdefault(p.stem, []).append(str(p.relative_to(HARNESS)))
    shared = {k: v for k, v in stems.items() if len(v) > 1}
    assert not shared, shared
    # a module named like a package is the command of that package's output only (`abh report` writes the report)
    packages = {p.parent.name for p in HARNESS.rglob("__init__.py")} - {"harness"}
    assert packages & set(stems) <= {"report"}, packages & set(stems)


# ------------------------------------------------------------------------------------------ one owner per fact
OWNERS = {  # enumeration -> the one module that spells it out
    ("superiority", "noninferiority", "equivalence"): "stats/verdict.py",
    ("obf", "pocock"): "stats/group_sequential.py",
    ("regressed", "not-noninferior", "any-difference"): "analysis/gate.py",
    # the recipes of each task: spelled out by the task's own module (the registry and the command lines read them)
    ("sglang", "sglang_8shot", "heldout", "simple_eval", "vllm", "lm_eval_strict", "lm_eval_flexible",
     "sgl_eval_chat"): "tasks/gsm8k.py",
    ("sglang", "simple_evals"): "tasks/mmlu.py",
}


def _literal_sequences(path: Path):
    import ast

    for node in _nodes(path):
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            yield node.lineno, frozenset(e.value for e in node.elts)  # type: ignore[attr-defined]


def test_every_enumeration_is_spelled_out_once():
    found: dict[tuple[str, ...], list[str]] = {k: [] for k in OWNERS}
    for p in _modules():
        for line, values in _literal_sequences(p):
            for enum in OWNERS:
                if values == frozenset(enum):
                    found[enum].append(f"{p.relative_to(HARNESS)}:{line}")
    for enum, where in found.items():
        assert [w.split(":")[0] for w in where] == [OWNERS[enum]], (enum, where)


def _code_numbers(path: Path, value: float) -> list[int]:
    import ast

    return [n.lineno for n in _nodes(path)
            if isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.value == value]


def test_each_default_has_one_owner():
    owners = {  # value -> (the modules allowed to spell it, why)
        1319: {"tasks/gsm8k.py", "serving/settings.py"},  # the test set's size; SGLang's default parallel
    }
    for value, allowed in owners.items():
        where = {str(p.relative_to(HARNESS)) for p in _modules() if _code_numbers(p, value)}
        assert where <= allowed, (value, where - allowed)
    text = {str(p.relative_to(HARNESS)): p.read_text(encoding="utf-8") for p in _modules()}
    for name, owner in (("DEFAULT_MAX_ERROR_RATE =", "stats/verdict.py"), ("DEFAULT_TOP_K =", "serving/wire.py"),
                        ("DEFAULT_PARALLEL =", "serving/settings.py"), ("CANONICAL_TEST_ROWS =", "tasks/gsm8k.py")):
        assert [f for f, t in text.items() if name in t] == [owner], name


def test_each_rule_has_one_owner():
    import ast

    defs: dict[str, list[str]] = {}  # module-level functions (a method may hand on to its module's owner)
    for p in _modules():
        for node in _tree(p).body:
            if isinstance(node, ast.FunctionDef):
                defs.setdefault(node.name, []).append(str(p.relative_to(HARNESS)))
    # the eval-directory reader, ψ within an arm, the sign-flip test, "p at its floor", the resume rule
    assert defs["load_scored"] == ["results/eval_store.py"]
    assert defs["within_arm_psi"] == ["stats/accuracy.py"]
    assert sorted(n for n in defs if "sign" in n and "flip" in n) == ["signflip_test", "signflip_weighted"]
    assert defs["signflip_test"] == defs["signflip_weighted"] == ["stats/signflip.py"]
    assert defs["at_floor"] == ["stats/verdict.py"]
    assert defs["eval_done"] == ["results/eval_store.py"]
    text = {str(p.relative_to(HARNESS)): p.read_text(encoding="utf-8") for p in _modules()}
    assert [f for f, t in text.items() if "(1 + 1e-9)" in t] == ["stats/verdict.py"]  # the floor's tolerance
    assert [f for f, t in text.items() if "correct else 0.0" in t] == ["results/eval_store.py"]  # 0/1 scores
    graph = harness_graph()
    for user in ("harness.cli.ab", "harness.orchestrate.pipeline"):
        assert "harness.results.eval_store" in graph[user], user  # both resume by eval_done
    assert "harness.orchestrate.pipeline" in graph["harness.cli.ab"]  # abh ab is a run of the pipeline


def test_results_are_typed_records_with_one_serialisation():
    from harness.results import schema
    from harness.results.records import Record

    for cls in (schema.Comparison, schema.Divergence, schema.Cost, schema.SequentialRecord, schema.RunSummary,
                schema.SweepSummary):
        assert issubclass(cls, Record) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    text = (HARNESS / "results" / "schema.py").read_text(encoding="utf-8")
    assert "typeddict-item" not in "".join(p.read_text(encoding="utf-8") for p in _modules())
    assert text.count("def dump_record(") == 1 and "def to_doc(" in (HARNESS / "results" / "records.py").read_text()


def test_the_architecture_page_draws_the_import_graph_as_it_is():
    import re
    from functools import cache

    graph = harness_graph()

    def room(m: str) -> str:
        parts = m.split(".")
        return "harness" if len(parts) == 1 else parts[1]

    edges: dict[str, set[str]] = {}
    for a, bs in graph.items():
        for b in bs:
            if room(a) != room(b) and room(b) != "harness":
                edges.setdefault(room(a), set()).add(room(b))

    @cache
    def floor(r: str) -> int:
        return 1 + max((floor(x) for x in edges.get(r, ())), default=0)

    rooms = {room(m) for m in graph} - {"harness"}
    page = (HARNESS.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page[page.index("## Architecture"):page.index("## Layout")]
    drawn: dict[str, int] = {}
    for f, cell in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, re.M):
        for name in re.findall(r"`([\w.]+?)(?:/|\.py)?`", cell):
            drawn[name] = int(f)
    assert drawn == {r: floor(r) for r in rooms}


# ------------------------------------------------------------------------------------------ the config's door
def _floors() -> dict[str, int]:
    page = (HARNESS.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page[page.index("## Architecture"):page.index("## Layout")]
    import re

    return {name: int(f) for f, cell in re.findall(r"^\| (\d+) \| ([^|]+) \|", section, re.M)
            for name in re.findall(r"`([\w.]+?)(?:/|\.py)?`", cell)}


def test_nothing_below_orchestrate_imports_omegaconf_or_hydra():
    """The config is typed objects from the door on: only the commands (and the Hydra callbacks) see the composed
    tree; orchestrate and every room below it take harness.config's dataclasses."""
    floors, imports = _floors(), outside_imports(HARNESS)
    assert floors["orchestrate"] > floors["config"]
    below = {m: names & {"omegaconf", "hydra"} for m, names in imports.items()
             if not m.startswith(("harness.cli", "harness.orchestrate"))}
    assert {m: n for m, n in below.items() if n} == {}
    assert {m for m, names in imports.items() if "omegaconf" in names or "hydra" in names} >= {"harness.cli.compose"}
    orchestrate = {m for m, names in imports.items() if m.startswith("harness.orchestrate") and "omegaconf" in names}
    assert orchestrate == set(), orchestrate


def test_only_results_arrow_imports_pyarrow():
    """pyarrow comes in through one door, harness.results.arrow, which points its memory pool at the C heap the
    rest of the process uses (a module importing pyarrow itself could allocate from pyarrow's own pool first)."""
    imports = outside_imports(HARNESS)
    assert {m for m, names in imports.items() if "pyarrow" in names} == {"harness.results.arrow"}


def test_harness_config_imports_no_http_client_nor_hydra():
    import subprocess
    import sys

    code = ("import sys, harness.config; "
            "print(sorted(m for m in ('aiohttp', 'omegaconf', 'hydra', 'requests') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       cwd=HARNESS.parent)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


def test_each_setting_default_is_declared_once():
    """A config key's default is written on its schema field (harness/config.py, harness/serving/settings.py),
    once: no file of configs/ restates it (an experiment sets what it changes; a group file names its task)."""
    import dataclasses

    import yaml

    import harness.config as hc

    schemas: dict[str, type] = {"stats": hc.StatsConfig, "divergence": hc.DivergenceConfig, "task": hc.TaskSpec}
    restated = []
    for path in sorted((HARNESS.parent / "configs").rglob("*.yaml")):
        group = path.parent.name
        schema = hc.ENGINE_SCHEMAS.get(path.stem) if group == "engine" else schemas.get(group)
        if schema is None:
            continue
        doc, default = yaml.safe_load(path.read_text(encoding="utf-8")) or {}, schema()
        names = {f.name for f in dataclasses.fields(schema)}
        restated += [f"{path.name}:{k}" for k, v in doc.items()
                     if k in names and k != "name" and getattr(default, k) == v]
    assert restated == []
    # the values shared with the rooms below config (the wire's top_k, the client's parallel) are named once
    text = {str(p.relative_to(HARNESS)): p.read_text(encoding="utf-8") for p in _modules()}
    for name in ("DEFAULT_TOP_K =", "SCORING_PARALLEL =", "DEFAULT_PARALLEL =", "DEFAULT_MIN_SCORED_SHARE ="):
        assert len([f for f, t in text.items() if name in t]) == 1, name


def test_every_range_is_declared_on_its_field_once():
    """The ranges of the config's numbers are on the fields (harness.util.ranges.ranged); no table of ranges keyed
    by config key is kept beside them, and the commands read the same fields."""
    import harness.config as hc
    from harness.serving.settings import ClientSettings
    from harness.util.ranges import Range, range_of

    assert range_of(hc.DivergenceConfig, "top_k") == Range(1, whole=True)
    assert range_of(ClientSettings, "parallel") == Range(1, whole=True)
    text = {str(p.relative_to(HARNESS)): p.read_text(encoding="utf-8") for p in _modules()}
    assert [f for f, t in text.items() if "RANGES" in t] == []
    for cli in ("cli/ab.py", "cli/eval.py"):  # the client's flags are checked by ClientSettings' own ranges
        assert "parallel >= 1" not in text[cli] and "a.parallel < 1" not in text[cli]


# ------------------------------------------------------------------------------------------ rooms kept small and apart
def test_stats_imports_nothing_from_results():
    """The statistics return their own types (stats/outcomes.py holds the stored ones); results stores them."""
    graph = harness_graph()
    stats = {m: deps for m, deps in graph.items() if m.startswith("harness.stats")}
    assert "harness.stats.outcomes" in stats and "harness.stats.outcomes" in graph["harness.results.schema"]
    assert {m: sorted(d for d in deps if d.startswith("harness.results")) for m, deps in stats.items()
            if any(d.startswith("harness.results") for d in deps)} == {}


def test_no_comment_says_which_issue():
    """Comments and docstrings say why, never which issue or which rule was "today's"."""
    import re

    pattern = re.compile(r"issue #?\d+|today's rule", re.I)
    found = [f"{p.relative_to(HARNESS)}:{i}" for p in _modules()
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert found == []


@functools.cache
def _definitions() -> tuple[tuple[str, ast.AST], ...]:
    """(module, node) of every class and function of the package (each module's name made once, not per node)."""
    kinds = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
    return tuple((rel, node) for p in _modules() for rel in [str(p.relative_to(HARNESS))] for node in _nodes(p)
                 if isinstance(node, kinds))


def test_no_class_name_is_defined_twice():
    """A class name means one thing across the package (a TypedDict's and a dataclass's alike)."""
    where: dict[str, list[str]] = {}
    for path, node in _definitions():
        if isinstance(node, ast.ClassDef):
            where.setdefault(node.name, []).append(path)
    assert len(where) > 100 and "Comparison" in where  # the walk sees the package's classes
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_no_function_is_longer_than_100_lines():
    long = {f"{path}:{node.name}": node.end_lineno - node.lineno + 1 for path, node in _definitions()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > 100}
    assert long == {}
