"""abh compare as a command: incomplete evals, exit codes, arm names, comparison.md, the samples export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.evals import make_eval, seed_vectors
from helpers.markdown import parse_table
from helpers.rundirs import build_run_dir

from harness.cli.main import main as abh
from harness.report.markdown import cell, table
from harness.results.fileio import atomic_write_text, read_json, read_jsonl


def _pair(tmp_path: Path, n: int = 300, **b_extra: object) -> tuple[Path, Path]:
    a, b = seed_vectors()
    return make_eval(tmp_path / "a", a[:n]), make_eval(tmp_path / "b", b[:n], **b_extra)


def _compare(tmp_path: Path, da: Path, db: Path, *extra: str) -> int:
    return abh(["compare", "--a", str(da), "--b", str(db), "--out", str(tmp_path / "out"), "--resamples", "200",
                *extra])


# ------------------------------------------------------------------------------------------ incomplete evals
def test_truncated_samples_are_refused_unless_allowed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    da, db = _pair(tmp_path)
    rows = (db / "samples.jsonl").read_text().splitlines(keepends=True)
    atomic_write_text(db / "samples.jsonl", "".join(rows[:120]))  # the summary still says complete
    assert read_json(db / "summary.json")["complete"] is True
    assert _compare(tmp_path, da, db) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "incomplete" in err and "120 of 300" in err and "--allow-incomplete" in err
    assert not (tmp_path / "out").exists()
    # asked for: the missing questions are dropped (and then too many are missing: exit 5, as abh run)
    assert _compare(tmp_path, da, db, "--allow-incomplete") == 5
    c = read_json(tmp_path / "out" / "comparison.json")
    assert c["n"] == 120 and c["dropped_errors"] == 180 and c["verdict"] == "not_comparable"


@pytest.mark.parametrize("n", ["0", "-5"])
def test_resamples_below_one_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], n: str) -> None:
    da, db = _pair(tmp_path)
    with pytest.raises(SystemExit) as e:
        abh(["compare", "--a", str(da), "--b", str(db), "--out", str(tmp_path / "out"), "--resamples", n])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"--resamples must be at least 1, not {n}" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("how", ["no_summary", "summary_incomplete"])
def test_unfinished_evals_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str) -> None:
    da, db = _pair(tmp_path, 100)
    if how == "no_summary":
        (db / "summary.json").unlink()
    else:
        s = read_json(db / "summary.json")
        from harness.results import schema
        schema.write_eval_summary(db / "summary.json", {**s, "complete": False, "aborted": "interrupted by SIGINT"})
    assert _compare(tmp_path, da, db) == 2
    err = capsys.readouterr().err
    assert ("never finished" if how == "no_summary" else "interrupted by SIGINT") in err
    assert _compare(tmp_path, da, db, "--allow-incomplete") == 0


# ------------------------------------------------------------------------------------------ exit codes
@pytest.mark.slow  # a whole run of processes over ~2.5 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_exit_5_when_request_errors_exceed_the_maximum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    da, db = _pair(tmp_path, 300, errors=tuple(range(20)))
    assert _compare(tmp_path, da, db) == 5
    assert "exceeds --max-error-rate" in capsys.readouterr().err
    assert _compare(tmp_path, da, db, "--max-error-rate", "0.1") == 0


@pytest.mark.parametrize("extra,code", [({"side_check": {"passed": False}}, 3), ({"status": "failed"}, 4)])
def test_recorded_failures_exit_as_abh_run_would(tmp_path: Path, extra: dict, code: int) -> None:
    da, db = _pair(tmp_path, 100, **extra)
    assert _compare(tmp_path, da, db, "--fail-on", "regressed") == code
    assert read_json(tmp_path / "out" / "comparison.json")["verdict"] == "not_comparable"


@pytest.mark.slow
def test_fail_on_regressed_exits_7_on_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(6)
    a = rng.random(500) < 0.8
    b = a & (rng.random(500) < 0.85)
    da, db = make_eval(tmp_path / "a", a), make_eval(tmp_path / "b", b)
    assert _compare(tmp_path, da, db) == 0
    # one eval per arm: a verdict about the two instances, which the gate does not act on unless told to
    assert _compare(tmp_path, da, db, "--fail-on", "regressed") == 0
    assert "not applied to verdict regressed" in capsys.readouterr().err
    assume = "--assume-no-launch-shift"
    assert _compare(tmp_path, da, db, "--fail-on", "regressed", assume) == 7
    assert "verdict regressed fails --fail-on regressed" in capsys.readouterr().err
    assert read_json(tmp_path / "out" / "comparison.json")["verdict"] == "regressed"
    # the reverse comparison improved: a regression gate passes, an any-difference gate does not
    assert _compare(tmp_path, db, da, "--fail-on", "regressed", assume) == 0
    assert _compare(tmp_path, db, da, "--fail-on", "any-difference", assume) == 7
    assert _compare(tmp_path, db, da, "--fail-on", "not-noninferior", assume) == 0
    with pytest.raises(SystemExit):
        _compare(tmp_path, da, db, "--fail-on", "worse")


# ------------------------------------------------------------------------------------------ names, provenance
def test_names_from_options_or_eval_json(tmp_path: Path) -> None:
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a[:200], arm="base", url="http://10.0.0.1:30000",
                   server={"build": "0f3c9a1", "version": "0.5.6"})
    db = make_eval(tmp_path / "b", b[:200], url="http://10.0.0.2:30000", server={"build": "7be2d40", "version": "0.5.7"})
    assert _compare(tmp_path, da, db) == 0
    c = read_json(tmp_path / "out" / "comparison.json")
    assert c["arm_names"] == {"a": "base", "b": "B"}  # eval.json's arm, else the role
    assert c["command"][:2] == ["abh", "compare"] and str(da) in c["command"]
    assert _compare(tmp_path, da, db, "--a-name", "main", "--b-name", "pr-123") == 0
    c = read_json(tmp_path / "out" / "comparison.json")
    assert c["arm_names"] == {"a": "main", "b": "pr-123"}
    html = (tmp_path / "out" / "report.html").read_text()
    assert "pr-123 vs main" in html
    for url, build, version in (("10.0.0.1", "0f3c9a1", "0.5.6"), ("10.0.0.2", "7be2d40", "0.5.7")):
        assert f"http://{url}:30000" in html and f"build {build} · version {version}" in html
    md = (tmp_path / "out" / "comparison.md").read_text()
    rows = {r["arm"]: r for r in _table_after(md, "server URL")}
    assert rows["A"]["build"] == "0f3c9a1" and rows["B"]["version"] == "0.5.7"


def _table_after(md: str, column: str) -> list[dict[str, str]]:
    """The rows of the first table of ``md`` that has ``column``."""
    start = md.index(f"| {column} ") if f"| {column} " in md else md.index(f" {column} |")
    head = md.rfind("\n", 0, start) + 1
    return parse_table(md[head:], "arm")


# ------------------------------------------------------------------------------------------ comparison.md
def test_markdown_table_round_trips() -> None:
    rows = [["A", "base|line <b>x</b>", "94.5 %"], ["B", "fix\nnew & better", None]]
    md = table(["arm", "name", "accuracy"], rows, ["l", "l", "r"])
    parsed = parse_table("intro\n\n" + md + "\n\nafter", "arm")
    assert parsed == [{"arm": "A", "name": "base|line <b>x</b>", "accuracy": "94.5 %"},
                      {"arm": "B", "name": "fix new & better", "accuracy": "—"}]
    assert "<b>" not in md and cell("a|b") == "a\\|b"


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_comparison_md_states_the_result(tmp_path: Path) -> None:
    a, b = seed_vectors()
    da = make_eval(tmp_path / "a", a, errors=(5,))
    db = make_eval(tmp_path / "b", b)
    assert _compare(tmp_path, da, db, "--a-name", "base", "--b-name", "fix", "--margin", "2") == 0
    c = read_json(tmp_path / "out" / "comparison.json")
    md = (tmp_path / "out" / "comparison.md").read_text()
    arms = {r["arm"]: r for r in parse_table(md, "arm")}
    assert arms["A"]["name"] == "base" and arms["B"]["name"] == "fix"
    assert arms["A"]["accuracy"] == f"{100 * c['arms']['a']['accuracy']:.2f} %"
    assert arms["B"]["accuracy"] == f"{100 * c['arms']['b']['accuracy']:.2f} %"
    assert arms["A"]["request errors"].startswith("1 (") and arms["B"]["request errors"].startswith("0 (")
    assert arms["A"]["invalid"].startswith("0 (")
    stat = parse_table(md, "Δ (B − A)")[0]
    assert stat["Δ (B − A)"] == f"{100 * c['delta']:+.2f} pp"
    lo, hi = c["delta_ci"]
    assert stat["95 % CI"] == f"[{100 * lo:+.2f}, {100 * hi:+.2f}] pp".replace("-", "\u2212")
    assert stat["test (decided the verdict)"] == c["test"] and stat["p"] == f"{c['p']:.3g}"
    assert "verdict" not in stat and c["verdict"] == "equivalent"  # stated once, in the headline
    assert "> **[instances only] EQUIVALENT " in md and "within ±2 pp" in md and md.count("EQUIVALENT") == 1
    assert "#### Side checks" in md and "#### Sources" in md
    assert "```sh\nabh compare --a " in md and "--b-name fix" in md


def test_comparison_md_of_a_run_has_checks_sources_and_commands(tmp_path: Path) -> None:
    from harness.report import write_markdown

    root = build_run_dir(tmp_path / "run", n=40)
    md = write_markdown(root).read_text()
    assert md.startswith("> **[SIMULATED] ")  # the headline first, then the title
    assert md.split("\n\n")[1] == "### [SIMULATED] abh: fix (B) vs baseline (A) — shared-slot-fix"
    checks = _table_after(md, "check")
    assert {(r["arm"], r["check"], r["when"], r["result"]) for r in checks} == {
        ("A", "patch absent", "static", "PASS"), ("B", "patch applied", "static", "PASS"),
        ("A", "server reports the baseline build", "live", "PASS"),
        ("B", "server reports the fix build", "live", "PASS")}
    sources = {r["arm"]: r for r in _table_after(md, "commit")}
    assert sources["A"]["commit"] == "0f3c9a1" and sources["B"]["patches"] == "arms/shared-slot/fix.patch"
    assert "```sh\nabh run experiment=shared-slot-fix 'hf_token=***REDACTED***'\n```" in md
    assert "hf_token=abc" not in md
    assert "server command of arm B (fix)" in md and "--enforce-shared-experts-fusion" in md


# ------------------------------------------------------------------------------------------ export
def test_samples_export_joins_arms_and_repeats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    n = 40
    a_dirs = [make_eval(tmp_path / f"a{r}", rng.random(n) < 0.7, launch=f"A{r}") for r in range(2)]
    b_dirs = [make_eval(tmp_path / f"b{r}", rng.random(n) < 0.8, errors=(3,) if r == 1 else (), launch=f"B{r}")
              for r in range(2)]
    aa = make_eval(tmp_path / "aa", rng.random(n) < 0.7, launch="AA")
    args = ["compare", "--out", str(tmp_path / "out"), "--resamples", "200", "--max-error-rate", "0.1",
            "--a-name", "base", "--b-name", "fix", "--aa", str(aa)]
    for d in a_dirs:
        args += ["--a", str(d)]
    for d in b_dirs:
        args += ["--b", str(d)]
    assert abh(args) == 0
    pq = pd.read_parquet(tmp_path / "out" / "samples.parquet")
    csv = pd.read_csv(tmp_path / "out" / "samples.csv")
    cols = ["question_index", "arm", "role", "repeat", "correct", "invalid", "error", "missing", "answer", "label",
            "output"]
    assert list(pq.columns) == cols and list(csv.columns) == cols
    assert len(pq) == len(csv) == 5 * n
    assert pq.groupby(["role", "repeat"]).size().to_dict() == {("a", 1): n, ("a", 2): n, ("aa", 1): n,
                                                               ("b", 1): n, ("b", 2): n}
    assert set(pq.loc[pq.role == "b", "arm"]) == {"fix"} and set(pq.loc[pq.role != "b", "arm"]) == {"base"}
    for role, k, d in [("a", 1, a_dirs[0]), ("b", 2, b_dirs[1]), ("aa", 1, aa)]:
        stored = {r["index"]: r for r in read_jsonl(d / "samples.jsonl")}
        part = pq[(pq.role == role) & (pq.repeat == k)].set_index("question_index")
        for i, row in stored.items():
            got = part.loc[i]
            assert (pd.isna(got.correct) if row["correct"] is None else bool(got.correct) == row["correct"])
            assert (pd.isna(got.error) if row["error"] is None else got.error == row["error"])
    err = pq[(pq.role == "b") & (pq.repeat == 2) & (pq.question_index == 3)].iloc[0]
    assert err.error == "HTTP 500" and pd.isna(err.correct) and pd.isna(err.answer) and not err.missing
    assert csv.equals(pd.read_csv(tmp_path / "out" / "samples.csv"))  # deterministic
    # abh report --export rewrites them from the stored files
    (tmp_path / "out" / "samples.csv").unlink()
    assert abh(["report", str(tmp_path / "out"), "--export"]) == 0
    assert pd.read_csv(tmp_path / "out" / "samples.csv").equals(csv)
    assert json.loads((tmp_path / "out" / "comparison.json").read_text())["arm_names"]["b"] == "fix"
