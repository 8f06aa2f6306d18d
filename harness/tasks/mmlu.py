"""MMLU (Hendrycks et al.), as SGLang's ``run_eval --eval-name mmlu`` and openai/simple-evals run it.

* ``sglang`` (default): ``sglang<=0.5.18 python/sglang/test/simple_eval_mmlu.py`` with ``simple_eval_common.py``
  (what SGLang's accuracy CI ran, ``test/registered/eval/test_eval_accuracy_large.py``: 5000 examples):
  simple-evals' prompt as one chat message, the first match of ``SGLANG_ANSWER_PATTERN`` on the raw response.
* ``simple_evals``: ``openai/simple-evals mmlu_eval.py @ ee3b0318d8d1d9d72755a4120879be65f7c07e9e``: the same
  prompt; the response normalised (``normalize_response``), then the multilingual answer regexes in turn.

Both: ``num_questions`` unset = every row; set = ``random.Random(0).sample(rows, n)`` (upstream's
``num_examples``); a right answer is the extracted letter ``==`` the row's ``Answer``; the report breaks
accuracy down by subject. Data (MIT) is not embedded: simple-evals' ``mmlu.csv`` (with its header), a
directory of Hendrycks' ``*_test.csv`` files (no header; the subject is the file name), or ``hf:cais/mmlu``
(config ``all``, split ``test``).
"""

from __future__ import annotations

import random
from pathlib import Path
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
from harness.tasks.multichoice import (
    SGLANG_ANSWER_PATTERN,
    extract_first,
    extract_simple_evals_mmlu,
    format_question,
)

RECIPES = ("sglang", "simple_evals")
COLUMNS = ("Question", "A", "B", "C", "D", "Answer", "Subject")
LETTERS = "ABCD"
#: the full test split's size (14042 rows)
FULL_ROWS = 14042
MAX_NEW_TOKENS = 2048

#: simple-evals' ``subject2category`` (mmlu_eval.py): the report's category breakdown
SUBJECT_CATEGORY = {
    "abstract_algebra": "stem", "anatomy": "other", "astronomy": "stem", "business_ethics": "other",
    "clinical_knowledge": "other", "college_biology": "stem", "college_chemistry": "stem",
    "college_computer_science": "stem", "college_mathematics": "stem", "college_medicine": "other",
    "college_physics": "stem", "computer_security": "stem", "conceptual_physics": "stem",
    "econometrics": "social_sciences", "electrical_engineering": "stem", "elementary_mathematics": "stem",
    "formal_logic": "humanities", "global_facts": "other", "high_school_biology": "stem",
    "high_school_chemistry": "stem", "high_school_computer_science": "stem",
    "high_school_european_history": "humanities", "high_school_geography": "social_sciences",
    "high_school_government_and_politics": "social_sciences", "high_school_macroeconomics": "social_sciences",
    "high_school_mathematics": "stem", "high_school_microeconomics": "social_sciences",
    "high_school_physics": "stem", "high_school_psychology": "social_sciences", "high_school_statistics": "stem",
    "high_school_us_history": "humanities", "high_school_world_history": "humanities", "human_aging": "other",
    "human_sexuality": "social_sciences", "international_law": "humanities", "jurisprudence": "humanities",
    "logical_fallacies": "humanities", "machine_learning": "stem", "management": "other", "marketing": "other",
    "medical_genetics": "other", "miscellaneous": "other", "moral_disputes": "humanities",
    "moral_scenarios": "humanities", "nutrition": "other", "philosophy": "humanities", "prehistory": "humanities",
    "professional_accounting": "other", "professional_law": "humanities", "professional_medicine": "other",
    "professional_psychology": "social_sciences", "public_relations": "social_sciences",
    "security_studies": "social_sciences", "sociology": "social_sciences", "us_foreign_policy": "social_sciences",
    "virology": "other", "world_religions": "humanities",
}

NO_DATA = ("MMLU is not shipped with abh: set task.data_path (abh eval/ab: --data) to simple-evals' mmlu.csv "
           "(a path or its URL), a directory of Hendrycks' *_test.csv files, or hf:cais/mmlu")


def _check(rows: list[dict[str, str]], where: str) -> None:
    for i, r in enumerate(rows):
        if r.get("Answer") not in tuple(LETTERS):
            raise DatasetError(f"{where}: row {i}: Answer must be one of A, B, C, D, not {r.get('Answer')!r}")


def _from_hf(r: dict[str, Any]) -> dict[str, str]:  # pragma: no cover - needs the Hugging Face hub
    choices = list(r["choices"])
    return {"Question": str(r["question"]), "A": str(choices[0]), "B": str(choices[1]), "C": str(choices[2]),
            "D": str(choices[3]), "Answer": LETTERS[int(r["answer"])], "Subject": str(r["subject"])}


def load(data_path: str | None) -> Dataset:
    """The MMLU test rows (see the module docstring for the sources); DatasetError when none is given."""
    spec = str(data_path or "")
    if not spec:
        raise DatasetError(NO_DATA)
    lines: list[int] | None = None
    if sources.is_hf(spec):
        rows, where = sources.load_hf(spec, "test", "all", _from_hf, "MMLU"), spec + "/test"
    elif not sources.is_url(spec) and Path(spec).expanduser().is_dir():
        folder = Path(spec).expanduser()
        files = sorted(folder.glob("*_test.csv")) or sorted((folder / "test").glob("*_test.csv"))
        if not files:
            raise DatasetError(f"{folder}: no *_test.csv files (Hendrycks' data/test/); {NO_DATA}")
        rows = []
        for f in files:
            raw, where = sources.read_bytes(str(f), "MMLU")
            subject = f.name[:-len("_test.csv")]
            for r in sources.read_headerless_csv(sources.text_of(raw, where, "MMLU"), where, COLUMNS[:6]):
                rows.append({**r, "Subject": subject})
        where = str(folder.resolve())
    else:
        raw, where = sources.read_bytes(spec, "MMLU")
        lines = []
        rows = sources.read_csv(sources.text_of(raw, where, "MMLU"), where, COLUMNS, lines)
    if not rows:
        raise DatasetError(f"{where} holds no MMLU rows")
    _check(rows, where)
    # a question is its text and its choices (one text may come with other choices, and another answer)
    sources.refuse_conflicting_duplicates(rows, where, lambda r: tuple(r[c] for c in LETTERS_COLS),
                                          lambda r: r["Answer"], lines)
    rows = [{k: r[k] for k in COLUMNS} for r in rows]
    return Dataset(rows=rows, source=where, sha256=sources.content_hash(rows, COLUMNS), canonical=None)


class MMLU(ChatTask):
    """One MMLU recipe over loaded rows (see the module docstring)."""

    name = "mmlu"

    def __init__(self, data: Dataset, recipe: RecipeConfig):
        n = zero_shot_questions(recipe, RECIPES, "MMLU", len(data.rows), plural=True)
        self.recipe = RecipeConfig(name=recipe.name, num_questions=n, num_shots=0,
                                   max_new_tokens=recipe.max_new_tokens or MAX_NEW_TOKENS)
        self.data = data
        self.upstream = ("openai/simple-evals mmlu_eval.py @ ee3b0318d8d1d9d72755a4120879be65f7c07e9e"
                         if recipe.name == "simple_evals" else
                         "sglang<=0.5.18 python/sglang/test/simple_eval_mmlu.py + simple_eval_common.py")
        order = list(range(len(data.rows)))
        if recipe.num_questions is not None:
            order = random.Random(0).sample(order, n)
        self._items = [Item(index=i, prompt=format_question(*(data.rows[i][c] for c in LETTERS_COLS)),
                            label=data.rows[i]["Answer"], row=i, group=data.rows[i]["Subject"]) for i in order]

    def grade(self, output: str, item: Item) -> Scored:
        pred = (extract_simple_evals_mmlu(output) if self.recipe.name == "simple_evals"
                else extract_first(SGLANG_ANSWER_PATTERN, output))
        return Scored(pred, 1.0 if pred == item.label else 0.0, pred is None)

    def groups(self) -> list[str]:
        return [str(it.group) for it in self._items]

    def describe(self) -> EvalMeta:
        meta = super().describe()
        meta["groups"] = self.groups()
        return meta


LETTERS_COLS = ("Question", "A", "B", "C", "D")
