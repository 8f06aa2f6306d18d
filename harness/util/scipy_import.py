"""``scipy.special`` imported without numpy's tooling submodules.

scipy's array-API layer copies every public name of numpy into its own namespace (``from numpy import *`` and
``getattr`` over ``dir(numpy)``); numpy loads its submodules lazily, so that copy imports the Fortran wrapper
generator (``numpy.f2py``) and the test helpers (``numpy.testing``, with unittest and importlib.metadata): about
half of scipy.special's import, for names no statistic here uses. While scipy.special is first imported, numpy
lists those names no more; afterwards it lists them again, and ``numpy.testing`` imports as ever. The special
functions are the same ufuncs either way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

#: numpy's lazily loaded tooling: the Fortran wrapper generator, the test helpers, numpy's own test runner
TOOLING = frozenset({"f2py", "testing", "test"})


def import_special() -> None:
    """Import ``scipy.special`` (once per process) with :data:`TOOLING` hidden from numpy's listings."""
    if "scipy.special" in sys.modules:
        return
    import numpy as np

    names: list[str] = np.__all__
    listing: Callable[[], list[str]] | None = np.__dict__.get("__dir__")
    np.__all__ = [n for n in names if n not in TOOLING]
    if listing is not None:
        np.__dir__ = lambda: [n for n in listing() if n not in TOOLING]  # type: ignore[method-assign]
    try:
        import scipy.special  # noqa: F401
    finally:
        np.__all__ = names
        if listing is not None:
            np.__dir__ = listing  # type: ignore[method-assign]
