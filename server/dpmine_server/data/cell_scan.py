"""Numeric CSV cells converted by one compiled scan of the Arrow string buffers, each cell read
once and no copy of the chunk made (issue #23 "lean loading"; ALGORITHMS.md §0.2). PRIVATE:
every output is a function of the cells.

For a numeric chunk the vectorised path of :mod:`~dpmine_server.data.csv_chunks` strips the
cells (a copy), matches the missing tokens, scans for plain decimals, filters them and casts
them: five passes over every cell. :func:`scan_numbers` **resolves** the cells whose conversion
it can decide exactly, in one pass, and leaves the others (*unresolved*) to that path, which
stays the definition:

* **Strip.** ``str.strip`` removes every Unicode whitespace character at either end. The scan
  removes the ASCII ones (bytes 9–13 and 28–32: ``\t \n \v \f \r``, the separators
  ``\x1c``–``\x1f`` and the space). A byte ≥ 0x80 left at an end may start or end a non-ASCII
  whitespace character, so such a cell is unresolved; otherwise both ends are ASCII
  non-whitespace characters and the scan's bounds are exactly ``str.strip``'s (an ASCII byte is
  one whole character in UTF-8).
* **Missing tokens.** A stripped cell equal to a token, byte for byte (equal UTF-8 bytes, equal
  strings), is missing.
* **Numbers.** A stripped cell that is a plain decimal
  (:data:`~dpmine_server.data.decimal_scan.PLAIN_DECIMAL`, at most
  :data:`~dpmine_server.data.decimal_scan.PLAIN_MAX_CHARS` characters) whose digits, read as an
  integer m, satisfy m ≤ 2⁵³ and whose value is m·10ᵉ with |e| ≤ 22 is resolved to
  ``float(m) * 10.0**e`` (or ``/ 10.0**-e``), negated for a ``-`` sign. Proof of exactness
  (Clinger's fast path, "How to read floating point numbers accurately", PLDI 1990): m and
  10^|e| (5^22 < 2⁵³) are doubles exactly, and one IEEE multiplication or division of exact
  operands is correctly rounded, which is the double that Arrow's cast and ``pd.to_numeric``
  both return for a plain decimal (csv_chunks.numeric_chunk). A zero keeps its sign (``-0`` is
  -0.0, as the cast reads it); every resolved value is finite.

Everything else (empty cells that are not a token, text, long or wide numbers, non-ASCII
cells) is unresolved; :func:`csv_chunks.numeric_cells` converts it with the vectorised path
and scatters it back. The tests compare the two on every short string of an alphabet that
reaches each branch and on random cells.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from dpmine_server.compiled import compiled_counted_free as compiled
from dpmine_server.compiled import inlined_counted_free as inlined
from dpmine_server.data.decimal_scan import PLAIN_MAX_CHARS

__all__ = ["ScannedNumbers", "TokenBytes", "scan_numbers"]

BoolArray = npt.NDArray[np.bool_]
#: A string buffer as the compiled scans take it: (offsets, bytes).
Buffers = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]
#: Tokens as the compiled scans take them (:attr:`TokenBytes.buffers`).
Tokens = tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.int32]]

#: The largest mantissa that is a double exactly, and the largest exact power of ten.
_EXACT_MANTISSA: Final = 2**53
_EXACT_POWER: Final = 22
_POWERS_OF_TEN: Final = np.array([float(10**k) for k in range(_EXACT_POWER + 1)])

#: Cell states of the scan.
UNRESOLVED: Final = 0
RESOLVED: Final = 1
MISSING: Final = 2


@dataclass(frozen=True)
class TokenBytes:
    """Strings as one UTF-8 byte buffer, sorted by (length, first byte), with their offsets
    (token i: ``data[offsets[i]:offsets[i + 1]]``) and ``starts[b, c]``, the first token of b
    bytes whose first byte is c (c = 0 for the empty token), or -1: a cell is compared only
    with the tokens of its length and first byte (usually none or one), for the compiled scans.
    """

    offsets: npt.NDArray[np.int64]
    data: npt.NDArray[np.uint8]
    starts: npt.NDArray[np.int32]

    @classmethod
    def of(cls, tokens: Iterable[str]) -> TokenBytes:
        encoded = sorted({token.encode("utf-8") for token in tokens}, key=lambda t: (len(t), t))
        sizes = [len(token) for token in encoded]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        offsets[1:] = np.cumsum(sizes, dtype=np.int64)
        starts = np.full((max(sizes, default=0) + 1, 256), -1, np.int32)
        for index in reversed(range(len(encoded))):
            token = encoded[index]
            starts[len(token), token[0] if token else 0] = index
        return cls(offsets, np.frombuffer(b"".join(encoded), np.uint8).copy(), starts)

    @property
    def buffers(self) -> Tokens:
        return self.offsets, self.data, self.starts


def _buffers(cells: pa.StringArray) -> Buffers:
    """The cells' offsets (n + 1, from the array's own offset) and their byte buffer."""
    n = len(cells)
    _validity, offset_buffer, data_buffer = cells.buffers()
    if offset_buffer is None:
        raise ValueError("a string array without offsets")
    if cells.null_count:
        raise ValueError("a chunk read with strings_can_be_null=False has no null cell")
    all_offsets = np.frombuffer(memoryview(offset_buffer), dtype=np.int32)
    offsets = all_offsets[cells.offset : cells.offset + n + 1].astype(np.int64)
    data = (
        np.frombuffer(memoryview(data_buffer), dtype=np.uint8)
        if data_buffer is not None
        else np.zeros(0, np.uint8)
    )
    return offsets, data


@inlined
def _is_ascii_space(byte: np.uint8) -> bool:
    return bool((byte >= 9 and byte <= 13) or (byte >= 28 and byte <= 32))


@inlined
def _stripped_bounds(data: npt.NDArray[np.uint8], start: int, end: int) -> tuple[int, int, bool]:
    """(start, end, exact): the cell without its ASCII whitespace ends; ``exact`` is False when
    a byte ≥ 0x80 is left at an end (a non-ASCII whitespace character may be there)."""
    while start < end and _is_ascii_space(data[start]):
        start += 1
    while end > start and _is_ascii_space(data[end - 1]):
        end -= 1
    exact = start == end or (data[start] < 128 and data[end - 1] < 128)
    return start, end, bool(exact)


@inlined
def _token_index(data: npt.NDArray[np.uint8], start: int, end: int, tokens: Tokens) -> int:
    """A token equal to ``data[start:end]``, or -1: only the tokens of the cell's length and
    first byte are read."""
    token_offsets, token_data, starts = tokens
    length = end - start
    if length >= starts.shape[0]:
        return -1
    first = data[start] if length else 0
    token = starts[length, first]
    if token < 0:
        return -1
    while token < token_offsets.size - 1:
        at = token_offsets[token]
        if token_offsets[token + 1] - at != length or (length and token_data[at] != first):
            return -1
        k = 1
        while k < length and data[start + k] == token_data[at + k]:
            k += 1
        if k >= length:
            return int(token)
        token += 1
    return -1


@inlined
def _is_digit(byte: np.uint8) -> bool:
    return bool(byte >= 48 and byte <= 57)


@inlined
def _digits(
    data: npt.NDArray[np.uint8], position: int, end: int, mantissa: int
) -> tuple[int, int, int]:
    """(position, mantissa, count) after the digits from ``position``, each appended to the
    mantissa while it stays at most 2⁵³ (past it, the mantissa is left at a value above 2⁵³)."""
    first = position
    while position < end and _is_digit(data[position]):
        if mantissa <= _EXACT_MANTISSA:
            mantissa = mantissa * 10 + (int(data[position]) - 48)
        position += 1
    return position, mantissa, position - first


@inlined
def _exponent(data: npt.NDArray[np.uint8], position: int, end: int) -> tuple[int, int, bool]:
    """(position, exponent, well formed) of an exponent part from its letter at ``position``:
    an optional sign and one to three digits."""
    position += 1
    negative = False
    if position < end and (data[position] == 43 or data[position] == 45):
        negative = data[position] == 45
        position += 1
    position, exponent, count = _digits(data, position, end, 0)
    return position, -exponent if negative else exponent, 1 <= count <= 3


@inlined
def _fast_decimal(
    data: npt.NDArray[np.uint8], start: int, end: int, powers: npt.NDArray[np.float64]
) -> tuple[bool, float]:
    """(resolved, value) of a stripped, non-empty cell: the plain-decimal automaton of
    data/decimal_scan.py, with the mantissa and exponent read on the way (module docstring)."""
    if end - start > PLAIN_MAX_CHARS:
        return False, 0.0
    position = start
    negative = data[position] == 45
    if negative or data[position] == 43:
        position += 1
    position, mantissa, digits = _digits(data, position, end, 0)
    fraction = 0
    if position < end and data[position] == 46:
        position, mantissa, fraction = _digits(data, position + 1, end, mantissa)
    exponent, formed = 0, True
    if position < end and (data[position] == 69 or data[position] == 101):
        position, exponent, formed = _exponent(data, position, end)
    power = exponent - fraction
    if (
        digits + fraction == 0
        or not formed
        or position != end
        or mantissa > _EXACT_MANTISSA
        or abs(power) > _EXACT_POWER
    ):
        return False, 0.0
    value = float(mantissa) * powers[power] if power >= 0 else float(mantissa) / powers[-power]
    return True, -value if negative else value


@compiled
def _scan_numbers(
    cells: Buffers,
    missing_tokens: Tokens,
    powers: npt.NDArray[np.float64],
    values: npt.NDArray[np.float64],
    state: npt.NDArray[np.int8],
) -> None:
    """Cell i's state (UNRESOLVED, RESOLVED, MISSING) and, when resolved, its value."""
    offsets, data = cells
    for cell in range(state.size):
        start, end, exact = _stripped_bounds(data, offsets[cell], offsets[cell + 1])
        if not exact:
            continue
        if _token_index(data, start, end, missing_tokens) >= 0:
            state[cell] = MISSING
            continue
        if start == end:
            continue
        resolved, value = _fast_decimal(data, start, end, powers)
        if resolved:
            values[cell] = value
            state[cell] = RESOLVED


@dataclass(frozen=True)
class ScannedNumbers:
    """A chunk's numbers: ``values`` (NaN unless resolved), ``missing`` and ``resolved``
    (a missing cell is resolved too)."""

    values: npt.NDArray[np.float64]
    missing: BoolArray
    resolved: BoolArray


def scan_numbers(cells: pa.StringArray, missing_tokens: TokenBytes) -> ScannedNumbers:
    """The numbers and missing cells that the scan resolves (module docstring)."""
    offsets, data = _buffers(cells)
    values = np.full(len(cells), np.nan)
    state = np.zeros(len(cells), np.int8)
    _scan_numbers((offsets, data), missing_tokens.buffers, _POWERS_OF_TEN, values, state)
    return ScannedNumbers(values, state == MISSING, state != UNRESOLVED)
