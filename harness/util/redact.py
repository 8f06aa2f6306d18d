"""Redaction of secrets in what the harness shows and stores: environment variables, command-line flags, free
text (logs, Hydra's printed config and errors), whole trees.

What is secret is decided by NAME, word by word (``OPENAI_API_KEY`` is OPENAI, API, KEY; ``apiKey`` is API,
KEY): a word containing PASSWORD, PASSWD, PASSPHRASE, SECRET or CREDENTIAL, or a LAST word TOKEN or KEY after
a qualifier (``HF_TOKEN``, ``--api-key``, fused ``apikey``; ``token`` alone as an identifier, not as a word of
prose). Not secret: TOKEN or KEY that is not the last word (``token_ids``), words that merely contain them
(``tokenizer_path``), the bare word ``key`` (the checks' own field), special tokens and counters
(``eos_token``, ``#new-token: 6``). Whatever the name, a URL's userinfo and values in the format of a known
credential are secret too (:func:`scrub`).
"""

from __future__ import annotations

import functools
import logging
import re
import string
from collections.abc import Iterable, Mapping, Sequence

REDACTED = "***REDACTED***"

#: Words that make a name secret wherever they occur in it.
_STRONG = re.compile(r"PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL")
#: Qualifiers that make TOKEN / KEY a credential even fused (APIKEY, AUTHTOKEN) or plural (API_KEYS).
_QUALIFIERS = r"API|AUTH|ACCESS|PRIVATE|HF|BEARER|SESSION|REFRESH|OAUTH|GH|GITHUB|SIGNING|ENCRYPTION"
_FUSED = re.compile(rf"(?:{_QUALIFIERS})(?:TOKEN|KEY)S?")
_QUALIFIER = re.compile(_QUALIFIERS)
#: Words before a final TOKEN / KEY that make the name no secret: special tokens, token counters, lookup keys.
_BENIGN_BEFORE = {
    "TOKEN": frozenset("BOS EOS EOT EOM EOG PAD UNK MASK SEP CLS START END STOP SPECIAL IMAGE AUDIO VIDEO FIM PRE "
                       "SUF MID LF NL NEWLINE THINK TOOL NEW CACHED FIRST LAST NEXT PREV PER INPUT OUTPUT PROMPT "
                       "COMPLETION GEN DECODE PREFILL MAX MIN NUM TOTAL AVG MEAN".split()),
    "KEY": frozenset("SORT CACHE HASH GROUP PRIMARY FOREIGN PARTITION ROUTING LOOKUP DICT METRIC INDEX JOIN PUBLIC "
                     "ARM".split()),
}
#: What a secret name contains, lower-cased (PASSWORD and PASSWD share passw): a line without any is let through.
_HINTS = ("token", "key", "secret", "passw", "passphrase", "credential")
_HINT = "(?:" + "|".join(_HINTS) + ")"


#: Credential formats recognised by value (see the module docstring); long enough that no hash, id or word
#: of prose matches.
_TOKEN_VALUE = re.compile(
    r"(?<![A-Za-z0-9_-])(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}|(?:AKIA|ASIA)[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{20,})(?![A-Za-z0-9_-])")
#: What a token value starts with: a line without any of these skips the pattern above.
_TOKEN_HINTS = ("hf_", "sk-", "gh", "github_pat_", "AKIA", "ASIA", "eyJ", "xox", "glpat-")
#: ``scheme://userinfo@``: the credentials of a URL (removed, not replaced: the bare URL is what abh records)
_USERINFO = re.compile(r"(?<=[A-Za-z0-9+.-]://)[^\s/@'\"<>]+@(?=[^\s@])")


def scrub(text: str) -> str:
    """``text`` with the secrets that are secret by their form, whatever their name: a URL's userinfo removed,
    a value in a known credential format (``hf_...``, ``sk-...``, ...) redacted."""
    if "://" in text and "@" in text:
        text = _USERINFO.sub("", text)
    if any(h in text for h in _TOKEN_HINTS):
        text = _TOKEN_VALUE.sub(REDACTED, text)
    return text


def _words(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])|([A-Z])([A-Z][a-z])", r"\1\3 \2\4", name)
    words = re.findall(r"[A-Z]+|[0-9]+", spaced.upper())
    while words and words[-1].isdigit():  # API_KEY_2, HF_TOKEN2
        words.pop()
    return words


def _is_token_or_key_name(words: list[str]) -> bool:
    if not words:
        return False
    last = words[-1]
    if last in ("TOKEN", "KEY"):
        if len(words) == 1:
            return last == "TOKEN"
        return words[-2] not in _BENIGN_BEFORE[last]
    if last in ("TOKENS", "KEYS"):  # max_new_tokens, sort_keys: no; api_keys: yes
        return len(words) > 1 and _QUALIFIER.fullmatch(words[-2]) is not None
    return _FUSED.fullmatch(last) is not None


@functools.lru_cache(maxsize=4096)  # a run's manifest is redacted at every event: the same few hundred keys
def is_secret_name(name: str) -> bool:
    """True when an env var, flag, config key or override name looks like it holds a secret (a dotted override:
    pass the last part; a flag's leading dashes are ignored)."""
    return _is_strong(name) or _is_token_or_key_name(_words(name))


def _is_strong(name: str) -> bool:
    return any(_STRONG.search(w) for w in _words(name))


def _is_bare_token(name: str) -> bool:
    """The name is just ``token``: an identifier, or a word of prose."""
    return _words(name) == ["TOKEN"]


_NUMBER = re.compile(r"[-+]?\d{1,12}(?:\.\d+)?(?:[eE][-+]?\d+)?%?")
_EMPTY = frozenset({"None", "null", "NULL", "~", "''", '""', "", "[]", "{}", "True", "False", "true", "false"})


def _hides(name: str, value: object, text: bool = True) -> bool:
    """Whether the value under secret-looking ``name`` is hidden: not when empty/None/a boolean, and under a
    TOKEN/KEY name not when it is a number (``#new-token: 6``, ``max_token = 2``: counts, not credentials; in a
    tree only a real number, in text anything that reads as one)."""
    if value is None or isinstance(value, bool) or value in ("", [], {}):
        return False
    value_text = str(value).strip()
    if value_text in _EMPTY or "REDACTED" in value_text:  # already hidden (sweep dir names say REDACTED)
        return False
    if isinstance(value, int | float) or (text and _NUMBER.fullmatch(value_text)):
        return _is_strong(name)
    return True


def redact_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Copy of ``env``: the values of secret names redacted, secret values (:func:`scrub`) under any."""
    return {k: (REDACTED if is_secret_name(k) else scrub(v) if isinstance(v, str) else v)
            for k, v in (env or {}).items()}


def _is_flag(tok: str) -> bool:
    return tok.startswith("-") and len(tok) > 1 and not tok[1:2].isdigit() and tok[1:2] != "."


def redact_argv(argv: Sequence[str]) -> list[str]:
    """Copy of ``argv``, secret flags' values redacted: ``--api-key X`` (X not a flag), ``--api-key=X``."""
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
        out.append(scrub(tok))
    return out


#: Field names of the harness's own schemas that look secret but hold no secret.
_SCHEMA_FIELDS = {"key", "keys"}

# ---------------------------------------------------------------------------------------- free text
_QUOTED = r"""'[^'\n]*'|"[^"\n]*\""""
_GROUP = r"\[[^\]\n]*\]|\([^)\n]*\)|\{[^}\n]*\}"
_BARE = r"""[^\s,\[\]\(\)\{\}'"]+"""
_ITEM = rf"(?:{_QUOTED}|{_GROUP}|{_BARE})+"
#: A sweep's further values (``HF_TOKEN=s1,s2``, ``choice(a,b)`` is one item) up to the next ``name=`` or
#: ``"name":`` (``override_dirname``, compact JSON) or a space.
_MORE = r""",(?=[^\s,])(?![+~]*[A-Za-z_][\w.@/-]*\s*=(?!=))(?!["'][^"'\n]*["']\s*:)"""
_VALUE = rf"(?P<value>{_ITEM}(?:{_MORE}{_ITEM})*)"
# Pairs are found from their secret word, then the name is read back to its start: a pattern that tries every
# position of a line for a name is several times slower, and server logs can be large. All patterns here are
# matched against the line lower-cased (ASCII only, so the spans are the line's).
_HINT_RUN = re.compile(rf"{_HINT}[\w.\-]*")
_NAME_CHAR = re.compile(r"[\w.\-]")
#: After ``--flag``: `` value``, ``=value``, ``,value`` (a Hydra list ``[--api-key,sk-1]``), ``', 'value'`` (a
#: printed Python list). Not ``1-token answers``: the name must start with the dash.
_FLAG_TAIL = re.compile(r"""(?P<sep>['"]?(?:\s*[=,]\s*|\s+)['"]?)(?=[^-\s])""" + rf"(?P<value>{_ITEM})")
_FLAG_NAME = re.compile(r"--?[a-z][\w.\-]*")
#: After ``NAME``, ``"name"`` or ``'name'``: ``=value``, ``: value``, ``='value'`` (env lines, Hydra overrides and
#: printed YAML, SGLang's printed ServerArgs, JSON, Python dicts).
_NAME_TAIL = re.compile(rf"(?P<sep>\s*[=:]\s*){_VALUE}")
#: ``Authorization: Bearer <token>`` / ``Basic <credentials>`` / ``Token <t>``, and any ``Bearer <token>``.
_AUTH = re.compile(r"""(?P<lead>\bauthorization["']?\s*[:=]\s*["']?(?:(?:bearer|basic|token|digest)\s+)?|\bbearer\s+)"""
                   r"""[A-Za-z0-9._~+/=:-]{6,}""")
#: In printed YAML, a list item that is a secret flag (``- --api-key``); its value is the next item.
_YAML_FLAG_ITEM = re.compile(r"""^\s*-\s+(['"]?)(?P<flag>--?[A-Za-z][\w.-]*)\1\s*$""")
_YAML_ITEM = re.compile(r"""^(?P<lead>\s*-\s+)(?P<value>\S.*?)\s*$""")
#: In printed YAML, a secret key whose value is a block below it (``HF_TOKEN: |``, ``api_keys:`` + a list).
_YAML_BLOCK_KEY = re.compile(r"""^(?P<indent>\s*)(?:-\s+)?(?P<q>['"]?)(?P<name>[A-Za-z_][\w.-]*)(?P=q):"""
                             r"""\s*(?:[|>][-+]?\d*)?\s*$""")
#: Sweep functions, not parts of a secret value.
_FUNCTIONS = frozenset({"choice", "range", "interval", "glob", "sort", "shuffle", "tag", "int", "float", "str",
                        "bool", "json_str", "extend_list"})


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _lower(text: str) -> str:
    low = text.lower()
    return low if len(low) == len(text) else text.translate(_ASCII_LOWER)


class Redactor:
    """Redacts text line by line, keeping what a line implies for the next (printed YAML lists and blocks), and
    literal secret values it was given (from the command line: a value Hydra repeats without its name, as in
    ``no viable alternative at input '[sk-1'``). ``found`` collects every value it hid."""

    def __init__(self, secrets: Iterable[str] = (), found: list[str] | None = None) -> None:
        lits = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._literals = (re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, lits)) + r")(?![A-Za-z0-9])")
                          if lits else None)
        self._found = found
        self._next_item_secret = False
        self._block_indent: int | None = None

    def _hide(self, value: str) -> None:
        if self._found is not None:
            self._found.append(value)

    def _pairs(self, body: str, low: str) -> str:
        """Each ``name<sep>value`` and ``--flag value`` whose name is secret, its value hidden."""
        parts: list[str] = []
        last = 0
        for hint in _HINT_RUN.finditer(low):
            start, end = hint.start(), hint.end()
            if start < last:
                continue  # inside what was just redacted
            while start > last and _NAME_CHAR.match(low, start - 1):
                start -= 1
            flag = low.startswith("-", start)
            if flag:
                if not _FLAG_NAME.fullmatch(low, start, end):
                    continue
                tail = _FLAG_TAIL.match(low, end)
            else:
                if not (low[start].isalpha() or low[start] == "_"):
                    continue  # 1-token
                q = low[start - 1] if start > last and low[start - 1] in "'\"" else ""
                if q and low.startswith(q, end):
                    start, end = start - 1, end + 1
                tail = _NAME_TAIL.match(low, end)
            if tail is None:
                continue
            raw, sep = body[start:end], body[tail.start("sep"):tail.end("sep")]
            value = body[tail.start("value"):tail.end("value")]
            if self._hides_pair(raw, sep, value):
                self._hide(value)
                q = value[0] if len(value) > 1 and value[0] in "'\"" and value[-1] == value[0] else ""
                parts += [body[last:start], f"{raw}{sep}{q}{REDACTED}{q}"]
                last = tail.end()
        return "".join([*parts, body[last:]]) if parts else body

    @staticmethod
    def _hides_pair(raw: str, sep: str, value: str) -> bool:
        quoted = raw[:1] in "'\""
        name = raw.strip("'\"").lstrip("-+~").rsplit(".", 1)[-1]
        if not is_secret_name(name) or name.lower() in _SCHEMA_FIELDS or not _hides(name, value.strip("'\"")):
            return False
        # the bare word TOKEN is a name only as a flag, quoted, or in a tight NAME=value (not "EOS token = 2")
        return not (_is_bare_token(name) and not raw.startswith("-") and not quoted and sep != "=")

    def _auth(self, body: str) -> str:
        parts: list[str] = []
        last = 0
        for m in _AUTH.finditer(_lower(body)):
            self._hide(body[m.end("lead"):m.end()])
            parts += [body[last:m.end("lead")], REDACTED]
            last = m.end()
        return "".join([*parts, body[last:]]) if parts else body

    def line(self, line: str) -> str:
        """One line (its end, if any, kept)."""
        body = line.rstrip("\r\n")
        end = line[len(body):]
        if self._block_indent is not None:
            indent = len(body) - len(body.lstrip())
            stripped = body.strip()
            if not stripped:
                return line
            if indent > self._block_indent or (indent == self._block_indent and stripped.startswith("- ")):
                self._hide(stripped)
                lead = body[:indent] + ("- " if stripped.startswith("- ") else "")
                return f"{lead}{REDACTED}{end}"
            self._block_indent = None
        if self._next_item_secret:
            self._next_item_secret = False
            m = _YAML_ITEM.match(body)
            if m and not _is_flag(m.group("value").strip("'\"")):
                self._hide(m.group("value"))
                return f"{m.group('lead')}{REDACTED}{end}"
        out = body
        low = _lower(body)
        if any(h in low for h in _HINTS):  # most log lines name no secret: skip the costly patterns
            m = _YAML_FLAG_ITEM.match(body)
            if m and is_secret_name(m.group("flag").lstrip("-")):
                self._next_item_secret = True
            m = _YAML_BLOCK_KEY.match(body)
            if m and is_secret_name(m.group("name").rsplit(".", 1)[-1]) \
                    and m.group("name").lower() not in _SCHEMA_FIELDS \
                    and (m.group("q") or not _is_bare_token(m.group("name"))):
                self._block_indent = len(m.group("indent"))
            out = self._pairs(out, low)
        if "bearer" in low or "authorization" in low:
            out = self._auth(out)
        if self._literals is not None:
            out = self._literals.sub(REDACTED, out)
        return scrub(out) + end

    def text(self, text: str) -> str:
        return "".join(self.line(ln) for ln in text.splitlines(keepends=True))


def redact_text(text: str) -> str:
    """Free text (log tails, printed config, server args) with the values of secret-looking names redacted."""
    return Redactor().text(text)


def _assigned_secret(s: str) -> str | None:
    """The value of ``engine.env.HF_TOKEN=abc`` (a Hydra override) or ``HF_TOKEN=abc`` when its name is secret."""
    name, eq, value = s.partition("=")
    if eq and name and " " not in name and is_secret_name(name.rsplit(".", 1)[-1].lstrip("+~")) \
            and _hides(name, value):
        return value
    return None


@functools.lru_cache(maxsize=8192)  # pure; the manifest's strings come back at every rewrite
def _redact_assignment(s: str) -> str:
    """An assignment whose name is secret (:func:`_assigned_secret`) redacted, or text holding such pairs."""
    return redact_text(s) if _assigned_secret(s) is None else f"{s.partition('=')[0]}={REDACTED}"


def secret_values(argv: Sequence[str]) -> set[str]:
    """The secret values a command line carries (``HF_TOKEN=v``, ``+x.env.HF_TOKEN=s1,s2``, ``--api-key v``,
    ``[--api-key,v]``), and their parts (each value of a sweep, the inside of ``[...]``), at least 3 characters
    long: what a :class:`Redactor` should hide even where Hydra repeats it without its name."""
    found: list[str] = []
    toks = [str(t) for t in argv]
    for i, tok in enumerate(toks):
        if _is_flag(tok):
            name, eq, value = tok.partition("=")
            if is_secret_name(name.lstrip("-")):
                if eq:
                    found.append(value)
                elif i + 1 < len(toks) and not _is_flag(toks[i + 1]):
                    found.append(toks[i + 1])
            continue
        assigned = _assigned_secret(tok)
        if assigned is not None:
            found.append(assigned)
        Redactor(found=found).line(tok)
    parts: set[str] = set()
    for v in found:
        parts.add(v.strip())
        parts.update(p for p in re.split(r"""[\s,\[\]\(\)\{\}'"=]+""", v) if p.lower() not in _FUNCTIONS)
    return {p for p in parts if len(p) >= 3 and p not in _EMPTY and REDACTED not in p}


def _secret_entry(key: object, value: object) -> bool:
    if not isinstance(key, str) or key in _SCHEMA_FIELDS or not is_secret_name(key):
        return False
    if isinstance(value, Mapping | list | tuple):
        return bool(value)
    return _hides(key, value, text=False)


def redact_tree(obj: object) -> object:
    """Copy of a JSON-like tree with secrets redacted everywhere: values under secret-looking keys, secret
    flags in lists of strings (argv), and ``NAME=value`` strings whose NAME is secret."""
    if isinstance(obj, Mapping):
        return {k: REDACTED if _secret_entry(k, v) else redact_tree(v) for k, v in obj.items()}
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
