"""The streaming CSV path (data/csv_chunks.py) against the whole-frame path it replaces.

Both paths run on the same files; the streaming one reads them in tiny chunks so that chunk
boundaries fall inside the data. Columns must be bitwise equal, reports and error messages equal.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine.wire.datasets import (
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    CsvSource,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine_server.data import csv_chunks, loaders
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.data.loaders import (
    CellCounts,
    DataValidationError,
    LoadReport,
    csv_cell_counts,
    load_csv_frame,
    load_csv_streaming,
    load_store,
    read_csv_strings,
    read_csv_strings_streamed,
    sniff_delimiter,
)

#: Small enough that every test file spans several chunks.
TINY_BLOCK = 64
T = TypeVar("T")

ODD_NUMBERS = [
    "1e3", "+5", " 5 ", "inf", "-inf", "Infinity", "nan", "0x10", "1_000", "1.", ".5", "-0.0",
    "0", "+0", "1E-3", "12345678901234567890123", "1e400", "2e-324", "abc", "", "  7.25  ",
    "3.141592653589793238", "-12", "99", "1,5",
]  # fmt: skip
BOOLEANS = ["1", "0", "TRUE", "false", " Yes ", "no", "t", "F", "1.0", "0.0", "?", "NA", ""]
COLOURS = ["red", "green", "blue", " red", "?", "", "NA"]

ATTRIBUTES: list[AnyAttribute] = [
    BooleanAttribute(name="flag"),
    CategoricalAttribute(name="colour", categories=["red", "green", "blue"]),
    NumericAttribute(name="size", lo=-10.0, hi=100.0, text_as_missing=True),
    NumericAttribute(name="weight", lo=0.0, hi=50.0),
]
METADATA = DatasetMetadata(kind="table", n_max=10_000, attributes=ATTRIBUTES)


def _table(n_rows: int, seed: int) -> str:
    """Every attribute type, missing values, odd numerics, quoted cells and an ignored column."""
    rng = np.random.default_rng(seed)
    lines = ['flag,colour,size,weight,"note, quoted"']
    for row in range(n_rows):
        flag = BOOLEANS[rng.integers(len(BOOLEANS))]
        colour = COLOURS[rng.integers(len(COLOURS))]
        size = ODD_NUMBERS[rng.integers(len(ODD_NUMBERS))]
        weight = f"{rng.normal(20, 20):.{rng.integers(0, 12)}f}" if row % 7 else "?"
        note = f'"say ""{row}""\nthen go"' if row % 5 == 0 else f"n{row}"
        lines.append(f'{flag},{colour},"{size}",{weight},{note}')
    return "\n".join(lines) + "\n"


def _columns_equal(streamed: ColumnStore, framed: ColumnStore) -> None:
    assert streamed.n_rows == framed.n_rows
    for attribute in ATTRIBUTES:
        a, b = streamed.column(attribute.name), framed.column(attribute.name)
        if isinstance(a, BooleanColumn):
            assert isinstance(b, BooleanColumn)
            assert a.true.words.tobytes() == b.true.words.tobytes()
            assert a.present.words.tobytes() == b.present.words.tobytes()
        elif isinstance(a, CategoricalColumn):
            assert isinstance(b, CategoricalColumn)
            assert a.codes.dtype == b.codes.dtype
            assert a.codes.tobytes() == b.codes.tobytes()
        else:
            assert isinstance(a, NumericColumn)
            assert isinstance(b, NumericColumn)
            assert a.values.tobytes() == b.values.tobytes()
            assert a.sorted_order.tobytes() == b.sorted_order.tobytes()
            assert a.present.words.tobytes() == b.present.words.tobytes()


def _reports_equal(streamed: LoadReport, framed: LoadReport) -> None:
    assert streamed == framed


def _both(path: Path, metadata: DatasetMetadata = METADATA) -> tuple[str, str]:
    """The error messages of both paths (the streaming one in tiny chunks)."""
    with pytest.raises(DataValidationError) as streamed:
        load_csv_streaming(metadata, path, "file 't.csv'", block_bytes=TINY_BLOCK)
    with pytest.raises(DataValidationError) as framed:
        load_csv_frame(metadata, path, "file 't.csv'")
    return str(streamed.value), str(framed.value)


@pytest.mark.parametrize("name", ["t.csv", "t.csv.gz"])
@pytest.mark.parametrize(
    "each_cell_share",
    [loaders.EACH_CELL_SHARE, 0.0, 1.0],
    ids=["default", "cell by cell after the first chunk", "per distinct value always"],
)
def test_chunks_give_the_same_columns_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, each_cell_share: float
) -> None:
    """Both conversions of a chunk (per distinct value, per cell) give the frame path's
    columns and report: a share of 0 sends every column's later chunks cell by cell, a share
    of 1 none (a chunk is at most all distinct)."""
    monkeypatch.setattr(loaders, "EACH_CELL_SHARE", each_cell_share)
    text = _table(300, seed=1)
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    streamed, streamed_report = load_csv_streaming(
        METADATA, path, "file 't.csv'", block_bytes=TINY_BLOCK
    )
    framed, framed_report = load_csv_frame(METADATA, path, "file 't.csv'")
    _columns_equal(streamed, framed)
    _reports_equal(streamed_report, framed_report)
    assert streamed_report.ignored_columns == ["note, quoted"]
    assert streamed_report.clipped["size"] > 0  # 1e3 and 99... outside [-10, 100]
    size = streamed.column("size")
    assert isinstance(size, NumericColumn)
    assert np.isnan(size.values).any()  # 'abc', 'inf', '1_000' are missing (text_as_missing)


def _same_message(tmp_path: Path, rows: list[str]) -> str:
    """The refusal of a file of ``rows`` (flag, colour, size, weight), equal on both paths."""
    path = tmp_path / "t.csv"
    path.write_text("flag,colour,size,weight\n" + "\n".join(rows) + "\n", encoding="utf-8")
    streamed, framed = _both(path)
    assert streamed == framed
    return streamed


def test_bad_cells_name_the_line_and_count_over_every_chunk(tmp_path: Path) -> None:
    rows = [f"{i % 2},red,{i},{i}" for i in range(200)]
    rows[3] = " maybe ,red,3,3"  # line 5; shown stripped (its chunk converts per distinct value)
    rows[150] = "perhaps,pink,150,1_000"  # line 152, past many chunks
    rows[190] = "0,pink,190,x"
    streamed = _same_message(tmp_path, rows)
    assert "column 'flag', line 5: value 'maybe' is not a Boolean" in streamed
    assert "(1 more such cells in this column)" in streamed
    assert "column 'colour', line 152: value 'pink'" in streamed
    assert "column 'weight', line 152: value '1_000' is not a finite number" in streamed


def test_a_bad_cell_found_by_the_numeric_scan_is_shown_stripped(tmp_path: Path) -> None:
    """A column that is not integral converts its later chunks by the compiled scan
    (data/cell_scan.py); its first bad cell, past many chunks, is named and shown stripped, as
    the frame path shows it."""
    rows = [f"1,red,{i}.5,{i % 40}.25" for i in range(200)]
    rows[120] = "1,red,120.5, oops\t"
    rows[170] = "1,red,170.5,\u00a0nope"
    streamed = _same_message(tmp_path, rows)
    assert "column 'weight', line 122: value 'oops' is not a finite number" in streamed
    assert "(1 more such cells in this column)" in streamed


def test_structural_problems_and_n_max_match(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(_table(120, seed=2).replace("colour", "color", 1), encoding="utf-8")
    small = METADATA.model_copy(update={"n_max": 50})
    streamed, framed = _both(path, small)
    assert streamed == framed
    assert "has 120 rows, more than the declared n_max=50" in streamed
    assert "has no column 'colour'" in streamed


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("flag,colour,size,weight\n1,red,3\n0,blue,1,2\n", "short row"),
        ('flag,colour,size,weight\n1,red,3,4\n0,bl"ue,1,2\n', "stray quote"),
        ('flag,colour,size,weight\n1,red,3,4\n0,"blue,1,2\n', "unclosed quote"),
    ],
)
def test_files_the_chunks_would_read_otherwise_take_the_frame_path(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(csv_chunks.UseFramePath):
        load_csv_streaming(METADATA, path, "file 't.csv'", block_bytes=TINY_BLOCK)
    try:
        expected: object = load_csv_frame(METADATA, path, "file 't.csv'")[1]
    except DataValidationError as err:
        expected = str(err)
    try:
        got: object = load_store(METADATA, CsvSource(path="t.csv"), base_dir=tmp_path)[1]
    except DataValidationError as err:
        got = str(err)
    assert got == expected, why


@pytest.mark.parametrize(
    "others",
    [
        ["5", "-7", "+12", "007"],  # integers: pandas reads -0 as the integer 0
        ["5", "9223372036854775808"],  # uint64 integers, likewise
        ["5", "1.5"],  # a float: -0 is -0.0
        ["5", "?"],  # a missing cell is NaN, so floats
        ["-5", "9223372036854775808"],  # int64 and uint64 do not mix: floats
        ["18446744073709551616"],  # past uint64: floats
    ],
)
def test_a_negative_zero_takes_the_sign_pandas_gives_it(tmp_path: Path, others: list[str]) -> None:
    cells = ["-0", *[others[i % len(others)] for i in range(80)], "-00"]
    rows = [f"1,red,{cell},1" for cell in cells]
    path = tmp_path / "t.csv"
    path.write_text("flag,colour,size,weight\n" + "\n".join(rows) + "\n", encoding="utf-8")
    streamed, _ = load_csv_streaming(METADATA, path, "file 't.csv'", block_bytes=TINY_BLOCK)
    framed, _ = load_csv_frame(METADATA, path, "file 't.csv'")
    _columns_equal(streamed, framed)


def test_numeric_cells_parse_as_pandas_parses_the_whole_column() -> None:
    cells = pa.array([cell.strip() for cell in ODD_NUMBERS])
    missing = np.zeros(len(cells), dtype=np.bool_)
    chunk = csv_chunks.numeric_chunk(cells, missing, text_as_missing=False)
    column = pd.Series([cell.strip() for cell in ODD_NUMBERS], dtype=object)
    expected = np.asarray(pd.to_numeric(column, errors="coerce"), dtype=np.float64)
    assert chunk.values.tobytes() == expected.tobytes()


def _stream_frame(path: Path) -> list[list[str]]:
    """The stripped cells of every row after the header, as the streaming reader sees them."""
    rows: list[list[str]] = []
    batches = csv_chunks.read_string_batches(path, sniff_delimiter(path), block_bytes=TINY_BLOCK)
    for number, batch in enumerate(batches):
        columns = [
            csv_chunks.stripped(csv_chunks.string_column(batch, i)).to_pylist()
            for i in range(batch.num_columns)
        ]
        rows += [list(cells) for cells in zip(*columns, strict=True)][1 if number == 0 else 0 :]
    return rows


FIELD = st.sampled_from(
    ["a", "1", " ", '"', '""', '"a,b"', '"a\nb"', "\ufeff", "\x1c", "\xa0", 'x"y', "", "é"]
)
#: Up to five rows of three fuzzed cells, and the line end between them.
FUZZ_ROWS = st.lists(st.lists(FIELD, min_size=3, max_size=3).map(",".join), max_size=5)
FUZZ_ENDS = st.sampled_from(["\n", "\r\n", "\r", "\n\n"])


def _fuzzed_file(folder: Path, rows: list[str], ends: str) -> Path:
    """A CSV of header ``h1,h2,h3`` and ``rows``, every line ended by ``ends``."""
    path = folder / "f.csv"
    path.write_text("h1,h2,h3" + ends + ends.join(rows) + ends, encoding="utf-8")
    return path


@settings(max_examples=150, deadline=None)
@given(rows=FUZZ_ROWS, ends=FUZZ_ENDS)
def test_the_reader_splits_cells_as_pandas_does(
    tmp_path_factory: pytest.TempPathFactory, rows: list[str], ends: str
) -> None:
    path = _fuzzed_file(tmp_path_factory.mktemp("fuzz"), rows, ends)
    try:
        streamed = _stream_frame(path)
    except csv_chunks.UseFramePath:
        return  # the loader reads such a file with the whole-frame path
    if not streamed:
        with pytest.raises(DataValidationError, match="has a header but no rows"):
            read_csv_strings(path)
        return
    assert streamed == read_csv_strings(path).to_numpy(dtype=object).tolist()


def _or_message(read: Callable[[], T]) -> T | str:
    """What ``read`` returns, or the message of the DataValidationError it raises."""
    try:
        return read()
    except DataValidationError as error:
        return str(error)


def _same_cell_counts(path: Path) -> None:
    """The streamed cell counts (tiny batches, summed often) are those of pandas' frame,
    or both refuse the file with one message."""
    expected = _or_message(lambda: CellCounts.of_frame(read_csv_strings(path)))
    streamed = _or_message(lambda: csv_cell_counts(path, block_bytes=TINY_BLOCK))
    if isinstance(expected, str) or isinstance(streamed, str):
        assert streamed == expected
        return
    assert (streamed.names, streamed.n_rows) == (expected.names, expected.n_rows)
    for name in expected.names:
        got, want = streamed.counts[name], expected.counts[name]
        assert dict(zip(got.index, got.tolist(), strict=True)) == dict(
            zip(want.index, want.tolist(), strict=True)
        )
        assert got.index.dtype == want.index.dtype


def _same_string_frames(path: Path) -> None:
    """The streamed string frame is pandas' frame, or both refuse the file with one message."""
    expected = _or_message(lambda: read_csv_strings(path))
    streamed = _or_message(lambda: read_csv_strings_streamed(path))
    if isinstance(expected, str) or isinstance(streamed, str):
        assert streamed == expected
    else:
        pd.testing.assert_frame_equal(streamed, expected)


@settings(max_examples=150, deadline=None)
@given(rows=FUZZ_ROWS, ends=FUZZ_ENDS)
def test_the_streamed_string_frame_is_pandas_frame(
    tmp_path_factory: pytest.TempPathFactory, rows: list[str], ends: str
) -> None:
    """The streamed frame (CSV pairs) and cell counts (metadata proposals) equal the
    whole-frame reading's, cell by cell and in dtype, on the reader's fuzzed cells; files
    Arrow refuses go to pandas."""
    path = _fuzzed_file(tmp_path_factory.mktemp("frames"), rows, ends)
    _same_string_frames(path)
    _same_cell_counts(path)


@pytest.mark.parametrize(
    "text",
    [
        _table(300, seed=2),  # quotes, quoted line ends, odd numbers, an ignored column
        "flag,colour,size,weight\n1,red,3\n0,blue,1,2\n",  # short row: pandas pads it
        'flag,colour,size,weight\n1,red,3,4\n0,bl"ue,1,2\n',  # stray quote
        "only\n1\n \n2\n",  # one column: pandas skips the blank line
        "a,a\n1,2\n",  # a repeated name
        "a,b\n",  # no rows
    ],
    ids=["table", "short row", "stray quote", "one column", "repeated name", "no rows"],
)
def test_the_streamed_string_frame_on_whole_files(
    tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frames and cell counts (what the metadata proposal reads) equal pandas' on whole files;
    the counts are summed every few batches, so the sums of sums are checked too."""
    monkeypatch.setattr(loaders, "_COUNT_ENTRIES", 2)
    path = tmp_path / "t.csv"
    path.write_text(text, encoding="utf-8")
    _same_string_frames(path)
    _same_cell_counts(path)


@pytest.mark.parametrize(
    ("text", "well_formed"),
    [
        ('a,b\n"x ""quoted"" y","1,2"\r\n"",z\n', True),
        ('a,b\n"x"y,1\n', False),  # text after a closing quote
        ('a,b\nx"y,1\n', False),  # a quote inside an unquoted field
        ('a,b\n1,"open\n', False),  # ends inside a quoted field
    ],
)
def test_the_quote_check_is_the_same_at_every_block_size(
    tmp_path: Path, text: str, well_formed: bool
) -> None:
    path = tmp_path / "q.csv"
    path.write_text(text, encoding="utf-8")
    for block_bytes in range(1, len(text) + 1):
        if well_formed:
            csv_chunks.check_quotes(path, ",", block_bytes=block_bytes)
        else:
            with pytest.raises(csv_chunks.UseFramePath):
                csv_chunks.check_quotes(path, ",", block_bytes=block_bytes)
