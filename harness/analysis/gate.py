"""The CI gate: ``--fail-on`` turns a verdict the caller refuses into exit 7, one decision for ``abh
compare``, ``abh run`` and ``abh ab``. An unknown verdict fails whatever ``fail_on`` says (the gate fails
closed); an instances-only verdict is not gated on unless ``--assume-no-launch-shift`` states the assumption
it needs."""

from __future__ import annotations

from harness import exitcodes
from harness.results.schema import Comparison
from harness.stats.verdict import VERDICTS

FAIL_ON = ("regressed", "not-noninferior", "any-difference")

_NOT_WORSE = frozenset({"noninferior", "equivalent", "improved", "identical"})
_DIFFERENT = frozenset({"improved", "regressed", "differs"})
_KNOWN = frozenset(VERDICTS) | _NOT_WORSE | _DIFFERENT


def gate_fails(verdict: str | None, fail_on: str | None) -> bool:
    """True when ``verdict`` is one the caller asked to fail on (``fail_on`` one of FAIL_ON, or None)."""
    if fail_on is None:
        return False
    if fail_on not in FAIL_ON:
        raise ValueError(f"--fail-on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
    if verdict not in _KNOWN:
        return True
    if fail_on == "regressed":
        return verdict == "regressed"
    if fail_on == "not-noninferior":
        return verdict not in _NOT_WORSE
    return verdict in _DIFFERENT


def gate_exit(verdict: str | None, fail_on: str | None) -> int:
    """7 (exitcodes.GATE_FAILED) when the gate fails, else 0."""
    return exitcodes.GATE_FAILED if gate_fails(verdict, fail_on) else exitcodes.OK


def comparison_exit(c: Comparison, fail_on: str | None = None, recorded_failure: int = exitcodes.OK) -> int:
    """The exit code of a finished comparison, in order: a failure the evals record (3 side assertion, 4
    server failure); 5 when request errors exceed ``max_error_rate``; 7 when the ``--fail-on`` gate fails."""
    if recorded_failure != exitcodes.OK:
        return recorded_failure
    if c.error_rate_exceeded:
        return exitcodes.TOO_MANY_ERRORS
    if not gated(c):
        return exitcodes.OK
    return gate_exit(c.verdict, fail_on)


#: the flag (and config key) that states the assumption an instances-only verdict needs to be gated on
ASSUME_FLAG = "--assume-no-launch-shift"
ASSUME_KEY = "stats.assume_no_launch_shift"


def gated(c: Comparison) -> bool:
    """Whether ``--fail-on`` acts on the verdict: not on an instances-only one (a not-comparable one is not
    about launches: it is gated), unless the user stated that launches do not shift accuracy."""
    return c.verdict == "not_comparable" or not c.instances_only or "no_launch_shift" in c.assumptions


#: per command, how to give A a second launch and how to state the assumption: each command names its own flags
SECOND_LAUNCH = {"run": ("experiment.aa_control=true", f"{ASSUME_KEY}=true"),
                 "ab": ("--aa URL_A2", ASSUME_FLAG),
                 "compare": ("--aa with an eval of a second launch of A", ASSUME_FLAG)}


def gate_not_applied(c: Comparison, fail_on: str | None, command: str = "run") -> str | None:
    """Why ``--fail-on`` did not act on the verdict (one line), None when it did or none was given; the remedy
    in the flags of ``command`` (``run``, ``ab``, ``compare``)."""
    if fail_on is None or gated(c) or c.error_rate_exceeded:
        return None
    second, assume = SECOND_LAUNCH[command]
    return (f"--fail-on {fail_on} not applied to verdict {c.verdict}: it is about these two server instances only "
            "(one launch per configuration: a launch-wide accuracy shift cannot be told from the change); give A a "
            f"second launch (the A/A control: {second}) or state the assumption with {assume}")


def exit_reason(code: int, c: Comparison, fail_on: str | None) -> str | None:
    """Why a finished comparison exits ``code``, in one line (None for 0): the same words for ``abh run``,
    ``abh ab`` and ``abh compare``."""
    if code == exitcodes.GATE_FAILED:
        return f"verdict {c.verdict} fails --fail-on {fail_on} (exit {exitcodes.GATE_FAILED})"
    if code == exitcodes.TOO_MANY_ERRORS:
        return (f"{100 * c.error_rate:.2f} % of questions lost to request errors exceeds "
                f"--max-error-rate {100 * c.max_error_rate:g} % (stats.max_error_rate): the "
                f"arms are not comparable (exit {exitcodes.TOO_MANY_ERRORS}); rerun the same command to retry the "
                "failed requests")
    if code != exitcodes.OK:
        return f"not comparable: {c.verdict_reason} (exit {code})"
    return None
