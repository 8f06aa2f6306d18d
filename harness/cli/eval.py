"""``abh eval --url URL --out DIR``: one eval against a server that is already running (rerun to resume)."""

from __future__ import annotations

import argparse
import math
import sys

from harness import exitcodes
from harness.cli.flags import HelpFormatter, add_api_flag, add_client_flags, add_task_flags, as_flags


class _Signalled(BaseException):
    """SIGINT/SIGTERM/SIGHUP before the eval's own handlers were installed."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def eval_main(argv: list[str]) -> int:
    import signal

    def on_signal(signum: int, frame: object) -> None:  # until the eval's own loop handlers take over
        raise _Signalled(signum)

    # First thing, before the heavy imports: a signal at any moment is honoured (even where the shell
    # started us with SIGINT ignored, as it does for `abh eval ... &` in a script).
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        return _eval(argv)
    except _Signalled as e:
        print(f"abh eval: interrupted by {signal.Signals(e.signum).name}; rerun the same command to resume.",
              file=sys.stderr)
        return 128 + e.signum
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _parser() -> argparse.ArgumentParser:
    from harness.tasks import registry

    ap = argparse.ArgumentParser(prog="abh eval", description="Run a task (GSM8K by default) against a running server.",
                                 formatter_class=HelpFormatter)
    ap.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    add_api_flag(ap)
    ap.add_argument("--out", required=True, metavar="DIR", help="eval directory (rerun the same command to resume)")
    ap.add_argument("--task", choices=list(registry.TASK_NAMES), default="gsm8k", help="the benchmark")
    ap.add_argument("--data", default=None, metavar="PATH",
                    help="the task's data: a file or directory, hf:REPO[:CONFIG] or an URL; default: the embedded copy "
                         "(GSM8K and MGSM-en; MMLU and GPQA are not shipped)")
    ap.add_argument("--repeats", type=int, metavar="N", default=None,
                    help="times each question is asked (GPQA: each with its own choice order; default 8)")
    ap.add_argument("--model-path", default=None, help="override the model path the stop list is chosen by")
    add_task_flags(ap)
    add_client_flags(ap)
    ap.add_argument("--wait-ready", type=float, metavar="S", default=0.0,
                    help="wait up to this many seconds for the server to load before the first request")
    return ap


def _eval(argv: list[str]) -> int:
    from pathlib import Path

    from harness.measure import evaluation
    from harness.measure.runner import run
    from harness.results.eval_store import OutputError, StoreError
    from harness.serving.client import ClientConfig
    from harness.tasks import registry
    from harness.tasks.interface import DatasetError
    from harness.util.paths import output_problem

    a = _parser().parse_args(argv)
    try:
        out = Path(a.out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"--out {a.out} exists and is not a directory")
        unsafe = output_problem(out)
        if unsafe:
            raise ValueError(unsafe)
        if not math.isfinite(a.wait_ready) or a.wait_ready < 0:
            raise ValueError(f"--wait-ready must be a finite number >= 0, not {a.wait_ready!r}")
        spec = registry.TaskSpec(name=a.task, recipe=a.recipe or "", num_questions=a.num_questions,
                                 num_shots=a.num_shots, max_new_tokens=a.max_new_tokens, data_path=a.data or "",
                                 train_path=a.train_data or "", allow_noncanonical=a.allow_noncanonical,
                                 repeats=a.repeats)
        bad = registry.problems(spec, "task")
        if bad:
            raise ValueError(bad[0])
        data = registry.load_data(spec)
        probe = registry.build(spec, data, a.model_path)  # bad options stop here, before any request
        try:
            ccfg = ClientConfig(url=a.url, api=registry.api_for(probe, a.api), parallel=a.parallel,
                                retries=a.retries, request_timeout_s=a.request_timeout,
                                stall_timeout_s=a.stall_timeout, progress_timeout_s=a.progress_timeout,
                                model=a.model, api_key_env=a.api_key_env,
                                max_bytes_per_token=a.max_bytes_per_token)
        except ValueError as e:  # the settings' own names, as the flags that set them
            raise ValueError(as_flags(str(e))) from None
    except (DatasetError, ValueError) as e:
        print(f"abh eval: error: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    opts = evaluation.EvalOptions(progress=not a.no_progress, wait_ready_s=a.wait_ready,
                                  on_status=lambda s: print(f"abh eval: {s}", file=sys.stderr))
    try:
        summary = run(evaluation.run_task_eval_async(
            lambda mp: registry.build(spec, data, a.model_path or mp), ccfg, out, opts))
    except OutputError as e:  # one clear line, not a traceback, for operational errors
        kept = (f"; the answers written before it are kept in {a.out}: free space (or fix the permissions) "
                "and rerun the same command to resume") if out.is_dir() else ""
        print(f"abh eval: error: {e}{kept}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    except (evaluation.WrongServer, StoreError, DatasetError) as e:  # WrongServer before its base ServerGone
        print(f"abh eval: error: {e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    except evaluation.ServerGone as e:
        kept = f"; answers so far are in {a.out}, rerun the same command to resume" if out.is_dir() else ""
        print(f"abh eval: server failure: {e}{kept}", file=sys.stderr)
        return exitcodes.SERVER_FAILURE
    except evaluation.Interrupted as e:
        print(f"abh eval: interrupted by {e}; answers so far are in {a.out}. Rerun the same command to resume."
              if out.is_dir() else f"abh eval: interrupted by {e} before any answer; nothing was written.",
              file=sys.stderr)
        return 128 + e.signum
    except OSError as e:  # a directory that cannot be made or opened
        print(f"abh eval: error: {a.out}: {e.strerror or e}", file=sys.stderr)
        return exitcodes.BAD_CONFIG
    print(evaluation.format_summary(summary))
    if summary["errors"]:
        print(f"{summary['errors']} request(s) failed after retries; rerun the same command to retry them.",
              file=sys.stderr)
        return exitcodes.TOO_MANY_ERRORS
    return exitcodes.OK
