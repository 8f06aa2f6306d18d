"""The per-question answers of a comparison as one long-form table, ``samples.parquet`` and ``samples.csv``:
one row per (question, eval the comparison used)::

    question_index  arm       role  repeat  correct  invalid  error  missing  answer  label  output
    17              baseline  a     1       True     False    None   False    42      42     "... 42."

``correct`` is null for a request error or a missing question; ``answer`` is null when none could be parsed.
"""

from __future__ import annotations

import csv
import io
import json
import operator
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from harness.report import data
from harness.results.fileio import atomic_output, atomic_write_text

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("question_index", "arm", "role", "repeat", "correct", "invalid", "error", "missing", "answer", "label",
           "output")
PARQUET = "samples.parquet"
CSV = "samples.csv"


class ExportRow(TypedDict):
    """A row of the table: one question of one eval (the columns of :data:`COLUMNS`, in order)."""

    question_index: int
    arm: str
    role: str
    repeat: int
    correct: bool | None
    invalid: bool | None
    error: str | None
    missing: bool
    answer: int | float | str | None
    label: int | float | str | None
    output: str | None


def samples_rows(root: Path) -> list[ExportRow]:
    """The rows of the table for the comparison (or run) directory ``root``."""
    c = data.load_comparison(Path(root))
    if c is None:
        raise FileNotFoundError(f"{root} holds no comparison.json")
    names = data.arm_names(c)
    rows: list[ExportRow] = []
    for role, runs in data.load_runs(c, Path(root)).items():
        for run in runs:
            if run.error is not None:
                raise FileNotFoundError(run.error)
            for i in run.meta.get("indices") or sorted(run.samples):
                s = run.samples.get(i)
                rows.append({
                    "question_index": i, "arm": names["b" if role == "b" else "a"], "role": role,
                    "repeat": run.repeat, "correct": None if s is None else s.correct,
                    "invalid": None if s is None else s.invalid, "error": None if s is None else s.error,
                    "missing": s is None, "answer": None if s is None else s.pred,
                    "label": None if s is None else s.label, "output": None if s is None else s.output})
    return rows


def samples_frame(root: Path) -> pd.DataFrame:
    return _frame(samples_rows(root))


def _frame(rows: list[ExportRow]) -> pd.DataFrame:
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(COLUMNS))
    return df.astype({"question_index": "int64", "arm": "string", "role": "string", "repeat": "int64",
                      "correct": "boolean", "invalid": "boolean", "error": "string", "missing": "bool",
                      "answer": "Int64", "label": "Int64", "output": "string"})


def to_csv(rows: list[ExportRow]) -> str:
    """The CSV text pandas' ``to_csv(index=False)`` writes of :func:`samples_frame` (the same bytes: a null is
    empty, a whole-number answer or label an integer, a text quoted where it must be), written by the csv module
    from the rows at a fraction of the cost."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    # the csv module writes None as an empty field, as _cell does: only a float answer or label is converted
    cells = operator.itemgetter(*COLUMNS)
    w.writerows(_line(r) if isinstance(r["answer"], float) or isinstance(r["label"], float) else cells(r) for r in rows)
    return buf.getvalue()


#: the columns the table holds as integers (Int64: 18.0 is written 18)
_WHOLE = frozenset({"answer", "label"})


def _line(r: Mapping[str, object]) -> list[object]:
    return [_cell(r[c], c in _WHOLE) for c in COLUMNS]


def _cell(x: object, whole: bool) -> object:
    if x is None:
        return ""
    return int(x) if whole and not isinstance(x, bool) and isinstance(x, int | float) else x


def export_samples(root: Path) -> list[Path]:
    """Write ``root/samples.parquet`` and ``root/samples.csv`` (each atomically); return their paths."""
    root = Path(root)
    rows = samples_rows(root)
    table = arrow_table(rows)
    with atomic_output(root / PARQUET) as f:
        if table is None:  # an answer that is not a whole number: pandas' types decide (and refuse)
            _frame(rows).to_parquet(f, index=False)
        else:
            from harness.results.arrow import pq

            pq.write_table(table, f, compression="snappy")
    atomic_write_text(root / CSV, to_csv(rows))
    return [root / PARQUET, root / CSV]


#: (column, arrow type, pandas' dtype name in its metadata, pandas_type) of the table, in order
_ARROW = (("question_index", "int64", "int64", "int64"), ("arm", "large_string", "string", "object"),
          ("role", "large_string", "string", "object"), ("repeat", "int64", "int64", "int64"),
          ("correct", "bool_", "boolean", "bool"), ("invalid", "bool_", "boolean", "bool"),
          ("error", "large_string", "string", "object"), ("missing", "bool_", "bool", "bool"),
          ("answer", "int64", "Int64", "int64"), ("label", "int64", "Int64", "int64"),
          ("output", "large_string", "string", "object"))


def arrow_table(rows: list[ExportRow]) -> Any:
    """The pyarrow table ``to_parquet`` makes of :func:`samples_frame` (the same columns, types and pandas
    metadata: the same file), built from buffers: pyarrow imports pandas (1 s) to convert any Python or numpy
    value. None when an answer or a label is not an integer (or null), or a text is not UTF-8 (a lone surrogate):
    pandas' conversion decides, as it did."""
    import importlib.metadata

    from harness.results.arrow import pa

    cols: dict[str, list[Any]] = {c: [r[c] for r in rows] for c, _, _, _ in _ARROW}  # type: ignore[literal-required]
    if any(not (x is None or (isinstance(x, int) and not isinstance(x, bool))) for c in _WHOLE for x in cols[c]):
        return None
    try:
        arrays = [_column(cols[c], t) for c, t, _, _ in _ARROW]
    except UnicodeEncodeError:
        return None
    meta = {"index_columns": [], "column_indexes": [],
            "columns": [{"name": c, "field_name": c, "pandas_type": pt, "numpy_type": nt, "metadata": None}
                        for c, _, nt, pt in _ARROW],
            "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": importlib.metadata.version("pandas")}
    schema = pa.schema([(c, getattr(pa, t)()) for c, t, _, _ in _ARROW], metadata={"pandas": json.dumps(meta)})
    return pa.Table.from_arrays(arrays, schema=schema)


def _column(values: list[Any], kind: str) -> Any:
    """One column as a pyarrow array of type ``kind`` (int64, bool_ or large_string; None is null), from its
    buffers."""
    import numpy as np

    from harness.results.arrow import pa

    n = len(values)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if kind == "large_string":
        data = [b"" if v is None else str(v).encode("utf-8") for v in values]
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.fromiter((len(d) for d in data), dtype=np.int64, count=n), out=offsets[1:])
        return pa.Array.from_buffers(pa.large_string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])
    if kind == "bool_":
        bits = np.packbits(np.fromiter((bool(v) for v in values), dtype=bool, count=n), bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), n, [bitmap, pa.py_buffer(bits)])
    ints = np.fromiter((0 if v is None else v for v in values), dtype=np.int64, count=n)
    return pa.Array.from_buffers(pa.int64(), n, [bitmap, pa.py_buffer(ints)])
