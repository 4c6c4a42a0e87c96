"""The packed columns on disk (data/packed.py): a mapped store equals the parsed one bit for bit,
damaged, foreign and older-format folders are refused with a message that says what to do, the
files are owner-only, and a load that would not fit is refused before anything is parsed."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    CsvSource,
    DatasetMetadata,
    FimiSource,
    NumericAttribute,
)
from dpmine.wire.queries import And, BoolLiteral, CatLiteral, NumLiteral
from dpmine_server.data.columns import ColumnStore, NumericColumn
from dpmine_server.data.loaders import load_store
from dpmine_server.data.packed import (
    FORMAT_VERSION,
    LOAD_BUFFER_BYTES,
    MANIFEST_FILE,
    PACKED_DIR,
    PackedFormatError,
    fit_problem,
    map_packed,
    packed_bytes_bound,
    write_packed,
)
from dpmine_server.services.datasets import DatasetService

TABLE = DatasetMetadata(
    kind="table",
    n_max=1_000,
    missing_values=["?", "", "NA"],
    attributes=[
        BooleanAttribute(name="flag"),
        CategoricalAttribute(name="colour", categories=["red", "green", "blue"]),
        NumericAttribute(name="size", lo=0.0, hi=10.0),
        NumericAttribute(name="score", lo=-1.0, hi=1.0),
    ],
)
ITEMS = ["bread", "milk", "eggs", "beer"]
BASKETS = DatasetMetadata(kind="transactions", n_max=1_000, items=ITEMS, max_row_width=3)


def _table_store(folder: Path, n_rows: int = 203) -> ColumnStore:
    """A table with every column kind, missing cells in each, negative zeros and clipped
    values; 203 rows: the bitsets end in a partial word."""
    rng = np.random.default_rng(7)
    lines = ["flag,colour,size,score"]
    for row in range(n_rows):
        flag = ["yes", "no", "?", "1"][int(rng.integers(4))]
        colour = ["red", "green", "blue", ""][int(rng.integers(4))]
        size = "NA" if row % 11 == 0 else f"{rng.normal(5, 6):.3f}"
        score = "-0.0" if row % 13 == 0 else ("?" if row % 7 == 0 else f"{rng.normal():.4f}")
        lines.append(f"{flag},{colour},{size},{score}")
    (folder / "t.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    store, _report = load_store(TABLE, CsvSource(path="t.csv"), base_dir=folder)
    return store


def _arrays(store: ColumnStore) -> list[npt.NDArray[np.generic]]:
    """Every array of a table store, in a fixed order."""
    found: list[npt.NDArray[np.generic]] = []
    for attribute in TABLE.attributes:
        column = store.column(attribute.name)
        found += [bitset.words for bitset in column.bitsets()[:2]]
        found += [
            getattr(column, name)
            for name in ("codes", "values", "sorted_order")
            if hasattr(column, name)
        ]
    return found


def _same_bits(left: npt.NDArray[np.generic], right: npt.NDArray[np.generic]) -> bool:
    return left.dtype == right.dtype and left.tobytes() == right.tobytes()


def test_a_mapped_table_equals_the_parsed_one_bit_for_bit(tmp_path: Path) -> None:
    parsed = _table_store(tmp_path)
    assert write_packed(parsed, tmp_path)
    mapped = map_packed(TABLE, tmp_path)
    assert mapped is not None
    assert mapped.n_rows == parsed.n_rows
    pairs = list(zip(_arrays(parsed), _arrays(mapped), strict=True))
    assert len(pairs) == 10
    assert all(_same_bits(ours, theirs) for ours, theirs in pairs)  # NaN and -0.0 included
    size = mapped.column("size")
    assert isinstance(size, NumericColumn)
    assert isinstance(size.values.base, np.memmap)
    assert not size.values.flags.writeable
    query = And(
        terms=[
            BoolLiteral(attribute="flag"),
            CatLiteral(attribute="colour", category="red", negated=True),
            NumLiteral(attribute="score", lower=-0.5, upper=None),
        ]
    )
    assert mapped.evaluate(query).count() == parsed.evaluate(query).count()


def test_mapped_transactions_equal_the_parsed_ones(tmp_path: Path) -> None:
    rows = [["bread", "milk"], [], ["eggs", "beer", "milk", "bread"], ["milk"]] * 30
    (tmp_path / "b.dat").write_text("".join(" ".join(r) + "\n" for r in rows), encoding="utf-8")
    parsed, _report = load_store(BASKETS, FimiSource(path="b.dat"), base_dir=tmp_path)
    write_packed(parsed, tmp_path)
    mapped = map_packed(BASKETS, tmp_path)
    assert mapped is not None
    assert mapped.n_rows == parsed.n_rows
    assert _same_bits(mapped.items.indptr, parsed.items.indptr)
    assert _same_bits(mapped.items.indices, parsed.items.indices)
    assert mapped.items.item_bitset("milk").count() == parsed.items.item_bitset("milk").count()


def test_the_files_are_owner_only_and_a_second_writer_keeps_the_first(tmp_path: Path) -> None:
    parsed = _table_store(tmp_path)
    assert write_packed(parsed, tmp_path)
    folder = tmp_path / PACKED_DIR
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert {stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()} == {0o600}
    before = {path.name: path.stat().st_mtime_ns for path in folder.iterdir()}
    assert not write_packed(parsed, tmp_path)
    assert {path.name: path.stat().st_mtime_ns for path in folder.iterdir()} == before
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".packed-")]


def test_a_version_without_packed_columns_maps_to_none(tmp_path: Path) -> None:
    assert map_packed(TABLE, tmp_path) is None


def _damaged(tmp_path: Path) -> Path:
    write_packed(_table_store(tmp_path), tmp_path)
    return tmp_path / PACKED_DIR


def _flip_a_byte(path: Path) -> None:
    """Corrupt one byte of ``path``'s data (near its end)."""
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_flipped_byte_is_refused_with_what_to_do(tmp_path: Path) -> None:
    folder = _damaged(tmp_path)
    path = folder / "a2.values.npy"
    _flip_a_byte(path)
    with pytest.raises(PackedFormatError, match=r"corrupt a2\.values\.npy .*CRC-32") as caught:
        map_packed(TABLE, tmp_path)
    assert "delete it and restart the server to rebuild it" in str(caught.value)
    assert "register" in str(caught.value)


def test_the_crc_pass_is_skipped_only_where_asked(tmp_path: Path) -> None:
    folder = _damaged(tmp_path)
    path = folder / "a2.values.npy"
    _flip_a_byte(path)
    assert map_packed(TABLE, tmp_path, check_crc=False) is not None  # the flag is honoured
    with pytest.raises(PackedFormatError, match="corrupt"):
        map_packed(TABLE, tmp_path)


def test_registration_verifies_a_folder_it_did_not_write(tmp_path: Path) -> None:
    """The registration's store is mapped unverified only from the files it has just written
    (and read back for their checksums); a folder found in place is checked as at start-up."""
    parsed = _table_store(tmp_path)
    mapped = DatasetService._pack(parsed, TABLE, tmp_path)  # written here: maps unverified
    assert mapped.n_rows == parsed.n_rows
    path = tmp_path / PACKED_DIR / "a2.values.npy"
    _flip_a_byte(path)
    with pytest.raises(PackedFormatError, match="corrupt"):
        DatasetService._pack(parsed, TABLE, tmp_path)  # not written again: verified


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    folder = _damaged(tmp_path)
    (folder / "a1.codes.npy").unlink()
    with pytest.raises(PackedFormatError, match=r"have no a1\.codes\.npy"):
        map_packed(TABLE, tmp_path)


def _edit_manifest(folder: Path, **changes: object) -> None:
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest | changes))


def test_an_older_format_version_is_refused(tmp_path: Path) -> None:
    folder = _damaged(tmp_path)
    _edit_manifest(folder, format_version=FORMAT_VERSION - 1)
    with pytest.raises(PackedFormatError, match=rf"format version {FORMAT_VERSION - 1}; this"):
        map_packed(TABLE, tmp_path)


def test_columns_of_other_metadata_are_refused(tmp_path: Path) -> None:
    _damaged(tmp_path)
    other = TABLE.model_copy(update={"n_max": 2_000})
    with pytest.raises(PackedFormatError, match="built for other metadata"):
        map_packed(other, tmp_path)


def test_a_shape_that_disagrees_with_the_row_count_is_refused(tmp_path: Path) -> None:
    folder = _damaged(tmp_path)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    _edit_manifest(folder, n_rows=manifest["n_rows"] + 64)
    with pytest.raises(PackedFormatError, match="do not form valid columns"):
        map_packed(TABLE, tmp_path)


def test_the_packed_bound_covers_the_packed_arrays(tmp_path: Path) -> None:
    parsed = _table_store(tmp_path, n_rows=1_000)  # n_max rows
    arrays = sum(array.nbytes for array in _arrays(parsed))
    bitset = 16 * 8  # 1,000 rows in 16 words
    bound = 2 * bitset + (4 * 1_000 + bitset) + 2 * (16 * 1_000 + bitset)
    assert arrays <= packed_bytes_bound(TABLE) == bound
    assert packed_bytes_bound(BASKETS) == 4 * 1_000 * 3 + 8 * 5
    assert packed_bytes_bound(BASKETS, occurrences=10) == 4 * 10 + 8 * 5


def test_a_load_that_would_not_fit_is_explained() -> None:
    gib = 2**30
    assert fit_problem(gib, memory=3 * gib, disk=2 * gib) is None
    memory = fit_problem(gib, memory=2 * gib + LOAD_BUFFER_BYTES - 1, disk=2 * gib)
    assert memory is not None
    assert "lower n_max" in memory
    assert "2.50 GiB of memory" in memory
    disk = fit_problem(gib, memory=None, disk=gib - 1)
    assert disk is not None
    assert "free disk space" in disk
