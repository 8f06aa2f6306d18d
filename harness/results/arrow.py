"""pyarrow as abh uses it: the one module that imports it, so that its buffers come from the C heap numpy's
arrays come from (pyarrow's own mimalloc pool keeps what a pass frees apart: the demo peaked ~35 MiB higher).

pyarrow's C++ code reads its default pool from ``ARROW_DEFAULT_MEMORY_POOL`` once, on first use: the variable
is set for that moment and removed again (the servers abh launches inherit the environment as it was); a pool
the user names there is kept. The commands import this module before any other thread runs (setting a variable
while another thread reads the environment is unsafe in C); the rest import it lazily (~30 MiB and 0.1 s).
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
