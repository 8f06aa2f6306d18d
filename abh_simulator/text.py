"""The texts the simulated engine writes: GSM8K-style rationales, right or wrong, and what follows them.

A right answer is the dataset's own rationale ending in ``#### N``; a wrong one keeps the rationale but ends
in a plausible wrong number; an "invalid" one holds no digit. Like a base model, the engine then runs on into
hallucinated ``Question: ...`` blocks (which SGLang's stop string ``"Question"`` trims) before EOS.
"""

from __future__ import annotations

import hashlib
import random
import re

#: Hallucinated ``Question: ...`` blocks a "base model" writes after its answer before it emits EOS.
CONTINUATION_BLOCKS = 3
INVALID_TEXT = " I am not sure how to work this out from the information given."

_ANNOT = re.compile(r"<<[^>]*>>")


def strip_annotations(answer: str) -> str:
    """GSM8K answers without their ``<<calculator>>`` annotations."""
    return _ANNOT.sub("", answer)


def label(answer: str) -> tuple[str, int]:
    """(text after '#### ', its value as SGLang's parser reads it: last digit run, commas removed)."""
    text = answer.split("####")[-1].strip()
    digits = re.findall(r"\d+", text.replace(",", ""))
    return text, int(digits[-1]) if digits else 0


def rationale_lines(answer: str) -> list[str]:
    # "Question" would hit SGLang's stop string mid-answer (test row 138 starts "Questions Mark ...").
    lines = [ln.strip().replace("Question", "question") for ln in strip_annotations(answer).split("\n")]
    return [ln for ln in lines if ln and not ln.startswith("####")]


def wrong_number(label_value: int, key: str) -> int:
    """A plausible wrong answer (off by a little, or doubled), deterministic in ``key``."""
    rng = random.Random(f"abh-sim/wrong/{key}")
    off = rng.choice([-10, -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 10])
    if rng.random() < 0.25 and label_value > 1:
        off = label_value  # a doubled answer: a classic slip
    w = label_value + off
    if w < 0 or w == label_value:
        w = label_value + abs(off)
    return w


def answer_text(answer: str, correct: bool, invalid: bool, key: str) -> str:
    """The answer (without continuation) to a question whose dataset answer is ``answer``."""
    if invalid:
        return INVALID_TEXT
    label_text, label_value = label(answer)
    lines = rationale_lines(answer)
    if correct:
        return " " + "\n".join([*lines, f"#### {label_text}"])
    w = wrong_number(label_value, key)
    body = lines[:-1] if len(lines) > 1 else []
    return " " + "\n".join([*body, f"So the answer is {w}.", f"#### {w}"])


def unknown_text(run_seed: int, prompt: str) -> str:
    """The answer to a prompt whose question the engine does not know: a random (wrong) number."""
    h = hashlib.sha256(f"{run_seed}/{prompt}".encode()).digest()
    w = int.from_bytes(h[:4], "little") % 1000
    return f" Let me think step by step.\nThe result is {w}.\n#### {w}"


def continuation_block(question: str, answer: str) -> str:
    """One hallucinated next ``Question: ...`` block, as a base model writes after its answer."""
    return "\n\nQuestion: " + question + "\nAnswer: " + strip_annotations(answer)
