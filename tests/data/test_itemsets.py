"""The public item universe and the private itemset index (ALGORITHMS.md §4.1).

* :func:`item_catalog`: transactions (every item its own group) and attribute data (a Boolean
  attribute is one item, a categorical attribute gives ``A=c`` items forming one group, numeric
  attributes give none).
* :meth:`ItemCatalog.universe_size` against brute-force enumeration: e_ℓ of the group sizes, which
  is C(m, ℓ) for transactions, summed over a length range.
* :class:`TransactionIndex` ``count``/``mine``/``spectrum`` against brute force on tiny datasets
  loaded from real FIMI and CSV files with :func:`load_store`.

``test_itemsets_held_by_every_row_are_mined`` pins down a defect of the index: pyfim never
reports an itemset contained in *every* transaction. pyfim also returns a list instead of a dict
for an empty spectrum (a regression test covers the fix).
"""

from __future__ import annotations

import itertools
import math
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
)
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.itemsets import (
    ItemCatalog,
    Itemset,
    TransactionIndex,
    item_catalog,
    transaction_index,
)
from dpmine_server.data.loaders import load_store
from dpmine_server.dp.rng import seeded_generator

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
    # One empty basket keeps every support below the row count: the case of an itemset held by
    # every row is tested separately (test_itemsets_held_by_every_row_are_mined).
    baskets = [*random_baskets(seed, 40 + 7 * seed), []]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    catalog = index.catalog
    rows = positions(baskets, catalog.names)
    assert index.transactions() == [sorted(row) for row in rows]
    for lengths in ([1], [2], [3], [2, 3], [1, 2, 3, 4]):
        truth = brute_counts(rows, catalog, lengths)
        for itemset, count in truth.items():
            assert index.count(itemset) == count, itemset
        for min_count in (1, 2, 5, 11, 20):
            expected = {s: c for s, c in truth.items() if c >= min_count}
            assert index.mine(min_count, lengths) == expected, (lengths, min_count)
            assert index.spectrum(min_count, lengths) == brute_spectrum(truth, min_count)
        # min_count ≤ 0 is read as 1: itemsets that occur at all
        assert index.mine(0, lengths) == {s: c for s, c in truth.items() if c > 0}
    assert index.max_item_count() == max(sum(1 for r in rows if i in r) for i in range(6))


def test_fimi_duplicates_and_empty_lines(tmp_path: Path) -> None:
    baskets = [["bread", "bread", "milk"], [], ["milk", "eggs", "milk"], ["eggs"], []]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    assert index.transactions() == [[0, 1], [], [1, 2], [2], []]
    assert index.count((0,)) == 1
    assert index.count((1,)) == 2
    assert index.count((0, 1)) == 1
    assert index.count((3,)) == 0
    assert index.mine(1, [2]) == {(0, 1): 1, (1, 2): 1}
    assert index.spectrum(1, [1]) == {1: 1, 2: 2}
    assert [index.item_rows(i).count() for i in range(6)] == [1, 2, 2, 0, 0, 0]


def test_itemsets_held_by_every_row_are_mined(tmp_path: Path) -> None:
    """BUG (data/itemsets.py, ``spectrum`` and ``mine``): pyfim 6.28 never reports an itemset
    contained in every transaction (support = number of rows), e.g. ``veil-type=p`` of the
    Mushroom data. ``top_k_itemsets`` then misses the most frequent itemsets, computes a wrong
    c_K (a truncation level that can jump by much more than 1 between neighbours) and can fail
    after the charge when the missing itemset is revealed from the tail with a score above the
    tail bound. Fix: give pyfim one extra empty transaction (it changes no itemset count)."""
    baskets = [["bread", "milk"], ["bread", "milk", "eggs"], ["bread", "milk"]]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    assert index.count((0, 1)) == 3
    assert index.mine(1, [1]) == {(0,): 3, (1,): 3, (2,): 1}
    assert index.mine(1, [2]) == {(0, 1): 3, (0, 2): 1, (1, 2): 1}
    assert index.spectrum(1, [1, 2]) == {3: 3, 1: 3}
    assert index.spectrum(3, [1]) == {3: 2}


def test_spectrum_above_every_count_is_empty(tmp_path: Path) -> None:
    """Regression: when no item reaches ``min_count`` pyfim returns ``[]`` (a list, not a dict).
    ``top_k_itemsets`` asks for the spectrum above min(1 + ⌈2K/ε_s⌉, ⌊Γ⌋ + 1), so on a dataset
    whose items are all rarer than that the operation used to fail after its charge (a
    data-dependent failure, §0.4)."""
    baskets = [["bread", "milk"], ["bread"], ["eggs"], []]
    store = fimi_store(tmp_path, baskets, ITEMS)
    index = TransactionIndex(store, item_catalog(store.metadata))
    assert index.mine(5, [1]) == {}
    assert index.spectrum(5, [1]) == {}
    assert index.spectrum(3, [1, 2]) == {}


def test_the_index_is_cached_per_store(tmp_path: Path) -> None:
    store = fimi_store(tmp_path, [["bread"], ["milk", "jam"]], ITEMS)
    other = fimi_store(tmp_path, [["bread"], ["milk", "jam"]], ITEMS)
    first = transaction_index(store)
    assert transaction_index(store) is first
    assert transaction_index(other) is not first
    assert first.catalog == item_catalog(store.metadata)
    assert first.transactions() is first.transactions()  # built once


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
    assert index.transactions() == [sorted(row) for row in rows]
    for length in (1, 2, 3):
        truth = brute_counts(rows, catalog, [length])
        assert len(truth) == catalog.universe_size([length])
        assert index.mine(1, [length]) == {s: c for s, c in truth.items() if c > 0}
        assert index.spectrum(1, [length]) == brute_spectrum(truth, 1)
    # Two values of one attribute never co-occur.
    for group in catalog.groups:
        for pair in itertools.combinations(group, 2):
            assert index.count(pair) == 0
    mined = index.mine(1, [2, 3])
    owner = catalog.group_of
    assert all(len({owner[i] for i in itemset}) == len(itemset) for itemset in mined)
    assert mined[(0, 1)] == 2  # smoker & region=n
    assert mined[(0, 2, 4)] == 1  # smoker & region=s & colour=red
