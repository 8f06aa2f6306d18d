"""``abh run``: the Hydra app that runs a whole arm comparison.

For each (arm, repeat) in the declared order: launch or reuse the arm's server, assert its side, run the
eval into ``evals/<arm>/r<k>/``, stop the server when the next item needs another one. Then the paired
statistics (``comparison.json``), ``summary.json``, a table in the terminal and ``report.html``.

The run directory is deterministic (``results/<experiment>`` unless ``hydra.run.dir`` says otherwise), so
rerunning the same command resumes: finished evals are kept, a partial one sends only its missing
questions, and the manifest records the resume.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness import __version__, exitcodes, schema
from harness.config import CONFIG_DIR, PROJECT_ROOT, ConfigError, validate
from harness.keys import flatten, matches
from harness.redact import redact_text, redact_tree

MANIFEST = schema.MANIFEST_FILE
RUN_SUMMARY = schema.RUN_SUMMARY_FILE
COMPARISON = schema.COMPARISON_FILE

#: Exit code of the last job run in this process (Hydra's decorated main returns nothing).
_EXIT: list[int] = []


class Interrupted(BaseException):
    """SIGTERM (preemption) or SIGINT: stop servers, keep everything on disk, exit resumable."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class RunFailure(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _say(msg: str) -> None:
    print(f"[abh] {redact_text(msg)}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- schedule
@dataclass(frozen=True)
class Item:
    """One eval of the run: an arm's repeat, or one of the A/A control's extra baseline runs."""

    role: str  # "a", "b" or "aa"
    arm_key: str
    repeat: int

    @property
    def rel_dir(self) -> str:
        return f"evals/{self.role}/r{self.repeat}"


def schedule(a: str, b: str, repeats: int, order: str, aa_control: bool) -> list[Item]:
    if order == "interleaved":
        items = [it for r in range(1, repeats + 1) for it in (Item("a", a, r), Item("b", b, r))]
    else:
        items = [Item("a", a, r) for r in range(1, repeats + 1)] + [Item("b", b, r) for r in range(1, repeats + 1)]
    if aa_control:
        items += [Item("aa", a, 1), Item("aa", a, 2)]
    return items


# -------------------------------------------------------------------------------------- provenance
def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _gpus() -> list[dict[str, str]] | None:
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                  "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout
            return [dict(zip(("name", "driver", "memory"), (x.strip() for x in line.split(",")), strict=False))
                    for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            return None
    for tool in ("amd-smi", "rocm-smi"):
        if shutil.which(tool):
            try:
                args = [tool, "static", "--asic", "--driver"] if tool == "amd-smi" else [tool, "--showproductname",
                                                                                          "--showdriverversion"]
                out = subprocess.run(args, capture_output=True, text=True, timeout=20).stdout
                return [{"tool": tool, "report": out[-4000:]}]
            except (OSError, subprocess.SubprocessError):
                return None
    return None


def provenance() -> dict[str, Any]:
    return {
        "harness_version": __version__,
        "harness_commit": _git("rev-parse", "HEAD"),
        "harness_dirty": bool(_git("status", "--porcelain")),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "gpus": _gpus(),
    }


class Manifest:
    """manifest.json, rewritten atomically at every step so a crash leaves an accurate record."""

    def __init__(self, run_dir: Path, enabled: bool = True):
        self.path = run_dir / MANIFEST
        self.enabled = enabled  # a dry run records nothing
        self.data: dict[str, Any] = dict(schema.load_manifest(self.path)) if self.path.exists() else {}

    def save(self) -> None:
        if not self.enabled:
            return
        # Everything recorded is redacted here, once: config, argv, env, server-info snapshots.
        schema.write_manifest(self.path, redact_tree(self.data))


# ------------------------------------------------------------------------------------------ the run
#: Config keys that do not change what is measured: a rerun may change them and still resume.
_NON_SEMANTIC = ("progress", "report", "dry_run", "client.request_timeout_s", "client.retries",
                 "client.backoff_s", "engine.ready_timeout_s", "engine.poll_interval_s", "engine.stop_timeout_s",
                 "engine.release_timeout_s", "stats", "experiment.description", "experiment.order",
                 "experiment.concurrent_servers", "experiment.restart_per_repeat",
                 "experiment.allowed_differences", "experiment.fix_files", "divergence")


def config_digest(cfg: DictConfig) -> dict[str, Any]:
    """sha256 of the resolved config minus the keys that do not change what is measured (statistics settings
    may change between reruns: they are recomputed from the stored answers)."""
    import hashlib

    flat = {k: v for k, v in flatten(OmegaConf.to_container(cfg, resolve=True)).items()
            if not matches(k, _NON_SEMANTIC)}
    # Secret values (a rotated token) do not change what is measured, and must not be hashed either.
    semantic = redact_tree(flat)
    digest = hashlib.sha256(json.dumps(semantic, sort_keys=True, default=str).encode()).hexdigest()
    return {"sha256": digest, "semantic": semantic}


def _changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def _static_description(desc: dict[str, Any]) -> dict[str, Any]:
    """A launch description without what only the serving process knows (its live fingerprint)."""
    return {k: v for k, v in desc.items() if k != "fingerprint"}


def _load_data(cfg: DictConfig):  # type: ignore[no-untyped-def]
    """Load and check the data, and build the task once, so bad data or options stop before any server."""
    from harness.tasks import gsm8k

    t = cfg.task
    test, train = gsm8k.load_splits(t.data_path, t.train_path, t.recipe, t.allow_noncanonical)
    gsm8k.GSM8K(test, gsm8k.RecipeConfig(name=t.recipe, num_questions=t.num_questions, num_shots=t.num_shots,
                                         max_new_tokens=t.max_new_tokens), train)
    return test, train


def _engine_cfg(cfg: DictConfig, arm_cfg: DictConfig, data_source: str) -> DictConfig:
    merged = OmegaConf.merge(cfg.engine, OmegaConf.create(OmegaConf.to_container(arm_cfg.engine)))
    if merged.kind == "simulated" and not merged.get("data") and Path(data_source).is_file():
        merged.data = data_source  # the simulator answers the questions the run asks
    return merged  # type: ignore[return-value]


def _print_launch(key: str, arm: Any, spec: Any) -> None:
    """The arm's exact server command: one NAME=value per env var, then one ``--flag value`` per line."""
    print(f"\n=== arm {key}: {arm.name} ({arm.side or 'no side declared'}) ===")
    print(spec.pretty())
    if list(spec.argv) != list(spec.server_argv):
        print(f"# started through the fingerprint launcher: {' '.join(spec.argv[:len(spec.argv) - len(spec.server_argv) + 1])} ...")
    for problem in getattr(arm.source, "problems", None) or []:
        print(f"# WARNING: {problem}")


def _check_dicts(results: list[Any]) -> list[dict[str, Any]]:
    return [r.to_dict() if hasattr(r, "to_dict") else vars(r) for r in results]


class Run:
    """One experiment in its run directory. The phases, in order: prepare the arms (no server), check them
    statically, measure (launch, assert the side, evaluate, stop; per schedule item), compare and report.
    Everything it learns goes to the manifest as it happens."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        from harness.tasks.gsm8k import DatasetError

        try:
            validate(cfg)
            self.test, self.train = _load_data(cfg)
        except (ConfigError, DatasetError) as e:
            raise RunFailure(exitcodes.BAD_CONFIG, str(e)) from None
        self.cfg, self.run_dir, self.x = cfg, run_dir, cfg.experiment
        self.keys = {"a": self.x.a, "b": self.x.b}  # role -> arm key
        self.allowed = list(self.x.allowed_differences)
        self.resolved: dict[str, Any] = {}
        self.engines: dict[str, Any] = {}
        self.live: dict[str, Any] = {}  # arm key -> running engine
        self.launched: set[str] = set()  # arms launched in this session
        self.instance: dict[str, str] = {}  # arm key -> id of its current server instance
        run_dir.mkdir(parents=True, exist_ok=True)
        self.manifest = self._open_manifest()

    @property
    def m(self) -> dict[str, Any]:
        return self.manifest.data

    def _open_manifest(self) -> Manifest:
        cfg, run_dir = self.cfg, self.run_dir
        try:
            manifest = Manifest(run_dir, enabled=not cfg.dry_run)
        except schema.SchemaError as e:
            raise RunFailure(exitcodes.BAD_CONFIG, str(e)) from None
        m = manifest.data
        digest = config_digest(cfg)
        if m.get("config_sha256") and m["config_sha256"] != digest["sha256"] and not cfg.dry_run:
            changed = _changed_keys(m.get("config_semantic") or {}, digest["semantic"])
            raise RunFailure(exitcodes.BAD_CONFIG,
                             f"{run_dir} holds a run of a different config (changed: "
                             f"{', '.join(changed[:8]) or '?'}); its results would be mixed with this one's. "
                             "Use another hydra.run.dir, or delete it.")
        self.session = {"started": time.time(), "pid": os.getpid(), "argv": sys.argv,
                        "resume": any(run_dir.glob("evals/*/*/samples.jsonl"))}
        m.update({"experiment": self.x.name, "config": OmegaConf.to_container(cfg, resolve=True),
                  "config_sha256": digest["sha256"], "config_semantic": digest["semantic"],
                  "provenance": provenance(),
                  "dataset": {"sha256": self.test.sha256, "source": self.test.source,
                              "canonical": self.test.canonical, "rows": len(self.test)}})
        m.setdefault("sessions", []).append(self.session)
        m.setdefault("evals", {})
        m.setdefault("arms", {})
        return manifest

    # ------------------------------------------------------------------ before any server
    def prepare_arms(self) -> list[dict[str, Any]]:
        """Resolve each arm and its engine; return the differences between the arms' static launches."""
        from harness.arm import resolve_arm
        from harness.armdiff import arm_diff, describe_launch
        from harness.config import arms_root
        from harness.engines import PortInUseError, create_engine

        descs = {}
        try:
            for role, key in self.keys.items():
                arm_cfg = self.cfg.arms[key]
                arm = resolve_arm(key, arm_cfg, self.run_dir, arms_root(), strict=not self.cfg.dry_run)
                engine = create_engine(_engine_cfg(self.cfg, arm_cfg, self.test.source), arm, self.run_dir,
                                       label=f"{role}-{key}")
                self.resolved[key], self.engines[key] = arm, engine
                descs[key] = _static_description(describe_launch(arm, engine))
        except PortInUseError as e:
            raise RunFailure(exitcodes.BAD_CONFIG, str(e)) from None
        except (ValueError, OSError, RuntimeError) as e:
            raise RunFailure(exitcodes.BAD_CONFIG, f"cannot prepare arms: {e}") from None
        diffs = arm_diff(descs)
        self.m["arm_diff"] = {"differences": diffs, "disallowed": self._disallowed(diffs), "allowed": self.allowed}
        # the source diff, computed from the arms' trees or refs (harness.sourcediff); enforced by enforce_sources
        from harness import sourcediff

        self.source_diff = sourcediff.compute(self.resolved[self.x.a], self.resolved[self.x.b], self.x.fix_files)
        self.m["source_diff"] = self.source_diff.to_dict()
        for key in self.keys.values():
            self.m["arms"].setdefault(key, {}).update({"launch": descs[key], "name": self.resolved[key].name,
                                                       "side": self.resolved[key].side})
        self.manifest.save()
        return diffs

    def _disallowed(self, diffs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from harness.armdiff import disallowed

        return disallowed(diffs, self.allowed)

    def refuse_disallowed(self, diffs: list[dict[str, Any]], what: str = "the arms differ") -> None:
        bad = self._disallowed(diffs)
        if bad:
            raise RunFailure(exitcodes.ARMS_DIFFER, f"{what} in something the experiment does not allow: "
                             + "; ".join(d["key"] for d in bad)
                             + ". Nothing is measured; declare it in experiment.allowed_differences if intended.")

    def print_dry_run(self, diffs: list[dict[str, Any]]) -> None:
        for role, key in self.keys.items():
            _print_launch(role, self.resolved[key], self.engines[key].launch_spec())
        print("\nwhat differs between the arms:")
        for d in diffs or [{"key": "(nothing)", "values": {}}]:
            print(f"  {d['key']}: " + "  vs  ".join(f"{k}={v!r}" for k, v in d.get("values", {}).items()))
        print(self.source_diff.line())
        if self.source_diff.outside:
            print(f"  {self.source_diff.outside_line()}")

    def enforce_sources(self) -> None:
        """The arms' sources differ only in ``experiment.fix_files`` (exit 6 otherwise), before any server."""
        from harness.sourcediff import SourceDiffError, enforce

        if not self.cfg.dry_run:
            _say(self.source_diff.line())
        try:
            enforce(self.source_diff)
        except SourceDiffError as e:
            raise RunFailure(e.code, str(e)) from None

    def static_checks(self) -> None:
        """Side checks that need no server (source probes in each arm's interpreter)."""
        from harness.checks.result import SideAssertionError, assert_checks
        from harness.checks.static import run_static_checks

        failures = []
        for key, arm in self.resolved.items():
            # with the engine's env too: SGLANG_USE_AITER and friends change what SGLang's modules do at import
            results = run_static_checks(arm, self.engines[key].cfg.env)
            self.m["arms"][key]["static_checks"] = _check_dicts(results)
            self.manifest.save()
            failed = [r for r in results if not r.passed]
            if self.cfg.dry_run:
                for r in results:
                    print(f"check [{key}] {r.name}: {'PASS' if r.passed else 'FAIL'} (expected {r.expected!r}, "
                          f"found {r.found!r})")
                if failed:
                    print(f"# arm {key}: {len(failed)} side check(s) fail here; a real run would stop before "
                          f"measuring (exit {exitcodes.SIDE_ASSERTION_FAILED})")
            failures += failed
            if not self.cfg.dry_run:
                try:
                    assert_checks(results, key)
                except SideAssertionError as e:
                    raise RunFailure(exitcodes.SIDE_ASSERTION_FAILED, str(e)) from None
        if failures:  # a dry run exits as the real run would
            raise RunFailure(exitcodes.SIDE_ASSERTION_FAILED, str(SideAssertionError(failures)))

    # ------------------------------------------------------------------ servers
    def launch(self, key: str, label: str) -> Any:
        """Start arm ``key``'s server, wait until it serves, record its probe, assert its side."""
        from harness.checks.live import run_live_checks
        from harness.checks.result import SideAssertionError, assert_checks

        engine = self.engines[key]
        _say(f"{label} launching arm {key} ({engine.kind})")
        engine.launch()
        self.live[key] = engine
        engine.wait_ready(on_status=lambda s: _say(f"  waiting: {s}"))
        self.instance[key] = f"{key}@{time.time():.0f}"
        arm_m = self.m["arms"][key]
        arm_m.setdefault("instances", []).append({"id": self.instance[key], "probe": engine.probe(),
                                                  "url": engine.url})
        results = run_live_checks(self.resolved[key], engine)
        arm_m["live_checks"] = _check_dicts(results)
        self.manifest.save()
        try:
            assert_checks(results, key)
        except SideAssertionError as e:
            arm_m["status"] = "side_check_failed"
            raise RunFailure(exitcodes.SIDE_ASSERTION_FAILED, str(e)) from None
        for r in results:
            _say(f"  side check {r.name}: PASS")
        self.launched.add(key)
        if self.launched == set(self.keys.values()):
            self._check_live_diff()
        return engine

    def _check_live_diff(self) -> None:
        """Both serving processes have reported their live fingerprints: diff the full launches too."""
        from harness.armdiff import arm_diff, describe_launch

        full = {k: describe_launch(self.resolved[k], self.engines[k]) for k in self.keys.values()}
        diffs = arm_diff(full)
        self.m["arm_diff_live"] = {"differences": diffs, "disallowed": self._disallowed(diffs)}
        from harness.armdiff import server_info_diff  # shown and recorded, not enforced

        infos = {k: (self.m["arms"][k].get("instances") or [{}])[-1].get("probe", {}).get("server_info")
                 for k in self.keys.values()}
        self.m["server_info_diff"] = server_info_diff(infos)
        for d in self.m["server_info_diff"][:10]:
            _say("  /server_info differs: " + d["key"] + ": " + "  vs  ".join(f"{k}={v!r}"
                                                                            for k, v in d["values"].items()))
        if len(self.m["server_info_diff"]) > 10:
            _say(f"  ... and {len(self.m['server_info_diff']) - 10} more (manifest.json: server_info_diff)")
        for k in self.keys.values():
            self.m["arms"][k]["launch"] = full[k]
        self.manifest.save()
        self.refuse_disallowed(diffs, "the serving processes differ")

    def stop_unneeded(self, next_key: str) -> None:
        """Stop the servers the next item does not need (one GPU box runs one arm at a time)."""
        for key in list(self.live):
            if (key != next_key and not self.x.concurrent_servers) or (
                    key == next_key and self.x.restart_per_repeat):
                _say(f"stopping server of arm {key}")
                self.live.pop(key).stop()

    def stop_all(self) -> None:
        for key in list(self.live):
            try:
                self.live.pop(key).stop()
            except Exception as e:  # noqa: BLE001 - keep stopping the others
                _say(f"could not stop arm {key}: {e}")

    # ------------------------------------------------------------------ measuring
    def measure(self) -> None:
        from harness.engines import EngineError, PortInUseError

        items = schedule(self.x.a, self.x.b, self.x.repeats, self.x.order, self.x.aa_control)
        try:
            for n, item in enumerate(items, 1):
                label = f"[{n}/{len(items)}]"
                out = self.run_dir / item.rel_dir
                self.m["evals"].setdefault(item.rel_dir, {"arm": item.arm_key, "role": item.role,
                                                          "repeat": item.repeat})
                summary_path = out / schema.EVAL_SUMMARY_FILE
                if summary_path.exists() and schema.load_eval_summary(summary_path).get("complete"):
                    _say(f"{label} {item.rel_dir}: already complete, kept")
                    continue
                self.stop_unneeded(item.arm_key)
                engine = self.live.get(item.arm_key) or self.launch(item.arm_key, label)
                _say(f"{label} eval {item.rel_dir} (arm {item.arm_key}) on {engine.url}")
                self.evaluate(item, engine)
        except PortInUseError as e:  # the configured port is taken: a config problem, nothing was started
            raise RunFailure(exitcodes.BAD_CONFIG, str(e)) from None
        except EngineError as e:
            raise RunFailure(exitcodes.SERVER_FAILURE, f"server failure: {e}") from None
        finally:
            self.stop_all()
            self.session["ended"] = time.time()
            self.manifest.save()

    def evaluate(self, item: Item, engine: Any) -> None:
        from harness.client import ClientConfig
        from harness.evaluate import EvalInterrupted, EvalOptions, ServerGone, run_eval
        from harness.tasks.gsm8k import RecipeConfig

        cfg, ev, key = self.cfg, self.m["evals"][item.rel_dir], item.arm_key
        ev.setdefault("instances", []).append(self.instance[key])
        ev["status"] = "running"
        ev.setdefault("started", time.time())
        self.manifest.save()
        t = cfg.task
        recipe = RecipeConfig(name=t.recipe, num_questions=t.num_questions, num_shots=t.num_shots,
                              max_new_tokens=t.max_new_tokens)
        ccfg = ClientConfig(url=engine.url, api=engine.api, parallel=cfg.client.parallel,
                            request_timeout_s=cfg.client.request_timeout_s, retries=cfg.client.retries,
                            backoff_s=cfg.client.backoff_s)
        meta = {"arm": key, "role": item.role, "repeat": item.repeat, "instance": self.instance[key],
                "simulated": engine.simulated}
        try:
            summary = run_eval(self.test, recipe, ccfg, self.run_dir / item.rel_dir, self.train,
                               EvalOptions(progress=cfg.progress, abort_check=engine.alive, extra_meta=meta))
        except EvalInterrupted as e:
            ev["status"] = "interrupted"
            self.manifest.save()
            raise Interrupted(e.signum) from None
        except ServerGone as e:
            ev["status"], ev["error"] = "failed", str(e)
            self.m["arms"][key]["status"] = "failed"
            self.manifest.save()
            tail = engine.log_tail(20)
            raise RunFailure(exitcodes.SERVER_FAILURE,
                             f"server of arm {key} failed during {item.rel_dir}: {e}. "
                             "Answers so far are kept; rerun the same command to resume."
                             + (f"\n--- last lines of its log ---\n{tail}" if tail else "")) from None
        ev["status"] = "complete" if summary["complete"] else "incomplete"
        ev["ended"] = time.time()
        self.m["arms"][key]["status"] = "ok" if summary["complete"] else "incomplete"
        ev["summary"] = {k: summary.get(k) for k in ("n", "correct", "errors", "accuracy", "latency_s")}
        if summary.get("resumed"):
            ev.setdefault("resumed_on", []).append(self.instance[key])
        self.manifest.save()
        acc = summary["accuracy"]
        _say(f"  {item.rel_dir}: accuracy {acc:.4f}, errors {summary['errors']}" if acc is not None
             else f"  {item.rel_dir}: no answers")

    # ------------------------------------------------------------------ statistics and report
    def finish(self) -> int:
        from harness.compare import compare_dirs

        x, m, run_dir, s = self.x, self.m, self.run_dir, self.cfg.stats
        dirs = {role: sorted(run_dir / k for k, v in m["evals"].items() if v["role"] == role)
                for role in ("a", "b", "aa")}
        comparison = compare_dirs(dirs["a"], dirs["b"], aa_dirs=dirs["aa"],
                                  margin=None if s.margin_pp is None else s.margin_pp / 100,
                                  min_effect=None if s.min_effect_pp is None else s.min_effect_pp / 100,
                                  alpha=s.alpha, seed=s.seed, max_error_rate=s.max_error_rate)
        names = {"a": m["arms"][x.a]["name"], "b": m["arms"][x.b]["name"]}
        comparison["arm_names"] = names
        schema.write_comparison(run_dir / COMPARISON, comparison)
        code = exitcodes.TOO_MANY_ERRORS if comparison.get("error_rate_exceeded") else exitcodes.OK
        summary: schema.RunSummary = {
            "experiment": x.name,
            "simulated": bool(comparison.get("simulated")),
            "verdict": comparison.get("verdict"), "verdict_reason": comparison.get("verdict_reason"),
            "n": comparison.get("n"), "delta": comparison.get("delta"), "delta_ci": comparison.get("delta_ci"),
            "mcnemar_p": comparison.get("mcnemar_p"), "mde": comparison.get("mde"),
            "accuracy": {r: comparison["arms"][r]["accuracy"] for r in ("a", "b")},
            "arms": names, "repeats": x.repeats, "aa_control": x.aa_control, "exit_code": code,
        }
        schema.write_run_summary(run_dir / RUN_SUMMARY, summary)
        m["status"] = {"code": code, "verdict": summary["verdict"]}
        self.manifest.save()
        print(format_table(summary, comparison))
        if self.cfg.report:
            from harness.report import write_report

            _say(f"report: {write_report(run_dir)}")
        return code


def run_experiment(cfg: DictConfig, run_dir: Path) -> int:
    """Run (or resume) the experiment in ``run_dir``; return the exit code (failures raise RunFailure)."""
    run = Run(cfg, run_dir)
    diffs = run.prepare_arms()
    if cfg.dry_run:
        run.print_dry_run(diffs)
    run.refuse_disallowed(diffs)
    run.enforce_sources()
    run.static_checks()
    if cfg.dry_run:
        print("\ndry run: no server started, nothing measured.")
        return exitcodes.OK
    run.measure()
    return run.finish()


def format_table(summary: dict[str, Any], c: dict[str, Any]) -> str:
    pp = lambda v: "n/a" if v is None else f"{100 * v:+.2f} pp"  # noqa: E731
    lines = []
    if summary.get("simulated"):
        lines.append("*** SIMULATED: these numbers come from the simulated engine, not a real model ***")
    lines.append(f"experiment {summary['experiment']}: {summary['arms']['a']} (A) vs {summary['arms']['b']} (B), "
                 f"n={c.get('n')} questions x {summary['repeats']} repeat(s)")
    for r in ("a", "b"):
        arm = c["arms"][r]
        lo, hi = arm.get("wilson") or (None, None)
        ci = f"[{lo:.4f}, {hi:.4f}]" if lo is not None else ""
        reps = ", ".join(f"{v:.4f}" for v in arm.get("repeats") or [])
        lines.append(f"  {r.upper()} {summary['arms'][r]:<20} accuracy {arm['accuracy']:.4f} {ci}  repeats: {reps}")
    lo, hi = c.get("delta_ci") or (None, None)
    lines.append(f"  delta (B - A) {pp(c.get('delta'))}  95% CI [{pp(lo)}, {pp(hi)}]  "
                 f"table both={c.get('both')} A-only={c.get('a_only')} B-only={c.get('b_only')} "
                 f"neither={c.get('neither')}  McNemar p (repeat 1)={c.get('mcnemar_p'):.3g}")
    if c.get("psi_aa") is not None:
        band = c.get("noise_band") or [None, None]
        lines.append(f"  A/A discordance {100 * c['psi_aa']:.2f} %, noise band of delta [{pp(band[0])}, {pp(band[1])}]")
    lines.append(f"  MDE (80% power) {pp(c.get('mde'))}")
    lines.append(f"VERDICT: {summary['verdict']}: {summary.get('verdict_reason') or ''}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ Hydra
def write_failure_summary(run_dir: Path, experiment: str, code: int, reason: str) -> None:
    """A run that stopped on a failure still says so in summary.json: the arms are not comparable."""
    if not (run_dir / MANIFEST).exists():
        return  # nothing was started (bad config): leave no run directory content behind
    schema.write_run_summary(run_dir / RUN_SUMMARY, redact_tree({
        "experiment": experiment, "verdict": "not_comparable", "verdict_reason": reason, "exit_code": code}))
    manifest = Manifest(run_dir)
    manifest.data["status"] = {"code": code, "verdict": "not_comparable", "error": reason}
    manifest.save()


def _hydra_task(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if _in_multirun():  # before anything can interrupt the sweep
        from harness.sweep import redact_multirun_yaml

        redact_multirun_yaml(Path(HydraConfig.get().sweep.dir))

    def on_signal(signum: int, frame: Any) -> None:
        raise Interrupted(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = run_experiment(cfg, run_dir)
    except RunFailure as e:
        _say(f"error: {e}")
        code = e.code
        if code != exitcodes.BAD_CONFIG:
            write_failure_summary(run_dir, str(cfg.experiment.name), code, str(e))
    except Interrupted as e:
        _say(f"interrupted by {e}; servers stopped, results kept. Rerun the same command to resume.")
        code = exitcodes.INTERRUPTED if e.signum == signal.SIGINT else 128 + e.signum
    except KeyboardInterrupt:
        _say("interrupted; servers stopped, results kept. Rerun the same command to resume.")
        code = exitcodes.INTERRUPTED
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    _EXIT.append(code)
    if code and _in_submitit():
        sys.exit(code)
    if code in (exitcodes.INTERRUPTED, 128 + signal.SIGTERM) and _in_multirun():
        sys.exit(code)  # Ctrl-C / SIGTERM stops the whole sweep, not just this job


def _in_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    try:
        return HydraConfig.get().mode == RunMode.MULTIRUN
    except ValueError:
        return False


def _in_submitit() -> bool:
    return "SUBMITIT_EXECUTOR" in os.environ or "SLURM_JOB_ID" in os.environ


def main(argv: list[str]) -> int:
    """Entry of ``abh run``: hand the overrides to Hydra; map its outcome to our exit codes."""
    import hydra

    _EXIT.clear()
    app = hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(_hydra_task)
    saved = sys.argv
    sys.argv = ["abh run", *argv]
    from harness.redact_stdio import redacted_stdio

    try:
        with redacted_stdio(argv):  # issue 14.4: Hydra prints the config and repeats overrides; redact both
            app()
    except SystemExit as e:
        # Hydra exits 1 on composition errors (unknown key, bad value, missing config): bad config.
        if e.code not in (0, None):
            return exitcodes.BAD_CONFIG if e.code == 1 and not _EXIT else int(e.code) if isinstance(
                e.code, int) else exitcodes.UNEXPECTED
    finally:
        sys.argv = saved
    return max(_EXIT) if _EXIT else exitcodes.OK
