"""Streaming CSV kernels: read a CSV in bounded chunks of Arrow strings and convert each chunk's
cells to typed arrays with vectorised operations (issue #23 "lean loading", ALGORITHMS.md §0.2).

No per-cell Python string is built, except for the rare numeric cells outside the plain decimal
grammar (``inf``, ``1_000``, 25-digit numbers...), which :func:`numeric_chunk` parses one by one
with ``pd.to_numeric`` itself so that they convert exactly as the whole-frame path converts them.

Every kernel here reproduces, cell for cell, the conversion of
:func:`dpmine_server.data.loaders.read_csv_strings` followed by ``loaders._convert``;
:class:`UseFramePath` marks the few inputs where it would not, and the caller then loads the file
with the whole-frame path. Everything here is private data: it goes to the owner's load report
or into a column store, never to an analyst.

Imports. pandas is imported by the functions that use it, as in data/loaders.py ("Imports").
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from dpmine.wire.datasets import BOOLEAN_FALSE, BOOLEAN_TRUE
from dpmine_server.data.arriving import open_source, wait_arrived
from dpmine_server.data.cell_scan import TokenBytes, scan_numbers
from dpmine_server.data.decimal_scan import plain_decimals

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "PY_WHITESPACE",
    "BooleanChunk",
    "CategoricalChunk",
    "GrowingArray",
    "IntegerFlags",
    "NumericChunk",
    "UseFramePath",
    "boolean_chunk",
    "categorical_chunk",
    "check_quotes",
    "missing_mask",
    "numeric_cells",
    "numeric_chunk",
    "positive_zeros",
    "read_string_batches",
    "string_column",
    "stripped",
]

BoolArray = npt.NDArray[np.bool_]

#: CSV text parsed per chunk. Arrow's reader reads a few dozen blocks ahead, so this bounds its
#: buffer (~250 MiB at 4 MiB); smaller blocks cost more per-chunk calls (1 MiB: +20 % time).
DEFAULT_BLOCK_BYTES: Final = 1 << 22
#: The characters Python's ``str.strip()`` removes: the whole-frame path strips with it.
PY_WHITESPACE: Final = "".join(chr(code) for code in range(0x110000) if chr(code).isspace())
#: What ``pd.to_numeric`` reads as an integer; a column of nothing else, in the range of int64
#: or uint64, comes out as integers, where ``-0`` is 0.0 (and -0.0 in any other column).
_INTEGER: Final = r"^[+-]?[0-9]+$"
_NEGATIVE_INTEGER: Final = r"^-0*[1-9]"
_INT64_DIGITS: Final = 18  # integers of at most 18 digits fit in int64
_INT64_MAX: Final = 2**63 - 1
#: Extensions that make pandas decompress a file (it infers them case-insensitively); of these
#: the streaming path reads only ``.gz`` (and not ``.tar.gz``), as the delimiter sniffer does.
_PANDAS_COMPRESSED: Final = (".gz", ".bz2", ".zip", ".xz", ".zst", ".tar")


class GrowingArray:
    """A 1-d array appended to chunk by chunk, in one buffer whose capacity grows by half when
    full: the copies cost O(n) in all, the unused tail is at most a third, and the few large
    buffers go back to the system when dropped (a list of small chunk arrays would leave the
    process heap fragmented, its peak well above the columns it holds)."""

    def __init__(self, dtype: type[np.generic]) -> None:
        self._buffer: npt.NDArray[np.generic] = np.empty(0, dtype=dtype)
        self._size = 0

    def append(self, part: npt.NDArray[np.generic]) -> None:
        end = self._size + part.size
        if end > self._buffer.size:
            grown = np.empty(max(end, self._buffer.size * 3 // 2), dtype=self._buffer.dtype)
            grown[: self._size] = self._buffer[: self._size]
            self._buffer = grown
        self._buffer[self._size : end] = part
        self._size = end

    def view(self) -> npt.NDArray[np.generic]:
        """The values appended so far (a view into the buffer)."""
        return self._buffer[: self._size]

    def release(self) -> None:
        """Drop the buffer."""
        self._buffer, self._size = self._buffer[:0].copy(), 0


class UseFramePath(Exception):
    """The streaming path would not reproduce the whole-frame conversion exactly for this file."""


def _open_bytes(path: Path) -> BinaryIO:
    """The file's bytes, gunzipped by extension as the delimiter sniffer reads it; raises
    :class:`UseFramePath` for the other archives that pandas infers from the name. A plain file
    still arriving as an upload is read as its bytes arrive (:mod:`~dpmine_server.data.arriving`);
    a compressed one once it is whole."""
    name = path.name.lower()
    if path.suffix == ".gz" and not name.endswith(".tar.gz"):
        wait_arrived(path)
        return io.BufferedReader(gzip.open(path, "rb"))
    if name.endswith(_PANDAS_COMPRESSED):
        raise UseFramePath(f"compressed as pandas infers from {path.name!r}")
    return open_source(path)


def _reader(
    handle: BinaryIO, delimiter: str, block_bytes: int, n_columns: int | None
) -> pa_csv.CSVStreamingReader:
    """Arrow's streaming reader; with ``n_columns``, every column is read as strings."""
    types = {f"f{i}": pa.string() for i in range(n_columns or 0)}
    return pa_csv.open_csv(
        handle,
        read_options=pa_csv.ReadOptions(
            autogenerate_column_names=True, block_size=block_bytes, use_threads=False
        ),
        parse_options=pa_csv.ParseOptions(delimiter=delimiter, newlines_in_values=True),
        convert_options=pa_csv.ConvertOptions(
            column_types=types,
            null_values=[],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )


#: Text read to count the header's columns (Arrow infers types on it: keep it short).
_PROBE_BYTES: Final = 1 << 20
_QUOTE: Final = ord('"')
_NEWLINE: Final = ord("\n")
_RETURN: Final = ord("\r")


def _ends_field(values: npt.NDArray[np.uint8], delimiter: int) -> BoolArray:
    """Bytes that end a field (a delimiter or a line end), or a quote (of a doubled quote)."""
    ends: BoolArray = values == delimiter
    for byte in (_NEWLINE, _RETURN, _QUOTE):
        ends |= values == byte
    return ends


def _quotes_well_formed(
    block: npt.NDArray[np.uint8], before: int, seen: int, delimiter: int
) -> bool:
    """One block of :func:`check_quotes`: ``before`` is the byte before it (a newline at the
    start of the file) and ``seen`` the quotes before it. A quote at the end of the block is
    checked with the next block."""
    quotes = np.flatnonzero(block == _QUOTE)
    opening, closing = quotes[seen % 2 :: 2], quotes[1 - seen % 2 :: 2]
    previous = block[opening - 1]  # index -1 (the block's last byte) is replaced below
    if opening.size and opening[0] == 0:
        previous[0] = before
    after = closing + 1
    following = block[after[after < block.size]]
    return bool(_ends_field(previous, delimiter).all() and _ends_field(following, delimiter).all())


def check_quotes(path: Path, delimiter: str, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> None:
    """Raises :class:`UseFramePath` unless every quote of the file opens a field, closes it before
    a delimiter or a line end, or doubles a quote inside it, and the last field is closed.

    In such a file a quote toggles "inside a quoted field" (a doubled quote toggles twice), and
    pandas and Arrow split it alike. A quote inside an unquoted field (``x"y``) or after a closing
    quote, and a file that ends inside a quoted field (pandas refuses it, Arrow does not), go to
    the whole-frame path. The check reads the file once more, block by block.
    """
    separator = ord(delimiter)
    seen, before = 0, _NEWLINE
    with _open_bytes(path) as stream:
        while block := stream.read(block_bytes):
            data = np.frombuffer(block, dtype=np.uint8)
            closed = before == _QUOTE and seen % 2 == 0  # the last block closed a quoted field
            if closed and not _ends_field(data[:1], separator).all():
                raise UseFramePath("a quoted field goes on after its closing quote")
            if not _quotes_well_formed(data, before, seen, separator):
                raise UseFramePath("a quote inside an unquoted field, or after a closing quote")
            seen, before = seen + int(np.count_nonzero(data == _QUOTE)), int(data[-1])
    if seen % 2:
        raise UseFramePath("the file ends inside a quoted field")


def read_string_batches(
    path: Path,
    delimiter: str,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    check_quotes_first: bool = True,
) -> Iterator[pa.RecordBatch]:
    """The rows of a CSV (the header row first) as batches of unstripped string columns, each
    parsed from about ``block_bytes`` of text. The column count is the header's, as pandas
    takes it with ``header=None``.

    Raises :class:`UseFramePath` wherever Arrow refuses the file (a short or long row, bytes that
    are not UTF-8, an empty file...): the whole-frame path then pads the row or words the error.
    ``check_quotes_first=False``: the caller runs :func:`check_quotes` itself (beside the parse)
    and takes no result of this reader as final before it has passed.
    """
    try:
        if check_quotes_first:
            check_quotes(path, delimiter, block_bytes=block_bytes)
        probe_bytes = min(block_bytes, _PROBE_BYTES)
        with _open_bytes(path) as handle, _reader(handle, delimiter, probe_bytes, None) as probe:
            n_columns = len(probe.schema.names)  # the first block's first row: the header
        if n_columns == 1:
            # pandas skips a line of spaces and tabs (a blank line to it); with one column
            # Arrow reads it as a row, with more it refuses it as a short row.
            raise UseFramePath("a file of one column")
        with (
            _open_bytes(path) as handle,
            _reader(handle, delimiter, block_bytes, n_columns) as reader,
        ):
            yield from reader
    except (pa.ArrowInvalid, OSError) as err:
        raise UseFramePath(str(err)) from None


def string_column(batch: pa.RecordBatch, index: int) -> pa.StringArray:
    """Column ``index`` of a batch of :func:`read_string_batches` (strings, by construction)."""
    column = batch.column(index)
    if not isinstance(column, pa.StringArray):
        raise UseFramePath(f"column {index} was not read as strings")
    return column


@dataclass(frozen=True)
class DistinctCells:
    """A chunk's cells as indices into its distinct values (Arrow's ``dictionary_encode``):
    every cell-wise conversion of a column (strip, missing tokens, lowering, category lookup,
    number parsing) runs once per distinct value, then ``result[indices]`` gives the
    cells' results, equal cell by cell to running it on every cell."""

    indices: npt.NDArray[np.int32]
    values: pa.StringArray

    @classmethod
    def of(cls, cells: pa.StringArray) -> DistinctCells:
        """The distinct values of ``cells`` (no null cell: ``strings_can_be_null=False``)."""
        encoded = pc.dictionary_encode(cells)
        if not isinstance(encoded, pa.DictionaryArray):
            raise UseFramePath("a column's cells were not dictionary-encoded")
        indices = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int32)
        values = encoded.dictionary
        if not isinstance(values, pa.StringArray):
            raise UseFramePath("a column's distinct values were not strings")
        return cls(indices, values)

    @classmethod
    def each(cls, cells: pa.StringArray) -> DistinctCells:
        """Every cell as its own value (indices 0, 1, …): the conversions run once per cell.
        ``result[indices]`` is then the cell-by-cell result trivially; for a chunk whose cells
        are nearly all distinct this skips the hashing of :meth:`of`, which saves nothing."""
        return cls(np.arange(len(cells), dtype=np.int32), cells)


def stripped(cells: pa.StringArray) -> pa.StringArray:
    """The cells without leading and trailing whitespace, as Python's ``str.strip()`` sees it."""
    return pc.utf8_trim(cells, characters=PY_WHITESPACE)


def _to_bool(mask: pa.BooleanArray) -> BoolArray:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=np.bool_)


def _is_in(cells: pa.StringArray, values: list[str]) -> BoolArray:
    return _to_bool(pc.is_in(cells, value_set=pa.array(values, pa.string())))


def _matches(cells: pa.StringArray, pattern: str) -> BoolArray:
    return _to_bool(pc.match_substring_regex(cells, pattern))


def missing_mask(cells: pa.StringArray, tokens: list[str]) -> BoolArray:
    """Cells equal to one of the missing-value tokens (exact match, as ``Series.isin``)."""
    return _is_in(cells, tokens)


@dataclass(frozen=True)
class BooleanChunk:
    """A Boolean column's chunk: 1 true, 0 false, -1 missing (or bad), and the bad cells."""

    codes: npt.NDArray[np.int8]
    bad: BoolArray


def boolean_chunk(cells: pa.StringArray, missing: BoolArray) -> BooleanChunk:
    """Case-insensitive Boolean tokens (``str.lower`` then ``isin``): the tokens are ASCII, and
    no other character lowers to one of their letters, so Arrow's lowering matches Python's."""
    lowered = pc.utf8_lower(cells)
    true = _is_in(lowered, sorted(BOOLEAN_TRUE)) & ~missing
    false = _is_in(lowered, sorted(BOOLEAN_FALSE)) & ~missing
    codes = np.where(true, 1, np.where(false, 0, -1)).astype(np.int8)
    return BooleanChunk(codes, ~(true | false | missing))


@dataclass(frozen=True)
class CategoricalChunk:
    """A categorical column's chunk: codes into the declared list (-1 = none), the bad cells."""

    codes: npt.NDArray[np.int32]
    bad: BoolArray


def categorical_chunk(
    cells: pa.StringArray, categories: list[str], missing: BoolArray
) -> CategoricalChunk:
    """Exact category match, as ``pd.Index(categories).get_indexer`` (the list has no repeats)."""
    found = pc.index_in(cells, value_set=pa.array(categories, pa.string()))
    index = np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.float64)  # NaN: no match
    codes = np.where(np.isnan(index), -1, index).astype(np.int32)
    return CategoricalChunk(codes, (codes < 0) & ~missing)


@dataclass(frozen=True)
class IntegerFlags:
    """What decides whether ``pd.to_numeric`` reads a numeric column as integers."""

    #: Every cell is an integer in [-2**63, 2**64) (none missing).
    integral: bool = True
    #: Some integer cell is negative; some is above 2**63 - 1.
    negative: bool = False
    above_int64: bool = False

    def __or__(self, other: IntegerFlags) -> IntegerFlags:
        """The flags of two parts of a column together."""
        return IntegerFlags(
            self.integral and other.integral,
            self.negative or other.negative,
            self.above_int64 or other.above_int64,
        )

    @property
    def integer_column(self) -> bool:
        """All integral, and not both a negative integer and one above int64 (pandas then
        returns floats)."""
        return self.integral and not (self.negative and self.above_int64)


@dataclass(frozen=True)
class NumericChunk:
    """A numeric column's chunk: values (NaN = missing or unparsed), missing and bad cells."""

    values: npt.NDArray[np.float64]
    missing: BoolArray
    bad: BoolArray
    flags: IntegerFlags


def positive_zeros(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """A column that ``pd.to_numeric`` reads as integers has no -0.0 (``-0`` is the integer 0)."""
    return np.where(values == 0, 0.0, values)


def _integer_flags(cells: pa.StringArray, missing: BoolArray) -> IntegerFlags:
    """The :class:`IntegerFlags` of a chunk; the integers of more than 18 digits (rare) are
    compared as Python ints. A chunk with a missing cell is not integral (pandas reads it as
    NaN), whatever its other cells."""
    if missing.any():
        return IntegerFlags(integral=False)
    integer = _matches(cells, _INTEGER) & ~missing
    negative = bool(np.any(_matches(cells, _NEGATIVE_INTEGER) & integer))
    lengths = np.asarray(pc.utf8_length(cells).to_numpy(zero_copy_only=False))
    long = integer & (lengths > _INT64_DIGITS)
    texts = cells.filter(pa.array(long)).to_pylist() if long.any() else []
    values = [
        int(text or "0") for text in texts
    ]  # no null cell: read with strings_can_be_null=False
    in_range = all(-(2**63) <= value < 2**64 for value in values)
    above = any(value > _INT64_MAX for value in values)
    return IntegerFlags(bool(np.all(integer)) and in_range, negative, above)


def _parse_one_by_one(cells: pa.StringArray) -> npt.NDArray[np.float64]:
    """``pd.to_numeric`` on each cell alone; equal to its value inside the whole column, since
    every cell but ``-0`` parses to the correctly rounded double alone and in any column."""
    import pandas as pd  # noqa: PLC0415 (data/loaders.py, "Imports")

    series = pd.Series(cells.to_pylist(), dtype=object)
    return np.asarray(pd.to_numeric(series, errors="coerce"), dtype=np.float64)


def numeric_chunk(
    cells: pa.StringArray, missing: BoolArray, *, text_as_missing: bool, integral: bool = True
) -> NumericChunk:
    """Numbers as ``pd.to_numeric(errors="coerce")`` reads them (ALGORITHMS.md §0.2).

    Plain decimals (:func:`~dpmine_server.data.decimal_scan.plain_decimals`) go through Arrow's
    cast; both parsers return the correctly rounded double for them. The other non-empty cells
    are parsed one by one (:func:`_parse_one_by_one`). A ``-0`` is -0.0 here, and 0.0
    (:func:`positive_zeros`) once the column's :class:`IntegerFlags` say that pandas reads it
    as integers; ``integral=False`` (an earlier chunk was not) skips computing them.
    """
    plain, empty = plain_decimals(cells)
    plain &= ~missing
    other = ~plain & ~missing & ~empty
    values = np.full(len(cells), np.nan)
    if plain.any():
        parsed = pc.cast(cells.filter(pa.array(plain)), pa.float64())
        values[plain] = parsed.to_numpy(zero_copy_only=False)
    if other.any():
        values[other] = _parse_one_by_one(cells.filter(pa.array(other)))
    if text_as_missing:
        missing = missing | ~np.isfinite(values)
        values = np.where(missing, np.nan, values)
    bad = ~np.isfinite(values) & ~missing
    flags = _integer_flags(cells, missing) if integral else IntegerFlags(integral=False)
    return NumericChunk(values, missing, bad, flags)


def numeric_cells(
    raw: pa.StringArray, missing_tokens: list[str], *, text_as_missing: bool
) -> NumericChunk:
    """:func:`numeric_chunk` with ``integral=False`` on unstripped cells: equal, cell for cell,
    to ``numeric_chunk(stripped(raw), missing_mask(stripped(raw), missing_tokens), ...)``. The
    compiled scan (data/cell_scan.py, proof there) resolves the missing cells and the plain
    decimals of exact mantissa and power in one pass; the cells it leaves go through that
    definition. (The integer flags read every cell, so a column still integral takes
    :func:`numeric_chunk`.)"""
    scanned = scan_numbers(raw, TokenBytes.of(missing_tokens))
    values, missing = scanned.values, scanned.missing
    bad = np.zeros(len(raw), np.bool_)
    left = ~scanned.resolved
    if left.any():
        cells = stripped(raw.filter(pa.array(left)))
        left_missing = missing_mask(cells, missing_tokens)
        chunk = numeric_chunk(cells, left_missing, text_as_missing=text_as_missing, integral=False)
        values[left], missing[left], bad[left] = chunk.values, chunk.missing, chunk.bad
    return NumericChunk(values, missing, bad, IntegerFlags(integral=False))
