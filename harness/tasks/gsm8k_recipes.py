"""The GSM8K recipes SGLang's and vLLM's maintainers run besides ``bench_sglang.py`` (:mod:`harness.tasks.gsm8k`),
each as its upstream file has it: prompts, shots, sampling, parser and equivalence.
"""

from __future__ import annotations

import random
import re
from typing import Any

from harness.tasks.gsm8k import BASE_STOP, GSM8K, INVALID, few_shot_block, last_literal, one_example
from harness.tasks.interface import Dataset, DatasetError, Item, SamplingParams, Scored
from harness.tasks.mathgrade import math_equal, require_math_verify, search_boxed


class SimpleEvalGSM8K(GSM8K):
    """``sglang==0.5.23 python/sglang/test/simple_eval_mixed_prefix_gsm8k.py`` (``GSM8KEval``) through
    ``python/sglang/test/run_eval.py`` (completion mode, ``--api completion``; also its chat and generate modes).
    Shots are test rows ``0..k-1`` and the evaluated questions the rows after them (``all_lines[num_shots:]``), so
    none is leaked; the parser keeps sign and decimals and an answer is right when it ``==`` the label
    (``160.0 == 160``); sampling as ``run_eval_once``."""

    upstream = ("sglang==0.5.23 python/sglang/test/simple_eval_mixed_prefix_gsm8k.py (GSM8KEval) via "
                "python/sglang/test/run_eval.py")
    apis = ("openai", "chat", "sglang")
    DEFAULTS = (5, 2048)
    STOPS = tuple(BASE_STOP)

    def default_questions(self, test: Dataset, shots: int) -> int:
        return max(1, len(test.rows) - shots)

    def build(self, test: Dataset, train: Dataset | None, n: int, k: int) -> None:
        if k > len(test.rows):
            raise DatasetError(f"{k} shots asked for, only {len(test.rows)} rows")
        self.few_shot = few_shot_block(test.rows[:k])
        rest = len(test.rows) - k
        if n > rest:
            raise DatasetError(f"{n} questions asked for; the test set has {rest} after its {k} shots")
        self.questions = [self.question(i, one_example(test.rows[i], False),
                                        simple_eval_answer_value(test.rows[i]["answer"]), self.few_shot)
                          for i in range(k, k + n)]

    def sampling_params(self, chat: bool = False, max_new_tokens: int | None = None) -> SamplingParams:
        out: SamplingParams = {"max_new_tokens": self.new_tokens(max_new_tokens), "temperature": 0.0,
                               "top_p": 1.0}
        if not chat:
            out["stop"] = self.stop()
        return out

    def grade(self, output: str, item: Item) -> Scored:
        pred = simple_eval_answer_value(output)
        return Scored(pred, 1.0 if pred == item.label else 0.0, pred == INVALID)


def simple_eval_answer_value(answer_str: str) -> Any:
    """run_eval's ``get_answer_value``: commas dropped, the last ``-?\\d+\\.?\\d*``, ``ast.literal_eval``."""
    return last_literal(answer_str, r"-?\d+\.?\d*")


class VllmGSM8K(GSM8K):
    """``vllm-project/vllm tests/evals/gsm8k/gsm8k_eval.py @ 03e09605209f4dc33df2e3be7b24c05f0e3142cb``: shots
    are train rows ``0..k-1`` (no randomness, so abh ships the first train rows), questions test rows ``0..n-1``,
    SGLang's parser; sent as completions, its default."""

    upstream = "vllm-project/vllm tests/evals/gsm8k/gsm8k_eval.py @ 03e09605209f4dc33df2e3be7b24c05f0e3142cb"
    apis = ("openai", "chat")
    DEFAULTS = (5, 256)
    STOPS = tuple(BASE_STOP)

    def sampling_params(self, chat: bool = False, max_new_tokens: int | None = None) -> SamplingParams:
        return {"max_new_tokens": self.new_tokens(max_new_tokens), "stop": self.stop(), "temperature": 0.0,
                "openai_extras": {"seed": 42}}


#: lm-eval's ``gsm8k.yaml`` (version 3.0): filters, metric and generation settings.
LM_EVAL_STRICT = r"#### (\-?[0-9\.\,]+)"
LM_EVAL_FLEXIBLE = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"
LM_EVAL_IGNORE = (",", "\\$", "(?s).*#### ", "\\.$")
LM_EVAL_UNTIL = ["Question:", "</s>", "<|im_end|>"]
LM_EVAL_FALLBACK = "[invalid]"
#: ``fewshot_random_seed`` (lm-eval's DEFAULT_OTHER_SEED) and the seed ``local-completions`` sends
LM_EVAL_SEED = 1234


def lm_eval_filter(response: str, pattern: str, group_select: int) -> str:
    """``lm_eval/filters/extraction.py`` ``RegexFilter`` then ``take_first`` on one response."""
    match: Any = re.findall(pattern, response)
    if not match:
        return LM_EVAL_FALLBACK
    match = match[group_select]
    if isinstance(match, tuple):
        kept = [m for m in match if m]
        match = kept[0] if kept else LM_EVAL_FALLBACK
    return str(match).strip()


def lm_eval_normalise(text: str) -> str:
    """``exact_match`` with the yaml's ``regexes_to_ignore`` (in order) and ``ignore_case``."""
    for pattern in LM_EVAL_IGNORE:
        text = re.sub(pattern, "", text)
    return text.lower()


class LmEvalGSM8K(GSM8K):
    """``lm-eval==0.4.13 lm_eval/tasks/gsm8k/gsm8k.yaml`` (``gsm8k``, version 3.0), as ``lm_eval --model
    local-completions`` runs it; ``lm_eval_strict`` scores the ``strict-match`` filter, ``lm_eval_flexible`` the
    ``flexible-extract`` one. Shots: one ``random.Random(1234)`` (``fewshot_random_seed``) shared by the questions
    in order, ``rng.sample(train, k)`` per question (``lm_eval/api/samplers.py``), so it needs the whole train
    split. Grading: the filter's regex, then ``exact_match`` against the whole answer."""

    upstream = "lm-eval==0.4.13 lm_eval/tasks/gsm8k/gsm8k.yaml (+ api/samplers.py, filters/extraction.py, api/metrics.py)"
    apis = ("openai",)
    DEFAULTS = (5, 256)
    STOPS = tuple(LM_EVAL_UNTIL)

    def build(self, test: Dataset, train: Dataset | None, n: int, k: int) -> None:
        assert train is not None
        if k > len(train.rows):
            raise DatasetError(f"{k} shots asked for, only {len(train.rows)} train rows")
        if n > len(test.rows):
            raise DatasetError(f"{n} questions asked for; the test set has {len(test.rows)}")
        rng = random.Random(LM_EVAL_SEED)
        self.few_shot = ""  # every question has its own shots: no shared prefix to warm up
        self.questions = []
        for i in range(n):
            shots = rng.sample(train.rows, k)
            prompt = "".join(one_example(r, True) + "\n\n" for r in shots) + one_example(test.rows[i], False)
            self.questions.append(self.question(i, prompt, test.rows[i]["answer"]))

    def sampling_params(self, chat: bool = False, max_new_tokens: int | None = None) -> SamplingParams:
        return {"max_new_tokens": self.new_tokens(max_new_tokens),
                "temperature": 0.0, "stop": self.stop(), "openai_extras": {"seed": LM_EVAL_SEED}}

    def grade(self, output: str, item: Item) -> Scored:
        strict = self.recipe.name == "lm_eval_strict"
        pred = lm_eval_filter(output, LM_EVAL_STRICT if strict else LM_EVAL_FLEXIBLE, 0 if strict else -1)
        right = lm_eval_normalise(pred) == lm_eval_normalise(str(item.label))
        return Scored(pred, 1.0 if right else 0.0, pred == LM_EVAL_FALLBACK)


SGL_EVAL_INSTRUCTION = ("Solve the following math problem. Make sure to put the answer (and only answer) inside "
                        "\\boxed{}.\n\n")


def sgl_eval_expected(answer: str) -> int | float:
    """``nemo_skills/dataset/gsm8k/prepare.py``: the number after ``####``, commas dropped, an int when whole."""
    value = float(answer.split("####")[1].replace(",", ""))
    return int(value) if value.is_integer() else value


class SglEvalChatGSM8K(GSM8K):
    """``sgl-eval==0.1.3`` ``gsm8k`` (what ``sgl-eval run gsm8k`` and sglang's ``run_sgl_eval`` run; SGLang's
    nightly chat GSM8K): zero-shot chat, one user message (``prompts/math.yaml``, no system message), all 1319
    rows; the answer is the content of the last ``\\boxed{}`` and is graded by NeMo-Skills' ``math_equal``
    (math-verify) against the expected number (:mod:`harness.tasks.mathgrade`); sampling as ``sampler.py``'s
    ``GenConfig``, ``max_tokens`` as ``run_sgl_eval``'s."""

    upstream = ("sgl-eval==0.1.3 sgl_eval/evals/_registry.py (gsm8k), _vendored/nemo_skills/prompts/math.yaml, "
                "dataset/gsm8k/prepare.py, math_grader.py, sampler.py")
    apis = ("chat",)
    DEFAULTS = (0, 2048)
    STOPS = ()

    def build(self, test: Dataset, train: Dataset | None, n: int, k: int) -> None:
        require_math_verify()
        if k:
            raise DatasetError("the sgl_eval_chat recipe is zero-shot: num_shots must be 0")
        if n > len(test.rows):
            raise DatasetError(f"{n} questions asked for; the test set has {len(test.rows)}")
        self.few_shot = ""
        self.questions = [self.question(i, test.rows[i]["question"], sgl_eval_expected(test.rows[i]["answer"]),
                                        SGL_EVAL_INSTRUCTION) for i in range(n)]

    def sampling_params(self, chat: bool = True, max_new_tokens: int | None = None) -> SamplingParams:
        return {"max_new_tokens": self.new_tokens(max_new_tokens),
                "temperature": 0.0, "top_p": 0.95, "openai_extras": {"min_p": 0.0, "repetition_penalty": 1.0}}

    def grade(self, output: str, item: Item) -> Scored:
        pred = search_boxed(output)
        return Scored(pred, 1.0 if math_equal(item.label, pred) else 0.0, pred is None)


#: The class of each recipe of this module (the others are :class:`~harness.tasks.gsm8k.GSM8K` itself).
RECIPE_CLASSES: dict[str, type[GSM8K]] = {
    "simple_eval": SimpleEvalGSM8K, "vllm": VllmGSM8K, "lm_eval_strict": LmEvalGSM8K,
    "lm_eval_flexible": LmEvalGSM8K, "sgl_eval_chat": SglEvalChatGSM8K}
