"""``abh run``: the Hydra app. It runs the pipeline as the Hydra job; the job returns the exit code and the
:class:`ExitCode` callback (configs/config.yaml) raises :class:`RunExit` with it at the end of the run or
sweep.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import hydra
import yaml
from hydra._internal.hydra import Hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from harness import exitcodes
from harness.cli.compose import unset_env
from harness.cli.hydra_errors import one_line
from harness.config import CONFIG_DIR, ConfigError, arms_root, validate
from harness.util.redact import Redactor, redact_argv, redact_text, secret_values
from harness.util.redact_stdio import redacted_stdio


class RunExit(SystemExit):
    """``abh run``'s exit code, carried out of Hydra (raised by :class:`ExitCode`, or to stop a sweep)."""


def job_code(job_return: JobReturn | None) -> int:
    """A job's exit code: its return value (an int); a job that raised is a bug."""
    if job_return is None:
        return exitcodes.OK
    if job_return.status == JobStatus.FAILED:
        return exitcodes.UNEXPECTED
    value = job_return.return_value
    return value if isinstance(value, int) else exitcodes.OK


class ExitCode(Callback):
    """Hydra callback (configs/config.yaml): the run's exit code is its job's return value; a sweep's is the
    largest of its jobs'."""

    def __init__(self) -> None:
        self.codes: list[int] = []

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        self.codes.append(job_code(job_return))

    def on_run_end(self, config: DictConfig, job_return: JobReturn | None = None, **kwargs: Any) -> None:
        code = job_code(job_return)
        if code:
            raise RunExit(code)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        code = max(self.codes, default=exitcodes.OK)
        if code:
            raise RunExit(code)


def in_multirun() -> bool:
    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False


def task(cfg: DictConfig) -> int:
    """The Hydra job: run the experiment in Hydra's output directory; return the exit code."""
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    if in_multirun():  # before anything can interrupt the sweep
        redact_multirun_yaml(Path(hc.sweep.dir))
    placed = [o for o in hc.overrides.hydra if o.startswith(("hydra.run.dir=", "hydra.sweep.dir=", "hydra/launcher="))]
    overrides = [_lower_bool(redact_text(a)) for a in redact_argv([*hc.overrides.task, *placed])]
    # the pipeline (servers, client, statistics) is imported once a job runs: `--cfg`, `--help` and Hydra's own
    # refusals answer without it
    from harness.orchestrate.pipeline import INTERRUPTED_CODES, refuse_config, run_job

    try:
        config = validate(cfg)  # the one conversion: nothing below sees the composed tree
    except ConfigError as e:
        return refuse_config(e, run_dir, bool(cfg.get("dry_run")))
    code = run_job(config, run_dir, ["abh", "run", *overrides], unset_env(cfg))  # a sweep job's own: reruns it alone
    if code in INTERRUPTED_CODES and in_multirun():
        raise RunExit(code)  # Ctrl-C / SIGTERM / SIGHUP stops the whole sweep, not just this job
    if code and ("SUBMITIT_EXECUTOR" in os.environ or "SLURM_JOB_ID" in os.environ):
        raise RunExit(code)  # the job fails, so submitit/SLURM see it
    return code


def _lower_bool(override: str) -> str:
    """``progress=False`` (a sweep job's override as Hydra spells it) as typed: ``progress=false``."""
    key, eq, value = override.partition("=")
    return f"{key}={value.lower()}" if eq and value in ("True", "False") else override


def _options(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


def help_text() -> str:
    """``abh run --help``: the config groups and their options as files define them (not the schemas)."""
    lines = ["usage: abh run [GROUP=OPTION ...] [KEY=VALUE ...] [-m] [--cfg job [--resolve]] [--info]",
             "               [--fail-on regressed|not-noninferior|any-difference] [--verbose]", "",
             "Launch each arm's server, assert its side, evaluate, compare. Every key of the config can be",
             "overridden with KEY=VALUE (`abh run --cfg job` prints them all with their values); an unknown key",
             "is an error. -m runs a sweep over comma-separated values. Rerunning the same command resumes.", "",
             "config groups (GROUP=OPTION):"]
    for group in ("experiment", "engine", "task", "stats", "hydra/launcher"):
        lines.append(f"  {group}: {', '.join(_options(CONFIG_DIR / group))}")
    arms = arms_root() / "arms"
    if arms.is_dir():
        lines += ["", f"arm files ({arms}; used by experiments as /arms/DIR@arms.KEY: FILE):"]
        for d in sorted(p for p in arms.iterdir() if p.is_dir()):
            lines.append(f"  {d.name}: {', '.join(_options(d))}")
    lines += ["", "examples:", "  abh run                                 the SIMULATED demo",
              "  abh run task=[gsm8k,mgsm_en]             several tasks on every launch: a verdict per task and",
              "                                          one overall decision (Holm across the tasks)",
              "  abh run experiment=NAME dry_run=true     print each arm's command, run the static checks",
              "  abh run experiment.repeats=3 -m arms.b.engine.accuracy=0.93,0.96",
              "", "Hydra's own options: abh run --hydra-help"]
    return "\n".join(lines)


def malformed_yaml(roots: list[Path]) -> str | None:
    """The first config or arm file under ``roots`` that is not valid YAML, as one line (None when all parse).
    Hydra would report it as a 90-line traceback; checked before Hydra composes anything."""
    fast = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: a tenth of the pure-Python parser's time
    for root in roots:
        for path in sorted(root.rglob("*.yaml")) if root.is_dir() else []:
            try:
                text = path.read_text(encoding="utf-8")
                try:
                    yaml.load(text, Loader=fast)  # noqa: S506 - a safe loader
                    continue
                except yaml.YAMLError:  # said as the pure-Python parser says it (line, column, problem)
                    yaml.safe_load(text)
            except (yaml.YAMLError, UnicodeDecodeError) as e:
                mark = getattr(e, "problem_mark", None)
                where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
                what = getattr(e, "problem", None) or type(e).__name__
                return f"{path}{where}: not valid YAML ({what})"
    return None


def _value(text: str) -> str:
    """An override's value as Hydra reads a plain or quoted one."""
    v = text.strip()
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" else v


def directory_problem(argv: list[str]) -> str | None:
    """A run or sweep directory the overrides would have Hydra make where it must not (an experiment name that
    leaves ``results/``, a ``hydra.run.dir`` that is the root or a system directory), as one line: checked
    before Hydra composes anything, since Hydra makes the directory before the run's own validation."""
    from harness.config import name_problem
    from harness.util.paths import output_problem

    for a in argv:
        key, eq, raw = a.partition("=")
        key = key.lstrip("+~")
        if not eq:
            continue
        if key == "experiment.name":  # an interpolation is checked as Hydra resolves it (abh_run_name)
            problem = None if "${" in raw else name_problem(_value(raw))
        elif key in ("hydra.run.dir", "hydra.sweep.dir"):
            problem = output_problem(_value(raw), key)
        elif key == "experiment":
            path = CONFIG_DIR / "experiment" / f"{_value(raw)}.yaml"
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
            name = ((doc or {}).get("experiment") or {}).get("name") if isinstance(doc, dict) else None
            problem = name_problem(name) if isinstance(name, str) and "${" not in name else None
        else:
            problem = None
        if problem:
            return problem
    return None


def value_problem(argv: list[str]) -> tuple[str | None, Any]:
    """The config's own validation before Hydra makes the run directory, so a bad value leaves no directory
    behind: the problem (None when none), and the run mode (``hydra.mode``), :data:`UNKNOWN` when not
    composed. A sweep, Hydra's own flags and a config Hydra cannot compose are left to Hydra and the job."""
    if any(a.startswith("-") for a in argv) or any("," in a.partition("=")[2] for a in argv):
        return None, UNKNOWN
    from harness.cli.compose import compose_config

    try:
        cfg = compose_config(list(argv), with_hydra=True)
    except Exception:  # noqa: BLE001 - Hydra says it, as it composes the run
        return None, UNKNOWN
    mode = cfg.hydra.mode
    with read_write(cfg), open_dict(cfg):  # the run's own config, as compose() returns it
        del cfg["hydra"]
    try:
        validate(cfg)
    except ConfigError as e:
        return str(e), mode
    except Exception:  # noqa: BLE001 - the job's own handling says it
        pass
    return None, mode


#: :func:`value_problem`'s run mode when it did not compose the config
UNKNOWN = object()


@contextlib.contextmanager
def known_mode(mode: Any) -> Iterator[None]:
    """Hydra composes the whole config once only to read ``hydra.mode`` (run or sweep) before it composes it again
    for the run; with the mode :func:`value_problem` read from its own composition, that first one is skipped
    (a third of ``abh run``'s start-up)."""
    if mode is UNKNOWN:
        yield
        return
    saved = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: mode  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = saved  # type: ignore[method-assign]


def fail_on_override(argv: list[str]) -> list[str]:
    """``--fail-on X`` (or ``--fail-on=X``), the CI gate of ``abh compare`` and ``abh ab``, as the Hydra override
    ``fail_on=X``; everything else is left for Hydra."""
    out: list[str] = []
    it = iter(argv)
    for a in it:
        if a == "--fail-on":
            out.append(f"fail_on={next(it, '')}")
        elif a.startswith("--fail-on="):
            out.append(f"fail_on={a.split('=', 1)[1]}")
        elif a in ("--verbose", "-v"):  # every detail on the terminal (run.log has them always)
            out.append("verbose=true")
        else:
            out.append(a)
    return out


_TASK_LIST = re.compile(r"^task=\[(.*)\]$")
_TASK_KEY = re.compile(r"^(\+{0,2})task\.([A-Za-z_][\w.]*)=(.*)$", re.S)


def tasks_override(argv: list[str]) -> list[str]:
    """``task=[gsm8k,mmlu]`` as the Hydra overrides that put each task's config file under ``tasks.<name>``
    (``+task@tasks.gsm8k=gsm8k ...``), ``task.KEY=V`` then applying to each; ``task=[x]`` is ``task=x``."""
    names: list[str] = []
    for a in argv:
        m = _TASK_LIST.match(a)
        if m:
            names = [n.strip() for n in m.group(1).split(",") if n.strip()]
    if len(names) < 2:
        return [f"task={names[0]}" if _TASK_LIST.match(a) and names else a for a in argv]
    out: list[str] = []
    for a in argv:
        if _TASK_LIST.match(a):
            out += [f"+task@tasks.{n}={n}" for n in names]
            continue
        m = _TASK_KEY.match(a)
        if m:
            out += [f"{m.group(1)}tasks.{n}.{m.group(2)}={m.group(3)}" for n in names]
            continue
        out.append(a)
    return out


def main(argv: list[str]) -> int:
    """Entry of ``abh run``: hand the overrides to Hydra; map its outcome to our exit codes."""
    if any(a in ("-h", "--help") for a in argv):
        print(help_text())
        return exitcodes.OK
    argv = tasks_override(fail_on_override(argv))
    bad = malformed_yaml([CONFIG_DIR, arms_root() / "arms"]) or directory_problem(argv)
    mode = UNKNOWN
    if not bad:
        bad, mode = value_problem(argv)
    if bad:
        print(Redactor(secret_values(argv)).line(f"abh run: error: {bad}") if "\n" not in bad else
              Redactor(secret_values(argv)).text(f"abh run: error: {bad}"), file=sys.stderr)
        return exitcodes.BAD_CONFIG
    app = hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(task)
    saved = sys.argv
    sys.argv = ["abh run", *argv]
    full_error = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises its composition errors for one_line, instead of printing
    try:
        with redacted_stdio(argv), known_mode(mode):  # Hydra prints the config (--cfg) and repeats overrides in
            app()  # errors: redact both
    except RunExit as e:
        return int(e.code) if isinstance(e.code, int) else exitcodes.UNEXPECTED
    except KeyboardInterrupt:  # Ctrl-C while Hydra composes, before the job's handlers: nothing was started
        return exitcodes.INTERRUPTED
    except OmegaConfBaseException as e:  # a resolver refused a value as Hydra resolved its directories
        cause = e.__cause__ or e
        print(f"abh run: error: {cause}".splitlines()[0], file=sys.stderr)
        return exitcodes.BAD_CONFIG
    except SystemExit as e:
        # Hydra exits 1 on composition errors (unknown key, bad value, missing config), argparse 2: bad config.
        if e.code in (0, None):
            return exitcodes.OK
        return exitcodes.BAD_CONFIG if e.code in (1, 2) else int(e.code) if isinstance(
            e.code, int) else exitcodes.UNEXPECTED
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors become one line; anything else is a bug
        line = one_line(e)
        if line is None or full_error:  # HYDRA_FULL_ERROR=1 set by the user: Hydra's own traceback
            raise
        print(Redactor(secret_values(argv)).line(f"abh run: error: {line}"), file=sys.stderr)
        return exitcodes.BAD_CONFIG
    finally:
        sys.argv = saved
        if full_error is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = full_error
    return exitcodes.OK


def redact_multirun_yaml(sweep_dir: Path, argv: Sequence[str] | None = None) -> None:
    """Hydra writes its record of the sweep (``multirun.yaml``: the overrides, each sweep's every value, and the
    config) unredacted: redact it in place, by name and the secret values on the command line (``argv``;
    default ``sys.argv[1:]``, what Hydra parsed)."""
    from harness.results.fileio import atomic_write_text

    path = Path(sweep_dir) / "multirun.yaml"
    if path.exists():
        text = path.read_text()
        clean = Redactor(secret_values(sys.argv[1:] if argv is None else argv)).text(text)
        if clean != text:
            atomic_write_text(path, clean)


class SweepCallback(Callback):
    """Hydra callback: at the end of a multirun, write sweep_summary.json, comparison.md (+ report.html), print the
    table and, last, the paths of the sweep's report."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.exists():
            return
        redact_multirun_yaml(sweep_dir)
        try:
            from harness.analysis.sweep import summarize_sweep  # a sweep's end only: not every job's import
            from harness.report.sweep_text import format_sweep
            from harness.results import schema

            s = summarize_sweep(sweep_dir, str(config.stats.correction))
        except schema.SchemaError as e:
            print(f"abh: sweep summary not written: {e}", file=sys.stderr, flush=True)
            return
        print(format_sweep(s), file=sys.stdout, flush=True)
        from harness.report import write_markdown, write_sweep_report

        written = [write_markdown(sweep_dir)]
        if config.get("report", True):
            written.insert(0, write_sweep_report(sweep_dir))
        # the sweep's own files, last: not the last job's
        print(f"sweep report: {', '.join(str(p.resolve()) for p in written)}", file=sys.stdout, flush=True)
