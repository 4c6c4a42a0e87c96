"""The public item universe and the private itemset index (ALGORITHMS.md §4.1).

* :func:`item_catalog`: transactions (every item its own group) and attribute data (a Boolean
  attribute is one item, a categorical attribute gives ``A=c`` items forming one group, numeric
  attributes give none).
* :meth:`ItemCatalog.universe_size` against brute-force enumeration: e_ℓ of the group sizes, which
  is C(m, ℓ) for transactions, summed over a length range.
* :class:`TransactionIndex` ``count``/``spectrum``/``select``/``dense`` against brute force on
  tiny datasets loaded from real FIMI and CSV files with :func:`load_store`; the colexicographic
  ranks of :class:`ItemsetRanks` are a bijection.
* The bounded miner (:mod:`dpmine_server.data.itemset_miner`) never exceeds its public work
  bound, on random data and on adversarial neighbours; rows longer than a transaction dataset's
  ``max_row_width`` are cut at load to their first items.

Regression tests cover two defects of the former (pyfim) index: an itemset held by *every*
transaction was never reported, and an empty spectrum came back as a list.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from dpmine.wire import (
    AnyAttribute,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    CsvSource,
    DatasetMetadata,
    FimiSource,
    NumericAttribute,
    NumLiteral,
)
from dpmine_server.compiled import STOP_FLAG, StopFlag
from dpmine_server.data.columns import BooleanColumn, ColumnStore, NumericColumn
from dpmine_server.data.itemset_miner import (
    MinerWork,
    RowItems,
    mine_spectrum,
    rows_from_columns,
    work_bound,
)
from dpmine_server.data.itemsets import (
    ItemCatalog,
    Itemset,
    TransactionIndex,
    item_catalog,
    transaction_index,
)
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.rng import seeded_generator
from support.itemsets import mine_all

ITEMS = ("bread", "milk", "eggs", "beer", "nappies", "jam")


# --------------------------------------------------------------------------------------------
# Helpers: files, stores and brute force


def fimi_store(folder: Path, rows: Sequence[Sequence[str]], items: Sequence[str]) -> ColumnStore:
    """Write ``rows`` as a FIMI file and load it as a transaction dataset."""
    path = folder / f"baskets-{len(list(folder.iterdir()))}.dat"
    path.write_text("".join(" ".join(row) + "\n" for row in rows), encoding="utf-8")
    metadata = DatasetMetadata(kind="transactions", n_max=10_000, items=list(items))
    store, report = load_store(metadata, FimiSource(path=path.name), base_dir=folder)
    assert report.n_rows == len(rows)
    return store


def valid_itemsets(catalog: ItemCatalog, lengths: Sequence[int]) -> list[Itemset]:
    """Every itemset of the asked lengths with at most one item per group (brute force)."""
    owner = catalog.group_of
    return [
        combo
        for length in sorted(set(lengths))
        for combo in itertools.combinations(range(len(catalog.names)), length)
        if len({owner[item] for item in combo}) == length
    ]


def brute_counts(
    rows: Sequence[frozenset[int]], catalog: ItemCatalog, lengths: Sequence[int]
) -> dict[Itemset, int]:
    """Exact count of every valid itemset (zero counts included)."""
    return {
        itemset: sum(1 for row in rows if row.issuperset(itemset))
        for itemset in valid_itemsets(catalog, lengths)
    }


def brute_spectrum(counts: dict[Itemset, int], min_count: int) -> dict[int, int]:
    spectrum: dict[int, int] = {}
    for count in counts.values():
        if count >= max(min_count, 1):
            spectrum[count] = spectrum.get(count, 0) + 1
    return spectrum


def random_baskets(seed: int, n_rows: int) -> list[list[str]]:
    """Seeded random baskets over ITEMS with skewed item probabilities."""
    rng = seeded_generator(seed)
    probabilities = np.array([0.7, 0.55, 0.4, 0.3, 0.2, 0.1])
    baskets = []
    for _ in range(n_rows):
        chosen = [item for item, p in zip(ITEMS, probabilities, strict=True) if rng.random() < p]
        baskets.append(chosen)
    return baskets


def row_lists(index: TransactionIndex) -> list[list[int]]:
    """The index's rows as lists of item positions."""
    rows = index.rows()
    return [rows.items[rows.indptr[r] : rows.indptr[r + 1]].tolist() for r in range(rows.n_rows)]


def spectrum_of(index: TransactionIndex, min_count: int, lengths: Sequence[int]) -> dict[int, int]:
    """The index's spectrum as count → number of itemsets."""
    spectrum, _work = index.spectrum(min_count, (min(lengths), max(lengths)))
    return {count: int(number) for count, number in enumerate(spectrum) if number}


def positions(rows: Sequence[Sequence[str]], names: Sequence[str]) -> list[frozenset[int]]:
    index = {name: position for position, name in enumerate(names)}
    return [frozenset(index[item] for item in row) for row in rows]


# --------------------------------------------------------------------------------------------
# The public catalog


def test_catalog_of_transactions() -> None:
    metadata = DatasetMetadata(kind="transactions", n_max=10, items=list(ITEMS))
    catalog = item_catalog(metadata)
    assert catalog.names == ITEMS
    assert catalog.literals == tuple(BoolLiteral(attribute=item) for item in ITEMS)
    assert catalog.groups == tuple((i,) for i in range(len(ITEMS)))
    assert catalog.group_of == tuple(range(len(ITEMS)))
    assert catalog.position("beer") == 3
    with pytest.raises(ValueError, match="not in"):
        catalog.position("wine")


def test_catalog_of_attribute_data() -> None:
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name="smoker", view="left"),
        NumericAttribute(name="age", view="left", lo=0, hi=100),
        CategoricalAttribute(name="region", view="right", categories=["n", "s", "e"]),
        CategoricalAttribute(name="colour", view="right", categories=["red", "blue"]),
        BooleanAttribute(name="member", view="right"),
        NumericAttribute(name="score", view="left", lo=-1, hi=1),
    ]
    catalog = item_catalog(DatasetMetadata(kind="views", n_max=10, attributes=attributes))
    assert catalog.names == (
        "smoker",
        "region=n",
        "region=s",
        "region=e",
        "colour=red",
        "colour=blue",
        "member",
    )
    assert catalog.literals == (
        BoolLiteral(attribute="smoker"),
        CatLiteral(attribute="region", category="n"),
        CatLiteral(attribute="region", category="s"),
        CatLiteral(attribute="region", category="e"),
        CatLiteral(attribute="colour", category="red"),
        CatLiteral(attribute="colour", category="blue"),
        BoolLiteral(attribute="member"),
    )
    assert catalog.groups == ((0,), (1, 2, 3), (4, 5), (6,))
    assert catalog.group_of == (0, 1, 1, 1, 2, 2, 3)
    assert catalog.position("colour=blue") == 5
    # 1·3 + 1·2 + 1·1 + 3·2 + 3·1 + 2·1 = 17 pairs; 1 + 3 + 2 + 1 = 7 singletons
    assert catalog.universe_size([2]) == 17
    assert catalog.universe_size([1, 2]) == 24
    assert catalog.universe_size([4]) == 1 * 3 * 2 * 1
    assert catalog.universe_size([5]) == 0


def test_numeric_bins_and_columns_shape_the_catalog() -> None:
    """Numeric attributes give one item per public bin when a request asks for bins (the
    rule lists' bins, :func:`~dpmine.wire.items.numeric_bins_of`), named by their exact edges;
    ``columns`` keeps only those attributes' groups. Public values only."""
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name="smoker"),
        NumericAttribute(name="age", lo=0, hi=75),
        CategoricalAttribute(name="region", categories=["n", "s"]),
        NumericAttribute(name="score", lo=0, hi=1, grid=[0.0, 0.5, 1.0]),
    ]
    metadata = DatasetMetadata(kind="table", n_max=10, attributes=attributes)
    binned = item_catalog(metadata, numeric_bins=3)
    assert binned.names == (
        "smoker",
        "age=[0.0, 25.0)",
        "age=[25.0, 50.0)",
        "age=[50.0, 75.0]",
        "region=n",
        "region=s",
        "score=[0.0, 0.5)",  # the declared grid, whatever numeric_bins says
        "score=[0.5, 1.0]",
    )
    assert binned.literals[1] == NumLiteral(
        attribute="age", lower=0.0, upper=math.nextafter(25.0, 0.0)
    )
    assert binned.literals[3] == NumLiteral(attribute="age", lower=50.0, upper=75.0)
    assert binned.groups == ((0,), (1, 2, 3), (4, 5), (6, 7))
    assert item_catalog(metadata).names == ("smoker", "region=n", "region=s")  # no bins asked
    narrow = item_catalog(metadata, numeric_bins=3, columns=["score", "smoker"])
    assert narrow.names == ("smoker", "score=[0.0, 0.5)", "score=[0.5, 1.0]")
    assert narrow.groups == ((0,), (1, 2))


def test_an_index_per_catalog_counts_the_bins_rows() -> None:
    ages = np.array([10.0, 25.0, 24.999, np.nan, 80.0, 50.0])
    metadata = DatasetMetadata(
        kind="table",
        n_max=10,
        attributes=[NumericAttribute(name="age", lo=0, hi=75), BooleanAttribute(name="flag")],
    )
    flags = np.array([True, True, False, True, False, True])
    store = ColumnStore(
        metadata,
        n_rows=len(ages),
        columns={
            "age": NumericColumn.from_values("age", ages, lo=0.0, hi=75.0),
            "flag": BooleanColumn.from_arrays("flag", flags, np.ones(len(ages), dtype=bool)),
        },
    )
    binned = transaction_index(store, numeric_bins=3)
    assert binned is transaction_index(store, numeric_bins=3)  # cached per catalog
    assert binned is not transaction_index(store)
    assert transaction_index(store).catalog.names == ("flag",)
    # [0, 25): 10, 24.999; [25, 50): 25; [50, 75]: 50 and 80 (clipped to 75); NaN in none.
    assert [binned.count((i,)) for i in range(3)] == [2, 1, 2]
    assert binned.count((1, 3)) == 1  # age in [25, 50) and flag
    only_flag = transaction_index(store, numeric_bins=3, columns=["flag"])
    assert only_flag.catalog.names == ("flag",)
    assert only_flag.count((0,)) == 4


def test_numeric_only_data_has_no_items() -> None:
    metadata = DatasetMetadata(
        kind="table", n_max=10, attributes=[NumericAttribute(name="x", lo=0, hi=1)]
    )
    catalog = item_catalog(metadata)
    assert catalog.names == ()
    assert catalog.groups == ()
    assert catalog.universe_size([1]) == 0


def _catalog_of_groups(sizes: Sequence[int]) -> ItemCatalog:
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name=f"b{index}")
        if size == 1
        else CategoricalAttribute(name=f"c{index}", categories=[str(v) for v in range(size)])
        for index, size in enumerate(sizes)
    ]
    return item_catalog(DatasetMetadata(kind="table", n_max=10, attributes=attributes))


@pytest.mark.parametrize(
    "sizes", [(1,), (3,), (2, 2), (1, 3, 2), (4, 1, 1, 2, 3), (2, 5, 1, 3, 1, 2, 2)]
)
def test_universe_size_is_the_number_of_valid_itemsets(sizes: tuple[int, ...]) -> None:
    catalog = _catalog_of_groups(sizes)
    assert tuple(len(group) for group in catalog.groups) == sizes
    for length in range(1, len(sizes) + 2):
        by_brute_force = len(valid_itemsets(catalog, [length]))
        assert catalog.universe_size([length]) == by_brute_force, length
        # e_ℓ(sizes), the elementary symmetric polynomial
        expected = sum(math.prod(c) for c in itertools.combinations(sizes, length))
        assert by_brute_force == expected
    for lengths in ([1, 2], [2, 3], [1, 2, 3], [1, 3], [2, 2, 3]):
        assert catalog.universe_size(lengths) == len(valid_itemsets(catalog, lengths)), lengths


def test_universe_size_of_transactions_is_binomial() -> None:
    for m in (1, 5, 9):
        items = [f"i{k}" for k in range(m)]
        catalog = item_catalog(DatasetMetadata(kind="transactions", n_max=10, items=items))
        for length in range(1, m + 2):
            assert catalog.universe_size([length]) == math.comb(m, length)
            assert len(valid_itemsets(catalog, [length])) == math.comb(m, length)
        assert catalog.universe_size(range(1, m + 1)) == 2**m - 1
    huge = item_catalog(
        DatasetMetadata(kind="transactions", n_max=10, items=[f"i{k}" for k in range(5000)])
    )
    assert huge.universe_size([6]) == math.comb(5000, 6)  # exact beyond 64 bits
    assert huge.universe_size([4, 5, 6]) == sum(math.comb(5000, k) for k in (4, 5, 6))


# --------------------------------------------------------------------------------------------
# The private index on transactions


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_counts_mining_and_spectrum_match_brute_force(tmp_path: Path, seed: int) -> None:
    baskets = [*random_baskets(seed, 40 + 7 * seed), []]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    catalog = index.catalog
    rows = positions(baskets, catalog.names)
    assert row_lists(index) == [sorted(row) for row in rows]
    for lengths in ([1], [2], [3], [2, 3], [1, 2, 3, 4]):
        truth = brute_counts(rows, catalog, lengths)
        for itemset, count in truth.items():
            assert index.count(itemset) == count, itemset
        for min_count in (1, 2, 5, 11, 20):
            expected = {s: c for s, c in truth.items() if c >= min_count}
            assert mine_all(index, min_count, lengths) == expected, (lengths, min_count)
            assert spectrum_of(index, min_count, lengths) == brute_spectrum(truth, min_count)
        # min_count ≤ 0 is read as 1: itemsets that occur at all
        assert mine_all(index, 0, lengths) == {s: c for s, c in truth.items() if c > 0}
        span = (min(lengths), max(lengths))
        dense, work = index.dense(span)
        assert dense.size == catalog.universe_size(lengths)
        # the dense sink's own last level does the traversal's work, step for step
        assert work == index.spectrum(1, span)[1]
        assert {index.dense_itemset(i, span): int(c) for i, c in enumerate(dense)} == truth


def test_fimi_duplicates_and_empty_lines(tmp_path: Path) -> None:
    baskets = [["bread", "bread", "milk"], [], ["milk", "eggs", "milk"], ["eggs"], []]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    assert row_lists(index) == [[0, 1], [], [1, 2], [2], []]
    assert index.count((0,)) == 1
    assert index.count((1,)) == 2
    assert index.count((0, 1)) == 1
    assert index.count((3,)) == 0
    assert mine_all(index, 1, [2]) == {(0, 1): 1, (1, 2): 1}
    assert spectrum_of(index, 1, [1]) == {1: 1, 2: 2}
    assert [index.item_rows(i).count() for i in range(6)] == [1, 2, 2, 0, 0, 0]


def test_itemsets_held_by_every_row_are_mined(tmp_path: Path) -> None:
    """Regression (the former pyfim index never reported an itemset contained in every
    transaction, e.g. ``veil-type=p`` of the Mushroom data: a wrong c_K, or a failure after the
    charge when it was revealed from the tail above the tail bound)."""
    baskets = [["bread", "milk"], ["bread", "milk", "eggs"], ["bread", "milk"]]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    assert index.count((0, 1)) == 3
    assert mine_all(index, 1, [1]) == {(0,): 3, (1,): 3, (2,): 1}
    assert mine_all(index, 1, [2]) == {(0, 1): 3, (0, 2): 1, (1, 2): 1}
    assert spectrum_of(index, 1, [1, 2]) == {3: 3, 1: 3}
    assert spectrum_of(index, 3, [1]) == {3: 2}


def test_spectrum_above_every_count_is_empty(tmp_path: Path) -> None:
    """Regression: no item reaches ``min_count`` (the former index then returned a list and the
    operation failed after its charge, a data-dependent failure, §0.4)."""
    baskets = [["bread", "milk"], ["bread"], ["eggs"], []]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    assert mine_all(index, 5, [1]) == {}
    assert spectrum_of(index, 5, [1]) == {}
    assert spectrum_of(index, 3, [1, 2]) == {}


def test_the_index_is_cached_per_store(tmp_path: Path) -> None:
    store = fimi_store(tmp_path, [["bread"], ["milk", "jam"]], ITEMS)
    other = fimi_store(tmp_path, [["bread"], ["milk", "jam"]], ITEMS)
    first = transaction_index(store)
    assert transaction_index(store) is first
    assert transaction_index(other) is not first
    assert first.catalog == item_catalog(store.metadata)
    assert first.rows() is first.rows()  # built once


# --------------------------------------------------------------------------------------------
# The private index on attribute data

TABLE_CSV = """smoker,region,age,colour
yes,n,30,red
no,s,41,blue
yes,n,22,
,e,70,red
no,n,55,red
yes,?,18,blue
yes,s,33,red
no,n,90,blue
"""


def test_attribute_items_never_share_an_attribute(tmp_path: Path) -> None:
    (tmp_path / "table.csv").write_text(TABLE_CSV, encoding="utf-8")
    attributes: list[AnyAttribute] = [
        BooleanAttribute(name="smoker"),
        CategoricalAttribute(name="region", categories=["n", "s", "e"]),
        NumericAttribute(name="age", lo=0, hi=100),
        CategoricalAttribute(name="colour", categories=["red", "blue"]),
    ]
    metadata = DatasetMetadata(kind="table", n_max=100, attributes=attributes)
    store, _report = load_store(metadata, CsvSource(path="table.csv"), base_dir=tmp_path)
    index = transaction_index(store)
    catalog = index.catalog
    assert catalog.names == (
        "smoker",
        "region=n",
        "region=s",
        "region=e",
        "colour=red",
        "colour=blue",
    )
    # Missing cells ('' and '?') hold no item of their attribute.
    expected_rows = [
        {"smoker", "region=n", "colour=red"},
        {"region=s", "colour=blue"},
        {"smoker", "region=n"},
        {"region=e", "colour=red"},
        {"region=n", "colour=red"},
        {"smoker", "colour=blue"},
        {"smoker", "region=s", "colour=red"},
        {"region=n", "colour=blue"},
    ]
    rows = [frozenset(catalog.position(name) for name in row) for row in expected_rows]
    assert row_lists(index) == [sorted(row) for row in rows]
    for length in (1, 2, 3):
        truth = brute_counts(rows, catalog, [length])
        assert len(truth) == catalog.universe_size([length])
        assert mine_all(index, 1, [length]) == {s: c for s, c in truth.items() if c > 0}
        assert spectrum_of(index, 1, [length]) == brute_spectrum(truth, 1)
        dense, work = index.dense((length, length))
        assert work == index.spectrum(1, (length, length))[1]
        ranks = catalog.ranks(length)
        assert {ranks.unrank(i, length): int(c) for i, c in enumerate(dense)} == truth
    # Two values of one attribute never co-occur.
    for group in catalog.groups:
        for pair in itertools.combinations(group, 2):
            assert index.count(pair) == 0
    mined = mine_all(index, 1, [2, 3])
    owner = catalog.group_of
    assert all(len({owner[i] for i in itemset}) == len(itemset) for itemset in mined)
    assert mined[(0, 1)] == 2  # smoker & region=n
    assert mined[(0, 2, 4)] == 1  # smoker & region=s & colour=red


# --------------------------------------------------------------------------------------------
# Ranks, the bounded miner and row truncation


@pytest.mark.parametrize("sizes", [(1, 1, 1, 1, 1), (3, 1, 2), (2, 2, 2, 2), (4,), (1, 5, 1, 3)])
def test_ranks_number_the_valid_itemsets(sizes: tuple[int, ...]) -> None:
    names = [f"g{g}_{i}" for g, size in enumerate(sizes) for i in range(size)]
    starts = np.cumsum([0, *sizes])
    catalog = ItemCatalog(
        names=tuple(names),
        literals=tuple(BoolLiteral(attribute=name) for name in names),
        groups=tuple(tuple(range(starts[g], starts[g + 1])) for g in range(len(sizes))),
    )
    for length in range(1, len(sizes) + 1):
        ranks = catalog.ranks(length)
        valid = valid_itemsets(catalog, [length])
        numbers = [ranks.rank(itemset) for itemset in valid]
        assert sorted(numbers) == list(range(catalog.universe_size([length])))
        assert [ranks.unrank(number, length) for number in numbers] == valid
        terms = ranks.terms()
        assert numbers == [sum(int(terms[i, p]) for p, i in enumerate(s)) for s in valid]


def _rows(rows: Sequence[Sequence[int]], n_items: int) -> RowItems:
    columns = [np.array([r for r, row in enumerate(rows) if i in row]) for i in range(n_items)]
    return rows_from_columns(columns, len(rows))


def _subsets(rows: Sequence[Sequence[int]], low: int, high: int) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for row in rows:
        for length in range(low, high + 1):
            for subset in itertools.combinations(sorted(row), length):
                counts[subset] = counts.get(subset, 0) + 1
    return counts


@pytest.mark.parametrize("seed", range(6))
def test_the_miner_stays_within_its_public_work_bound(seed: int) -> None:
    """Random rows of at most w items: exact spectrum, and scan steps, nodes and reports within
    work_bound(n, w, lengths, B) (steps equal to the per-row sums when B = 1: every prefix is
    frequent)."""
    rng = seeded_generator(2000 + seed)
    n_items, width = 9, 5
    rows = [
        sorted(rng.choice(n_items, size=int(rng.integers(0, width + 1)), replace=False).tolist())
        for _ in range(int(rng.integers(1, 40)))
    ]
    data = _rows(rows, n_items)
    assert [data.items[data.indptr[r] : data.indptr[r + 1]].tolist() for r in range(len(rows))] == (
        rows
    )
    universe = [math.comb(n_items, length) for length in range(6)]
    for low, high in ((1, 1), (1, 3), (2, 2), (2, 4), (3, 5)):
        for threshold in (1, 2, 4):
            spectrum, work = mine_spectrum(data, min_count=threshold, lengths=(low, high))
            truth = _subsets(rows, low, high)
            expected = np.zeros(len(rows) + 1, dtype=np.int64)
            for count in truth.values():
                if count >= threshold:
                    expected[count] += 1
            assert spectrum.tolist() == expected.tolist()
            bound = work_bound(
                len(rows), width, (low, high), min_count=threshold, universe=universe
            )
            assert work.steps <= bound.steps
            assert work.nodes <= bound.nodes
            assert work.reports == int(spectrum.sum()) <= bound.reports
            per_row = sum(
                math.comb(len(row), length)
                for row in rows
                for length in [*range(1, high + 1), *range(1, high)]
            )
            assert work.steps <= per_row
            if threshold == 1:
                assert work.steps == per_row


def test_the_miner_work_and_mined_set_stay_bounded_on_adversarial_neighbours() -> None:
    """A 12-item block held by B − 1 rows among filler rows; the neighbour adds one more row
    holding the block, lifting all its itemsets to count B at once: the mined set grows by
    Σ_ℓ C(12, ℓ), the work with it, yet both stay within the public bounds of n_max rows."""
    block, threshold, n_max = list(range(12)), 6, 60
    filler = [[12 + (r % 8), 12 + ((r + 3) % 8)] for r in range(30)]
    base = [*filler, *([block] * (threshold - 1))]
    neighbour = [*base, block]
    width, lengths = 12, (1, 4)
    bound = work_bound(n_max, width, lengths, min_count=threshold)
    results = []
    for rows in (base, neighbour):
        spectrum, work = mine_spectrum(_rows(rows, 20), min_count=threshold, lengths=lengths)
        results.append((int(spectrum.sum()), work))
        assert work.steps <= bound.steps
        assert work.nodes <= bound.nodes
        assert int(spectrum.sum()) == work.reports <= bound.reports  # the plan's F̄
    (mined_base, work_base), (mined_next, work_next) = results
    assert mined_next - mined_base == sum(math.comb(12, length) for length in range(1, 5))
    assert work_next.steps > work_base.steps
    assert work_next.nodes > work_base.nodes


def test_rows_longer_than_the_declared_width_are_cut_to_their_first_items(tmp_path: Path) -> None:
    baskets = [["jam", "bread", "milk", "eggs"], ["beer", "nappies"], ["milk", "jam", "beer"]]
    path = tmp_path / "long.dat"
    path.write_text("".join(" ".join(row) + "\n" for row in baskets), encoding="utf-8")
    metadata = DatasetMetadata(kind="transactions", n_max=10, items=list(ITEMS), max_row_width=2)
    store, report = load_store(metadata, FimiSource(path=path.name), base_dir=tmp_path)
    index = transaction_index(store)
    # first two items in the order of 'items': bread, milk, eggs, beer, nappies, jam
    assert row_lists(index) == [[0, 1], [3, 4], [1, 3]]
    assert report.truncated_rows == 2
    assert index.width == 2
    assert index.count((5,)) == 0  # jam was cut from both rows holding it
    with pytest.raises(ValueError, match="only for transaction"):
        DatasetMetadata(
            kind="table", n_max=10, attributes=[BooleanAttribute(name="b")], max_row_width=3
        )


def _dense_rows(n_rows: int, n_items: int) -> RowItems:
    """Rows holding every item: every itemset is frequent, so the traversal visits them all."""
    columns = [np.arange(n_rows) for _ in range(n_items)]
    return rows_from_columns(columns, n_rows)


def _mine_with_flag(rows: RowItems, flag: StopFlag, lengths: tuple[int, int]) -> MinerWork:
    token = STOP_FLAG.set(flag)
    try:
        return mine_spectrum(rows, min_count=1, lengths=lengths)[1]
    finally:
        STOP_FLAG.reset(token)


def test_a_set_stop_flag_ends_the_traversal_after_the_root() -> None:
    """An expired request's flag (compiled.py): the miner expands the root and returns."""
    rows = _dense_rows(20, 10)
    full = _mine_with_flag(rows, np.zeros(1, np.uint8), (1, 4))
    stopped = _mine_with_flag(rows, np.ones(1, np.uint8), (1, 4))
    assert full.nodes == 1 + sum(math.comb(10, length) for length in range(1, 4))
    assert stopped.nodes == 1
    assert stopped.steps < full.steps


def test_a_stop_flag_set_from_another_thread_ends_a_running_traversal() -> None:
    """The deadline's thread sets the flag while the compiled loop runs (nogil) in the kernel's
    thread: the loop sees it and returns early, whatever it had left (here: all but a few of
    the C(24, ≤ 6) itemsets of 2,000 full rows, seconds of work)."""
    rows, lengths = _dense_rows(2_000, 24), (1, 6)
    full_nodes = 1 + sum(math.comb(24, length) for length in range(1, 6))
    flag, started, done = np.zeros(1, np.uint8), threading.Event(), list[MinerWork]()

    def kernel() -> None:
        started.set()
        done.append(_mine_with_flag(rows, flag, lengths))

    thread = threading.Thread(target=kernel, daemon=True)
    thread.start()
    assert started.wait(10.0)
    time.sleep(0.05)
    flag[0] = 1
    thread.join(60.0)
    assert not thread.is_alive()
    assert 1 <= done[0].nodes < full_nodes // 2
