"""The pipeline of a whole arm comparison (``abh run``'s and ``abh ab``'s job): prepare (data, run directory,
arms, engines, the arms' diff); the static checks before any server (a dry run stops there, with the exit code
a real run would have); measure (each schedule item's eval on its launch from the :class:`ServerPool`, the
scoring passes on the same launches); finish (``comparison.json``, ``summary.json``, table, ``report.html``).
Every failure is an exception; :func:`exit_for` maps the expected ones to an exit code and one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import exitcodes
from harness.analysis import identity
from harness.analysis.compare_settings import CompareError, CompareSettingsError
from harness.analysis.comparison import IncomparableEvals, TooFewAnswered, compare_dirs, format_summary
from harness.analysis.cost import config_gpus, cost_from_manifest, format_cost
from harness.analysis.divergence import compute_divergence, has_pass
from harness.analysis.divergence_cache import cached
from harness.analysis.gate import comparison_exit, exit_reason, gate_exit, gate_not_applied, gated
from harness.analysis.multitask import format_tasks
from harness.analysis.routing import compute_routing
from harness.arms import sourcediff
from harness.arms.arm import ArmError, ResolvedArm, resolve_arm
from harness.checks import armdiff
from harness.checks.result import CheckResult, SideAssertionError, assert_checks
from harness.checks.static import run_static_checks
from harness.config import SETTING_KEYS, Config, ConfigError, EngineConfig, SimulatedEngineConfig, arms_root
from harness.engines import Engine, EngineError, LaunchSpec, PortInUseError, create_engine, engine_class
from harness.engines.preflight import Preflight
from harness.exitcodes import Failure
from harness.measure.evaluation import EvalOptions, ServerGone, WrongServer, run_task_eval_async
from harness.orchestrate import resumed_design, rundir, tasks_phase
from harness.orchestrate.design import SequentialSchedule, describe, format_design, times_from_cost
from harness.orchestrate.divergence_phase import ScoringPhase
from harness.orchestrate.interrupts import Interrupted, Interrupts
from harness.orchestrate.schedule import Step, schedule, sequential_schedule, with_scoring
from harness.orchestrate.sequential import Looks, apply_to_comparison, design_of
from harness.orchestrate.servers import Launch, ServerPool
from harness.report import write_markdown, write_report
from harness.report.cost_section import sequential_line
from harness.report.divergence_section import terminal_line
from harness.report.headline import coloured, headline
from harness.report.terminal import result_lines
from harness.results import fileio, schema
from harness.results.dirlock import DirectoryInUse, DirLock
from harness.results.eval_store import eval_done
from harness.results.fileio import OutputError, PlantedLink, StoreError
from harness.results.prompt_store import TEXTS, pack, pack_prompts
from harness.results.records import JSON
from harness.serving.client import ClientConfig, bearer_headers
from harness.serving.untrusted import printable
from harness.stats.group_sequential import operating_characteristics
from harness.tasks.gsm8k import DatasetError
from harness.util.redact import redact_text

INTERRUPTED_CODES = (exitcodes.INTERRUPTED, exitcodes.TERMINATED, exitcodes.HANGUP)
#: Errors that mean the command line, config, data or run directory is wrong: exit 2, one line.
CONFIG_ERRORS: tuple[type[BaseException], ...] = (ConfigError, DatasetError, ArmError, PortInUseError, StoreError)


# ------------------------------------------------------------------------------------------ helpers
def engine_cfg_for(config: Config, data_source: str, answer_key: str = "") -> EngineConfig:
    """The run's engine config (each arm's ``engine:`` overrides are applied by create_engine); the simulator
    answers the run's data (and, from ``answer_key``, the tasks whose prompts it does not parse)."""
    engine = replace(config.engine)
    if isinstance(engine, SimulatedEngineConfig):
        if not engine.data and Path(data_source).is_file():
            engine.data = data_source
        if answer_key and not engine.answer_key:
            engine.answer_key = answer_key
    return engine


def print_launch(key: str, arm: ResolvedArm, spec: LaunchSpec) -> None:
    """The arm's exact server command: one NAME=value per env var, then one ``--flag value`` per line."""
    print(printable(f"\n=== arm {key}: {arm.name} ({arm.side or 'no side declared'}) ==="))
    print(printable(spec.pretty()))
    if list(spec.argv) != list(spec.server_argv):
        head = spec.argv[:len(spec.argv) - len(spec.server_argv) + 1]
        print(f"# started through the fingerprint launcher: {' '.join(head)} ...")
    for problem in arm.source.problems:
        print(f"# WARNING: {problem}")


def table_title(summary: schema.RunSummary, c: schema.Comparison) -> str:
    """The line naming the experiment and its arms above the result."""
    return (f"experiment {summary.experiment}: {summary.arms.get('a')} (A) vs {summary.arms.get('b')} (B), "
            f"{c.n} questions x {summary.repeats} repeat(s)")


def format_table(summary: schema.RunSummary, c: schema.Comparison) -> str:
    """The result on the terminal with ``--verbose``: the title, then what ``abh compare`` prints."""
    lines = [table_title(summary, c), format_summary(c)]
    if c.divergence is not None:
        lines.append(terminal_line(c.divergence))
    if c.routing is not None:
        lines.append(f"{c.routing.sentence} ({c.routing.verdict_reason})")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the run
class Run:
    """One experiment in its run directory, phase by phase (see the module docstring). Every event goes to
    the manifest as it happens; every line to the user goes through ``log``."""

    def __init__(self, cfg: Config, run_dir: Path, interrupts: Interrupts, log: rundir.RunLog,
                 command: list[str] | None = None, unset_env: dict[str, str] | None = None):
        #: arm key -> the environment variable its source path was to come from, unset (the path: a placeholder)
        self.unset_env = unset_env or {}
        #: the command line that asked for the run, when it was not ``abh run`` (``abh ab``: shown in the report)
        self.command = command
        #: every task of the run with its data, loaded and built once (bad data stops here, before any server)
        self.tasks: list[tasks_phase.RunTask] = tasks_phase.load_tasks(cfg)
        self.test = next((t.data.test for t in self.tasks if t.spec.name == "gsm8k"), self.tasks[0].data.test)
        #: the simulator's answer key for the tasks whose prompts it does not parse (written by :meth:`_open`)
        self.answer_key = ""
        self.cfg, self.run_dir, self.x = cfg, run_dir, cfg.experiment
        self.interrupts, self.log = interrupts, log
        self.keys = {"a": str(self.x.a), "b": str(self.x.b)}  # role -> arm key
        #: the arm whose launch serves the divergence's floor, when not the reference arm's own fresh launch
        self.aa_key: str | None = self.x.aa_arm or None
        self.allowed = list(self.x.allowed_differences)
        self.arms: dict[str, ResolvedArm] = {}
        self.engines: dict[str, Engine] = {}
        self.live_diff_checked = False
        #: the evals a resume kept as they were (their files are not rewritten, not even packed)
        self.kept: set[str] = set()
        run_dir.mkdir(parents=True, exist_ok=True)
        # one process per run directory, before anything in it is read or written (released by run_experiment)
        self.lock = DirLock(run_dir, "run directory").acquire()
        try:
            rundir.refuse_planted_links(run_dir)  # before anything in it is read, and before any server
            self._open(cfg, run_dir, command)
        except BaseException:
            self.lock.release()
            raise

    def _open(self, cfg: Config, run_dir: Path, command: list[str] | None) -> None:
        """Resume or start the run's record (manifest), and set up its servers and scoring."""
        if cfg.engine.kind == "simulated":
            from abh_simulator import answer_key

            written = answer_key.write(run_dir / "simulator_answer_key.json",
                                       [(t.key, t.probe) for t in self.tasks], dry_run=cfg.dry_run)
            self.answer_key = str(written) if written else ""
        resolved = dataclasses.asdict(cfg)  # what manifest.json stores as ``config``
        ignores = engine_class(cfg.engine.kind).diff_ignore
        digest = rundir.config_digest(resolved, rundir.non_semantic_keys(ignores, list(cfg.arms)))
        self.manifest = rundir.Manifest(run_dir, enabled=not cfg.dry_run)
        if not cfg.dry_run:  # abh ab names its run directory --out
            rundir.check_resume(self.manifest.data, digest, run_dir,
                                "--out" if self.command_name == "ab" else "hydra.run.dir")
        dataset: rundir.DatasetRecord = {"sha256": self.test.sha256, "source": self.test.source,
                                         "canonical": self.test.canonical, "rows": len(self.test)}
        if self.several:
            dataset["tasks"] = {t.key: {"task": t.spec.name, "recipe": t.probe.recipe.name,
                                        "sha256": t.data.test.sha256, "source": t.data.test.source,
                                        "rows": len(t.data.test)} for t in self.tasks}
        self.manifest.start_session(experiment=str(self.x.name), config=resolved, digest=digest, dataset=dataset,
                                    argv=command)
        self.pool = ServerPool(self.engines, self.arms, self.manifest, self.interrupts, self.log.say,
                               concurrent=self.x.concurrent_servers, detail=self.log.detail)
        # the divergence's scoring passes read one eval's texts: a run of several tasks does not measure it (yet)
        self.scoring = (ScoringPhase(cfg, run_dir, self.keys, self.pool, self.manifest, self.interrupts, self.log)
                        if cfg.divergence.enabled and not self.several else None)
        #: GPUs one server of each arm holds (engine.gpus, else derived from its flags): the cost accounting
        self.gpus = {key: config_gpus(resolved, key) for key in self.keys.values()}
        #: a sequential run's looks (experiment.sequential), continued from the manifest's record
        self.looks: Looks | None = None
        if self.x.sequential:
            self.looks = Looks(design_of(cfg), None if cfg.dry_run else self.manifest.data.get("sequential"))

    @property
    def command_name(self) -> str:
        """``ab`` (its command line is recorded) or ``run``: the advice names the command's own flags."""
        return "ab" if self.command and len(self.command) > 1 and self.command[1] == "ab" else "run"

    @property
    def several(self) -> bool:
        """A run of several tasks (``tasks:``): every item evaluates each of them on its launch."""
        return bool(self.tasks[0].key)

    def item_done(self, rel: str) -> bool:
        """The resume rule of one schedule item: every task's eval of it is done (:func:`eval_done`); an eval
        directory reached through a planted link is refused, never read as this run's."""
        return all(eval_done(fileio.check(t.eval_dir(self.run_dir, rel))) for t in self.tasks)

    # ------------------------------------------------------------------ before any server
    def resolve(self, key: str, label: str) -> tuple[ResolvedArm, Engine]:
        """Arm ``key`` resolved, and the engine that serves it (not launched)."""
        arm = resolve_arm(key, self.cfg.arms[key], self.run_dir, arms_root(), strict=not self.cfg.dry_run,
                          unset_env=self.unset_env.get(key))
        engine = create_engine(engine_cfg_for(self.cfg, self.test.source, self.answer_key), arm, self.run_dir, label)
        engine.http_headers = bearer_headers(self.cfg.client)
        return arm, engine

    def prepare_arms(self) -> tuple[list[armdiff.ArmDiffRow], list[armdiff.ArmDiffRow]]:
        """Resolve each arm and its engine; return (differences between the static launches, the disallowed)."""
        descs: dict[str, armdiff.LaunchDescription] = {}
        try:
            for role, key in self.keys.items():
                self.arms[key], self.engines[key] = self.resolve(key, f"{role}-{key}")
                launch = armdiff.describe_launch(self.arms[key], self.engines[key])
                descs[key] = armdiff.static_description(launch)
            if self.aa_key is not None:  # the floor's own server (abh ab --aa): not one of the compared arms
                self.arms[self.aa_key], self.engines[self.aa_key] = self.resolve(self.aa_key, f"aa-{self.aa_key}")
        except (ArmError, EngineError, OSError) as e:
            raise ConfigError(f"cannot prepare arms: {e}") from None
        diffs = armdiff.arm_diff(descs)
        bad = armdiff.disallowed(diffs, self.allowed)
        self.manifest.record_arms({k: {"launch": descs[k], "name": printable(self.arms[k].name, one_line=True),
                                       "side": printable(self.arms[k].side, one_line=True),
                                       "deterministic": self.engines[k].deterministic_record()}
                                   for k in self.keys.values()}, diffs, bad, self.allowed)
        # the source diff, computed from the arms' trees or refs; enforced (exit 6) before any server
        self.source_diff = sourcediff.compute(self.arms[self.keys["a"]], self.arms[self.keys["b"]],
                                              [str(f) for f in self.x.fix_files])
        self.manifest.record("source_diff", self.source_diff.to_dict())
        return diffs, bad

    def enforce_sources(self) -> None:
        """The arms' sources differ only in ``experiment.fix_files`` (exit 6 otherwise), before any server."""
        if not self.cfg.dry_run:
            self.log.say(self.source_diff.line())
        try:
            sourcediff.enforce(self.source_diff)
        except sourcediff.SourceDiffError as e:
            raise Failure(e.code, str(e)) from None

    def preflight(self) -> list[Preflight]:
        """Each arm's preflight (its own software asked about its launch: SGLang's parser on its flags, vLLM's
        distribution), said and recorded (``manifest.json`` ``preflight``); :meth:`refuse` stops."""
        results = [p for key in dict.fromkeys(self.keys.values()) if (p := self.engines[key].preflight())]
        for p in results:
            for line in p.lines():
                self.log.say(line)
        self.manifest.record("preflight", {p.arm: p.to_doc() for p in results})
        return results

    def refuse(self, bad: list[armdiff.ArmDiffRow], preflights: list[Preflight],
               checks: dict[str, list[CheckResult]] | None = None) -> None:
        """What stops a run before its first server, in order: the preflight (2), a disallowed difference
        between the arms (6), a source outside ``experiment.fix_files`` (6), a static side check (3). A dry
        run stops with the code the real run would have; ``checks``: the static checks it ran already."""
        dry = " (a real run would stop here)" if self.cfg.dry_run else ""
        refused = [f"arm {p.arm}: {'; '.join(p.problems)}" for p in preflights if not p.ok]
        if refused:
            raise Failure(exitcodes.BAD_CONFIG, "the preflight refuses the launch (the server would not "
                          "start): " + " | ".join(refused) + dry)
        refuse_disallowed(bad)
        self.enforce_sources()
        for key, results in (self.static_checks() if checks is None else checks).items():
            try:
                assert_checks(results, key)
            except SideAssertionError as e:  # the real run's message: "side assertion failed for arm ..."
                if not dry:
                    raise
                raise Failure(exitcodes.SIDE_ASSERTION_FAILED,
                              f"{e} (a real run would stop here, before measuring)") from None

    def static_checks(self) -> dict[str, list[CheckResult]]:
        """Side checks that need no server (source probes in each arm's interpreter), for every arm."""
        # with the engine's env too: SGLANG_USE_AITER and friends change what SGLang's modules do at import
        results = {key: run_static_checks(arm, self.engines[key].cfg.env) for key, arm in self.arms.items()}
        self.manifest.record_static_checks({k: [r.to_dict() for r in rs] for k, rs in results.items()})
        return results

    def print_dry_run(self, diffs: list[armdiff.ArmDiffRow], checks: dict[str, list[CheckResult]]) -> None:
        for role, key in self.keys.items():
            print_launch(role, self.arms[key], self.engines[key].launch_spec())
        print("\ndeterministic inference (engine.deterministic):")
        for role, key in self.keys.items():
            e = self.engines[key]
            caveat = e.deterministic_caveat() if e.deterministic else None
            print(printable(f"  arm {role}: {'requested' if e.deterministic else 'not requested'}; {e.kind} promises "
                            f"it: {e.deterministic_promise}" + (f"; CAVEAT: {caveat}" if caveat else "")))
        print("\nwhat differs between the arms:")
        for d in diffs or [{"key": "(nothing)", "values": {}}]:
            print(printable(f"  {d['key']}: " + "  vs  ".join(f"{k}={v!r}" for k, v in d.get("values", {}).items())))
        print(self.source_diff.line())
        if self.source_diff.outside:
            print(f"  {self.source_diff.outside_line()}")
        for key, results in checks.items():
            for r in results:
                print(printable(f"check [{key}] {r.name}: {'PASS' if r.passed else 'FAIL'} (expected "
                                f"{r.expected!r}, found {r.found!r})"))

    # ------------------------------------------------------------------ measuring
    def acquire(self, item: Step, label: str) -> Launch:
        """The server for ``item``'s eval; once both arms have served in this session, their live launches
        (fingerprints included) are diffed and a disallowed difference stops the run."""
        launch = self.pool.acquire(item.arm_key, item.role, fresh=item.fresh, label=label)
        if not self.live_diff_checked and self.pool.launched >= set(self.keys.values()):
            self.live_diff_checked = True
            full = {k: armdiff.describe_launch(self.arms[k], self.engines[k]) for k in self.keys.values()}
            diffs = armdiff.arm_diff(full)
            bad = armdiff.disallowed(diffs, self.allowed)
            self.manifest.record_live_diff(full, diffs, bad)
            # /server_info of both arms, diffed like the launch: shown and recorded, not enforced
            info_diff = armdiff.server_info_diff({k: self.server_info(k) for k in self.keys.values()})
            self.manifest.record("server_info_diff", info_diff)
            if info_diff:  # one line; each difference is in run.log and manifest.json
                keys = [str(d["key"]) for d in info_diff]
                for d in info_diff:
                    self.log.write("  /server_info differs: " + d["key"] + ": "
                                   + "  vs  ".join(f"{k}={v!r}" for k, v in d["values"].items()))
                shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
                self.log.detail(f"/server_info: {len(keys)} difference(s) between the arms ({shown}; not enforced): "
                             "run.log and manifest.json server_info_diff have each")
            refuse_disallowed(bad, "the serving processes differ")
        return launch

    def server_info(self, key: str) -> JSON:
        """What arm ``key``'s last launch said in ``/server_info`` (its probe), None without one."""
        launches = self.manifest.data["arms"][key].get("launches") or []
        probe = launches[-1].get("probe") if launches else None
        return probe.get("server_info") if probe else None

    def items(self) -> list[Step]:
        """The schedule: a fixed design's every eval, or a sequential run's worst case (max_repeats), with the
        scoring passes placed on the evals' launches (:func:`harness.orchestrate.schedule.with_scoring`)."""
        x = self.x
        if self.looks is not None:
            items = sequential_schedule(self.keys["a"], self.keys["b"], self.looks.design.max_repeats, x.aa_control,
                                        aa_fresh_launch=x.aa_fresh_launch)
        else:
            items = schedule(self.keys["a"], self.keys["b"], x.repeats, x.order, x.aa_control,
                             restart_per_repeat=x.restart_per_repeat, aa_fresh_launch=x.aa_fresh_launch,
                             aa_arm=self.aa_key)
        if self.scoring is None:
            return items
        return with_scoring(items, self.scoring.reference, self.keys, self.aa_key,
                            concurrent=x.concurrent_servers)

    def cost(self) -> schema.Cost:
        """GPU time so far, per role and in total, from the manifest's launch and eval records."""
        return cost_from_manifest(self.manifest.data, self.run_dir, gpus=self.gpus)

    def print_design(self, items: list[Step]) -> None:
        """The design before the first launch, with its cost when this run directory's launches were timed."""
        x, a = self.x, self.keys["a"]
        gpus = {"a": self.gpus[a], "b": self.gpus[self.keys["b"]], "aa": self.gpus[a]}
        times = None
        if any(arm.get("launches") for arm in self.manifest.data.get("arms", {}).values()):
            prior = self.cost()
            if "launch_s" not in prior.estimated:
                times = times_from_cost(prior)
        seq: SequentialSchedule | None = None
        if self.looks is not None:
            d = self.looks.design
            seq = {"max_repeats": d.max_repeats, "min_repeats": d.min_repeats,
                   "expected_if_null": None if d.tests_margin else
                   operating_characteristics(d, 0.0)["expected_repeats"]}
        design = describe(items, concurrent=x.concurrent_servers, gpus=gpus, times=times, sequential=seq,
                          floor_server=self.aa_key is not None)
        self.manifest.record("planned_design", design)
        first = self.manifest.data.get("planned_design_first")
        if first is None:
            self.manifest.record("planned_design_first", design)
        for line in format_design(design, x.repeats, x.restart_per_repeat,
                                  can_restart=self.cfg.engine.kind != "external"):
            self.log.say(line)
        pending = {it.role for it in items if it.is_eval and not self.item_done(it.rel_dir)}
        for line in resumed_design.plan_lines(first, self.manifest.data.get("evals", {}), pending):
            self.log.say(line)
        off = self.cfg.divergence
        if not off.enabled and off.off_reason:  # said before the evals, not only in the verdict after them
            self.log.say(f"  divergence: not measured: {off.off_reason}")

    def run_items(self, items: list[Step], of: int, start: int = 0) -> None:
        """Run ``items`` (evals numbered from ``start`` + 1 of ``of``), keeping the evals already complete and the
        scoring passes already scored. With concurrent servers every arm's server is up and asserted before the
        first question."""
        pending: list[Step] = []
        evals = [it for it in items if it.is_eval]
        label = {it: f"[{n}/{of}]" for n, it in enumerate(evals, start + 1)}
        for item in evals:
            self.manifest.add_eval(item.rel_dir, arm=item.arm_key, role=item.role, repeat=item.repeat)
            if self.item_done(item.rel_dir):
                self.log.say(f"{label[item]} {item.rel_dir}: already complete, kept")
                self.kept.add(item.rel_dir)
            else:
                pending.append(item)
        scoring = self.scoring
        pending += [it for it in items if not it.is_eval and scoring is not None and not scoring.current(it)]
        if self.x.concurrent_servers:
            firsts: dict[str, Step] = {}
            for it in [it for it in items if it in pending]:
                firsts.setdefault(it.arm_key, it)
            for first in firsts.values():
                self.acquire(first, "")
        for item in items:
            if item.is_eval:
                if item in pending:
                    self.evaluate(item, self.acquire(item, label[item]), label[item])
            elif scoring is not None:  # decided now: a reference pass scored again makes the others stale
                if scoring.current(item):
                    self.log.say(f"scoring {item.rel_dir}: already scored, kept")
                else:
                    self.score(scoring, item)

    def score(self, scoring: ScoringPhase, item: Step) -> None:
        """One scoring pass; a server that dies or hangs in it stops the run as in an eval (exit 4)."""
        launch = self.acquire(item, "[scoring]")
        try:
            scoring.score(item, launch)
        except ServerGone as e:
            raise self.server_failed(item.arm_key, launch, f"scoring {item.rel_dir}", e,
                                     "The questions scored so far are kept") from None

    def server_failed(self, key: str, launch: Launch, during: str, e: ServerGone, kept: str) -> Failure:
        """Stop the server of ``key`` that failed ``during`` something; the run's failure (exit 4), with the
        server's last log lines where abh launched it."""
        tail = self.pool.log_tail(key)
        self.pool.stop(key, "it failed")
        return Failure(exitcodes.SERVER_FAILURE,
                       f"server of arm {key} (launch {launch.id}) failed during {during}: {e}. {kept}; rerun "
                       "the same command to resume."
                       + (f"\n--- last lines of its log ---\n{tail}" if tail else ""))

    def measure(self) -> None:
        items = self.items()
        self.print_design(items)
        try:
            if self.looks is None:
                self.run_items(items, sum(it.is_eval for it in items))
            else:
                self.measure_sequential(items)
        finally:
            self.pool.stop_all()
            self.manifest.end_session()

    def measure_sequential(self, items: list[Step]) -> None:
        """Repeat r of both arms (fresh launches), then the look; stop when a look decides or at max_repeats;
        then the A/A control. Every look is recorded in the manifest as it is made, so a rerun continues from
        the recorded looks (and skips the repeats a decided run no longer needs)."""
        looks = self.looks
        assert looks is not None
        rel = self.run_dir / "evals"
        done, of = 0, sum(it.is_eval for it in items)
        for r in range(1, looks.design.max_repeats + 1):
            if not looks.wants(r):
                break
            pair = [it for it in items if it.role in ("a", "b") and it.repeat == r]
            self.run_items(pair, of, done)
            done += sum(it.is_eval for it in pair)
            for key in list(self.pool.live):  # never reused: the next repeat (or the A/A control) launches afresh
                self.pool.stop(key, f"repeat {r} of both arms is done")
            decision = looks.look(r, [rel / "a" / f"r{k}" for k in range(1, r + 1)],
                                  [rel / "b" / f"r{k}" for k in range(1, r + 1)])
            if decision is None:
                self.log.say(f"repeat {r}: no look before repeat {looks.design.min_repeats}")
                continue
            self.manifest.record("sequential", looks.record(self.cost()).to_doc())
            self.log.say(f"look after repeat {r}: {decision.sentence}")
            if decision.stop:
                break
        aa = [it for it in items if it.role == "aa"]
        if aa and looks.decided:
            self.run_items(aa, of, done)

    def evaluate(self, item: Step, launch: Launch, label: str) -> None:
        cfg, key, rel, engine = self.cfg, item.arm_key, item.rel_dir, launch.engine
        self.manifest.eval_started(rel, launch.id)
        launch.passes += 1
        self.log.detail(f"{label} eval {rel} (arm {key}, launch {launch.id}) on {engine.url}")
        # launch: which server launch served the eval (the statistics treat runs that share one as dependent);
        # "instance" is the same id under the name the eval store records per session.
        meta = {"arm": key, "role": item.role, "repeat": item.repeat, "launch": launch.id, "instance": launch.id,
                "simulated": engine.simulated}
        summaries = []
        try:
            for t in self.tasks:  # every task on this launch, one after the other
                out = t.eval_dir(self.run_dir, rel)
                if self.several and eval_done(out):
                    continue
                if self.several:
                    self.log.say(f"  task {t.key} ({t.spec.name}, recipe {t.probe.recipe.name}) -> {out.name}/")
                ccfg = ClientConfig.of(cfg.client, url=engine.url, api=t.api(engine.api))
                opts = EvalOptions(progress=cfg.progress, abort_check=engine.alive,
                                   extra_meta={**meta, **({"task_key": t.key} if t.key else {})},
                                   on_status=lambda line: self.log.say(f"  {line}"),
                                   prompt_tokens=launch.prompt_tokens, prompt_texts=self.run_dir / TEXTS)
                summaries.append(self.interrupts.run_async(run_task_eval_async(t.builder(), ccfg, out, opts)))
                if self.several:
                    acc = summaries[-1]["accuracy"]
                    self.log.say(f"  {rel}/{t.key}: accuracy {acc:.4f}, errors {summaries[-1]['errors']}"
                                 if acc is not None else f"  {rel}/{t.key}: no answers")
            summary = summaries[0] if not self.several else tasks_phase.combined_summary(summaries)
        except Interrupted:
            self.manifest.eval_ended(rel, "interrupted")
            raise
        except WrongServer as e:  # the launched server does not speak the configured API: a config problem
            self.manifest.eval_ended(rel, "failed", error=str(e))
            raise Failure(exitcodes.BAD_CONFIG, f"arm {key}: {e}") from None
        except ServerGone as e:  # died, or stalled (the client's watchdog): stop it, say why, keep the answers
            self.manifest.eval_ended(rel, "failed", error=str(e))
            raise self.server_failed(key, launch, rel, e, "Answers so far are kept") from None
        status = "complete" if summary["complete"] and not summary["errors"] else (
            "errors" if summary["complete"] else "incomplete")
        self.manifest.eval_ended(rel, status, summary)
        acc = summary["accuracy"]
        if not self.several:
            where = f"{label} {rel} (arm {key}, launch {launch.id})"
            self.log.say(f"{where}: accuracy {100 * acc:.2f} %, errors {summary['errors']}" if acc is not None
                         else f"{where}: no answers")

    # ------------------------------------------------------------------ statistics and report
    def finish(self) -> int:
        """Compare the arms (each task, then Holm across them), write the comparison, summary.json and the
        reports, print the verdict last; the exit code."""
        dirs = {role: [self.run_dir / rel for rel in self.manifest.evals_of(role)] for role in ("a", "b", "aa")}
        with contextlib.suppress(OutputError):  # a full disk: what is not packed stays plain, as readable
            pack(self.run_dir / TEXTS)  # no eval appends any more: the prompts stored gzip'd
            for role in ("a", "b", "aa"):
                for rel in self.manifest.evals_of(role):
                    if rel not in self.kept:
                        pack_prompts(self.run_dir / rel)
        try:
            if self.several:
                code, tasks = self._conclude_tasks(dirs)
            else:
                code, comparison, line = self._conclude(dirs)
        except CompareError as e:
            raise _cannot_compare(e) from None
        if self.cfg.report:
            code = self._write_reports(code, tasks if self.several else None)
        if not self.several:  # the verdict last: on stdout (coloured on a terminal) and in run.log
            self.log.write(f"verdict: {line}")
            print(coloured(line, comparison.verdict, sys.stdout), flush=True)
        return code

    def _compare_settings(self) -> dict[str, Any]:
        s = self.cfg.stats
        return {"margin": None if s.margin_pp is None else s.margin_pp / 100,
                "min_effect": None if s.min_effect_pp is None else s.min_effect_pp / 100, "alpha": s.alpha,
                "seed": s.seed, "max_error_rate": s.max_error_rate, "hypothesis": str(s.hypothesis),
                "assume_no_launch_shift": s.assume_no_launch_shift}

    def _design(self, **extra: JSON) -> dict[str, JSON]:
        x = self.x
        return {**self.manifest.design(), "concurrent_servers": bool(x.concurrent_servers),
                "restart_per_repeat": bool(x.restart_per_repeat), "aa_fresh_launch": bool(x.aa_fresh_launch),
                "order": str(x.order), **extra}

    def _conclude(self, dirs: dict[str, list[Path]]) -> tuple[int, schema.Comparison, str]:
        """One task: its comparison (with the sequential decision and the divergence), summary.json, the table."""
        x, s, run_dir, m = self.x, self.cfg.stats, self.run_dir, self.manifest
        comparison = compare_dirs(dirs["a"], dirs["b"], aa_dirs=dirs["aa"], **self._compare_settings())
        # names are anyone's text: stored escaped, so no report, plot or table gets a control character
        comparison = replace(comparison, arm_names=schema.ArmNames(a=printable(self.arms[x.a].name, one_line=True),
                                                                   b=printable(self.arms[x.b].name, one_line=True)),
                             command=list(self.command) if self.command else None)
        cost = self.cost()
        m.record("cost", cost.to_doc())
        seq: schema.SequentialRecord | None = None
        if self.looks is not None:  # the verdict of a sequential run is its sequential decision
            seq = self.looks.record(cost)
            m.record("sequential", seq.to_doc())
            comparison = apply_to_comparison(comparison, seq)
        if self.scoring is not None:  # every pass the schedule placed that ran (a sequential run stops early)
            d = {side: [p for p in dirs if has_pass(p)] for side, dirs in self.scoring.dirs(self.items()).items()}
            passes = (self.scoring.ref_dir, next(iter(d["other"]), None), next(iter(d["same"]), None))
            texts = _outputs([*dirs["a"], *dirs["b"], *dirs["aa"], *(p for p in passes if p is not None)])
            t_ref, t_b, t_aa = (None if p is None else texts.get(str(p)) for p in passes)
            comparison = replace(comparison, divergence=cached(  # stored for abh compare to reuse
                compute_divergence, *passes, d["same"][1:], d["other"][1:], store=True, alpha=s.alpha, seed=s.seed,
                reference=self.scoring.reference, min_scored_share=float(self.cfg.divergence.min_scored_share),
                texts_ref=t_ref, texts_b=t_b, texts_aa=t_aa))
            if self.cfg.divergence.routing:  # the MoE routed experts of the same passes' launches
                comparison = replace(comparison, routing=compute_routing(
                    self.scoring.ref_dir, d["other"], d["same"], reference=self.scoring.reference, alpha=s.alpha,
                    seed=s.seed, labels={k: self.arms[getattr(x, k)].side or self.arms[getattr(x, k)].name
                                         for k in ("a", "b")}))
            if comparison.identity is not None:
                comparison = identity.with_passes(comparison, dirs["a"], dirs["b"], dirs["aa"], passes,
                                                  near_tie_nats=self.cfg.divergence.near_tie_nats)
            else:
                comparison = identity.first_divergences(comparison, dirs["a"], dirs["b"], dirs["aa"], passes,
                                                        near_tie_nats=self.cfg.divergence.near_tie_nats,
                                                        texts=texts)
        elif self.cfg.divergence.off_reason:
            comparison = replace(comparison, divergence=schema.Divergence(
                verdict="not_measured", verdict_reason=str(self.cfg.divergence.off_reason)))
        changed = resumed_design.result_warning(m.data.get("planned_design_first"), comparison.design.launches,
                                                len(m.data.get("sessions", [])))
        if changed:  # said in the result as in the plan
            comparison = replace(comparison, warnings=[*comparison.warnings, changed])
        schema.write_comparison(run_dir / rundir.COMPARISON, comparison)
        gate = self.cfg.fail_on
        code = comparison_exit(comparison, gate)  # 5, or 7 for --fail-on
        line = headline(comparison)
        summary = schema.run_summary(comparison, experiment=str(x.name),
                                     repeats=int(x.repeats) if seq is None else seq.repeats_run,
                                     aa_control=bool(x.aa_control), exit_code=code, design=self._design(),
                                     cost=cost, sequential=seq, headline=line)
        schema.write_run_summary(run_dir / rundir.RUN_SUMMARY, summary)
        m.record_status(code, summary.verdict)
        if self.cfg.verbose:  # the statistician's summary, then the cost (arm names are anyone's text)
            print(printable(format_table(summary, comparison)))
        else:
            print(printable("\n".join(result_lines(comparison, table_title(summary, comparison), cost))))
        if seq is not None:
            print(f"  {sequential_line(seq)}")
        if self.cfg.verbose:
            print(format_cost(cost))
        reason = exit_reason(code, comparison, gate) or gate_not_applied(comparison, gate, self.command_name)
        if reason:
            self.log.say(reason)
        return code, comparison, line

    def _conclude_tasks(self, dirs: dict[str, list[Path]]) -> tuple[int, TaskOutputs]:
        """Several tasks: each task's comparison, Holm across them, the overall decision; the per-task files,
        tasks.json, summary.json (its verdict: the overall decision)."""
        x, run_dir, m = self.x, self.run_dir, self.manifest
        names = schema.ArmNames(a=self.arms[x.a].name, b=self.arms[x.b].name)
        comparisons, tc = tasks_phase.compare_run_tasks(self.tasks, dirs, names=names,
                                                        command=list(self.command) if self.command else None,
                                                        **self._compare_settings())
        tasks_phase.write_task_outputs(run_dir, comparisons, tc, report=False)
        cost = self.cost()
        m.record("cost", cost.to_doc())
        gate = self.cfg.fail_on
        codes = [comparison_exit(c, None) for c in comparisons.values()]
        ungated = next((c for c in comparisons.values() if not gated(c)), None)
        code = max(codes, default=exitcodes.OK) or gate_exit(
            tc.decision, None if ungated is not None else gate)
        summary = schema.RunSummary(
            experiment=str(x.name), verdict=tc.decision, verdict_reason=tc.decision_reason, exit_code=code,
            simulated=tc.simulated, accuracy={}, arms={"a": names.a, "b": names.b}, repeats=int(x.repeats),
            aa_control=bool(x.aa_control), design=self._design(tasks=[t.key for t in self.tasks]), cost=cost,
            tasks={r.key: r.verdict_holm for r in tc.rows})
        schema.write_run_summary(run_dir / rundir.RUN_SUMMARY, summary)
        m.record_status(code, summary.verdict)
        print(f"experiment {x.name}: {names.a} (A) vs {names.b} (B), {len(self.tasks)} tasks x {x.repeats} "
              "repeat(s), every task on every launch")
        print(format_tasks(tc))
        print(format_cost(cost))
        if code == exitcodes.GATE_FAILED:
            self.log.say(f"overall decision {tc.decision} fails --fail-on {gate} (exit {code})")
        elif code:
            worst = next(c for c in comparisons.values() if comparison_exit(c, None) == code)
            reason = exit_reason(code, worst, None)
            if reason:
                self.log.say(reason)
        elif ungated is not None and gate is not None:
            self.log.say(f"overall decision {tc.decision}: " + str(gate_not_applied(ungated, gate, self.command_name)))
        return code, (comparisons, tc)

    def _write_reports(self, code: int, tasks: TaskOutputs | None) -> int:
        """report.html and comparison.md (and each task's, in a run of several); a report that cannot be written
        never takes the measured verdict with it, but the exit code says so."""
        run_dir = self.run_dir
        try:
            if tasks is not None:
                tasks_phase.write_task_outputs(run_dir, *tasks, report=True)
            self.log.say(f"report: {write_report(run_dir)}, {write_markdown(run_dir)}")
        except OutputError as e:  # a full disk: the measured verdict is in comparison.json already
            self.log.say(f"report not written: {e}")
            return code or exitcodes.BAD_CONFIG
        except Exception as e:  # noqa: BLE001 - a report bug must not take the measured verdict with it
            self.log.write(traceback.format_exc())
            self.log.say(f"report not written: unexpected error (this is a bug): {type(e).__name__}: {e}; "
                         f"traceback in {run_dir / rundir.RUN_LOG}")
            return code or exitcodes.UNEXPECTED
        return code


#: a run of several tasks: each task's comparison and the tasks compared together
TaskOutputs = tuple[dict[str, schema.Comparison], schema.TasksComparison]


def _cannot_compare(e: CompareError) -> Failure:
    """The exit code and message of a comparison that could not be made (one task or several alike)."""
    if isinstance(e, CompareSettingsError):  # the settings, not the evals: they are kept for the rerun
        key = SETTING_KEYS.get(e.setting, f"stats.{e.setting}")
        return Failure(exitcodes.BAD_CONFIG, f"the arms cannot be compared: {e}; fix {key} and rerun: the "
                       "evals are kept")
    if isinstance(e, IncomparableEvals):  # not a matter of failed requests: a rerun would not change it
        return Failure(exitcodes.BAD_CONFIG, f"the arms cannot be compared: {e}")
    if isinstance(e, TooFewAnswered):  # request errors (5, a rerun retries them), or too few questions asked (2)
        return Failure(e.exit_code, f"the arms cannot be compared: {e}" + (
            ". Rerun the same command to retry the failed requests." if e.exit_code == exitcodes.TOO_MANY_ERRORS
            else " (task.num_questions)"))
    return Failure(exitcodes.TOO_MANY_ERRORS, f"the arms cannot be compared: {e}. Rerun the same command to "
                   "retry the failed requests.")


def refuse_disallowed(bad: list[armdiff.ArmDiffRow], what: str = "the arms differ") -> None:
    if bad:
        raise Failure(exitcodes.ARMS_DIFFER, f"{what} in something the experiment does not allow: "
                      + "; ".join(d["key"] for d in bad)
                      + ". Nothing is measured; declare it in experiment.allowed_differences if intended.")


def run_experiment(cfg: Config, run_dir: Path, interrupts: Interrupts, log: rundir.RunLog,
                   command: list[str] | None = None, unset_env: dict[str, str] | None = None) -> int:
    """Run (or resume) the experiment in ``run_dir``; return the exit code (failures raise)."""
    run = Run(cfg, run_dir, interrupts, log, command, unset_env)
    try:
        diffs, bad = run.prepare_arms()
        preflights = run.preflight()
        if cfg.dry_run:
            checks = run.static_checks()
            run.print_dry_run(diffs, checks)
            run.print_design(run.items())
            print("\ndry run: no server started, nothing measured.")
            # a real run resolves its arms strictly: a source problem stops it first
            problems = [p for arm in run.arms.values() for p in arm.source.problems]
            if problems:
                raise Failure(exitcodes.BAD_CONFIG, "a real run would stop here: " + "; ".join(problems))
            run.refuse(bad, preflights, checks)
            return exitcodes.OK
        run.refuse(bad, preflights)
        if run.scoring is not None:  # pyarrow's memory pool chosen before any other thread runs
            import harness.results.arrow  # noqa: F401
        run.measure()
        interrupts.check()  # a signal that arrived while the last servers were being stopped
        return run.finish()
    finally:
        run.lock.release()


def exit_for(e: BaseException) -> tuple[int, str] | None:
    """The exit code and the one line for an expected failure; None for a bug."""
    if isinstance(e, Failure):
        return e.code, f"error: {e}"
    if isinstance(e, Interrupted):
        return e.exit_code, f"interrupted by {e}; servers stopped, results kept. Rerun the same command to resume."
    if isinstance(e, KeyboardInterrupt):
        return exitcodes.INTERRUPTED, "interrupted; servers stopped, results kept. Rerun the same command to resume."
    if isinstance(e, CONFIG_ERRORS):
        return exitcodes.BAD_CONFIG, f"error: {e}"
    if isinstance(e, SideAssertionError):
        return exitcodes.SIDE_ASSERTION_FAILED, f"error: {e}"
    if isinstance(e, EngineError):
        return exitcodes.SERVER_FAILURE, f"server failure: {e}"
    return None


# ------------------------------------------------------------------------------------------ the job


def refuse_config(e: ConfigError, run_dir: Path, dry_run: bool) -> int:
    """A config the door refused: its one line (in run.log too), exit 2; a dry run leaves no directory."""
    rundir.RunLog(None if dry_run else run_dir).say(f"error: {e}")
    if dry_run:
        with contextlib.suppress(OSError):
            run_dir.rmdir()
    return exitcodes.BAD_CONFIG


def run_job(cfg: Config, run_dir: Path, command: list[str] | None = None,
            unset_env: dict[str, str] | None = None) -> int:
    """Run (or resume) the experiment in ``run_dir`` with the run's signal handling; every way out becomes an
    exit code and one line (a bug: its traceback in run.log), and a failed run leaves its failure summary.
    ``command``: the (redacted) command line that asked for it, recorded with the results; ``unset_env``: see
    :class:`Run`."""
    log = rundir.RunLog(None if cfg.dry_run else run_dir, verbose=cfg.verbose)  # a dry run writes nothing
    with Interrupts() as interrupts:
        try:
            code = run_experiment(cfg, run_dir, interrupts, log, command, unset_env)
        except (DirectoryInUse, PlantedLink) as e:  # another run owns the directory, its run.log included, or a
            # link was planted in it (run.log perhaps): said here only
            prog = " ".join(command[:2]) if command and len(command) > 1 else "abh run"
            print(redact_text(f"{prog}: error: {e}"), file=sys.stderr, flush=True)
            return exitcodes.BAD_CONFIG
        except BaseException as e:  # noqa: BLE001 - every way out becomes an exit code and one line
            known = exit_for(e)
            if known is None and not isinstance(e, Exception):
                raise  # SystemExit and the like: not ours to translate
            if known is None:
                code = exitcodes.UNEXPECTED
                log.write(traceback.format_exc())
                if log.path is None:  # a dry run: no run.log
                    traceback.print_exc()
                line = (f"abh: unexpected error (this is a bug): {type(e).__name__}: {e}; traceback "
                        + (f"in {run_dir / rundir.RUN_LOG}" if log.path is not None else "above"))
                print(redact_text(line), file=sys.stderr, flush=True)
                log.write(line)
                reason = f"unexpected error (a bug): {type(e).__name__}: {e}"
            else:
                code, line = known
                log.say(line)
                reason = line
            if code not in (exitcodes.BAD_CONFIG, *INTERRUPTED_CODES) and not cfg.dry_run:
                with contextlib.suppress(Exception):  # the failure is reported already; this is the record
                    rundir.write_failure_summary(run_dir, cfg.experiment.name, code, reason)
    if cfg.dry_run:  # Hydra made the run directory for it: a dry run leaves none behind (one that holds files stays)
        with contextlib.suppress(OSError):
            run_dir.rmdir()
    return code


def _outputs(dirs: Sequence[Path]) -> dict[str, dict[int, str | None]]:
    """The outputs of these eval directories by question, read once for the divergence and its partings (a
    directory that cannot be read is left out: each reader reads it again and says so)."""
    out: dict[str, dict[int, str | None]] = {}
    for d in dirs:
        if str(d) not in out:
            try:
                out[str(d)] = identity.texts_of(d)
            except (OSError, ValueError, StoreError):
                continue
    return out
