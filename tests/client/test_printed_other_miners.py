"""Printed ≡ measured for Serenade, rule lists and itemsets (issue #21; ALGORITHMS.md §1.1,
§2, §4.1, §5). The tree miners have their own file (``test_printed_tree_queries.py``).

On random small tables with missing values (numeric values on the bins' cut-points among
them), everything is evaluated in process on the exact data with the server's ``ColumnStore``:

* a Serenade redescription's printed text, parsed back, holds exactly the rows of the cells
  ``red.compute_quality`` releases (``support_cells``);
* a rule list's printed text (:meth:`RuleList.to_text`, parsed back line by line with the
  client's parser) captures, rule by rule and class by class, exactly the rows whose counts
  the server's ``brl.point_estimates`` kernel releases (``exact_capture_counts``);
* an itemset's printed query (:func:`dpmine.miners.itemsets.itemset_query`, and its short
  display, numeric bins included) holds exactly the rows the itemset kernels count
  (``TransactionIndex.count``).

The default profile keeps the file short; ``-m slow`` runs the heavier one.
"""

from __future__ import annotations

import math
import re

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine.miners.itemsets import itemset_display, itemset_query
from dpmine.queries import (
    SerenadeOp,
    format_query,
    format_redescription,
    parse_query,
    parse_redescription,
    serenade_query,
)
from dpmine.rule_lists import RuleList, antecedent_display
from dpmine.wire import (
    Antecedent,
    AnyLiteral,
    CategoricalAttribute,
    DatasetMetadata,
    NumericAttribute,
    NumLiteral,
    numeric_bin_edges,
    rule_list_items,
)
from dpmine.wire.queries import And, Expr, Redescription
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.data.itemsets import TransactionIndex, item_catalog
from dpmine_server.operations.redescriptions import support_cells
from dpmine_server.operations.rule_lists import class_rows, exact_capture_counts

BoolArray = npt.NDArray[np.bool_]

BINS = 3
METADATA = DatasetMetadata.model_validate(
    {
        "kind": "table",
        "n_max": 100,
        "attributes": [
            # cut-points 1/3 and 2/3 of [0, 1]: long floats; 25 and 50 of [0, 75]: short ones
            {"type": "numeric", "name": "u", "lo": 0, "hi": 1},
            {"type": "numeric", "name": "age", "lo": 0, "hi": 75},
            {"type": "boolean", "name": "smoker"},
            {"type": "categorical", "name": "region", "categories": ["n", "s", "e"]},
            {"type": "categorical", "name": "sick", "categories": ["no", "yes", "maybe"]},
        ],
        "label": {"attribute": "sick", "positive": "yes"},
    }
)
ITEMS = [item for items in rule_list_items(METADATA, BINS) for item in items]

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)
HEAVY = settings(max_examples=1000, deadline=None, derandomize=True, database=None)


def _numbers(name: str) -> st.SearchStrategy[float]:
    """Values on the public bin edges (cut-points included), between them, outside the range
    (clipped) and missing."""
    attribute = METADATA.attribute(name)
    assert isinstance(attribute, NumericAttribute)
    edges = numeric_bin_edges(attribute, BINS)
    special = [math.nan, *edges, *(math.nextafter(e, -math.inf) for e in edges), edges[0] - 1]
    return st.one_of(
        st.sampled_from(special), st.floats(edges[0] - 1, edges[-1] + 1, allow_nan=False)
    )


@st.composite
def tables(draw: st.DrawFn) -> ColumnStore:
    n = draw(st.integers(1, 30))

    def cells(values: st.SearchStrategy[float] | st.SearchStrategy[int]) -> list[float]:
        return [float(v) for v in draw(st.lists(values, min_size=n, max_size=n))]

    def categorical(name: str, count: int) -> CategoricalColumn:
        codes = np.asarray(cells(st.integers(-1, count - 1)), dtype=np.int32)
        attribute = METADATA.attribute(name)
        assert isinstance(attribute, CategoricalAttribute)
        return CategoricalColumn(name, tuple(attribute.categories), codes)

    smoker = np.asarray(cells(st.sampled_from([-1, 0, 1])))
    columns: dict[str, Column] = {
        "u": NumericColumn.from_values("u", np.asarray(cells(_numbers("u"))), lo=0.0, hi=1.0),
        "age": NumericColumn.from_values(
            "age", np.asarray(cells(_numbers("age"))), lo=0.0, hi=75.0
        ),
        "smoker": BooleanColumn.from_arrays("smoker", smoker == 1, smoker >= 0),
        "region": categorical("region", 3),
        "sick": categorical("sick", 3),
    }
    return ColumnStore(METADATA, n_rows=n, columns=columns)


@st.composite
def antecedents(draw: st.DrawFn) -> Antecedent:
    """One or two items of the public universe (§5.1), at most one per attribute."""
    first = draw(st.sampled_from(ITEMS))
    others = [item for item in ITEMS if item.attribute != first.attribute]
    items = [first, *draw(st.lists(st.sampled_from(others), max_size=1))]
    return Antecedent(items=items)


def _key(antecedent: Antecedent) -> str:
    return antecedent.model_dump_json()


def _rows(store: ColumnStore, text: str) -> BoolArray:
    return store.evaluate(parse_query(text)).to_bool_array()


_LINE = re.compile(r"^(?:if|else if) (.+) then P\(")


def _check_rule_list(store: ColumnStore, rules: list[Antecedent]) -> None:
    listed = RuleList.from_counts(
        rules,
        [0] * (len(rules) + 1),
        [0] * (len(rules) + 1),
        noise_scale=1.0,
        alpha=(1.0, 1.0),
        schema=METADATA,
    )
    lines = listed.to_text().splitlines()[: len(rules)]
    printed = [_LINE.match(line) for line in lines]
    assert all(printed), lines
    free = np.ones(store.n_rows, dtype=bool)
    negative, positive = (rows.to_bool_array() for rows in class_rows(store))
    captured = []
    for match in printed:
        assert match is not None
        holds = _rows(store, match.group(1)) & free
        captured.append(holds)
        free &= ~holds
    captured.append(free)  # the default rule
    expected = exact_capture_counts(store, rules)
    got = [[int((rows & negative).sum()), int((rows & positive).sum())] for rows in captured]
    assert got == expected.tolist(), lines


@FAST
@given(tables(), st.lists(antecedents(), max_size=4, unique_by=_key))
def test_printed_rule_lists_capture_the_counted_rows(
    store: ColumnStore, rules: list[Antecedent]
) -> None:
    _check_rule_list(store, rules)


@pytest.mark.slow
@HEAVY
@given(tables(), st.lists(antecedents(), max_size=6, unique_by=_key))
def test_printed_rule_lists_capture_the_counted_rows_heavy(
    store: ColumnStore, rules: list[Antecedent]
) -> None:
    _check_rule_list(store, rules)


@FAST
@given(tables(), antecedents())
def test_the_display_of_an_antecedent_holds_its_rows(
    store: ColumnStore, antecedent: Antecedent
) -> None:
    exact = store.evaluate(
        antecedent.items[0] if len(antecedent.items) == 1 else And(terms=list(antecedent.items))
    ).to_bool_array()
    assert np.array_equal(_rows(store, antecedent_display(antecedent, METADATA)), exact)


def test_a_value_on_a_cut_point_is_printed_in_the_bin_that_counts_it() -> None:
    """The rounded text ``[0 <= age <= 25]`` held age = 25, which the server counts in the next
    bin [25, 50): the display ``![25.0 <= age]`` does not."""
    lowest = Antecedent(items=[ITEMS[3]])  # the first bin of age
    assert format_query(ITEMS[3]) == "[0.0 <= age <= 24.999999999999996]"
    assert antecedent_display(lowest, METADATA) == "![25.0 <= age]"
    store = _store_of_ages([24.0, 25.0, math.nan])
    assert _rows(store, "![25.0 <= age]").tolist() == [True, False, False]
    assert _rows(store, "[0 <= age <= 25]").tolist() == [True, True, False]


def _store_of_ages(ages: list[float]) -> ColumnStore:
    n = len(ages)
    zeros = np.zeros(n, dtype=np.int32)
    columns: dict[str, Column] = {
        "u": NumericColumn.from_values("u", np.zeros(n), lo=0.0, hi=1.0),
        "age": NumericColumn.from_values("age", np.asarray(ages), lo=0.0, hi=75.0),
        "smoker": BooleanColumn.from_arrays("smoker", np.zeros(n, bool), np.ones(n, bool)),
        "region": CategoricalColumn("region", ("n", "s", "e"), zeros),
        "sick": CategoricalColumn("sick", ("no", "yes", "maybe"), zeros),
    }
    return ColumnStore(METADATA, n_rows=n, columns=columns)


# --------------------------------------------------------------------------------------------
# Itemsets


@FAST
@given(tables(), st.data(), st.sampled_from([None, BINS]))
def test_printed_itemsets_hold_the_counted_rows(
    store: ColumnStore, data: st.DataObject, numeric_bins: int | None
) -> None:
    """Both texts of an itemset, the exact query and the short display (numeric bins as
    ``[25.0 <= age] & ![50.0 <= age]``), hold exactly the rows the kernel counts."""
    catalog = item_catalog(METADATA, numeric_bins=numeric_bins)
    index = TransactionIndex(store, catalog)
    groups = data.draw(
        st.lists(st.sampled_from(range(len(catalog.groups))), min_size=1, max_size=3, unique=True)
    )
    itemset = tuple(sorted(data.draw(st.sampled_from(catalog.groups[g])) for g in groups))
    names = [catalog.names[item] for item in itemset]
    query = itemset_query(names, METADATA, numeric_bins)
    shown = itemset_display(names, METADATA, numeric_bins)
    assert query is not None
    assert shown is not None
    assert _rows(store, format_query(query)).sum() == index.count(itemset)
    assert np.array_equal(_rows(store, shown), _rows(store, format_query(query)))


def test_an_ambiguous_item_name_has_no_query() -> None:
    schema = DatasetMetadata.model_validate(
        {
            "kind": "table",
            "n_max": 10,
            "attributes": [
                {"type": "categorical", "name": "a=b", "categories": ["c"]},
                {"type": "categorical", "name": "a", "categories": ["b=c", "d"]},
            ],
        }
    )
    assert itemset_query(["a=b=c"], schema) is None
    assert itemset_query(["a=d"], schema) == parse_query("[a = d]")


# --------------------------------------------------------------------------------------------
# Serenade


def _serenade_literals() -> st.SearchStrategy[AnyLiteral]:
    """Literals a Serenade step may add: items of the public universe, negated or not, and
    one-sided numeric bounds on lattice-like points."""
    bound = st.sampled_from([0.0, 0.25, 1 / 3, 0.5, 2 / 3, 1.0])
    one_sided = st.tuples(bound, st.booleans(), st.booleans()).map(
        lambda t: NumLiteral(
            attribute="u", lower=t[0] if t[1] else None, upper=None if t[1] else t[0], negated=t[2]
        )
    )
    flipped = st.sampled_from(ITEMS).map(lambda item: item.model_copy(update={"negated": True}))
    return st.one_of(st.sampled_from(ITEMS), flipped, one_sided)


@st.composite
def serenade_queries(draw: st.DrawFn) -> Expr:
    first = draw(_serenade_literals())
    operators: st.SearchStrategy[SerenadeOp] = st.sampled_from(["and", "or"])
    steps = draw(st.lists(st.tuples(operators, _serenade_literals()), max_size=3))
    return serenade_query(first, steps)


@FAST
@given(tables(), serenade_queries(), serenade_queries())
def test_printed_serenade_redescriptions_hold_the_measured_cells(
    store: ColumnStore, left: Expr, right: Expr
) -> None:
    red = Redescription(left=left, right=right)
    parsed = parse_redescription(format_redescription(red))
    in_left = store.evaluate(parsed.left).to_bool_array()
    in_right = store.evaluate(parsed.right).to_bool_array()
    assert support_cells(store, red) == (
        int((in_left & in_right).sum()),
        int((in_left & ~in_right).sum()),
        int((~in_left & in_right).sum()),
        int((~in_left & ~in_right).sum()),
    )
