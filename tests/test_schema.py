"""Stored results are typed and versioned: a file of another kind or an unknown schema_version is refused with
one line (exit 2), never misread; files are written with the umask's permissions."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import NotRequired, TypedDict

import pytest
from helpers.docs import comparison, tost
from helpers.evals import make_eval, seed_vectors

from harness.cli.main import main as abh
from harness.results import schema
from harness.results.eval_store import StoreError, load_eval
from harness.results.fileio import atomic_write_json, atomic_write_text, read_json


def _comparison_dir(tmp_path: Path) -> Path:
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:200]), make_eval(tmp_path / "b", b[:200])
    out = tmp_path / "cmp"
    assert abh(["compare", "--a", str(da), "--b", str(db), "--out", str(out), "--resamples", "200"]) == 0
    return out


def _set(path: Path, **fields: object) -> None:
    doc = read_json(path)
    doc.update(fields)
    atomic_write_json(path, doc)


# ------------------------------------------------------------------------------------------ loaders
def test_every_writer_stamps_kind_and_version(tmp_path: Path) -> None:
    out = _comparison_dir(tmp_path)
    for path, kind in ((out / "comparison.json", schema.COMPARISON), (tmp_path / "a" / "eval.json", schema.EVAL),
                       (tmp_path / "a" / "summary.json", schema.EVAL_SUMMARY)):
        doc = read_json(path)
        assert (doc["kind"], doc["schema_version"]) == (kind, schema.WRITES[kind]), path
        assert list(doc)[:2] == ["kind", "schema_version"]
        assert schema.load(path, kind) == doc


@pytest.mark.parametrize("version", [3, 1, 0, "2", None, True])
def test_unknown_schema_version_is_refused(tmp_path: Path, version: object) -> None:
    path = tmp_path / "comparison.json"
    schema.write_comparison(path, comparison(verdict="improved"))
    _set(path, schema_version=version)
    with pytest.raises(schema.SchemaError) as e:
        schema.load_comparison(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg and "schema_version" in msg and repr(version) in msg


def test_wrong_or_missing_kind_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    schema.write_eval_summary(path, {"n": 3})
    with pytest.raises(schema.SchemaError, match="expected a run summary .* found kind 'abh.eval.summary'"):
        schema.load_run_summary(path)
    atomic_write_json(path, {"n": 3})
    with pytest.raises(schema.SchemaError, match="found no kind"):
        schema.load_eval_summary(path)
    atomic_write_text(path, "[1, 2]")
    with pytest.raises(schema.SchemaError, match="a JSON object"):
        schema.load_eval_summary(path)
    atomic_write_text(path, '{"kind": ')
    with pytest.raises(schema.SchemaError, match="not valid JSON"):
        schema.load_eval_summary(path)
    assert issubclass(schema.SchemaError, StoreError)  # every reader of the store handles it


def test_eval_of_unknown_version_cannot_be_loaded_or_resumed(tmp_path: Path) -> None:
    d = make_eval(tmp_path / "e", [True, False, True])
    _set(d / "eval.json", schema_version=99)
    with pytest.raises(schema.SchemaError, match="abh.eval schema_version 99"):
        load_eval(d)
    from harness.results.eval_store import EvalStore

    with pytest.raises(StoreError, match="schema_version 99"):
        EvalStore(d).open({"dataset_sha256": "d" * 64, "recipe": "sglang-gsm8k-5shot", "indices": [0, 1, 2]})


# ------------------------------------------------------------------------------------------ the CLI
def test_report_on_a_comparison_of_unknown_version_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _comparison_dir(tmp_path)
    capsys.readouterr()
    _set(out / "comparison.json", schema_version=3)
    (out / "report.html").unlink()
    assert abh(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("abh report: ") and "schema_version 3" in err
    assert "comparison.json" in err and not (out / "report.html").exists()


def test_report_on_a_manifest_of_unknown_version_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _comparison_dir(tmp_path)
    schema.write_manifest(out / "manifest.json", {"experiment": "x"})
    _set(out / "manifest.json", schema_version=7)
    capsys.readouterr()
    assert abh(["report", str(out)]) == 2
    assert "abh.run schema_version 7" in capsys.readouterr().err


def test_compare_on_an_eval_of_unknown_version_exits_2_with_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = seed_vectors()
    da, db = make_eval(tmp_path / "a", a[:50]), make_eval(tmp_path / "b", b[:50])
    _set(db / "summary.json", schema_version=3)
    assert abh(["compare", "--a", str(da), "--b", str(db), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "abh.eval.summary schema_version 3" in err and str(db) in err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ permissions
@pytest.fixture
def umask():
    def set_mask(mask: int) -> None:
        os.umask(mask)

    old = os.umask(0o022)
    yield set_mask
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_writes_respect_the_umask(tmp_path: Path, umask) -> None:
    umask(0o022)
    atomic_write_text(tmp_path / "a.txt", "x")
    assert _mode(tmp_path / "a.txt") == 0o644
    umask(0o027)
    atomic_write_json(tmp_path / "b.json", {})
    assert _mode(tmp_path / "b.json") == 0o640
    # an existing file keeps its permissions when it is rewritten
    (tmp_path / "a.txt").chmod(0o600)
    umask(0o022)
    atomic_write_text(tmp_path / "a.txt", "y")
    assert _mode(tmp_path / "a.txt") == 0o600 and (tmp_path / "a.txt").read_text() == "y"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_everything_abh_compare_writes_is_readable_by_others(tmp_path: Path, umask) -> None:
    umask(0o022)
    out = _comparison_dir(tmp_path)
    written = sorted(p.name for p in out.iterdir())
    assert written == ["comparison.json", "comparison.md", "report.html", "samples.csv", "samples.parquet"]
    assert {p.name: _mode(p) for p in out.iterdir()} == {name: 0o644 for name in written}
    assert _mode(tmp_path / "a" / "summary.json") == _mode(tmp_path / "a" / "eval.json") == 0o644
    assert json.loads((out / "comparison.json").read_text())["kind"] == "abh.comparison"


# ------------------------------------------------------------------------------------------ typed records
@pytest.mark.parametrize(("edit", "message"), [
    ({"arms": {"a": {"accuracy": "x"}}}, "arms.a.accuracy: expected a number, found 'x'"),
    ({"n": 1.5}, "n: expected an integer, found 1.5"),
    ({"error_rate_exceeded": "no"}, "error_rate_exceeded: expected true or false, found 'no'"),
    ({"flips": [1, "2"]}, "flips[1]: expected an integer, found '2'"),
    ({"delta": None}, "delta: expected a number, found None"),
    ({"design": []}, "design: expected an object, found []"),
])
def test_a_hand_edited_comparison_is_refused_naming_the_field(tmp_path: Path, edit: dict, message: str) -> None:
    path = tmp_path / "comparison.json"
    schema.write_comparison(path, comparison(verdict="improved"))
    doc = read_json(path)
    for key, value in edit.items():
        if isinstance(value, dict) and key == "arms":
            doc["arms"]["a"].update(value["a"])
        else:
            doc[key] = value
    atomic_write_json(path, doc)
    with pytest.raises(schema.SchemaError) as e:
        schema.load_comparison(path)
    assert str(e.value) == f"{path}: {message}"


def test_a_missing_field_is_refused_and_an_unknown_one_ignored(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    schema.write_comparison(path, comparison(verdict="improved"))
    doc = read_json(path)
    doc["written_by_a_tool"] = 1
    atomic_write_json(path, doc)
    assert schema.load_comparison(path).verdict == "improved"
    del doc["verdict"]
    atomic_write_json(path, doc)
    with pytest.raises(schema.SchemaError, match="verdict: missing"):
        schema.load_comparison(path)


def test_a_record_round_trips_through_its_one_serialisation(tmp_path: Path) -> None:
    c = comparison(verdict="equivalent", margin=0.01, tost=tost(equivalent=True), arm_names={"a": "x", "b": "y"})
    path = tmp_path / "comparison.json"
    schema.write_comparison(path, c)
    assert schema.load_comparison(path) == c
    doc = read_json(path)
    assert "divergence" not in doc and "sequential" not in doc  # optional blocks appear only when set
    assert doc["tost"]["equivalent"] is True and doc["arm_names"] == {"a": "x", "b": "y"}


IDENTICAL = {"a": {"share": 0.5, "within_launch": 1.0, "across_launches": None, "pairs": 2, "questions": 4},
             "b": {"share": 1.0, "within_launch": None, "across_launches": 1.0, "pairs": 1, "questions": 4},
             "temperature": 0, "flagged": [], "note": "n"}


def test_a_typed_block_round_trips_and_is_checked_key_by_key(tmp_path: Path) -> None:
    """``identical_outputs`` and ``design.launch_heterogeneity`` are TypedDicts: stored as they are (keys in their
    order, an int temperature an int), read back with every declared key checked, other keys kept."""
    het = {"test": "Cochran's Q", "q": 3.0, "df": 2, "p": 0.22}
    c = comparison(verdict="improved", identical_outputs=IDENTICAL, design={"launch_heterogeneity": het})
    path = tmp_path / "comparison.json"
    schema.write_comparison(path, c)
    doc = read_json(path)
    assert doc["identical_outputs"] == IDENTICAL and list(doc["identical_outputs"]) == list(IDENTICAL)
    assert json.dumps(doc["identical_outputs"]["temperature"]) == "0"
    assert schema.load_comparison(path) == c
    doc["identical_outputs"]["by_a_newer_tool"] = 1
    atomic_write_json(path, doc)
    assert schema.load_comparison(path).identical_outputs["by_a_newer_tool"] == 1
    for edit, message in (({"identical_outputs": {**IDENTICAL, "a": {**IDENTICAL["a"], "pairs": "2"}}},
                           "identical_outputs.a.pairs: expected an integer, found '2'"),
                          ({"identical_outputs": {**IDENTICAL, "b": {"share": 1.0}}},
                           "identical_outputs.b.within_launch: missing"),
                          ({"identical_outputs": 5}, "identical_outputs: expected an object, found 5"),
                          ({"design": {**doc["design"], "launch_heterogeneity": {**het, "df": 2.5}}},
                           "design.launch_heterogeneity.df: expected an integer, found 2.5")):
        atomic_write_json(path, {**doc, **edit})
        with pytest.raises(schema.SchemaError) as e:
            schema.load_comparison(path)
        assert str(e.value) == f"{path}: {message}"


def test_a_sample_row_has_every_field_in_order_and_the_optional_ones_only_when_set() -> None:
    from dataclasses import fields

    rec = schema.SampleRecord(index=3, prompt_sha256="h", output="x", pred=1, label=1, correct=True, invalid=False,
                              finish_reason="stop", prompt_tokens=5, completion_tokens=2, latency_s=0.1, attempts=1)
    names = [f.name for f in fields(schema.SampleRecord)]
    assert list(rec.to_row()) == [n for n in names if n not in ("score", "reasoning")]
    full = schema.SampleRecord(**{**rec.to_row(), "score": 0.5, "reasoning": "r"})
    assert list(full.to_row()) == names and schema.SampleRecord.from_dict(full.to_row()) == full


def test_a_typed_block_may_leave_out_its_not_required_keys() -> None:
    """Read back, a ``NotRequired`` key of a TypedDict field may be absent (Python 3.11's ``__required_keys__``
    says otherwise under ``from __future__ import annotations``), and is checked when present."""
    from dataclasses import dataclass

    from harness.results.records import Record, RecordError

    @dataclass(frozen=True)
    class Holder(Record):
        block: Block

    assert Holder.from_doc({"block": {"x": 1}}) == Holder({"x": 1})
    for doc, message in (({"block": {}}, "block.x: missing"),
                         ({"block": {"x": 1, "y": 2}}, "block.y: expected a string, found 2")):
        with pytest.raises(RecordError) as e:
            Holder.from_doc(doc)
        assert str(e.value) == message


class Block(TypedDict):
    x: int
    y: NotRequired[str]


def test_every_stored_kind_is_in_the_one_registry_with_its_version(tmp_path):
    """scores.json, the plan and the launch fingerprint are registered like the rest; the stdlib-only launcher's
    own copy of the fingerprint's version is the registry's; a scores.json of a version abh does not read is no
    pass (not_measured, naming the version), never read as one."""
    import re

    import numpy as np

    from harness.analysis import planning
    from harness.results import schema, token_store

    assert {schema.SCORES, schema.PLAN, schema.FINGERPRINT} <= set(schema.WRITES) <= set(schema.READS)
    assert token_store.KIND == schema.SCORES and token_store.SCHEMA_VERSION == schema.WRITES[schema.SCORES]
    assert planning.SCHEMA_VERSION == schema.WRITES[schema.PLAN] and planning.KIND == schema.PLAN
    launcher = (Path(schema.__file__).parents[1] / "engines" / "launcher.py").read_text()
    assert re.search(r"^SCHEMA_VERSION = (\d+)$", launcher, re.M).group(1) == str(schema.WRITES[schema.FINGERPRINT])
    assert f'"kind": "{schema.FINGERPRINT}"' in launcher
    w = token_store.ScoresWriter(tmp_path, top_k=2)
    w.add(0, np.array([5]), np.array([-0.1]), np.array([[5, 6]]), np.array([[-0.1, -2.5]]))
    w.close()
    assert token_store.scores_status(tmp_path) == ("ok", None)
    meta = json.loads((tmp_path / "scores.json").read_text())
    (tmp_path / "scores.json").write_text(json.dumps({**meta, "schema_version": 99}))
    status, reason = token_store.scores_status(tmp_path)
    assert status == "not_measured" and "schema_version 99" in reason
