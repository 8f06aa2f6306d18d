"""samples.csv is written by the csv module with the bytes pandas' to_csv wrote of the same table."""

from __future__ import annotations

import pytest

from harness.report.export import ExportRow, _frame, to_csv


def _row(**kw: object) -> ExportRow:
    base: ExportRow = {"question_index": 1, "arm": "A", "role": "a", "repeat": 1, "correct": True, "invalid": False,
                       "error": None, "missing": False, "answer": 18, "label": 18, "output": " 18\n#### 18"}
    return {**base, **kw}  # type: ignore[typeddict-item]


ROWS = [
    _row(),
    _row(arm='quote " and, comma', output='he said "hi"\r\nthen, left', label=18.0),
    _row(question_index=7, role="aa", repeat=2, correct=None, invalid=None, error="timeout\nafter 3 tries",
         missing=False, answer=None, output=None),
    _row(question_index=9, correct=None, invalid=None, missing=True, answer=None, label=None, output=None),
    _row(arm="", output="", answer=-3, label=0, correct=False, invalid=True),
    _row(output="ünïcødé — “quotes” \t tab"),
]


@pytest.mark.parametrize("rows", [ROWS, ROWS[:1], []])
def test_the_csv_is_pandas_bytes(rows: list[ExportRow]) -> None:
    assert to_csv(rows) == _frame(rows).to_csv(index=False)


def _parquet_bytes(write: object) -> bytes:
    import io

    buf = io.BytesIO()
    write(buf)  # type: ignore[operator]
    return buf.getvalue()


def test_the_parquet_file_is_pandas_bytes_without_pandas() -> None:
    """samples.parquet from the rows (pyarrow alone) is the file pandas' to_parquet wrote, byte for byte; a
    whole-number float (18.0) is left to pandas' conversion."""
    import pyarrow.parquet as pq

    from harness.report.export import arrow_table

    rows = [r for r in ROWS if not isinstance(r["label"], float)]
    table = arrow_table(rows)
    assert table is not None
    assert _parquet_bytes(lambda f: pq.write_table(table, f, compression="snappy")) == \
        _parquet_bytes(lambda f: _frame(rows).to_parquet(f, index=False))
    assert arrow_table(ROWS) is None
    assert arrow_table([_row(output="lone \ud800 surrogate")]) is None  # pandas' conversion decides, as before
