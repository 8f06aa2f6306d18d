"""``abh compare``: paired comparison of stored evals (``abh power`` lives in harness.analysis.planning).

``abh compare`` writes into ``--out``: ``comparison.json`` (:class:`harness.results.schema.Comparison`, with the arm
names and the command that made it), ``comparison.md`` (paste-ready), ``report.html``, and the answers of
every compared run as ``samples.parquet`` / ``samples.csv``. When the directories record scoring passes
(``scores.json``: arm A's reference pass in an ``--a`` directory, B's in a ``--b`` one, the A/A floor in an
``--aa`` one), ``comparison.json`` also gets the ``divergence`` object (:mod:`harness.analysis.divergence`). Its exit codes are those of ``abh run``:

- 2: bad command line, unreadable or incomparable evals (different questions, an unknown schema_version,
  an incomplete eval unless ``--allow-incomplete``, several evals of an arm that record neither a launch id nor
  a server URL unless ``--launches-from-passes``); nothing is written;
- 3 / 4: an eval records a failed side check / a failed arm;
- 5: the share of questions lost to request errors exceeds ``--max-error-rate`` (an arm with no answer too);
- 7: the verdict is one ``--fail-on`` asked to fail on (not a verdict about two server instances only, one
  launch per configuration, unless ``--assume-no-launch-shift`` states that launches do not shift accuracy);
- 0 otherwise, whatever the verdict.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import harness.results.arrow  # noqa: F401 - pyarrow's memory pool chosen before any other thread runs
from harness import exitcodes
from harness.analysis import identity
from harness.analysis.compare_settings import CompareError
from harness.analysis.comparison import TooFewAnswered, compare_dirs, failure_exit, format_summary
from harness.analysis.divergence import divergence_of_dirs, has_pass, pass_dirs
from harness.analysis.gate import ASSUME_FLAG, FAIL_ON, comparison_exit, exit_reason, gate_not_applied, gated
from harness.cli.flags import HelpFormatter, add_verdict_flags
from harness.report.divergence_section import terminal_line
from harness.report.headline import coloured, headline
from harness.report.terminal import result_lines
from harness.results import schema
from harness.results.dirlock import DirectoryInUse, DirLock
from harness.results.eval_store import StoreError, incomplete_reason, load_eval
from harness.results.fileio import OutputError, PlantedLink, check_dir
from harness.results.schema import ArmNames, EvalMeta, EvalSummary
from harness.serving.untrusted import printable
from harness.stats.verdict import DEFAULT_MAX_ERROR_RATE, IDENTICAL
from harness.tasks.row_check import row_check
from harness.util.paths import output_problem
from harness.util.redact import redact_argv


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="abh compare", description="Paired comparison of two arms' stored evals. Effects and margins are in percentage points "
                                             "(pp); --max-error-rate is a fraction.",
                                 formatter_class=HelpFormatter)
    ap.add_argument("--a", action="append", default=None, type=Path, metavar="DIR",
                    help="eval directory of arm A (repeat the option for repeats)")
    ap.add_argument("--b", action="append", default=None, type=Path, metavar="DIR",
                    help="eval directory of arm B (repeat the option for repeats)")
    ap.add_argument("--lm-eval", nargs=2, type=Path, default=None, metavar=("A_SAMPLES", "B_SAMPLES"),
                    help="instead of --a/--b: the samples lm-evaluation-harness wrote with --log_samples for the two "
                         "servers (a samples_<task>_<date>.jsonl file, or the directory holding them); documents are "
                         "paired by doc_id, every task/filter/metric is compared (Holm across them)")
    ap.add_argument("--aa", action="append", default=[], type=Path, metavar="DIR",
                    help="extra A/A runs of arm A's configuration (noise floor); a directory holding only a "
                         "scoring pass (scores.json, no eval) is the divergence's A/A floor")
    ap.add_argument("--out", required=True, type=Path, metavar="DIR",
                    help="comparison directory: comparison.json, comparison.md and the report are written there")
    ap.add_argument("--a-name", default=None, metavar="NAME",
                    help="name of arm A in the outputs (default: the arm its eval.json names, else A)")
    ap.add_argument("--b-name", default=None, metavar="NAME",
                    help="name of arm B in the outputs (default: the arm its eval.json names, else B)")
    add_verdict_flags(ap, "the question asked; with --margin a superiority run may still show equivalence; "
                          "noninferiority: one-sided at alpha/2, B no worse than A by more than --margin; "
                          "identical: B's outputs bit-identical to A's, on a floor of exactly zero (needs --aa)",
                      identical=True)
    ap.add_argument("--resamples", type=int, default=None, metavar="N",
                    help="bootstrap resamples of the diagnostics' intervals and of the divergence's test (default: "
                         "each one's own, as abh run uses, so a run's stored divergence is reused)")
    ap.add_argument("--max-error-rate", type=float, default=DEFAULT_MAX_ERROR_RATE, metavar="FRACTION",
                    help="share of questions dropped for request errors above which arms are not comparable "
                         f"(exit {exitcodes.TOO_MANY_ERRORS})")
    ap.add_argument("--allow-incomplete", action="store_true",
                    help="compare evals that did not finish (their missing questions are dropped like errors)")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="the statistician's summary on the terminal (the test, its df, launch variance, psi)")
    ap.add_argument("--fail-on", choices=FAIL_ON, default=None,
                    help=f"exit {exitcodes.GATE_FAILED} when the verdict is regressed / not shown non-inferior / "
                         "a difference either way (not on a verdict about two server instances only, without "
                         f"{ASSUME_FLAG})")
    ap.add_argument(ASSUME_FLAG, action="store_true",
                    help="state that server launches do not shift accuracy: with one launch per arm the verdict is "
                         "about the two server instances only, and --fail-on acts on it only with this flag "
                         "(recorded in comparison.json assumptions and in the markdown)")
    ap.add_argument("--launches-from-passes", action="store_true",
                    help="evals that record no launch id (a standalone abh eval) each ran on a server launch of "
                         "their own (default: the evals of one server URL are one launch; without a URL the "
                         "comparison is refused)")
    return ap


def _resamples(args: argparse.Namespace) -> dict[str, Any]:
    """``--resamples`` where given; else each computation keeps its own default (as abh run does)."""
    return {} if args.resamples is None else {"n_resamples": args.resamples}


def _load_evals(dirs: Sequence[Path], allow_incomplete: bool) -> list[tuple[Path, EvalMeta, EvalSummary | None]]:
    """Each eval's eval.json and summary; CompareError (exit 2) for an unreadable or incomplete one."""
    out = []
    for d in dirs:
        try:
            meta, samples, summary = load_eval(d, row_check)
        except (StoreError, OSError) as e:
            raise CompareError(f"cannot read eval {d}: {e}") from None
        why = incomplete_reason(meta, samples, summary)
        if why is not None and not allow_incomplete:
            raise CompareError(f"refusing to compare: eval {d} is incomplete: {why}; rerun the command that "
                               "wrote it to finish it, or pass --allow-incomplete to compare the questions it has")
        out.append((d, meta, summary))
    return out


def _name(given: str | None, metas: Sequence[EvalMeta], default: str) -> str:
    """The arm's name: as given, else the one name its evals record, else ``default``."""
    if given is not None:
        return printable(given, one_line=True)  # stored escaped: no report or table gets a control character
    recorded = {str(m["arm"]) for m in metas if m.get("arm")}
    return printable(recorded.pop(), one_line=True) if len(recorded) == 1 else default


def compare_main(argv: Sequence[str] | None = None) -> int:
    """``abh compare``: see the module docstring for what it writes and its exit codes."""
    ap = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    if args.lm_eval is not None and (args.a or args.b):
        ap.error("give either --lm-eval A_SAMPLES B_SAMPLES or --a/--b eval directories, not both")
    if args.lm_eval is None and not (args.a and args.b):
        ap.error("the following arguments are required: --a, --b (or --lm-eval A_SAMPLES B_SAMPLES)")
    for opt, val in (("--a-name", args.a_name), ("--b-name", args.b_name)):
        if val is not None and not val.strip():
            ap.error(f"{opt} must not be empty")
    if args.resamples is not None and args.resamples < 1:
        ap.error(f"--resamples must be at least 1, not {args.resamples}")
    if args.out.exists() and not args.out.is_dir():
        print(f"abh compare: --out {args.out} exists and is not a directory", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    unsafe = output_problem(args.out)
    if unsafe:
        print(f"abh compare: error: {unsafe}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    lock = DirLock(args.out, "comparison directory")
    try:
        if args.out.is_dir():
            lock.acquire()  # another abh writing there: stop before the work, not after it
            check_dir(args.out)  # and a link planted among its files
        if args.lm_eval is not None:
            return lm_eval_main(args, argv)
        return _compare(args, argv, lock)
    except (DirectoryInUse, PlantedLink) as e:
        print(f"abh compare: error: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    except OutputError as e:  # a full disk, a read-only --out: the inputs are untouched, rerun when it is fixed
        print(f"abh compare: error: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    except OSError as e:  # the same, from a writer that is not abh's own (the samples export)
        print(f"abh compare: error: cannot write into {args.out}: {e.strerror or e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    finally:
        lock.release()


def _compare(args: argparse.Namespace, argv: list[str], lock: DirLock) -> int:
    # an --aa directory with a scoring pass and no eval is the divergence's floor only, not an accuracy run
    aa_evals = [d for d in args.aa if not (has_pass(d) and not (d / schema.EVAL_FILE).exists())]
    if args.hypothesis == IDENTICAL and not aa_evals and len(args.a) < 2:
        print("abh compare: --hypothesis identical needs an A/A floor: a second eval of arm A's configuration "
              "(--aa DIR, or a second --a)", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    try:
        evals = {role: _load_evals(dirs, args.allow_incomplete)
                 for role, dirs in (("a", args.a), ("b", args.b), ("aa", aa_evals))}
        c = compare_dirs(args.a, args.b, margin=None if args.margin is None else args.margin / 100,
                         alpha=args.alpha, seed=args.seed, aa_dirs=aa_evals, max_error_rate=args.max_error_rate,
                         min_effect=None if args.min_effect is None else args.min_effect / 100,
                         hypothesis=args.hypothesis, assume_no_launch_shift=args.assume_no_launch_shift,
                         **_resamples(args), launches_from_passes=args.launches_from_passes)
    except CompareError as e:
        print(f"abh compare: {e}", file=sys.stderr)
        return e.exit_code if isinstance(e, TooFewAnswered) else exitcodes.BAD_CONFIG
    div = divergence_of_dirs(args.a, args.b, args.aa, alpha=args.alpha, seed=args.seed, **_resamples(args))
    names = ArmNames(a=_name(args.a_name, [m for _, m, _ in evals["a"] + evals["aa"]], "A"),
                     b=_name(args.b_name, [m for _, m, _ in evals["b"]], "B"))
    c = replace(c, divergence=div, arm_names=names, command=["abh", "compare", *redact_argv(argv)])
    if div is not None:
        ref, ab, floor, _, _ = pass_dirs(args.a, args.b, args.aa)
        c = identity.with_passes(c, args.a, args.b, aa_evals, (ref, ab, floor))
    args.out.mkdir(parents=True, exist_ok=True)
    if not lock.held:
        lock.acquire()
    schema.write_comparison(args.out / schema.COMPARISON_FILE, c)
    if args.verbose:
        print(printable(format_summary(c)))
        if div is not None:
            print(terminal_line(div))
    else:
        title = f"{names.b} (B) vs {names.a} (A), {c.n} questions"
        print(printable("\n".join(result_lines(c, title, how="--verbose, comparison.md or report.html"))))
    print(f"wrote {args.out / schema.COMPARISON_FILE}")
    from harness.report import export_samples, write_markdown, write_report

    print(f"wrote {write_markdown(args.out)}")
    print(f"wrote {write_report(args.out)}")
    for path in export_samples(args.out):
        print(f"wrote {path}")

    recorded = {failure_exit(m, s) for role in evals.values() for _, m, s in role}
    failed = next((code for code in (exitcodes.SIDE_ASSERTION_FAILED, exitcodes.SERVER_FAILURE) if code in recorded),
                  exitcodes.OK)
    code = comparison_exit(c, args.fail_on, failed)
    reason = exit_reason(code, c, args.fail_on) or gate_not_applied(c, args.fail_on, "compare")
    if reason:
        print(f"abh compare: {reason}", file=sys.stderr)
    print(coloured(headline(c), c.verdict, sys.stdout), flush=True)  # the verdict, last
    return code


def lm_eval_main(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """``abh compare --lm-eval A_SAMPLES B_SAMPLES``: lm-eval's samples written as abh evals under
    ``--out/lm_eval/{a,b}/<task>/``, then abh's paired comparison of each task/filter/metric (one: comparison.json
    at ``--out``; several: tasks.json and tasks/<key>/, Holm across them). Exit codes as for --a/--b."""
    from harness.analysis.multitask import TaskResult, compare_tasks, format_tasks
    from harness.orchestrate.tasks_phase import write_task_outputs
    from harness.report import write_markdown, write_report
    from harness.results import lmeval_samples as lm

    names = ArmNames(a=args.a_name or "A", b=args.b_name or "B")
    command = ["abh", "compare", *redact_argv(list(argv))]
    kwargs = {"margin": None if args.margin is None else args.margin / 100, "alpha": args.alpha, "seed": args.seed,
              "assume_no_launch_shift": args.assume_no_launch_shift,
              "max_error_rate": args.max_error_rate, "hypothesis": args.hypothesis, **_resamples(args),
              "min_effect": None if args.min_effect is None else args.min_effect / 100}
    try:
        sides = [lm.read_all(lm.sample_files(Path(p))) for p in args.lm_eval]
        pairs = lm.pair(sides[0], sides[1])
        comparisons, results = {}, []
        for key, sa, sb in pairs:
            safe = key.replace("/", "__")
            ids = sorted(set(sa.docs) | set(sb.docs))
            da = lm.to_eval_dir(sa, ids, args.out / "lm_eval" / "a" / safe, names.a)
            db = lm.to_eval_dir(sb, ids, args.out / "lm_eval" / "b" / safe, names.b)
            c = replace(compare_dirs([da], [db], **kwargs), arm_names=names, command=command)
            comparisons[safe] = c
            results.append(TaskResult(key=safe, task=sa.task, recipe=f"{sa.filter} {sa.metric}",
                                      dir=f"{schema.TASKS_DIR}/{safe}", comparison=c,
                                      upstream="lm-evaluation-harness --log_samples"))
    except (CompareError, lm.LmEvalError) as e:
        print(f"abh compare: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    if len(results) == 1:
        c = next(iter(comparisons.values()))
        schema.write_comparison(args.out / schema.COMPARISON_FILE, c)
        print(f"lm-eval {pairs[0][0]}: {len(c.flips)} documents differ of {c.n_total}")
        print(format_summary(c))
        for path in (args.out / schema.COMPARISON_FILE, write_markdown(args.out), write_report(args.out)):
            print(f"wrote {path}")
        code = comparison_exit(c, args.fail_on)
        reason = exit_reason(code, c, args.fail_on) or gate_not_applied(c, args.fail_on, "compare")
        if reason:
            print(f"abh compare: {reason}", file=sys.stderr)
        return code
    tc = replace(compare_tasks(results, alpha=args.alpha, hypothesis=args.hypothesis), arm_names=names,
                 command=command)
    write_task_outputs(args.out, comparisons, tc, report=True)
    print(format_tasks(tc))
    for path in (args.out / schema.TASKS_FILE, write_markdown(args.out), write_report(args.out)):
        print(f"wrote {path}")
    from harness.analysis.gate import gate_exit

    codes = [comparison_exit(c) for c in comparisons.values()]
    ungated = next((c for c in comparisons.values() if not gated(c)), None)
    code = max(codes, default=exitcodes.OK) or gate_exit(tc.decision, None if ungated else args.fail_on)
    if code:
        print(f"abh compare: overall decision {tc.decision} (exit {code})", file=sys.stderr)
    elif ungated is not None and args.fail_on is not None:
        print(f"abh compare: overall decision {tc.decision}: {gate_not_applied(ungated, args.fail_on, 'compare')}",
              file=sys.stderr)
    return code
