"""Token ids held as shared int objects (a list of ids that reuses one int object per value)."""

from __future__ import annotations


def shared_ids(ids: list[int], pool: dict[int, int]) -> list[int]:
    """``ids`` with each id the one int object ``pool`` holds for it (added if new): a list of shared ints
    costs 8 bytes an id, of its own ints 36."""
    get = pool.setdefault
    return list(map(get, ids, ids))
