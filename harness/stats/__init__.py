"""Statistics engine: pure, vectorised, seeded functions over numpy arrays (no servers, no I/O). The package
names what the analysis uses; everything else is imported from its module.

- :mod:`.accuracy`: the comparison of two arms' score matrices: design, test, interval, errors, verdict;
- :mod:`.launchvar`: the accuracy test with a launch component estimated from every launch (A, A/A, B);
- :mod:`.consistent`: the question-level test whose p and interval never disagree (no launch replication);
- :mod:`.errorgate`: do request errors depend on the arm? (drop the unanswered questions, or bound);
- :mod:`.guards`: the design effect, effective table and exact MDE guarded against round-off and overflow;
- :mod:`.launches`: runs grouped by server launch, per-question arm means, launch heterogeneity;
- :mod:`.signflip`: the paired sign-flip test over questions (exact, mid-p);
- :mod:`.tango`: Tango's score test and interval of the paired Δ, the effective table of repeats;
- :mod:`.equivalence`: non-inferiority and equivalence (TOST) by the score test or a t-test;
- :mod:`.proportions`: per-arm Wilson and bootstrap intervals, unpaired difference;
- :mod:`.paired`: the 2x2 table, exact and mid-p McNemar, the paired bootstrap interval;
- :mod:`.repeats`: per-question means, cluster bootstrap, discordance and the A/A noise band;
- :mod:`.mde`: MDEs (exact power of the test used; normal planning formulas) and repeats needed;
- :mod:`.group_sequential`: group-sequential boundaries (Lan-DeMets spending), looks, operating characteristics;
- :mod:`.launch_looks`: the sequential look statistic with the launch component;
- :mod:`.kld`: per-token divergence measures and the per-question divergence test;
- :mod:`.kld_launches`: the launch-level divergence test (B's launches vs A's);
- :mod:`.multiple`: Holm and Benjamini-Hochberg;
- :mod:`.verdict`: improved / regressed / equivalent / noninferior / inconclusive / not_comparable.
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
