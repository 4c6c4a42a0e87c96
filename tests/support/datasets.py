"""Datasets for the end-to-end tests, registered through the real client (owner upload).

* The bundled UCI Mushroom data (``data/uci_mushroom/agaricus-lepiota.csv.gz``: 8124 rows, 23
  categorical columns) as a two-view dataset: cap, gill, stalk and veil attributes on the left,
  the others (class, odor, ring, spore print, population, habitat, bruises) on the right.
* A small generated table (numeric, Boolean and categorical columns, a few missing values).
* A small generated transaction file (FIMI) for "wrong dataset kind" checks.

The public metadata is declared here, by the (trusted) owner side of the tests (DESIGN.md
contract item 2); nothing is derived from the data at query time.
"""

from __future__ import annotations

import csv
import functools
import gzip
import secrets
from collections.abc import Callable
from pathlib import Path

import dpmine
from dpmine.miners import MinedTreeRedescription
from dpmine.queries import parse_query
from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    CategoricalAttribute,
    CatLiteral,
    CreateDatasetRequest,
    CsvSource,
    DatasetInfo,
    DatasetMetadata,
    FimiSource,
    NumericAttribute,
    Redescription,
)
from dpmine.wire.queries import And, Expr, Not, Or

__all__ = [
    "MUSHROOM_PATH",
    "MUSHROOM_ROWS",
    "REGIONS",
    "TABLE_ROWS",
    "Row",
    "assert_printed_is_measured",
    "count_rows",
    "mushroom_holds",
    "mushroom_metadata",
    "mushroom_rows",
    "mushroom_table",
    "register_mushroom",
    "register_table",
    "register_transactions",
    "table_metadata",
    "table_rows",
    "unique_id",
    "write_table_csv",
    "write_transactions",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
MUSHROOM_PATH = REPO_ROOT / "data" / "uci_mushroom" / "agaricus-lepiota.csv.gz"
MUSHROOM_ROWS = 8124
#: Right-view attributes of the two-view Mushroom dataset; every other column is on the left.
MUSHROOM_RIGHT = frozenset(
    {
        "class",
        "bruises",
        "odor",
        "ring-number",
        "ring-type",
        "spore-print-color",
        "population",
        "habitat",
    }
)
_MISSING = "?"

TABLE_ROWS = 240
REGIONS = ("north", "south", "east", "west")
ITEMS = ("bread", "milk", "eggs", "beer", "nappies")


#: One CSV row as column → cell text.
Row = dict[str, str]


def unique_id(prefix: str) -> str:
    """A fresh dataset id or principal name, e.g. ``mushroom-3f2a9c1d``."""
    return f"{prefix}-{secrets.token_hex(4)}"


@functools.cache
def mushroom_rows() -> tuple[Row, ...]:
    """The Mushroom rows (for the exact counts that noisy releases are compared with)."""
    with gzip.open(MUSHROOM_PATH, "rt", newline="") as handle:
        return tuple(csv.DictReader(handle))


def mushroom_holds(expr: Expr, row: Row) -> bool:
    """The query semantics of §1.1 on one Mushroom row: a categorical literal and its negation
    are false on a missing value ('?'); ``!( ... )`` is the plain complement."""
    if isinstance(expr, And):
        return all(mushroom_holds(term, row) for term in expr.terms)
    if isinstance(expr, Or):
        return any(mushroom_holds(term, row) for term in expr.terms)
    if isinstance(expr, Not):
        return not mushroom_holds(expr.term, row)
    assert isinstance(expr, CatLiteral), "Mushroom has categorical attributes only"
    value = row[expr.attribute]
    return value != "?" and (value == expr.category) != expr.negated


def mushroom_table(redescription: Redescription) -> tuple[int, int, int]:
    """The exact (|left|, |right|, |left ∩ right|) of a redescription's queries on Mushroom
    (:func:`mushroom_holds`): what its printed text selects, missing values included."""
    rows = mushroom_rows()
    in_left = [mushroom_holds(redescription.left, row) for row in rows]
    in_right = [mushroom_holds(redescription.right, row) for row in rows]
    both = sum(a and b for a, b in zip(in_left, in_right, strict=True))
    return sum(in_left), sum(in_right), both


def assert_printed_is_measured(red: MinedTreeRedescription, band: float) -> None:
    """Printed ≡ measured for a tree result on Mushroom: its texts parse back to its queries
    and its noisy supports and intersection are within ``band`` of the exact counts of the rows
    those texts select (stalk-root is missing on 2480 rows: they count where the text says)."""
    assert parse_query(red.left) == red.redescription.left
    assert parse_query(red.right) == red.redescription.right
    left, right, both = mushroom_table(red.redescription)
    stats = red.statistics
    assert abs(stats.support_left - left) <= band
    assert abs(stats.support_right - right) <= band
    assert abs(stats.intersection - both) <= band


def count_rows(rows: tuple[Row, ...], predicate: Callable[[Row], bool]) -> int:
    """Exact number of rows satisfying ``predicate``."""
    return sum(1 for row in rows if predicate(row))


def mushroom_metadata() -> DatasetMetadata:
    """Two-view public metadata of the Mushroom data, as the owner would declare it.

    The category lists are the values present in the file ('?' marks a missing stalk-root), so
    every row loads; ``n_max`` is a round public bound above the 8124 rows.
    """
    with gzip.open(MUSHROOM_PATH, "rt", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        seen: list[set[str]] = [set() for _ in header]
        for row in reader:
            for column, value in enumerate(row):
                if value != _MISSING:
                    seen[column].add(value)
    attributes: list[AnyAttribute] = [
        CategoricalAttribute(
            name=name,
            view="right" if name in MUSHROOM_RIGHT else "left",
            categories=sorted(values),
        )
        for name, values in zip(header, seen, strict=True)
    ]
    return DatasetMetadata(kind="views", n_max=10_000, attributes=attributes)


def register_mushroom(
    owner: dpmine.Connection,
    *,
    dataset_id: str | None = None,
    epsilon_cap: float = 10.0,
    cap_rho: float | None = None,
) -> DatasetInfo:
    """Upload the Mushroom file as a two-view dataset; returns its public info. With
    ``cap_rho`` its ledger counts zCDP rho, capped there (issue #24)."""
    request = CreateDatasetRequest(
        id=dataset_id or unique_id("mushroom"),
        name="UCI Mushroom (agaricus-lepiota)",
        description="8124 mushrooms described by 22 categorical attributes and their class.",
        attribution="UCI Machine Learning Repository, Mushroom data set (1987).",
        epsilon_cap=epsilon_cap if cap_rho is None else None,
        accounting="pure" if cap_rho is None else "zcdp",
        cap_rho=cap_rho,
        metadata=mushroom_metadata(),
        source=CsvSource(path=MUSHROOM_PATH.name),
    )
    registered = owner.admin.upload_dataset(request, {"path": MUSHROOM_PATH})
    return DatasetInfo.model_validate(registered["dataset"])


def table_rows(rows: int = TABLE_ROWS) -> tuple[Row, ...]:
    """Deterministic rows: ``age`` in [5, 94], ``smoker`` yes/no, ``region`` (four categories)
    and ``score`` in [-10, 9.9] with every 17th value missing (empty cell)."""
    return tuple(
        {
            "age": str((row * 37) % 90 + 5),
            "smoker": "yes" if row % 3 == 0 else "no",
            "region": REGIONS[(row * 7) % len(REGIONS)],
            "score": "" if row % 17 == 0 else f"{((row * 13) % 200) / 10 - 10:.1f}",
        }
        for row in range(rows)
    )


def write_table_csv(folder: Path, *, rows: int = TABLE_ROWS) -> Path:
    """:func:`table_rows` as a CSV file in ``folder``."""
    path = folder / f"table-{secrets.token_hex(3)}.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["age", "smoker", "region", "score"])
        writer.writeheader()
        writer.writerows(table_rows(rows))
    return path


def table_metadata() -> DatasetMetadata:
    """Public metadata of :func:`write_table_csv` files (kind "table": no views)."""
    return DatasetMetadata(
        kind="table",
        n_max=1_000,
        attributes=[
            NumericAttribute(name="age", lo=0.0, hi=100.0),
            BooleanAttribute(name="smoker"),
            CategoricalAttribute(name="region", categories=list(REGIONS)),
            NumericAttribute(name="score", lo=-10.0, hi=10.0),
        ],
    )


def register_table(
    owner: dpmine.Connection,
    folder: Path,
    *,
    dataset_id: str | None = None,
    epsilon_cap: float = 5.0,
) -> DatasetInfo:
    """Write and upload a small table dataset; returns its public info."""
    path = write_table_csv(folder)
    request = CreateDatasetRequest(
        id=dataset_id or unique_id("table"),
        name="generated table",
        epsilon_cap=epsilon_cap,
        metadata=table_metadata(),
        source=CsvSource(path=path.name),
    )
    registered = owner.admin.upload_dataset(request, {"path": path})
    return DatasetInfo.model_validate(registered["dataset"])


def write_transactions(folder: Path, *, rows: int = 120) -> Path:
    """A small deterministic FIMI file over :data:`ITEMS` (one basket per line)."""
    path = folder / f"baskets-{secrets.token_hex(3)}.dat"
    lines = []
    for row in range(rows):
        basket = [item for index, item in enumerate(ITEMS) if (row >> index) % 2 or index == 0]
        lines.append(" ".join(basket))
    path.write_text("\n".join(lines) + "\n")
    return path


def register_transactions(
    owner: dpmine.Connection,
    folder: Path,
    *,
    dataset_id: str | None = None,
    epsilon_cap: float = 5.0,
) -> DatasetInfo:
    """Write and upload a small transaction dataset; returns its public info."""
    path = write_transactions(folder)
    request = CreateDatasetRequest(
        id=dataset_id or unique_id("baskets"),
        name="generated baskets",
        epsilon_cap=epsilon_cap,
        metadata=DatasetMetadata(kind="transactions", n_max=1_000, items=list(ITEMS)),
        source=FimiSource(path=path.name),
    )
    registered = owner.admin.upload_dataset(request, {"path": path})
    return DatasetInfo.model_validate(registered["dataset"])
