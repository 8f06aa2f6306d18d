"""What abh stores and how: :mod:`~harness.results.schema` (the registry of every stored kind, its version,
its typed model and its one loader and writer), :mod:`~harness.results.records` (typed records and their one
serialisation), :mod:`~harness.results.eval_store` (an eval directory: samples as they arrive, the resume
rule, the one reader of its scores), :mod:`~harness.results.integrity` (rows checked before they are counted),
:mod:`~harness.results.dirlock` (one process per directory), :mod:`~harness.results.token_store` (per-token
scores, parquet) and :mod:`~harness.results.fileio` (atomic writes; an unwritable output named in one line)."""
