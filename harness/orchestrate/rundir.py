"""A run directory (its layout: docs/run-directory.md): the file names, the manifest (the one record of what
happened, every event as it happens), the config digest and the rule that decides whether a rerun resumes,
and ``run.log``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict, cast, overload

from harness import __version__
from harness.arms.sourcediff import SourceDiffDoc
from harness.checks.armdiff import ArmDiffRow, LaunchDescription
from harness.checks.result import CheckResultDoc
from harness.config import PROJECT_ROOT, ConfigError
from harness.engines.base import ServerProbe
from harness.engines.gpu import gpu_inventory
from harness.engines.process import StopInfo
from harness.orchestrate.design import PlannedDesign
from harness.results import fileio, schema
from harness.results.fileio import OutputError, PlantedLink
from harness.results.records import JSONObject
from harness.serving.untrusted import printable
from harness.util.keys import flatten, matches
from harness.util.redact import redact_text, redact_tree

MANIFEST = schema.MANIFEST_FILE
RUN_SUMMARY = schema.RUN_SUMMARY_FILE
COMPARISON = schema.COMPARISON_FILE
RUN_LOG = "run.log"

#: Config keys (dotted prefixes) that do not change what is measured: a rerun may change them and resume.
#: Statistics are recomputed from the stored answers; scheduling options change when, not what, is asked;
#: the scoring passes (``divergence``) record what they scored and are redone when it changed.
NON_SEMANTIC = ("progress", "verbose", "report", "dry_run", "fail_on", "stats", "client.request_timeout_s",
                "client.retries", "client.backoff_s", "client.stall_timeout_s", "client.api_key",
                "client.api_key_env", "client.max_bytes_per_token", "client.read_timeout_s",
                "client.progress_timeout_s", "experiment.description", "experiment.order",
                "experiment.concurrent_servers", "experiment.restart_per_repeat", "experiment.aa_fresh_launch",
                "experiment.allowed_differences", "experiment.fix_files", "divergence")


# ------------------------------------------------------------------------------------------ the record's shape
class ConfigDigest(TypedDict):
    """What decides whether a rerun may resume (:func:`config_digest`): the digest and the keys it covers."""

    sha256: str
    #: the resolved config's keys that change what is measured, flattened (``a.b.c``), secrets redacted
    semantic: JSONObject


class Provenance(TypedDict):
    harness_version: str
    harness_commit: str | None
    harness_dirty: bool
    host: str
    platform: str
    python: str
    gpus: list[dict[str, str]] | None


class TaskDataset(TypedDict):
    """One task's data in a run of several tasks."""

    task: str
    recipe: str
    sha256: str
    source: str
    rows: int


class DatasetRecord(TypedDict):
    """The run's test data (a run of several tasks: the GSM8K one, else the first; ``tasks``: each one's)."""

    sha256: str
    source: str
    canonical: bool | None
    rows: int
    tasks: NotRequired[dict[str, TaskDataset]]


class SessionRecord(TypedDict, total=False):
    """One invocation of the run (``sessions[]``): ``ended`` once it is over."""

    started: float
    pid: int
    argv: list[str]
    #: evals were on disk already when it started
    resume: bool
    ended: float


class LaunchRecord(TypedDict, total=False):
    """One server launch (``arms.<key>.launches[]``): its id, the role of the eval it was started for, when it
    was spawned and ready (``launch_s`` between them), its probe; once stopped, when, ``server_s`` (spawned to
    stopped) and how (``stop``). Older runs recorded less (harness.analysis.cost infers the rest)."""

    id: str
    role: str
    url: str
    spawned: float
    ready: float
    launch_s: float
    probe: ServerProbe | None
    stopped: float
    server_s: float
    stop: StopInfo | None


class ArmRecord(TypedDict, total=False):
    """One arm (``arms.<key>``): its name, side and launch description, its checks, launches and status."""

    launch: LaunchDescription
    name: str
    side: str
    #: deterministic inference: requested or not, the flags and env it added, where the engine promises it
    deterministic: JSONObject
    static_checks: list[CheckResultDoc]
    #: ``ok``, ``failed``, ``side_check_failed``, or the status of its last eval
    status: str
    launches: list[LaunchRecord]
    #: the live checks of its last launch
    live_checks: list[CheckResultDoc]


class EvalFigures(TypedDict):
    """An eval's figures as the manifest keeps them (its ``summary.json`` has the rest)."""

    n: int | None
    correct: int | None
    errors: int | None
    accuracy: float | None
    latency_s: float | None


class EvalRecord(TypedDict, total=False):
    """One schedule item's eval (``evals.<evals/role/rK>``): which arm, role and repeat, the launches that
    served it (``resumed_on``: the one its last session resumed on), its status and figures."""

    arm: str
    role: str
    repeat: int
    launches: list[str]
    #: ``running``, ``complete``, ``errors``, ``incomplete``, ``interrupted`` or ``failed``
    status: str
    started: float
    ended: float
    error: str
    summary: EvalFigures
    resumed_on: list[str]


class ArmDiffRecord(TypedDict):
    """How the arms' launches differ (``arm_diff``: before any server, with the experiment's ``allowed``
    differences; ``arm_diff_live``: once both served, fingerprints included)."""

    differences: list[ArmDiffRow]
    disallowed: list[ArmDiffRow]
    allowed: NotRequired[list[str]]


class RunStatus(TypedDict):
    code: int
    verdict: str | None
    error: NotRequired[str]


#: One scoring pass of the divergence (``scoring.<eval dir>``, harness.orchestrate.divergence_phase): its kind
#: (``pass``: ref, ab, aa or launch; a keyword, hence the functional form), where it ran and how it went.
ScoringRecord = TypedDict("ScoringRecord", {
    "pass": str, "arm": str, "role": str, "launch": str,
    #: ``running``, ``interrupted``, ``failed`` (the server died or hung: with ``reason``), ``ok`` or
    #: ``not_measured`` (with ``reason``)
    "status": str | None, "reason": str | None,
    "wall_s": float | None, "questions": int | None, "tokens": int | None, "errors": int | None,
}, total=False)


class RunManifest(TypedDict, total=False):
    """``manifest.json`` as :class:`Manifest` builds it and reads it back (written: its redacted copy)."""

    kind: str
    schema_version: int
    experiment: str
    #: the resolved config (redacted when written)
    config: JSONObject
    config_sha256: str
    config_semantic: JSONObject
    provenance: Provenance
    dataset: DatasetRecord
    sessions: list[SessionRecord]
    evals: dict[str, EvalRecord]
    arms: dict[str, ArmRecord]
    arm_diff: ArmDiffRecord
    source_diff: SourceDiffDoc
    #: each arm's preflight (harness.engines.preflight.Preflight)
    preflight: dict[str, JSONObject]
    planned_design: PlannedDesign
    #: the first session's plan (a resumed run's design can change: harness.orchestrate.resumed_design)
    planned_design_first: PlannedDesign
    arm_diff_live: ArmDiffRecord
    #: /server_info of both arms, diffed like the launches: shown and recorded, not enforced
    server_info_diff: list[ArmDiffRow]
    scoring: dict[str, ScoringRecord]
    #: the documents of harness.results.schema.Cost and SequentialRecord
    cost: JSONObject
    sequential: JSONObject
    status: RunStatus


# -------------------------------------------------------------------------------------- the digest
def non_semantic_keys(engine_ignores: Iterable[str], arm_keys: Iterable[str]) -> list[str]:
    """:data:`NON_SEMANTIC` plus the engine fields that say how the harness drives a server (timeouts, port,
    a simulator's fault injection: ``Engine.diff_ignore``), at ``engine.`` and in each arm's overrides."""
    ignores = list(engine_ignores)
    return [*NON_SEMANTIC, *(f"engine.{k}" for k in ignores),
            *(f"arms.{a}.engine.{k}" for a in arm_keys for k in ignores)]


def config_digest(resolved: Mapping[str, Any], non_semantic: Iterable[str] = NON_SEMANTIC) -> ConfigDigest:
    """sha256 of the resolved config minus the keys that do not change what is measured; secret values are
    redacted first (a rotated token changes nothing measured and must not be hashed either)."""
    skip = list(non_semantic)
    flat = {k: v for k, v in flatten(resolved).items() if not matches(k, skip)}
    semantic = redact_tree(flat)
    assert isinstance(semantic, dict)  # a mapping's redacted copy is a dict
    digest = hashlib.sha256(json.dumps(semantic, sort_keys=True, default=str).encode()).hexdigest()
    return {"sha256": digest, "semantic": semantic}


def _same_but_added(before: Any, after: Any) -> bool:
    """``after`` is ``before`` but for keys added to objects inside it (a list of check configs whose schema has
    grown since the run was recorded): the same rule as for the flattened keys, one level down."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        return all(k in after and _same_but_added(v, after[k]) for k, v in before.items())
    if isinstance(before, list) and isinstance(after, list):
        return len(before) == len(after) and all(_same_but_added(b, a) for b, a in zip(before, after, strict=True))
    return bool(before == after)


#: engine modules renamed since a run was recorded (the same server): old -> new
_RENAMED = {"harness.simulator": "abh_simulator"}


def check_resume(recorded: RunManifest, digest: ConfigDigest, run_dir: Path,
                 dir_option: str = "hydra.run.dir") -> None:
    """Refuse (ConfigError) to resume a run directory that holds a run of a different config; ``dir_option``: how
    the command names its run directory (``abh ab``: ``--out``)."""
    old = recorded.get("config_sha256")
    if not old or old == digest["sha256"]:
        return
    before = {k: _RENAMED.get(v, v) if k.endswith("engine.module") and isinstance(v, str) else v
              for k, v in (recorded.get("config_semantic") or {}).items()}
    after = digest["semantic"]
    # a key the recorded run did not have was added to the schema since (a user cannot add unknown keys): its
    # default is how the older release behaved, so it is not a change
    changed = sorted(k for k in set(before) | set(after)
                     if k in before and not _same_but_added(before.get(k), after.get(k)))
    if not changed:
        return
    raise ConfigError(f"{run_dir} holds a run of a different config (changed: {', '.join(changed[:8]) or '?'}); "
                      f"its results would be mixed with this one's. Use another {dir_option}, or delete it.")


def refuse_planted_links(run_dir: Path) -> None:
    """PlantedLink naming a symbolic link among the run directory's files or in its ``evals/`` (abh's own: a
    link there was planted); its ``worktrees/`` (source trees) may hold links."""
    fileio.check_tree(fileio.check_dir(run_dir) / "evals")


# ---------------------------------------------------------------------------------- provenance
def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def provenance() -> Provenance:
    """Where and with what the run was made: harness version and commit, host, platform, Python, GPUs."""
    return {"harness_version": __version__, "harness_commit": _git("rev-parse", "HEAD"),
            "harness_dirty": bool(_git("status", "--porcelain")), "host": socket.gethostname(),
            "platform": platform.platform(), "python": sys.version.split()[0], "gpus": gpu_inventory()}


# ------------------------------------------------------------------------------------ the manifest
#: manifest keys a session replaces whole and never edits in place (their redaction is cached by identity)
_SET_ONCE = frozenset({"config", "config_semantic"})


class Manifest:
    """manifest.json. Every event of the run goes through one of these methods, which records it and rewrites
    the file atomically (redacted, once, in :meth:`_commit`), so a crash leaves an accurate record. A dry run
    keeps the record in memory only."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        self.run_dir = run_dir
        self.path = run_dir / MANIFEST
        self.enabled = enabled
        # SchemaError for a manifest this abh cannot read; an older abh's may lack fields (hence all optional)
        self.data = cast(RunManifest, dict(schema.load_manifest(self.path)) if self.path.exists() else {})
        self.session: SessionRecord = {}
        #: redacted copies of the parts a session sets once (the resolved config): redacting them at every
        #: rewrite of the manifest was most of its cost
        self._redacted: dict[str, tuple[Any, Any]] = {}

    def _commit(self) -> None:
        if self.enabled:
            out = {key: self._redact(key, value) for key, value in self.data.items()}
            schema.write_manifest(self.path, out)  # type: ignore[arg-type]

    def _redact(self, key: str, value: object) -> object:
        if key not in _SET_ONCE:
            return redact_tree(value)
        seen = self._redacted.get(key)
        if seen is None or seen[0] is not value:
            seen = self._redacted[key] = (value, redact_tree(value))
        return seen[1]

    def _arm(self, key: str) -> ArmRecord:
        return self.data.setdefault("arms", {}).setdefault(key, {})

    def _eval(self, rel: str) -> EvalRecord:
        return self.data.setdefault("evals", {})[rel]

    # ------------------------------------------------------------------ session
    def start_session(self, *, experiment: str, config: JSONObject, digest: ConfigDigest, dataset: DatasetRecord,
                      argv: list[str] | None = None) -> None:
        m = self.data
        self.session = {"started": time.time(), "pid": os.getpid(), "argv": list(sys.argv if argv is None else argv),
                        "resume": any(self.run_dir.glob("evals/*/*/samples.jsonl"))}
        m.update({"experiment": experiment, "config": config, "config_sha256": digest["sha256"],
                  "config_semantic": digest["semantic"], "provenance": provenance(), "dataset": dataset})
        m.setdefault("sessions", []).append(self.session)
        m.setdefault("evals", {})
        m.setdefault("arms", {})
        self._commit()

    def end_session(self) -> None:
        self.session["ended"] = time.time()
        self._commit()

    # ------------------------------------------------------------------ arms, before any server
    def record_arms(self, arms: Mapping[str, ArmRecord], diffs: list[ArmDiffRow], disallowed: list[ArmDiffRow],
                    allowed: list[str]) -> None:
        """Each arm's name, side and static launch description, and how the launches differ."""
        self.data["arm_diff"] = {"differences": diffs, "disallowed": disallowed, "allowed": allowed}
        for key, info in arms.items():
            self._arm(key).update(info)
        self._commit()

    @overload
    def record(self, key: Literal["source_diff"], value: SourceDiffDoc) -> None: ...
    @overload
    def record(self, key: Literal["preflight"], value: dict[str, JSONObject]) -> None: ...
    @overload
    def record(self, key: Literal["planned_design", "planned_design_first"], value: PlannedDesign) -> None: ...
    @overload
    def record(self, key: Literal["server_info_diff"], value: list[ArmDiffRow]) -> None: ...
    @overload
    def record(self, key: Literal["scoring"], value: dict[str, ScoringRecord]) -> None: ...
    @overload
    def record(self, key: Literal["cost", "sequential"], value: JSONObject) -> None: ...

    def record(self, key: Literal["source_diff", "preflight", "planned_design", "planned_design_first",
                                  "server_info_diff", "scoring", "cost", "sequential"], value: Any) -> None:
        self.data[key] = value
        self._commit()

    def record_static_checks(self, checks: Mapping[str, list[CheckResultDoc]]) -> None:
        for key, results in checks.items():
            self._arm(key)["static_checks"] = results
        self._commit()

    def record_arm_status(self, key: str, status: str) -> None:
        self._arm(key)["status"] = status
        self._commit()

    # ------------------------------------------------------------------ server launches
    def next_launch_id(self, key: str) -> str:
        """``<arm>-<n>``: the n-th launch of the arm's server in this run directory, over all sessions."""
        return f"{key}-{len(self._arm(key).get('launches', [])) + 1}"

    def record_launch(self, key: str, launch_id: str, *, role: str, url: str, spawned: float,
                      probe: ServerProbe | None, live_checks: list[CheckResultDoc]) -> None:
        """A server launch that is ready (``launch_s`` since it was spawned: the cost accounting)."""
        ready = time.time()
        self._arm(key).setdefault("launches", []).append(
            {"id": launch_id, "role": role, "url": url, "spawned": spawned, "ready": ready,
             "launch_s": ready - spawned, "probe": probe})
        self._arm(key)["live_checks"] = live_checks
        self._commit()

    def record_stop(self, key: str, launch_id: str, info: StopInfo | None) -> None:
        for launch in self._arm(key).get("launches", []):
            if launch.get("id") == launch_id:
                launch["stopped"] = time.time()
                if launch.get("spawned") is not None:
                    launch["server_s"] = launch["stopped"] - launch["spawned"]
                launch["stop"] = info
        self._commit()

    def record_live_diff(self, launches: Mapping[str, LaunchDescription], diffs: list[ArmDiffRow],
                         disallowed: list[ArmDiffRow]) -> None:
        """Both serving processes reported their live fingerprints: the full launches and how they differ."""
        self.data["arm_diff_live"] = {"differences": diffs, "disallowed": disallowed}
        for key, desc in launches.items():
            self._arm(key)["launch"] = desc
        self._commit()

    # ------------------------------------------------------------------ evals
    def add_eval(self, rel: str, *, arm: str, role: str, repeat: int) -> None:
        self.data.setdefault("evals", {}).setdefault(rel, {"arm": arm, "role": role, "repeat": repeat})

    def eval_started(self, rel: str, launch_id: str) -> None:
        ev = self._eval(rel)
        ev.setdefault("launches", []).append(launch_id)
        ev["status"] = "running"
        ev.setdefault("started", time.time())
        self._commit()

    def eval_ended(self, rel: str, status: str, summary: Mapping[str, Any] | None = None,
                   error: str | None = None) -> None:
        ev = self._eval(rel)
        ev["status"] = status
        ev["ended"] = time.time()
        if error is not None:
            ev["error"] = error
        if summary is not None:
            ev["summary"] = {"n": summary.get("n"), "correct": summary.get("correct"), "errors": summary.get("errors"),
                             "accuracy": summary.get("accuracy"), "latency_s": summary.get("latency_s")}
            if summary.get("resumed"):
                ev["resumed_on"] = ev.get("launches", [])[-1:]
            self._arm(ev["arm"])["status"] = "ok" if status == "complete" else status
        elif status == "failed":
            self._arm(ev["arm"])["status"] = "failed"
        self._commit()

    def evals_of(self, role: str) -> list[str]:
        return sorted(k for k, v in self.data.get("evals", {}).items() if v.get("role") == role)

    # ------------------------------------------------------------------ the end
    def record_status(self, code: int, verdict: str | None, error: str | None = None) -> None:
        status: RunStatus = {"code": code, "verdict": verdict}
        if error:
            status["error"] = error
        self.data["status"] = status
        self._commit()

    def design(self) -> dict[str, dict[str, int]]:
        """The design as it ran (by each eval's launch ids): launches per role, most passes per launch."""
        evals = self.data.get("evals", {})
        passes: dict[str, int] = {}
        for ev in evals.values():
            for launch in set(ev.get("launches", [])):
                passes[launch] = passes.get(launch, 0) + 1
        out: dict[str, dict[str, int]] = {"launches": {}, "passes_per_launch": {}}
        for role in ("a", "b", "aa"):
            ids = {lid for ev in evals.values() if ev.get("role") == role for lid in ev.get("launches", [])}
            out["launches"][role] = len(ids)
            out["passes_per_launch"][role] = max((passes[i] for i in ids), default=0)
        return out


def write_failure_summary(run_dir: Path, experiment: str, code: int, reason: str) -> None:
    """A run that stopped on a failure still says so in summary.json: the arms are not comparable. A run that
    never started (bad config: no manifest) leaves nothing behind."""
    if not (run_dir / MANIFEST).exists():
        return
    schema.write_run_summary(run_dir / RUN_SUMMARY, schema.RunSummary(
        experiment=experiment, verdict="not_comparable", verdict_reason=redact_text(reason), exit_code=code))
    Manifest(run_dir).record_status(code, "not_comparable", reason)


# ------------------------------------------------------------------------------------------ run.log
class RunLog:
    """What the run tells its user: ``[abh]`` lines on stderr, and the same lines (timestamped) plus the
    traceback of a bug in ``run.log``; secrets redacted in both."""

    def __init__(self, run_dir: Path | None, verbose: bool = True):
        self.path = run_dir / RUN_LOG if run_dir is not None else None
        #: print the detail lines (:meth:`detail`) on the terminal too (``abh run --verbose``)
        self.verbose = verbose
        #: why run.log cannot be written (a full disk), once it could not: the terminal still gets every line
        self.broken: str | None = None

    def say(self, msg: str) -> None:
        line = printable(redact_text(msg))  # server text and names reach the terminal as escapes, never raw
        print(f"[abh] {line}", file=sys.stderr, flush=True)
        self.write(f"[abh] {line}")

    def detail(self, msg: str) -> None:
        """A line for run.log, on the terminal only when verbose (waiting for a server, a side check that
        passed): the default terminal keeps the plan, the progress and the result."""
        if self.verbose:
            self.say(msg)
        else:
            self.write(f"[abh] {printable(redact_text(msg))}")

    def write(self, text: str) -> None:
        """Append to run.log only (when the run directory exists)."""
        if self.path is None or self.broken is not None or not self.path.parent.is_dir():
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        try:
            fileio.append_text(self.path, f"[{stamp}] {printable(redact_text(text)).rstrip()}\n")
        except PlantedLink as e:  # written through never; the run refuses it as it opens its directory
            self.broken = str(e)
        except OutputError as e:  # the log is a copy of what the terminal shows: it must not take the run down
            self.broken = str(e)
            print(f"[abh] warning: {self.broken}; the rest of this run is on the terminal only", file=sys.stderr,
                  flush=True)
