"""The task interface: what an eval needs to know about a benchmark, and nothing about servers.

A task is a :class:`Dataset`, a :class:`RecipeConfig` (which upstream script's prompts, shots, sampling and parser
to follow), the :class:`Item` s it sends and a grader (:meth:`Task.grade`, a score in [0, 1]). An eval's
per-question score is the mean of its items' scores: the statistics, resume, sweeps and reports work on it alone.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NotRequired, TypedDict

if TYPE_CHECKING:  # a return annotation only: the simulated servers import the tasks, not the stored types
    from harness.results.schema import EvalMeta


class DatasetError(ValueError):
    """The data given is not usable (missing, malformed or not the canonical set)."""


@dataclass(frozen=True)
class Dataset:
    """Rows of one split (string fields), where they came from, their content hash and whether they are the
    canonical set (None: the task knows no canonical hash)."""

    rows: list[dict[str, str]]
    source: str
    sha256: str
    canonical: bool | None

    def __len__(self) -> int:
        return len(self.rows)


class RecipeDict(TypedDict):
    """A recipe as ``eval.json`` records it (:meth:`RecipeConfig.to_dict`): its settings, ``repeats`` only when a
    question is asked more than once."""

    name: str
    num_questions: int | None
    num_shots: int | None
    max_new_tokens: int | None
    model_path: str | None
    extra_stop: list[str]
    repeats: NotRequired[int]


class OpenAIExtras(TypedDict, total=False):
    """OpenAI-only request fields a recipe sets, sent as they are by :mod:`harness.serving.wire`."""

    seed: int
    min_p: float
    repetition_penalty: float


class SamplingParams(TypedDict, total=False):
    """Generation parameters in SGLang's vocabulary (``/generate``'s ``sampling_params``), as many as a recipe
    sets; :mod:`harness.serving.wire` maps them onto each API. ``max_new_tokens`` is None only for a recipe not
    resolved yet."""

    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    max_new_tokens: int | None
    min_new_tokens: int
    n: int
    stop: list[str]
    stop_token_ids: list[int]
    stop_regex: list[str]
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    frequency_penalty: float
    presence_penalty: float
    ignore_eos: bool
    regex: str | None
    json_schema: str | None
    openai_extras: OpenAIExtras


@dataclass
class RecipeConfig:
    """One recipe of a task with its settings. ``num_questions`` / ``num_shots`` / ``max_new_tokens`` None: the
    recipe's upstream default. ``to_dict`` is what ``eval.json`` records as the eval's identity (a GSM8K recipe
    keeps the six keys it always had)."""

    name: str = "sglang"
    num_questions: int | None = None
    num_shots: int | None = None
    max_new_tokens: int | None = None
    #: model path reported by the server (``/get_model_info``); picks the chat-template stop string.
    model_path: str | None = None
    extra_stop: list[str] = field(default_factory=list)
    #: times each question is asked (GPQA: each with its own choice order); None: the task's default
    repeats: int | None = None

    def to_dict(self) -> RecipeDict:
        d: RecipeDict = {"name": self.name, "num_questions": self.num_questions, "num_shots": self.num_shots,
                         "max_new_tokens": self.max_new_tokens, "model_path": self.model_path,
                         "extra_stop": list(self.extra_stop)}
        if self.repeats not in (None, 1):
            d["repeats"] = self.repeats
        return d


@dataclass(frozen=True, slots=True, init=False)
class Item:
    """One request of an eval: its index in the eval (unique; ``samples.jsonl``'s ``index``), the prompt (the
    user message for chat), the label it is graded against, the dataset row it asks and, for a task with a
    breakdown (MMLU), the row's group. The prompt is held as ``head + ask``, ``head`` the part every item
    shares (GSM8K's few-shot block), so a task of 13k questions does not hold its block 13k times."""

    index: int
    ask: str
    label: Any
    row: int
    group: str | None = None
    head: str = ""
    #: the prompt's digest once made (an eval asks for it at every step of a question: its key, row, store)
    _sha256: str = field(default="", init=False, repr=False, compare=False)

    def __init__(self, index: int, prompt: str, label: Any, row: int, group: str | None = None,
                 head: str = "") -> None:
        """``prompt``: the item's prompt after ``head`` (the whole prompt when there is no shared head)."""
        for name, value in (("index", index), ("ask", prompt), ("label", label), ("row", row), ("group", group),
                            ("head", head), ("_sha256", "")):
            object.__setattr__(self, name, value)

    @property
    def prompt(self) -> str:
        return self.head + self.ask if self.head else self.ask

    @property
    def prompt_sha256(self) -> str:
        if not self._sha256:
            object.__setattr__(self, "_sha256", hashlib.sha256(self.prompt.encode()).hexdigest())
        return self._sha256


@dataclass(frozen=True)
class Scored:
    """One answer graded: what the extractor read (None: nothing), its score in [0, 1], and whether the answer
    held nothing the extractor could read (SGLang's "invalid")."""

    pred: Any
    score: float
    invalid: bool


class Task(ABC):
    """One recipe of one benchmark over loaded data."""

    #: the benchmark's name (``task.name``)
    name: ClassVar[str]
    #: the upstream file the recipe follows, for eval.json and the report
    upstream: str = ""
    recipe: RecipeConfig
    #: the shared prefix of every prompt (the few-shot block), which the warm-up primes; "" when none
    few_shot: str = ""
    #: the protocols (``harness.serving.wire`` names) this recipe may be sent by; the first is its own
    apis: tuple[str, ...] = ()

    @property
    @abstractmethod
    def items(self) -> Sequence[Item]:
        """Every request of the eval, in the order they are sent."""

    @property
    def warms_up(self) -> bool:
        """Whether one request primes the server before the batch (SGLang's own recipe says when it does)."""
        return bool(self.items)

    @abstractmethod
    def sampling_params(self, chat: bool = False) -> SamplingParams:
        """The generation parameters in SGLang's vocabulary (``chat``: for the chat API, where a recipe may
        differ, e.g. run_eval's chat mode sends no stop strings); OpenAI-only fields under ``openai_extras``."""

    @abstractmethod
    def grade(self, output: str, item: Item) -> Scored:
        """The upstream parser and grader on one answer."""

    @abstractmethod
    def describe(self) -> EvalMeta:
        """What eval.json records of the task: ``task``, ``recipe`` (:meth:`RecipeConfig.to_dict`),
        ``dataset_sha256`` / ``_source`` / ``_canonical``, ``num_questions``, ``stop``, ``shots_sha256``, and
        whatever else identifies the eval."""

    def groups(self) -> list[str] | None:
        """Each item's group (MMLU: its subject), aligned with :attr:`items`; None for a task without groups."""
        return None


class ChatTask(Task):
    """A zero-shot task as simple-evals runs it: each item one chat message, greedy (``top_p`` 1.0), no stops."""

    apis = ("chat",)
    data: Dataset
    _items: list[Item]

    @property
    def items(self) -> Sequence[Item]:
        return self._items

    def sampling_params(self, chat: bool = True) -> SamplingParams:
        return {"max_new_tokens": self.recipe.max_new_tokens, "temperature": 0.0, "top_p": 1.0}

    def describe(self) -> EvalMeta:
        return {"task": self.name, "recipe": self.recipe.to_dict(), "upstream": self.upstream,
                "dataset_sha256": self.data.sha256, "dataset_source": self.data.source,
                "dataset_canonical": self.data.canonical, "num_questions": len(self._items), "stop": [],
                "shots_sha256": ""}


def zero_shot_questions(recipe: RecipeConfig, recipes: Sequence[str], benchmark: str, rows: int,
                        plural: bool = False) -> int:
    """The number of questions of a zero-shot ``recipe`` over ``rows`` data rows (all of them when unset);
    DatasetError for a recipe not in ``recipes``, any shots, or a count outside 1..rows."""
    if recipe.name not in recipes:
        raise DatasetError(f"unknown {benchmark} recipe {recipe.name!r}; choose one of {', '.join(recipes)}")
    if recipe.num_shots:
        raise DatasetError(f"{benchmark}'s recipe{'s are' if plural else ' is'} zero-shot: num_shots must be 0 "
                           "(or unset)")
    n = rows if recipe.num_questions is None else recipe.num_questions
    if not 1 <= n <= rows:
        raise DatasetError(f"{n} questions asked for; the {benchmark} data has {rows}")
    return n
