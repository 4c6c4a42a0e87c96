"""Streaming FIMI kernel: read a transaction file in bounded blocks and turn each block's items
into (row, item id) occurrences with vectorised Arrow kernels (issue #23 "lean loading",
ALGORITHMS.md §0.2), instead of a Python string per item.

It reproduces, token for token, the whole-text reading it replaces: the file's text read with
universal newlines (``"\\r\\n"`` and a lone ``"\\r"`` end a line as ``"\\n"`` does), split into
lines (a final newline adds no line), each line split by ``str.split()`` (any run of whitespace
separates, none at the ends), each token looked up in the declared item universe by exact match.
A block is cut after its last ``"\\n"``, so no line and no UTF-8 character straddles two blocks.
A block of ASCII text without the separators ``\\x1c``–``\\x1f`` (which ``str.split`` treats as
whitespace and Arrow does not) is split by Arrow's ASCII whitespace, the same set there; any
other block is split in Python.
Everything here is private data: it goes to the owner's load report or into a column store.
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
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dpmine_server.data.csv_chunks import GrowingArray

__all__ = ["DEFAULT_FIMI_BLOCK_BYTES", "FimiOccurrences", "read_fimi_occurrences"]

#: Bytes of text read per block (the buffer the streaming read holds besides the occurrences).
DEFAULT_FIMI_BLOCK_BYTES: Final = 1 << 24
#: Bytes that ``str.split`` reads as whitespace and Arrow's ASCII splitter does not.
_PYTHON_ONLY_SEPARATORS: Final = re.compile(rb"[\x1c-\x1f]")


@dataclass
class FimiOccurrences:
    """A FIMI file's transactions as occurrence pairs: ``rows[k]`` holds item ``item_ids[k]``
    (-1: not in the universe); ``unknown`` lists the first (row, token) pairs of unknown items."""

    n_rows: int = 0
    n_tokens: int = 0
    rows: GrowingArray = field(default_factory=lambda: GrowingArray(np.int32))
    item_ids: GrowingArray = field(default_factory=lambda: GrowingArray(np.int32))
    unknown: list[tuple[int, str]] = field(default_factory=list)


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


def read_fimi_occurrences(
    path: Path,
    items: Sequence[str],
    *,
    max_rows: int,
    max_unknown: int,
    block_bytes: int = DEFAULT_FIMI_BLOCK_BYTES,
) -> FimiOccurrences:
    """The occurrences of a FIMI file (gzip by extension). Past ``max_rows`` lines only the
    lines are counted (the load fails on n_max; its message needs the count). Raises
    ``FileNotFoundError``, ``OSError`` or ``UnicodeDecodeError`` as reading the text would."""
    universe = pa.array(list(items), pa.string())
    index = pd.Index(list(items), dtype=object)
    found = FimiOccurrences()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for block in _blocks(handle, block_bytes):
            text = block.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
            if block.isascii() and not _PYTHON_ONLY_SEPARATORS.search(block):
                arrow, line_of, n_lines = _arrow_tokens(text)
                ids = _arrow_ids(arrow, universe)
                tokens: Sequence[str] | pa.StringArray = arrow
            else:
                python, line_of, n_lines = _python_tokens(text)
                ids = index.get_indexer(pd.Index(python, dtype=object))
                tokens = python
            first = found.n_rows
            found.n_rows += n_lines
            found.n_tokens += len(line_of)
            if found.n_rows > max_rows:
                continue
            found.rows.append((first + line_of).astype(np.int32))
            found.item_ids.append(np.asarray(ids, dtype=np.int32))
            for position in np.flatnonzero(ids < 0)[: max_unknown - len(found.unknown)]:
                token = tokens[int(position)]
                text_token = token if isinstance(token, str) else str(token.as_py())
                found.unknown.append((first + int(line_of[position]), text_token))
    return found
