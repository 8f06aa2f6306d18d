"""Statistics engine: pure, vectorised, seeded functions over numpy arrays (no servers, no I/O).

- :mod:`.proportions`: per-arm Wilson and bootstrap intervals, unpaired difference;
- :mod:`.paired`: the 2x2 table, exact / mid-p / asymptotic McNemar, Newcombe score and paired bootstrap
  (percentile, BCa) intervals of Δ = (b_only - a_only) / n;
- :mod:`.repeats`: per-question means over R runs, cluster bootstrap, within-question permutation test,
  A/A discordance ψ_AA and the noise band of Δ;
- :mod:`.power`: MDE (unpaired, paired, repeats) and the repeats needed;
- :mod:`.equivalence`: TOST non-inferiority and equivalence (score-interval form for one run per arm,
  z-test form for per-question differences);
- :mod:`.multiple`: Holm and Benjamini-Hochberg;
- :mod:`.verdict`: improved / regressed / equivalent / inconclusive / not_comparable.
"""

from .equivalence import score_tost, tost
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
from .power import (
    mde_floor,
    mde_paired,
    mde_repeats,
    mde_unpaired,
    min_detectable_discordant,
    n_needed_paired,
    power_at,
    repeats_needed,
    z_sum,
)
from .proportions import (
    accuracy_bootstrap_ci,
    two_proportion_z_test,
    unpaired_diff_ci,
    wilson_interval,
    z_crit,
)
from .repeats import (
    cluster_bootstrap_ci,
    discordance,
    effective_repeats,
    naive_run_bootstrap_ci,
    noise_band,
    per_question_means,
    permutation_test,
    psi_aa,
)
from .resample import bca_interval, bootstrap_mean_ci, bootstrap_means, jackknife_means, percentile_interval
from .verdict import VERDICTS, Verdict, decide, format_p

__all__ = [
    "accuracy_bootstrap_ci", "adjust", "bca_interval", "benjamini_hochberg", "bootstrap_mean_ci",
    "bootstrap_means", "cluster_bootstrap_ci", "decide", "discordance", "effective_repeats", "format_p",
    "holm", "jackknife_means", "mcnemar_asymptotic", "mcnemar_exact", "mcnemar_midp", "mde_floor",
    "mde_paired", "mde_repeats", "mde_unpaired", "min_detectable_discordant", "n_needed_paired",
    "naive_run_bootstrap_ci", "newcombe_paired_ci", "noise_band", "paired_bootstrap_ci", "paired_se",
    "paired_table", "paired_wald_ci", "PairedTable", "per_question_means", "percentile_interval",
    "permutation_test", "power_at", "psi_aa", "repeats_needed", "score_tost", "tost", "two_proportion_z_test",
    "unpaired_diff_ci", "Verdict", "VERDICTS", "wilson_interval", "z_crit", "z_sum",
]
