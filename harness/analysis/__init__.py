"""Stored evals turned into conclusions (never a server): :mod:`~harness.analysis.comparison` (``comparison.json``),
:mod:`~harness.analysis.divergence` (token-level divergence), :mod:`~harness.analysis.cost` (GPU-hours),
:mod:`~harness.analysis.planning` (``abh power``'s plan), :mod:`~harness.analysis.sweep` (a sweep's adjusted
table), :mod:`~harness.analysis.gate` (``--fail-on`` and the exit code of a comparison),
:mod:`~harness.analysis.determinism` (identical outputs across an arm's passes)."""
