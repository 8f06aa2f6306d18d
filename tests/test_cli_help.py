"""Every command's help: one line for every flag, one default each, never "(default: None)"; one naming style
for arm names; `abh ab` takes every flag of `abh eval` that makes sense for two URLs (issue 23, item 8)."""

from __future__ import annotations

import re

import pytest

from harness.cli.ab import ab_main
from harness.cli.compare import compare_main
from harness.cli.eval import eval_main
from harness.cli.power import power_main
from harness.cli.report import report_main

COMMANDS = {"eval": eval_main, "ab": ab_main, "compare": compare_main, "power": power_main, "report": report_main}


def _help(capsys: pytest.CaptureFixture[str], name: str) -> str:
    with pytest.raises(SystemExit) as e:
        COMMANDS[name](["--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _options(text: str) -> dict[str, str]:
    """flag -> its help text (the lines below it up to the next flag), from argparse's output."""
    out: dict[str, str] = {}
    current = None
    for line in text.split("options:", 1)[1].splitlines():
        m = re.match(r"^  (-\w, )?(--[\w-]+)(.*)$", line)
        if m:
            current = m.group(2)
            out[current] = m.group(3)
        elif current and line.startswith("      "):
            out[current] += " " + line.strip()
    return {k: " ".join(v.split()) for k, v in out.items()}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_flag_has_a_help_line_and_one_default_at_most(capsys: pytest.CaptureFixture[str], name: str) -> None:
    text = _help(capsys, name)
    assert "(default: None)" not in text and "(default: [])" not in text
    for flag, help_text in _options(text).items():
        words = re.sub(r"^\s*[A-Z_,{}\-a-z|]*\s", "", help_text + " ").strip()  # the metavar
        assert len(words) > 3, f"abh {name} {flag} has no help"
        assert help_text.count("default") <= 1, f"abh {name} {flag}: {help_text}"


def test_ab_takes_evals_flags_and_compares_arm_names(capsys: pytest.CaptureFixture[str]) -> None:
    ev, ab, cmp = (set(_options(_help(capsys, n))) for n in ("eval", "ab", "compare"))
    only_one_server = {"--url", "--model-path"}  # ab's URLs are positional; the stop list is the recipe's
    assert ev - only_one_server <= ab, ev - only_one_server - ab
    for flag in ("--a-name", "--b-name"):
        assert flag in ab and flag in cmp
    shared = {"--margin", "--hypothesis", "--min-effect", "--alpha", "--seed", "--max-error-rate", "--fail-on"}
    assert shared <= ab and shared <= cmp


@pytest.mark.parametrize("name", ["ab", "compare"])
def test_effects_are_in_percentage_points_and_say_so(capsys: pytest.CaptureFixture[str], name: str) -> None:
    text = " ".join(_help(capsys, name).split())
    assert "percentage points (pp)" in text
    opts = _options(_help(capsys, name))
    assert "PP" in opts["--margin"] and "PP" in opts["--min-effect"] and "FRACTION" in opts["--max-error-rate"]
