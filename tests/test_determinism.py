"""Nondeterminism made visible (issue 22, item 13): the share of identical outputs across the passes of one arm,
within a launch and across launches, next to ψ in comparison.json and the terminal summary; 0 % at temperature
0 is flagged. A server that answers at random was reported with a within-arm noise of 0.0 and nothing flagged."""

from __future__ import annotations

import contextlib
import io
import subprocess

import pytest
from conftest import TEST_JSONL
from helpers.faultserver import FaultServer

from harness import exitcodes
from harness.analysis.determinism import arm_identity, identical_outputs, summary_line
from harness.cli.main import main as abh
from harness.results.fileio import read_json


def test_shares_within_and_across_launches():
    same, other = ["x", "y", None, "z"], ["x", "q", "w", None]
    got = arm_identity([("l1", same), ("l1", same), ("l2", other)])
    assert got["pairs"] == 3 and got["within_launch"] == 1.0
    assert got["across_launches"] == 1 / 2  # x == x, y != q (the rest not answered by both)
    assert got["share"] == (3 + 1 + 1) / (3 + 2 + 2)
    assert arm_identity([("l1", same)])["share"] is None  # one pass: nothing to compare


def test_zero_at_temperature_zero_is_flagged_not_otherwise():
    runs = {"a": [("l", ["1"]), ("l", ["2"])], "b": [("l", ["1"]), ("l", ["1"])]}
    assert identical_outputs(runs, 0.0)["flagged"] == ["a"]
    assert identical_outputs(runs, 0.7)["flagged"] == []
    assert summary_line(identical_outputs(runs, 0.0)).startswith("identical outputs across passes: A 0.00 %")


def ab(url_a: str, url_b: str, out, *extra: str) -> subprocess.CompletedProcess:
    """``abh ab`` with two repeats per arm, in this process (exit code, stdout, stderr)."""
    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = abh(["ab", url_a, url_b, "--out", str(out), "--num-questions", "30", "--repeats", "2",
                    "--no-progress", "--data", str(TEST_JSONL), *extra])
    return subprocess.CompletedProcess([], code, o.getvalue(), e.getvalue())


@pytest.mark.slow  # a whole run of processes of ~2 s: the slow suite (.ci/run), so the default run stays under 2 min
def test_a_server_that_answers_at_random_is_flagged(tmp_path):
    with FaultServer("random") as sa, FaultServer("ok") as sb:
        r = ab(sa.url, sb.url, tmp_path / "ab", "--verbose")  # the statistician's summary has the shares
    assert r.returncode == exitcodes.OK, r.stderr
    c = read_json(tmp_path / "ab" / "comparison.json")
    ident = c["identical_outputs"]
    assert ident["a"]["share"] == 0.0 and ident["a"]["pairs"] == 1 and ident["a"]["questions"] == 30
    assert ident["b"]["share"] == 1.0 and ident["flagged"] == ["a"] and ident["temperature"] == 0.0
    assert c["psi_aa_per_arm"]["a"] == 0.0  # what used to be all there was to see: "no noise"
    assert any("none of its 30 outputs is identical across its passes at temperature 0" in w for w in c["warnings"])
    assert "identical outputs across passes: A 0.00 %" in r.stdout and "B 100.00 %" in r.stdout
    assert "nondeterministic" in r.stdout
