"""The query target of the layered miner (ALGORITHMS.md §3.2): a public query over the other
view, evaluated server-side as a binary label, exactly as the counts evaluate it (missing values
included); validated against the public metadata before any charge; ``tree.expmech`` grows a
tree to it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from dpmine.queries import parse_query
from dpmine.wire import (
    MAX_QUERY_DEPTH,
    MAX_QUERY_LITERALS,
    DatasetMetadata,
    DecisionTree,
    QueryTarget,
    TreeExpMechRequest,
)
from dpmine_server.data.columns import BooleanColumn, Column, ColumnStore, NumericColumn
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import CATALOG
from dpmine_server.operations.base import no_progress
from dpmine_server.operations.tree_kernels import make_target
from dpmine_server.services.timing import _target_work, operation_work

NAN = math.nan
#: Ten rows; -1 and NaN are missing values. Left: a (Boolean), x (numeric on [0, 4]);
#: right: b (Boolean), y (numeric on [0, 10]).
A = [1, 0, 1, -1, 0, 1, 0, 1, -1, 0]
X = [0.0, 1.0, 2.0, 3.0, NAN, 4.0, 0.5, 1.5, 2.5, 3.5]
B = [1, 1, 0, 0, -1, 1, 0, -1, 1, 0]
Y = [0.0, 2.0, 4.0, NAN, 6.0, 8.0, 10.0, 1.0, NAN, 5.0]


def _metadata() -> DatasetMetadata:
    numeric = {"type": "numeric", "lattice_bits": 2}
    return DatasetMetadata.model_validate(
        {
            "kind": "views",
            "n_max": 50,
            "attributes": [
                {"type": "boolean", "name": "a", "view": "left"},
                numeric | {"name": "x", "view": "left", "lo": 0.0, "hi": 4.0},
                {"type": "boolean", "name": "b", "view": "right"},
                numeric | {"name": "y", "view": "right", "lo": 0.0, "hi": 10.0},
            ],
        }
    )


def _boolean(name: str, values: list[int]) -> BooleanColumn:
    array = np.asarray(values)
    return BooleanColumn.from_arrays(name, array == 1, array >= 0)


def _store() -> ColumnStore:
    columns: dict[str, Column] = {
        "a": _boolean("a", A),
        "x": NumericColumn.from_values("x", np.asarray(X), lo=0.0, hi=4.0),
        "b": _boolean("b", B),
        "y": NumericColumn.from_values("y", np.asarray(Y), lo=0.0, hi=10.0),
    }
    return ColumnStore(_metadata(), n_rows=len(A), columns=columns)


def _b(row: int, negated: bool = False) -> bool:
    """``[b]`` / ``![b]`` by hand: a literal on a missing value is false, negated or not."""
    return B[row] >= 0 and (B[row] == 1) != negated


def _y(row: int, lower: float, upper: float) -> bool:
    return not math.isnan(Y[row]) and lower <= Y[row] <= upper


#: Right-view queries and their supports computed by hand from §1.1's semantics.
CASES = [
    ("[b]", [_b(r) for r in range(len(B))]),
    ("![b]", [_b(r, negated=True) for r in range(len(B))]),
    ("[b] | [2 <= y <= 5]", [_b(r) or _y(r, 2, 5) for r in range(len(B))]),
    ("!([b] & [y <= 5])", [not (_b(r) and _y(r, 0, 5)) for r in range(len(B))]),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_query_labels_are_the_query_support_missing_values_included(
    text: str, expected: list[bool]
) -> None:
    store = _store()
    target = QueryTarget(query=text)
    labels = make_target(store, target)
    assert labels.n_classes == 2
    assert labels.classes.tolist() == [int(e) for e in expected]
    # The same rows as the counts' evaluation of the same text.
    direct = store.evaluate(parse_query(text)).to_bool_array()
    assert labels.classes.tolist() == direct.astype(int).tolist()


def test_the_target_accepts_a_query_tree_as_well_as_text() -> None:
    tree = parse_query("[b] | [2 <= y <= 5]")
    assert QueryTarget(query=tree) == QueryTarget(query="[b] | [2 <= y <= 5]")


@pytest.mark.parametrize(
    ("query", "view", "message"),
    [
        ("[c]", "left", "unknown attribute 'c'"),
        ("[y <= 50]", "left", "outside its public range"),
        ("[a]", "left", "may only use right-view attributes"),
        ("[b] & [a]", "left", "may only use right-view attributes"),
    ],
)
def test_a_query_target_that_does_not_fit_is_refused_before_the_charge(
    query: str, view: str, message: str
) -> None:
    request = TreeExpMechRequest(view=view, target=QueryTarget(query=query), depth=1, epsilon=1.0)
    with pytest.raises(ValueError, match=message):
        CATALOG["tree.expmech"].validate(request, _metadata())


def test_a_query_that_does_not_parse_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        QueryTarget(query="[b] &")


def test_expmech_grows_a_left_tree_to_a_right_query() -> None:
    spec = CATALOG["tree.expmech"]
    request = TreeExpMechRequest(
        view="left", target=QueryTarget(query="[b] | [y <= 3]"), depth=2, epsilon=1.0
    )
    spec.validate(request, _metadata())
    fields = spec.run(_store(), request, spec.cost(request), seeded_generator(3), no_progress)
    tree = fields["tree"]
    assert isinstance(tree, DecisionTree)
    assert tree.view == "left"
    assert {split.attribute for split in tree.splits} <= {"a", "x"}


def test_a_query_target_is_priced_for_the_largest_admissible_query() -> None:
    """services/timing.py prices the query target from public values only: the same for any
    query text, and at least one pass per admissible literal and one word operation per
    admissible node over n_max rows (the kernel's work, query_labels)."""
    metadata = _metadata().model_copy(update={"n_max": 1_000_000})
    small = {"view": "left", "target": {"kind": "query", "query": "[b]"}, "depth": 3}
    large = {**small, "target": {"kind": "query", "query": "[b] | [y <= 5] | ![b]"}}
    prices = [
        operation_work("tree.expmech", {**r, "epsilon": 1.0}, metadata) for r in (small, large)
    ]
    assert prices[0] == prices[1]
    query = _target_work({"kind": "query"}, metadata)
    words = 1_000_000 / 64
    assert (
        query
        >= MAX_QUERY_LITERALS * 1_000_000 * 1e-9
        + MAX_QUERY_LITERALS * MAX_QUERY_DEPTH * words * 1e-9
    )
