"""Results as the documents abh stores: the tests assert on the JSON a user's script reads (field names are a
contract), so a computed record is turned into its stored form first."""

from __future__ import annotations

from typing import Any

from harness.analysis.comparison import compare_dirs
from harness.analysis.divergence import compute_divergence, divergence_of_dirs
from harness.results import schema
from harness.results.records import to_doc


def doc(record: Any, kind: str | None = None) -> Any:
    """The stored form of ``record`` (stamped with ``kind`` and its schema_version when given)."""
    out = to_doc(record)
    return schema.stamp(kind, out) if kind else out


def compare_doc(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """comparison.json of :func:`harness.analysis.comparison.compare_dirs`."""
    return doc(compare_dirs(*args, **kwargs), schema.COMPARISON)


def divergence_doc(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """comparison.json's ``divergence`` of :func:`harness.analysis.divergence.compute_divergence`."""
    return doc(compute_divergence(*args, **kwargs))


def divergence_of_dirs_doc(*args: Any, **kwargs: Any) -> dict[str, Any] | None:
    d = divergence_of_dirs(*args, **kwargs)
    return None if d is None else doc(d)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _arm(acc: float) -> dict[str, Any]:
    return {"accuracy": acc, "wilson": [acc, acc], "bootstrap": [acc, acc], "repeats": [acc], "n_runs": 1,
            "launches": ["x-1"], "error_rate": 0.0, "dirs": []}


COMPARISON_DEFAULTS: dict[str, Any] = {
    "simulated": False, "hypothesis": "superiority", "verdict": "inconclusive", "verdict_reason": "", "test": None,
    "p": None, "test_alpha": None, "p_floor": None, "n": 100, "n_total": 100, "dropped_errors": 0, "error_rate": 0.0,
    "error_rate_per_run": {}, "max_error_rate": 0.02, "error_rate_exceeded": False,
    "errors": {"rate_a": 0.0, "rate_b": 0.0, "unanswered_a": 0, "unanswered_b": 0, "test": "", "p": 1.0},
    "failures": [], "alpha": 0.05, "seed": 0, "n_resamples": 1000, "dataset_sha256": None, "recipe": None,
    "design": {"kind": "one run per arm", "launches": {"a": 1, "b": 1}, "passes_per_launch": {"a": [1], "b": [1]},
               "unit": "question", "launch_heterogeneity": None, "cannot_resolve": None, "notes": []},
    "arms": {"a": _arm(0.9), "b": _arm(0.9)}, "aa_dirs": [], "table_source": "one run per arm", "both": 90.0,
    "a_only": 0.0, "b_only": 0.0, "neither": 10.0, "psi": 0.0, "delta": 0.0, "delta_se": 0.0, "delta_ci": [0.0, 0.0],
    "delta_ci_level": 0.95, "delta_ci_method": "", "delta_ci_unpaired": [0.0, 0.0], "psi_aa": None,
    "psi_aa_per_arm": {}, "psi_aa_source": None, "noise_band": None, "repeats_effective": 1.0, "mde": None,
    "mde_method": "", "mde_unpaired": 0.05, "detectable_floor": 0.05, "margin": None, "min_effect": None,
    "tost": None, "warnings": [], "flips": [], "diagnostics": {},
}


def comparison(**over: Any) -> Any:
    """A complete :class:`~harness.results.schema.Comparison` with what a test sets (nested dicts merge into
    the defaults: ``arms={"b": {"accuracy": 0.95}}``)."""
    return schema.Comparison.from_doc(_merge(COMPARISON_DEFAULTS, over))


def tost(**over: Any) -> dict[str, Any]:
    """A complete ``tost`` block for :func:`comparison`."""
    return _merge({"method": "Tango score test", "margin": 0.01, "alpha": 0.05, "p_noninferiority": 1.0,
                   "p_nonsuperiority": 1.0, "p_equivalence": 1.0, "ci": [0.0, 0.0], "ci_level": 0.9,
                   "noninferiority_alpha": 0.025, "noninferior": False, "equivalent": False}, over)
