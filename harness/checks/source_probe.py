"""Source probe, run BY FILE PATH in an arm's own interpreter (stdlib only) by
:func:`harness.checks.static.probe_source`::

    python source_probe.py '{"module": "sglang.srt.layers.moe.topk", "object": "select_experts",
                             "launcher": "/path/to/harness/engines/launcher.py"}'

Reports the dotted ``object``'s source, file and first line. When the module does not import here (no GPU
libraries), it finds the file with the launcher's own lookup and reads the source from its syntax tree
(``"mode": "ast"``).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
from typing import TYPE_CHECKING, Any

MARKER = "ABH-PROBE-RESULT:"

if TYPE_CHECKING:  # for the type checker only: this file runs on whatever Python the arm has
    from typing import Literal, TypedDict

    class SourceProbeResult(TypedDict, total=False):
        """What :func:`probe` reports (see the module docstring): ``error`` says why there is no ``source``."""

        python: str
        python_version: str
        #: how the source was found: the module imported, or its file read (it does not import here)
        mode: Literal["import", "ast"]
        module_file: str | None
        error: str
        first_line: int
        object_file: str
        import_error: str
        source: str
        source_sha256: str
        sys_path_head: list[str]


def _behave_like_dash_c() -> None:
    """The working directory first on sys.path, not this file's folder (its siblings would shadow imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


def _load_launcher(path: str) -> Any:
    """The stdlib-only launcher, loaded by path, for its module lookup."""
    spec = importlib.util.spec_from_file_location("abh_launcher", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the launcher {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ast_source(path: str, dotted: str) -> tuple[str, int]:
    """(source, first line) of the dotted ``object`` in the file, read from its syntax tree, not imported."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if not dotted:
        return text, 1
    body = ast.parse(text).body
    node: Any = None
    for part in dotted.split("."):
        node = None
        for n in body:
            names: list[str] = []
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [n.name]
            elif isinstance(n, ast.Assign):
                names = [t.id for t in n.targets if isinstance(t, ast.Name)]
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                names = [n.target.id]
            if part in names:
                node = n  # the last definition wins, as at import time
        if node is None:
            raise LookupError(f"{path} has no {part!r} (looked for {dotted!r})")
        body = getattr(node, "body", [])
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    lines = text.splitlines(True)
    return "".join(lines[start - 1:node.end_lineno]), start


def probe(module: str, obj_path: str, launcher_path: str) -> SourceProbeResult:
    """What the arm's interpreter sees of ``module``.``obj_path``: see the module docstring."""
    out: SourceProbeResult = {"python": sys.executable, "python_version": sys.version.split()[0]}
    src = None
    try:
        mod = importlib.import_module(module)
        out["mode"] = "import"
        out["module_file"] = os.path.abspath(getattr(mod, "__file__", "") or "") or None
        obj: Any = mod
        try:
            for part in [p for p in obj_path.split(".") if p]:
                obj = getattr(obj, part)
        except AttributeError as e:
            out["error"] = f"object {obj_path!r} not found in module {module}: {e}"
        else:
            try:
                src = inspect.getsource(obj)
                _lines, start = inspect.getsourcelines(obj)
                out["first_line"] = start
                out["object_file"] = os.path.abspath(inspect.getsourcefile(obj) or "")
            except (OSError, TypeError) as e:
                out["error"] = f"no source for {module}.{obj_path}: {e}"
    except BaseException as e:  # noqa: BLE001 - the module does not import here (e.g. no GPU libraries): read its file
        out["import_error"] = f"{type(e).__name__}: {e}"
        path = _load_launcher(launcher_path).find_module_file(module)[0]
        out["module_file"] = path
        if path is None:
            out["error"] = (f"module {module} not found on this interpreter's sys.path "
                            f"(import failed: {out['import_error']})")
        else:
            try:
                src, start = ast_source(path, obj_path)
                out["mode"] = "ast"
                out["first_line"] = start
                out["object_file"] = path
            except (LookupError, SyntaxError, OSError, UnicodeDecodeError) as e2:
                out["error"] = f"{type(e2).__name__}: {e2}"
    if src is not None:
        out["source"] = src
        out["source_sha256"] = hashlib.sha256(src.encode()).hexdigest()
    out["sys_path_head"] = sys.path[:4]
    return out


def main(argv: list[str]) -> None:
    _behave_like_dash_c()
    req = json.loads(argv[1])
    out = probe(req["module"], req.get("object") or "", req["launcher"])
    sys.stdout.write("\n" + MARKER + json.dumps(out) + "\n")


if __name__ == "__main__":
    main(sys.argv)
