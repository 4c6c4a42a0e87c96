"""Metadata proposals for the owner: types, categories, ranges, items, views and n_max."""

from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    CsvPairSource,
    CsvSource,
    FimiSource,
    LabelSpec,
    NumericAttribute,
    SqlSource,
)
from dpmine.wire.queries import CatLiteral
from dpmine_server.data.loaders import load_store
from dpmine_server.data.propose import nice_ceil, propose_metadata, public_range

MUSHROOM = Path(__file__).resolve().parents[2] / "data" / "uci_mushroom" / "agaricus-lepiota.csv.gz"

ROWS = [
    # flag, grade, level, weight, city, score
    ("yes", "1", "3", "3.7", "paris", "0"),
    ("no", "2", "3", "187.2", "oslo", "1"),
    ("YES", "3", "4", "12", "", "2"),
    ("?", "1", "5", "15.5", "rome", "3"),
    ("No", "2", "3", "NA", "oslo", "4"),
    ("yes", "10", "3", "44", "paris", "5"),
    ("no", "3", "4", "60", "rome", "6"),
    ("no", "2", "3", "61", "rome", "7"),
    ("yes", "1", "3", "62", "oslo", "8"),
    ("no", "2", "3", "63", "oslo", "9"),
    ("no", "2", "3", "64", "oslo", "10"),
    ("no", "2", "3", "65", "oslo", "11"),
    ("no", "2", "3", "66", "oslo", "12"),
    ("no", "2", "3", "67", "oslo", "13"),
]
HEADER = "flag,grade,level,weight,city,score"


def _csv(path: Path) -> Path:
    path.write_text(HEADER + "\n" + "\n".join(",".join(row) for row in ROWS) + "\n")
    return path


def test_nice_rounding() -> None:
    assert nice_ceil(0.5) == 1
    assert nice_ceil(28) == 50
    assert nice_ceil(16_248) == 20_000
    assert nice_ceil(100) == 100
    assert nice_ceil(101) == 200
    # Outward to a grid step of 1, 2 or 5 x 10^k at least a fifth of the span (or of a tenth of
    # the magnitude): endpoints equal the data's extremes only when those are round numbers.
    assert public_range(50, 101) == (40.0, 120.0)
    assert public_range(3.7, 187.2) == (0.0, 200.0)
    assert public_range(0.0, 1.0) == (0.0, 1.0)
    assert public_range(-0.0031, 0.0042) == (-0.004, 0.006)
    assert public_range(-2.55, 7.01) == (-4.0, 8.0)
    assert public_range(1013.2, 1013.9) == (1000.0, 1050.0)
    assert public_range(5.0, 5.0) == (5.0, 5.1)
    assert public_range(0.0, 0.0) == (0.0, 1.0)
    low, high = public_range(0.3, 0.7)
    assert low <= 0.3
    assert high >= 0.7


def test_table_types_categories_ranges_and_n_max(tmp_path: Path) -> None:
    _csv(tmp_path / "t.csv")
    metadata = propose_metadata(CsvSource(path="t.csv"), kind="table", base_dir=tmp_path)
    by_name = {a.name: a for a in metadata.attributes}
    assert by_name["flag"] == BooleanAttribute(name="flag")
    # Few distinct integers: categorical, sorted numerically.
    assert by_name["grade"] == CategoricalAttribute(name="grade", categories=["1", "2", "3", "10"])
    assert by_name["level"] == CategoricalAttribute(name="level", categories=["3", "4", "5"])
    # 187.2 lies beyond Q3 + 3 IQR: the range covers the bulk, the outlier gets clipped.
    assert by_name["weight"] == NumericAttribute(name="weight", lo=0.0, hi=80.0)
    assert by_name["city"] == CategoricalAttribute(
        name="city", categories=["oslo", "paris", "rome"]
    )
    # 14 distinct integers (> 12): numeric.
    assert by_name["score"] == NumericAttribute(name="score", lo=0.0, hi=15.0)
    assert metadata.n_max == 50  # 14 rows x 2 rounded up to 1/2/5 x 10^k
    # The proposal loads the same data back without problems.
    store, report = load_store(metadata, CsvSource(path="t.csv"), base_dir=tmp_path)
    assert store.n_rows == len(ROWS)
    assert report.clipped == {"weight": 1, "score": 0}


def test_headroom_and_label(tmp_path: Path) -> None:
    _csv(tmp_path / "t.csv")
    label = LabelSpec(attribute="score", positive="3")
    metadata = propose_metadata(
        CsvSource(path="t.csv"), kind="table", base_dir=tmp_path, label=label, headroom=10
    )
    assert metadata.n_max == 200
    # The review says n_max derives from the private row count (headroom only, never n).
    assert metadata.review is not None
    (note,) = [n for n in metadata.review.notes if n.startswith("n_max is")]
    assert "times 10, rounded up: it derives from the private row count" in note
    assert str(len(ROWS)) not in note
    assert metadata.label == label
    score = metadata.attribute("score")
    assert isinstance(score, CategoricalAttribute)  # a label is never numeric
    assert score.categories == [str(i) for i in range(14)]
    with pytest.raises(ValueError, match="headroom"):
        propose_metadata(CsvSource(path="t.csv"), kind="table", base_dir=tmp_path, headroom=0.5)


def test_views_from_mapping(tmp_path: Path) -> None:
    _csv(tmp_path / "t.csv")
    views = {"flag": "left", "grade": "left", "level": "left"}
    views |= {"weight": "right", "city": "right", "score": "right"}
    metadata = propose_metadata(
        CsvSource(path="t.csv"), kind="views", base_dir=tmp_path, views=views
    )
    assert [a.view for a in metadata.attributes] == ["left"] * 3 + ["right"] * 3
    with pytest.raises(ValueError, match=r"needs a view for every column.*'score'"):
        propose_metadata(
            CsvSource(path="t.csv"),
            kind="views",
            base_dir=tmp_path,
            views={k: v for k, v in views.items() if k != "score"},
        )
    with pytest.raises(ValueError, match="must be 'left' or 'right'"):
        propose_metadata(
            CsvSource(path="t.csv"), kind="views", base_dir=tmp_path, views=views | {"flag": "up"}
        )
    with pytest.raises(ValueError, match="does not have"):
        propose_metadata(
            CsvSource(path="t.csv"), kind="views", base_dir=tmp_path, views=views | {"zz": "left"}
        )


def test_csv_pair_views_come_from_the_files(tmp_path: Path) -> None:
    (tmp_path / "l.csv").write_text("id,a,b\n1,x,1\n2,y,0\n")
    (tmp_path / "r.csv").write_text("id,c\n1,2.5\n2,3.5\n")
    source = CsvPairSource(left="l.csv", right="r.csv", id_column="id")
    metadata = propose_metadata(source, kind="views", base_dir=tmp_path)
    assert [(a.name, a.view) for a in metadata.attributes] == [
        ("a", "left"),
        ("b", "left"),
        ("c", "right"),
    ]
    assert metadata.attribute("c") == NumericAttribute(name="c", view="right", lo=2.4, hi=3.6)
    store, _ = load_store(metadata, source, base_dir=tmp_path)
    assert store.evaluate(CatLiteral(attribute="a", category="y")).count() == 1
    with pytest.raises(ValueError, match="kind 'views'"):
        propose_metadata(source, kind="table", base_dir=tmp_path)


def test_fimi_item_universe(tmp_path: Path) -> None:
    with gzip.open(tmp_path / "t.dat.gz", "wt") as handle:
        handle.write("10 2 3\n\n2 100\n")
    metadata = propose_metadata(FimiSource(path="t.dat.gz"), kind="transactions", base_dir=tmp_path)
    assert metadata.items == ["2", "3", "10", "100"]
    assert metadata.n_max == 10
    assert metadata.max_row_width == 4  # 3 items, rounded up to 10, at most the 4 items
    (tmp_path / "w.dat").write_text("milk bread\nbutter\n")
    words = propose_metadata(FimiSource(path="w.dat"), kind="transactions", base_dir=tmp_path)
    assert words.items == ["bread", "butter", "milk"]
    assert words.review is not None
    assert any("max_row_width" in note for note in words.review.notes)


def test_fimi_row_width_covers_the_bulk_of_the_rows(tmp_path: Path) -> None:
    """One row of 40 items among 2,000 rows of 3 to 13: the width covers 99.9 % of the rows
    (13) rounded up to a multiple of 10; the long row would be cut."""
    lines = [" ".join(str(i) for i in range(3 + r % 11)) for r in range(2_000)]
    lines.append(" ".join(str(i) for i in range(40)))
    (tmp_path / "long.dat").write_text("\n".join(lines) + "\n")
    metadata = propose_metadata(FimiSource(path="long.dat"), kind="transactions", base_dir=tmp_path)
    assert metadata.max_row_width == 20
    with pytest.raises(ValueError, match="FIMI"):
        propose_metadata(FimiSource(path="w.dat"), kind="table", base_dir=tmp_path)


def test_sql_source(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "s.db") as connection:
        connection.execute("CREATE TABLE t (ok INTEGER, amount REAL)")
        connection.executemany("INSERT INTO t VALUES (?, ?)", [(1, 0.25), (0, None), (1, 9.5)])
    source = SqlSource(url=f"sqlite:///{tmp_path / 's.db'}", table="t")
    metadata = propose_metadata(source, kind="table", base_dir=tmp_path)
    assert metadata.attribute("ok") == BooleanAttribute(name="ok")
    assert metadata.attribute("amount") == NumericAttribute(name="amount", lo=0.0, hi=10.0)


def test_all_missing_column_is_refused(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("a,b\n1,?\n0,\n")
    with pytest.raises(ValueError, match="'b' has only missing values"):
        propose_metadata(CsvSource(path="t.csv"), kind="table", base_dir=tmp_path)


def test_mushroom_proposal() -> None:
    metadata = propose_metadata(
        CsvSource(path=MUSHROOM.name), kind="table", base_dir=MUSHROOM.parent
    )
    assert metadata.n_max == 20_000
    assert len(metadata.attributes) == 23
    stalk_root = metadata.attribute("stalk-root")
    assert isinstance(stalk_root, CategoricalAttribute)
    assert stalk_root.categories == ["b", "c", "e", "r"]  # '?' is a missing-value token
    assert metadata.attribute("bruises") == BooleanAttribute(name="bruises")  # t/f
