"""A task's module is imported when the task is asked for: the config's door and ``abh run``'s start-up import no
task (nor the stores the multiple-choice tasks read), and each task still brings its own recipes."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from harness.tasks import registry
from harness.tasks.interface import DatasetError

ROOT = Path(__file__).resolve().parents[1]
TASK_MODULES = ("harness.tasks.gsm8k", "harness.tasks.mmlu", "harness.tasks.gpqa", "harness.tasks.mgsm")


def _imported_after(code: str) -> list[str]:
    probe = (f"import sys; {code}; "
             f"print(sorted(m for m in sys.modules if m in {TASK_MODULES + ('harness.results.schema',)!r}))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return ast.literal_eval(r.stdout.strip())


def test_the_config_and_run_start_up_import_no_task() -> None:
    assert _imported_after("import harness.config, harness.cli.run") == []


def test_asking_for_a_task_imports_that_task_only() -> None:
    got = _imported_after("from harness.tasks import registry; registry.kind('mmlu')")
    assert "harness.tasks.mmlu" in got and "harness.tasks.gsm8k" not in got and "harness.tasks.gpqa" not in got


def test_each_task_brings_its_own_recipes() -> None:
    from harness.tasks import gpqa, gsm8k, mgsm, mmlu

    mods = {"gsm8k": gsm8k, "mmlu": mmlu, "gpqa_diamond": gpqa, "mgsm_en": mgsm}
    assert registry.TASK_NAMES == tuple(mods)
    for name, mod in mods.items():
        assert registry.recipes_of(name) == mod.RECIPES
    assert registry.all_recipes() == tuple(dict.fromkeys(r for m in mods.values() for r in m.RECIPES))
    assert registry.default_recipe("gsm8k") == "sglang"
    with pytest.raises(DatasetError, match="unknown task 'hellaswag'"):
        registry.kind("hellaswag")
