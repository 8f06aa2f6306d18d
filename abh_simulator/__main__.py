"""``python -m abh_simulator [--flag value ...]``: command line -> SimConfig -> a running server.

Every SimConfig knob is a flag (``flip_rate`` -> ``--flip-rate``; bools ``--x`` / ``--no-x``), with the
dataclass's default; ``--random-seed`` is also accepted for ``--run-seed``, as SGLang spells it. Exit 2 on a
bad flag, value or data file, with one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
from collections.abc import Coroutine
from dataclasses import fields
from typing import Any

from abh_simulator.sim_config import FLAG_ALIASES, SimConfig, default_of, flag, knob_types


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft == resource.RLIM_INFINITY or soft >= target:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m abh_simulator",
        description="SIMULATED GSM8K inference server (SGLang /generate + OpenAI /v1/completions). "
                    "Not a model: a rehearsal, test and power-planning tool.")
    types = knob_types()
    for f in fields(SimConfig):
        names = [flag(f.name), *FLAG_ALIASES.get(f.name, [])]
        help_text = f"{f.metadata.get('help', '')} (default: {default_of(f.name)!r})"
        if types[f.name] is bool:
            p.add_argument(*names, dest=f.name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                           help=help_text)
        else:
            p.add_argument(*names, dest=f.name, type=types[f.name], default=argparse.SUPPRESS,
                           choices=f.metadata.get("choices"), help=help_text)
    return p


def parse_args(argv: list[str] | None = None) -> SimConfig:
    p = build_parser()
    given = vars(p.parse_args(argv))
    if "ability" in given and "accuracy" in given:
        p.error("give either --ability or --accuracy, not both")
    cfg = SimConfig(**given)
    problems = cfg.problems()
    if problems:  # "flip_rate must be ..." -> "--flip-rate must be ..."
        p.error("; ".join(flag(m.split(" ", 1)[0]) + " " + m.split(" ", 1)[1] for m in problems))
    return cfg


def _run(coro: Coroutine[Any, Any, None]) -> None:
    """``coro`` in uvloop's event loop where it is installed (a dependency but on Windows): its transports cost
    about half of asyncio's per request), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        asyncio.run(coro)
    else:
        uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    cfg = parse_args(args)
    from abh_simulator.server import serve  # orjson and the data: after the flags are known good

    _raise_nofile()
    try:
        _run(serve(cfg, [sys.argv[0], *args]))
    except ValueError as e:  # DatasetError included: bad data is one line, exit 2
        print(f"simulator: {e}", file=sys.stderr, flush=True)
        return 2
    except OSError as e:
        print(f"simulator: cannot listen on {cfg.host}:{cfg.port}: {e}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
