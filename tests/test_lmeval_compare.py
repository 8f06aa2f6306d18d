"""``abh compare --lm-eval``: lm-eval's --log_samples lines (here the real ones the recipe fixtures recorded) paired
by doc_id; every failure is one line and exit 2. The end-to-end run of the real lm-eval is tests/test_lmeval_real.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from harness import exitcodes
from harness.cli.compare import compare_main
from harness.results import schema

FIXTURE = Path(__file__).parent / "data" / "recipes" / "lm_eval_strict.json"
NAME = "samples_gsm8k_2026-12-01T23-37-04.086450.jsonl"


def lines() -> list[dict]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))["samples_jsonl_completions"]


def write(folder: Path, rows: list[dict], name: str = NAME) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return folder


def test_pairs_documents_by_id_per_filter(tmp_path, capsys):
    a = lines()
    b = copy.deepcopy(a)
    for r in b:  # B gets doc 2 right under both filters, A keeps its answers
        if r["doc_id"] == 2:
            r["exact_match"] = 1.0
    for r in a:
        if r["doc_id"] == 2:
            r["exact_match"] = 0.0
    b = list(reversed(b))  # the order of lines does not matter: documents pair by doc_id
    out = tmp_path / "out"
    code = compare_main(["--lm-eval", str(write(tmp_path / "a", a)), str(write(tmp_path / "b", b)), "--out", str(out)])
    assert code == exitcodes.OK, capsys.readouterr().err
    tc = schema.load_tasks(out / schema.TASKS_FILE)
    assert [r.key for r in tc.rows] == ["gsm8k__strict-match__exact_match", "gsm8k__flexible-extract__exact_match"]
    for row in tc.rows:
        filt = row.key.split("__")[1]
        sa = {r["doc_id"]: r["exact_match"] for r in a if r["filter"] == filt}
        sb = {r["doc_id"]: r["exact_match"] for r in b if r["filter"] == filt}
        c = schema.load_comparison(out / row.dir / "comparison.json")
        assert c.b_only == sum(1 for d in sa if sb[d] and not sa[d]) and c.a_only == sum(
            1 for d in sa if sa[d] and not sb[d]) and c.n == 3
    ev = schema.load_eval_meta(out / "lm_eval" / "b" / "gsm8k__strict-match__exact_match" / "eval.json")
    assert ev["indices"] == [0, 1, 2]
    assert (out / "report.html").exists() and "| task | recipe |" in (out / "comparison.md").read_text()


def test_one_task_filter_metric_is_a_plain_comparison(tmp_path):
    a = [r for r in lines() if r["filter"] == "strict-match"]
    out = tmp_path / "out"
    assert compare_main(["--lm-eval", str(write(tmp_path / "a", a) / NAME), str(write(tmp_path / "b", a) / NAME),
                         "--out", str(out)]) == exitcodes.OK
    c = schema.load_comparison(out / schema.COMPARISON_FILE)
    assert c.n == 3 and c.delta == 0 and not (out / schema.TASKS_FILE).exists()


@pytest.mark.parametrize("case,needle", [
    ("not_samples", "not an lm-eval sample"),
    ("doc_hash", "document 1 differs between the two files"),
    ("other_task", "share no task/filter/metric"),
    ("empty_dir", "holds no lm-eval samples file"),
    ("no_metric", "no per-document metric in [0, 1]"),
])
def test_every_refusal_is_one_line_and_exit_2(tmp_path, capsys, case, needle):
    a = lines()
    b = copy.deepcopy(a)
    b_name = NAME
    if case == "not_samples":
        b = [{"hello": 1}]
    elif case == "doc_hash":
        for r in b:
            if r["doc_id"] == 1:
                r["doc_hash"] = "0" * 64
    elif case == "other_task":
        b_name = NAME.replace("gsm8k", "mmlu")
    elif case == "no_metric":
        for r in b:
            r["exact_match"] = 7.5
    bdir = tmp_path / "b"
    if case == "empty_dir":
        bdir.mkdir()
    else:
        write(bdir, b, b_name)
    code = compare_main(["--lm-eval", str(write(tmp_path / "a", a)), str(bdir), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == exitcodes.BAD_CONFIG and needle in err and len(err.splitlines()) == 1, err


def test_lm_eval_and_eval_dirs_do_not_mix(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        compare_main(["--lm-eval", "x", "y", "--a", "z", "--out", str(tmp_path)])
    assert e.value.code == 2 and "not both" in capsys.readouterr().err
