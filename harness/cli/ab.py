"""``abh ab URL_A URL_B --out DIR``: evaluate two servers that are already running, then compare them.

The evals run in the order A r1, B r1, A r2, B r2, ... (drift hits both arms alike) into the run directory
layout of ``abh run``: ``evals/a/r<k>/`` and ``evals/b/r<k>/`` (each an ``abh eval`` directory),
``comparison.json``, ``summary.json`` (:class:`harness.results.schema.RunSummary`), ``comparison.md`` and
``report.html``. Rerunning the same command resumes: an eval that finished without request errors is kept,
any other sends only its missing and failed questions. A rerun with the two URLs swapped is refused.

abh did not launch these servers, so it asserts nothing about which side of a change each is on; each eval
records the server's own account of itself (``/get_server_info``) and ``launch``, a stable id of its URL
(:func:`launch_id`): all evals of one URL came from one launch of its server, which the statistics treat as
dependent.

Exit codes are those of ``abh run``: 0 finished; 2 bad command line, data or output directory (nothing is
started); 4 a server is not reachable or stopped serving (answers so far are kept); 5 too many request
errors; 7 the verdict is one ``--fail-on`` asked to fail on; 130 / 143 interrupted by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import exitcodes
from harness.analysis.comparison import DEFAULT_MAX_ERROR_RATE
from harness.analysis.gate import FAIL_ON
from harness.orchestrate.interrupts import Interrupted, Interrupts
from harness.results import schema

if TYPE_CHECKING:
    from harness.tasks.gsm8k import RecipeConfig


ROLES = ("a", "b")
DEFAULT_NAMES = ("A", "B")
#: Seconds the reachability probe of each server waits for any HTTP answer.
PROBE_TIMEOUT_S = 10.0


class ABFailure(Exception):
    """A failure with its exit code and one line saying what happened."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------------------------ URLs
def check_url(url: str, what: str) -> str:
    """``url`` without a trailing slash if it is an http(s) URL with a host; else ABFailure (exit 2)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as e:
        raise ABFailure(exitcodes.BAD_CONFIG, f"{what} {url!r} is not a valid URL ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ABFailure(exitcodes.BAD_CONFIG, f"{what} {url!r} is not an http(s) URL with a host, "
                        "e.g. http://127.0.0.1:30000")
    if parts.query or parts.fragment:
        raise ABFailure(exitcodes.BAD_CONFIG, f"{what} {url!r}: give the server's base URL, without a query "
                        "or fragment")
    return url.rstrip("/")


def launch_id(url: str) -> str:
    """A stable id of the server at ``url`` (abh did not launch it: one URL is one launch): ``url:`` and the
    URL's scheme, host (lower case) and port and path, without credentials."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"url:{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when something answers HTTP at ``url`` (any status), else why not (refused, no route, timeout)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # as the eval's client: no proxy
    try:
        with opener.open(url + "/health", timeout=timeout_s):
            return None
    except urllib.error.HTTPError:
        return None  # it answers HTTP; whether it serves GSM8K is the eval's business
    except urllib.error.URLError as e:
        return str(e.reason)
    except (OSError, ValueError) as e:  # timeouts, resets, a malformed answer
        return f"{type(e).__name__}: {e}"


# ------------------------------------------------------------------------------------------ the run
@dataclass
class ABOptions:
    """What ``abh ab`` was asked (statistics in fractions: ``margin`` 0.01 is 1 pp)."""

    urls: tuple[str, str]
    out: Path
    api: str = "sglang"
    repeats: int = 1
    names: tuple[str, str] = DEFAULT_NAMES
    data: str | None = None
    allow_noncanonical: bool = False
    num_questions: int = 1319
    parallel: int = 1319
    margin: float | None = None
    hypothesis: str = "superiority"
    alpha: float = 0.05
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    fail_on: str | None = None
    progress: bool = True
    command: tuple[str, ...] = ()


def schedule(repeats: int) -> list[tuple[str, int]]:
    """(role, repeat) in the order they run: A r1, B r1, A r2, B r2, ..."""
    return [(role, r) for r in range(1, repeats + 1) for role in ROLES]


def _rel(role: str, repeat: int) -> str:
    return f"evals/{role}/r{repeat}"


def _say(msg: str) -> None:
    print(f"[abh] {msg}", file=sys.stderr, flush=True)


def _finished(eval_dir: Path) -> bool:
    """True when the eval finished without request errors (a rerun keeps it); anything else is resumed."""
    path = eval_dir / schema.EVAL_SUMMARY_FILE
    if not path.exists():
        return False
    s = schema.load_eval_summary(path)
    return bool(s.get("complete")) and not s.get("errors")


class AB:
    """One ``abh ab`` run in its directory: check, evaluate in interleaved order, compare, report."""

    def __init__(self, opts: ABOptions, signals: Interrupts):
        from harness.serving.client import ClientConfig
        from harness.tasks import gsm8k

        self.o, self.signals = opts, signals
        self.urls = {role: check_url(u, f"URL_{role.upper()}") for role, u in zip(ROLES, opts.urls, strict=True)}
        self.names = dict(zip(ROLES, opts.names, strict=True))
        if opts.out.exists() and not opts.out.is_dir():
            raise ABFailure(exitcodes.BAD_CONFIG, f"--out {opts.out} exists and is not a directory")
        try:
            self.test, _ = gsm8k.load_splits(opts.data, None, "sglang", opts.allow_noncanonical)
            task = gsm8k.GSM8K(self.test, self._recipe())  # bad options stop here, before any request
            for url in self.urls.values():
                ClientConfig(url=url, api=opts.api, parallel=opts.parallel)
        except (gsm8k.DatasetError, ValueError) as e:
            raise ABFailure(exitcodes.BAD_CONFIG, str(e)) from None
        self._refuse_other_questions({"dataset_sha256": self.test.sha256, "api": opts.api,
                                      "indices": [q.index for q in task.questions]})
        self._refuse_swapped()

    def _recipe(self) -> RecipeConfig:
        from harness.tasks.gsm8k import RecipeConfig

        return RecipeConfig(name="sglang", num_questions=self.o.num_questions)

    def _stored(self) -> list[tuple[str, Path]]:
        """(role, eval directory) of every eval already in the run directory."""
        return [(role, d) for role in ROLES for d in sorted((self.o.out / "evals" / role).glob("r*"))
                if (d / schema.EVAL_FILE).exists()]

    def _refuse_other_questions(self, asked: dict[str, Any]) -> None:
        """A rerun that asks other questions (``--num-questions``, ``--data``, ``--api``) would compare the
        stored evals, kept as finished, instead of what it asks: refused, as ``abh run`` refuses a changed config."""
        what = {"dataset_sha256": "dataset (--data)", "api": "API (--api)", "indices": "question set (--num-questions)"}
        for _, d in self._stored():
            try:
                meta = schema.load_eval_meta(d / schema.EVAL_FILE)
            except schema.SchemaError as e:
                raise ABFailure(exitcodes.BAD_CONFIG, str(e)) from None
            for key, want in asked.items():
                if meta.get(key) != want:
                    raise ABFailure(exitcodes.BAD_CONFIG,
                                    f"{d} holds an eval of another {what[key]} than this command asks; its results "
                                    "would be mixed with this one's. Use another --out, or delete it")

    def _recorded_launches(self, role: str) -> set[str]:
        """The launch ids the stored evals of ``role`` recorded (none before a first run)."""
        launches = (schema.load_eval_meta(d / schema.EVAL_FILE).get("launch") for r, d in self._stored() if r == role)
        return {str(x) for x in launches if x}

    def _refuse_swapped(self) -> None:
        """A rerun with URL_A and URL_B swapped would mix each arm's answers into the other's evals."""
        for role, other in (("a", "b"), ("b", "a")):
            mine = launch_id(self.urls[role])
            if mine != launch_id(self.urls[other]) and mine in self._recorded_launches(other):
                raise ABFailure(exitcodes.BAD_CONFIG,
                                f"{self.o.out} holds evals of {self.urls[role]} as arm {other.upper()}, and this "
                                f"command gives it as URL_{role.upper()}: the URLs are swapped. Give them in the "
                                "order of the first run, or use another --out")

    # ------------------------------------------------------------------ measuring
    def measure(self) -> None:
        items = schedule(self.o.repeats)
        pending = [(role, r) for role, r in items if not _finished(self.o.out / _rel(role, r))]
        for role in ROLES:
            if any(p[0] == role for p in pending):
                why = probe(self.urls[role])
                if why is not None:
                    raise ABFailure(exitcodes.SERVER_FAILURE,
                                    f"server {role.upper()} at {self.urls[role]} is not reachable: {why}")
        for n, (role, r) in enumerate(items, 1):
            label = f"[{n}/{len(items)}] {_rel(role, r)}"
            if (role, r) not in pending:
                _say(f"{label}: already complete, kept")
                continue
            _say(f"{label} ({self.names[role]}) on {self.urls[role]}")
            self.evaluate(role, r)

    def evaluate(self, role: str, repeat: int) -> None:
        from harness.measure.evaluation import EvalOptions, ServerGone, run_eval_async
        from harness.results.eval_store import StoreError
        from harness.serving.client import ClientConfig

        url, out = self.urls[role], self.o.out / _rel(role, repeat)
        ccfg = ClientConfig(url=url, api=self.o.api, parallel=self.o.parallel)
        launch = launch_id(url)
        meta = {"arm": self.names[role], "role": role, "repeat": repeat, "launch": launch, "instance": launch}
        try:
            summary = self.signals.run_async(run_eval_async(self.test, self._recipe(), ccfg, out, None,
                                                      EvalOptions(progress=self.o.progress, extra_meta=meta)))
        except ServerGone as e:
            raise ABFailure(exitcodes.SERVER_FAILURE,
                            f"server {role.upper()} at {url} failed during {_rel(role, repeat)}: {e}. Answers so "
                            "far are kept; rerun the same command to resume") from None
        except StoreError as e:
            raise ABFailure(exitcodes.BAD_CONFIG, str(e)) from None
        acc = summary.get("accuracy")
        _say(f"  {_rel(role, repeat)}: " + (f"accuracy {acc:.4f}, errors {summary['errors']}" if acc is not None
                                            else f"no answers, errors {summary['errors']}"))

    # ------------------------------------------------------------------ statistics and report
    def finish(self) -> int:
        from harness.analysis.comparison import CompareError, compare_dirs, format_summary
        from harness.analysis.gate import comparison_exit
        from harness.cli.compare import explain_exit
        from harness.report import write_markdown, write_report

        o = self.o
        dirs = {role: [o.out / _rel(role, r) for r in range(1, o.repeats + 1)] for role in ROLES}
        try:
            c = compare_dirs(dirs["a"], dirs["b"], margin=o.margin, alpha=o.alpha, max_error_rate=o.max_error_rate,
                             hypothesis=o.hypothesis)
        except CompareError as e:
            raise ABFailure(exitcodes.TOO_MANY_ERRORS, f"the arms cannot be compared: {e}. Rerun the same command "
                            "to retry the failed requests") from None
        c["arm_names"] = {"a": self.names["a"], "b": self.names["b"]}
        c["command"] = list(o.command)
        schema.write_comparison(o.out / schema.COMPARISON_FILE, c)
        code = comparison_exit(c, o.fail_on)
        summary = schema.run_summary(c, experiment="ab", repeats=o.repeats, aa_control=False, exit_code=code)
        schema.write_run_summary(o.out / schema.RUN_SUMMARY_FILE, summary)
        print(format_summary(c))
        print(f"wrote {o.out / schema.COMPARISON_FILE}")
        print(f"wrote {o.out / schema.RUN_SUMMARY_FILE}")
        print(f"wrote {write_markdown(o.out)}")
        print(f"wrote {write_report(o.out)}")
        explain_exit("abh ab", code, c, o.fail_on)
        return code


def run_ab(opts: ABOptions) -> int:
    """Run (or resume) ``abh ab``; return its exit code. Failures print one line on stderr."""
    with Interrupts() as signals:
        try:
            ab = AB(opts, signals)
            ab.measure()
            return ab.finish()
        except ABFailure as e:
            print(f"abh ab: {'error: ' if e.code == exitcodes.BAD_CONFIG else ''}{e}", file=sys.stderr)
            return e.code
        except Interrupted as e:
            print(f"abh ab: interrupted by {e}; answers so far are in {opts.out}. Rerun the same command to "
                  "resume.", file=sys.stderr)
            return 128 + e.signum
        except schema.SchemaError as e:
            print(f"abh ab: error: {e}", file=sys.stderr)
            return exitcodes.BAD_CONFIG


# ------------------------------------------------------------------------------------------ command line
def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="abh ab", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Evaluate two running servers (interleaved: A r1, B r1, A r2, ...) and compare them; "
                    "rerun the same command to resume.")
    ap.add_argument("url_a", metavar="URL_A", help="base URL of arm A's server (the baseline)")
    ap.add_argument("url_b", metavar="URL_B", help="base URL of arm B's server (the change)")
    ap.add_argument("--out", required=True, type=Path, metavar="DIR", help="run directory")
    ap.add_argument("--api", choices=["sglang", "openai"], default="sglang",
                    help="SGLang's /generate or OpenAI's /v1/completions")
    ap.add_argument("--repeats", type=int, default=1, metavar="R", help="evals per arm")
    ap.add_argument("--names", default=",".join(DEFAULT_NAMES), metavar="A,B", help="the arms' names")
    ap.add_argument("--data", default=None, metavar="PATH",
                    help="GSM8K test JSONL; None: as abh eval, the shared copy beside the checkout, else "
                         "openai/gsm8k")
    ap.add_argument("--allow-noncanonical", action="store_true", help="accept a dataset that is not canonical GSM8K")
    ap.add_argument("--num-questions", type=int, default=1319, metavar="N", help="questions per eval (the first N)")
    ap.add_argument("--parallel", type=int, default=1319, metavar="P", help="requests in flight")
    ap.add_argument("--margin", type=float, default=None, metavar="PP",
                    help="equivalence / non-inferiority margin in percentage points")
    ap.add_argument("--hypothesis", choices=["superiority", "noninferiority", "equivalence"], default="superiority",
                    help="the question asked (noninferiority and equivalence need --margin)")
    ap.add_argument("--alpha", type=float, default=0.05, metavar="A", help="significance level")
    ap.add_argument("--max-error-rate", type=float, default=DEFAULT_MAX_ERROR_RATE, metavar="FRACTION",
                    help="share of questions lost to request errors above which the arms are not comparable "
                         f"(exit {exitcodes.TOO_MANY_ERRORS})")
    ap.add_argument("--fail-on", choices=FAIL_ON, default=None,
                    help=f"exit {exitcodes.GATE_FAILED} when the verdict is regressed / not shown non-inferior / "
                         "a difference either way")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return ap


def parse_names(text: str) -> tuple[str, str]:
    """``base,fix`` -> ("base", "fix"); ValueError unless two distinct non-empty names."""
    names = tuple(n.strip() for n in text.split(","))
    if len(names) != 2 or not all(names):
        raise ValueError(f"--names takes two non-empty names separated by a comma (e.g. base,fix), not {text!r}")
    if names[0] == names[1]:
        raise ValueError(f"--names: the two arms need different names, not {text!r} twice")
    return names[0], names[1]


def ab_main(argv: Sequence[str] | None = None) -> int:
    """``abh ab``: see the module docstring for what it writes and its exit codes."""
    from harness.util.redact import redact_argv

    ap = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    try:
        names = parse_names(a.names)
    except ValueError as e:
        ap.error(str(e))
    for opt, val, ok in (("--repeats", a.repeats, a.repeats >= 1), ("--num-questions", a.num_questions,
                                                                      a.num_questions >= 1),
                         ("--parallel", a.parallel, a.parallel >= 1), ("--alpha", a.alpha, 0 < a.alpha < 0.5),
                         ("--margin", a.margin, a.margin is None or a.margin > 0),
                         ("--max-error-rate", a.max_error_rate, 0 <= a.max_error_rate <= 1)):
        if not ok:
            ap.error(f"{opt} {val} is out of range")
    opts = ABOptions(urls=(a.url_a, a.url_b), out=a.out, api=a.api, repeats=a.repeats, names=names, data=a.data,
                     allow_noncanonical=a.allow_noncanonical, num_questions=a.num_questions, parallel=a.parallel,
                     margin=None if a.margin is None else a.margin / 100, alpha=a.alpha,
                     hypothesis=a.hypothesis,
                     max_error_rate=a.max_error_rate, fail_on=a.fail_on, progress=not a.no_progress,
                     command=("abh", "ab", *redact_argv(argv)))
    return run_ab(opts)
