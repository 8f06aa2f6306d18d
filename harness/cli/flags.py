"""What the argparse commands (``abh eval``, ``ab``, ``compare``, ``power``, ``report``) share: the help format."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default once, except where there is none to show (required, None, "", off flags) or
    the help text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        d = action.default
        if (action.required or d is None or d is False or d == "" or d == [] or d is argparse.SUPPRESS
                or "default" in (action.help or "")):
            return action.help
        return super()._get_help_string(action)
