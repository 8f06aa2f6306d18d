"""What the simulated engine knows of tasks other than GSM8K's few-shot prompts: an answer key, written by the run
that launches it, mapping each prompt (its sha256; for chat, the user message's) to the task, the question's
position and a right and a wrong answer text, each checked with the task's own grader when the key is made.

The simulator parses GSM8K's ``Question: ...\\nAnswer:`` prompts itself (:func:`harness.tasks.gsm8k.question_from_prompt`);
the key is for the prompts it cannot parse (MMLU, GPQA, MGSM, the zero-shot chat GSM8K): with it, a multi-task run
on the simulator gets answers that are right or wrong as the arm's ability says, per task.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.results.fileio import atomic_write_text
from harness.tasks.interface import Item, Task


#: the tasks the simulator answers from the key (the others' prompts it parses itself)
def needs_key(task: Task) -> bool:
    return not (task.name == "gsm8k" and task.recipe.name != "sgl_eval_chat")


_TEMPLATES = ("Let me work through it step by step.\nAnswer: {}",
              "Let me work through it step by step. The final answer is \\boxed{{{}}}.",
              "Let me work through it step by step.\n#### {}")


def _other(label: Any) -> str | None:
    """A wrong label of the same kind: the next letter, or the number plus one."""
    text = str(label)
    if len(text) == 1 and text.isalpha():
        return "ABCD"[("ABCD".index(text) + 1) % 4] if text in "ABCD" else "A"
    try:
        v = float(text.replace(",", ""))
    except ValueError:
        return None
    return str(int(v) + 1) if v.is_integer() else str(v + 1)


def _text(task: Task, item: Item, label: str | None, want: float) -> str | None:
    if label is None:
        return None
    for template in _TEMPLATES:
        text = template.format(label)
        graded = task.grade(text, item)
        if graded.score == want and not graded.invalid:
            return text
    return None


def build(tasks: Sequence[tuple[str, Task]]) -> dict[str, Any]:
    """The key of ``tasks`` (each: its key in the run and the built task)."""
    out: dict[str, Any] = {"tasks": {}}
    for key, task in tasks:
        if not needs_key(task):
            continue
        entries: dict[str, list[Any]] = {}
        for pos, item in enumerate(task.items):
            right = _text(task, item, str(item.label), 1.0)
            wrong = _text(task, item, _other(item.label), 0.0)
            if right is not None and wrong is not None:
                entries[item.prompt_sha256] = [pos, right, wrong]
        out["tasks"][key or task.name] = {"name": task.name, "recipe": task.recipe.name, "n": len(task.items),
                                          "items": entries}
    return out


def write(path: Path, tasks: Sequence[tuple[str, Task]], dry_run: bool = False) -> Path | None:
    """Write the key of ``tasks`` to ``path`` (a dry run only names it); None (nothing written) when no task needs
    one."""
    if not any(needs_key(task) for _, task in tasks):
        return None
    if not dry_run:
        atomic_write_text(path, json.dumps(build(tasks), ensure_ascii=False))
    return path


@dataclass(frozen=True)
class Entry:
    task: str
    position: int
    n: int
    right: str
    wrong: str


class AnswerKey:
    """The key as the simulator reads it (``--answer-key``)."""

    def __init__(self, path: str):
        doc = json.loads(Path(path).read_text(encoding="utf-8")) if path else {"tasks": {}}
        self.by_sha: dict[str, Entry] = {}
        self.sizes: dict[str, int] = {}
        for key, t in doc.get("tasks", {}).items():
            self.sizes[key] = int(t["n"])
            for sha, (pos, right, wrong) in t["items"].items():
                self.by_sha[sha] = Entry(key, int(pos), int(t["n"]), str(right), str(wrong))

    def lookup(self, prompt_sha256: str) -> Entry | None:
        return self.by_sha.get(prompt_sha256)
