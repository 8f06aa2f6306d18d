"""On-disk results of one eval: a versioned, typed, crash-safe and resumable schema.

One directory per eval::

    eval.json       what was asked (task, recipe, dataset hash, question indices, target); written first
    prompts.jsonl   {"index", "prompt_sha256", "prompt"}: the exact text of every prompt sent
    samples.jsonl   one SampleRecord per question, appended and flushed as each answer arrives
    summary.json    SummaryRecord, written atomically at the end (and after a resume)

Rerunning into the same directory resumes: questions with an answered row are kept, rows that carry a
request error (and a torn last line from a crash) are dropped and sent again. The file is rewritten
atomically before appending, so every question appears exactly once.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1

SAMPLES = "samples.jsonl"
PROMPTS = "prompts.jsonl"
SUMMARY = "summary.json"
META = "eval.json"


class StoreError(RuntimeError):
    """The eval directory cannot be used (e.g. it holds an eval of a different question set)."""


@dataclass
class SampleRecord:
    index: int
    prompt_sha256: str
    output: str | None
    pred: int | None
    label: int
    correct: bool | None  # None when the request failed: an error is never a wrong answer
    invalid: bool | None
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float | None
    attempts: int
    error: str | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SampleRecord:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def _describe_change(old: Any, new: Any) -> str:
    """``num_questions: 1319 -> 100`` for dicts, else the two values (shortened)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys[:4])
    if isinstance(old, list) and isinstance(new, list):
        return f"{len(old)} questions -> {len(new)} questions" if len(old) != len(new) else "other questions"
    return f"{str(old)[:40]!r} -> {str(new)[:40]!r}"


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same directory, fsync, rename: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: Path) -> Any:
    with Path(path).open(encoding="utf-8") as f:
        return json.load(f)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn (unterminated, unparsable) last line from a crash is ignored."""
    out: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return out
    with p.open(encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # torn tail
                continue
            raise StoreError(f"{p}: line {i + 1} is not valid JSON") from None
    return out


class EvalStore:
    """Append-as-you-go storage for one eval directory."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._samples_f = None
        self._prompts_f = None

    # ------------------------------------------------------------------ opening / resuming
    def open(self, meta: dict[str, Any]) -> dict[int, SampleRecord]:
        """Create or resume the eval; return the answered samples already on disk, by index.

        ``meta`` must carry ``dataset_sha256``, ``recipe`` and ``indices``; a directory holding an eval
        of different ones is refused rather than mixed.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        meta_path = self.root / META
        done: dict[int, SampleRecord] = {}
        if meta_path.exists():
            old = read_json(meta_path)
            for key in ("dataset_sha256", "recipe", "indices", "api"):
                if old.get(key) != meta.get(key):
                    raise StoreError(
                        f"{self.root} already holds an eval with a different {key} "
                        f"({_describe_change(old.get(key), meta.get(key))}); "
                        "use another output directory (or delete this one) instead of mixing results")
            wanted = set(meta["indices"])
            for row in read_jsonl(self.root / SAMPLES):
                rec = SampleRecord.from_dict(row)
                if rec.error is None and rec.index in wanted:
                    done[rec.index] = rec
            resumes = int(old.get("resumes", 0)) + (1 if done else 0)
            # Each session's target is kept: a resume on another server instance (new port) is recorded.
            sessions = [*old.get("sessions", []), {k: meta.get(k) for k in ("url", "instance", "server")}]
            meta = {**old, "resumes": resumes, "sessions": sessions}
            # Rewrite without error rows, duplicates and torn lines, then append from there.
            atomic_write_text(self.root / SAMPLES,
                              "".join(json.dumps(asdict(r), ensure_ascii=False) + "\n"
                                      for r in sorted(done.values(), key=lambda r: r.index)))
            seen_prompts = {r.get("index"): r for r in read_jsonl(self.root / PROMPTS)}
            atomic_write_text(self.root / PROMPTS,
                              "".join(json.dumps(seen_prompts[i], ensure_ascii=False) + "\n"
                                      for i in sorted(seen_prompts) if i in done))
        else:
            meta = {"schema_version": SCHEMA_VERSION, "kind": "abh.eval", "resumes": 0, **meta,
                    "sessions": [{k: meta.get(k) for k in ("url", "instance", "server")}]}
        atomic_write_json(meta_path, meta)
        self.meta = meta
        self._samples_f = (self.root / SAMPLES).open("a", encoding="utf-8")
        self._prompts_f = (self.root / PROMPTS).open("a", encoding="utf-8")
        return done

    def close(self) -> None:
        for f in (self._samples_f, self._prompts_f):
            if f is not None and not f.closed:
                f.close()
        self._samples_f = self._prompts_f = None

    def __enter__(self) -> EvalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing
    def append(self, rec: SampleRecord, prompt: str | None = None) -> None:
        """Append one sample (and its prompt) and flush, so a crash loses at most the line being written."""
        assert self._samples_f is not None, "open() first"
        if prompt is not None and self._prompts_f is not None:
            self._prompts_f.write(json.dumps({"index": rec.index, "prompt_sha256": rec.prompt_sha256,
                                              "prompt": prompt}, ensure_ascii=False) + "\n")
            self._prompts_f.flush()
        self._samples_f.write(json.dumps(asdict(rec), ensure_ascii=False) + "\n")
        self._samples_f.flush()

    def write_summary(self, summary: dict[str, Any]) -> None:
        atomic_write_json(self.root / SUMMARY, {"schema_version": SCHEMA_VERSION, "kind": "abh.eval.summary",
                                                **summary})


# ------------------------------------------------------------------------------------------ reading
def load_samples(root: str | Path) -> list[SampleRecord]:
    """All samples of an eval directory, one per index (the last row wins), sorted by index."""
    by_index: dict[int, SampleRecord] = {}
    for row in read_jsonl(Path(root) / SAMPLES):
        rec = SampleRecord.from_dict(row)
        by_index[rec.index] = rec
    return [by_index[i] for i in sorted(by_index)]


def load_eval(root: str | Path) -> tuple[dict[str, Any], list[SampleRecord], dict[str, Any] | None]:
    """(eval.json, samples, summary.json or None) of an eval directory."""
    root = Path(root)
    if not (root / META).exists():
        raise StoreError(f"{root} is not an eval directory (no {META})")
    summary = read_json(root / SUMMARY) if (root / SUMMARY).exists() else None
    return read_json(root / META), load_samples(root), summary


def summarize(samples: Iterable[SampleRecord], n_expected: int, wall_s: float) -> dict[str, Any]:
    """The summary figures of SGLang's script, with errors counted apart from wrong answers."""
    rows = list(samples)
    answered = [r for r in rows if r.error is None]
    errors = [r for r in rows if r.error is not None]
    correct = sum(1 for r in answered if r.correct)
    invalid = sum(1 for r in answered if r.invalid)
    completion = sum(int(r.completion_tokens or 0) for r in answered)
    n_ans = len(answered)
    missing = max(0, n_expected - len(rows))
    return {
        "n": n_expected,
        "answered": n_ans,
        "correct": correct,
        "invalid": invalid,
        "errors": len(errors),
        "missing": missing,
        "accuracy": (correct / n_ans) if n_ans else None,
        "invalid_rate": (invalid / n_ans) if n_ans else None,
        "error_rate": (len(errors) + missing) / n_expected if n_expected else 0.0,
        "latency_s": wall_s,
        "output_tokens": completion,
        "output_throughput": (completion / wall_s) if wall_s > 0 else None,
    }
