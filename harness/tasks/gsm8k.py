"""GSM8K, exactly as SGLang's ``benchmark/gsm8k/bench_sglang.py`` runs it, and the other recipes maintainers run.

Recipes here (the others follow their own upstream files in :mod:`harness.tasks.gsm8k_recipes`):

* ``sglang`` (default): ``sgl-project/sglang benchmark/gsm8k/bench_sglang.py`` (and
  ``python/sglang/test/few_shot_gsm8k.py``, same helpers): shots are test rows ``0..k-1`` and evaluated
  questions start at row 0, so the first k evaluated questions leak into the prompt; kept for comparability
  with numbers people already quote.
* ``sglang_8shot``: the same with ``--num-shots 8`` (SGLang's ``docs/basic_usage/deepseek_v32.md``).
* ``heldout``: shots are train rows ``0..k-1``; no evaluated question is leaked.

The canonical test split ships inside the package (``data/gsm8k/test.jsonl``, MIT, sha256 checked on every read),
so a fresh offline machine runs everything; the train split does not (docs/tasks.md). This module is the one
parser of its own prompts (:func:`question_from_prompt`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.tasks import sources
from harness.tasks.interface import Dataset, DatasetError, Item, RecipeConfig, SamplingParams, Scored, Task
from harness.tasks.sglang_frontend import chat_stops_for_model

if TYPE_CHECKING:  # the simulated servers import this module: they need neither the stored types nor the wire
    from harness.results.records import JSONObject
    from harness.results.schema import EvalMeta

__all__ = ["BASE_STOP", "CANONICAL_TEST_ROWS", "GSM8K", "INVALID", "RECIPES", "Dataset", "DatasetError", "Question",
           "RecipeConfig", "get_answer_value", "load", "load_splits"]

INVALID = -9999999

#: Canonical test split: row count and content hash (see :func:`content_hash`).
CANONICAL_TEST_ROWS = 1319
CANONICAL_TEST_HASH = "51b901a6559b123df91167acbe3ed6d6d5d404ee6fa0773a4da19fd9d44c767a"
CANONICAL_TRAIN_ROWS = 7473
CANONICAL_TRAIN_HASH = "9556bf9d7dba73d7fcaaeff6ca814c71684db1d8e8d485d83ec62f1c428b888d"

#: The stop list SGLang's frontend always sends for GSM8K.
BASE_STOP = ["Question", "Assistant:", "<|separator|>"]

#: Every GSM8K recipe: this module's and :mod:`harness.tasks.gsm8k_recipes`' (each named for its upstream).
RECIPES = ("sglang", "sglang_8shot", "heldout", "simple_eval", "vllm", "lm_eval_strict", "lm_eval_flexible",
           "sgl_eval_chat")
#: The recipes whose shots come from the train split (and need it).
TRAIN_RECIPES = ("heldout", "vllm", "lm_eval_strict", "lm_eval_flexible")


# --------------------------------------------------------------------------------------------- data
#: The canonical test split shipped inside the package (MIT licence, see data/gsm8k/README.md): the default.
EMBEDDED_DIR = Path(__file__).resolve().parent / "data" / "gsm8k"
EMBEDDED_TEST = EMBEDDED_DIR / "test.jsonl"
#: sha256 of the embedded file's bytes, checked on every read.
EMBEDDED_TEST_FILE_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"


def content_hash(rows: list[dict[str, str]]) -> str:
    """sha256 over the rows' (question, answer) pairs: the same whether read from JSONL or `datasets`."""
    return sources.content_hash(rows, ("question", "answer"))


def read_jsonl(path: Path, lines: list[int] | None = None) -> list[dict[str, str]]:
    """The rows of a GSM8K JSONL file (``question`` and ``answer`` strings); any problem is one DatasetError line.
    ``lines``, when given, gets each row's line number."""
    raw, where = sources.read_bytes(str(path), "GSM8K")
    rows: list[dict[str, str]] = []
    for lineno, line in enumerate(sources.text_of(raw, where, "GSM8K").split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("question"), str) \
                or not isinstance(obj.get("answer"), str):
            raise DatasetError(f"{path}:{lineno}: each line needs string fields 'question' and 'answer'")
        rows.append({"question": obj["question"], "answer": obj["answer"]})
        if lines is not None:
            lines.append(lineno)
    return rows


def _read_embedded(path: Path, sha256: str, what: str) -> list[dict[str, str]]:
    """The rows of a file shipped inside the package, after checking the file's sha256."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    if digest != sha256:
        raise DatasetError(f"the embedded GSM8K {what} {path} is damaged or missing (sha256 "
                           f"{digest[:12]}..., want {sha256[:12]}...): reinstall abh")
    return read_jsonl(path)


def read_embedded_test() -> list[dict[str, str]]:
    return _read_embedded(EMBEDDED_TEST, EMBEDDED_TEST_FILE_SHA256, "test set")


def _from_hf(r: dict[str, Any]) -> dict[str, str]:  # pragma: no cover - needs the Hugging Face hub
    return {"question": r["question"], "answer": r["answer"]}


def load(path: str | Path | None = None, split: str = "test", allow_noncanonical: bool = False) -> Dataset:
    """A GSM8K split from ``path``: unset = the embedded test set; ``hf:REPO[:CONFIG]``; a JSONL file, or a
    directory holding ``test.jsonl`` / ``train.jsonl``. A set that is not the canonical split (row count, content
    hash) is refused unless ``allow_noncanonical`` (the Dataset then says ``canonical=False``)."""
    spec = "" if path is None else str(path)
    lines: list[int] | None = None
    if not spec:
        if split != "test":
            raise DatasetError(f"abh ships only the GSM8K test split; give a path to the {split} split "
                               f"(a {split}.jsonl file, or hf:openai/gsm8k)")
        rows, source = read_embedded_test(), str(EMBEDDED_TEST)
    elif sources.is_hf(spec):
        rows, source = sources.load_hf(spec, split, "main", _from_hf, "GSM8K"), f"{spec}/{split}"
    else:
        p = Path(spec).expanduser()
        if p.is_dir():
            p = p / f"{split}.jsonl"
        lines = []
        rows, source = read_jsonl(p, lines), str(p.resolve())
    if split == "test":  # the graded split (the train split gives shots only)
        sources.refuse_conflicting_duplicates(rows, source, lambda r: r["question"],
                                              lambda r: get_answer_value(r["answer"]), lines)
    digest = content_hash(rows)
    want_rows, want_hash = ((CANONICAL_TEST_ROWS, CANONICAL_TEST_HASH) if split == "test"
                            else (CANONICAL_TRAIN_ROWS, CANONICAL_TRAIN_HASH))
    canonical = len(rows) == want_rows and digest == want_hash
    if not canonical and not allow_noncanonical:
        raise DatasetError(
            f"{source} is not the canonical GSM8K {split} set: {len(rows)} rows (want {want_rows}), "
            f"content sha256 {digest[:12]}... (want {want_hash[:12]}...). "
            "Results on it are not comparable to published GSM8K numbers; set "
            "task.allow_noncanonical=true (or --allow-noncanonical) to use it anyway.")
    if not rows:
        raise DatasetError(f"{source} holds no rows")
    return Dataset(rows=rows, source=source, sha256=digest, canonical=canonical)


def train_source_for(data_path: str | Path | None) -> str | None:
    """Where the train split is, given only the test data: ``train.jsonl`` beside a local test file or in a
    test directory, the same ``hf:`` dataset; None for the embedded set (no train split is shipped)."""
    spec = "" if data_path is None else str(data_path)
    if not spec:
        return None
    if sources.is_hf(spec):
        return spec
    p = Path(spec).expanduser()
    cand = p / "train.jsonl" if p.is_dir() else p.parent / "train.jsonl"
    return str(cand) if cand.is_file() else None


def load_splits(data_path: str | Path | None, train_path: str | Path | None = None, recipe: str = "sglang",
                allow_noncanonical: bool = False) -> tuple[Dataset, Dataset | None]:
    """(test, train or None) as a recipe needs them. ``data_path`` unset: the embedded test set. The heldout
    recipe's train split: ``train_path``, else :func:`train_source_for` the test data, else one clear error."""
    test = load(data_path or None, "test", allow_noncanonical)
    train = None
    if recipe in TRAIN_RECIPES:
        source = str(train_path) if train_path else train_source_for(data_path)
        if source is None and recipe == "vllm":
            return test, train_head()
        if source is None:
            raise DatasetError(f"the {recipe} recipe takes its shots from the GSM8K train split, which abh does not "
                               "ship: set task.train_path=/path/to/train.jsonl (abh eval: --train-data) or "
                               "task.train_path=hf:openai/gsm8k")
        train = load(source, "train", allow_noncanonical)
    return test, train


#: The first train rows (MIT, as the test set), shipped for the recipes whose shots are the first train rows
#: (vLLM's gsm8k_eval: train rows 0..k-1); sha256 of the file checked on every read.
EMBEDDED_TRAIN_HEAD = EMBEDDED_DIR / "train_head.jsonl"
EMBEDDED_TRAIN_HEAD_SHA256 = "8743e4cee831ece07b9770395c33f3244bbed3eee140d67801c0e9fbb587a53c"


def train_head() -> Dataset:
    """The embedded first rows of the canonical train split (canonical as a prefix, byte for byte)."""
    rows = _read_embedded(EMBEDDED_TRAIN_HEAD, EMBEDDED_TRAIN_HEAD_SHA256, "train head")
    return Dataset(rows=rows, source=str(EMBEDDED_TRAIN_HEAD), sha256=content_hash(rows), canonical=True)


def question_from_prompt(prompt: str) -> str | None:
    """The evaluated question of a prompt built by :func:`one_example`: the text of its LAST
    ``Question: ...\\nAnswer:`` block, stripped; None when the prompt holds no ``Question:`` at all.
    The one parser of prompts: the simulator (to know what it is asked) and the report use it."""
    k = prompt.rfind("Question:")
    if k < 0:
        return None
    rest = prompt[k + len("Question:"):]
    j = rest.find("\nAnswer:")
    return (rest[:j] if j >= 0 else rest).strip()


# ------------------------------------------------------------------------------------------ parsing
def get_answer_value(answer_str: str) -> int:
    """SGLang's parser: the last run of digits, commas dropped (signs and decimals lost as in SGLang: ``-5``
    scores 5, ``3.50`` scores 50); none or a SyntaxError is INVALID."""
    return last_literal(answer_str, r"\d+")


def last_literal(answer_str: str, pattern: str) -> Any:
    """The last match of ``pattern`` in ``answer_str`` (commas dropped) by ``ast.literal_eval``; INVALID when none
    or when it does not parse (upstream catches only SyntaxError: any other failure would crash its script)."""
    numbers = re.findall(pattern, answer_str.replace(",", ""))
    if not numbers:
        return INVALID
    last = numbers[-1]
    if last.isascii() and last.isdigit() and len(last) < 4000 and (last[0] != "0" or not last.strip("0")):
        return int(last)  # what literal_eval makes of a decimal literal, without parsing Python (every answer has one)
    try:
        return ast.literal_eval(last)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return INVALID


# ------------------------------------------------------------------------------------------ recipes
@dataclass(frozen=True, slots=True, init=False)
class Question(Item):
    """One GSM8K question: an :class:`~harness.tasks.interface.Item` with its question and answer text."""

    question: str = ""
    answer: str = ""

    def __init__(self, index: int, prompt: str, label: Any, row: int, group: str | None = None, head: str = "",
                 question: str = "", answer: str = "") -> None:
        Item.__init__(self, index, prompt, label, row, group, head)
        object.__setattr__(self, "question", question)
        object.__setattr__(self, "answer", answer)


def one_example(row: dict[str, str], include_answer: bool) -> str:
    ret = "Question: " + row["question"] + "\nAnswer:"
    if include_answer:
        ret += " " + row["answer"]
    return ret


def few_shot_block(shot_rows: list[dict[str, str]]) -> str:
    return "".join(one_example(r, True) + "\n\n" for r in shot_rows)


#: Upstream defaults of this module's recipes: (shots, max new tokens); questions: the whole test set.
SGLANG_DEFAULTS = {"sglang": (5, 512), "sglang_8shot": (8, 512), "heldout": (5, 512)}


def resolved(recipe: RecipeConfig, shots: int, max_new_tokens: int, questions: int) -> RecipeConfig:
    """``recipe`` with its unset (None) settings filled by the recipe's upstream defaults."""
    return RecipeConfig(name=recipe.name, model_path=recipe.model_path, extra_stop=list(recipe.extra_stop),
                        repeats=recipe.repeats,
                        num_questions=questions if recipe.num_questions is None else recipe.num_questions,
                        num_shots=shots if recipe.num_shots is None else recipe.num_shots,
                        max_new_tokens=max_new_tokens if recipe.max_new_tokens is None else recipe.max_new_tokens)


def check_settings(recipe: RecipeConfig) -> tuple[int, int, int]:
    """(questions, shots, max new tokens) of a resolved recipe; DatasetError when one is out of range."""
    q, k, m = recipe.num_questions, recipe.num_shots, recipe.max_new_tokens
    assert q is not None and k is not None and m is not None, "resolve the recipe first"
    if k < 0 or q < 1 or m < 0:
        raise DatasetError("num_shots must be >= 0, num_questions >= 1, max_new_tokens >= 0")
    return q, k, m


class GSM8K(Task):
    """Prompts, request bodies and scoring for one recipe over a loaded test set. This class is the ``sglang``,
    ``sglang_8shot`` and ``heldout`` recipes; :func:`harness.tasks.registry.build` picks the class of the others."""

    name = "gsm8k"
    upstream = ("sgl-project/sglang benchmark/gsm8k/bench_sglang.py @ 0126b5f43b4f3cd7b1ff4fca0bed482cac4be0d8 "
                "(= sglang==0.5.23 python/sglang/test/few_shot_gsm8k.py)")
    apis: tuple[str, ...] = ("sglang", "openai", "chat")
    #: the recipe's upstream (shots, max new tokens) where :data:`SGLANG_DEFAULTS` names none
    DEFAULTS: tuple[int, int] = (5, 512)
    #: a recipe's own stop list, sent as it is (None: :meth:`stop` builds bench_sglang's)
    STOPS: tuple[str, ...] | None = None

    def default_questions(self, test: Dataset, shots: int) -> int:
        """Questions when the recipe does not say: the whole test set."""
        return len(test.rows)

    def __init__(self, test: Dataset, recipe: RecipeConfig, train: Dataset | None = None):
        if recipe.name not in RECIPES:
            raise DatasetError(f"unknown recipe {recipe.name!r}; choose one of {', '.join(RECIPES)}")
        shots, max_new = SGLANG_DEFAULTS.get(recipe.name, self.DEFAULTS)
        k0 = shots if recipe.num_shots is None else recipe.num_shots
        recipe = resolved(recipe, shots, max_new, self.default_questions(test, k0))
        n, k, _ = check_settings(recipe)
        if recipe.name in TRAIN_RECIPES and train is None:
            raise DatasetError(f"the {recipe.name} recipe needs the train split (shots come from it)")
        self.test, self.train, self.recipe = test, train, recipe
        self.build(test, train, n, k)

    def build(self, test: Dataset, train: Dataset | None, n: int, k: int) -> None:
        """The few-shot block and the questions (bench_sglang's ``main``)."""
        shots_from = train.rows if self.recipe.name in TRAIN_RECIPES else test.rows  # type: ignore[union-attr]
        if k > len(shots_from):
            raise DatasetError(f"{k} shots asked for, only {len(shots_from)} rows")
        self.few_shot = few_shot_block(shots_from[:k])
        if n > len(test.rows):
            raise DatasetError(f"{n} questions asked for; the test set has {len(test.rows)}")
        self.questions: list[Question] = [
            self.question(i, one_example(row, False), get_answer_value(row["answer"]), self.few_shot)
            for i, row in enumerate(test.rows[:n])]

    def question(self, i: int, ask: str, label: Any, head: str = "") -> Question:
        """Test row ``i`` asked by ``head + ask`` (``head``: shared by all questions), graded by ``label``."""
        row = self.test.rows[i]
        return Question(index=i, prompt=ask, head=head, row=i, label=label, question=row["question"],
                        answer=row["answer"])

    def new_tokens(self, asked: int | None) -> int | None:
        """``asked`` (a warm-up's or a probe's own length), else the recipe's."""
        return self.recipe.max_new_tokens if asked is None else asked

    @property
    def items(self) -> Sequence[Question]:
        return self.questions

    # ------------------------------------------------------------------ request bodies
    def stop(self) -> list[str]:
        """:attr:`STOPS`, else bench_sglang's stop list, then every stop string of the chat template SGLang's
        frontend picks for the model (``interpreter.py``: ``clone.stop += chat_template.stop_str``), then the
        recipe's extra stops."""
        if self.STOPS is not None:
            return list(self.STOPS)
        stop = [*BASE_STOP, *chat_stops_for_model(self.recipe.model_path)]
        stop.extend(s for s in self.recipe.extra_stop if s not in stop)
        return stop

    def sampling_params(self, chat: bool = False, max_new_tokens: int | None = None) -> SamplingParams:
        """Every field SGLang's frontend sends, in its order; leaving one out lets the server's defaults in:
        ``RuntimeEndpoint.generate`` (python/sglang/lang/backend/runtime_endpoint.py) puts the two special-token
        flags first, then ``SglSamplingParams.to_srt_kwargs()`` (python/sglang/lang/ir.py), with the values
        benchmark/gsm8k/bench_sglang.py gives (``max_tokens=512``, its stop list, ``temperature=0``)."""
        return {"skip_special_tokens": True, "spaces_between_special_tokens": True,
                "max_new_tokens": self.new_tokens(max_new_tokens), "min_new_tokens": 0, "n": 1, "stop": self.stop(),
                "stop_token_ids": [], "stop_regex": [],
                "temperature": 0,  # an int: bench_sglang.py passes temperature=0 to run_batch
                "top_p": 1.0, "top_k": -1, "min_p": 0.0, "frequency_penalty": 0.0, "presence_penalty": 0.0,
                "ignore_eos": False, "regex": None, "json_schema": None}

    @property
    def warms_up(self) -> bool:
        """Whether SGLang's frontend sends the prefix-cache warm-up before this batch: ``run_program_batch``
        (python/sglang/lang/interpreter.py) calls ``cache_program`` only for more than one question, and that
        sends the traced prefix (the few-shot block) only when it is longer than 64 characters."""
        return len(self.questions) > 1 and len(self.few_shot) > 64

    def warmup_body(self) -> JSONObject:
        """The frontend's prefix-cache warm-up as SGLang's ``/generate`` body (the few-shot block alone)."""
        from harness.serving.wire import SGLangApi

        return SGLangApi().warmup_body(self.few_shot, self.questions[0].prompt if self.questions else "",
                                       self.sampling_params())

    def generate_body(self, q: Question) -> JSONObject:
        from harness.serving.wire import SGLangApi

        return SGLangApi().generation_body(q.prompt, self.sampling_params())

    # ------------------------------------------------------------------ scoring
    @staticmethod
    def score(output: str, label: int) -> tuple[int, bool, bool]:
        pred = get_answer_value(output)
        return pred, pred == label, pred == INVALID

    def grade(self, output: str, item: Item) -> Scored:
        pred, correct, invalid = self.score(output, item.label)
        return Scored(pred, float(correct), invalid)

    def describe(self) -> EvalMeta:
        return {"task": "gsm8k", "recipe": self.recipe.to_dict(), "dataset_sha256": self.test.sha256,
                "dataset_source": self.test.source, "dataset_canonical": self.test.canonical,
                "num_questions": len(self.questions), "stop": self.stop(),
                "temperature": self.sampling_params()["temperature"],
                "shots_sha256": hashlib.sha256(self.few_shot.encode()).hexdigest()}
