"""``abh ab URL_A URL_B --out DIR``: evaluate two servers that are already running, then compare them.

A run of the pipeline over experiment ``ab`` (configs/experiment/ab.yaml: the external engine) composed from
this command line, with ``abh run``'s schedule, resume rule, outputs and exit codes. Every eval of one URL is
one launch; ``--aa URL_A2`` adds a second launch of A. Refused before any question: URLs swapped on a rerun, a
server that does not answer (exit 4), servers of different models (exit 2).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from harness import exitcodes
from harness.analysis.gate import ASSUME_FLAG, FAIL_ON
from harness.cli import flags
from harness.config import ConfigError, validate
from harness.exitcodes import Failure
from harness.serving.settings import ClientSettings
from harness.stats.verdict import DEFAULT_MAX_ERROR_RATE

ROLES = ("a", "b")
DEFAULT_NAMES = ("A", "B")


def hydra_value(value: object) -> str:
    """``value`` as a Hydra override value: strings quoted (names and paths may hold any character)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="abh ab", formatter_class=flags.HelpFormatter,
        description="Evaluate two running servers (interleaved: A r1, B r1, A r2, ...) and compare them; "
                    "rerun the same command to resume. Effects and margins are in percentage points (pp).")
    ap.add_argument("url_a", metavar="URL_A", help="base URL of arm A's server (the baseline)")
    ap.add_argument("url_b", metavar="URL_B", help="base URL of arm B's server (the change)")
    ap.add_argument("--aa", default=None, metavar="URL_A2",
                    help="base URL of a second launch of arm A's server: evaluated like A (interleaved: A r1, B r1, "
                         "A2 r1, ...), it gives the accuracy verdict its launch-to-launch variance (the A/A "
                         "control) and the divergence its A/A floor (its three scoring passes run on A, B and A2); "
                         "without it the accuracy verdict is about the two server instances only and divergence "
                         "is not measured")
    ap.add_argument("--out", required=True, type=Path, metavar="DIR", help="run directory")
    flags.add_api_flag(ap)
    ap.add_argument("--task", default=None, metavar="NAME[,NAME...]",
                    help="the task (a file of configs/task/: gsm8k, gsm8k_vllm, mmlu, mgsm_en, gpqa_diamond, ...; default "
                         "gsm8k); several, comma-separated, are each evaluated on every eval of both servers, with a "
                         "verdict per task and one overall decision (Holm across the tasks)")
    ap.add_argument("--repeats", type=int, default=1, metavar="R", help="evals per arm")
    ap.add_argument("--a-name", default=None, metavar="NAME", help="arm A's name (default: A)")
    ap.add_argument("--b-name", default=None, metavar="NAME", help="arm B's name (default: B)")
    ap.add_argument("--names", default=None, metavar="A,B", help="both names at once (an alias of --a-name/--b-name)")
    ap.add_argument("--data", action="append", default=None, metavar="[TASK=]PATH",
                    help="the task's data: a file or directory, hf:REPO[:CONFIG] or an URL (GSM8K: test JSONL; default: "
                         "the embedded copy); with several tasks, TASK=PATH for each (repeat the option)")
    flags.add_task_flags(ap)
    flags.add_client_flags(ap)
    ap.add_argument("--wait-ready", type=float, metavar="S", default=60.0,
                    help="wait up to this many seconds for each server to serve before its first eval")
    flags.add_verdict_flags(ap, "the question asked (noninferiority and equivalence need --margin)")
    ap.add_argument("--max-error-rate", type=float, default=DEFAULT_MAX_ERROR_RATE, metavar="FRACTION",
                    help="share of questions lost to request errors above which the arms are not comparable "
                         f"(exit {exitcodes.TOO_MANY_ERRORS})")
    ap.add_argument("--fail-on", choices=FAIL_ON, default=None,
                    help=f"exit {exitcodes.GATE_FAILED} when the verdict is regressed / not shown non-inferior / "
                         "a difference either way (without --aa, only with --assume-no-launch-shift)")
    ap.add_argument(ASSUME_FLAG, action="store_true",
                    help="state that server launches do not shift accuracy: without --aa the verdict is about the "
                         "two server instances only, and --fail-on acts on it only with this flag (recorded in "
                         "comparison.json assumptions and in the markdown)")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="every detail on the terminal: servers waited for, checks passed, the statistician's summary")
    return ap


def arm_names(a: argparse.Namespace) -> tuple[str, str]:
    """The arms' names from --a-name/--b-name or --names (``base,fix``); ValueError for an empty or a repeated
    name."""
    names = list(DEFAULT_NAMES)
    if a.names is not None:
        names = [n.strip() for n in a.names.split(",")]
        if len(names) != 2 or not all(names):
            raise ValueError(f"--names takes two non-empty names separated by a comma (e.g. base,fix), not "
                             f"{a.names!r}")
    names[0] = a.a_name if a.a_name is not None else names[0]
    names[1] = a.b_name if a.b_name is not None else names[1]
    if not all(n.strip() for n in names):
        raise ValueError("--a-name/--b-name: an arm's name cannot be empty")
    if names[0] == names[1]:
        raise ValueError(f"--names: the two arms need different names, not {names[0]!r} twice")
    return names[0], names[1]


#: why ``abh ab`` without ``--aa`` measures no divergence (recorded as the divergence's reason)
NO_AA = ("abh ab measures divergence only with --aa URL_A2, a second launch of arm A's server: the A/A floor that "
         "B's divergence must rise above (a floor on A's own launch would reject every time); rerun with --aa")


def overrides(a: argparse.Namespace, urls: Sequence[str], names: Sequence[str]) -> list[str]:
    """The Hydra overrides of experiment ``ab`` that say what this command line says (``urls``: A, B and,
    with ``--aa``, A's second launch)."""
    tasks = task_names(a.task)
    data = task_data(a.data, tasks)
    per_task: dict[str, object] = {k: v for k, v in (
        ("recipe", a.recipe), ("num_shots", a.num_shots), ("num_questions", a.num_questions),
        ("max_new_tokens", a.max_new_tokens), ("train_path", a.train_data),
        ("allow_noncanonical", a.allow_noncanonical or None)) if v is not None}
    values: dict[str, object] = {
        "arms.a.engine.url": urls[0], "arms.b.engine.url": urls[1], "arms.a.name": names[0], "arms.b.name": names[1],
        "engine.api": a.api, "engine.ready_timeout_s": float(a.wait_ready), "client.model": a.model,
        "client.api_key_env": a.api_key_env,
        "experiment.repeats": a.repeats, "client.parallel": a.parallel, "client.retries": a.retries,
        "client.request_timeout_s": float(a.request_timeout), "client.stall_timeout_s": float(a.stall_timeout),
        "client.progress_timeout_s": float(a.progress_timeout),
        "client.max_bytes_per_token": a.max_bytes_per_token, "stats.hypothesis": a.hypothesis,
        "stats.alpha": float(a.alpha), "stats.margin_pp": a.margin, "stats.min_effect_pp": a.min_effect, "stats.seed": a.seed,
        "stats.max_error_rate": float(a.max_error_rate), "fail_on": a.fail_on, "progress": not a.no_progress,
        "verbose": bool(a.verbose),
        "stats.assume_no_launch_shift": bool(a.assume_no_launch_shift),
    }
    if len(urls) == 3:  # a second launch of A: an arm of its own, named as A, the A/A control's server
        values.update({"arms.a2.name": names[0], "arms.a2.engine.url": urls[2], "experiment.aa_arm": "a2",
                       "experiment.aa_control": True, "divergence.enabled": True})
    else:
        values.update({"divergence.enabled": False, "divergence.off_reason": NO_AA})
    if len(tasks) == 1:
        head = [] if tasks[0] == "gsm8k" else [f"task={tasks[0]}"]
        values.update({f"task.{k}": v for k, v in per_task.items()})
        if data.get(tasks[0]):
            values["task.data_path"] = data[tasks[0]]
    else:
        head = [f"+task@tasks.{t}={t}" for t in tasks]
        for t in tasks:
            values.update({f"tasks.{t}.{k}": v for k, v in per_task.items()})
            if data.get(t):
                values[f"tasks.{t}.data_path"] = data[t]
    return ["experiment=ab", *head, *(f"{k}={hydra_value(v)}" for k, v in values.items())]


def task_names(text: str | None) -> list[str]:
    """``--task gsm8k,mmlu`` -> ["gsm8k", "mmlu"] (config files of configs/task/; ValueError for an unknown one)."""
    from harness.config import CONFIG_DIR

    names = [n.strip() for n in (text or "gsm8k").split(",") if n.strip()]
    known = sorted(p.stem for p in (CONFIG_DIR / "task").glob("*.yaml"))
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise ValueError(f"--task: unknown task {', '.join(bad) or repr(text)}; choose from {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ValueError(f"--task names a task twice: {text}")
    return names


def task_data(given: Sequence[str] | None, tasks: Sequence[str]) -> dict[str, str]:
    """``--data PATH`` (one task) or ``--data TASK=PATH`` (each of several) as {task: path}."""
    out: dict[str, str] = {}
    for item in given or []:
        name, sep, path = item.partition("=")
        if sep and name in tasks:
            out[name] = path
        elif len(tasks) == 1:
            out[tasks[0]] = item
        else:
            raise ValueError(f"--data {item!r}: with several tasks, give TASK=PATH (tasks: {', '.join(tasks)})")
    return out


def check_urls(urls: Sequence[str]) -> list[str]:
    from harness.serving.client import check_url
    from harness.serving.settings import url_identity

    out = []
    for name, url in zip(("URL_A", "URL_B", "--aa URL_A2"), urls, strict=False):
        try:
            out.append(check_url(url))
        except ValueError as e:
            raise Failure(exitcodes.BAD_CONFIG, f"{name} {e}") from None
    if len(out) == 3 and url_identity(out[2]) in {url_identity(u) for u in out[:2]}:
        raise Failure(exitcodes.BAD_CONFIG, f"--aa {out[2]} is URL_A or URL_B: the floor needs a second "
                      "launch of arm A's server (another port or host), or its divergence is not measured")
    return out


def refuse_swapped(out: Path, urls: Sequence[str]) -> None:
    """A rerun with URL_A and URL_B swapped would mix each arm's answers into the other's evals: said in one line
    (the resume rule would refuse it too, as a changed config)."""
    from harness.results import schema
    from harness.serving.settings import url_identity

    ids = [url_identity(u) for u in urls]
    if ids[0] == ids[1]:
        return
    for role, mine in zip(ROLES, ids, strict=True):
        other = "b" if role == "a" else "a"
        for meta_path in sorted((out / "evals" / other).glob(f"r*/{schema.EVAL_FILE}")):
            if schema.load_eval_meta(meta_path).get("launch") == mine:
                raise Failure(exitcodes.BAD_CONFIG,
                              f"{out} holds evals of {urls[ROLES.index(role)]} as arm {other.upper()}, and "
                              f"this command gives it as URL_{role.upper()}: the URLs are swapped. Give them "
                              "in the order of the first run, or use another --out")


@contextmanager
def refused_redirect(role: str, url: str) -> Iterator[None]:
    """A server whose probe answers a redirect (never followed: the credentials would go with it) is the wrong
    URL: one line, exit 2."""
    from harness.serving.client import Redirected, redact_userinfo

    try:
        yield
    except Redirected as e:
        raise Failure(exitcodes.BAD_CONFIG, f"server {role.upper()} at {redact_userinfo(url)}: {e}") from None


def refuse_links(out: Path) -> None:
    """A link planted in a run directory to resume is refused (exit 2) before its evals are read."""
    from harness.orchestrate.rundir import refuse_planted_links
    from harness.results.fileio import PlantedLink

    if out.is_dir():
        try:
            refuse_planted_links(out)
        except PlantedLink as e:
            raise Failure(exitcodes.BAD_CONFIG, str(e)) from None


def refuse_unreachable(out: Path, urls: Sequence[str], repeats: int,
                       headers: dict[str, str]) -> list[tuple[str, str]]:
    """Before anything is written: each server with an eval still to run answers HTTP at all (exit 4); the A/A
    floor's server (``--aa``) whenever it is given. Returns (role, URL) of the servers asked."""
    from harness.results.eval_store import eval_done
    from harness.serving.client import redact_userinfo, unreachable

    asked = []
    for role, url in zip((*ROLES, "a2"), urls, strict=False):
        if role != "a2" and all(eval_done(out / "evals" / role / f"r{r}") for r in range(1, repeats + 1)):
            continue
        with refused_redirect(role, url):
            why = unreachable(url, headers=headers)
        if why is not None:
            raise Failure(exitcodes.SERVER_FAILURE,
                          f"server {role.upper()} at {redact_userinfo(url)} is not reachable: {why}")
        asked.append((role, url))
    return asked


def refuse_other_models(servers: Sequence[tuple[str, str]], headers: dict[str, str]) -> None:
    """Servers of different models are not an A/B test of a change: said before any question (exit 2), rather
    than found by the comparison (their recipes' model_path differ) after both evals."""
    from harness.serving.client import served_model

    models = {}
    for role, url in servers:
        with refused_redirect(role, url):
            models[role] = served_model(url, headers)
    if len({m for m in models.values() if m is not None}) > 1:
        said = ", ".join(f"{role.upper()}: {m!r}" for role, m in models.items() if m is not None)
        raise Failure(exitcodes.BAD_CONFIG, f"the servers serve different models ({said}); abh ab compares "
                      "servers of the same model that differ in one change")


def auth_headers(api_key_env: str) -> dict[str, str]:
    """The bearer header of ``--api-key-env`` (Failure, exit 2, when it names no variable that is set)."""
    from harness.serving.client import bearer_headers

    settings = ClientSettings(api_key_env=api_key_env)
    problems = [p for p in settings.problems() if p.startswith("api_key_env")]
    if problems:
        raise Failure(exitcodes.BAD_CONFIG, "--" + problems[0].replace("_", "-", 2))
    return bearer_headers(settings)


#: the comparison's settings (harness.analysis.compare_settings) as the flags that set them
SETTING_FLAGS = {"hypothesis": "--hypothesis", "margin": "--margin", "min_effect": "--min-effect", "alpha": "--alpha",
                 "max_error_rate": "--max-error-rate"}


def flag_problem(a: argparse.Namespace) -> str | None:
    """The first flag out of its range, by the range of the config key it sets (the fields' own, the
    comparison's settings), before any server is asked anything."""
    from harness.analysis.compare_settings import settings_problem
    from harness.config import ExperimentConfig, TaskSpec
    from harness.util.ranges import check

    why = check(ExperimentConfig, "repeats", a.repeats, "--repeats") or check(
        TaskSpec, "num_questions", a.num_questions, "--num-questions")
    if why:
        return why
    pp = [None if v is None else v / 100 for v in (a.margin, a.min_effect)]
    wrong = settings_problem(a.hypothesis, pp[0], pp[1], a.alpha, a.max_error_rate)
    if wrong is not None:
        return f"{SETTING_FLAGS[wrong.setting]}: {wrong}"
    return None if math.isfinite(a.wait_ready) and a.wait_ready >= 0 else f"--wait-ready {a.wait_ready} is out of range"


def ab_main(argv: Sequence[str] | None = None) -> int:
    """``abh ab``: see the module docstring for what it writes and its exit codes."""
    from harness.util.redact import redact_argv

    ap = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    try:
        names = arm_names(a)
    except ValueError as e:
        ap.error(str(e))
    bad = flag_problem(a)
    if bad:
        ap.error(bad)
    problems = ClientSettings(parallel=a.parallel, retries=a.retries, request_timeout_s=a.request_timeout,
                              stall_timeout_s=a.stall_timeout, progress_timeout_s=a.progress_timeout,
                              max_bytes_per_token=a.max_bytes_per_token).problems()
    if problems:  # the settings' own ranges, before any server is asked anything
        ap.error(flags.as_flags(problems[0]))
    try:
        if a.out.exists() and not a.out.is_dir():
            raise Failure(exitcodes.BAD_CONFIG, f"--out {a.out} exists and is not a directory")
        from harness.util.paths import output_problem

        unsafe = output_problem(a.out)
        if unsafe:
            raise Failure(exitcodes.BAD_CONFIG, unsafe)
        try:
            task_data(a.data, task_names(a.task))
        except ValueError as e:
            raise Failure(exitcodes.BAD_CONFIG, str(e)) from None
        urls = check_urls((a.url_a, a.url_b) if a.aa is None else (a.url_a, a.url_b, a.aa))
        headers = auth_headers(a.api_key_env)
        refuse_links(a.out)
        refuse_swapped(a.out, urls[:2])
        refuse_other_models(refuse_unreachable(a.out, urls, a.repeats, headers), headers)
        from harness.cli.compose import compose_config

        cfg = validate(compose_config(overrides(a, urls, names)))
    except ConfigError as e:
        from harness.orchestrate.pipeline import refuse_config

        return refuse_config(e, a.out, dry_run=False)
    except Failure as e:
        print(f"abh ab: {'error: ' if e.code == exitcodes.BAD_CONFIG else ''}{e}", file=sys.stderr)
        return e.code
    except Exception as e:  # noqa: BLE001 - a config Hydra refuses (a bad value): one line, exit 2
        from harness.results.schema import SchemaError

        if not isinstance(e, SchemaError) and type(e).__module__.split(".")[0] not in ("hydra", "omegaconf"):
            raise
        print(f"abh ab: error: {e}".splitlines()[0], file=sys.stderr)
        return exitcodes.BAD_CONFIG
    from harness.orchestrate.pipeline import run_job

    return run_job(cfg, a.out, command=["abh", "ab", *redact_argv(argv)])
