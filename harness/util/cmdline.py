"""Command lines: read into flags, and shown (secrets redacted, shell-quoted) as one line or as a copyable
snippet with one ``NAME=value`` per environment variable and one ``--flag value`` per line. The one place that
formats commands (the dry run, the launch description, the report)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.util.redact import REDACTED, is_secret_name, redact_argv, redact_env

_NUMBER = re.compile(r"-\d+(\.\d*)?([eE][-+]?\d+)?")
#: Joins the lines of a multi-line shell command.
CONTINUATION = " \\\n"
#: One flag's value as :func:`parse_flags` reads it: its text, True for a flag without one, a list for a flag
#: given several times (and ``_positional``: the arguments that are no flag's).
FlagValue = str | bool | list[str | bool]


def is_flag(tok: str) -> bool:
    """``--tp``, ``-m``, ``--x=1`` are flags; ``-5`` and ``-1e-3`` are values (negative numbers)."""
    return tok.startswith("-") and len(tok) > 1 and not _NUMBER.fullmatch(tok)


def flag_value(args: Sequence[Any], names: tuple[str, ...]) -> str | None:
    """The value of the last of ``names`` in ``args`` (``--tp 8`` or ``--tp=8``: the one a server's parser
    keeps), else None."""
    value = None
    argv = [str(a) for a in args]
    for i, a in enumerate(argv):
        flag, eq, rest = a.partition("=")
        if flag in names:
            if eq:
                value = rest
            elif i + 1 < len(argv):
                value = argv[i + 1]
    return value


def parse_flags(argv: Sequence[str]) -> dict[str, FlagValue]:
    """``["--tp", "8", "--flag", "--x=1", "pos"]`` -> ``{"--tp": "8", "--flag": True, "--x": "1",
    "_positional": ["pos"]}``; a repeated flag collects a list."""
    out: dict[str, FlagValue] = {}
    pos: list[str | bool] = []
    i = 0
    while i < len(argv):
        t = str(argv[i])
        if is_flag(t):
            name, eq, val = t.partition("=")
            value: str | bool
            if eq:
                value = val
            elif i + 1 < len(argv) and not is_flag(str(argv[i + 1])):
                value = str(argv[i + 1])
                i += 1
            else:
                value = True
            if name in out:
                prev = out[name]
                out[name] = [*prev, value] if isinstance(prev, list) else [prev, value]
            else:
                out[name] = value
        else:
            pos.append(t)
        i += 1
    if pos:
        out["_positional"] = pos
    return out


def redact_command(argv: Iterable[Any]) -> list[str]:
    """:func:`~harness.util.redact.redact_argv`, plus ``name=value`` tokens whose name looks secret (Hydra
    overrides such as ``engine.env.HF_TOKEN=...``, env prefixes such as ``HF_TOKEN=...``)."""
    out = []
    for tok in redact_argv([str(t) for t in argv]):
        name, eq, _ = tok.partition("=")
        if eq and not tok.startswith("-") and is_secret_name(name.rsplit(".", 1)[-1].lstrip("+~")):
            tok = f"{name}={REDACTED}"
        out.append(tok)
    return out


def env_lines(env: Mapping[str, Any] | Sequence[str] | None, redact: bool = True) -> list[str]:
    """One ``NAME=value`` (shell-quoted value) per variable; a list is taken as ready-made lines."""
    if isinstance(env, Mapping):
        plain = {str(k): str(v) for k, v in env.items()}
        return [f"{k}={shlex.quote(v)}" for k, v in (redact_env(plain) if redact else plain).items()]
    if isinstance(env, Sequence) and not isinstance(env, str):
        return redact_command(env) if redact else [str(e) for e in env]
    return []


def argv_lines(argv: Sequence[Any], redact: bool = True) -> list[str]:
    """The command as lines: the program (with ``-m MODULE`` and any leading positionals), then one
    ``--flag value`` (or a lone flag or positional) per line; every token shell-quoted."""
    toks = redact_command(argv) if redact else [str(t) for t in argv]
    if not toks:
        return []
    head = 3 if len(toks) >= 3 and toks[1] == "-m" else 1
    while head < len(toks) and not is_flag(toks[head]):
        head += 1
    lines = [shlex.join(toks[:head])]
    i = head
    while i < len(toks):
        tok = toks[i]
        if is_flag(tok) and "=" not in tok and i + 1 < len(toks) and not is_flag(toks[i + 1]):
            lines.append(shlex.join([tok, toks[i + 1]]))
            i += 2
        else:
            lines.append(shlex.quote(tok))
            i += 1
    return lines


def shell_command(argv: Sequence[Any] | str | None, env: Mapping[str, Any] | Sequence[str] | None = None,
                  redact: bool = True) -> str:
    """Multi-line shell form: the env lines, then the command with one flag per line (indented), joined by
    `` \\`` continuations. A string ``argv`` is a command line already formed, shown as it is."""
    cmd = ([argv] if argv else []) if isinstance(argv, str) else argv_lines(argv or [], redact)
    return CONTINUATION.join([*env_lines(env, redact), *(("  " + ln) if n else ln for n, ln in enumerate(cmd))])


def command_line(argv: Sequence[Any], env: Mapping[str, Any] | None = None, redact: bool = True) -> str:
    """One line, shell-quoted: ``NAME=value ... python -m MODULE --flag value ...``."""
    toks = redact_command(argv) if redact else [str(t) for t in argv]
    return " ".join([*env_lines(env, redact), shlex.join(toks)])
