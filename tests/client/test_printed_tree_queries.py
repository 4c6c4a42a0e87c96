"""Printed ≡ measured for the tree miners (issue #21; ALGORITHMS.md §1.1, §3.1, §3.6).

On random small two-view tables with missing values and random trees of public split
candidates, everything is evaluated in process on the exact data: the rows each released cell
holds come from the server's own routing (``tree_leaves``), the rows of a printed query from
parsing its text back with the client's parser and evaluating it with the server's
``ColumnStore``. The checks:

* the printed text of every tree query (the search's results and random signed-leaf queries)
  holds exactly the rows of the cells its statistics sum, and those statistics on the exact
  counts are the counts of the printed queries' rows; through the real miner too;
* simplifying a path (or any conjunction of literals) keeps its rows, and a path called a
  contradiction is empty;
* results are kept once per canonical form.

The default profile keeps each test short; ``-m slow`` runs the heavier profile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from random import Random
from typing import cast

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpmine.canonical import canonical_query, redescription_key, simplify_conjunction
from dpmine.connection import DatasetHandle
from dpmine.miners import MCMCTreePair
from dpmine.miners.trees import leaf_paths, simplified_leaf_paths
from dpmine.queries import format_query, format_redescription, parse_query, parse_redescription
from dpmine.treereds import (
    ExtractOptions,
    LeafPath,
    LeafQuery,
    TreeRedescription,
    active_cells,
    extract_redescriptions_from_partition,
    leaf_counts,
    noisy_statistics,
    partition_counts,
    render_query,
    render_redescription,
)
from dpmine.wire import (
    AnyLiteral,
    BoolLiteral,
    CatLiteral,
    DatasetMetadata,
    DecisionTree,
    LeafCountsRelease,
    LeafCountsRequest,
    LeafCountsResponse,
    NumLiteral,
    Receipt,
    TreePairMCMCRequest,
    TreePairMCMCResponse,
    TreeSplit,
    View,
)
from dpmine.wire.queries import And, Expr, Not, Or, Redescription
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    Column,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.operations.tree_kernels import (
    SplitSpace,
    ancestors,
    exact_leaf_counts,
    exact_partition_counts,
    tree_leaves,
)

BoolArray = npt.NDArray[np.bool_]

G = ("5", "6", "7")
H = ("p", "q")
METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 100,
        "attributes": [
            {"type": "boolean", "name": "a", "view": "left"},
            {"type": "categorical", "name": "g", "view": "left", "categories": list(G)},
            # lattice 0, 1, 2, 3, 4: tree thresholds at the lattice points
            {"type": "numeric", "name": "x", "view": "left", "lo": 0, "hi": 4, "lattice_bits": 2},
            {"type": "boolean", "name": "b", "view": "right"},
            {"type": "categorical", "name": "h", "view": "right", "categories": list(H)},
            # lattice 0, 2.5, 5, 7.5, 10
            {"type": "numeric", "name": "y", "view": "right", "lo": 0, "hi": 10, "lattice_bits": 2},
        ],
    }
)

FAST = settings(max_examples=40, deadline=None, derandomize=True, database=None)
HEAVY = settings(max_examples=1500, deadline=None, derandomize=True, database=None)

# --------------------------------------------------------------------------------------------
# Random tables with missing values, random trees of public split candidates


def _flags() -> st.SearchStrategy[int]:
    return st.sampled_from([-1, 0, 1])  # -1: missing


def _numbers(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Values on and between the lattice points, outside the range (clipped), and missing."""
    step = (hi - lo) / 4
    points = [lo + k * step for k in range(5)]
    special = [math.nan, lo - 1, hi + 1, *points, *(p + step / 2 for p in points[:-1])]
    return st.one_of(st.sampled_from(special), st.floats(lo - 1, hi + 1, allow_nan=False))


@st.composite
def tables(draw: st.DrawFn, *, missing: bool = True) -> ColumnStore:
    """A store of 1–24 rows; with ``missing``, any cell may be missing."""
    n = draw(st.integers(1, 24))

    def column(values: st.SearchStrategy[float] | st.SearchStrategy[int]) -> list[float]:
        cells = draw(st.lists(values, min_size=n, max_size=n))
        if not missing:
            cells = [0 if isinstance(c, int) and c < 0 else c for c in cells]
            cells = [0.0 if isinstance(c, float) and math.isnan(c) else c for c in cells]
        return [float(c) for c in cells]

    def boolean(name: str) -> BooleanColumn:
        values = np.asarray(column(_flags()))
        return BooleanColumn.from_arrays(name, values == 1, values >= 0)

    def categorical(name: str, categories: Sequence[str]) -> CategoricalColumn:
        codes = np.asarray(column(st.integers(-1, len(categories) - 1)), dtype=np.int32)
        return CategoricalColumn(name, tuple(categories), codes)

    def numeric(name: str, lo: float, hi: float) -> NumericColumn:
        return NumericColumn.from_values(name, np.asarray(column(_numbers(lo, hi))), lo=lo, hi=hi)

    columns: dict[str, Column] = {
        "a": boolean("a"),
        "g": categorical("g", G),
        "x": numeric("x", 0.0, 4.0),
        "b": boolean("b"),
        "h": categorical("h", H),
        "y": numeric("y", 0.0, 10.0),
    }
    return ColumnStore(METADATA, n_rows=n, columns=columns)


def _candidates(view: View) -> list[TreeSplit]:
    """Every public split of a view (§3.1): the server's split space."""
    space = SplitSpace.of(METADATA, view)
    return [
        space.split_of((family, value))
        for family, spec in enumerate(space.families)
        for value in range(spec.size)
    ]


@st.composite
def trees(draw: st.DrawFn, view: View, max_depth: int = 3) -> DecisionTree:
    """A complete tree of public splits, no split repeated on a path (same attribute with
    another threshold or category allowed: contradictions and implied tests happen)."""
    depth = draw(st.integers(1, max_depth))
    candidates = _candidates(view)
    splits: list[TreeSplit] = []
    for node in range(2**depth - 1):
        used = {splits[parent].key for parent in ancestors(node)}
        splits.append(draw(st.sampled_from([s for s in candidates if s.key not in used])))
    return DecisionTree(view=view, depth=depth, splits=splits)


# --------------------------------------------------------------------------------------------
# Rows


def _rows(store: ColumnStore, expr: Expr) -> BoolArray:
    return store.evaluate(expr).to_bool_array()


def _cells(store: ColumnStore, tree: DecisionTree) -> list[BoolArray]:
    """The rows of each cell as the kernel routes them: the leaves, then the rows in none."""
    leaves = [
        Bitset(words.copy(), store.n_rows).to_bool_array() for words in tree_leaves(store, tree)
    ]
    outside = ~np.logical_or.reduce(leaves)
    return [*leaves, outside]


def _measured(cells: list[BoolArray], active: frozenset[int]) -> BoolArray:
    rows = np.zeros_like(cells[0])
    for cell in active:
        rows |= cells[cell]
    return rows


def _printed(store: ColumnStore, red: Redescription) -> tuple[BoolArray, BoolArray]:
    """The rows of a redescription's printed text, parsed back and evaluated on the server."""
    parsed = parse_redescription(format_redescription(red))
    return _rows(store, parsed.left), _rows(store, parsed.right)


def _empty(paths: Sequence[LeafPath]) -> list[int]:
    return [leaf for leaf, path in enumerate(paths) if path is None]


@st.composite
def leaf_queries(draw: st.DrawFn, n_leaves: int, empty: Sequence[int]) -> LeafQuery:
    """One to three signed leaves of the tree, none of them empty."""
    usable = [leaf for leaf in range(n_leaves) if leaf not in empty]
    leaves = draw(st.lists(st.sampled_from(usable), min_size=1, max_size=3, unique=True))
    signs = draw(st.lists(st.booleans(), min_size=len(leaves), max_size=len(leaves)))
    return LeafQuery.of(*zip(leaves, signs, strict=True))


# --------------------------------------------------------------------------------------------
# (a) the printed query holds the measured rows


Pairs = list[tuple[LeafQuery, LeafQuery]]


def _check_printed_equals_measured(
    store: ColumnStore, left: DecisionTree, right: DecisionTree, extra: Pairs
) -> None:
    left_paths = simplified_leaf_paths(left, METADATA)
    right_paths = simplified_leaf_paths(right, METADATA)
    partition = exact_partition_counts(store, left, right).tolist()
    counts = partition_counts(partition)
    found = extract_redescriptions_from_partition(
        partition,
        min_supp=0,
        max_supp_fraction=1.0,
        min_jaccard=0,
        p_max=1.0,
        empty_left=_empty(left_paths),
        empty_right=_empty(right_paths),
    )
    queries = [(red.left, red.right) for red in found]
    left_cells, right_cells = _cells(store, left), _cells(store, right)
    for q_left, q_right in [*queries, *extra]:
        red = TreeRedescription(q_left, q_right, noisy_statistics(counts, q_left, q_right))
        try:
            rendered = render_redescription(red, left_paths, right_paths)
        except ValueError:
            assert (q_left, q_right) not in queries, "the search prints every result it returns"
            continue
        printed_left, printed_right = _printed(store, rendered)
        measured_left = _measured(left_cells, active_cells(q_left, left.n_leaves, outside=True))
        measured_right = _measured(right_cells, active_cells(q_right, right.n_leaves, outside=True))
        assert np.array_equal(printed_left, measured_left), format_query(rendered.left)
        assert np.array_equal(printed_right, measured_right), format_query(rendered.right)
        # The statistics of the release (here exact counts) count the printed rows.
        assert red.statistics.n_rows == store.n_rows
        assert red.statistics.support_left == printed_left.sum()
        assert red.statistics.support_right == printed_right.sum()
        assert red.statistics.intersection == (printed_left & printed_right).sum()


@st.composite
def _tree_pair_case(draw: st.DrawFn) -> tuple[ColumnStore, DecisionTree, DecisionTree, Pairs]:
    """A table, a tree per view and up to four random signed-leaf queries of them."""
    store = draw(tables())
    left, right = draw(trees("left")), draw(trees("right"))
    empty_left = _empty(simplified_leaf_paths(left, METADATA))
    empty_right = _empty(simplified_leaf_paths(right, METADATA))
    extra: Pairs = []
    if len(empty_left) < left.n_leaves and len(empty_right) < right.n_leaves:
        for _ in range(draw(st.integers(0, 4))):
            q_left = draw(leaf_queries(left.n_leaves, empty_left))
            extra.append((q_left, draw(leaf_queries(right.n_leaves, empty_right))))
    return store, left, right, extra


@FAST
@given(_tree_pair_case())
def test_printed_tree_queries_hold_exactly_the_measured_rows(
    case: tuple[ColumnStore, DecisionTree, DecisionTree, Pairs],
) -> None:
    _check_printed_equals_measured(*case)


@pytest.mark.slow
@HEAVY
@given(_tree_pair_case())
def test_printed_tree_queries_hold_exactly_the_measured_rows_heavy(
    case: tuple[ColumnStore, DecisionTree, DecisionTree, Pairs],
) -> None:
    _check_printed_equals_measured(*case)


def test_a_negated_leaf_prints_the_complement_that_the_partition_measures() -> None:
    """The review's case: rows missing the split value are in !(path) and in its count."""
    store = _store_of(a=[1, 1, 0, -1, -1], b=[1, 1, 0, -1, -1])
    left = DecisionTree(view="left", depth=1, splits=[TreeSplit(attribute="a")])
    right = DecisionTree(view="right", depth=1, splits=[TreeSplit(attribute="b")])
    partition = exact_partition_counts(store, left, right).tolist()
    assert partition == [[2, 0, 0], [0, 1, 0], [0, 0, 2]]  # last row / column: a, b missing
    counts = partition_counts(partition)
    red = TreeRedescription(
        LeafQuery.of((0, False)),
        LeafQuery.of((0, False)),
        noisy_statistics(counts, LeafQuery.of((0, False)), LeafQuery.of((0, False))),
    )
    paths = simplified_leaf_paths(left, METADATA), simplified_leaf_paths(right, METADATA)
    rendered = render_redescription(red, *paths)
    assert format_redescription(rendered) == "!([a]) <=> !([b])"
    printed_left, printed_right = _printed(store, rendered)
    assert printed_left.tolist() == [False, False, True, True, True]
    # J = 3/3 on what is printed, and the statistics say so (the paper's heuristic said 1/1).
    assert red.statistics.intersection == red.statistics.union == 3
    assert (printed_left & printed_right).sum() == 3


def _store_of(*, a: list[int], b: list[int]) -> ColumnStore:
    n = len(a)
    flags = {name: np.asarray(values) for name, values in (("a", a), ("b", b))}
    columns: dict[str, Column] = {
        name: BooleanColumn.from_arrays(name, values == 1, values >= 0)
        for name, values in flags.items()
    }
    columns["g"] = CategoricalColumn("g", G, np.zeros(n, dtype=np.int32))
    columns["h"] = CategoricalColumn("h", H, np.zeros(n, dtype=np.int32))
    columns["x"] = NumericColumn.from_values("x", np.zeros(n), lo=0.0, hi=4.0)
    columns["y"] = NumericColumn.from_values("y", np.zeros(n), lo=0.0, hi=10.0)
    return ColumnStore(METADATA, n_rows=n, columns=columns)


# -- through the miner --------------------------------------------------------------------------


class _ExactServer:
    """A stand-in dataset: releases the given trees and their exact (noise-free) leaf counts,
    so the miner's statistics must be the counts of its printed queries' rows."""

    schema = METADATA

    def __init__(self, store: ColumnStore, pairs: list[tuple[DecisionTree, DecisionTree]]) -> None:
        self.store = store
        self.pairs = pairs
        self.calls = 0

    def run(
        self, request: TreePairMCMCRequest | LeafCountsRequest
    ) -> TreePairMCMCResponse | LeafCountsResponse:
        receipt = Receipt(
            ledger_entry_id=1,
            dataset_id="d",
            operation="tree",
            epsilon=request.epsilon,
            epsilon_exact=str(request.epsilon),
            guarantee="pure",
            remaining_epsilon=1.0,
            created_at=datetime.now(UTC),
        )
        if isinstance(request, TreePairMCMCRequest):
            left, right = self.pairs[self.calls % len(self.pairs)]
            self.calls += 1
            return TreePairMCMCResponse(left_tree=left, right_tree=right, receipt=receipt)
        left, right = request.left_tree, request.right_tree
        if request.release == "paper":
            intersections, sizes = exact_leaf_counts(self.store, left, right)
            return LeafCountsResponse(
                intersections=intersections.tolist(), left_counts=sizes.tolist(), receipt=receipt
            )
        partition = exact_partition_counts(self.store, left, right)
        return LeafCountsResponse(
            intersections=[row[:-1] for row in partition.tolist()[:-1]],
            left_counts=[sum(row) for row in partition.tolist()[:-1]],
            partition=partition.tolist(),
            receipt=receipt,
        )


def _mine_exact(
    store: ColumnStore,
    pairs: list[tuple[DecisionTree, DecisionTree]],
    monkeypatch: pytest.MonkeyPatch,
    *,
    leaf_release: LeafCountsRelease = "partition",
) -> MCMCTreePair:
    miner = MCMCTreePair(
        in_trees=len(pairs),
        depth=1,
        min_support=0,
        max_support_fraction=1.0,
        min_jaccard=0,
        p_max=1.0,
        leaf_release=leaf_release,
        concurrent_iterations=1,
        seed=0,
    )
    monkeypatch.setattr(MCMCTreePair, "_check_budget", lambda *_: None)  # nothing to price
    miner.mine(cast(DatasetHandle, _ExactServer(store, pairs)))
    return miner


def _check_miner_statistics_count_the_printed_rows(miner: MCMCTreePair, store: ColumnStore) -> None:
    for red in miner.redescriptions_:
        left = _rows(store, parse_query(red.left))
        right = _rows(store, parse_query(red.right))
        assert red.statistics.n_rows == store.n_rows
        assert red.statistics.support_left == left.sum(), red.left
        assert red.statistics.support_right == right.sum(), red.right
        assert red.statistics.intersection == (left & right).sum()


@FAST
@given(tables(), st.lists(st.tuples(trees("left"), trees("right")), min_size=1, max_size=3))
def test_the_miner_releases_the_statistics_of_its_printed_queries(
    store: ColumnStore, pairs: list[tuple[DecisionTree, DecisionTree]]
) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        miner = _mine_exact(store, pairs, monkeypatch)
    _check_miner_statistics_count_the_printed_rows(miner, store)
    keys = [redescription_key(red.redescription) for red in miner.redescriptions_]
    assert len(keys) == len(set(keys))  # one result per canonical form in a run


@FAST
@given(
    tables(missing=False),
    st.lists(st.tuples(trees("left"), trees("right")), max_size=2, min_size=1),
)
def test_the_paper_release_is_exact_when_no_value_is_missing(
    store: ColumnStore, pairs: list[tuple[DecisionTree, DecisionTree]]
) -> None:
    """Without missing values every row reaches a leaf of each tree, so the paper's heuristic
    (−i = the other leaves) is the complement and its statistics count the printed rows."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        miner = _mine_exact(store, pairs, monkeypatch, leaf_release="paper")
    _check_miner_statistics_count_the_printed_rows(miner, store)


def test_the_paper_release_misses_the_rows_outside_the_trees() -> None:
    """The documented limit of ``leaf_release="paper"``: it has no count of the rows outside
    the trees, so its −i (the other leaves, §3.6) is not the printed complement."""
    store = _store_of(a=[1, 1, 0, -1, -1], b=[1, 1, 0, -1, -1])
    left = DecisionTree(view="left", depth=1, splits=[TreeSplit(attribute="a")])
    right = DecisionTree(view="right", depth=1, splits=[TreeSplit(attribute="b")])
    intersections, sizes = exact_leaf_counts(store, left, right)
    counts = leaf_counts(intersections.tolist(), sizes.tolist())
    negated = LeafQuery.of((0, False))
    assert noisy_statistics(counts, negated, negated).support_left == 1  # leaf 1 only
    assert _rows(store, parse_query("!([a])")).sum() == 3  # rows 2, 3 and 4


# --------------------------------------------------------------------------------------------
# (b) simplification keeps the rows


def _conjunction(tests: Sequence[AnyLiteral]) -> Expr:
    return tests[0] if len(tests) == 1 else And(terms=list(tests))


def _check_paths_keep_their_rows(store: ColumnStore, tree: DecisionTree) -> None:
    for raw, simplified in zip(
        leaf_paths(tree, METADATA), simplified_leaf_paths(tree, METADATA), strict=True
    ):
        before = _rows(store, _conjunction(raw))
        if simplified is None:
            assert not before.any(), (
                f"a contradiction holds rows: {format_query(_conjunction(raw))}"
            )
            continue
        assert np.array_equal(before, _rows(store, _conjunction(simplified)))
        assert len(simplified) <= len(raw)
        assert len({(t.attribute, t.kind) for t in simplified if t.kind != "num"}) == len(
            [t for t in simplified if t.kind != "num"]
        ), "one Boolean or categorical test per attribute"
        assert simplify_conjunction(simplified, METADATA) == simplified  # idempotent


@FAST
@given(tables(), st.one_of(trees("left"), trees("right")))
def test_simplified_paths_keep_their_rows(store: ColumnStore, tree: DecisionTree) -> None:
    _check_paths_keep_their_rows(store, tree)


def _literals() -> st.SearchStrategy[AnyLiteral]:
    bounds = st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 2.5, 3.0, 4.0, 5.0])
    numeric = st.tuples(st.one_of(st.none(), bounds), st.one_of(st.none(), bounds), st.booleans())
    return st.one_of(
        st.builds(BoolLiteral, attribute=st.just("a"), negated=st.booleans()),
        st.builds(
            CatLiteral, attribute=st.just("g"), category=st.sampled_from(G), negated=st.booleans()
        ),
        numeric.filter(
            lambda t: (
                (t[0], t[1]) != (None, None) and (t[0] is None or t[1] is None or t[0] <= t[1])
            )
        ).map(lambda t: NumLiteral(attribute="x", lower=t[0], upper=t[1], negated=t[2])),
    )


def _check_simplified(store: ColumnStore, tests: list[AnyLiteral]) -> None:
    before = _rows(store, _conjunction(tests))
    for schema in (METADATA, None):
        simplified = simplify_conjunction(tests, schema)
        if simplified is None:
            assert not before.any(), format_query(_conjunction(tests))
            continue
        after = _rows(store, _conjunction(simplified))
        assert np.array_equal(before, after), format_query(_conjunction(simplified))
        assert simplify_conjunction(simplified, schema) == simplified


@FAST
@given(tables(), st.lists(_literals(), min_size=1, max_size=6))
def test_any_simplified_conjunction_keeps_its_rows(
    store: ColumnStore, tests: list[AnyLiteral]
) -> None:
    _check_simplified(store, tests)


@pytest.mark.slow
@HEAVY
@given(tables(), st.lists(_literals(), min_size=1, max_size=8))
def test_any_simplified_conjunction_keeps_its_rows_heavy(
    store: ColumnStore, tests: list[AnyLiteral]
) -> None:
    _check_simplified(store, tests)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[g = 7] & [g = 6]", None),  # the review's contradiction
        ("[x <= 3.0] & [x <= 1.0]", "[x <= 1.0]"),  # implied test dropped
        ("[x <= 3.0] & ![x <= 1.0]", "![x <= 1.0] & [x <= 3.0]"),  # 1 < x <= 3
        ("![x <= 1.0] & ![x <= 3.0]", "![x <= 3.0]"),
        ("[x <= 1.0] & ![x <= 3.0]", None),
        ("![x <= 4.0]", None),  # above the public range: empty
        ("[2.0 <= x] & [x <= 3.0]", "[2.0 <= x <= 3.0]"),
        ("[g = 7] & ![g = 6]", "[g = 7]"),
        ("![g = 5] & ![g = 6]", "[g = 7]"),  # every other declared category excluded
        ("![g = 5] & ![g = 6] & ![g = 7]", None),
        ("[a] & [x <= 2.0] & [a]", "[a] & [x <= 2.0]"),
        ("[a] & ![a]", None),
        ("[1.0 <= x <= 2.0] & ![0.0 <= x <= 3.0]", None),  # inside the hole
        ("[1.0 <= x <= 2.0] & ![3.0 <= x <= 4.0]", "[1.0 <= x <= 2.0]"),  # away from it
    ],
)
def test_simplification_by_hand(text: str, expected: str | None) -> None:
    tests = _literals_of(parse_query(text))
    simplified = simplify_conjunction(tests, METADATA)
    assert (None if simplified is None else format_query(_conjunction(simplified))) == expected


def _literals_of(expr: Expr) -> list[AnyLiteral]:
    if isinstance(expr, And):
        return [
            term for term in expr.terms if isinstance(term, BoolLiteral | CatLiteral | NumLiteral)
        ]
    assert isinstance(expr, BoolLiteral | CatLiteral | NumLiteral)
    return [expr]


def test_a_contradictory_leaf_starts_no_result() -> None:
    """``[g = 5]`` then ``[g = 6]`` below it: leaf 0 is empty on every dataset; its noisy count
    (here a large one) makes no result, and the sibling prints as its parent's test alone."""
    tree = DecisionTree(
        view="left",
        depth=2,
        splits=[
            TreeSplit(attribute="g", category="5"),
            TreeSplit(attribute="g", category="6"),
            TreeSplit(attribute="a"),
        ],
    )
    paths = simplified_leaf_paths(tree, METADATA)
    assert paths[0] is None
    assert paths[1] is not None
    assert format_query(_conjunction(paths[1])) == "[g = 5]"
    # Four left leaves (and the rows outside) × two right leaves (and the rows outside); leaf 0
    # is released as 500 rows: noise, on a leaf that is empty whatever the data.
    partition = [[500, 0, 0], [50, 0, 0], [0, 40, 0], [0, 60, 0], [0, 0, 0]]
    options: ExtractOptions = {"min_supp": 1, "p_max": 1.0, "max_supp_fraction": 1.0}
    unaware = extract_redescriptions_from_partition(partition, **options)
    assert any(red.left.disjuncts[0].leaf == 0 for red in unaware)
    found = extract_redescriptions_from_partition(partition, **options | {"empty_left": [0]})
    assert found  # e.g. (+2 ∨ +3, +1): J = 1
    assert all(0 not in red.left.used_leaves for red in found)


# --------------------------------------------------------------------------------------------
# Canonical forms


def _exprs() -> st.SearchStrategy[Expr]:
    return st.recursive(
        _literals(),
        lambda inner: st.one_of(
            st.lists(inner, min_size=2, max_size=3).map(lambda terms: And(terms=terms)),
            st.lists(inner, min_size=2, max_size=3).map(lambda terms: Or(terms=terms)),
            inner.map(lambda term: Not(term=term)),
        ),
        max_leaves=6,
    )


@FAST
@given(tables(), _exprs())
def test_the_canonical_query_keeps_the_rows(store: ColumnStore, expr: Expr) -> None:
    canonical = canonical_query(expr)
    assert np.array_equal(_rows(store, expr), _rows(store, canonical))
    assert canonical_query(canonical) == canonical


@FAST
@given(_exprs(), st.randoms(use_true_random=False))
def test_reordered_terms_have_one_canonical_form(expr: Expr, random: Random) -> None:
    def shuffled(e: Expr) -> Expr:
        if isinstance(e, And | Or):
            terms = [shuffled(term) for term in e.terms]
            random.shuffle(terms)
            return type(e)(terms=terms)
        if isinstance(e, Not):
            return Not(term=shuffled(e.term))
        return e

    assert canonical_query(shuffled(expr)) == canonical_query(expr)
    red = Redescription(left=expr, right=shuffled(expr))
    assert redescription_key(red) == redescription_key(
        Redescription(left=shuffled(expr), right=expr)
    )


def test_leaf_queries_on_the_same_rows_print_the_same_text() -> None:
    paths: list[LeafPath] = [
        [BoolLiteral(attribute="a")],
        [BoolLiteral(attribute="a", negated=True)],
    ]
    assert render_query(LeafQuery.of((0, True), (1, False)), paths) == render_query(
        LeafQuery.of((1, False)), paths
    )
