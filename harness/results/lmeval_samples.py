"""lm-evaluation-harness's per-document samples (``lm_eval ... --log_samples``) as abh evals.

lm-eval writes, per task, ``<output_path>/<model>/samples_<task>_<date>.jsonl``: one line per (document,
filter), ``{"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics": [names],
"doc_hash", <metric>: value, ...}`` (lm-eval 0.4.x). Every (task, filter, metric) whose values lie in [0, 1]
is one comparable task, keyed ``<task>/<filter>/<metric>``; :func:`to_eval_dir` writes it as an abh eval
directory whose questions are the documents by ``doc_id``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.results import schema
from harness.results.eval_store import EvalStore, summarize
from harness.results.fileio import StoreError
from harness.results.schema import EvalMeta, SampleRecord

#: ``samples_<task>_<date_id>.jsonl`` (date_id: ``datetime.now().isoformat()`` with ``:`` as ``-``)
_FILE = re.compile(r"^samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[\d\-.]+)\.jsonl$")


class LmEvalError(StoreError):
    """The files are not lm-eval samples abh can pair (one line says why; exit 2)."""


@dataclass
class Doc:
    doc_id: int
    doc_hash: str | None
    prompt: str
    response: str
    filtered: str
    target: str
    value: float


@dataclass
class Series:
    """One (task, filter, metric) of one samples file: a score per document."""

    task: str
    filter: str
    metric: str
    source: str
    docs: dict[int, Doc] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.task}/{self.filter}/{self.metric}"


def _first_text(v: Any) -> str:
    """The first string in lm-eval's nested ``resps`` / ``filtered_resps`` (lists of lists of strings)."""
    while isinstance(v, list) and v:
        v = v[0]
    return v if isinstance(v, str) else ("" if v is None else str(v))


def _prompt(arguments: Any) -> str:
    """``arguments.gen_args_0.arg_0`` (the context sent; a chat request's is a one-element list of JSON)."""
    try:
        arg = arguments["gen_args_0"]["arg_0"]
    except (KeyError, TypeError):
        return ""
    return _first_text(arg)


def sample_files(path: Path) -> list[Path]:
    """The samples files ``path`` names: the file, or the newest ``samples_*.jsonl`` of each task under it."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise LmEvalError(f"{path}: no such file or directory (give lm-eval's samples_<task>_<date>.jsonl, or the "
                          "directory lm-eval wrote it in)")
    newest: dict[str, tuple[str, Path]] = {}
    for p in sorted(path.rglob("samples_*.jsonl")):
        m = _FILE.match(p.name)
        task, date = (m.group("task"), m.group("date")) if m else (p.stem[len("samples_"):], "")
        if task not in newest or date > newest[task][0]:
            newest[task] = (date, p)
    if not newest:
        raise LmEvalError(f"{path} holds no lm-eval samples file (samples_<task>_<date>.jsonl; run lm_eval with "
                          "--log_samples --output_path)")
    return [p for _, p in sorted(newest.values(), key=lambda dp: dp[1].name)]


def task_of(path: Path) -> str:
    m = _FILE.match(path.name)
    return m.group("task") if m else path.stem.removeprefix("samples_")


def read(path: Path) -> list[Series]:
    """Every comparable (task, filter, metric) series of one samples file."""
    task = task_of(path)
    series: dict[tuple[str, str], Series] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise LmEvalError(f"cannot read {path}: {e}") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise LmEvalError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("doc_id"), int) or not isinstance(
                row.get("metrics"), list):
            raise LmEvalError(f"{path}:{lineno}: not an lm-eval sample (needs doc_id and metrics; write it with "
                              "lm_eval --log_samples)")
        filt = str(row.get("filter") or "none")
        for metric in row["metrics"]:
            v = row.get(metric)
            if isinstance(v, bool):
                v = float(v)
            if not isinstance(v, int | float) or not 0.0 <= float(v) <= 1.0:
                continue  # not a per-document score in [0, 1] (perplexity, bleu, ...): not comparable here
            s = series.setdefault((filt, metric), Series(task, filt, metric, str(path)))
            if row["doc_id"] in s.docs:
                raise LmEvalError(f"{path}:{lineno}: doc_id {row['doc_id']} appears twice for filter {filt}")
            s.docs[row["doc_id"]] = Doc(doc_id=row["doc_id"], doc_hash=row.get("doc_hash"),
                                        prompt=_prompt(row.get("arguments")), response=_first_text(row.get("resps")),
                                        filtered=_first_text(row.get("filtered_resps")),
                                        target=str(row.get("target", "")), value=float(v))
    if not series:
        raise LmEvalError(f"{path}: no per-document metric in [0, 1] (exact_match, acc, ...) to compare")
    return list(series.values())


def read_all(paths: Iterable[Path]) -> dict[str, Series]:
    out: dict[str, Series] = {}
    for p in paths:
        for s in read(p):
            if s.key in out:
                raise LmEvalError(f"{s.key} is in two of the given files ({out[s.key].source} and {s.source})")
            out[s.key] = s
    return out


def pair(a: dict[str, Series], b: dict[str, Series]) -> list[tuple[str, Series, Series]]:
    """The series both sides have, their documents checked to be the same (``doc_hash``)."""
    keys = [k for k in a if k in b]
    if not keys:
        raise LmEvalError(f"the two sides share no task/filter/metric (A: {', '.join(a) or 'none'}; "
                          f"B: {', '.join(b) or 'none'})")
    for k in keys:
        for doc_id in sorted(set(a[k].docs) & set(b[k].docs)):
            ha, hb = a[k].docs[doc_id].doc_hash, b[k].docs[doc_id].doc_hash
            if ha and hb and ha != hb:
                raise LmEvalError(f"refusing to compare {k}: document {doc_id} differs between the two files "
                                  f"(doc_hash {ha[:12]}... vs {hb[:12]}...): not the same data set")
    return [(k, a[k], b[k]) for k in keys]


def to_eval_dir(s: Series, doc_ids: list[int], out: Path, arm: str) -> Path:
    """Write ``s`` as an abh eval directory over ``doc_ids`` (a document this side lacks: an error)."""
    digest = hashlib.sha256(json.dumps([[i, s.docs[i].doc_hash if i in s.docs else None] for i in doc_ids]
                                       ).encode()).hexdigest()
    meta: EvalMeta = {
        "task": s.task, "recipe": {"name": f"lm-eval {s.filter} {s.metric}", "filter": s.filter, "metric": s.metric},
        "upstream": "lm-evaluation-harness --log_samples", "dataset_sha256": digest, "dataset_source": s.source,
        "dataset_canonical": None, "num_questions": len(doc_ids), "stop": [], "shots_sha256": "",
        "indices": doc_ids, "api": "lm-eval", "url": "", "parallel": 1, "simulated": False, "arm": arm,
        "launch": f"lm-eval:{s.source}"}
    if out.exists() and (out / schema.EVAL_FILE).exists():
        import shutil

        shutil.rmtree(out)  # regenerated from the samples file on every compare
    store = EvalStore(out)
    store.open(meta)
    records = []
    for i in doc_ids:
        d = s.docs.get(i)
        if d is None:
            rec = SampleRecord(index=i, prompt_sha256="", output=None, pred=None, label="", correct=None,
                               invalid=None, finish_reason=None, prompt_tokens=None, completion_tokens=None,
                               latency_s=None, attempts=0, error="document absent from this samples file")
        else:
            rec = SampleRecord(index=i, prompt_sha256=hashlib.sha256(d.prompt.encode()).hexdigest(),
                               output=d.response, pred=d.filtered, label=d.target, correct=d.value >= 1.0,
                               invalid=d.filtered == "[invalid]", finish_reason=None, prompt_tokens=None,
                               completion_tokens=None, latency_s=None, attempts=1, error=None,
                               score=None if d.value in (0.0, 1.0) else d.value)
        store.append(rec, d.prompt if d is not None else None)
        records.append(rec)
    store.close()
    store.write_summary({**summarize(records, len(doc_ids), 0.0), "wall_s_this_session": 0.0, "resumed": False,
                         "recipe": meta["recipe"], "dataset_sha256": digest, "dataset_canonical": None,
                         "api": "lm-eval", "simulated": False, "complete": True, "aborted": None})
    return out
