"""Every task abh knows and its recipes: the one place a task name is looked up.

Data is loaded (:func:`load_data`) once, before any server starts, so a missing file or a bad name stops the run
with one line (exit 2); the recipe is built (:func:`build`) per eval, once the server has said which model it
serves (the GSM8K ``sglang`` recipe's stop strings depend on it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from harness.serving.wire import API_NAMES, can_send
from harness.tasks.interface import Dataset, DatasetError, RecipeConfig, Task
from harness.util.ranges import ranged


@dataclass
class TaskSpec:
    """One task and its recipe, as a config asks for it (the ``task:`` group's schema, ``task.*`` and
    ``tasks.<key>.*``): ``name`` gsm8k | mmlu | gpqa_diamond | mgsm_en. None: the recipe's upstream default."""

    name: str = "gsm8k"
    #: the task's recipe (empty: its first; GSM8K: sglang)
    recipe: str = ""
    #: None: the recipe's upstream default (GSM8K: every question; MMLU: every row; a number: the first N, or
    #: MMLU's and GPQA's random.Random(0) sample of N as upstream draws it); a comparison needs two questions
    num_questions: int | None = ranged(None, 2, whole=True)
    num_shots: int | None = None
    max_new_tokens: int | None = None
    #: the task's data: a local file or directory, hf:REPO[:CONFIG] or an http(s) URL; empty = the embedded copy
    #: (GSM8K, MGSM-en; MMLU and GPQA are not shipped and need one)
    data_path: str = ""
    train_path: str = ""
    allow_noncanonical: bool = False
    #: times each question is asked (GPQA: each with its own choice order; None: the task's default)
    repeats: int | None = None
    #: the protocol the task is sent by: sglang | openai | chat; empty: the engine's api when the recipe
    #: speaks it, else the recipe's own (MMLU, GPQA, MGSM and sgl_eval_chat are chat recipes)
    api: str = ""

    def recipe_config(self, model_path: str | None = None) -> RecipeConfig:
        return RecipeConfig(name=self.recipe or default_recipe(self.name), num_questions=self.num_questions,
                            num_shots=self.num_shots, max_new_tokens=self.max_new_tokens, model_path=model_path,
                            repeats=self.repeats)


@dataclass(frozen=True)
class TaskData:
    """A task's loaded data: the evaluated split and, for recipes whose shots come from it, the train split."""

    test: Dataset
    train: Dataset | None = None


@dataclass(frozen=True)
class Kind:
    recipes: tuple[str, ...]
    load: Callable[[TaskSpec, str], TaskData]
    build: Callable[[TaskData, RecipeConfig], Task]


def _module(name: str) -> Any:
    # a task's module is imported when the task is asked for: validating a config or starting a command that
    # evaluates GSM8K pays for no other task (nor for the stores the multiple-choice tasks read)
    return importlib.import_module(f"harness.tasks.{name}")


def _gsm8k() -> Kind:
    gsm8k = _module("gsm8k")

    def load(spec: TaskSpec, recipe: str) -> TaskData:
        test, train = gsm8k.load_splits(spec.data_path or None, spec.train_path or None, recipe,
                                        spec.allow_noncanonical)
        return TaskData(test, train)

    def build(data: TaskData, recipe: RecipeConfig) -> Task:
        from harness.tasks.gsm8k_recipes import RECIPE_CLASSES

        if recipe.repeats not in (None, 1):
            raise DatasetError("GSM8K recipes ask each question once: task.repeats must be 1 (or unset)")
        return RECIPE_CLASSES.get(recipe.name, gsm8k.GSM8K)(data.test, recipe, data.train)

    return Kind(gsm8k.RECIPES, load, build)


def _one_split(module: str, cls: str) -> Callable[[], Kind]:
    """A task whose data is one split loaded from ``task.data_path`` and whose recipe class takes it."""
    def make() -> Kind:
        m = _module(module)
        return Kind(m.RECIPES, lambda s, r: TaskData(m.load(s.data_path)), lambda d, r: getattr(m, cls)(d.test, r))
    return make


#: every task name a config may give (``task.name``) and how its :class:`Kind` is made, in the order listed
_MAKERS: dict[str, Callable[[], Kind]] = {
    "gsm8k": _gsm8k,
    "mmlu": _one_split("mmlu", "MMLU"),
    "gpqa_diamond": _one_split("gpqa", "GPQA"),
    "mgsm_en": _one_split("mgsm", "MGSM"),
}
#: The task names a config may give (``task.name``).
TASK_NAMES: tuple[str, ...] = tuple(_MAKERS)


def all_recipes() -> tuple[str, ...]:
    """Every recipe name of any task (the command lines' ``--recipe`` choices; each task checks its own)."""
    return tuple(dict.fromkeys(r for name in TASK_NAMES for r in kind(name).recipes))


@cache
def kind(name: str) -> Kind:
    try:
        make = _MAKERS[name]
    except KeyError:
        raise DatasetError(f"unknown task {name!r}; abh knows {', '.join(TASK_NAMES)}") from None
    return make()


def recipes_of(name: str) -> tuple[str, ...]:
    return kind(name).recipes


def default_recipe(name: str) -> str:
    """A task's default recipe: the first it lists (GSM8K: ``sglang``)."""
    return recipes_of(name)[0]


def problems(spec: TaskSpec, where: str = "task") -> list[str]:
    """What is wrong with ``spec`` that needs no data (names, ranges), as config-error lines."""
    if spec.name not in TASK_NAMES:
        return [f"{where}.name must be one of {', '.join(TASK_NAMES)}, not {spec.name!r}"]
    out = []
    recipes = recipes_of(spec.name)
    if spec.recipe and spec.recipe not in recipes:
        out.append(f"{where}.recipe must be one of {', '.join(recipes)} for task {spec.name}, not {spec.recipe!r}")
    for field_, lo in (("num_questions", 1), ("num_shots", 0), ("max_new_tokens", 0), ("repeats", 1)):
        v = getattr(spec, field_)
        if v is not None and v < lo:
            out.append(f"{where}.{field_} must be >= {lo}, not {v}")
    if spec.api and spec.api not in API_NAMES:
        out.append(f"{where}.api must be {' or '.join(API_NAMES)} (or empty), not {spec.api!r}")
    return out


def load_data(spec: TaskSpec) -> TaskData:
    """The task's data, loaded and checked (DatasetError: one line)."""
    recipe = spec.recipe or default_recipe(spec.name)
    if recipe not in recipes_of(spec.name):
        raise DatasetError(f"unknown {spec.name} recipe {recipe!r}; choose one of {', '.join(recipes_of(spec.name))}")
    return kind(spec.name).load(spec, recipe)


def build(spec: TaskSpec, data: TaskData, model_path: str | None = None) -> Task:
    """The recipe over the loaded data (DatasetError for settings the data cannot meet)."""
    return kind(spec.name).build(data, spec.recipe_config(model_path))


def api_for(task: Task, engine_api: str, asked: str = "") -> str:
    """The protocol an eval of ``task`` is sent by: ``asked`` (it must be one the recipe speaks), else the
    engine's when the recipe speaks it, else the recipe's own (a chat recipe on a server launched for
    ``/generate`` is sent to the same server's chat endpoint)."""
    if asked:
        if not can_send(asked, task.apis):
            raise DatasetError(f"the {task.name} recipe {task.recipe.name} is sent by {' or '.join(task.apis)}, "
                               f"not {asked}")
        return asked
    return engine_api if can_send(engine_api, task.apis) else task.apis[0]
