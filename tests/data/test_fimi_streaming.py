"""The streaming FIMI path (data/fimi_stream.py) against the whole-text reading it replaces:
``read_fimi_lines`` then ``str.split`` per line. Tiny blocks put block boundaries inside the
data; texts mix Arrow's ASCII blocks with blocks that only Python splits exactly."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine.wire.datasets import DatasetMetadata, FimiSource
from dpmine_server.data.columns import ItemColumns
from dpmine_server.data.fimi_stream import fill_item_rows, fimi_blocks, scan_fimi
from dpmine_server.data.loaders import load_store, read_fimi_lines

UNIVERSE = ["1", "2", "10", "ä", "x\x1cy", "b"]
#: Tokens (some outside the universe) and the whitespace that separates them: ASCII spaces,
#: tabs, form feeds and carriage returns, Python-only separators and non-ASCII spaces.
TOKENS = st.sampled_from([*UNIVERSE, "7", "é", "xy"])
SPACES = st.sampled_from([" ", "  ", "\t", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x85", "\u3000"])
LINE_ENDS = st.sampled_from(["\n", "\r\n", "\n\n", "\r"])


#: One line: (separator, token) pairs, then trailing whitespace and a line end.
LINES = st.lists(
    st.tuples(st.lists(st.tuples(SPACES, TOKENS), max_size=6), SPACES, LINE_ENDS), max_size=12
)


def _text(lines: list[tuple[list[tuple[str, str]], str, str]], final_newline: bool) -> str:
    text = "".join(
        "".join(space + token for space, token in pairs) + trailing + end
        for pairs, trailing, end in lines
    )
    return text if final_newline else text.rstrip("\n")


def _expected(path: Path) -> tuple[int, list[int], list[int], list[tuple[int, str]]]:
    """What the whole-text reading gives: lines, and per token its line and item (-1)."""
    lines = read_fimi_lines(path)
    index = pd.Index(UNIVERSE, dtype=object)
    rows, ids, unknown = [], [], []
    for row, line in enumerate(lines):
        for token in line.split():
            position = int(index.get_indexer(pd.Index([token], dtype=object))[0])
            rows.append(row)
            ids.append(position)
            if position < 0:
                unknown.append((row, token))
    return len(lines), rows, ids, unknown


@settings(max_examples=200, deadline=None)
@given(lines=LINES, final_newline=st.booleans(), block=st.integers(1, 40), zipped=st.booleans())
def test_streamed_occurrences_equal_the_whole_text_reading(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[tuple[list[tuple[str, str]], str, str]],
    final_newline: bool,
    block: int,
    zipped: bool,
) -> None:
    text = _text(lines, final_newline)
    folder = tmp_path_factory.mktemp("fimi")
    path = folder / ("t.dat.gz" if zipped else "t.dat")
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if zipped else data)
    n_lines, rows, ids, unknown = _expected(path)
    blocks = list(fimi_blocks(path, UNIVERSE, block_bytes=block))
    assert sum(b.n_lines for b in blocks) == n_lines
    assert [b.first_row + int(line) for b in blocks for line in b.line_of] == rows
    assert [int(i) for b in blocks for i in b.item_ids] == ids
    found = [
        (b.first_row + int(b.line_of[k]), b.token(int(k)))
        for b in blocks
        for k in np.flatnonzero(b.item_ids < 0)
    ]
    assert found == unknown
    # The two passes build the item rows that the pairs give (duplicates once, widths cut).
    known = [(row, item) for row, item in zip(rows, ids, strict=True) if item >= 0]
    for width in (None, 1, 2):
        scan = scan_fimi(
            path,
            UNIVERSE,
            max_rows=10**6,
            max_unknown=10**6,
            max_row_width=width,
            block_bytes=block,
        )
        assert (scan.n_rows, scan.n_tokens, scan.unknown) == (n_lines, len(ids), unknown)
        indptr, indices = fill_item_rows(
            path, UNIVERSE, scan, max_row_width=width, block_bytes=block
        )
        expected = ItemColumns.from_pairs(
            UNIVERSE,
            np.array([r for r, _ in known], dtype=np.int64),
            np.array([i for _, i in known], dtype=np.int64),
            max(n_lines, 1),
            max_row_width=width,
        )
        assert indptr.tolist() == expected.indptr.tolist()
        assert indices.tolist() == expected.indices.tolist()
        assert scan.duplicates == len(known) - len(set(known))


def test_past_max_rows_only_lines_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.dat"
    path.write_text("1 2\n" * 50, encoding="utf-8")
    scan = scan_fimi(path, UNIVERSE, max_rows=10, max_unknown=5, max_row_width=None, block_bytes=8)
    assert scan.n_rows == 50
    assert int(scan.item_rows.sum()) < 2 * 50  # the blocks past n_max counted no item row


def test_a_file_that_changes_between_the_passes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.dat"
    path.write_text("1 2\n2\n", encoding="utf-8")
    scan = scan_fimi(path, UNIVERSE, max_rows=10, max_unknown=5, max_row_width=None)
    path.write_text("1 2\n2 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="changed between the two passes"):
        fill_item_rows(path, UNIVERSE, scan, max_row_width=None)


def test_a_large_file_loads_as_the_whole_text_does(tmp_path: Path) -> None:
    """Thousands of transactions in blocks of about 1 KiB: the store's item rows and the
    report's duplicates and truncated rows are those of the pairs read in Python."""
    rng = np.random.default_rng(3)
    items = [str(i) for i in range(40)]
    lines = [" ".join(rng.choice(items, size=int(rng.integers(0, 12)))) for _ in range(3000)]
    path = tmp_path / "big.dat"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    metadata = DatasetMetadata(kind="transactions", n_max=5000, items=items, max_row_width=6)
    store, report = load_store(metadata, FimiSource(path="big.dat"), base_dir=tmp_path)
    pairs = {(row, items.index(t)) for row, line in enumerate(lines) for t in line.split()}
    assert report.duplicate_items == sum(len(line.split()) for line in lines) - len(pairs)
    widths = np.bincount([row for row, _ in pairs], minlength=len(lines))
    assert report.truncated_rows == int(np.count_nonzero(widths > 6))
    kept = {
        (row, item)
        for row in range(len(lines))
        for item in sorted(item for r, item in pairs if r == row)[:6]
    }
    item_columns = store.items
    for item in range(len(items)):
        start, end = item_columns.indptr[item], item_columns.indptr[item + 1]
        assert item_columns.indices[start:end].tolist() == sorted(
            row for row, i in kept if i == item
        )
