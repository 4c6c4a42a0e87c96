"""The public item universes of :mod:`dpmine.wire.items` (ALGORITHMS.md §4.1, §5.1) as the
client uses them: which columns a request may use, and the numeric bins as named items."""

from __future__ import annotations

import math

import pytest

from dpmine.items import items_display
from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    LabelSpec,
    NumericAttribute,
    NumLiteral,
    itemset_items,
    usable_columns,
)

TABLE = DatasetMetadata(
    kind="table",
    n_max=100,
    attributes=[
        NumericAttribute(name="age", lo=0.0, hi=75.0),
        BooleanAttribute(name="smoker"),
        CategoricalAttribute(name="cause", categories=["none", "heart"]),
        BooleanAttribute(name="died"),
    ],
    label=LabelSpec(attribute="died", positive="1"),
)


def test_usable_columns_keep_schema_order_and_accept_one_name() -> None:
    assert usable_columns(TABLE, None) is None
    assert usable_columns(TABLE, None, None) is None
    assert usable_columns(TABLE, ["smoker", "age"]) == ["age", "smoker"]
    assert usable_columns(TABLE, "smoker") == ["smoker"]
    assert usable_columns(TABLE, None, "cause") == ["age", "smoker", "died"]  # no label here
    assert usable_columns(TABLE, None, ["cause"], label="died") == ["age", "smoker"]
    assert usable_columns(TABLE, ["age", "age"]) == ["age"]


@pytest.mark.parametrize(
    ("columns", "exclude", "label", "message"),
    [
        (["agee"], (), None, "unknown column(s) ['agee']; the dataset's columns are ['age',"),
        (None, ["died"], "died", "'died' is the label: a rule list predicts it"),
        (["died"], (), "died", "'died' is the label"),
        ([], (), None, "leave no column to use"),
    ],
)
def test_usable_columns_say_what_to_fix(
    columns: list[str] | None, exclude: tuple[str, ...], label: str | None, message: str
) -> None:
    with pytest.raises(ValueError) as refused:  # noqa: PT011  # the message is checked below
        usable_columns(TABLE, columns, exclude, label=label)
    assert message in str(refused.value)


def test_transaction_data_has_no_columns_to_restrict() -> None:
    baskets = DatasetMetadata(kind="transactions", n_max=10, items=["milk", "bread"])
    assert usable_columns(baskets, None) is None
    with pytest.raises(ValueError, match="transaction data, whose items are not columns"):
        usable_columns(baskets, None, ["milk"])


def test_numeric_bins_are_named_items_displayed_with_exactly_their_rows() -> None:
    groups = itemset_items(TABLE, 3, ["age"])
    assert [name for name, _ in groups[0]] == [
        "age=[0.0, 25.0)",
        "age=[25.0, 50.0)",
        "age=[50.0, 75.0]",
    ]
    first, middle, last = (literal for _, literal in groups[0])
    assert first == NumLiteral(attribute="age", lower=0.0, upper=math.nextafter(25.0, 0.0))
    assert [items_display([literal], TABLE) for literal in (first, middle, last)] == [
        "![25.0 <= age]",
        "[25.0 <= age] & ![50.0 <= age]",
        "[50.0 <= age]",
    ]
    assert itemset_items(TABLE, None, ["age"]) == []  # no bins asked: no numeric items
