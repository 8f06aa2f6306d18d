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

from harness import __version__, exitcodes
from harness.config import CONFIG_DIR, PROJECT_ROOT, ConfigError, validate
from harness.redact import redact_tree
from harness.store import atomic_write_json, read_json

MANIFEST = "manifest.json"
RUN_SUMMARY = "summary.json"
COMPARISON = "comparison.json"

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
    print(f"[abh] {msg}", file=sys.stderr, flush=True)


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
        self.data: dict[str, Any] = read_json(self.path) if self.path.exists() else {}

    def save(self) -> None:
        if not self.enabled:
            return
        # Everything recorded is redacted here, once: config, argv, env, server-info snapshots.
        atomic_write_json(self.path, redact_tree(self.data))


# ------------------------------------------------------------------------------------------ the run
#: Config keys that do not change what is measured: a rerun may change them and still resume.
_NON_SEMANTIC = ("progress", "report", "dry_run", "client.request_timeout_s", "client.retries",
                 "client.backoff_s", "engine.ready_timeout_s", "engine.poll_interval_s", "engine.stop_timeout_s",
                 "engine.release_timeout_s", "stats")


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def config_fingerprint(cfg: DictConfig) -> dict[str, Any]:
    """sha256 of the resolved config minus the keys that do not change what is measured (statistics settings
    may change between reruns: they are recomputed from the stored answers)."""
    import hashlib

    flat = {k: v for k, v in _flat(OmegaConf.to_container(cfg, resolve=True)).items()
            if not any(k == n or k.startswith(n + ".") for n in _NON_SEMANTIC)}
    semantic = redact_tree(flat)
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()
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


def run_experiment(cfg: DictConfig, run_dir: Path) -> int:
    """Run (or resume) the experiment in ``run_dir``; return the exit code."""
    from harness.arms import (
        SideAssertionError,
        arm_diff,
        describe_launch,
        disallowed,
        resolve_arm,
        run_live_checks,
        run_static_checks,
    )
    from harness.client import ClientConfig
    from harness.config import arms_root
    from harness.engines import EngineError, PortInUseError, create_engine
    from harness.evaluate import EvalInterrupted, EvalOptions, ServerGone, run_eval
    from harness.tasks.gsm8k import DatasetError, RecipeConfig

    try:
        validate(cfg)
        test, train = _load_data(cfg)
    except (ConfigError, DatasetError) as e:
        raise RunFailure(exitcodes.BAD_CONFIG, str(e)) from None

    x = cfg.experiment
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(run_dir, enabled=not cfg.dry_run)
    m = manifest.data
    fingerprint = config_fingerprint(cfg)
    if m.get("config_sha256") and m["config_sha256"] != fingerprint["sha256"] and not cfg.dry_run:
        changed = _changed_keys(m.get("config_semantic") or {}, fingerprint["semantic"])
        raise RunFailure(exitcodes.BAD_CONFIG,
                         f"{run_dir} holds a run of a different config (changed: {', '.join(changed[:8]) or '?'}); "
                         "its results would be mixed with this one's. Use another hydra.run.dir, or delete it.")
    resumed = any(run_dir.glob("evals/*/*/samples.jsonl"))
    session = {"started": time.time(), "pid": os.getpid(), "argv": sys.argv, "resume": resumed}
    m.setdefault("schema_version", 1)
    m["kind"] = "abh.run"
    m["experiment"] = x.name
    m["config"] = OmegaConf.to_container(cfg, resolve=True)
    m["config_sha256"] = fingerprint["sha256"]
    m["config_semantic"] = fingerprint["semantic"]
    m["provenance"] = provenance()
    m["dataset"] = {"sha256": test.sha256, "source": test.source, "canonical": test.canonical, "rows": len(test)}
    m.setdefault("sessions", []).append(session)
    m.setdefault("evals", {})
    m.setdefault("arms", {})

    # ---- arms: resolve, build launches, diff, static side checks (no server needed)
    keys = {"a": x.a, "b": x.b}
    resolved, engines, descs = {}, {}, {}
    try:
        for role, key in keys.items():
            arm_cfg = cfg.arms[key]
            arm = resolve_arm(key, arm_cfg, run_dir, arms_root(), strict=not cfg.dry_run)
            engine = create_engine(_engine_cfg(cfg, arm_cfg, test.source), arm, run_dir, label=f"{role}-{key}")
            resolved[key], engines[key] = arm, engine
            descs[key] = _static_description(describe_launch(arm, engine))
    except PortInUseError as e:
        raise RunFailure(exitcodes.BAD_CONFIG, str(e)) from None
    except (ValueError, OSError, RuntimeError) as e:
        raise RunFailure(exitcodes.BAD_CONFIG, f"cannot prepare arms: {e}") from None
    diffs = arm_diff(descs)
    bad = disallowed(diffs, list(x.allowed_differences))
    m["arm_diff"] = {"differences": diffs, "disallowed": bad, "allowed": list(x.allowed_differences)}
    for key in keys.values():
        m["arms"].setdefault(key, {}).update({"launch": descs[key], "name": resolved[key].name,
                                              "side": resolved[key].side})
    manifest.save()

    if cfg.dry_run:
        for role, key in keys.items():
            _print_launch(role, resolved[key], engines[key].launch_spec())
        print("\nwhat differs between the arms:")
        for d in diffs or [{"key": "(nothing)", "values": {}}]:
            print(f"  {d['key']}: " + "  vs  ".join(f"{k}={v!r}" for k, v in d.get("values", {}).items()))
    if bad:
        raise RunFailure(exitcodes.ARMS_DIFFER, "the arms differ in something the experiment does not allow: "
                         + "; ".join(d["key"] for d in bad)
                         + ". Declare it in experiment.allowed_differences if it is intended.")
    for key, arm in resolved.items():
        results = run_static_checks(arm)
        m["arms"][key]["static_checks"] = [r.to_dict() if hasattr(r, "to_dict") else vars(r) for r in results]
        manifest.save()
        failed = [r for r in results if not r.passed]
        if cfg.dry_run:
            for r in results:
                print(f"check [{key}] {r.name}: {'PASS' if r.passed else 'FAIL'} (expected {r.expected!r}, "
                      f"found {r.found!r})")
        if failed and cfg.dry_run:
            print(f"# arm {key}: {len(failed)} side check(s) fail here; a real run would stop before measuring "
                  f"(exit {exitcodes.SIDE_ASSERTION_FAILED})")
        elif failed:
            r = failed[0]
            raise RunFailure(exitcodes.SIDE_ASSERTION_FAILED,
                             f"side assertion failed for arm {key}: {r.name}: expected {r.expected!r}, "
                             f"found {r.found!r}")
    if cfg.dry_run:
        print("\ndry run: no server started, nothing measured.")
        return exitcodes.OK

    # ---- the measurements
    items = schedule(x.a, x.b, x.repeats, x.order, x.aa_control)
    recipe_kw = {"name": cfg.task.recipe, "num_questions": cfg.task.num_questions,
                 "num_shots": cfg.task.num_shots, "max_new_tokens": cfg.task.max_new_tokens}
    live: dict[str, Any] = {}  # arm key -> running engine
    launched: set[str] = set()  # arms launched in this session
    instance: dict[str, str] = {}
    code = exitcodes.OK
    try:
        for n_item, item in enumerate(items, 1):
            out = run_dir / item.rel_dir
            ev = m["evals"].setdefault(item.rel_dir, {"arm": item.arm_key, "role": item.role,
                                                      "repeat": item.repeat})
            if (out / "summary.json").exists() and read_json(out / "summary.json").get("complete"):
                _say(f"[{n_item}/{len(items)}] {item.rel_dir}: already complete, kept")
                continue
            # Stop servers the next item does not need (one GPU box runs one arm at a time).
            for key in list(live):
                if (key != item.arm_key and not x.concurrent_servers) or (
                        key == item.arm_key and x.restart_per_repeat):
                    _say(f"stopping server of arm {key}")
                    live.pop(key).stop()
            engine = engines[item.arm_key]
            if item.arm_key not in live:
                _say(f"[{n_item}/{len(items)}] launching arm {item.arm_key} ({engine.kind})")
                engine.launch()
                engine.wait_ready(on_status=lambda s: _say(f"  waiting: {s}"))
                live[item.arm_key] = engine
                probe = engine.probe()
                instance[item.arm_key] = f"{item.arm_key}@{time.time():.0f}"
                arm_m = m["arms"][item.arm_key]
                arm_m.setdefault("instances", []).append({"id": instance[item.arm_key], "probe": probe,
                                                          "url": engine.url})
                results = run_live_checks(resolved[item.arm_key], engine)
                arm_m["live_checks"] = [r.to_dict() if hasattr(r, "to_dict") else vars(r) for r in results]
                manifest.save()
                failed = [r for r in results if not r.passed]
                if failed:
                    r = failed[0]
                    raise SideAssertionError(f"arm {item.arm_key}: {r.name}: expected {r.expected!r}, "
                                             f"found {r.found!r}")
                for r in results:
                    _say(f"  side check {r.name}: PASS")
                launched.add(item.arm_key)
                if launched == set(keys.values()):
                    # Both serving processes have reported their live fingerprints: diff them too.
                    full = {k: describe_launch(resolved[k], engines[k]) for k in keys.values()}
                    live_diffs = arm_diff(full)
                    live_bad = disallowed(live_diffs, list(x.allowed_differences))
                    m["arm_diff_live"] = {"differences": live_diffs, "disallowed": live_bad}
                    for k in keys.values():
                        m["arms"][k]["launch"] = full[k]
                    manifest.save()
                    if live_bad:
                        raise RunFailure(exitcodes.ARMS_DIFFER,
                                         "the serving processes differ in something the experiment does not "
                                         "allow: " + "; ".join(d["key"] for d in live_bad)
                                         + ". Nothing more is measured; declare it in "
                                           "experiment.allowed_differences if it is intended.")
            ev.setdefault("instances", []).append(instance[item.arm_key])
            ev["status"] = "running"
            ev.setdefault("started", time.time())
            manifest.save()
            _say(f"[{n_item}/{len(items)}] eval {item.rel_dir} (arm {item.arm_key}) on {engine.url}")
            ccfg = ClientConfig(url=engine.url, api=engine.api, parallel=cfg.client.parallel,
                                request_timeout_s=cfg.client.request_timeout_s, retries=cfg.client.retries,
                                backoff_s=cfg.client.backoff_s)
            try:
                summary = run_eval(test, RecipeConfig(**recipe_kw), ccfg, out, train,
                                   EvalOptions(progress=cfg.progress, abort_check=engine.alive,
                                               extra_meta={"arm": item.arm_key, "role": item.role,
                                                           "repeat": item.repeat,
                                                           "instance": instance[item.arm_key],
                                                           "simulated": engine.simulated}))
            except EvalInterrupted as e:
                ev["status"] = "interrupted"
                manifest.save()
                raise Interrupted(e.signum) from None
            except ServerGone as e:
                ev["status"] = "failed"
                ev["error"] = str(e)
                m["arms"][item.arm_key]["status"] = "failed"
                manifest.save()
                tail = engine.log_tail(20) if hasattr(engine, "log_tail") else ""
                raise RunFailure(exitcodes.SERVER_FAILURE,
                                 f"server of arm {item.arm_key} failed during {item.rel_dir}: {e}. "
                                 "Answers so far are kept; rerun the same command to resume."
                                 + (f"\n--- last lines of its log ---\n{tail}" if tail else "")) from None
            ev["status"] = "complete" if summary["complete"] else "incomplete"
            ev["ended"] = time.time()
            m["arms"][item.arm_key]["status"] = "ok" if summary["complete"] else "incomplete"
            ev["summary"] = {k: summary.get(k) for k in ("n", "correct", "errors", "accuracy", "latency_s")}
            if summary.get("resumed"):
                ev.setdefault("resumed_on", []).append(instance[item.arm_key])
            manifest.save()
            acc = summary["accuracy"]
            _say(f"  {item.rel_dir}: accuracy {acc:.4f}, errors {summary['errors']}" if acc is not None
                 else f"  {item.rel_dir}: no answers")
    except SideAssertionError as e:
        code = exitcodes.SIDE_ASSERTION_FAILED
        m["status"] = {"code": code, "error": str(e)}
        raise RunFailure(code, f"side assertion failed: {e}") from None
    except PortInUseError as e:  # the configured port is taken: a config problem, nothing was started
        code = exitcodes.BAD_CONFIG
        raise RunFailure(code, str(e)) from None
    except EngineError as e:
        code = exitcodes.SERVER_FAILURE
        raise RunFailure(code, f"server failure: {e}") from None
    finally:
        for key in list(live):
            try:
                live.pop(key).stop()
            except Exception as e:  # noqa: BLE001 - keep stopping the others
                _say(f"could not stop arm {key}: {e}")
        session["ended"] = time.time()
        manifest.save()

    # ---- statistics, summary, report
    return finish(cfg, run_dir, manifest)


def finish(cfg: DictConfig, run_dir: Path, manifest: Manifest) -> int:
    from harness.compare import compare_dirs

    x = cfg.experiment
    m = manifest.data
    ev = m["evals"]
    a_dirs = sorted(run_dir / k for k, v in ev.items() if v["role"] == "a")
    b_dirs = sorted(run_dir / k for k, v in ev.items() if v["role"] == "b")
    aa_dirs = sorted(run_dir / k for k, v in ev.items() if v["role"] == "aa")
    s = cfg.stats
    comparison = compare_dirs(a_dirs, b_dirs, aa_dirs=aa_dirs,
                              margin=None if s.margin_pp is None else s.margin_pp / 100,
                              min_effect=None if s.min_effect_pp is None else s.min_effect_pp / 100,
                              alpha=s.alpha, seed=s.seed, max_error_rate=s.max_error_rate)
    comparison["arm_names"] = {"a": m["arms"][x.a]["name"], "b": m["arms"][x.b]["name"]}
    atomic_write_json(run_dir / COMPARISON, comparison)
    code = exitcodes.OK
    if comparison.get("error_rate_exceeded"):
        code = exitcodes.TOO_MANY_ERRORS
    summary = {
        "schema_version": 1, "kind": "abh.run.summary", "experiment": x.name,
        "simulated": bool(comparison.get("simulated")),
        "verdict": comparison.get("verdict"), "verdict_reason": comparison.get("verdict_reason"),
        "n": comparison.get("n"), "delta": comparison.get("delta"), "delta_ci": comparison.get("delta_ci"),
        "mcnemar_p": comparison.get("mcnemar_p"), "mde": comparison.get("mde"),
        "accuracy": {r: comparison["arms"][r]["accuracy"] for r in ("a", "b")},
        "arms": {"a": m["arms"][x.a]["name"], "b": m["arms"][x.b]["name"]},
        "repeats": x.repeats, "aa_control": x.aa_control, "exit_code": code,
    }
    atomic_write_json(run_dir / RUN_SUMMARY, summary)
    m["status"] = {"code": code, "verdict": summary["verdict"]}
    manifest.save()
    print(format_table(summary, comparison))
    if cfg.report:
        try:
            from harness.report import write_report

            path = write_report(run_dir)
            _say(f"report: {path}")
        except ImportError:
            pass
    return code


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
                 f"neither={c.get('neither')}  McNemar p={c.get('mcnemar_p'):.3g}")
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
    atomic_write_json(run_dir / RUN_SUMMARY, {
        "schema_version": 1, "kind": "abh.run.summary", "experiment": experiment, "verdict": "not_comparable",
        "verdict_reason": reason, "exit_code": code})
    manifest = Manifest(run_dir)
    manifest.data["status"] = {"code": code, "verdict": "not_comparable", "error": reason}
    manifest.save()


def _hydra_task(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    run_dir = Path(HydraConfig.get().runtime.output_dir)

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


def _in_submitit() -> bool:
    return "SUBMITIT_EXECUTOR" in os.environ or "SLURM_JOB_ID" in os.environ


def main(argv: list[str]) -> int:
    """Entry of ``abh run``: hand the overrides to Hydra; map its outcome to our exit codes."""
    import hydra

    _EXIT.clear()
    app = hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(_hydra_task)
    saved = sys.argv
    sys.argv = ["abh run", *argv]
    try:
        app()
    except SystemExit as e:
        # Hydra exits 1 on composition errors (unknown key, bad value, missing config): bad config.
        if e.code not in (0, None):
            return exitcodes.BAD_CONFIG if e.code == 1 and not _EXIT else int(e.code) if isinstance(
                e.code, int) else exitcodes.UNEXPECTED
    finally:
        sys.argv = saved
    return max(_EXIT) if _EXIT else exitcodes.OK


def json_dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
