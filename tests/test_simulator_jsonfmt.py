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


def test_a_requests_items_written_at_once_read_as_each_written_alone() -> None:
    """write_pending (every item of a request by one call) answers what each item's own arrays say: the same
    values and ids, whatever the other items' widths; an item numpy cannot write is written as lists."""
    from abh_simulator.protocol import Pending, _fragments, write_pending

    rng = np.random.default_rng(5)
    items = []
    for n, k, scale in ((7, 3, 1.0), (1, 3, 250.0), (12, 3, 0.01), (5, 2, 3.0), (4, 3, 1.0)):
        lp = np.round(-rng.exponential(scale, (n, k)), DECIMALS)
        ids = rng.integers(0, 10 ** int(rng.integers(1, 7)), (n, k))
        items.append((lp, ids if k == 3 else ids[0], int(rng.integers(0, n + 1))))
    items[4][0][1, 1] = np.nan  # not writable by numpy: lists
    outs, pending = [], []
    for lp, ids, n_rows in items:
        out: dict = {}
        pending.append(Pending(out, "in", "out", lp, np.broadcast_to(ids, lp.shape), n_rows))
        outs.append(out)
    write_pending(pending)
    for (lp, ids, n_rows), out in zip(items, outs, strict=True):
        alone = _fragments(lp, ids, n_rows)
        got = [orjson.loads(orjson.dumps(out[key])) for key in ("in", "out")]
        if alone is None:  # the NaN item: as lists, NaN written as null by orjson
            assert got[0][0] is None and len(got[0]) == n_rows + 1 and len(got[1]) == lp.shape[0] - n_rows
            continue
        assert got == [orjson.loads(orjson.dumps(f)) for f in alone]
        assert got[0][0] is None and [e[1] for row in got[0][1:] + got[1] for e in row] == \
            np.broadcast_to(ids, lp.shape).reshape(-1).tolist()


def test_own_entries_are_the_lists_json() -> None:
    from abh_simulator.jsonfmt import own_entries

    rng = np.random.default_rng(4)
    for n in (0, 1, 7, 300):
        lp = -rng.exponential(3.0, n)
        if n:
            lp[0] = -0.0
        ids = rng.integers(0, 10 ** 5, n)
        got = orjson.loads(own_entries(lp, ids, 17))
        assert got[0] == [None, 17, None] and len(got) == n + 1
        assert [e[1:] for e in got[1:]] == [[int(i), None] for i in ids]
        assert np.allclose([e[0] for e in got[1:]], lp, rtol=0, atol=10.0 ** -DECIMALS)
    assert own_entries(np.array([np.nan]), np.array([3]), 1) is None


def _written(v: float, decimals: int) -> str:
    """One value as :func:`fixed_numbers` writes it, one at a time by Python's integers (an independent reference)."""
    scaled = int(np.rint(abs(v) * 10 ** decimals))
    whole, frac = divmod(scaled, 10 ** decimals)
    sign = "-" if v < 0 and scaled > 0 else ""
    return sign + str(whole) + (f".{frac:0{decimals}d}" if decimals else "")


@pytest.mark.parametrize("decimals", [0, 1, 3, 4, 5, 8, DECIMALS, 13])
def test_fixed_numbers_write_every_digit_as_python_does(decimals: int) -> None:
    rng = np.random.default_rng(decimals)
    for scale in (1e-9, 1e-3, 1.0, 30.0, 1e4, 1e6):
        v = rng.standard_normal(400) * scale
        v[:4] = [0.0, -0.0, 10.0 ** -decimals, 9999.5]
        out = fixed_numbers(v, decimals)
        if np.abs(v).max() * 10.0 ** decimals >= 2.0 ** 62:  # beyond int64's exact integers: refused
            assert out is None
            continue
        assert out is not None
        width = out.shape[1]
        assert [row.tobytes().decode() for row in out] == [_written(x, decimals).rjust(width) for x in v]
