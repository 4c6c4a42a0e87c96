"""Immutable packed bitsets over the rows of a dataset (DESIGN.md "Data at rest and in memory").

Error messages and reprs never mention ``n_rows``: it is private when it is the dataset's size.
Row ``r`` is bit ``r % 64`` of word ``r // 64``; the bits past ``n_rows`` in the last word (the
tail) are always zero, so :meth:`Bitset.count` is a plain popcount of the words. Supports of
literals and queries (ALGORITHMS.md §1.1) are bitsets; counting them is the hot path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["Bitset", "WordArray"]

WordArray = npt.NDArray[np.uint64]

_WORD_BITS: Final = 64
_ALL_ONES: Final = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def _n_words(n_rows: int) -> int:
    return (n_rows + _WORD_BITS - 1) // _WORD_BITS


def _tail_mask(n_rows: int) -> np.uint64:
    """Mask of the valid bits of the last word (all ones when n_rows is a multiple of 64)."""
    used = n_rows % _WORD_BITS
    return _ALL_ONES if used == 0 else np.uint64((1 << used) - 1)


def _frozen(words: WordArray) -> WordArray:
    words.flags.writeable = False
    return words


class Bitset:
    """A fixed-length set of rows, stored as packed ``np.uint64`` words. Immutable."""

    __slots__ = ("_n_rows", "_words")

    def __init__(self, words: WordArray, n_rows: int) -> None:
        """Wrap ``words`` (taken over, not copied); prefer the ``from_*`` constructors."""
        if n_rows < 0:
            raise ValueError("n_rows must be non-negative")
        if words.dtype != np.uint64 or words.shape != (_n_words(n_rows),):
            raise ValueError("expected a one-dimensional uint64 array of ceil(n_rows / 64) words")
        if n_rows % _WORD_BITS and words[-1] & ~_tail_mask(n_rows):
            raise ValueError("bits past n_rows must be zero")
        self._words = _frozen(words)
        self._n_rows = n_rows

    # -- constructors ---------------------------------------------------------------------------

    @classmethod
    def from_bool_array(cls, mask: npt.NDArray[np.bool_]) -> Bitset:
        """The rows where ``mask`` is true."""
        flat = np.asarray(mask, dtype=np.bool_)
        if flat.ndim != 1:
            raise ValueError(f"mask must be one-dimensional, got shape {flat.shape}")
        n_rows = int(flat.shape[0])
        packed = np.packbits(flat, bitorder="little")
        padded = np.zeros(_n_words(n_rows) * 8, dtype=np.uint8)
        padded[: packed.shape[0]] = packed
        words = padded.view("<u8").astype(np.uint64, copy=False)
        return cls(words, n_rows)

    @classmethod
    def from_indices(cls, indices: npt.ArrayLike, n_rows: int) -> Bitset:
        """The rows listed in ``indices`` (duplicates allowed; each must be in [0, n_rows))."""
        rows = np.asarray(indices, dtype=np.int64).ravel()
        if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= n_rows):
            raise ValueError("row indices must lie in [0, n_rows)")
        if rows.size * _WORD_BITS >= n_rows:
            mask = np.zeros(n_rows, dtype=np.bool_)
            mask[rows] = True
            return cls.from_bool_array(mask)
        words = np.zeros(_n_words(n_rows), dtype=np.uint64)
        bits = np.left_shift(np.uint64(1), (rows % _WORD_BITS).astype(np.uint64))
        np.bitwise_or.at(words, rows // _WORD_BITS, bits)
        return cls(words, n_rows)

    @classmethod
    def all_set(cls, n_rows: int) -> Bitset:
        """Every row."""
        words = np.full(_n_words(n_rows), _ALL_ONES, dtype=np.uint64)
        if words.size:
            words[-1] = _tail_mask(n_rows)
        return cls(words, n_rows)

    @classmethod
    def empty(cls, n_rows: int) -> Bitset:
        """No row."""
        return cls(np.zeros(_n_words(n_rows), dtype=np.uint64), n_rows)

    @classmethod
    def intersection(cls, bitsets: Iterable[Bitset]) -> Bitset:
        """AND of one or more bitsets, accumulated in place (one allocation)."""
        return cls._reduce(bitsets, np.bitwise_and)

    @classmethod
    def union(cls, bitsets: Iterable[Bitset]) -> Bitset:
        """OR of one or more bitsets, accumulated in place (one allocation)."""
        return cls._reduce(bitsets, np.bitwise_or)

    @classmethod
    def _reduce(cls, bitsets: Iterable[Bitset], op: np.ufunc) -> Bitset:
        iterator = iter(bitsets)
        first = next(iterator, None)
        if first is None:
            raise ValueError("need at least one bitset")
        acc = first._words.copy()
        for other in iterator:
            first._check_same_length(other)
            op(acc, other._words, out=acc)
        return cls(acc, first._n_rows)

    # -- accessors ------------------------------------------------------------------------------

    @property
    def n_rows(self) -> int:
        """Number of rows the bitset ranges over (private when it is the dataset's row count)."""
        return self._n_rows

    @property
    def words(self) -> WordArray:
        """The packed words (read-only)."""
        return self._words

    @property
    def nbytes(self) -> int:
        """Memory held by the words."""
        return int(self._words.nbytes)

    def count(self) -> int:
        """Number of rows in the set (popcount)."""
        return int(np.bitwise_count(self._words).sum(dtype=np.int64))

    def count_and(self, other: Bitset) -> int:
        """``(self & other).count()``."""
        self._check_same_length(other)
        return int(np.bitwise_count(self._words & other._words).sum(dtype=np.int64))

    def to_bool_array(self) -> npt.NDArray[np.bool_]:
        """The rows as a Boolean mask of length n_rows."""
        as_bytes = self._words.astype("<u8", copy=False).view(np.uint8)
        return np.unpackbits(as_bytes, count=self._n_rows, bitorder="little").astype(np.bool_)

    def to_indices(self) -> npt.NDArray[np.int64]:
        """The rows as sorted indices."""
        return np.flatnonzero(self.to_bool_array()).astype(np.int64, copy=False)

    # -- operators ------------------------------------------------------------------------------

    def _check_same_length(self, other: Bitset) -> None:
        if self._n_rows != other._n_rows:
            raise ValueError("bitsets over different numbers of rows")

    def __and__(self, other: Bitset) -> Bitset:
        self._check_same_length(other)
        return Bitset(self._words & other._words, self._n_rows)

    def __or__(self, other: Bitset) -> Bitset:
        self._check_same_length(other)
        return Bitset(self._words | other._words, self._n_rows)

    def __sub__(self, other: Bitset) -> Bitset:
        """And-not: rows of ``self`` that are not in ``other``."""
        self._check_same_length(other)
        return Bitset(self._words & ~other._words, self._n_rows)

    def __invert__(self) -> Bitset:
        words = ~self._words
        if words.size:
            words[-1] &= _tail_mask(self._n_rows)
        return Bitset(words, self._n_rows)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bitset):
            return NotImplemented
        return self._n_rows == other._n_rows and bool(np.array_equal(self._words, other._words))

    def __hash__(self) -> int:
        return hash((self._n_rows, self._words.tobytes()))

    def __repr__(self) -> str:
        # No n_rows here: a repr can end up in a log line or an error message.
        return "Bitset(...)"
