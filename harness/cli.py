"""The ``abh`` command: ``run`` (Hydra app), ``eval``, ``ab``, ``compare``, ``power``, ``report``.

Each subcommand's code is imported only when used, so ``abh eval`` stays light: ``ab`` is in :mod:`harness.ab`,
``compare`` in :mod:`harness.cli_compare`, ``power`` in :mod:`harness.plan`, ``report`` in
:mod:`harness.cli_report`, ``run`` in :mod:`harness.orchestrate.run`.
"""

from __future__ import annotations

import argparse
import sys

from harness import exitcodes

USAGE = """usage: abh <command> [options]

commands:
  run      launch each arm's server, assert its side, evaluate, compare (Hydra: abh run experiment=NAME ...)
  eval     one eval against a server that is already running
  ab       evaluate two running servers (interleaved, with repeats) and compare them
  compare  paired comparison of stored evals
  power    minimum detectable effect and repeats needed
  report   (re)write report.html (and comparison.md) for a run, comparison or sweep directory

`abh <command> --help` for the options of one command."""


def eval_main(argv: list[str]) -> int:
    from harness.client import ClientConfig
    from harness.evaluate import EvalInterrupted, EvalOptions, ServerGone, format_summary, run_eval
    from harness.tasks import gsm8k

    ap = argparse.ArgumentParser(prog="abh eval", description="Run GSM8K against a running server.")
    ap.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    ap.add_argument("--api", choices=["sglang", "openai"], default="sglang")
    ap.add_argument("--out", required=True, help="eval directory (rerun the same command to resume)")
    ap.add_argument("--num-questions", type=int, default=1319)
    ap.add_argument("--parallel", type=int, default=1319)
    ap.add_argument("--data", default=None,
                    help="GSM8K test JSONL (or a directory with test.jsonl/train.jsonl); default: the shared copy "
                         "beside the checkout (../shared/data/gsm8k) when present, else openai/gsm8k via `datasets`")
    ap.add_argument("--train-data", default=None, help="train JSONL for --recipe heldout (default: beside --data)")
    ap.add_argument("--recipe", choices=list(gsm8k.RECIPES), default="sglang")
    ap.add_argument("--num-shots", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--model-path", default=None, help="override the model path the stop list is chosen by")
    ap.add_argument("--model", default="", help="OpenAI model name (default: first of /v1/models)")
    ap.add_argument("--retries", type=int, default=3)
    ap.add_argument("--request-timeout", type=float, default=3600.0, help="seconds per request, queueing included")
    ap.add_argument("--allow-noncanonical", action="store_true", help="accept a dataset that is not canonical GSM8K")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    try:
        test, train = gsm8k.load_splits(a.data, a.train_data, a.recipe, a.allow_noncanonical)
        recipe = gsm8k.RecipeConfig(name=a.recipe, num_questions=a.num_questions, num_shots=a.num_shots,
                                    max_new_tokens=a.max_new_tokens, model_path=a.model_path)
        gsm8k.GSM8K(test, recipe, train)  # bad options stop here, before any request
        ccfg = ClientConfig(url=a.url, api=a.api, parallel=a.parallel, retries=a.retries,
                            request_timeout_s=a.request_timeout, model=a.model)
    except (gsm8k.DatasetError, ValueError) as e:
        print(f"abh eval: error: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    try:
        summary = run_eval(test, recipe, ccfg, a.out, train, EvalOptions(progress=not a.no_progress))
    except ServerGone as e:
        print(f"abh eval: server failure: {e}", file=sys.stderr)
        return exitcodes.SERVER_FAILURE
    except EvalInterrupted as e:
        print(f"abh eval: interrupted by {e}; answers so far are in {a.out}. Rerun the same command to resume.",
              file=sys.stderr)
        return 128 + e.signum
    except Exception as e:  # noqa: BLE001 - one clear line, not a traceback, for operational errors
        from harness.store import StoreError

        if isinstance(e, StoreError | gsm8k.DatasetError):
            print(f"abh eval: error: {e}", file=sys.stderr)
            return exitcodes.BAD_CONFIG
        raise
    print(format_summary(summary))
    if summary["errors"]:
        print(f"{summary['errors']} request(s) failed after retries; rerun the same command to retry them.",
              file=sys.stderr)
        return exitcodes.TOO_MANY_ERRORS
    return exitcodes.OK


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else exitcodes.BAD_CONFIG
    cmd, rest = argv[0], argv[1:]
    if cmd == "eval":
        return eval_main(rest)
    if cmd == "ab":
        from harness.ab import ab_main

        return ab_main(rest)
    if cmd == "compare":
        from harness.cli_compare import compare_main

        return compare_main(rest)
    if cmd == "power":
        from harness.plan import power_main

        return power_main(rest)
    if cmd == "report":
        from harness.cli_report import report_main

        return report_main(rest)
    if cmd == "run":
        try:
            from harness.orchestrate.run import main as run_main
        except KeyboardInterrupt:  # Ctrl-C while loading: nothing was started
            return exitcodes.INTERRUPTED
        return run_main(rest)
    print(f"abh: unknown command {cmd!r}\n\n{USAGE}", file=sys.stderr)
    return exitcodes.BAD_CONFIG


if __name__ == "__main__":
    sys.exit(main())
