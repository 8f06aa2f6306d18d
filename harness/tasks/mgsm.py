"""MGSM-en: the English split of MGSM, as openai/simple-evals and SGLang's run_eval ask and grade it.

Recipe ``simple_evals``: ``openai/simple-evals mgsm_eval.py @ ee3b0318d8d1d9d72755a4120879be65f7c07e9e`` (=
``sglang==0.5.23 python/sglang/test/simple_eval_mgsm.py``, what SGLang's accuracy CI runs): the English
instruction with the question as one chat message, upstream's ``parse_answer`` and ``score_mgsm``;
``max_tokens`` 2048, temperature 0, ``top_p`` 1.0, all 250 examples.

MGSM's English inputs are GSM8K test rows 0..249 byte for byte and its targets their final answers (checked
against ``google-research/url-nlp mgsm/mgsm_en.tsv`` @ 452a21ad3dae5668c06ceeac21ff073e1e40f9be, CC BY 4.0),
so by default the rows are made from the embedded GSM8K test set; ``task.data_path`` = an ``mgsm_en.tsv``
(``question<TAB>target``, no header) reads another copy.
"""

from __future__ import annotations

import re

from harness.tasks import gsm8k, sources
from harness.tasks.interface import (
    ChatTask,
    Dataset,
    DatasetError,
    Item,
    RecipeConfig,
    Scored,
    zero_shot_questions,
)

RECIPES = ("simple_evals",)
ROWS = 250
COLUMNS = ("inputs", "targets")
MAX_NEW_TOKENS = 2048
INSTRUCTION_EN = """Solve this math problem. Give the reasoning steps before giving the final answer on the last line by itself in the format of "Answer:". Do not add anything other than the integer answer after "Answer:".

{input}"""
ANSWER_PREFIX_EN = "Answer"
#: content hash of the 250 rows made from the embedded GSM8K test set (= url-nlp's mgsm_en.tsv)
CANONICAL_HASH = "f527807422308081947af5f9501464dab0f908ef3519c6697fe5f3198a8a07d0"


def parse_answer(answer: str, answer_prefix: str = ANSWER_PREFIX_EN) -> str:
    if answer_prefix not in answer:
        return ""
    answer_text = answer.split(answer_prefix)[-1].strip()
    numbers = re.findall(r"\d+\.?\d*", answer_text.replace(",", ""))
    return numbers[-1].rstrip(".") if numbers else ""


def score_mgsm(target: str, prediction: str) -> bool:
    if "." in prediction:
        prediction = prediction.rstrip("0").rstrip(".")
    return target.replace(",", "") == prediction.replace(",", "")


def from_gsm8k(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """MGSM-en's rows from GSM8K's test rows 0..249: the question, and the text after ``####`` as the target."""
    return [{"inputs": r["question"], "targets": r["answer"].split("####")[-1].strip()} for r in rows[:ROWS]]


def load(data_path: str | None) -> Dataset:
    spec = str(data_path or "")
    lines: list[int] | None = None
    if not spec:
        rows, where = from_gsm8k(gsm8k.read_embedded_test()), f"{gsm8k.EMBEDDED_TEST} (rows 0..{ROWS - 1})"
    else:
        raw, where = sources.read_bytes(spec, "MGSM")
        rows, lines = [], []
        for lineno, line in enumerate(sources.text_of(raw, where, "MGSM").splitlines(), 1):
            line = line.strip()  # as mgsm_eval.py's get_lang_examples
            if not line:
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise DatasetError(f"{where}:{lineno}: want 'question<TAB>target', found {len(parts)} fields")
            if "." in parts[1]:
                raise DatasetError(f"{where}:{lineno}: target {parts[1]!r} contains a decimal point")
            rows.append({"inputs": parts[0], "targets": parts[1]})
            lines.append(lineno)
    if not rows:
        raise DatasetError(f"{where} holds no MGSM rows")
    sources.refuse_conflicting_duplicates(rows, where, lambda r: r["inputs"], lambda r: r["targets"], lines)
    digest = sources.content_hash(rows, COLUMNS)
    return Dataset(rows=rows, source=where, sha256=digest, canonical=digest == CANONICAL_HASH)


class MGSM(ChatTask):
    name = "mgsm_en"
    upstream = "openai/simple-evals mgsm_eval.py @ ee3b0318d8d1d9d72755a4120879be65f7c07e9e"

    def __init__(self, data: Dataset, recipe: RecipeConfig):
        n = zero_shot_questions(recipe, RECIPES, "MGSM", len(data.rows))
        self.recipe = RecipeConfig(name=recipe.name, num_questions=n, num_shots=0,
                                   max_new_tokens=recipe.max_new_tokens or MAX_NEW_TOKENS)
        self.data = data
        self._items = [Item(index=i, prompt=INSTRUCTION_EN.format(input=data.rows[i]["inputs"]),
                            label=data.rows[i]["targets"], row=i) for i in range(n)]

    def grade(self, output: str, item: Item) -> Scored:
        pred = parse_answer(output)
        return Scored(pred, 1.0 if score_mgsm(str(item.label), pred) else 0.0, pred == "")
