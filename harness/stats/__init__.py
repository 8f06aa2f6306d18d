"""Statistics engine: pure, vectorised, seeded functions over numpy arrays (no servers, no I/O).

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
- :mod:`.paired`: the 2x2 table, exact / mid-p / asymptotic McNemar, Newcombe and paired bootstrap
  intervals (diagnostics);
- :mod:`.repeats`: per-question means, cluster bootstrap, discordance and the A/A noise band;
- :mod:`.mde`: MDEs (exact power of the test used; normal planning formulas) and repeats needed;
- :mod:`.group_sequential`: group-sequential boundaries (Lan-DeMets spending), looks, operating characteristics;
- :mod:`.launch_looks`: the sequential look statistic with the launch component;
- :mod:`.kld`: per-token divergence measures and the per-question divergence test;
- :mod:`.kld_launches`: the launch-level divergence test (B's launches vs A's);
- :mod:`.multiple`: Holm and Benjamini-Hochberg;
- :mod:`.verdict`: improved / regressed / equivalent / noninferior / inconclusive / not_comparable;
- :mod:`.simulate`: score matrices of every run design, for calibration.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names as the type checker sees them; at run time each comes from its owner on first use
    from .accuracy import compare_arms, describe_design, error_block, psi_aa_block, within_arm_psi
    from .consistent import ConsistentResult, consistent_paired, consistent_table
    from .equivalence import score_tost, t_tost
    from .errorgate import ErrorGate, ErrorRobust, error_gate, error_robust_test
    from .guards import design_effect, robust_effective_table, safe_mde_paired_exact
    from .kld_launches import LaunchDivergence, launch_divergence_test, launch_power, launches_needed
    from .launch_looks import decide_launch_look, launch_look, launch_look_estimate
    from .launches import ArmRuns, heterogeneity_q, launch_heterogeneity, launch_means, question_means
    from .launchvar import (
        LaunchAwareResult,
        LaunchVariance,
        launch_aware_test,
        planned_se,
        variance_components,
    )
    from .mde import (
        critical_counts,
        mde_floor,
        mde_paired,
        mde_paired_exact,
        mde_repeats,
        mde_t,
        mde_unpaired,
        min_detectable_discordant,
        n_needed_paired,
        power_at,
        power_paired_exact,
        repeats_needed,
        z_sum,
    )
    from .multiple import adjust, benjamini_hochberg, holm
    from .paired import (
        PairedTable,
        mcnemar_asymptotic,
        mcnemar_exact,
        mcnemar_midp,
        newcombe_paired_ci,
        paired_bootstrap_ci,
        paired_se,
        paired_table,
        paired_wald_ci,
    )
    from .proportions import (
        accuracy_bootstrap_ci,
        two_proportion_z_test,
        unpaired_diff_ci,
        wilson_interval,
        z_crit,
    )
    from .repeats import (
        LaunchBootstrap,
        cluster_bootstrap_ci,
        discordance,
        effective_repeats,
        launch_bootstrap,
        naive_run_bootstrap_ci,
        noise_band,
        per_question_means,
    )
    from .resample import (
        bca_interval,
        bootstrap_mean_ci,
        bootstrap_means,
        jackknife_means,
        percentile_interval,
    )
    from .signflip import signflip_test
    from .tango import effective_table, score_interval, score_p, score_z
    from .verdict import HYPOTHESES, VERDICTS, Evidence, Verdict, decide, format_p

#: each public name -> the submodule that owns it (imported when first asked for: `harness.config` reads
#: `harness.stats.verdict` alone, and a command that stops before any statistics never pays for scipy)
_OWNER: dict[str, str] = {
    "compare_arms": "accuracy", "describe_design": "accuracy", "error_block": "accuracy", "psi_aa_block": "accuracy",
    "within_arm_psi": "accuracy", "consistent_paired": "consistent", "consistent_table": "consistent",
    "ConsistentResult": "consistent", "score_tost": "equivalence", "t_tost": "equivalence", "error_gate": "errorgate",
    "error_robust_test": "errorgate", "ErrorGate": "errorgate", "ErrorRobust": "errorgate", "design_effect": "guards",
    "robust_effective_table": "guards", "safe_mde_paired_exact": "guards", "launch_divergence_test": "kld_launches",
    "launch_power": "kld_launches", "LaunchDivergence": "kld_launches", "launches_needed": "kld_launches",
    "decide_launch_look": "launch_looks", "launch_look": "launch_looks", "launch_look_estimate": "launch_looks",
    "ArmRuns": "launches", "heterogeneity_q": "launches", "launch_heterogeneity": "launches",
    "launch_means": "launches", "question_means": "launches", "launch_aware_test": "launchvar",
    "LaunchAwareResult": "launchvar", "LaunchVariance": "launchvar", "planned_se": "launchvar",
    "variance_components": "launchvar", "critical_counts": "mde", "mde_floor": "mde", "mde_paired": "mde",
    "mde_paired_exact": "mde", "mde_repeats": "mde", "mde_t": "mde", "mde_unpaired": "mde",
    "min_detectable_discordant": "mde", "n_needed_paired": "mde", "power_at": "mde", "power_paired_exact": "mde",
    "repeats_needed": "mde", "z_sum": "mde", "adjust": "multiple", "benjamini_hochberg": "multiple",
    "holm": "multiple", "mcnemar_asymptotic": "paired", "mcnemar_exact": "paired", "mcnemar_midp": "paired",
    "newcombe_paired_ci": "paired", "paired_bootstrap_ci": "paired", "paired_se": "paired", "paired_table": "paired",
    "paired_wald_ci": "paired", "PairedTable": "paired", "accuracy_bootstrap_ci": "proportions",
    "two_proportion_z_test": "proportions", "unpaired_diff_ci": "proportions", "wilson_interval": "proportions",
    "z_crit": "proportions", "cluster_bootstrap_ci": "repeats", "LaunchBootstrap": "repeats",
    "launch_bootstrap": "repeats", "discordance": "repeats",
    "effective_repeats": "repeats", "naive_run_bootstrap_ci": "repeats", "noise_band": "repeats",
    "per_question_means": "repeats", "bca_interval": "resample", "bootstrap_mean_ci": "resample",
    "bootstrap_means": "resample", "jackknife_means": "resample", "percentile_interval": "resample",
    "signflip_test": "signflip", "effective_table": "tango", "score_interval": "tango", "score_p": "tango",
    "score_z": "tango", "decide": "verdict", "Evidence": "verdict", "format_p": "verdict", "HYPOTHESES": "verdict",
    "Verdict": "verdict", "VERDICTS": "verdict",
}


def __getattr__(name: str) -> Any:
    """A public name, from its submodule (PEP 562); cached in the package once read."""
    mod = _OWNER.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_OWNER])


__all__ = [
    "accuracy_bootstrap_ci", "adjust", "ArmRuns", "bca_interval", "benjamini_hochberg", "bootstrap_mean_ci",
    "bootstrap_means", "cluster_bootstrap_ci", "launch_bootstrap", "LaunchBootstrap", "compare_arms", "consistent_paired", "consistent_table",
    "ConsistentResult", "critical_counts", "decide", "decide_launch_look", "describe_design", "design_effect",
    "discordance", "effective_repeats", "effective_table", "error_block", "error_gate", "error_robust_test",
    "ErrorGate", "ErrorRobust", "Evidence", "format_p", "heterogeneity_q", "holm", "HYPOTHESES", "jackknife_means",
    "launch_aware_test", "launch_divergence_test", "launch_heterogeneity", "launch_look", "launch_look_estimate",
    "launch_means", "launch_power", "LaunchAwareResult", "LaunchDivergence", "launches_needed", "LaunchVariance",
    "mcnemar_asymptotic", "mcnemar_exact", "mcnemar_midp", "mde_floor", "mde_paired", "mde_paired_exact",
    "mde_repeats", "mde_t", "mde_unpaired", "min_detectable_discordant", "n_needed_paired",
    "naive_run_bootstrap_ci", "newcombe_paired_ci", "noise_band", "paired_bootstrap_ci", "paired_se",
    "paired_table", "paired_wald_ci", "PairedTable", "per_question_means", "percentile_interval", "planned_se",
    "power_at", "power_paired_exact", "psi_aa_block", "question_means", "repeats_needed", "robust_effective_table",
    "safe_mde_paired_exact", "score_interval", "score_p", "score_tost", "score_z", "signflip_test", "t_tost",
    "two_proportion_z_test", "unpaired_diff_ci", "variance_components", "Verdict", "VERDICTS", "wilson_interval",
    "within_arm_psi", "z_crit", "z_sum",
]
