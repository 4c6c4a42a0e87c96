"""Streaming FIMI kernels: read a transaction file in bounded blocks, turn each block's tokens
into item ids with vectorised Arrow kernels (issue #23 "lean loading", ALGORITHMS.md §0.2)
instead of a Python string per item, and build the per-item row lists in two passes: the first
counts each item's rows (:func:`scan_fimi`), the second writes them into arrays of exactly that
size (:func:`fill_item_rows`), so memory holds the packed rows and one block.

It reproduces, token for token, the whole-text reading it replaces: the file's text read with
universal newlines (``"\\r\\n"`` and a lone ``"\\r"`` end a line as ``"\\n"`` does), split into
lines (a final newline adds no line), each line split by ``str.split()`` (any run of whitespace
separates, none at the ends), each token looked up in the declared item universe by exact match.
A block is cut after its last ``"\\n"``, so no line and no UTF-8 character straddles two blocks.
A block of ASCII text without the separators ``\\x1c``–``\\x1f`` (which ``str.split`` treats as
whitespace and Arrow does not) is split by Arrow's ASCII whitespace, the same set there; any
other block is split in Python.
Everything here is private data: it goes to the owner's load report or into a column store.

Imports. pandas is imported by the functions that use it, as in data/loaders.py ("Imports").
"""

from __future__ import annotations

import gzip
import io
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "DEFAULT_FIMI_BLOCK_BYTES",
    "FimiBlock",
    "FimiScan",
    "fill_item_rows",
    "fimi_blocks",
    "scan_fimi",
]

#: Bytes of text read per block: the buffer besides the item rows (about 200 MiB of block
#: arrays at 4 MiB of FIMI text).
DEFAULT_FIMI_BLOCK_BYTES: Final = 1 << 22
#: Bytes that ``str.split`` reads as whitespace and Arrow's ASCII splitter does not.
_PYTHON_ONLY_SEPARATORS: Final = re.compile(rb"[\x1c-\x1f]")


@dataclass(frozen=True)
class FimiBlock:
    """The lines of one block: the file's line ``first_row`` is its line 0; token k is on line
    ``line_of[k]`` and is item ``item_ids[k]`` of the universe (-1: not in it)."""

    first_row: int
    n_lines: int
    line_of: npt.NDArray[np.int64]
    item_ids: npt.NDArray[np.int64]
    tokens: Sequence[str] | pa.StringArray

    def token(self, position: int) -> str:
        """Token ``position`` as text."""
        token = self.tokens[position]
        return token if isinstance(token, str) else str(token.as_py())


@dataclass
class FimiScan:
    """The first pass over a FIMI file (:func:`scan_fimi`): lines, tokens, the first unknown
    items (row, token), and per item its rows after duplicates within a row count once and the
    row-width bound; with the duplicates and the rows the bound cut."""

    n_rows: int = 0
    n_tokens: int = 0
    unknown: list[tuple[int, str]] = field(default_factory=list)
    item_rows: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    duplicates: int = 0
    truncated_rows: int = 0


def _blocks(handle: io.BufferedIOBase, block_bytes: int) -> Iterator[bytes]:
    """The file's bytes in pieces that end just after a newline (the last one: the rest)."""
    rest = b""
    while chunk := handle.read(block_bytes):
        data = rest + chunk
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
        rest = data[cut:]
    if rest:
        yield rest


def _arrow_tokens(text: str) -> tuple[pa.StringArray, npt.NDArray[np.int64], int]:
    """(tokens, line of each token, lines) of a block that Arrow splits like ``str.split``."""
    lines = pc.split_pattern(pa.array([text], pa.string()), "\n").flatten()
    n_lines = len(lines) - 1 if text.endswith("\n") else len(lines)
    pieces = pc.ascii_split_whitespace(lines.slice(0, n_lines))
    line_of = np.asarray(pc.list_parent_indices(pieces).to_numpy(zero_copy_only=False))
    tokens = cast("pa.StringArray", pieces.flatten())
    # Arrow keeps an empty token at a line's ends and for a blank line; str.split does not.
    kept = np.asarray(pc.utf8_length(tokens).to_numpy(zero_copy_only=False)) > 0
    return (
        tokens.filter(pa.array(kept)),
        line_of.astype(np.int64)[kept],
        n_lines,
    )


def _arrow_ids(tokens: pa.StringArray, universe: pa.StringArray) -> npt.NDArray[np.int64]:
    """Each token's position in ``universe``, -1 when it is not there (exact match)."""
    found = pc.index_in(tokens, value_set=universe)
    filled = cast("pa.Int32Array", pc.fill_null(found, pa.scalar(-1, pa.int32())))
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.int64)


def _python_tokens(text: str) -> tuple[list[str], npt.NDArray[np.int64], int]:
    """The same as :func:`_arrow_tokens` with ``str.split`` (any text)."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    split = [line.split() for line in lines]
    line_of = np.repeat(np.arange(len(lines), dtype=np.int64), [len(t) for t in split])
    return [token for tokens in split for token in tokens], line_of, len(lines)


def fimi_blocks(
    path: Path, items: Sequence[str], *, block_bytes: int = DEFAULT_FIMI_BLOCK_BYTES
) -> Iterator[FimiBlock]:
    """The blocks of a FIMI file (gzip by extension) with their tokens' items. Raises
    ``FileNotFoundError``, ``OSError`` or ``UnicodeDecodeError`` as reading the text would."""
    import pandas as pd  # noqa: PLC0415 (data/loaders.py, "Imports")

    universe = pa.array(list(items), pa.string())
    index = pd.Index(list(items), dtype=object)
    first = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for block in _blocks(handle, block_bytes):
            text = block.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            if block.isascii() and not _PYTHON_ONLY_SEPARATORS.search(block):
                arrow, line_of, n_lines = _arrow_tokens(text)
                yield FimiBlock(first, n_lines, line_of, _arrow_ids(arrow, universe), arrow)
            else:
                python, line_of, n_lines = _python_tokens(text)
                ids = index.get_indexer(pd.Index(python, dtype=object)).astype(np.int64)
                yield FimiBlock(first, n_lines, line_of, ids, python)
            first += n_lines


@dataclass(frozen=True)
class _KeptPairs:
    """A block's (row, item) pairs that the item rows hold, sorted by row then item."""

    rows: npt.NDArray[np.int64]
    items: npt.NDArray[np.int64]
    duplicates: int
    truncated_rows: int


def _distinct_sorted(keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The distinct values of ``keys``, increasing: a sort in place and a comparison with the
    neighbour (numpy 2's ``np.unique`` hashes first, several times slower on these keys)."""
    keys.sort()
    if keys.size == 0:
        return keys
    first = np.empty(keys.size, dtype=np.bool_)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    return keys[first]


def _kept_pairs(block: FimiBlock, n_items: int, max_row_width: int | None) -> _KeptPairs:
    """Distinct (line, item) pairs of a block's known items; with ``max_row_width`` each line
    keeps its first ``max_row_width`` items in item order (ALGORITHMS.md §4.1), a map of each row
    on its own, as :meth:`~dpmine_server.data.columns.ItemColumns.from_pairs` applies it."""
    known = block.item_ids >= 0
    keys = _distinct_sorted(block.line_of[known] * n_items + block.item_ids[known])
    line, item = keys // n_items, keys % n_items
    duplicates = int(np.count_nonzero(known)) - int(keys.size)
    truncated = 0
    if max_row_width is not None and keys.size:
        starts = np.searchsorted(line, line, side="left")
        keep = np.arange(keys.size) - starts < max_row_width
        widths = np.bincount(line, minlength=block.n_lines)
        truncated = int(np.count_nonzero(widths > max_row_width))
        line, item = line[keep], item[keep]
    return _KeptPairs(block.first_row + line, item, duplicates, truncated)


def scan_fimi(
    path: Path,
    items: Sequence[str],
    *,
    max_rows: int,
    max_unknown: int,
    max_row_width: int | None,
    block_bytes: int = DEFAULT_FIMI_BLOCK_BYTES,
) -> FimiScan:
    """The first pass (:class:`FimiScan`); past ``max_rows`` lines only the lines are counted
    (the load fails on n_max; its message needs the count)."""
    scan = FimiScan(item_rows=np.zeros(len(items), dtype=np.int64))
    for block in fimi_blocks(path, items, block_bytes=block_bytes):
        scan.n_rows += block.n_lines
        scan.n_tokens += int(block.line_of.size)
        if scan.n_rows > max_rows:
            continue
        for position in np.flatnonzero(block.item_ids < 0)[: max_unknown - len(scan.unknown)]:
            row = block.first_row + int(block.line_of[position])
            scan.unknown.append((row, block.token(int(position))))
        kept = _kept_pairs(block, len(items), max_row_width)
        scan.item_rows += np.bincount(kept.items, minlength=len(items))
        scan.duplicates += kept.duplicates
        scan.truncated_rows += kept.truncated_rows
    return scan


def fill_item_rows(
    path: Path,
    items: Sequence[str],
    scan: FimiScan,
    *,
    max_row_width: int | None,
    block_bytes: int = DEFAULT_FIMI_BLOCK_BYTES,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """The second pass: the CSR arrays (indptr, indices) of the item rows that ``scan`` counted,
    each item's rows written in increasing order at its cursor, so memory holds the arrays and
    one block. Raises ``ValueError`` if the file no longer gives the scan's counts."""
    indptr = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(scan.item_rows, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    cursor = indptr[:-1].copy()
    n_rows = 0
    for block in fimi_blocks(path, items, block_bytes=block_bytes):
        n_rows += block.n_lines
        kept = _kept_pairs(block, len(items), max_row_width)
        order = np.argsort(kept.items, kind="stable")  # rows stay increasing within an item
        item_sorted = kept.items[order]
        counts = np.bincount(kept.items, minlength=len(items))
        if np.any(cursor + counts > indptr[1:]):
            raise ValueError("the file changed between the two passes")
        block_start = np.cumsum(counts) - counts
        position = cursor[item_sorted] + np.arange(order.size) - block_start[item_sorted]
        indices[position] = kept.rows[order]
        cursor += counts
    if n_rows != scan.n_rows or not np.array_equal(cursor, indptr[1:]):
        raise ValueError("the file changed between the two passes")
    return indptr, indices
