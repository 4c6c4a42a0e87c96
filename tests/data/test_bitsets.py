"""Packed bitsets against plain numpy Boolean masks."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dpmine_server.data.bitsets import Bitset

SIZES = [0, 1, 7, 63, 64, 65, 127, 128, 129, 1000, 4099]


def _mask(n: int, density: float, seed: int) -> npt.NDArray[np.bool_]:
    return np.random.default_rng(seed).random(n) < density


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("density", [0.0, 0.3, 1.0])
def test_round_trip_and_count(n: int, density: float) -> None:
    mask = _mask(n, density, seed=n)
    bits = Bitset.from_bool_array(mask)
    assert bits.n_rows == n
    assert bits.words.shape == ((n + 63) // 64,)
    assert bits.count() == int(mask.sum())
    np.testing.assert_array_equal(bits.to_bool_array(), mask)
    np.testing.assert_array_equal(bits.to_indices(), np.flatnonzero(mask))


def test_row_layout_is_little_endian_bits_of_words() -> None:
    bits = Bitset.from_indices([0, 3, 64, 129], 130)
    assert bits.words.tolist() == [0b1001, 1, 2]


@pytest.mark.parametrize("n", SIZES)
def test_operators_match_numpy(n: int) -> None:
    a, b = _mask(n, 0.4, seed=1), _mask(n, 0.6, seed=2)
    x, y = Bitset.from_bool_array(a), Bitset.from_bool_array(b)
    np.testing.assert_array_equal((x & y).to_bool_array(), a & b)
    np.testing.assert_array_equal((x | y).to_bool_array(), a | b)
    np.testing.assert_array_equal((x - y).to_bool_array(), a & ~b)
    np.testing.assert_array_equal((~x).to_bool_array(), ~a)
    assert x.count_and(y) == int((a & b).sum())
    assert Bitset.intersection([x, y, ~y]).count() == 0
    assert Bitset.union([x, y]) == x | y


@pytest.mark.parametrize("n", SIZES)
def test_complement_keeps_tail_zero(n: int) -> None:
    full = ~Bitset.empty(n)
    assert full == Bitset.all_set(n)
    assert full.count() == n
    assert (~full).count() == 0
    if n % 64:
        assert int(full.words[-1]) == (1 << (n % 64)) - 1


@pytest.mark.parametrize(("n", "k"), [(1000, 3), (1000, 900), (64, 64), (200, 0)])
def test_from_indices_sparse_and_dense_paths(n: int, k: int) -> None:
    rows = np.random.default_rng(k).integers(0, n, size=k)
    expected = np.zeros(n, dtype=bool)
    expected[rows] = True
    bits = Bitset.from_indices(rows, n)
    np.testing.assert_array_equal(bits.to_bool_array(), expected)
    assert bits.count() == len(set(rows.tolist()))


def test_from_indices_rejects_out_of_range_rows() -> None:
    with pytest.raises(ValueError, match="row indices"):
        Bitset.from_indices([5], 5)
    with pytest.raises(ValueError, match="row indices"):
        Bitset.from_indices([-1], 5)


def test_immutable_words() -> None:
    bits = Bitset.from_bool_array(np.array([True, False, True]))
    with pytest.raises(ValueError, match="read-only"):
        bits.words[0] = 0
    assert bits.count() == 2


def test_constructor_rejects_bad_words() -> None:
    with pytest.raises(ValueError, match="past n_rows"):
        Bitset(np.array([0b1000], dtype=np.uint64), 3)
    with pytest.raises(ValueError, match="words"):
        Bitset(np.zeros(2, dtype=np.uint64), 3)
    signed: npt.NDArray[Any] = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match="words"):
        Bitset(signed, 3)


def test_length_mismatch_is_an_error_without_the_lengths() -> None:
    with pytest.raises(ValueError, match="different numbers of rows") as info:
        _ = Bitset.empty(10) & Bitset.empty(11)
    assert "10" not in str(info.value)
    assert "11" not in str(info.value)
    assert "10" not in repr(Bitset.empty(10))


def test_equality_and_hash() -> None:
    a = Bitset.from_indices([1, 2], 70)
    b = Bitset.from_bool_array(np.isin(np.arange(70), [1, 2]))
    assert a == b
    assert hash(a) == hash(b)
    assert a != Bitset.from_indices([1, 2], 71)
    with pytest.raises(ValueError, match="at least one"):
        Bitset.intersection([])


def test_count_on_a_million_rows() -> None:
    mask = _mask(1_000_003, 0.5, seed=7)
    bits = Bitset.from_bool_array(mask)
    assert bits.count() == int(mask.sum())
    assert (~bits).count() == 1_000_003 - int(mask.sum())
