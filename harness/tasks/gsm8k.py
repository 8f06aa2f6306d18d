"""GSM8K, exactly as SGLang's ``benchmark/gsm8k/bench_sglang.py`` runs it.

Two recipes:

* ``sglang`` (default): shots are test rows ``0..k-1`` and evaluated questions start at row 0, so the
  first k evaluated questions are leaked into the prompt. Kept for comparability with numbers people
  already quote.
* ``heldout``: shots are train rows ``0..k-1``; no evaluated question is leaked.

Data: the canonical test split ships inside the package (``data/gsm8k/test.jsonl``, MIT licence, sha256
checked on every read) and is the default, so a fresh offline machine runs everything. Other copies:
``task.data_path`` / ``--data`` = a JSONL file or a directory with ``test.jsonl``/``train.jsonl``, or
``hf:openai/gsm8k`` (any ``hf:REPO[:CONFIG]``) through `datasets`. The train split (the ``heldout`` recipe's
shots) is not shipped: ``task.train_path`` (default: ``train.jsonl`` beside a local test file, or the same
``hf:`` dataset).

Nothing here talks to a server: this module builds prompts and request bodies, parses answers, and is the
one parser of its own prompts (:func:`question_from_prompt`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.serving.wire import SGLangApi

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
#: The canonical test split shipped inside the package (MIT licence, see data/gsm8k/README.md): the default.
EMBEDDED_DIR = Path(__file__).resolve().parent / "data" / "gsm8k"
EMBEDDED_TEST = EMBEDDED_DIR / "test.jsonl"
#: sha256 of the embedded file's bytes, checked on every read.
EMBEDDED_TEST_FILE_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
#: ``task.data_path=hf:REPO[:CONFIG]`` loads a copy through `datasets` (config ``main`` by default).
HF_PREFIX = "hf:"


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


def read_jsonl(path: Path) -> list[dict[str, str]]:
    """The rows of a GSM8K JSONL file (``question`` and ``answer`` strings); any problem is one DatasetError line."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"GSM8K data file not found: {path}") from None
    except OSError as e:
        raise DatasetError(f"cannot read GSM8K data file {path}: {e.strerror or e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad_line = raw.count(b"\n", 0, e.start) + 1
        raise DatasetError(f"{path}:{bad_line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
                           "GSM8K files are UTF-8 JSONL") from None
    rows: list[dict[str, str]] = []
    for lineno, line in enumerate(text.split("\n"), 1):
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


def read_embedded_test() -> list[dict[str, str]]:
    """The embedded canonical test split, after checking the file's sha256."""
    digest = hashlib.sha256(EMBEDDED_TEST.read_bytes()).hexdigest() if EMBEDDED_TEST.is_file() else "missing"
    if digest != EMBEDDED_TEST_FILE_SHA256:
        raise DatasetError(f"the embedded GSM8K test set {EMBEDDED_TEST} is damaged or missing (sha256 "
                           f"{digest[:12]}..., want {EMBEDDED_TEST_FILE_SHA256[:12]}...): reinstall abh")
    return read_jsonl(EMBEDDED_TEST)


def _load_hf(spec: str, split: str) -> list[dict[str, str]]:  # pragma: no cover - needs the Hugging Face hub
    """``hf:REPO[:CONFIG]`` through `datasets` (imported only when asked for: it is slow to import)."""
    repo, _, config = spec[len(HF_PREFIX):].partition(":")
    try:
        import datasets
    except ImportError:
        raise DatasetError(f"{spec}: the `datasets` package is not installed (pip install 'abh[hf]')") from None
    try:
        ds = datasets.load_dataset(repo, config or "main", split=split)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DatasetError(f"could not load {repo} ({config or 'main'}, {split}) through `datasets`: {first}. "
                           "Leave task.data_path unset for the embedded test set, or pass a local JSONL file.") from None
    return [{"question": r["question"], "answer": r["answer"]} for r in ds]


def load(path: str | Path | None = None, split: str = "test", allow_noncanonical: bool = False) -> Dataset:
    """Load a GSM8K split and check it is the canonical one.

    ``path``: unset (None or "") = the embedded test set (there is no embedded train set); ``hf:REPO[:CONFIG]``
    = that dataset through `datasets`; otherwise a JSONL file, or a directory holding ``test.jsonl`` /
    ``train.jsonl``. A set whose row count or content hash differs from the canonical split is refused unless
    ``allow_noncanonical`` (the Dataset then says ``canonical=False``).
    """
    spec = "" if path is None else str(path)
    if not spec:
        if split != "test":
            raise DatasetError(f"abh ships only the GSM8K test split; give a path to the {split} split "
                               f"(a {split}.jsonl file, or hf:openai/gsm8k)")
        rows, source = read_embedded_test(), str(EMBEDDED_TEST)
    elif spec.startswith(HF_PREFIX):
        rows, source = _load_hf(spec, split), f"{spec}/{split}"
    else:
        p = Path(spec).expanduser()
        if p.is_dir():
            p = p / f"{split}.jsonl"
        rows, source = read_jsonl(p), str(p.resolve())
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
    if spec.startswith(HF_PREFIX):
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
    if recipe == "heldout":
        source = str(train_path) if train_path else train_source_for(data_path)
        if source is None:
            raise DatasetError("the heldout recipe takes its shots from the GSM8K train split, which abh does not "
                               "ship: set task.train_path=/path/to/train.jsonl (abh eval: --train-data) or "
                               "task.train_path=hf:openai/gsm8k")
        train = load(source, "train", allow_noncanonical)
    return test, train


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
    num_questions: int = CANONICAL_TEST_ROWS
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
        """Every field SGLang's frontend sends, in its order; leaving one out lets the server's defaults in:
        ``RuntimeEndpoint.generate`` (python/sglang/lang/backend/runtime_endpoint.py) puts the two special-token
        flags first, then ``SglSamplingParams.to_srt_kwargs()`` (python/sglang/lang/ir.py), with the values
        benchmark/gsm8k/bench_sglang.py gives (``max_tokens=512``, its stop list, ``temperature=0``)."""
        return {
            "skip_special_tokens": True,
            "spaces_between_special_tokens": True,
            "max_new_tokens": self.recipe.max_new_tokens if max_new_tokens is None else max_new_tokens,
            "min_new_tokens": 0,
            "n": 1,
            "stop": self.stop(),
            "stop_token_ids": [],
            "stop_regex": [],
            "temperature": 0,  # an int: bench_sglang.py passes temperature=0 to run_batch
            "top_p": 1.0,
            "top_k": -1,
            "min_p": 0.0,
            "frequency_penalty": 0.0,
            "presence_penalty": 0.0,
            "ignore_eos": False,
            "regex": None,
            "json_schema": None,
        }

    @property
    def warms_up(self) -> bool:
        """Whether SGLang's frontend sends the prefix-cache warm-up before this batch: ``run_program_batch``
        (python/sglang/lang/interpreter.py) calls ``cache_program`` only for more than one question, and that
        sends the traced prefix (the few-shot block) only when it is longer than 64 characters."""
        return len(self.questions) > 1 and len(self.few_shot) > 64

    def warmup_body(self) -> dict[str, Any]:
        """The frontend's prefix-cache warm-up as SGLang's ``/generate`` body (the few-shot block alone, zero
        new tokens); the body itself is built by :mod:`harness.serving.wire`, which owns the protocols."""
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
                "temperature": self.sampling_params()["temperature"],
                "shots_sha256": hashlib.sha256(self.few_shot.encode()).hexdigest()}
