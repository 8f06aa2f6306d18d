"""``abh compare`` imports scipy.special without numpy's tooling submodules (f2py, testing), and numpy lists them
again afterwards: they still import, and the special functions are scipy's."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
{setup}
import numpy, scipy.special
listed = "testing" in dir(numpy) and "f2py" in numpy.__all__ and "test" in numpy.__all__
loaded = sorted(m for m in ("numpy.f2py", "numpy.testing") if m in sys.modules)
import numpy.testing
print(json.dumps({{"loaded": loaded, "listed": listed, "ndtri": scipy.special.ndtri(0.975).hex(),
                  "testing": hasattr(numpy.testing, "assert_array_equal")}}))
"""


def _probe(setup: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(setup=setup)], capture_output=True, text=True,
                         check=True)
    return dict(json.loads(out.stdout.splitlines()[-1]))  # after what the command printed


def test_compare_imports_scipy_special_without_numpys_tooling() -> None:
    got = _probe("from harness.cli import main\ntry:\n    main.main(['compare', '--help'])\nexcept SystemExit:\n"
                 "    pass")
    plain = _probe("")
    assert plain["loaded"] == ["numpy.f2py", "numpy.testing"]  # what scipy's namespace copy costs otherwise
    assert got["loaded"] == []
    assert got["listed"] is True and got["testing"] is True  # numpy as it was afterwards
    assert got["ndtri"] == plain["ndtri"]


def test_a_second_call_changes_nothing() -> None:
    got = _probe("from harness.util.scipy_import import import_special\nimport_special()\nimport_special()")
    assert got["loaded"] == [] and got["listed"] is True and got["testing"] is True
