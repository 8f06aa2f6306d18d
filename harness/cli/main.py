"""The ``abh`` command: one module per subcommand under :mod:`harness.cli`, imported only when used (so
``abh eval`` stays light): ``run`` (the Hydra app), ``eval``, ``ab``, ``compare``, ``power``, ``report``."""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any

from harness import __version__, exitcodes
from harness.util import blas

#: command -> (module under harness.cli, its entry function, one line of help)
COMMANDS = {
    "run": ("run", "main", "launch each arm's server, assert its side, evaluate, compare (abh run experiment=NAME)"),
    "eval": ("eval", "eval_main", "one eval against a server that is already running"),
    "ab": ("ab", "ab_main", "evaluate two running servers (interleaved, with repeats) and compare them"),
    "compare": ("compare", "compare_main", "paired comparison of stored evals"),
    "power": ("power", "power_main", "minimum detectable effect, repeats and GPU-hours needed"),
    "report": ("report", "report_main", "(re)write report.html and comparison.md of a run, comparison or sweep"),
}

USAGE = "\n".join(["usage: abh <command> [options]    (abh --version)", "", "commands:",
                   *(f"  {name:8s} {help_}" for name, (_, _, help_) in COMMANDS.items()), "",
                   "`abh <command> --help` for the options of one command."])


def _load(module: str, entry: str, whole_process: bool) -> Any:
    """The command's entry function. ``whole_process`` (the ``abh`` script: the process is this command): what the
    imports make lives as long as the process, so no collection runs while they load and none walks it again
    afterwards (frozen): the collector would walk it a hundred times (~0.07 s of CPU) to find little garbage; and
    OpenBLAS's idle threads sleep at once (:mod:`harness.util.blas`)."""
    if not whole_process:
        return getattr(importlib.import_module(f"harness.cli.{module}"), entry)
    gc.disable()
    try:
        with blas.idle_threads_sleep():  # numpy's and scipy's OpenBLAS load with the command's imports
            return getattr(importlib.import_module(f"harness.cli.{module}"), entry)
    finally:
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    argv_given = argv
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else exitcodes.BAD_CONFIG
    if argv[0] in ("--version", "-V", "version"):
        print(f"abh {__version__}")
        return exitcodes.OK
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"abh: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    module, entry, _ = COMMANDS[cmd]
    try:
        run = _load(module, entry, whole_process=argv_given is None)
    except KeyboardInterrupt:  # Ctrl-C while loading: nothing was started
        return exitcodes.INTERRUPTED
    return int(run(rest))


if __name__ == "__main__":
    sys.exit(main())
