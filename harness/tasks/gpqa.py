"""GPQA-diamond, as openai/simple-evals runs it: each question asked ``repeats`` times, each time with its own
seeded order of the four choices; a question's score is the mean over its repeats within one eval.

Recipe ``simple_evals``: ``openai/simple-evals gpqa_eval.py @ ee3b0318d8d1d9d72755a4120879be65f7c07e9e``: one
``random.Random(0)`` for the whole eval draws the sample (``num_questions`` set), then each copy's permutation
of ``[Correct, Incorrect 1, 2, 3]`` in upstream's order (every row once, then every row again, ...); the
answer is the first match of ``ANSWER_PATTERN_MULTICHOICE``. ``repeats`` defaults to 8 (SGLang's
``--repeat 8``; sgl-eval's ``default_n_repeats``); sampling as SGLang's run_eval (``max_tokens`` 2048:
reasoning models need far more).

Data is never shipped (its authors ask that its questions not be posted in plain text): a local
``gpqa_diamond.csv`` (columns ``Question``, ``Correct Answer``, ``Incorrect Answer 1..3``), its URL, or
``hf:Idavidrein/gpqa`` (config ``gpqa_diamond``; gated: accept its terms and log in first).
"""

from __future__ import annotations

import random
from typing import Any

from harness.results.eval_schema import EvalMeta
from harness.tasks import sources
from harness.tasks.interface import (
    ChatTask,
    Dataset,
    DatasetError,
    Item,
    RecipeConfig,
    Scored,
    zero_shot_questions,
)
from harness.tasks.multichoice import ANSWER_PATTERN_MULTICHOICE, extract_first, format_question

RECIPES = ("simple_evals",)
COLUMNS = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
DEFAULT_REPEATS = 8
MAX_NEW_TOKENS = 2048
#: GPQA-diamond's size
DIAMOND_ROWS = 198

NO_DATA = ("GPQA is not shipped with abh (its authors ask that its questions not be posted in plain text): set "
           "task.data_path (abh eval/ab: --data) to your local gpqa_diamond.csv, its URL, or "
           "hf:Idavidrein/gpqa:gpqa_diamond (gated: accept its terms on the hub and log in first)")


def _from_hf(r: dict[str, Any]) -> dict[str, str]:  # pragma: no cover - needs the Hugging Face hub
    return {c: str(r[c]) for c in COLUMNS}


def load(data_path: str | None) -> Dataset:
    spec = str(data_path or "")
    if not spec:
        raise DatasetError(NO_DATA)
    lines: list[int] | None = None
    if sources.is_hf(spec):
        rows, where = sources.load_hf(spec, "train", "gpqa_diamond", _from_hf, "GPQA"), spec
    else:
        try:
            raw, where = sources.read_bytes(spec, "GPQA")
        except DatasetError as e:
            raise DatasetError(f"{e}. {NO_DATA}") from None
        lines = []
        rows = sources.read_csv(sources.text_of(raw, where, "GPQA"), where, COLUMNS, lines)
    if not rows:
        raise DatasetError(f"{where} holds no GPQA rows")
    sources.refuse_conflicting_duplicates(rows, where, lambda r: r["Question"], lambda r: r["Correct Answer"], lines)
    rows = [{k: r[k] for k in COLUMNS} for r in rows]
    return Dataset(rows=rows, source=where, sha256=sources.content_hash(rows, COLUMNS), canonical=None)


class GPQA(ChatTask):
    name = "gpqa_diamond"
    upstream = "openai/simple-evals gpqa_eval.py @ ee3b0318d8d1d9d72755a4120879be65f7c07e9e"

    def __init__(self, data: Dataset, recipe: RecipeConfig):
        n = zero_shot_questions(recipe, RECIPES, "GPQA", len(data.rows))
        repeats = DEFAULT_REPEATS if recipe.repeats is None else recipe.repeats
        if repeats < 1:
            raise DatasetError("task.repeats must be >= 1")
        self.recipe = RecipeConfig(name=recipe.name, num_questions=n, num_shots=0, repeats=repeats,
                                   max_new_tokens=recipe.max_new_tokens or MAX_NEW_TOKENS)
        self.num_questions, self.repeats = n, repeats
        self.data = data
        rng = random.Random(0)
        rows = list(range(len(data.rows)))
        if recipe.num_questions is not None:
            rows = rng.sample(rows, n)
        self._items: list[Item] = []
        for k in range(repeats):
            for r in rows:
                perm = rng.sample(range(4), 4)
                self._items.append(self.item(r, k, perm))
        self._items.sort(key=lambda it: it.index)  # sent question by question, each question's repeats together

    def item(self, row: int, repeat: int, permutation: list[int]) -> Item:
        r = self.data.rows[row]
        choices = [r["Correct Answer"], r["Incorrect Answer 1"], r["Incorrect Answer 2"], r["Incorrect Answer 3"]]
        choices = [choices[i] for i in permutation]
        correct = "ABCD"[choices.index(r["Correct Answer"])]
        return Item(index=row * (self.recipe.repeats or 1) + repeat, prompt=format_question(r["Question"], *choices),
                    label=correct, row=row)

    def grade(self, output: str, item: Item) -> Scored:
        pred = extract_first(ANSWER_PATTERN_MULTICHOICE, output)
        return Scored(pred, 1.0 if pred == item.label else 0.0, pred is None)

    def describe(self) -> EvalMeta:
        meta = super().describe()
        meta["num_questions"], meta["repeats"] = self.num_questions, self.repeats
        return meta
