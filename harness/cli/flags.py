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


def add_verdict_flags(ap: argparse.ArgumentParser, hypothesis_help: str, identical: bool = False) -> None:
    """The flags of ``abh ab`` and ``abh compare`` that set the verdict's question and resampling (``identical``:
    the no-op proof is one of the questions)."""
    from harness.stats.verdict import HYPOTHESES, QUESTIONS  # only these two commands need the statistics

    ap.add_argument("--margin", type=float, default=None, metavar="PP",
                    help="equivalence / non-inferiority margin, in percentage points")
    ap.add_argument("--hypothesis", choices=list(QUESTIONS if identical else HYPOTHESES), default="superiority",
                    help=hypothesis_help)
    ap.add_argument("--min-effect", type=float, default=None, metavar="PP",
                    help="practical effect size, in percentage points, a verdict of improved/regressed needs "
                         "(at least --margin when both are given)")
    ap.add_argument("--alpha", type=float, default=0.05, metavar="A", help="significance level")
    ap.add_argument("--seed", type=int, default=0, metavar="N",
                    help="seed of the resampling (bootstrap, permutation): the same seed gives the same numbers")


def add_api_flag(ap: argparse.ArgumentParser) -> None:
    """``--api``, the protocol of ``abh eval`` and ``abh ab``."""
    from harness.serving.wire import API_NAMES

    ap.add_argument("--api", choices=list(API_NAMES), default="sglang",
                    help="sglang: POST /generate (SGLang's recipe byte for byte); openai: POST /v1/completions; "
                         "vllm: that with every sampling field vLLM takes; chat: POST /v1/chat/completions (a chat "
                         "recipe is sent to the chat endpoint whatever this is)")


def add_client_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of ``abh eval`` and ``abh ab`` that set the client's retries, timeouts and answer cap (defaults:
    :class:`~harness.serving.settings.ClientSettings`)."""
    from harness.serving.settings import ClientSettings

    client = ClientSettings()
    ap.add_argument("--retries", type=int, metavar="N", default=client.retries,
                    help="retries of a request after a timeout, 429, 5xx or a dropped connection")
    ap.add_argument("--request-timeout", type=float, metavar="S", default=client.request_timeout_s,
                    help="seconds per request, queueing included")
    ap.add_argument("--stall-timeout", type=float, metavar="S", default=client.stall_timeout_s,
                    help="no answer for this many seconds while requests are in flight: probe the server's "
                         "health and stop (exit 4) if it does not answer; 0 turns this off")
    ap.add_argument("--progress-timeout", type=float, metavar="S", default=client.progress_timeout_s,
                    help="no answer to any request for this many seconds while requests are in flight, even though "
                         "the server's health endpoint answers: stop (exit 4); 0 turns this off")
    ap.add_argument("--max-bytes-per-token", type=int, metavar="B", default=client.max_bytes_per_token,
                    help="an answer larger than 1 MiB + B per token the request can produce is that request's "
                         "error (response too large)")


def add_task_flags(ap: argparse.ArgumentParser) -> None:
    """The flags of ``abh eval`` and ``abh ab`` that set the task's recipe and the client's model, key and
    parallelism (which task, its data and the repeats are each command's own)."""
    from harness.serving.settings import ClientSettings
    from harness.tasks.registry import all_recipes

    ap.add_argument("--recipe", choices=list(all_recipes()), default=None,
                    help="the task's recipe (default: the task's; GSM8K: sglang, SGLang's bench_sglang.py)")
    ap.add_argument("--num-shots", type=int, metavar="K", default=None,
                    help="few-shot examples in each prompt (default: the recipe's; sglang: 5)")
    ap.add_argument("--num-questions", type=int, default=None, metavar="N",
                    help="questions per eval (default: the recipe's; GSM8K: all 1319)")
    ap.add_argument("--max-new-tokens", type=int, metavar="N", default=None,
                    help="generation length limit (default: the recipe's; sglang: 512)")
    ap.add_argument("--train-data", default=None, metavar="PATH",
                    help="train JSONL (or hf:openai/gsm8k) for the recipes whose shots come from it (default: beside "
                         "--data)")
    ap.add_argument("--allow-noncanonical", action="store_true", help="accept a dataset that is not canonical GSM8K")
    ap.add_argument("--model", default="", help="OpenAI model name (default: the first of /v1/models)")
    ap.add_argument("--api-key-env", default="", metavar="VAR",
                    help="send the API key in this environment variable as Authorization: Bearer (never recorded); "
                         "a URL's user:password@ is sent as basic auth")
    ap.add_argument("--parallel", type=int, default=ClientSettings().parallel, metavar="P",
                    help="requests in flight")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
