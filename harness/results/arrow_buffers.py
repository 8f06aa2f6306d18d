"""numpy arrays to and from pyarrow arrays through their buffers: pyarrow's own conversions import pandas the
first time they run (~44 MiB kept to the end of the run); through the buffers, no Python object is made per
value.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _single(arr: Any) -> Any:
    """An ``Array`` (a ``ChunkedArray``'s chunks joined)."""
    return arr.combine_chunks() if hasattr(arr, "combine_chunks") else arr


def valid(arr: Any) -> np.ndarray | None:
    """Which entries are not null (bool, one per entry), or None when none is null."""
    arr = _single(arr)
    if not arr.null_count:
        return None
    n = len(arr)
    bitmap = arr.buffers()[0]
    if bitmap is None:  # a null-typed array: every entry is null
        return np.zeros(n, dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + n].astype(bool)


def numbers(arr: Any, dtype: Any, fill: Any = None) -> np.ndarray:
    """A fixed-width column (int32, float32, ...) as a numpy array of ``dtype``; a null entry is ``fill``
    (None: left as its buffer holds it). A view of pyarrow's buffer when nothing is converted (read-only)."""
    arr = _single(arr)
    n = len(arr)
    own = _dtype_of(arr.type)
    data = arr.buffers()[1]
    out = np.empty(0, own) if data is None or n == 0 else \
        np.frombuffer(data, dtype=own, count=n, offset=arr.offset * own.itemsize)
    out = out.astype(dtype, copy=False)
    ok = valid(arr) if fill is not None else None
    if ok is not None:
        out = np.where(ok, out, np.asarray(fill, dtype=dtype)).astype(dtype, copy=False)
    return out


def _dtype_of(t: Any) -> np.dtype:
    from harness.results.arrow import pa

    for kind, dt in ((pa.int32(), np.int32), (pa.int64(), np.int64), (pa.float32(), np.float32),
                     (pa.float64(), np.float64), (pa.int16(), np.int16), (pa.int8(), np.int8),
                     (pa.uint32(), np.uint32), (pa.uint64(), np.uint64)):
        if t.equals(kind):
            return np.dtype(dt)
    raise TypeError(f"not a fixed-width number column: {t}")


def list_offsets(arr: Any) -> np.ndarray:
    """A list column's offsets (int64, one more than its entries) into its child values (``list_values``)."""
    arr = _single(arr)
    n = len(arr)
    buf = arr.buffers()[1]
    if buf is None or n == 0:
        return np.zeros(n + 1, dtype=np.int64)
    return np.frombuffer(buf, dtype=np.int32, count=n + 1, offset=arr.offset * 4).astype(np.int64)


def list_values(arr: Any, dtype: Any) -> np.ndarray:
    """A list column's child values (all of them, as :func:`list_offsets` indexes them) as numpy."""
    return numbers(_single(arr).values, dtype)


def array(values: np.ndarray, null: np.ndarray | None = None) -> Any:
    """A 1-d numpy array of fixed-width numbers as a pyarrow array (``null``: True where the entry is null)."""
    from harness.results.arrow import pa

    values = np.ascontiguousarray(values)
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, values.size, [_bitmap(null), pa.py_buffer(values)])


def list_array(offsets: np.ndarray, values: Any, null: np.ndarray | None = None) -> Any:
    """A ``list<values' type>`` array: entry i is ``values[offsets[i]:offsets[i + 1]]`` (``values`` a pyarrow
    array, ``offsets`` int32-sized), null where ``null`` is True."""
    from harness.results.arrow import pa

    offs = np.ascontiguousarray(offsets, dtype=np.int32)
    return pa.Array.from_buffers(pa.list_(values.type), offs.size - 1, [_bitmap(null), pa.py_buffer(offs)],
                                 children=[values])


def _bitmap(null: np.ndarray | None) -> Any:
    from harness.results.arrow import pa

    if null is None or not np.any(null):
        return None
    return pa.py_buffer(np.packbits(~np.asarray(null, dtype=bool), bitorder="little"))


def release() -> None:
    """Hand the memory pyarrow's pool and the C heap freed back to the system (glibc keeps the pages of freed
    arrays between live blocks, so the process's RSS would stay at the pass's peak)."""
    from harness.results.arrow import pa

    pa.default_memory_pool().release_unused()
    trim_heap()


def trim_heap() -> bool:
    """glibc's ``malloc_trim(0)``: the heap's free pages back to the system (False where there is no glibc)."""
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own symbols: libc's where it is glibc
    except (OSError, AttributeError):  # musl, macOS: no malloc_trim
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True
