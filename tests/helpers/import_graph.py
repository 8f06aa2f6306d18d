"""The import graph of a package, read from its source (no module is imported): every ``import`` counts,
module-level, function-local and under ``if TYPE_CHECKING:`` alike, since each is a dependency a reader must
follow. Run as a script to print the graph and its cycles::

    python tests/helpers/import_graph.py [PACKAGE_DIR]
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path


def parse(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once per version of the file (the graph and the outside imports read the
    same ~150 modules: parsing them is most of what the architecture tests cost)."""
    st = path.stat()
    return _parse(path.resolve(), st.st_mtime_ns, st.st_size)


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def forget() -> None:
    """Drop the parsed modules (a test file done with them: the session's closing collections would walk them)."""
    _parse.cache_clear()


def module_names(package_dir: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` of every ``.py`` file under ``package_dir`` (a package ``__init__.py``
    is the package's own name)."""
    package_dir = package_dir.resolve()
    root = package_dir.parent
    out: dict[str, Path] = {}
    for f in sorted(package_dir.rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _imported(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement may refer to, most specific first per name."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        return [f"{target}.{a.name}" for a in node.names] + [target]
    return []


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """``{module: modules of the same package it imports}``."""
    modules = module_names(package_dir)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(parse(path)):
            names = _imported(node, mod, path.name == "__init__.py")
            if isinstance(node, ast.ImportFrom):
                # `from pkg import sub` imports the submodule when there is one, else a name of pkg itself
                subs = [n for n in names[:-1] if n in modules]
                graph[mod].update(subs)
                if len(subs) < len(names) - 1 and names[-1] in modules:
                    graph[mod].add(names[-1])
            else:
                for n in names:  # `import a.b.c` depends on the deepest module of the package it names
                    parts = n.split(".")
                    found = next((".".join(parts[:k]) for k in range(len(parts), 0, -1)
                                  if ".".join(parts[:k]) in modules), None)
                    if found:
                        graph[mod].add(found)
        graph[mod].discard(mod)
    return graph


def outside_imports(package_dir: Path) -> dict[str, set[str]]:
    """``{module: top-level names of the packages outside ``package_dir`` it imports}`` (``omegaconf``,
    ``aiohttp``, ``os`` ...), read the same way as :func:`import_graph`; relative imports are the package's own."""
    modules = module_names(package_dir)
    own = package_dir.resolve().name
    out: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            out[mod].update(n.split(".")[0] for n in names if n.split(".")[0] != own)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


if __name__ == "__main__":
    pkg = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "harness"
    g = import_graph(pkg)
    for m in sorted(g):
        print(f"{m} -> {', '.join(sorted(g[m])) or '-'}")
    found = cycles(g)
    print(f"\n{len(found)} cycle(s)" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    sys.exit(1 if found else 0)
