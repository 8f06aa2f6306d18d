"""Server-flags probe, run BY FILE PATH in an arm's own interpreter (stdlib only) by
:func:`harness.engines.preflight.parse_server_flags`::

    python args_probe.py '{"module": "sglang.srt.server_args", "argv": ["--model-path", "M", ...]}'

Parses ``argv`` with that SGLang's own parser, without starting anything, and reports what argparse refuses,
deprecated flags, flags argparse only took as the abbreviation of another (a renamed flag can slide into
another so), flags that parse into no ``ServerArgs`` field, and every warning printed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import json
import logging
import os
import re
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any, NoReturn

MARKER = "ABH-ARGS-RESULT:"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _behave_like_dash_c() -> None:
    """The working directory first on sys.path, not this file's folder (its siblings would shadow imports)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or os.curdir) == here:
        sys.path[0] = ""


if TYPE_CHECKING:  # for the type checker only: this file runs on whatever Python the arm has
    from typing import TypedDict

    class DeprecatedFlag(TypedDict):
        flag: str
        #: the warning the parser logged for it, else the flag's help
        message: str

    #: a flag argparse took as the abbreviation of the option ``as`` (a keyword: the functional form)
    AbbreviatedFlag = TypedDict("AbbreviatedFlag", {"flag": str, "as": str})

    class IgnoredFlag(TypedDict):
        flag: str
        #: the name it parses into, which ``ServerArgs`` has no field for
        dest: str

    class ArgsProbeResult(TypedDict, total=False):
        """What :func:`parse` reports; ``import_error`` instead of the rest when the module cannot import."""

        module: str
        error: str | None
        deprecated: list[DeprecatedFlag]
        abbreviated: list[AbbreviatedFlag]
        ignored: list[IgnoredFlag]
        messages: list[str]
        import_error: str
        import_s: float
        module_file: str | None
        version: str | None


class _Refused(Exception):
    pass


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(_ANSI.sub("", record.getMessage()).strip())


def _fields(cls: Any) -> set[str] | None:
    """The field names of ``ServerArgs`` (a dataclass in older SGLang, a msgspec Struct in newer)."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    names = getattr(cls, "__struct_fields__", None)
    return set(names) if names else None


def parse(module_name: str, argv: list[str]) -> ArgsProbeResult:
    out: ArgsProbeResult = {"module": module_name, "error": None, "deprecated": [], "abbreviated": [],
                            "ignored": [], "messages": []}
    t0 = time.monotonic()
    try:
        module = importlib.import_module(module_name)
        server_args = module.ServerArgs
    except BaseException as e:  # noqa: BLE001 - any failure to import is the report
        out["import_error"] = f"{type(e).__name__}: {e}"
        return out
    out["import_s"] = round(time.monotonic() - t0, 2)
    out["module_file"] = getattr(module, "__file__", None)
    try:
        out["version"] = importlib.import_module(module_name.split(".")[0]).__version__
    except (ImportError, AttributeError):
        out["version"] = None
    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args.add_cli_args(parser)

    def refuse(message: str) -> NoReturn:
        raise _Refused(message)

    parser.error = refuse  # type: ignore[method-assign]
    actions = {opt: a for a in parser._actions for opt in a.option_strings}
    handler, printed = _Collect(), io.StringIO()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    ns = None
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(printed), \
                contextlib.redirect_stderr(printed):
            warnings.simplefilter("always")
            ns = parser.parse_args(argv)
    except _Refused as e:
        out["error"] = str(e)
    except SystemExit as e:  # an action that exits by itself
        out["error"] = _ANSI.sub("", printed.getvalue()).strip() or f"the parser exited ({e.code})"
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    out["messages"] = handler.lines + [_ANSI.sub("", str(w.message)).strip() for w in caught] + [
        ln.strip() for ln in _ANSI.sub("", printed.getvalue()).splitlines() if ln.strip()]
    fields = _fields(server_args)
    for tok in argv:
        if not tok.startswith("--"):
            continue
        flag = tok.split("=", 1)[0]
        action = actions.get(flag)
        if action is None:
            matches = sorted(o for o in actions if o.startswith(flag))
            if len(matches) == 1:
                out["abbreviated"].append({"flag": flag, "as": matches[0]})
                action = actions[matches[0]]
            else:
                continue  # unknown or ambiguous: the error above says so
        help_text = action.help if isinstance(action.help, str) else ""
        if type(action).__name__.startswith("Deprecated") or "deprecated" in help_text[:60].lower():
            said = [m for m in out["messages"] if flag in m]
            out["deprecated"].append({"flag": flag, "message": said[0] if said else help_text})
        if ns is not None and fields is not None and action.dest not in (*fields, "help", "config"):
            out["ignored"].append({"flag": flag, "dest": action.dest})
    return out


def main() -> None:
    _behave_like_dash_c()
    request = json.loads(sys.argv[1])
    result = parse(str(request["module"]), [str(a) for a in request["argv"]])
    print("\n" + MARKER + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
