"""pyarrow as abh uses it: the one module that imports it, so that its buffers come from the C heap numpy's
arrays and Python's objects come from.

pyarrow's default pool (mimalloc) keeps what a pass's reads and writes free for pyarrow's own next allocations,
apart from that heap: the demo's ``abh run`` peaked ~35 MiB higher with it (273-277 MiB against 237-239 MiB,
the same run on the same machine). From the system allocator, the buffers pyarrow frees serve the numpy arrays
that follow, and ``malloc_trim`` hands the rest back (:func:`harness.results.arrow_buffers.release`). A pool
named in ``ARROW_DEFAULT_MEMORY_POOL`` is left as asked. Imported lazily by the code that reads or writes
parquet: pyarrow costs ~30 MiB and 0.1 s to import.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

if "ARROW_DEFAULT_MEMORY_POOL" not in os.environ:
    pa.set_memory_pool(pa.system_memory_pool())

__all__ = ["pa", "pq"]
