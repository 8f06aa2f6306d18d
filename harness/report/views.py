"""The rows of the comparison page and of ``comparison.md`` as :mod:`harness.report.data` builds them: one
TypedDict per shape the templates read. A field typed ``JSON`` is a stored value passed through as it was
read.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from harness.report.texts import Split
from harness.results.records import JSON


# ------------------------------------------------------------------------------------------ key-value tables
class TextRow(TypedDict):
    """A key and its value as display text (an environment variable, another arm's value of a difference)."""

    key: str
    text: str


class KvRow(TextRow):
    """A row of a key-value table (``kvtable``): ``block`` when the text is shown preformatted (JSON, several
    lines or long)."""

    block: bool


# ------------------------------------------------------------------------------------------ arms
class CheckRow(TypedDict):
    """A side check of an arm as recorded in the manifest (``passed`` None: not run)."""

    name: str
    kind: str
    passed: bool | None
    expected: str
    found: str
    evidence: str
    evidence_block: bool
    #: the check's other recorded fields
    extra: list[KvRow]


class InstanceRow(TypedDict):
    """A server instance (launch) of an arm."""

    id: str
    url: str
    probe: str


class CommandLine(TypedDict):
    """One line of an arm's server command; ``differs`` when the other arm's command has no such line."""

    text: str
    differs: bool


class ArmView(TypedDict):
    """An arm of a run as its manifest recorded it: name, side of the change, command, environment, checks."""

    role: str
    #: the arm's key in the manifest's ``arms``
    key: str
    name: str
    side: JSON
    #: the server command in shell form, environment first, secrets redacted ("" when none was recorded)
    command: str
    env: list[TextRow]
    launch_other: list[KvRow]
    static_checks: list[CheckRow]
    live_checks: list[CheckRow]
    instances: list[InstanceRow]
    extra: list[KvRow]
    command_lines: list[CommandLine]


class DiffRow(TypedDict):
    """One recorded difference between the arms' launches: A's and B's values, and whether it was allowed."""

    key: str
    a: str
    b: str
    #: values of other arms, and the difference's other recorded fields
    others: list[TextRow]
    allowed: bool


class DiffView(TypedDict):
    """The manifest's ``arm_diff``: its rows and one sentence (``ok``: no difference beyond the allowed ones)."""

    rows: list[DiffRow]
    sentence: str
    ok: bool
    allowed: list[str]


# ------------------------------------------------------------------------------------------ runs
class ServerView(TypedDict):
    """Which server answered an eval, as its eval.json recorded it."""

    url: str | None
    build: str | None
    version: str | None
    model_path: str | None


class RunRow(TypedDict):
    """One eval of the comparison: its summary's counts, latency and throughput, where it is stored."""

    role: str
    label: str
    repeat: int
    #: the eval directory, relative to the report's directory where it is below it
    dir: str
    error: str | None
    accuracy: float | None
    correct: int | None
    answered: int | None
    n: int | None
    invalid: int | None
    errors: int | None
    latency_s: float | None
    throughput: float | None
    output_tokens: int | None
    p50: float | None
    p90: float | None
    complete: bool | None
    resumed: bool | None
    server: ServerView


# ------------------------------------------------------------------------------------------ questions
class Answer(TypedDict):
    """One repeat's answer to a question (``missing``: no row in its samples.jsonl)."""

    repeat: int
    missing: bool
    correct: bool | None
    #: the parsed answer as shown ("invalid", or "—" for none)
    pred: str
    #: the output, cut to ``data.MAX_OUTPUT_CHARS`` (``cut``: it was longer)
    output: str
    cut: bool
    finish: str | None
    error: str | None
    #: the answer shown first of each arm: its output split where it parts from the other arm's (None: they do
    #: not part)
    split: NotRequired[Split | None]


class FlipRow(TypedDict):
    """A flipped question: its text and label, each arm's score over its repeats, and every repeat's answer
    (the repeat shown first is one where the arms disagree)."""

    index: int
    #: "b" (only B right), "a" (only A right) or "mixed"
    cat: str
    question: str
    label: int | float | str
    score_a: str
    score_b: str
    mean_a: float
    mean_b: float
    a: list[Answer]
    b: list[Answer]


class BrowserArm(TypedDict):
    """An arm's answers to one question in the question browser: parsed answers and correctness per repeat,
    repeat 1's output (cut)."""

    p: list[str]
    ok: list[bool | None]
    o: str


class QuestionRow(TypedDict):
    """A question of the question browser (short keys: the page embeds every question as JSON): index, outcome
    (``data.OUTCOMES``), question text, label, and each arm's answers."""

    i: int
    c: str
    q: str
    l: int | float | str  # noqa: E741 - a key of the embedded JSON
    a: BrowserArm
    b: BrowserArm
