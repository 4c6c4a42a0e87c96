"""Typed columns and query evaluation (ALGORITHMS.md §1.1 semantics, missing values included)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine.wire.datasets import (
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    NumericAttribute,
)
from dpmine.wire.queries import And, BoolLiteral, CatLiteral, Expr, Not, NumLiteral, Or
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    ItemColumns,
    NumericColumn,
)
from dpmine_server.data.validation import QueryError
from dpmine_server.data.value_order import stable_value_order

NAN = float("nan")
COLOURS = ("red", "green", "blue")
METADATA = DatasetMetadata(
    kind="views",
    n_max=100,
    attributes=[
        BooleanAttribute(name="flag", view="left"),
        CategoricalAttribute(name="colour", view="left", categories=list(COLOURS)),
        NumericAttribute(name="size", view="right", lo=0.0, hi=10.0),
    ],
)


def _rows(bits: Bitset) -> set[int]:
    return set(bits.to_indices().tolist())


def _columns() -> dict[str, Column]:
    flag = np.array([1, 0, 1, 0, 0, 1, 0, 1], dtype=bool)
    flag_present = np.array([1, 1, 1, 0, 1, 1, 0, 1], dtype=bool)
    codes = np.array([0, 1, -1, 2, 0, -1, 1, 0], dtype=np.int32)
    size = np.array([1.5, 12.0, NAN, 0.0, 5.0, 7.5, -3.0, 10.0])
    return {
        "flag": BooleanColumn.from_arrays("flag", flag, flag_present),
        "colour": CategoricalColumn("colour", COLOURS, codes),
        "size": NumericColumn.from_values("size", size, lo=0.0, hi=10.0),
    }


@pytest.fixture
def store() -> ColumnStore:
    return ColumnStore(METADATA, n_rows=8, columns=_columns())


def test_boolean_literal_negation_and_not(store: ColumnStore) -> None:
    assert _rows(store.evaluate(BoolLiteral(attribute="flag"))) == {0, 2, 5, 7}
    # Missing rows 3 and 6 are in neither the literal nor its negation...
    assert _rows(store.evaluate(BoolLiteral(attribute="flag", negated=True))) == {1, 4}
    # ...but Not is the plain complement.
    assert _rows(store.evaluate(Not(term=BoolLiteral(attribute="flag")))) == {1, 3, 4, 6}


def test_categorical_literal_negation_and_not(store: ColumnStore) -> None:
    red = CatLiteral(attribute="colour", category="red")
    assert _rows(store.evaluate(red)) == {0, 4, 7}
    assert _rows(store.evaluate(red.model_copy(update={"negated": True}))) == {1, 3, 6}
    assert _rows(store.evaluate(Not(term=red))) == {1, 2, 3, 5, 6}
    assert _rows(store.evaluate(CatLiteral(attribute="colour", category="blue"))) == {3}


def test_numeric_literals_have_closed_bounds_after_clipping(store: ColumnStore) -> None:
    def rows(lower: float | None, upper: float | None, negated: bool = False) -> set[int]:
        lit = NumLiteral(attribute="size", lower=lower, upper=upper, negated=negated)
        return _rows(store.evaluate(lit))

    assert rows(5.0, None) == {1, 4, 5, 7}  # 12 was clipped to 10
    assert rows(None, 0.0) == {3, 6}  # -3 was clipped to 0
    assert rows(0.0, 5.0) == {0, 3, 4, 6}
    assert rows(0.0, 5.0, negated=True) == {1, 5, 7}  # row 2 is missing: in neither
    assert rows(10.0, 10.0) == {1, 7}
    assert rows(1.6, 4.9) == set()


def test_numeric_column_keeps_sorted_order(store: ColumnStore) -> None:
    column = store.column("size")
    assert isinstance(column, NumericColumn)
    assert column.sorted_order.tolist() == [3, 6, 0, 4, 5, 1, 7]
    assert column.sorted_values.tolist() == [0.0, 0.0, 1.5, 5.0, 7.5, 10.0, 10.0]
    assert _rows(column.present) == {0, 1, 3, 4, 5, 6, 7}
    assert column.range_bitset(None, None) == column.present
    with pytest.raises(ValueError, match="read-only"):
        column.values[0] = 3.0


def _reference_order(values: npt.NDArray[np.float64]) -> list[int]:
    """The rows of the present values in numpy's stable comparison sort (NaN sorts last)."""
    present = int(np.count_nonzero(~np.isnan(values)))
    return [int(row) for row in np.argsort(values, kind="stable")[:present]]


_VALUES = st.sampled_from([0.0, -0.0, 1.5, -1.5, 2.0, np.nan, -np.nan, 1e300, -1e-300, 5e-324])


@settings(max_examples=300, deadline=None)
@given(st.lists(_VALUES, max_size=40))
def test_stable_value_order_is_the_stable_argsort(cells: list[float]) -> None:
    """The radix sort of the values' keys gives numpy's stable order: ties (-0.0 and 0.0 are
    one value) in row order, every NaN left out, on arrays with no present value or none."""
    values = np.array(cells, dtype=np.float64)
    assert stable_value_order(values).tolist() == _reference_order(values)


@pytest.mark.parametrize(
    "kind", ["continuous", "repeated decimals", "small integers", "one value", "all missing"]
)
def test_stable_value_order_on_large_columns(kind: str) -> None:
    """Columns of 200,000 rows, with ties, -0.0 and NaN: nearly distinct values (every radix
    pass moves rows), 5,000 repeated decimals, small integers (the low digits of their keys are
    all zero: those passes are skipped), one value (every pass skipped), no present value."""
    rng = np.random.default_rng(7)
    n = 200_000
    values = {
        "continuous": rng.normal(0.0, 60.0, n),
        "repeated decimals": rng.choice(np.round(rng.normal(0.0, 60.0, 5000), 2), n),
        "small integers": rng.integers(-50, 50, n).astype(np.float64),
        "one value": np.full(n, 3.25),
        "all missing": np.full(n, np.nan),
    }[kind]
    values[rng.integers(0, n, 3000)] = np.nan
    values[rng.integers(0, n, 3000)] = -0.0
    values[rng.integers(0, n, 3000)] = 0.0
    assert stable_value_order(values).tolist() == _reference_order(values)


def test_stable_value_order_flags_an_unstable_sort() -> None:
    """The check above can fail: numpy's unstable sort puts some ties out of row order."""
    rng = np.random.default_rng(3)
    values = rng.integers(0, 20, 200_000).astype(np.float64)
    unstable = np.argsort(values, kind="quicksort").tolist()
    assert stable_value_order(values).tolist() == _reference_order(values) != unstable


def test_compound_expressions(store: ColumnStore) -> None:
    flag = BoolLiteral(attribute="flag")
    red = CatLiteral(attribute="colour", category="red")
    small = NumLiteral(attribute="size", upper=0.0)
    assert _rows(store.evaluate(And(terms=[flag, red]))) == {0, 7}
    assert _rows(store.evaluate(Or(terms=[flag, small]))) == {0, 2, 3, 5, 6, 7}
    assert _rows(store.evaluate(Not(term=And(terms=[flag, red])))) == {1, 2, 3, 4, 5, 6}
    nested = And(terms=[Or(terms=[flag, small]), Not(term=red)])
    assert _rows(store.evaluate(nested)) == {2, 3, 5, 6}
    assert store.all_rows().count() == 8


def test_literal_bitsets_are_cached_by_value(store: ColumnStore) -> None:
    first = store.literal_bitset(NumLiteral(attribute="size", lower=1.0, upper=6.0))
    second = store.literal_bitset(NumLiteral(attribute="size", lower=1.0, upper=6.0))
    assert first is second
    before = store.memory_bytes()
    store.literal_bitset(NumLiteral(attribute="size", lower=2.0))
    assert store.memory_bytes() > before > 0


def test_a_fresh_copy_has_the_rows_and_none_of_the_cached_values(store: ColumnStore) -> None:
    """What calibration times a kernel on (services/calibration.py ``_timed``): the same
    answers, arrays shared, and every lazily built value gone (literal and category bitsets,
    derived values of the store and of its numeric columns, sorted values, attachments)."""
    queries: list[Expr] = [
        NumLiteral(attribute="size", lower=1.0, upper=6.0),
        CatLiteral(attribute="colour", category="red", negated=True),
        And(terms=[BoolLiteral(attribute="flag"), CatLiteral(attribute="colour", category="red")]),
    ]
    answers = [_rows(store.evaluate(query)) for query in queries]
    size = store.column("size")
    assert isinstance(size, NumericColumn)
    size.derived.get_or_build(("grid",), lambda: np.zeros(4), nbytes=lambda a: int(a.nbytes))
    _ = size.sorted_values
    store.derived.get_or_build(("bank",), lambda: np.zeros(8), nbytes=lambda a: int(a.nbytes))
    store.attachment("model", dict)
    warm = store.memory_bytes()

    fresh = store.fresh_copy()

    assert len(fresh.derived) == 0
    assert len(store.derived) == 1
    fresh_size = fresh.column("size")
    assert isinstance(fresh_size, NumericColumn)
    assert len(fresh_size.derived) == 0
    assert "sorted_values" not in vars(fresh_size)
    assert fresh_size.values is size.values
    assert fresh_size.sorted_order is size.sorted_order
    fresh_colour = fresh.column("colour")
    assert isinstance(fresh_colour, CategoricalColumn)
    assert "present" not in vars(fresh_colour)
    assert fresh.memory_bytes() < warm
    assert len(fresh_colour.bitsets()) == 1  # its presence bitset, built by memory_bytes
    assert fresh.attachment("model", list) == []  # a new attachment, not the store's dict
    assert fresh.column("flag") is store.column("flag")  # nothing in it is built lazily
    assert [_rows(fresh.evaluate(query)) for query in queries] == answers
    assert fresh.memory_bytes() == warm - 12 * 8  # built again: all but the two derived arrays


def test_a_fresh_copy_of_transactions_builds_its_item_bitsets_again() -> None:
    store = ColumnStore(ITEMS_METADATA, n_rows=5, items=_item_columns(cache_size=2))
    store.evaluate(BoolLiteral(attribute="a"))
    fresh = store.fresh_copy()
    assert fresh.items.bitsets() == []
    assert len(store.items.bitsets()) == 1
    assert fresh.items.indices is store.items.indices
    assert _rows(fresh.evaluate(BoolLiteral(attribute="a"))) == {0, 3, 4}
    assert fresh.memory_bytes() == store.memory_bytes()


@pytest.mark.parametrize(
    ("lit", "message"),
    [
        (CatLiteral(attribute="flag", category="x"), "does not apply"),
        (BoolLiteral(attribute="size"), "does not apply"),
        (BoolLiteral(attribute="nope"), "unknown attribute"),
        (CatLiteral(attribute="colour", category="pink"), "not a declared category"),
    ],
)
def test_invalid_literals_raise_query_error(
    store: ColumnStore, lit: BoolLiteral | CatLiteral, message: str
) -> None:
    with pytest.raises(QueryError, match=message):
        store.evaluate(lit)


def test_store_checks_columns_against_metadata() -> None:
    columns = _columns()
    with pytest.raises(ValueError, match="declared attributes"):
        ColumnStore(METADATA, n_rows=8, columns={k: v for k, v in columns.items() if k != "flag"})
    wrong_type = dict(columns, flag=CategoricalColumn("flag", ("a",), np.zeros(8, np.int32)))
    with pytest.raises(ValueError, match="declared attributes"):
        ColumnStore(METADATA, n_rows=8, columns=wrong_type)
    with pytest.raises(ValueError, match="n_rows rows"):
        ColumnStore(METADATA, n_rows=9, columns=columns)
    with pytest.raises(ValueError, match="codes must lie"):
        CategoricalColumn("c", ("a",), np.array([0, 1], dtype=np.int32))


def test_views_of_attributes(store: ColumnStore) -> None:
    assert store.view_of("flag") == "left"
    assert store.attributes_in_view("right") == ("size",)
    with pytest.raises(QueryError, match="no items"):
        _ = store.items


# -- transactions ---------------------------------------------------------------------------

ITEMS_METADATA = DatasetMetadata(kind="transactions", n_max=10, items=["a", "b", "c", "d"])
TRANSACTIONS = [{"a", "b"}, {"b"}, set(), {"a", "c", "b"}, {"a"}]


def _item_columns(cache_size: int = 4096) -> ItemColumns:
    rows = [r for r, t in enumerate(TRANSACTIONS) for _ in t] + [0]  # (0, a) twice
    ids = [ITEMS_METADATA.items.index(i) for t in TRANSACTIONS for i in sorted(t)] + [0]
    built = ItemColumns.from_pairs(ITEMS_METADATA.items, np.array(rows), np.array(ids), 5)
    return ItemColumns(built.items, built.indptr, built.indices, 5, bitset_cache_size=cache_size)


def test_transaction_literals() -> None:
    store = ColumnStore(ITEMS_METADATA, n_rows=5, items=_item_columns())
    a, b = BoolLiteral(attribute="a"), BoolLiteral(attribute="b")
    assert _rows(store.evaluate(a)) == {0, 3, 4}
    assert _rows(store.evaluate(a.model_copy(update={"negated": True}))) == {1, 2}
    assert _rows(store.evaluate(BoolLiteral(attribute="d"))) == set()
    assert _rows(store.evaluate(And(terms=[a, b]))) == {0, 3}
    assert _rows(store.evaluate(Not(term=Or(terms=[a, b])))) == {2}
    assert store.items.tidlist("a").tolist() == [0, 3, 4]
    assert store.items.supports().tolist() == [3, 3, 1, 0]
    with pytest.raises(QueryError, match="item literals"):
        store.evaluate(CatLiteral(attribute="a", category="x"))
    with pytest.raises(QueryError, match="unknown item"):
        store.evaluate(BoolLiteral(attribute="z"))


def test_item_bitset_cache_is_bounded() -> None:
    items = _item_columns(cache_size=2)
    for item in ["a", "b", "c", "d", "a"]:
        assert _rows(items.item_bitset(item)) == {
            r for r, t in enumerate(TRANSACTIONS) if item in t
        }
    assert len(items.bitsets()) == 2
    store = ColumnStore(ITEMS_METADATA, n_rows=5, items=items)
    store.evaluate(BoolLiteral(attribute="a"))  # shared with the item cache: counted once
    # the two cached items plus all_rows
    assert store.memory_bytes() == items.array_bytes() + 3 * Bitset.empty(5).nbytes


def test_item_columns_validate_csr() -> None:
    with pytest.raises(ValueError, match="indptr"):
        ItemColumns(["a"], np.array([0, 2]), np.array([0], dtype=np.int32), 3)
    with pytest.raises(ValueError, match="row indices"):
        ItemColumns(["a"], np.array([0, 1]), np.array([3], dtype=np.int32), 3)


# -- random expressions against a reference evaluator ----------------------------------------


def _reference(expr: Expr, data: dict[str, npt.NDArray[np.float64]]) -> npt.NDArray[np.bool_]:
    """Row-wise truth with NaN = missing, written independently of the bitset code."""
    if isinstance(expr, And | Or):
        parts = [_reference(t, data) for t in expr.terms]
        result = parts[0].copy()
        for part in parts[1:]:
            result = result & part if isinstance(expr, And) else result | part
        return result
    if isinstance(expr, Not):
        return ~_reference(expr.term, data)
    values = data[expr.attribute]
    present = ~np.isnan(values)
    if isinstance(expr, BoolLiteral):
        truth: npt.NDArray[np.bool_] = values == 1
    elif isinstance(expr, CatLiteral):
        truth = values == COLOURS.index(expr.category)
    else:
        lower = -np.inf if expr.lower is None else expr.lower
        upper = np.inf if expr.upper is None else expr.upper
        truth = (values >= lower) & (values <= upper)
    return present & (~truth if expr.negated else truth)


def _random_expr(rng: np.random.Generator, depth: int) -> Expr:
    if depth == 0 or rng.random() < 0.3:
        negated = bool(rng.random() < 0.4)
        kind = rng.integers(3)
        if kind == 0:
            return BoolLiteral(attribute="flag", negated=negated)
        if kind == 1:
            return CatLiteral(
                attribute="colour", category=str(rng.choice(COLOURS)), negated=negated
            )
        a, b = sorted(rng.uniform(0, 10, size=2).round(1).tolist())
        return NumLiteral(attribute="size", lower=a, upper=b, negated=negated)
    terms = [_random_expr(rng, depth - 1) for _ in range(int(rng.integers(2, 4)))]
    choice = rng.integers(3)
    return (
        And(terms=terms) if choice == 0 else Or(terms=terms) if choice == 1 else Not(term=terms[0])
    )


def test_random_expressions_match_reference() -> None:
    rng = np.random.default_rng(20240601)
    n = 1_000
    data = {
        "flag": np.where(rng.random(n) < 0.1, NAN, rng.integers(0, 2, n)).astype(np.float64),
        "colour": np.where(rng.random(n) < 0.1, NAN, rng.integers(0, 3, n)).astype(np.float64),
        "size": np.where(rng.random(n) < 0.1, NAN, rng.uniform(0, 10, n).round(1)),
    }
    present = {k: ~np.isnan(v) for k, v in data.items()}
    codes = np.where(present["colour"], data["colour"], -1).astype(np.int32)
    columns: dict[str, Column] = {
        "flag": BooleanColumn.from_arrays("flag", data["flag"] == 1, present["flag"]),
        "colour": CategoricalColumn("colour", COLOURS, codes),
        "size": NumericColumn.from_values("size", data["size"], lo=0.0, hi=10.0),
    }
    store = ColumnStore(METADATA, n_rows=n, columns=columns)
    for _ in range(300):
        expr = _random_expr(rng, depth=3)
        np.testing.assert_array_equal(store.evaluate(expr).to_bool_array(), _reference(expr, data))


def test_million_row_conjunction_matches_numpy() -> None:
    rng = np.random.default_rng(5)
    n = 1_000_000
    present = rng.random(n) > 0.05
    values = rng.normal(5.0, 2.0, n)
    values[~present] = NAN
    flags = rng.random(n) < 0.5
    codes = rng.integers(-1, 3, n).astype(np.int32)
    columns: dict[str, Column] = {
        "flag": BooleanColumn.from_arrays("flag", flags, present),
        "colour": CategoricalColumn("colour", COLOURS, codes),
        "size": NumericColumn.from_values("size", values, lo=0.0, hi=10.0),
    }
    store = ColumnStore(METADATA, n_rows=n, columns=columns)
    query = And(
        terms=[
            BoolLiteral(attribute="flag"),
            CatLiteral(attribute="colour", category="green", negated=True),
            NumLiteral(attribute="size", lower=3.0, upper=7.5),
        ]
    )
    green = COLOURS.index("green")
    clipped = np.clip(values, 0.0, 10.0)
    expected = (
        flags
        & present
        & (codes >= 0)
        & (codes != green)
        & present
        & (clipped >= 3.0)
        & (clipped <= 7.5)
    )
    assert store.evaluate(query).count() == int(expected.sum())
