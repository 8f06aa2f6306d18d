"""abh_simulator/jsonfmt.py: SGLang's ``[logprob, id, null]`` arrays written by numpy are the JSON the lists
would be (within the 12 decimals written), for any sizes, signs, widths and leading null positions."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from abh_simulator.jsonfmt import DECIMALS, fixed_numbers, position_entries


def test_position_entries_are_the_lists_json() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        n, k, skip = int(rng.integers(0, 6)), int(rng.integers(0, 5)), int(rng.integers(0, 3))
        lp = -rng.exponential(float(rng.choice([1e-4, 3.0, 40.0])), (n, k))
        if lp.size > 1:
            lp.flat[0], lp.flat[1] = 0.0, -0.0
        ids = rng.integers(0, 10 ** int(rng.integers(1, 7)), (n, k))
        got = orjson.loads(position_entries(lp, ids, skip))
        want = [None] * skip + [[[float(v), int(i), None] for v, i in zip(lp[r], ids[r], strict=True)]
                                for r in range(n)]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            if w is None:
                assert g is None
                continue
            assert [e[1:] for e in g] == [e[1:] for e in w]
            assert np.allclose([e[0] for e in g], [e[0] for e in w], rtol=0, atol=10.0 ** -DECIMALS)


def test_fixed_numbers_are_one_width_and_refuse_what_they_cannot_write() -> None:
    out = fixed_numbers(np.array([-2.5, 0.0, -0.0, -123.0004, 7.0]), 3)
    assert out is not None and out.tobytes() == b"  -2.500   0.000   0.000-123.000   7.000"
    assert fixed_numbers(np.array([1.0, np.nan]), 3) is None and fixed_numbers(np.array([1e300]), 0) is None
    assert position_entries(np.zeros((2, 2)), -np.ones((2, 2), dtype=np.int64), 0) is None  # no negative ids


@pytest.mark.parametrize("skip", [0, 1])
def test_no_positions(skip: int) -> None:
    assert orjson.loads(position_entries(np.zeros((0, 3)), np.zeros((0, 3), dtype=np.int64), skip)) == [None] * skip


def test_one_row_of_ids_is_the_same_ids_at_every_position() -> None:
    lp = -np.arange(12, dtype=float).reshape(3, 4) / 7
    ids = np.array([5, 50, 500, 5000])
    assert position_entries(lp, ids, 1) == position_entries(lp, np.tile(ids, (3, 1)), 1)
