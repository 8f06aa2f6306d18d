"""Redaction of secrets in what the harness shows and stores: environment variables and command-line flags.

A name is secret when it contains TOKEN, KEY, SECRET, PASSWORD (also PASSWD, CREDENTIAL), case-insensitive,
like ``HF_TOKEN``, ``OPENAI_API_KEY``, ``--api-key``. Words that merely contain TOKEN without being one
(``TOKENIZER``, ``TOKENS`` as in ``--max-new-tokens``, ``TOKEN_ID(S)``) are left alone, so a run's
tokenizer path and token limits stay reproducible.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence

REDACTED = "***REDACTED***"

_SECRET = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL")
#: Occurrences of a secret word that are not secrets: TOKENIZER, TOKENS, TOKEN_ID, TOKEN_IDS.
_BENIGN_AFTER = {"TOKEN": re.compile(r"^(IZER|S(?![A-Z])|_IDS?(?![A-Z]))")}


def is_secret_name(name: str) -> bool:
    """True when an env var or flag name looks like it holds a secret."""
    n = re.sub(r"[^A-Z0-9]", "_", name.upper())
    for m in _SECRET.finditer(n):
        benign = _BENIGN_AFTER.get(m.group(0))
        if benign is not None and benign.match(n[m.end():]):
            continue
        return True
    return False


def redact_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Copy of ``env`` with the values of secret-looking names replaced by ``***REDACTED***``."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in (env or {}).items()}


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and len(tok) > 1 and not tok[1:2].isdigit() and tok[1:2] != "."


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Copy of ``argv`` with the values of secret-looking flags redacted.

    Handles ``--api-key X`` (the next token, unless it is itself a flag) and ``--api-key=X``.
    """
    out: list[str] = []
    redact_next = False
    for tok in argv:
        tok = str(tok)
        if redact_next:
            redact_next = False
            if not _is_flag(tok):
                out.append(REDACTED)
                continue
        if _is_flag(tok):
            name, eq, _value = tok.partition("=")
            if is_secret_name(name.lstrip("-")):
                if eq:
                    out.append(f"{name}={REDACTED}")
                    continue
                redact_next = True
        out.append(tok)
    return out


#: Field names of the harness's own schemas that contain a secret word but hold no secret.
_SCHEMA_FIELDS = {"key", "keys"}


_VALUE = r"""(?P<value>'[^']*'|"[^"]*"|[^\s,\[\]\(\)'"]+)"""
#: A name holding a secret word (checked again by :func:`is_secret_name` for TOKENIZER, TOKENS ...): only
#: such names are matched, so a non-secret ``key: value`` never swallows a secret pair inside its value.
_SECRET_NAME = r"[\w.-]*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)[\w.-]*"
#: ``--flag value``, ``--flag=value``, ``--flag,value`` (inside a Hydra list override such as
#: ``+engine.args=[--api-key,sk-1]``).
_FLAG_PAIR = re.compile(r"(?i)(?P<name>--?" + _SECRET_NAME + r")(?P<sep>\s*[=,]\s*|\s+)(?=[^-\s])" + _VALUE)
#: ``NAME=value``, ``name='value'``, ``"name": "value"`` (env lines, SGLang's printed ServerArgs, JSON).
_NAME_PAIR = re.compile(r"""(?i)(?P<name>(?<![\w.-])[A-Za-z_]""" + _SECRET_NAME + r"""|"[A-Za-z_]"""
                        + _SECRET_NAME + r""""|(?<![\w.-])(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL)[\w.-]*)"""
                        r"""(?P<sep>\s*[=:]\s*)""" + _VALUE)


#: ``Authorization: Bearer <token>`` / ``Basic <credentials>``.
_BEARER = re.compile(r"(?i)\b((?:bearer|basic)\s+)[A-Za-z0-9._~+/=-]{6,}")


def redact_text(text: str) -> str:
    """Free text (log tails, overrides, printed server args) with the values of secret-looking names redacted."""

    def repl(m: re.Match[str]) -> str:
        name = m.group("name").strip('"').lstrip("-+~").rsplit(".", 1)[-1]
        value = m.group("value")
        if not is_secret_name(name) or name.lower() in _SCHEMA_FIELDS or value in ("None", "null", "''", '""'):
            return m.group(0)
        quote = value[0] if value[:1] in ("'", '"') else ""
        return f"{m.group('name')}{m.group('sep')}{quote}{REDACTED}{quote}"

    return _BEARER.sub(r"\1" + REDACTED, _NAME_PAIR.sub(repl, _FLAG_PAIR.sub(repl, text)))


def _redact_assignment(s: str) -> str:
    """``engine.env.HF_TOKEN=abc`` (a Hydra override), ``HF_TOKEN=abc`` or text holding such pairs."""
    name, eq, _ = s.partition("=")
    if eq and name and " " not in name and is_secret_name(name.rsplit(".", 1)[-1].lstrip("+~")):
        return f"{name}={REDACTED}"
    return redact_text(s)


def redact_tree(obj: object) -> object:
    """Copy of a JSON-like tree with secrets redacted everywhere: values under secret-looking keys, secret
    flags in lists of strings (argv), and ``NAME=value`` strings whose NAME is secret."""
    if isinstance(obj, Mapping):
        return {k: (REDACTED if (isinstance(k, str) and k not in _SCHEMA_FIELDS and is_secret_name(k)
                                 and v not in (None, "", [], {}) and not isinstance(v, bool))
                    else redact_tree(v))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        if all(isinstance(x, str) for x in obj):
            return [_redact_assignment(x) for x in redact_argv(list(obj))]
        return [redact_tree(x) for x in obj]
    if isinstance(obj, str):
        return _redact_assignment(obj)
    return obj


class RedactFilter(logging.Filter):
    """A logging filter that redacts secrets in every record (used by the Hydra logging configs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(record.getMessage())
        record.args = None
        return True
