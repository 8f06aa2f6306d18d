"""pyarrow as abh uses it: the one module that imports it, so that its buffers come from the C heap numpy's
arrays and Python's objects come from.

pyarrow's default pool (mimalloc) keeps what a pass's reads and writes free for pyarrow's own next allocations,
apart from that heap: the demo's ``abh run`` peaked ~35 MiB higher with it (267-277 MiB against 230-239 MiB,
the same run on the same machine). From the system allocator, the buffers pyarrow frees serve the numpy arrays
that follow, and ``malloc_trim`` hands the rest back (:func:`harness.results.arrow_buffers.release`).

pyarrow's C++ code (the parquet reader and writer) takes its default pool from ``ARROW_DEFAULT_MEMORY_POOL``,
read once, on its first use (``pa.set_memory_pool`` reaches only pyarrow's Python calls): the variable is set
for that moment and removed again, so the servers abh launches inherit the environment as it was. A pool the
user names there is kept. The commands import this module before any other thread runs (setting a variable
while another thread reads the environment is unsafe in C); the rest import it lazily (pyarrow costs ~30 MiB
and 0.1 s to import).
"""

from __future__ import annotations

import os

VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
_ASKED = VARIABLE in os.environ
if not _ASKED:
    os.environ[VARIABLE] = "system"
try:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pa.default_memory_pool()  # the C++ default pool, made now from the variable
finally:
    if not _ASKED:
        del os.environ[VARIABLE]

__all__ = ["pa", "pq"]
