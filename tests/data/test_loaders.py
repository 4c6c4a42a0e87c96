"""Loading CSV, CSV pairs, FIMI and SQL sources into column stores; the dataset cache."""

from __future__ import annotations

import gzip
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    CsvPairSource,
    CsvSource,
    DatasetMetadata,
    FimiSource,
    NumericAttribute,
    SqlSource,
)
from dpmine.wire.queries import And, BoolLiteral, CatLiteral, NumLiteral
from dpmine_server.data.cache import DatasetCache
from dpmine_server.data.columns import BooleanColumn, ColumnStore, NumericColumn
from dpmine_server.data.loaders import MAX_PROBLEMS, DataValidationError, load_store, snapshot_sql

REPO = Path(__file__).resolve().parents[2]
MUSHROOM = REPO / "data" / "uci_mushroom" / "agaricus-lepiota.csv.gz"

TABLE_CSV = """id,flag,colour,size,notes
1,1,red,1.5,x
2,0,green,12,y
3,TRUE,,NA,z
4,no,blue,-3,
5,?,red,5,
6,1.0,?,7.5,
7,0.0,green,0,
8,Yes,red,10,
"""
ATTRIBUTES = [
    BooleanAttribute(name="flag"),
    CategoricalAttribute(name="colour", categories=["red", "green", "blue"]),
    NumericAttribute(name="size", lo=0.0, hi=10.0),
]
TABLE = DatasetMetadata(kind="table", n_max=100, attributes=ATTRIBUTES)


def _rows(store: ColumnStore, expr: BoolLiteral | CatLiteral | NumLiteral | And) -> list[int]:
    return [int(row) for row in store.evaluate(expr).to_indices()]


def _write(path: Path, text: str) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            handle.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _load_error(
    metadata: DatasetMetadata,
    source: CsvSource | CsvPairSource | FimiSource | SqlSource,
    base_dir: Path,
) -> str:
    with pytest.raises(DataValidationError) as info:
        load_store(metadata, source, base_dir=base_dir)
    return str(info.value)


@pytest.mark.parametrize("name", ["table.csv", "table.csv.gz"])
def test_csv_typed_conversion(tmp_path: Path, name: str) -> None:
    _write(tmp_path / name, TABLE_CSV)
    store, report = load_store(TABLE, CsvSource(path=name), base_dir=tmp_path)
    assert store.n_rows == 8
    assert _rows(store, BoolLiteral(attribute="flag")) == [0, 2, 5, 7]
    assert _rows(store, BoolLiteral(attribute="flag", negated=True)) == [1, 3, 6]
    assert _rows(store, CatLiteral(attribute="colour", category="red")) == [0, 4, 7]
    assert _rows(store, CatLiteral(attribute="colour", category="red", negated=True)) == [1, 3, 6]
    assert _rows(store, NumLiteral(attribute="size", lower=10.0)) == [1, 7]  # 12 clipped to 10
    assert _rows(store, NumLiteral(attribute="size", upper=0.0)) == [3, 6]  # -3 clipped to 0
    size = store.column("size")
    assert isinstance(size, NumericColumn)
    assert np.isnan(size.values[2])
    assert report.n_rows == 8
    assert report.clipped == {"size": 2}
    assert report.missing == {"flag": 1, "colour": 2, "size": 1}
    assert report.ignored_columns == ["id", "notes"]


def test_custom_missing_tokens_and_whitespace(tmp_path: Path) -> None:
    _write(tmp_path / "t.csv", "flag, colour ,size\n t , blue,-\n-,red , 2.5\n")
    metadata = TABLE.model_copy(update={"missing_values": ["-"]})
    store, _ = load_store(metadata, CsvSource(path="t.csv"), base_dir=tmp_path)
    flag = store.column("flag")
    assert isinstance(flag, BooleanColumn)
    assert flag.present.to_indices().tolist() == [0]
    assert _rows(store, CatLiteral(attribute="colour", category="blue")) == [0]
    assert _rows(store, NumLiteral(attribute="size", lower=2.5, upper=2.5)) == [1]


def test_conversion_errors_name_file_column_line_and_value(tmp_path: Path) -> None:
    bad = TABLE_CSV.replace("4,no,blue", "4,maybe,blue").replace("7,0.0,green,0", "7,0,pink,abc")
    _write(tmp_path / "bad.csv", bad)
    message = _load_error(TABLE, CsvSource(path="bad.csv"), tmp_path)
    assert "file 'bad.csv', column 'flag', line 5: value 'maybe' is not a Boolean" in message
    assert (
        "column 'colour', line 8: value 'pink' is not one of the declared categories "
        "['red', 'green', 'blue']; add it to the metadata or clean the data"
    ) in message
    assert "column 'size', line 8: value 'abc' is not a finite number" in message


def test_errors_count_further_bad_cells_and_stop_at_the_limit(tmp_path: Path) -> None:
    names = [f"c{i}" for i in range(MAX_PROBLEMS + 5)]
    rows = "\n".join(",".join(["x"] * len(names)) for _ in range(3))
    _write(tmp_path / "wide.csv", ",".join(names) + "\n" + rows + "\n")
    metadata = DatasetMetadata(
        kind="table", n_max=10, attributes=[BooleanAttribute(name=n) for n in names]
    )
    message = _load_error(metadata, CsvSource(path="wide.csv"), tmp_path)
    assert "stopped at the first problems" in message
    assert message.count("\n  - ") == MAX_PROBLEMS
    assert "(2 more such cells in this column)" in message


def test_missing_declared_column_and_n_max(tmp_path: Path) -> None:
    _write(tmp_path / "t.csv", TABLE_CSV.replace("colour", "color"))
    metadata = TABLE.model_copy(update={"n_max": 5})
    message = _load_error(metadata, CsvSource(path="t.csv"), tmp_path)
    assert "has no column 'colour' for the declared attribute" in message
    assert "'color'" in message
    assert "has 8 rows, more than the declared n_max=5; raise n_max" in message


def test_unreadable_files(tmp_path: Path) -> None:
    assert "does not exist" in _load_error(TABLE, CsvSource(path="nope.csv"), tmp_path)
    _write(tmp_path / "empty.csv", "")
    assert "is empty" in _load_error(TABLE, CsvSource(path="empty.csv"), tmp_path)
    _write(tmp_path / "header.csv", "flag,colour,size\n")
    message = _load_error(TABLE, CsvSource(path="header.csv"), tmp_path)
    assert "has a header but no rows" in message
    (tmp_path / "latin1.csv").write_bytes(
        "flag,colour,size\n1,red,2\n0,gr\xfcn,3\n".encode("latin-1")
    )
    message = _load_error(TABLE, CsvSource(path="latin1.csv"), tmp_path)
    assert "is not UTF-8 text: line 3 holds byte 0xfc" in message
    _write(tmp_path / "items.dat", "1 2\n2\n")
    items = DatasetMetadata(kind="transactions", n_max=10, items=["1", "2"])
    assert "FIMI source" in _load_error(items, CsvSource(path="items.dat"), tmp_path)
    _write(tmp_path / "dup.csv", "a, a\n1,2\n")
    assert "repeats a column name" in _load_error(TABLE, CsvSource(path="dup.csv"), tmp_path)


# -- CSV pairs ------------------------------------------------------------------------------

PAIR = DatasetMetadata(
    kind="views",
    n_max=100,
    attributes=[
        ATTRIBUTES[0].model_copy(update={"view": "left"}),
        ATTRIBUTES[1].model_copy(update={"view": "left"}),
        ATTRIBUTES[2].model_copy(update={"view": "right"}),
    ],
)
LEFT_CSV = "rid,flag,colour,extra\na,1,red,1\nb,0,blue,2\nc,t,green,3\n"
RIGHT_CSV = "rid,size\na,2\nb,20\nc,?\n"


def test_csv_pair_loads_both_views(tmp_path: Path) -> None:
    _write(tmp_path / "l.csv", LEFT_CSV)
    _write(tmp_path / "r.csv.gz", RIGHT_CSV)
    source = CsvPairSource(left="l.csv", right="r.csv.gz", id_column="rid")
    store, report = load_store(PAIR, source, base_dir=tmp_path)
    assert store.n_rows == 3
    both = And(terms=[BoolLiteral(attribute="flag"), NumLiteral(attribute="size", lower=5.0)])
    assert _rows(store, both) == []
    assert _rows(store, NumLiteral(attribute="size", lower=5.0)) == [1]
    assert _rows(store, CatLiteral(attribute="colour", category="green")) == [2]
    assert report.ignored_columns == ["left:extra"]
    assert report.clipped == {"size": 1}


def test_csv_pair_joins_the_views_on_the_id(tmp_path: Path) -> None:
    """--id-column matches rows by id, whatever the order of the right file."""
    _write(tmp_path / "l.csv", LEFT_CSV)
    _write(tmp_path / "r.csv", "rid,size\nc,?\na,2\nb,20\n")
    source = CsvPairSource(left="l.csv", right="r.csv", id_column="rid")
    store, report = load_store(PAIR, source, base_dir=tmp_path)
    assert _rows(store, NumLiteral(attribute="size", lower=5.0)) == [1]  # row b
    assert report.missing["size"] == 1
    _write(tmp_path / "r.csv", "rid,size\nc,oops\na,2\nb,20\n")
    assert "right file 'r.csv', column 'size', line 2: value 'oops'" in _load_error(
        PAIR, source, tmp_path
    )


def test_csv_pair_errors(tmp_path: Path) -> None:
    _write(tmp_path / "l.csv", LEFT_CSV)
    _write(tmp_path / "r.csv", RIGHT_CSV.replace("b,20", "x,20"))
    source = CsvPairSource(left="l.csv", right="r.csv", id_column="rid")
    message = _load_error(PAIR, source, tmp_path)
    assert "id 'b' of the left file (line 3) is not in the right file" in message
    _write(tmp_path / "r.csv", RIGHT_CSV.replace("b,20", "a,20"))
    message = _load_error(PAIR, source, tmp_path)
    assert "of the right file repeats id 'a' at line 3" in message

    _write(tmp_path / "short.csv", "rid,size\na,1\n")
    message = _load_error(PAIR, source.model_copy(update={"right": "short.csv"}), tmp_path)
    assert "the left file has 3 rows but the right file has 1" in message

    # A left attribute must be in the left file, even if the right file has it.
    _write(tmp_path / "l2.csv", "rid,flag\na,1\nb,0\nc,1\n")
    _write(tmp_path / "r2.csv", "rid,size,colour\na,1,red\nb,2,red\nc,3,red\n")
    source2 = CsvPairSource(left="l2.csv", right="r2.csv", id_column="rid")
    assert "left file 'l2.csv' has no column 'colour'" in _load_error(PAIR, source2, tmp_path)
    assert "holds two views" in _load_error(TABLE, source2, tmp_path)


def test_mushroom_real_counts_with_split_views() -> None:
    columns = pd.read_csv(MUSHROOM, nrows=0).columns.tolist()
    truth = pd.read_csv(MUSHROOM, dtype=str, keep_default_na=False)
    attributes = []
    for position, name in enumerate(columns):
        categories = sorted(set(truth[name]) - {"?"})
        if name == "veil-type":
            categories.append("u")  # declared by the UCI documentation, absent from the data
        view = "left" if position < 11 else "right"
        attributes.append(CategoricalAttribute(name=name, view=view, categories=categories))
    metadata = DatasetMetadata(kind="views", n_max=10_000, attributes=attributes)
    store, report = load_store(metadata, CsvSource(path=MUSHROOM.name), base_dir=MUSHROOM.parent)
    assert store.n_rows == 8124
    assert store.view_of("class") == "left"
    assert store.view_of("habitat") == "right"

    def count(name: str, category: str, *, negated: bool = False) -> int:
        return store.evaluate(
            CatLiteral(attribute=name, category=category, negated=negated)
        ).count()

    assert count("class", "e") == 4208
    assert count("class", "p") == 3916
    assert count("odor", "n") == 3528
    edible_no_odour = And(
        terms=[
            CatLiteral(attribute="class", category="e"),
            CatLiteral(attribute="odor", category="n"),
        ]
    )
    assert store.evaluate(edible_no_odour).count() == 3408
    assert report.missing["stalk-root"] == 2480
    assert count("stalk-root", "b") == 3776
    assert count("stalk-root", "b", negated=True) == 8124 - 2480 - 3776
    assert count("veil-type", "u") == 0
    for name in columns:  # every category count agrees with a plain pandas count
        for category, expected in truth[name].value_counts().items():
            if category != "?":
                assert count(name, str(category)) == expected


# -- FIMI ------------------------------------------------------------------------------------

ITEMS = DatasetMetadata(kind="transactions", n_max=10, items=["1", "2", "3", "5", "8"])


@pytest.mark.parametrize("name", ["t.dat", "t.dat.gz"])
def test_fimi_transactions(tmp_path: Path, name: str) -> None:
    _write(tmp_path / name, "1 2 3\n\n2  5 \n3 1 1\n")
    store, report = load_store(ITEMS, FimiSource(path=name), base_dir=tmp_path)
    assert store.n_rows == 4  # the empty line is an empty transaction
    assert _rows(store, BoolLiteral(attribute="1")) == [0, 3]
    assert _rows(store, BoolLiteral(attribute="1", negated=True)) == [1, 2]
    assert _rows(store, BoolLiteral(attribute="8")) == []
    assert store.items.supports().tolist() == [2, 2, 2, 1, 0]
    assert report.duplicate_items == 1
    assert report.n_rows == 4


def test_fimi_errors(tmp_path: Path) -> None:
    _write(tmp_path / "t.dat", "1 2\n2 9\n5\n")
    message = _load_error(ITEMS, FimiSource(path="t.dat"), tmp_path)
    assert (
        "FIMI file 't.dat', line 2: item '9' is not in the declared item universe; "
        "add it to metadata.items or clean the data"
    ) in message
    _write(tmp_path / "many.dat", "1\n" * 11)
    assert "raise n_max" in _load_error(ITEMS, FimiSource(path="many.dat"), tmp_path)
    assert "holds transactions" in _load_error(TABLE, FimiSource(path="t.dat"), tmp_path)


# -- SQL -----------------------------------------------------------------------------------


def _sqlite(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as connection:
        connection.exec_driver_sql(
            'CREATE TABLE "patient records" (flag INTEGER, colour TEXT, size REAL, other TEXT)'
        )
        connection.exec_driver_sql(
            "INSERT INTO \"patient records\" VALUES (1, 'red', 1.5, 'a'), (0, NULL, 12, NULL), "
            "(NULL, 'blue', NULL, 'c'), (1, 'red', -1, 'd')"
        )
    engine.dispose()
    return url


def test_sql_table_and_query(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    store, report = load_store(
        TABLE, SqlSource(url=url, table="patient records"), base_dir=tmp_path
    )
    assert store.n_rows == 4
    assert _rows(store, BoolLiteral(attribute="flag")) == [0, 3]
    assert _rows(store, BoolLiteral(attribute="flag", negated=True)) == [1]
    assert _rows(store, CatLiteral(attribute="colour", category="red")) == [0, 3]
    assert _rows(store, NumLiteral(attribute="size", lower=10.0)) == [1]
    assert report.clipped == {"size": 2}
    assert report.ignored_columns == ["other"]
    query = SqlSource(
        url=url, query='SELECT flag, colour, size FROM "patient records" WHERE flag = 1'
    )
    store2, _ = load_store(TABLE, query, base_dir=tmp_path)
    assert store2.n_rows == 2


def test_an_empty_sql_source_is_refused(tmp_path: Path) -> None:
    empty = SqlSource(url=_sqlite(tmp_path), query='SELECT * FROM "patient records" WHERE 0')
    with pytest.raises(DataValidationError, match="SQL query has no rows"):
        snapshot_sql(TABLE, empty, tmp_path / "v1")


def test_sql_errors_never_echo_the_url(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    message = _load_error(TABLE, SqlSource(url=url, table="missing_table"), tmp_path)
    assert "SQL table 'missing_table' does not exist" in message
    assert str(tmp_path) not in message
    message = _load_error(TABLE, SqlSource(url=url, query="SELECT nope FROM nowhere"), tmp_path)
    assert "cannot read SQL query" in message
    assert "source.db" not in message


# -- dataset cache -------------------------------------------------------------------------


def _cache_loader(tmp_path: Path, calls: list[tuple[str, int]]) -> DatasetCache:
    _write(tmp_path / "t.csv", TABLE_CSV)

    def loader(dataset_id: str, version: int) -> ColumnStore:
        calls.append((dataset_id, version))
        time.sleep(0.05)  # widen the race window
        if dataset_id == "broken":
            raise DataValidationError("broken source")
        return load_store(TABLE, CsvSource(path="t.csv"), base_dir=tmp_path)[0]

    return DatasetCache(loader, max_entries=2)


def test_cache_loads_once_under_concurrency(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []
    cache = _cache_loader(tmp_path, calls)
    results: list[ColumnStore] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get("demo", 1))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [("demo", 1)]
    assert len({id(store) for store in results}) == 1
    assert cache.peek("demo", 1) is results[0]
    assert cache.memory_bytes() > 0


def test_cache_versions_eviction_and_failures(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []
    cache = _cache_loader(tmp_path, calls)
    first = cache.get("demo", 1)
    assert cache.get("demo", 1) is first
    cache.get("demo", 2)  # a newer version replaces the older one
    assert cache.peek("demo", 1) is None
    cache.evict("demo")
    assert len(cache) == 0
    cache.get("demo", 2)
    assert calls == [("demo", 1), ("demo", 2), ("demo", 2)]
    with pytest.raises(DataValidationError):
        cache.get("broken", 1)
    with pytest.raises(DataValidationError):
        cache.get("broken", 1)  # failures are not cached
    cache.get("a", 1)
    cache.get("b", 1)  # LRU bound of 2 entries
    assert len(cache) == 2
    assert cache.peek("demo", 2) is None


def test_cache_evict_during_load_drops_the_result(tmp_path: Path) -> None:
    calls: list[tuple[str, int]] = []
    cache = _cache_loader(tmp_path, calls)
    loaded: list[ColumnStore] = []
    thread = threading.Thread(target=lambda: loaded.append(cache.get("demo", 1)))
    thread.start()
    while not calls:
        time.sleep(0.001)
    cache.evict("demo")
    thread.join()
    assert len(loaded) == 1  # the caller still gets its store...
    assert cache.peek("demo", 1) is None  # ...but it is not kept
