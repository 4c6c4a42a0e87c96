"""The sorted order of a numeric column (ALGORITHMS.md §1.4: the operations that sweep
thresholds read a column's rows by increasing value), by an LSD radix sort compiled with numba.
PRIVATE: the order is a function of the values.

**Keys.** Every double maps to a 64-bit unsigned key that is strictly increasing in the value
as ``<`` sees it: the IEEE-754 bits with the sign bit set for a non-negative value, all bits
flipped for a negative one (a negative double with a larger magnitude has larger bits); -0.0
takes +0.0's key (``-0.0 < 0.0`` is false) and every NaN, of either sign, the largest key,
``2^64 − 1``, which no number reaches (+inf's key is ``0xFFF0…0``).

**Sort.** Four stable counting-sort passes over the keys' 16-bit digits, least significant
first; a pass whose digit is the same on every key moves nothing and is skipped. By induction,
after the pass over digit d the rows are sorted by their keys' low 16(d+1) bits, ties in row
order, so after the last pass by the whole key with ties in row order: **the order equals
``np.argsort(values, kind="stable")``** (NaN last there too) once the NaN rows are cut off.
O(n) time in four passes (numpy's stable sort of doubles is a comparison sort, about 3× slower
at 10^7 rows, measured in ``bench/README.md``), O(n) extra memory: two key buffers and two order
buffers of n entries.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from dpmine_server.compiled import compiled

__all__ = ["stable_value_order"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
KeyArray = npt.NDArray[np.uint64]

_DIGIT_BITS: Final = 16
_PASSES: Final = 64 // _DIGIT_BITS
_BUCKETS: Final = 1 << _DIGIT_BITS


@compiled
def _sortable_keys(values: FloatArray) -> KeyArray:
    """The module docstring's keys: increasing in the value, -0.0 as 0.0, NaN largest."""
    keys = np.empty(values.size, np.uint64)
    bits = values.view(np.uint64)
    sign = np.uint64(1) << np.uint64(63)
    for row in range(values.size):
        value = values[row]
        if np.isnan(value):  # either sign
            keys[row] = ~np.uint64(0)
        elif value == 0.0:  # -0.0 and 0.0 are one value
            keys[row] = sign
        elif bits[row] & sign:
            keys[row] = ~bits[row]
        else:
            keys[row] = bits[row] | sign
    return keys


@compiled
def _radix_order(keys: KeyArray) -> IntArray:
    """Row numbers sorted by ``keys``, ties in row order (LSD radix, module docstring);
    ``keys`` is overwritten."""
    n = keys.size
    mask = np.uint64(_BUCKETS - 1)
    counts = np.zeros((_PASSES, _BUCKETS), np.int64)
    for row in range(n):
        key = keys[row]
        for digit in range(_PASSES):
            counts[digit, (key >> np.uint64(_DIGIT_BITS * digit)) & mask] += 1
    order = np.arange(n, dtype=np.int64)
    other_keys = np.empty(n, np.uint64)
    other_order = np.empty(n, np.int64)
    start = np.empty(_BUCKETS, np.int64)
    for digit in range(_PASSES):
        histogram = counts[digit]
        if n == 0 or histogram.max() == n:  # one value of this digit: the pass moves nothing
            continue
        total = 0
        for bucket in range(_BUCKETS):
            start[bucket] = total
            total += histogram[bucket]
        shift = np.uint64(_DIGIT_BITS * digit)
        for position in range(n):
            key = keys[position]
            bucket = (key >> shift) & mask
            target = start[bucket]
            start[bucket] = target + 1
            other_keys[target] = key
            other_order[target] = order[position]
        keys, other_keys = other_keys, keys
        order, other_order = other_order, order
    return order


def stable_value_order(values: FloatArray) -> IntArray:
    """The rows of the non-NaN ``values`` by increasing value, ties in row order: equal to
    ``np.argsort(values, kind="stable")`` cut to the present rows (module docstring's proof)."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    n_present = int(np.count_nonzero(~np.isnan(values)))
    order: IntArray = _radix_order(_sortable_keys(values))[:n_present]
    return order
