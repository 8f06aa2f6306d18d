"""The bootstrap's means of several statistics at once are the same bits as the plain gather-and-mean over the
(resamples, questions, statistics) array: a faster evaluation must not move any stored interval."""

from __future__ import annotations

import numpy as np
import pytest

from harness.stats.resample import bootstrap_means


def _reference(x: np.ndarray, n_resamples: int, seed: int, max_elems: int) -> np.ndarray:
    """The definition: the same draws, chunk by chunk, gathered whole and averaged over the questions."""
    n = x.shape[0]
    k = int(np.prod(x.shape[1:], dtype=int)) if x.ndim > 1 else 1
    chunk = max(1, min(n_resamples, max_elems // (n * k) or 1))
    rng = np.random.default_rng(seed)
    out = np.empty((n_resamples,) + x.shape[1:])
    for start in range(0, n_resamples, chunk):
        m = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n), dtype=np.int32)
        out[start:start + m] = np.take(x, idx, axis=0).mean(axis=1)
    return out


@pytest.mark.parametrize("shape", [(257,), (257, 1), (257, 3), (1319, 6), (31, 2, 3)])
@pytest.mark.parametrize("max_elems", [1 << 12, 1 << 20])
def test_bootstrap_means_are_the_reference_bits(shape: tuple[int, ...], max_elems: int) -> None:
    gen = np.random.default_rng(7)
    x = gen.normal(size=shape) * gen.integers(0, 2, size=shape)  # many exact zeros among arbitrary floats
    x.reshape(shape[0], -1)[0, -1] = -0.0
    got = bootstrap_means(x, 1001, seed=3, max_elems=max_elems)
    want = _reference(x, 1001, 3, max_elems)
    assert got.shape == want.shape == (1001,) + shape[1:]
    assert np.array_equal(got.view(np.int64), want.view(np.int64))  # bit for bit, the sign of a zero included


@pytest.mark.parametrize("values", [
    [0.0, 1.0], [0.0, 0.5, 1.0], [-1.0, -0.5, 0.0, 0.5, 1.0], [0.0, 1 / 3, 2 / 3, 1.0], [-0.0, 0.0, 1.0],
    [0.0, 0.125, 40000.0], [0.0, 0.1], [0.0, 2.0**-12],
])
@pytest.mark.parametrize("columns", [0, 1, 4])
def test_outcomes_on_a_grid_give_the_reference_bits(values: list[float], columns: int) -> None:
    """0/1 outcomes, means of two runs and their differences are summed as integers: the same bits, whatever
    the values (a value off the grid, a huge one, a negative zero keep the float sums)."""
    gen = np.random.default_rng(11)
    shape = (523,) if columns == 0 else (523, columns)
    x = np.asarray(values)[gen.integers(0, len(values), size=shape)]
    if columns > 1:
        x[:, 1:] += gen.normal(size=(523, columns - 1))  # one column on the grid, the others arbitrary
    got = bootstrap_means(x, 997, seed=5, max_elems=1 << 14)
    assert np.array_equal(got.view(np.int64), _reference(x, 997, 5, 1 << 14).view(np.int64))


def test_the_same_resamples_asked_twice_are_the_same_and_the_callers_own() -> None:
    x = np.random.default_rng(2).random((400, 3))
    first = bootstrap_means(x, 500, seed=9)
    first[:] = -1.0  # a caller writing into its result changes nobody else's
    again = bootstrap_means(x, 500, seed=9)
    assert np.array_equal(again, _reference(x, 500, 9, 1 << 20))
    rng = np.random.default_rng(9)
    assert not np.array_equal(bootstrap_means(x, 500, seed=rng), bootstrap_means(x, 500, seed=rng))  # drawn on
    assert not np.array_equal(bootstrap_means(x, 500, seed=10), again)


@pytest.mark.parametrize("n_resamples", [256, 257, 2])
@pytest.mark.parametrize("columns", [0, 3])
def test_how_many_resamples_are_drawn_at_a_time_changes_no_bit(n_resamples: int, columns: int) -> None:
    """The resamples are drawn and summed in chunks of the evaluation's choosing (a chunk of one resample
    included: 256 = 255 + 1 for 257 questions): the means are the reference's, whatever its own chunking."""
    gen = np.random.default_rng(13)
    shape = (257,) if columns == 0 else (257, columns)
    x = gen.normal(size=shape)
    x.reshape(257, -1)[:, 0] = gen.integers(0, 2, size=257)  # a column on the grid beside float ones
    for max_elems in (1 << 8, 1 << 12, 1 << 20):
        got = bootstrap_means(x, n_resamples, seed=4, max_elems=max_elems)
        assert np.array_equal(got.view(np.int64), _reference(x, n_resamples, 4, 1 << 30).view(np.int64))
