"""Hydra's composition errors (7-13 lines each, suggesting ``+key=value`` for an unknown key, which abh
refuses as a typo) in abh's one-line style, naming the key as typed and the closest one that exists.
"""

from __future__ import annotations

import difflib

from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

from harness.config import did_you_mean

GRAMMAR = "https://hydra.cc/docs/1.2/advanced/override_grammar/basic"


def _closest(word: str, options: list[str]) -> str:
    match = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"did you mean {match[0]}? " if match else ""


def _missing_option(e: MissingConfigException) -> str:
    where = e.missing_cfg_file or ""
    group, _, name = where.rpartition("/")
    options = [o for o in (e.options or []) if not o.endswith("_schema")]  # the schemas are not choices
    if not group:
        return f"no config {where!r}"
    return f"no {group} {name!r} ({_closest(name, options)}options: {', '.join(options)})"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text.strip())


def one_line(e: BaseException) -> str | None:
    """``e`` (an exception Hydra raised while composing the config) as one line, or None when it is not one
    of Hydra's composition errors."""
    if isinstance(e, MissingConfigException):
        return _missing_option(e)
    if isinstance(e, OverrideParseException):
        lines = [line.strip() for line in (e.message or "").splitlines()
                 if line.strip() and not line.startswith(("See ", "Error parsing override"))]
        why = lines[0] if lines else "not KEY=VALUE"
        return f"cannot read the override {e.override!r}: {why} (write KEY=VALUE; grammar: {GRAMMAR})"
    if isinstance(e, ConfigCompositionException):
        cause = e.__cause__
        if isinstance(cause, ConfigAttributeError | ConfigKeyError) and cause.full_key:
            key = str(cause.full_key)
            near = did_you_mean(key)
            if near:
                return f"unknown config key {key} (did you mean {near}?)"
            if cause.object_type is dict:  # a mapping of free keys (an arm's env, its engine overrides)
                return f"{key} is not set yet: add it with +{key}=VALUE"
            return f"unknown config key {key} (`abh run --cfg job` prints every key)"
        if isinstance(cause, ValidationError) and cause.full_key:
            return f"{cause.full_key}: {_first_line(str(cause.msg))}"
        text = str(e)
        if text.startswith("Could not append to config. An item is already at"):
            key = text.split("'")[1] if text.count("'") >= 2 else "the key"
            return f"{key} exists already: set it without the + ({key}=VALUE)"
        return _first_line(text) + (f": {_first_line(str(cause))}" if cause is not None else "")
    return None
