"""Build a :class:`ColumnStore` from the owner's source and public metadata (DESIGN.md "Services").

Sources are the wire models of :mod:`dpmine.wire.datasets`: one CSV file, a pair of CSV files
(one per view), a FIMI ``.dat`` file, or an SQL table/query. Cells are read as strings, then
converted to the declared types (ALGORITHMS.md §0.2): numeric values are clipped to [lo, hi].
A single CSV file streams (:func:`load_csv_streaming`: chunks of Arrow strings converted with
the vectorised kernels of :mod:`dpmine_server.data.csv_chunks`); the other sources, and the CSV
files it hands back, are read whole as a frame of strings (:func:`load_csv_frame`).

The owner is trusted: :class:`DataValidationError` messages and the :class:`LoadReport` may
mention data values, file lines and the row count. They are for the owner only and must never be
sent to an analyst.

Imports. pandas (0.3 s) is imported by the functions that use it, not with this module, so
that a process that never reads a table (the owner's administration commands, most test
servers) does not pay for it; a serving process imports it in its warm-up, before any
padded load (services/warmup.py).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy

from dpmine.wire.datasets import (
    BOOLEAN_FALSE,
    BOOLEAN_TRUE,
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    CsvPairSource,
    CsvSource,
    DatasetMetadata,
    DatasetSource,
    FimiSource,
    NumericAttribute,
    SqlSource,
)
from dpmine_server.data import csv_chunks
from dpmine_server.data.arriving import open_source, wait_arrived
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    ItemColumns,
    NumericColumn,
)
from dpmine_server.data.csv_chunks import PY_WHITESPACE
from dpmine_server.data.fimi_stream import fill_item_rows, scan_fimi

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "MAX_PROBLEMS",
    "SNAPSHOT_FILE",
    "CellCounts",
    "DataValidationError",
    "LoadReport",
    "csv_cell_counts",
    "load_csv_frame",
    "load_csv_streaming",
    "load_store",
    "read_csv_strings",
    "read_csv_strings_streamed",
    "read_fimi_lines",
    "read_sql_strings",
    "resolve_path",
    "snapshot_sql",
    "sniff_delimiter",
]

#: Problems collected before loading stops and reports them together.
MAX_PROBLEMS = 10
_MAX_SHOWN = 20
#: File name of an SQL source's snapshot inside its dataset version folder.
SNAPSHOT_FILE = "snapshot.csv"

Locate = Callable[[int], str]
BoolArray = npt.NDArray[np.bool_]


class DataValidationError(ValueError):
    """The source does not match the declared metadata; the message (owner only) says where."""


@dataclass
class ValueSummary:
    """What the copied-values check (data/propose.py) reads of a load, gathered while loading
    so that no one reads the source again: per numeric attribute the smallest and largest finite
    value before clipping, per categorical attribute the cells of each declared category."""

    extremes: dict[str, tuple[float, float]] = field(default_factory=dict)
    category_counts: dict[str, list[int]] = field(default_factory=dict)

    def add_numeric(self, name: str, values: npt.NDArray[np.float64]) -> None:
        """Take in the finite ``values`` (NaN: missing) of one part of a numeric column."""
        finite = values[np.isfinite(values)]
        if finite.size == 0:
            return
        low, high = float(finite.min()), float(finite.max())
        if name in self.extremes:
            low, high = min(low, self.extremes[name][0]), max(high, self.extremes[name][1])
        self.extremes[name] = (low, high)

    def add_categorical(self, name: str, codes: npt.NDArray[np.int32], categories: int) -> None:
        """Count the cells of each category in a whole column's ``codes`` (-1: missing)."""
        counts = np.bincount(codes[codes >= 0], minlength=categories)
        self.category_counts[name] = [int(count) for count in counts]


@dataclass
class LoadReport:
    """What the owner should know about a load. PRIVATE: owner only (holds the row count)."""

    source: str
    n_rows: int = 0
    clipped: dict[str, int] = field(default_factory=dict)
    missing: dict[str, int] = field(default_factory=dict)
    ignored_columns: list[str] = field(default_factory=list)
    duplicate_items: int = 0
    #: Transaction rows longer than the declared ``max_row_width``, cut to their first items.
    truncated_rows: int = 0
    #: For the server's copied-values warnings; not part of the owner's report (:meth:`fields`).
    values: ValueSummary = field(default_factory=ValueSummary, repr=False, compare=False)

    def fields(self) -> dict[str, Any]:
        """The report as the owner gets it (JSON, CLI, console): every field but ``values``."""
        return {
            entry.name: getattr(self, entry.name)
            for entry in dataclasses.fields(self)
            if entry.name != "values"
        }


class _Problems:
    """Collects up to MAX_PROBLEMS messages, then raises them as one error."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def add(self, message: str) -> None:
        if len(self.messages) < MAX_PROBLEMS:
            self.messages.append(message)

    @property
    def full(self) -> bool:
        return len(self.messages) >= MAX_PROBLEMS

    def raise_if_any(self, source: str) -> None:
        if self.messages:
            shown = "\n".join(f"  - {message}" for message in self.messages)
            more = " (stopped at the first problems)" if self.full else ""
            raise DataValidationError(f"cannot load {source}{more}:\n{shown}")


def _listing(values: list[str]) -> str:
    more = len(values) - _MAX_SHOWN
    return repr(values[:_MAX_SHOWN])[:-1] + (f", ... {more} more]" if more > 0 else "]")


def resolve_path(path: str, base_dir: Path) -> Path:
    """A source path: absolute as given, relative under ``base_dir``."""
    candidate = Path(path)
    return candidate if candidate.is_absolute() else base_dir / candidate


#: Delimiters recognised besides the comma, in order of preference.
DELIMITERS = (",", ";", "\t", "|")
_SNIFF_BYTES = 1 << 16
_SNIFF_ROWS = 50


def _open_text(path: Path) -> io.TextIOBase:
    """``path`` as UTF-8 text (gzip by extension); an upload still arriving is read as its
    bytes arrive (:func:`~dpmine_server.data.arriving.open_source`), a compressed one once it
    is whole."""
    if path.suffix == ".gz":
        wait_arrived(path)
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return io.TextIOWrapper(open_source(path), encoding="utf-8", newline="")


def _field_counts(lines: list[str], delimiter: str) -> list[int]:
    """Fields per non-empty row of ``lines`` split at ``delimiter`` ([] if unreadable so)."""
    try:
        return [len(row) for row in csv.reader(lines, delimiter=delimiter) if row]
    except csv.Error:
        return []


def sniff_delimiter(path: Path) -> str:
    """The delimiter of a CSV file: the first of :data:`DELIMITERS` that splits the header into
    several fields and every sampled row into as many; a comma if none does.

    Raises :class:`DataValidationError` if the file is missing or is not UTF-8 text.
    """
    try:
        with _open_text(path) as handle:
            sample = handle.read(_SNIFF_BYTES)
            complete = len(sample) < _SNIFF_BYTES
    except FileNotFoundError:
        raise DataValidationError(f"file '{path}' does not exist") from None
    except UnicodeDecodeError:
        raise DataValidationError(_not_utf8(path)) from None
    except (OSError, EOFError) as err:
        raise DataValidationError(f"file '{path}' is not a readable CSV file: {err}") from None
    lines = sample.splitlines()
    if not complete:
        lines = lines[:-1]  # the last line of a partial sample may be cut
    lines = lines[:_SNIFF_ROWS]
    for delimiter in DELIMITERS:
        counts = _field_counts(lines, delimiter)
        if counts and counts[0] > 1 and all(count == counts[0] for count in counts):
            return delimiter
    return ","


def _not_utf8(path: Path) -> str:
    """Owner-only message naming the line of the first byte that is not UTF-8."""
    try:
        wait_arrived(path)
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        return (
            f"file '{path}' is not UTF-8 text: line {line} holds byte 0x{raw[err.start]:02x}; "
            "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
        )
    except (OSError, EOFError) as err:
        return f"file '{path}' is not a readable CSV file: {err}"
    return f"file '{path}' is not UTF-8 text; save it as UTF-8"


def read_csv_strings(path: Path) -> pd.DataFrame:
    """Every cell of a CSV (gzip by extension) as a stripped string; short rows give ''.

    The delimiter is sniffed (:func:`sniff_delimiter`). A file without a data row is refused.
    """
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    delimiter = sniff_delimiter(path)
    try:
        frame = pd.read_csv(
            path, header=None, dtype=str, keep_default_na=False, na_filter=False, sep=delimiter
        )
    except FileNotFoundError:
        raise DataValidationError(f"file '{path}' does not exist") from None
    except UnicodeDecodeError:
        raise DataValidationError(_not_utf8(path)) from None
    except pd.errors.EmptyDataError:
        raise DataValidationError(f"file '{path}' is empty; it needs a header and rows") from None
    except (OSError, pd.errors.ParserError) as err:
        raise DataValidationError(f"file '{path}' is not a readable CSV file: {err}") from None
    # The header is read as a row so that repeated names are seen (pandas would rename them).
    names = [str(name).strip() for name in frame.iloc[0]] if len(frame) else []
    if len(set(names)) != len(names):
        raise DataValidationError(f"file '{path}' repeats a column name in its header: {names}")
    if len(frame) < 2:
        raise DataValidationError(f"file '{path}' has a header but no rows; add the data rows")
    body = frame.iloc[1:].reset_index(drop=True)
    return pd.DataFrame(
        {
            name: body[column].fillna("").astype(str).str.strip(PY_WHITESPACE)
            for name, column in zip(names, body.columns, strict=True)
        }
    )


def _stripped_batches(
    path: Path, block_bytes: int = csv_chunks.DEFAULT_BLOCK_BYTES
) -> Iterator[tuple[list[str], list[pa.StringArray]]]:
    """The header's names and each data batch's cells, stripped, column by column, as
    :func:`read_csv_strings` gives them. Raises :class:`csv_chunks.UseFramePath` where Arrow's
    reader would read the file otherwise than pandas (pandas then reads it and words its
    errors), and :class:`DataValidationError` once the rows end if there was none."""
    names: list[str] | None = None
    n_rows = 0
    delimiter = sniff_delimiter(path)
    for batch in csv_chunks.read_string_batches(path, delimiter, block_bytes=block_bytes):
        data = batch
        if names is None:
            names = _header(batch, path)
            data = batch.slice(1)
        n_rows += data.num_rows
        yield (
            names,
            [
                csv_chunks.stripped(csv_chunks.string_column(data, index))
                for index in range(len(names))
            ],
        )
    if names is None:
        raise csv_chunks.UseFramePath("no header row")
    if n_rows == 0:
        raise DataValidationError(f"file '{path}' has a header but no rows; add the data rows")


def read_csv_strings_streamed(path: Path) -> pd.DataFrame:
    """:func:`read_csv_strings`, read by Arrow's streaming reader where it reads the file as
    pandas does (else by pandas), for less memory: a 10^6 × 50 table whose frame is 0.55 GiB
    peaks at 1.44 GiB with pandas' parser, 1.04 GiB with this one. CSV pairs are read so. Each
    batch is kept in pandas' string layout (64-bit offsets) as it is read, so that no column is
    ever held twice."""
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    try:
        parts: dict[str, list[pa.Array[Any]]] = {}
        for names, columns in _stripped_batches(path):
            for name, cells in zip(names, columns, strict=True):
                parts.setdefault(name, []).append(pc.cast(cells, pa.large_string()))
    except csv_chunks.UseFramePath:
        return read_csv_strings(path)
    return pd.DataFrame(
        {
            name: pa.chunked_array(column, type=pa.large_string()).to_pandas()
            for name, column in parts.items()
        }
    )


@dataclass(frozen=True)
class CellCounts:
    """What a metadata proposal reads of a table: its column names, its row count and each
    column's value counts (stripped cells, missing-value tokens included; order unspecified).
    PRIVATE: owner only."""

    names: list[str]
    n_rows: int
    counts: dict[str, pd.Series]

    @classmethod
    def of_frame(cls, frame: pd.DataFrame) -> CellCounts:
        """The counts of a frame of string cells (:func:`read_csv_strings`, an SQL source)."""
        names = [str(name) for name in frame.columns]
        return cls(
            names,
            len(frame),
            {name: frame[name].value_counts(sort=False) for name in names},
        )


def csv_cell_counts(path: Path, *, block_bytes: int = csv_chunks.DEFAULT_BLOCK_BYTES) -> CellCounts:
    """:class:`CellCounts` of a CSV as :func:`read_csv_strings` reads it. Where Arrow's
    streaming reader reads the file as pandas does, each batch is counted and dropped, so that
    memory holds each column's distinct cells, not its cells; other files go to pandas."""
    try:
        return _streamed_cell_counts(path, block_bytes)
    except csv_chunks.UseFramePath:
        return CellCounts.of_frame(read_csv_strings(path))


#: Per-batch value counts of a column are summed into one once they hold this many entries and
#: at least as many as the sum so far: a column of few values is summed every few batches, one
#: of distinct values by doubling (each entry is summed O(log n) times).
_COUNT_ENTRIES: Final = 1 << 16


def _summed(parts: list[pa.StructArray]) -> pa.StructArray:
    """Value counts (``values``, ``counts``) of several parts, summed by value."""
    table = pa.Table.from_struct_array(pa.concat_arrays(parts))
    summed = table.group_by("values").aggregate([("counts", "sum")])
    return pa.StructArray.from_arrays(
        [summed["values"].combine_chunks(), summed["counts_sum"].combine_chunks()],
        names=["values", "counts"],
    )


def _streamed_cell_counts(path: Path, block_bytes: int) -> CellCounts:
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    parts: dict[str, list[pa.StructArray]] = {}
    n_rows = 0
    for names, columns in _stripped_batches(path, block_bytes):
        n_rows += len(columns[0])
        for name, cells in zip(names, columns, strict=True):
            column = parts.setdefault(name, [])
            column.append(pc.value_counts(cells))
            if sum(len(part) for part in column[1:]) >= max(_COUNT_ENTRIES, len(column[0])):
                column[:] = [_summed(column)]
    counts = {}
    for name, column in parts.items():
        total = _summed(column)
        counts[name] = pd.Series(
            total.field("counts").to_numpy(zero_copy_only=False),
            index=pd.Index(total.field("values").to_pandas()),
            name="count",
        )
    return CellCounts(list(parts), n_rows, counts)


def _sql_strings(column: pd.Series) -> pd.Series:
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    null = column.isna().to_numpy()
    if pd.api.types.is_bool_dtype(column.dtype):
        text = column.map({True: "true", False: "false"}).astype(str)
    elif pd.api.types.is_float_dtype(column.dtype):
        values = column.to_numpy(dtype=np.float64, na_value=0.0)
        integral = bool(np.all(np.isfinite(values) & (values == np.round(values))))
        text = pd.Series(values.astype(np.int64) if integral else values).astype(str)
    else:
        text = column.astype(str)
    return text.where(~null, "").str.strip().reset_index(drop=True)


def _read_sql_frame(source: SqlSource, connection: sqlalchemy.Connection) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    if source.table is None:
        return pd.read_sql(sqlalchemy.text(source.query or ""), connection)
    schema, _, name = source.table.rpartition(".")
    try:
        table = sqlalchemy.Table(source.table, sqlalchemy.MetaData(), autoload_with=connection)
    except sqlalchemy.exc.NoSuchTableError:
        if not schema:
            raise
        table = sqlalchemy.Table(
            name, sqlalchemy.MetaData(), schema=schema, autoload_with=connection
        )
    return pd.read_sql(sqlalchemy.select(table), connection)


def read_sql_strings(source: SqlSource) -> pd.DataFrame:
    """An SQL table or query's rows as stripped strings (NULL gives ''); never echoes the URL."""
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    what = f"SQL table {source.table!r}" if source.table is not None else "SQL query"
    try:
        engine = sqlalchemy.create_engine(source.url)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ValueError):
        # The message of a bad URL repeats the URL, which may hold a password: do not echo it.
        raise DataValidationError(
            "the SQL URL is not valid or its database driver is not installed"
        ) from None
    try:
        with engine.connect() as connection:
            frame = _read_sql_frame(source, connection)
    except sqlalchemy.exc.NoSuchTableError:
        raise DataValidationError(f"{what} does not exist in the database") from None
    except (sqlalchemy.exc.SQLAlchemyError, pd.errors.DatabaseError) as err:
        raise DataValidationError(f"cannot read {what}: {type(err).__name__}: {err}") from None
    finally:
        engine.dispose()
    return pd.DataFrame({str(name): _sql_strings(frame[name]) for name in frame.columns})


def read_fimi_lines(path: Path) -> list[str]:
    """The lines of a FIMI file (gzip by extension); a final newline does not add a line."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                text = handle.read()
        else:
            text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataValidationError(f"file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataValidationError(f"file '{path}' is not a readable text file: {err}") from None
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# -- typed conversion -------------------------------------------------------------------------


_NOT_BOOLEAN = "is not a Boolean (use 1/0, true/false, t/f or yes/no, or a missing-value token)"
_NOT_NUMBER = "is not a finite number"


def _not_category(attribute: CategoricalAttribute) -> str:
    return (
        f"is not one of the declared categories {_listing(attribute.categories)}; "
        "add it to the metadata or clean the data"
    )


def _bad_cells_message(where: str, line: str, value: str, why: str, count: int) -> str:
    """The problem of a column's first bad cell; ``count`` bad cells in the whole column."""
    more = f" ({count - 1} more such cells in this column)" if count > 1 else ""
    return f"{where}, {line}: value {value!r} {why}{more}"


def _report_bad(
    problems: _Problems, where: str, locate: Locate, raw: pd.Series, *, bad: BoolArray, why: str
) -> None:
    positions = np.flatnonzero(bad)
    if positions.size == 0:
        return
    first = int(positions[0])
    problems.add(_bad_cells_message(where, locate(first), raw.iloc[first], why, positions.size))


def _convert(
    attribute: AnyAttribute,
    raw: pd.Series,
    *,
    missing_tokens: list[str],
    where: str,
    locate: Locate,
    problems: _Problems,
    report: LoadReport,
) -> Column | None:
    """One typed column from string cells, or None after recording the problems."""
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    missing = raw.isin(missing_tokens).to_numpy()
    name = attribute.name
    if isinstance(attribute, BooleanAttribute):
        lowered = raw.str.lower()
        true = lowered.isin(BOOLEAN_TRUE).to_numpy() & ~missing
        false = lowered.isin(BOOLEAN_FALSE).to_numpy() & ~missing
        bad = ~(true | false | missing)
        _report_bad(problems, where, locate, raw, bad=bad, why=_NOT_BOOLEAN)
        report.missing[name] = int(missing.sum())
        return None if bad.any() else BooleanColumn.from_arrays(name, true, ~missing)
    if isinstance(attribute, CategoricalAttribute):
        codes = pd.Index(attribute.categories).get_indexer(pd.Index(raw)).astype(np.int32)
        bad = (codes < 0) & ~missing
        why = _not_category(attribute)
        _report_bad(problems, where, locate, raw, bad=bad, why=why)
        report.missing[name] = int((codes < 0).sum())
        if bad.any():
            return None
        report.values.add_categorical(name, codes, len(attribute.categories))
        return CategoricalColumn(name, tuple(attribute.categories), codes)
    values = pd.to_numeric(raw.mask(missing), errors="coerce").to_numpy(dtype=np.float64)
    if attribute.text_as_missing:
        missing = missing | ~np.isfinite(values)
        values = np.where(missing, np.nan, values)
    bad = ~np.isfinite(values) & ~missing
    _report_bad(problems, where, locate, raw, bad=bad, why=_NOT_NUMBER)
    report.missing[name] = int(missing.sum())
    if bad.any():
        return None
    report.clipped[name] = int(((values < attribute.lo) | (values > attribute.hi)).sum())
    report.values.add_numeric(name, values)
    return NumericColumn.from_values(name, values, lo=attribute.lo, hi=attribute.hi)


def _csv_line(position: int) -> str:
    return f"line {position + 2}"


def _sql_row(position: int) -> str:
    return f"row {position + 1}"


def _check_n_max(n_rows: int, metadata: DatasetMetadata, problems: _Problems, what: str) -> None:
    if n_rows > metadata.n_max:
        problems.add(
            f"{what} has {n_rows} rows, more than the declared n_max={metadata.n_max}; raise "
            "n_max in the metadata (it must be a public upper bound on the row count)"
        )


def _missing_columns(
    columns: list[str], attributes: list[AnyAttribute], what: str, problems: _Problems
) -> None:
    for attribute in attributes:
        if attribute.name not in columns:
            problems.add(
                f"{what} has no column {attribute.name!r} for the declared attribute; its columns "
                f"are {_listing(columns)}"
            )


def _table_store(
    metadata: DatasetMetadata,
    parts: list[tuple[pd.DataFrame, list[AnyAttribute], str, Locate]],
    n_rows: int,
    problems: _Problems,
    report: LoadReport,
) -> tuple[ColumnStore, LoadReport]:
    """Convert every attribute of each (frame, attributes, description, locate) part."""
    columns: dict[str, Column] = {}
    for frame, attributes, what, locate in parts:
        for attribute in attributes:
            if problems.full:
                break
            column = _convert(
                attribute,
                frame[attribute.name],
                missing_tokens=metadata.missing_values,
                where=f"{what}, column {attribute.name!r}",
                locate=locate,
                problems=problems,
                report=report,
            )
            if column is not None:
                columns[attribute.name] = column
    problems.raise_if_any(report.source)
    report.n_rows = n_rows
    return ColumnStore(metadata, n_rows=n_rows, columns=columns), report


def _load_single(
    metadata: DatasetMetadata, frame: pd.DataFrame, what: str, locate: Locate
) -> tuple[ColumnStore, LoadReport]:
    report = LoadReport(source=what)
    problems = _Problems()
    if metadata.kind == "transactions":
        problems.add("transaction datasets load from a FIMI source, not from a table")
    declared = {attribute.name for attribute in metadata.attributes}
    report.ignored_columns = [str(c) for c in frame.columns if c not in declared]
    _missing_columns([str(c) for c in frame.columns], metadata.attributes, what, problems)
    _check_n_max(len(frame), metadata, problems, what)
    problems.raise_if_any(what)
    return _table_store(
        metadata, [(frame, metadata.attributes, what, locate)], len(frame), problems, report
    )


def load_csv_frame(
    metadata: DatasetMetadata, path: Path, what: str
) -> tuple[ColumnStore, LoadReport]:
    """The whole-frame path: every cell of the file as a string, then each column converted.

    It holds the whole table as strings (many times the packed columns); :func:`load_store`
    uses it only where :func:`load_csv_streaming` raises :class:`csv_chunks.UseFramePath`.
    """
    return _load_single(metadata, read_csv_strings(path), what, _csv_line)


#: Share of distinct cells in a chunk above which the column's later chunks convert cell by cell.
EACH_CELL_SHARE: Final = 0.5


@dataclass
class _StreamedColumn:
    """A declared attribute's converted chunks and its counts over the chunks read so far."""

    attribute: AnyAttribute
    index: int
    #: The converted cells: int8 Boolean codes, int32 category codes or float64 values.
    cells: csv_chunks.GrowingArray = field(init=False)
    missing: int = 0
    clipped: int = 0
    #: Whether ``pd.to_numeric`` reads the numeric column read so far as integers.
    integers: csv_chunks.IntegerFlags = field(default_factory=csv_chunks.IntegerFlags)
    n_bad: int = 0
    #: Data-row position (0 = first row after the header) and stripped value of the first bad cell.
    first_bad: tuple[int, str] | None = None
    #: The copied-values summary of this column (extremes before clipping, category counts).
    values: ValueSummary = field(default_factory=ValueSummary)
    #: Convert each cell, not each distinct value: an earlier chunk was nearly all distinct.
    cell_by_cell: bool = False

    def __post_init__(self) -> None:
        attribute = self.attribute
        self.cells = csv_chunks.GrowingArray(
            np.int8
            if isinstance(attribute, BooleanAttribute)
            else np.int32
            if isinstance(attribute, CategoricalAttribute)
            else np.float64
        )

    def add(self, raw: pa.StringArray, offset: int, missing_tokens: list[str]) -> None:
        """Convert the chunk of cells whose first row is data row ``offset``. A numeric column
        that is no longer integral converts by one compiled scan of every cell
        (:meth:`_add_numbers`: cheaper than hashing the cells). The other columns convert once
        per distinct value of the chunk (:class:`csv_chunks.DistinctCells`); once a chunk of
        the column was more than :data:`EACH_CELL_SHARE` distinct, once per cell (the same
        result: the hashing would save nothing on nearly distinct cells)."""
        attribute = self.attribute
        if isinstance(attribute, NumericAttribute) and not self.integers.integral:
            self._add_numbers(attribute, raw, offset, missing_tokens)
            return
        if self.cell_by_cell:
            distinct = csv_chunks.DistinctCells.each(raw)
        else:
            distinct = csv_chunks.DistinctCells.of(raw)
            self.cell_by_cell = len(distinct.values) > EACH_CELL_SHARE * len(raw)
        self._add_distinct(distinct, offset, missing_tokens)

    def _add_numbers(
        self,
        attribute: NumericAttribute,
        raw: pa.StringArray,
        offset: int,
        missing_tokens: list[str],
    ) -> None:
        """:meth:`add` for a numeric column that is not integral, by
        :func:`csv_chunks.numeric_cells` on the unstripped cells (equal, cell for cell, to the
        conversion of :meth:`_add_distinct`; the scan's proof is in data/cell_scan.py)."""
        numeric = csv_chunks.numeric_cells(
            raw, missing_tokens, text_as_missing=attribute.text_as_missing
        )
        values = numeric.values
        self.clipped += int(np.count_nonzero((values < attribute.lo) | (values > attribute.hi)))
        self.values.add_numeric(attribute.name, values)
        self.missing += int(np.count_nonzero(numeric.missing))
        self._append(values, numeric.bad, offset, lambda first: _stripped_text(raw, first))

    def _add_distinct(
        self, distinct: csv_chunks.DistinctCells, offset: int, missing_tokens: list[str]
    ) -> None:
        """:meth:`add` on a chunk's distinct values. Every conversion is a function of the cell
        alone, and the integer flags of a numeric chunk are "every cell" or "some cell", which
        read the same on the distinct values as on the cells (each distinct value is some cell's):
        ``result[indices]`` is the cell-by-cell conversion, and the counts weigh each distinct
        value by its cells."""
        values = csv_chunks.stripped(distinct.values)
        missing = csv_chunks.missing_mask(values, missing_tokens)
        attribute = self.attribute
        indices = distinct.indices
        cells_of = np.bincount(indices, minlength=len(values))
        part: npt.NDArray[np.generic]
        if isinstance(attribute, BooleanAttribute):
            boolean = csv_chunks.boolean_chunk(values, missing)
            part, bad = boolean.codes[indices], boolean.bad[indices]
        elif isinstance(attribute, CategoricalAttribute):
            categorical = csv_chunks.categorical_chunk(values, attribute.categories, missing)
            part, bad = categorical.codes[indices], categorical.bad[indices]
            missing = categorical.codes < 0
        else:
            numeric = csv_chunks.numeric_chunk(
                values,
                missing,
                text_as_missing=attribute.text_as_missing,
                integral=self.integers.integral,
            )
            self.integers |= numeric.flags
            missing = numeric.missing
            outside = (numeric.values < attribute.lo) | (numeric.values > attribute.hi)
            self.clipped += int(cells_of[outside].sum())
            self.values.add_numeric(attribute.name, numeric.values)
            part, bad = numeric.values[indices], numeric.bad[indices]
        self.missing += int(cells_of[missing].sum())
        self._append(part, bad, offset, lambda first: str(values[indices[first]].as_py()))

    def _append(
        self,
        part: npt.NDArray[np.generic],
        bad: npt.NDArray[np.bool_],
        offset: int,
        stripped_cell: Callable[[int], str],
    ) -> None:
        """Append a converted chunk, or count its bad cells (``stripped_cell(i)``: the stripped
        text of the chunk's cell i, for the owner's message about the first bad cell)."""
        n_bad = int(bad.sum())
        if n_bad and self.first_bad is None:
            first = int(np.flatnonzero(bad)[0])
            self.first_bad = (offset + first, stripped_cell(first))
        self.n_bad += n_bad
        if self.n_bad:
            self.cells.release()  # a column with a bad cell is never built
        else:
            self.cells.append(part)

    def problem(self, what: str) -> str | None:
        """The owner's message about the bad cells, None if there are none."""
        if self.first_bad is None:
            return None
        attribute = self.attribute
        if isinstance(attribute, BooleanAttribute):
            why = _NOT_BOOLEAN
        elif isinstance(attribute, CategoricalAttribute):
            why = _not_category(attribute)
        else:
            why = _NOT_NUMBER
        position, value = self.first_bad
        where = f"{what}, column {attribute.name!r}"
        return _bad_cells_message(where, _csv_line(position), value, why, self.n_bad)

    def build(self) -> Column:
        """The typed column of every chunk (at least one row was read, none bad)."""
        attribute, cells = self.attribute, self.cells.view()
        column: Column
        if isinstance(attribute, BooleanAttribute):
            codes8 = np.asarray(cells, dtype=np.int8)
            column = BooleanColumn.from_arrays(attribute.name, codes8 == 1, codes8 >= 0)
        elif isinstance(attribute, CategoricalAttribute):
            codes = cells.astype(np.int32)  # a copy: the column keeps it, not the buffer
            self.values.add_categorical(attribute.name, codes, len(attribute.categories))
            column = CategoricalColumn(attribute.name, tuple(attribute.categories), codes)
        else:
            values = cells.astype(np.float64, copy=False)
            if self.integers.integer_column:
                values = csv_chunks.positive_zeros(values)
            column = NumericColumn.from_values(
                attribute.name, values, lo=attribute.lo, hi=attribute.hi
            )  # clipped into a new array
        self.cells.release()
        return column


def _stripped_text(cells: pa.StringArray, index: int) -> str:
    """The stripped text of one cell (for the owner's message about a bad cell)."""
    return str(csv_chunks.stripped(cells.slice(index, 1))[0].as_py())


def _header(batch: pa.RecordBatch, path: Path) -> list[str]:
    """The stripped column names of a first batch; refuses repeated names."""
    names = [str(batch.column(i)[0].as_py()).strip() for i in range(batch.num_columns)]
    if len(set(names)) != len(names):
        raise DataValidationError(f"file '{path}' repeats a column name in its header: {names}")
    return names


#: Threads that convert a chunk's columns (and build the typed columns) at once: Arrow's compute
#: kernels and numpy's release the GIL, so the columns of a chunk convert side by side.
CONVERSION_THREADS: Final = max(1, min(4, os.cpu_count() or 1))


def _convert_chunk(
    pool: ThreadPoolExecutor,
    columns: list[_StreamedColumn],
    data: pa.RecordBatch,
    offset: int,
    missing_tokens: list[str],
) -> list[Future[None]]:
    """Start converting one chunk into every column, the columns side by side on ``pool``: each
    column owns its state, so the result is the sequential one once every future is done."""
    return [
        pool.submit(
            column.add, csv_chunks.string_column(data, column.index), offset, missing_tokens
        )
        for column in columns
    ]


def _finish(pending: list[Future[None]]) -> None:
    """Wait for a chunk's conversions; the first error is raised."""
    for future in pending:
        future.result()


def load_csv_streaming(
    metadata: DatasetMetadata,
    path: Path,
    what: str,
    *,
    block_bytes: int = csv_chunks.DEFAULT_BLOCK_BYTES,
) -> tuple[ColumnStore, LoadReport]:
    """The streaming path of a CSV source: chunks of about ``block_bytes`` of text, each converted
    with vectorised kernels (:mod:`dpmine_server.data.csv_chunks`) and appended to the typed
    columns, so that memory holds the columns plus one chunk. Same columns, report and
    :class:`DataValidationError` messages as :func:`load_csv_frame` (lines and counts over the
    whole file); past ``n_max`` rows it only counts the rows, for the message. A chunk's columns
    convert on :data:`CONVERSION_THREADS` threads while the next chunk is read, so memory holds
    two chunks.

    The quote check (:func:`csv_chunks.check_quotes`, a pass over the whole file) runs on its own
    thread beside the parse, and its verdict comes before any result or error of the parse: a
    file it refuses goes to the whole-frame path whatever the parse found, exactly as when the
    check ran first. (An upload being received is parsed as it arrives: ``data/arriving.py``.)

    Raises :class:`csv_chunks.UseFramePath` for a file it would not read exactly as that path.
    """
    delimiter = sniff_delimiter(path)
    with (
        ThreadPoolExecutor(1, thread_name_prefix="dpmine-quotes") as checker,
        ThreadPoolExecutor(CONVERSION_THREADS, thread_name_prefix="dpmine-load") as pool,
    ):
        quotes = checker.submit(_check_quotes, path, delimiter, block_bytes)
        try:
            loaded = _stream_csv(
                pool,
                metadata,
                path,
                what,
                delimiter=delimiter,
                block_bytes=block_bytes,
                quotes=quotes,
            )
        except DataValidationError:
            quotes.result()  # UseFramePath first: the frame path words that file's errors
            raise
        quotes.result()
        return loaded


def _check_quotes(path: Path, delimiter: str, block_bytes: int) -> None:
    """:func:`csv_chunks.check_quotes`, a read error sending the file to the whole-frame path
    (as :func:`csv_chunks.read_string_batches` does with the check it runs first)."""
    try:
        csv_chunks.check_quotes(path, delimiter, block_bytes=block_bytes)
    except OSError as error:
        raise csv_chunks.UseFramePath(str(error)) from None


def _refused_quotes(quotes: Future[None]) -> None:
    """Raise the quote check's refusal as soon as it is known (the parse then stops early)."""
    if quotes.done():
        quotes.result()


def _stream_csv(
    pool: ThreadPoolExecutor,
    metadata: DatasetMetadata,
    path: Path,
    what: str,
    *,
    delimiter: str,
    block_bytes: int,
    quotes: Future[None],
) -> tuple[ColumnStore, LoadReport]:
    """:func:`load_csv_streaming` on ``pool``, the quote check running as ``quotes``."""
    report = LoadReport(source=what)
    problems = _Problems()
    columns: list[_StreamedColumn] | None = None
    n_rows = 0
    pending: list[Future[None]] = []
    batches = csv_chunks.read_string_batches(
        path, delimiter, block_bytes=block_bytes, check_quotes_first=False
    )
    for batch in batches:
        # The previous chunk converted while this one was read; its columns append in order.
        _finish(pending)
        _refused_quotes(quotes)
        data = batch
        if columns is None:
            names = _header(batch, path)
            if metadata.kind == "transactions":
                problems.add("transaction datasets load from a FIMI source, not from a table")
            declared = {attribute.name for attribute in metadata.attributes}
            report.ignored_columns = [name for name in names if name not in declared]
            _missing_columns(names, metadata.attributes, what, problems)
            columns = [
                _StreamedColumn(attribute, names.index(attribute.name))
                for attribute in metadata.attributes
                if attribute.name in names
            ]
            data = batch.slice(1)
        offset, n_rows = n_rows, n_rows + data.num_rows
        if problems.messages or n_rows > metadata.n_max:
            columns.clear()  # the load fails: only the row count is still needed
        pending = _convert_chunk(pool, columns, data, offset, metadata.missing_values)
    _finish(pending)
    if columns is None:
        raise csv_chunks.UseFramePath("no header row")
    if n_rows == 0:
        raise DataValidationError(f"file '{path}' has a header but no rows; add the data rows")
    _check_n_max(n_rows, metadata, problems, what)
    problems.raise_if_any(what)
    for column in columns:
        message = column.problem(what)
        if message is not None:
            problems.add(message)
    problems.raise_if_any(what)
    names = [column.attribute.name for column in columns]
    built: dict[str, Column] = dict(
        zip(names, pool.map(_StreamedColumn.build, columns), strict=True)
    )
    for column in columns:
        name = column.attribute.name
        report.missing[name] = column.missing
        report.values.extremes.update(column.values.extremes)
        report.values.category_counts.update(column.values.category_counts)
        if isinstance(column.attribute, NumericAttribute):
            report.clipped[name] = column.clipped
    report.n_rows = n_rows
    return ColumnStore(metadata, n_rows=n_rows, columns=built), report


def _first_repeat(ids: pd.Series) -> int | None:
    repeated = np.flatnonzero(ids.duplicated().to_numpy())
    return int(repeated[0]) if repeated.size else None


def _match_ids(
    left: pd.Series, right: pd.Series, id_column: str, problems: _Problems
) -> npt.NDArray[np.int64] | None:
    """For each left row, the position of the right row with the same id (a join on the id);
    None after recording why the ids do not match one to one. Both sides have equal lengths."""
    import pandas as pd  # noqa: PLC0415 (module docstring, "Imports")

    for side, ids in (("left", left), ("right", right)):
        repeat = _first_repeat(ids)
        if repeat is not None:
            problems.add(
                f"id column {id_column!r} of the {side} file repeats id {ids.iloc[repeat]!r} at "
                f"{_csv_line(repeat)}; every row needs its own id"
            )
    if problems.messages:
        return None
    positions: npt.NDArray[np.int64] = pd.Index(right).get_indexer(pd.Index(left)).astype(np.int64)
    unmatched = np.flatnonzero(positions < 0)
    if unmatched.size:
        first = int(unmatched[0])
        problems.add(
            f"id {left.iloc[first]!r} of the left file ({_csv_line(first)}) is not in the right "
            f"file ({unmatched.size} left ids have no right row); both files must hold the "
            "same ids"
        )
        return None
    return positions  # equal lengths (checked first) and unique ids: one to one


def _original_line(positions: npt.NDArray[np.int64]) -> Locate:
    """Line of a right-file row after the join reordered the rows."""
    return lambda position: _csv_line(int(positions[position]))


def _load_pair(
    metadata: DatasetMetadata, source: CsvPairSource, base_dir: Path
) -> tuple[ColumnStore, LoadReport]:
    what = f"CSV pair {source.left!r} / {source.right!r}"
    report = LoadReport(source=what)
    problems = _Problems()
    if metadata.kind != "views":
        problems.add(
            f"a CSV pair holds two views, but the metadata declares kind {metadata.kind!r}"
        )
        problems.raise_if_any(what)
    left = read_csv_strings_streamed(resolve_path(source.left, base_dir))
    right = read_csv_strings_streamed(resolve_path(source.right, base_dir))
    if len(left) != len(right):
        problems.add(f"the left file has {len(left)} rows but the right file has {len(right)}")
    by_view = {
        view: [a for a in metadata.attributes if a.view == view] for view in ("left", "right")
    }
    right_line: Locate = _csv_line
    id_column = source.id_column
    if id_column is not None:
        if id_column in {a.name for a in metadata.attributes}:
            problems.add(
                f"id column {id_column!r} is also a declared attribute; rename one of them"
            )
        for side, frame in (("left", left), ("right", right)):
            if id_column not in frame.columns:
                problems.add(
                    f"the {side} file {getattr(source, side)!r} has no id column {id_column!r}"
                )
        if not problems.messages:
            positions = _match_ids(left[id_column], right[id_column], id_column, problems)
            if positions is not None:
                right = right.iloc[positions].reset_index(drop=True)
                right_line = _original_line(positions)
    parts: list[tuple[pd.DataFrame, list[AnyAttribute], str, Locate]] = []
    for side, frame, path, locate in (
        ("left", left, source.left, _csv_line),
        ("right", right, source.right, right_line),
    ):
        file_what = f"{side} file {path!r}"
        _missing_columns([str(c) for c in frame.columns], by_view[side], file_what, problems)
        declared = {a.name for a in by_view[side]} | {id_column}
        report.ignored_columns += [f"{side}:{c}" for c in frame.columns if c not in declared]
        parts.append((frame, by_view[side], file_what, locate))
    _check_n_max(len(left), metadata, problems, what)
    problems.raise_if_any(what)
    return _table_store(metadata, parts, len(left), problems, report)


def _load_fimi(
    metadata: DatasetMetadata, source: FimiSource, base_dir: Path
) -> tuple[ColumnStore, LoadReport]:
    """A FIMI source, streamed in blocks twice (:mod:`dpmine_server.data.fimi_stream`): memory
    holds the packed item rows and one block of text, never a string per item."""
    what = f"FIMI file {source.path!r}"
    report = LoadReport(source=what)
    problems = _Problems()
    if metadata.kind != "transactions":
        problems.add(f"a FIMI file holds transactions, but the metadata declares {metadata.kind!r}")
        problems.raise_if_any(what)
    path = resolve_path(source.path, base_dir)
    width = metadata.max_row_width
    try:
        scan = scan_fimi(
            path,
            metadata.items,
            max_rows=metadata.n_max,
            max_unknown=MAX_PROBLEMS,
            max_row_width=width,
        )
        for row, token in scan.unknown:
            problems.add(
                f"{what}, line {row + 1}: item {token!r} is not in the declared item universe; "
                "add it to metadata.items or clean the data"
            )
        _check_n_max(scan.n_rows, metadata, problems, what)
        problems.raise_if_any(what)
        indptr, indices = fill_item_rows(path, metadata.items, scan, max_row_width=width)
    except FileNotFoundError:
        raise DataValidationError(f"file '{path}' does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise DataValidationError(f"file '{path}' is not a readable text file: {err}") from None
    except ValueError as err:  # the file changed between the passes
        raise DataValidationError(f"file '{path}' {err}; register it again") from None
    report.n_rows = scan.n_rows
    report.duplicate_items = scan.duplicates
    report.truncated_rows = scan.truncated_rows if width is not None else 0
    items = ItemColumns(metadata.items, indptr, indices, scan.n_rows)
    return ColumnStore(metadata, n_rows=scan.n_rows, items=items), report


def load_store(
    metadata: DatasetMetadata, source: DatasetSource, *, base_dir: Path
) -> tuple[ColumnStore, LoadReport]:
    """Load ``source`` as declared by ``metadata``; relative paths are resolved under ``base_dir``.

    Raises :class:`DataValidationError` (owner-only message) listing up to MAX_PROBLEMS problems.
    """
    if isinstance(source, CsvSource):
        path = resolve_path(source.path, base_dir)
        what = f"file {source.path!r}"
        try:
            return load_csv_streaming(metadata, path, what)
        except csv_chunks.UseFramePath:
            pass  # out of the except block, so that the traceback frees the partial columns
        wait_arrived(path)  # pandas reads the file by name: an upload must be whole first
        return load_csv_frame(metadata, path, what)
    if isinstance(source, CsvPairSource):
        for part in (source.left, source.right):
            wait_arrived(resolve_path(part, base_dir))
        return _load_pair(metadata, source, base_dir)
    if isinstance(source, FimiSource):
        wait_arrived(resolve_path(source.path, base_dir))
        return _load_fimi(metadata, source, base_dir)
    frame = read_sql_strings(source)
    what = f"SQL table {source.table!r}" if source.table is not None else "SQL query"
    return _load_single(metadata, frame, what, _sql_row)


def snapshot_sql(
    metadata: DatasetMetadata, source: SqlSource, folder: Path
) -> tuple[ColumnStore, LoadReport]:
    """Read an SQL source once, validate it as declared, and keep its declared columns as
    ``folder/snapshot.csv`` (the format of an uploaded CSV); operations load only that file (or
    the packed columns written from the store returned here, which reads back from the snapshot
    cell for cell), never the live source, so a source that changes later cannot fail a charged
    call.

    Raises :class:`DataValidationError` (owner-only message) if the source does not match the
    metadata, or if the snapshot would not read back cell for cell.
    """
    frame = read_sql_strings(source)
    what = f"SQL table {source.table!r}" if source.table is not None else "SQL query"
    if frame.empty:
        raise DataValidationError(f"{what} has no rows; a dataset needs its data rows")
    store, report = _load_single(metadata, frame, what, _sql_row)  # n_max, columns, types
    names = [attribute.name for attribute in metadata.attributes]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SNAPSHOT_FILE
    cells = frame[names].reset_index(drop=True)
    cells.to_csv(path, index=False, quoting=csv.QUOTE_ALL, lineterminator="\n")
    if not read_csv_strings(path).equals(cells):
        raise DataValidationError(
            f"cannot keep a snapshot of {what}: a column name or cell does not survive a CSV "
            "round trip (leading or trailing spaces in a column name?)"
        )
    return store, report
