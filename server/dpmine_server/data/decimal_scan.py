"""Which cells of a chunk are plain decimals (ALGORITHMS.md §0.2: the cells that Arrow's cast
and ``pd.to_numeric`` both parse to the correctly rounded double), by one compiled scan of the
Arrow string buffers. PRIVATE: the masks are functions of the cells.

A cell is a **plain decimal** when it has at most :data:`PLAIN_MAX_CHARS` characters and
matches ``^[+-]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][+-]?[0-9]{1,3})?$`` (:data:`PLAIN_DECIMAL`).
The scan is that expression's automaton read left to right over the cell's bytes: an optional
sign; the integer digits; an optional point and the fraction digits, with at least one digit
in all (the two alternatives: digits before the point, or a point and digits after it); then an
optional exponent (a letter e or E, an optional sign, one to three digits); and nothing after.
Every byte it accepts is ASCII, so a cell it accepts has as many characters as bytes, and a
byte of a multi-byte character fails it as the expression does. The tests compare it with the
expression on every string of a small alphabet and on random cells.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpmine_server.compiled import compiled, inlined

__all__ = ["PLAIN_DECIMAL", "PLAIN_MAX_CHARS", "plain_decimals"]

BoolArray = npt.NDArray[np.bool_]

#: The expression the scan reads (for the docs and the tests).
PLAIN_DECIMAL: Final = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?$"
#: Longest plain decimal (checked on random decimals of up to 19 digits and exponents of up
#: to 3 digits: both parsers agree there).
PLAIN_MAX_CHARS: Final = 20
_MAX_EXPONENT_DIGITS: Final = 3


@inlined
def _is_plain(data: npt.NDArray[np.uint8], start: int, end: int) -> bool:
    """Whether ``data[start:end]`` is a plain decimal (the module docstring's automaton; the
    byte values are ``+`` 43, ``-`` 45, ``.`` 46, ``0``–``9`` 48–57, ``E`` 69, ``e`` 101)."""
    if end - start > PLAIN_MAX_CHARS:
        return False
    position = start
    if position < end and (data[position] == 43 or data[position] == 45):
        position += 1
    first = position
    while position < end and data[position] >= 48 and data[position] <= 57:
        position += 1
    digits = position - first
    if position < end and data[position] == 46:
        position += 1
        first = position
        while position < end and data[position] >= 48 and data[position] <= 57:
            position += 1
        digits += position - first
    if digits == 0:
        return False
    if position < end and (data[position] == 69 or data[position] == 101):
        position += 1
        if position < end and (data[position] == 43 or data[position] == 45):
            position += 1
        first = position
        while position < end and data[position] >= 48 and data[position] <= 57:
            position += 1
        if position == first or position - first > _MAX_EXPONENT_DIGITS:
            return False
    return position == end


@compiled
def _scan(
    offsets: npt.NDArray[np.int64], data: npt.NDArray[np.uint8], plain: BoolArray, empty: BoolArray
) -> None:
    """Cell i spans ``data[offsets[i]:offsets[i+1]]``: its flags into ``plain`` and ``empty``."""
    for cell in range(plain.size):
        start, end = offsets[cell], offsets[cell + 1]
        empty[cell] = start == end
        plain[cell] = _is_plain(data, start, end)


def plain_decimals(cells: pa.StringArray | pa.LargeStringArray) -> tuple[BoolArray, BoolArray]:
    """(plain, empty): which cells are plain decimals of at most :data:`PLAIN_MAX_CHARS`
    characters, and which are empty. A null cell is neither (the chunks have none: they are
    read with ``strings_can_be_null=False``)."""
    n = len(cells)
    plain, empty = np.zeros(n, np.bool_), np.zeros(n, np.bool_)
    if n == 0:
        return plain, empty
    _validity, offset_buffer, data_buffer = cells.buffers()
    if offset_buffer is None:
        raise ValueError("a string array without offsets")
    width = np.int64 if pa.types.is_large_string(cells.type) else np.int32
    all_offsets = np.frombuffer(memoryview(offset_buffer), dtype=width)
    offsets = all_offsets[cells.offset : cells.offset + n + 1]
    data = (
        np.frombuffer(memoryview(data_buffer), dtype=np.uint8)
        if data_buffer is not None
        else np.zeros(0, np.uint8)
    )
    _scan(offsets.astype(np.int64), data, plain, empty)
    if cells.null_count:
        valid = np.asarray(cells.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        plain &= valid
        empty &= valid
    return plain, empty
