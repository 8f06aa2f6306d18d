"""Statistics engine: pure, vectorised, seeded functions over numpy arrays (no servers, no I/O), one method
per module. The package names what the analysis uses; everything else is imported from its module.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the public names, once: at run time each comes from its owner on first use (``harness.config``
    # reads ``harness.stats.verdict`` alone, and a command that stops before any statistics never pays for scipy)
    from .accuracy import compare_arms, psi_aa_block, within_arm_psi
    from .consistent import consistent_paired
    from .launches import ArmRuns
    from .launchvar import launch_aware_test
    from .mde import (
        mde_floor,
        mde_paired,
        mde_repeats,
        mde_unpaired,
        min_detectable_discordant,
        n_needed_paired,
        repeats_needed,
    )
    from .multiple import adjust
    from .paired import mcnemar_exact, mcnemar_midp, paired_bootstrap_ci, paired_table
    from .proportions import accuracy_bootstrap_ci, unpaired_diff_ci, wilson_interval
    from .repeats import LaunchBootstrap, discordance, effective_repeats, launch_bootstrap, noise_band
    from .signflip import signflip_test
    from .verdict import Verdict, format_p


@cache
def _owners() -> dict[str, str]:
    """Each public name -> the submodule that owns it, read from the imports above."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If))
    return {a.name: str(imp.module) for imp in block.body if isinstance(imp, ast.ImportFrom) for a in imp.names}


def __getattr__(name: str) -> Any:
    """A public name, from its submodule (PEP 562); cached in the package once read."""
    if name == "__all__":
        return sorted(_owners())
    mod = _owners().get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_owners()])
