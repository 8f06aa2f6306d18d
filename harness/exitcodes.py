"""Exit codes of ``abh`` (documented in docs/commands.md)."""

OK = 0
#: Something went wrong that has no code of its own (a bug: please report it).
UNEXPECTED = 1
#: Bad command line, config, data or output directory: nothing was started.
BAD_CONFIG = 2
#: A side assertion failed: the arm's server is not on the side of the fix it claims.
SIDE_ASSERTION_FAILED = 3
#: A server failed to start, died, hung or could not be stopped cleanly.
SERVER_FAILURE = 4
#: Too many requests failed after retries: the arm is not comparable.
TOO_MANY_ERRORS = 5
#: The arms differ in something the experiment does not allow.
ARMS_DIFFER = 6
#: The verdict is one the caller asked to fail on (``--fail-on``).
GATE_FAILED = 7
#: Interrupted by Ctrl-C (SIGINT), SIGTERM or SIGHUP (128 + the signal number: a closed terminal or ssh session
#: is a hangup); servers stopped, the run is resumable by rerunning the same command.
INTERRUPTED = 130
TERMINATED = 143
HANGUP = 129


class Failure(Exception):
    """A command stops with ``code`` and one message for its user."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
