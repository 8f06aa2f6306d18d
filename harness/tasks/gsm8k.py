"""GSM8K, exactly as SGLang's ``benchmark/gsm8k/bench_sglang.py`` runs it.

Two recipes:

* ``sglang`` (default): shots are test rows ``0..k-1`` and evaluated questions start at row 0, so the
  first k evaluated questions are leaked into the prompt. Kept for comparability with numbers people
  already quote.
* ``heldout``: shots are train rows ``0..k-1``; no evaluated question is leaked.

Nothing here talks to a server: this module builds prompts and request bodies and parses answers.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.wire import SGLangApi

INVALID = -9999999

#: Canonical test split: row count and content hash (see :func:`content_hash`).
CANONICAL_TEST_ROWS = 1319
CANONICAL_TEST_HASH = "51b901a6559b123df91167acbe3ed6d6d5d404ee6fa0773a4da19fd9d44c767a"
CANONICAL_TRAIN_ROWS = 7473
CANONICAL_TRAIN_HASH = "9556bf9d7dba73d7fcaaeff6ca814c71684db1d8e8d485d83ec62f1c428b888d"

#: The stop list SGLang's frontend always sends for GSM8K.
BASE_STOP = ["Question", "Assistant:", "<|separator|>"]

RECIPES = ("sglang", "heldout")


class DatasetError(ValueError):
    """The data given is not usable (missing, malformed or not the canonical set)."""


# --------------------------------------------------------------------------------------------- data
@dataclass(frozen=True)
class Dataset:
    rows: list[dict[str, str]]
    source: str
    sha256: str
    canonical: bool

    def __len__(self) -> int:
        return len(self.rows)


def content_hash(rows: list[dict[str, str]]) -> str:
    """sha256 over the rows' (question, answer) pairs: the same whether read from JSONL or `datasets`."""
    h = hashlib.sha256()
    for r in rows:
        h.update(json.dumps({"question": r["question"], "answer": r["answer"]}, ensure_ascii=False,
                            sort_keys=True).encode() + b"\n")
    return h.hexdigest()


def _read_jsonl(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        raise DatasetError(f"GSM8K data file not found: {path}")
    rows: list[dict[str, str]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
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
    return rows


def _load_hf(split: str) -> list[dict[str, str]]:  # pragma: no cover - needs the Hugging Face hub
    try:
        import datasets  # heavy: imported only when asked for
    except ImportError as e:
        raise DatasetError("no --data path given and the `datasets` package is not installed") from e
    try:
        ds = datasets.load_dataset("openai/gsm8k", "main", split=split)
    except Exception as e:
        raise DatasetError(f"could not load openai/gsm8k ({split}) through `datasets`: {e}. "
                           "Pass a local JSONL file with --data / task.data_path.") from None
    return [{"question": r["question"], "answer": r["answer"]} for r in ds]


def load(path: str | Path | None = None, split: str = "test", allow_noncanonical: bool = False) -> Dataset:
    """Load a GSM8K split and check it is the canonical one.

    ``path`` is a JSONL file (or a directory holding ``test.jsonl``/``train.jsonl``); ``None`` loads
    ``openai/gsm8k`` through `datasets`. A set whose row count or content hash differs from the canonical
    split is refused unless ``allow_noncanonical`` (the Dataset then says ``canonical=False``).
    """
    if path is None or str(path) == "":
        rows, source = _load_hf(split), f"hf:openai/gsm8k/main/{split}"
    else:
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / f"{split}.jsonl"
        rows, source = _read_jsonl(p), str(p.resolve())
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


def load_splits(data_path: str | Path | None, train_path: str | Path | None = None, recipe: str = "sglang",
                allow_noncanonical: bool = False) -> tuple[Dataset, Dataset | None]:
    """(test, train or None) as a recipe needs them. ``data_path`` empty: the shared copy beside the checkout
    when present, else `datasets`; the train file defaults to ``train.jsonl`` beside the test file."""
    data = str(data_path) if data_path else (str(default_data_dir()) if default_data_dir() else None)
    test = load(data, "test", allow_noncanonical)
    train = None
    if recipe == "heldout":
        if not train_path and data:
            p = Path(data)
            train_path = p / "train.jsonl" if p.is_dir() else p.parent / "train.jsonl"
        train = load(train_path or None, "train", allow_noncanonical)
    return test, train


def default_data_dir() -> Path | None:
    """``../shared/data/gsm8k`` beside the checkout, when present (tests and CI use it)."""
    here = Path(__file__).resolve().parents[2]
    for cand in (here.parent / "shared" / "data" / "gsm8k", here / "data" / "gsm8k"):
        if (cand / "test.jsonl").exists():
            return cand
    return None


# ------------------------------------------------------------------------------------------ parsing
def get_answer_value(answer_str: str) -> int:
    """SGLang's parser: drop commas, take the last run of digits; none or a SyntaxError is INVALID.

    Signs and decimals are lost on purpose (``-5`` scores 5, ``3.50`` scores 50), as in SGLang.
    SGLang catches only SyntaxError; any other failure would crash its script, here it is INVALID.
    """
    answer_str = answer_str.replace(",", "")
    numbers = re.findall(r"\d+", answer_str)
    if len(numbers) < 1:
        return INVALID
    try:
        return ast.literal_eval(numbers[-1])
    except SyntaxError:
        return INVALID
    except (ValueError, TypeError, MemoryError, RecursionError):
        return INVALID


# ------------------------------------------------------------------------------------------ recipes
def chat_stop_for_model(model_path: str | None) -> str | None:
    """The chat template stop string SGLang's frontend adds for this model (or None)."""
    if not model_path:
        return None
    m = model_path.lower()
    if "qwen" in m and ("chat" in m or "instruct" in m):
        return "<|im_end|>"
    if "llama-3" in m and "instruct" in m:
        return "<|eot_id|>"
    if "deepseek-v3" in m or "deepseek-r1" in m:
        return "<｜end▁of▁sentence｜>"
    if ("mistral" in m or "mixtral" in m) and "instruct" in m:
        return "</s>"
    return None


@dataclass
class RecipeConfig:
    name: str = "sglang"
    num_questions: int = 1319
    num_shots: int = 5
    max_new_tokens: int = 512
    #: model path reported by the server (``/get_model_info``); picks the chat-template stop string.
    model_path: str | None = None
    extra_stop: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Question:
    index: int
    prompt: str
    label: int
    question: str
    answer: str

    @property
    def prompt_sha256(self) -> str:
        return hashlib.sha256(self.prompt.encode()).hexdigest()


def one_example(row: dict[str, str], include_answer: bool) -> str:
    ret = "Question: " + row["question"] + "\nAnswer:"
    if include_answer:
        ret += " " + row["answer"]
    return ret


def few_shot_block(shot_rows: list[dict[str, str]]) -> str:
    return "".join(one_example(r, True) + "\n\n" for r in shot_rows)


class GSM8K:
    """Prompts, request bodies and scoring for one recipe over a loaded test set."""

    def __init__(self, test: Dataset, recipe: RecipeConfig, train: Dataset | None = None):
        if recipe.name not in RECIPES:
            raise DatasetError(f"unknown recipe {recipe.name!r}; choose one of {', '.join(RECIPES)}")
        if recipe.num_shots < 0 or recipe.num_questions < 1 or recipe.max_new_tokens < 0:
            raise DatasetError("num_shots must be >= 0, num_questions >= 1, max_new_tokens >= 0")
        if recipe.name == "heldout" and train is None:
            raise DatasetError("the heldout recipe needs the train split (shots come from it)")
        self.test, self.train, self.recipe = test, train, recipe
        shots_from = test.rows if recipe.name == "sglang" else train.rows  # type: ignore[union-attr]
        if recipe.num_shots > len(shots_from):
            raise DatasetError(f"{recipe.num_shots} shots asked for, only {len(shots_from)} rows")
        self.few_shot = few_shot_block(shots_from[: recipe.num_shots])
        if recipe.num_questions > len(test.rows):
            raise DatasetError(f"{recipe.num_questions} questions asked for; the test set has {len(test.rows)}")
        n = recipe.num_questions
        self.questions = [
            Question(index=i, prompt=self.few_shot + one_example(test.rows[i], False),
                     label=get_answer_value(test.rows[i]["answer"]),
                     question=test.rows[i]["question"], answer=test.rows[i]["answer"])
            for i in range(n)
        ]

    # ------------------------------------------------------------------ request bodies
    def stop(self) -> list[str]:
        stop = list(BASE_STOP)
        chat = chat_stop_for_model(self.recipe.model_path)
        if chat:
            stop.append(chat)
        stop.extend(s for s in self.recipe.extra_stop if s not in stop)
        return stop

    def sampling_params(self, max_new_tokens: int | None = None) -> dict[str, Any]:
        """Every field SGLang's frontend sends, in its order; leaving one out lets the server's defaults in."""
        return {
            "skip_special_tokens": True,
            "spaces_between_special_tokens": True,
            "max_new_tokens": self.recipe.max_new_tokens if max_new_tokens is None else max_new_tokens,
            "min_new_tokens": 0,
            "n": 1,
            "stop": self.stop(),
            "stop_token_ids": [],
            "stop_regex": [],
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": -1,
            "min_p": 0.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "ignore_eos": False,
            "regex": None,
            "json_schema": None,
        }

    def warmup_body(self) -> dict[str, Any]:
        """The frontend's prefix-cache warm-up as SGLang's ``/generate`` body (the few-shot block alone, zero
        new tokens); the body itself is built by :mod:`harness.wire`, which owns the protocols."""
        return SGLangApi().warmup_body(self.few_shot, self.questions[0].prompt if self.questions else "",
                                       self.sampling_params())

    def generate_body(self, q: Question) -> dict[str, Any]:
        """``q`` as SGLang's ``/generate`` body."""
        return SGLangApi().generation_body(q.prompt, self.sampling_params())

    # ------------------------------------------------------------------ scoring
    @staticmethod
    def score(output: str, label: int) -> tuple[int, bool, bool]:
        pred = get_answer_value(output)
        return pred, pred == label, pred == INVALID

    def describe(self) -> dict[str, Any]:
        return {"task": "gsm8k", "recipe": self.recipe.to_dict(), "dataset_sha256": self.test.sha256,
                "dataset_source": self.test.source, "dataset_canonical": self.test.canonical,
                "num_questions": len(self.questions), "stop": self.stop(),
                "shots_sha256": hashlib.sha256(self.few_shot.encode()).hexdigest()}
