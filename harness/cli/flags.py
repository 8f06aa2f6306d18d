"""What the argparse commands (``abh eval``, ``ab``, ``compare``, ``power``, ``report``) share: the help format, and
the flags that set the client's settings."""

from __future__ import annotations

import argparse
import re

#: ClientSettings fields -> the flags of abh eval and abh ab that set them (for their error messages)
CLIENT_FLAGS = {"parallel": "--parallel", "retries": "--retries", "request_timeout_s": "--request-timeout",
                "stall_timeout_s": "--stall-timeout", "progress_timeout_s": "--progress-timeout",
                "api_key_env": "--api-key-env", "max_bytes_per_token": "--max-bytes-per-token"}
_CLIENT_FIELDS = re.compile(r"\b(?:" + "|".join(CLIENT_FLAGS) + r")\b")


def as_flags(message: str) -> str:
    """A message of the client settings' own checks with each field named as the flag that sets it."""
    return _CLIENT_FIELDS.sub(lambda m: CLIENT_FLAGS[m.group()], message)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default once, except where there is none to show (required, None, "", off flags) or
    the help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        d = action.default
        if (action.required or d is None or d is False or d == "" or d == [] or d is argparse.SUPPRESS
                or "default" in (action.help or "")):
            return action.help
        return super()._get_help_string(action)
