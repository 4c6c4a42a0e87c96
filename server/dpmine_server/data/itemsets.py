"""Itemsets over a dataset: the public item universe and the private counting index (§4.1).

* :class:`ItemCatalog` is public (built from metadata only): the item names and their *groups*.
  Transaction data: every item is its own group. Attribute data: items are the Boolean
  attributes (``A``) and the attribute=value pairs of categorical attributes (``A=c``), and the
  items of one attribute form a group; an itemset holds at most one item per group, so the
  universe of ℓ-itemsets has size e_ℓ(group sizes) (elementary symmetric polynomial), which is
  C(m, ℓ) for transactions.
* :func:`rule_list_catalog` is the item universe of rule-list antecedents (ALGORITHMS.md §5.1,
  :mod:`dpmine.wire.rule_lists`): ``[A = c]`` per category, ``[A]`` and ``![A]`` per Boolean
  attribute, one closed interval per public bin of a numeric attribute; the label's attribute
  gives none. One group per attribute.
* :class:`TransactionIndex` is private: exact counts of itemsets (bitset intersections) and
  frequent-itemset mining above a count threshold with Borgelt's Eclat (PyPI ``pyfim``, C code),
  over every row or over a subset of the rows (one label class, §5.2).
  Nothing it returns may be released.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import fim
import numpy as np
import numpy.typing as npt

from dpmine.wire import (
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    DatasetMetadata,
    elementary_symmetric,
    rule_list_items,
)
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import ColumnStore
from dpmine_server.errors import InternalError

__all__ = [
    "ItemCatalog",
    "Itemset",
    "TransactionIndex",
    "item_catalog",
    "row_subset_index",
    "rule_list_catalog",
    "transaction_index",
]

#: Largest n_max × items for which Eclat may use bit vectors (64 MiB of them).
_MAX_BITVECTOR_BITS = 2**29
#: An itemset as sorted item positions in the catalog.
Itemset = tuple[int, ...]
#: Bytes of an empty list and of one list slot, for the miner input's estimate.
_LIST_BYTES = sys.getsizeof([])
_SLOT_BYTES = 8


@dataclass(frozen=True, slots=True)
class ItemCatalog:
    """The public item universe of a dataset."""

    names: tuple[str, ...]
    literals: tuple[AnyLiteral, ...]
    groups: tuple[tuple[int, ...], ...]

    @property
    def group_of(self) -> tuple[int, ...]:
        """Group index of every item."""
        owner = [0] * len(self.names)
        for group_index, group in enumerate(self.groups):
            for item in group:
                owner[item] = group_index
        return tuple(owner)

    def universe_size(self, lengths: Sequence[int]) -> int:
        """Exact number of valid itemsets with a length in ``lengths`` (≤ one item per group)."""
        polynomial = elementary_symmetric([len(group) for group in self.groups], max(lengths))
        return sum(polynomial[length] for length in set(lengths))

    def position(self, name: str) -> int:
        """Position of the item called ``name``."""
        return self.names.index(name)


def item_catalog(metadata: DatasetMetadata) -> ItemCatalog:
    """The item universe declared by the metadata (numeric attributes contribute no items)."""
    if metadata.kind == "transactions":
        literals = tuple(BoolLiteral(attribute=item) for item in metadata.items)
        return ItemCatalog(
            names=tuple(metadata.items),
            literals=literals,
            groups=tuple((index,) for index in range(len(metadata.items))),
        )
    names: list[str] = []
    item_literals: list[AnyLiteral] = []
    groups: list[tuple[int, ...]] = []
    for attribute in metadata.attributes:
        start = len(names)
        if isinstance(attribute, BooleanAttribute):
            names.append(attribute.name)
            item_literals.append(BoolLiteral(attribute=attribute.name))
        elif isinstance(attribute, CategoricalAttribute):
            for category in attribute.categories:
                names.append(f"{attribute.name}={category}")
                item_literals.append(CatLiteral(attribute=attribute.name, category=category))
        else:
            continue
        groups.append(tuple(range(start, len(names))))
    return ItemCatalog(names=tuple(names), literals=tuple(item_literals), groups=tuple(groups))


def _item_name(literal: AnyLiteral) -> str:
    """The catalog name of a rule-list item, in the query syntax."""
    if isinstance(literal, BoolLiteral):
        return f"{'!' if literal.negated else ''}[{literal.attribute}]"
    if isinstance(literal, CatLiteral):
        return f"[{literal.attribute} = {literal.category}]"
    return f"[{literal.lower!r} <= {literal.attribute} <= {literal.upper!r}]"


def rule_list_catalog(metadata: DatasetMetadata, *, numeric_bins: int) -> ItemCatalog:
    """The public item universe of rule-list antecedents (§5.1, §5.2): ``[A = c]`` for every
    category, ``[A]`` and ``![A]`` for a Boolean attribute, one closed interval
    ``[e_i <= A <= e_{i+1}⁻]`` per public bin of a numeric attribute (:func:`numeric_bins_of`:
    disjoint bins, a cut-point belongs to the bin above it). The label's attribute gives no
    items; the items of one attribute form one group (an antecedent holds at most one of them)."""
    names: list[str] = []
    literals: list[AnyLiteral] = []
    groups: list[tuple[int, ...]] = []
    for items in rule_list_items(metadata, numeric_bins):
        start = len(names)
        for literal in items:
            names.append(_item_name(literal))
            literals.append(literal)
        groups.append(tuple(range(start, len(names))))
    return ItemCatalog(names=tuple(names), literals=tuple(literals), groups=tuple(groups))


class TransactionIndex:
    """Exact itemset counts and frequent-itemset mining over one loaded dataset. PRIVATE.

    ``weak``: hold the store by a weak reference, for an index cached on the store itself
    (:func:`transaction_index`), so that the store and its index form no reference cycle and are
    freed as soon as the store is dropped. ``rows``: count and mine only these rows (e.g. one
    label class, §5.2); every other row is left out of the miner's input.
    """

    def __init__(
        self,
        store: ColumnStore,
        catalog: ItemCatalog,
        *,
        weak: bool = False,
        rows: Bitset | None = None,
    ) -> None:
        self._store_ref: Callable[[], ColumnStore | None] = (
            weakref.ref(store) if weak else lambda: store
        )
        self._catalog = catalog
        self._rows = rows
        self._lock = threading.Lock()
        self._transactions: list[list[int]] | None = None
        self._transactions_bytes = 0

    @property
    def catalog(self) -> ItemCatalog:
        """The public item universe."""
        return self._catalog

    @property
    def _store(self) -> ColumnStore:
        store = self._store_ref()
        if store is None:
            raise InternalError("a transaction index was used after its store was dropped")
        return store

    def item_rows(self, item: int) -> Bitset:
        """Rows (of the index's subset) holding item ``item``."""
        rows = self._store.literal_bitset(self._catalog.literals[item])
        return rows if self._rows is None else rows & self._rows

    def count(self, itemset: Itemset) -> int:
        """Exact number of rows holding every item of ``itemset``."""
        return Bitset.intersection(self.item_rows(item) for item in itemset).count()

    def transactions(self) -> list[list[int]]:
        """Rows as lists of item positions (built once; the input of the C miner)."""
        with self._lock:
            if self._transactions is None:
                self._transactions = self._build_transactions()
            return self._transactions

    def _build_transactions(self) -> list[list[int]]:
        n_rows = self._store.n_rows
        row_parts: list[np.ndarray] = []
        item_parts: list[np.ndarray] = []
        for item in range(len(self._catalog.names)):
            rows = self.item_rows(item).to_indices()
            row_parts.append(rows)
            item_parts.append(np.full(rows.size, item, dtype=np.int64))
        rows_all = np.concatenate(row_parts) if row_parts else np.zeros(0, dtype=np.int64)
        items_all = np.concatenate(item_parts) if item_parts else np.zeros(0, dtype=np.int64)
        order = np.lexsort((items_all, rows_all))
        rows_sorted, items_sorted = rows_all[order], items_all[order]
        bounds = np.searchsorted(rows_sorted, np.arange(n_rows + 1))
        item_list = items_sorted.tolist()
        kept = range(n_rows) if self._rows is None else self._rows.to_indices().tolist()
        # Lists (outer and per row), their slots, and an int object per item position > 256.
        self._transactions_bytes = (
            (len(kept) + 1) * _LIST_BYTES
            + (len(kept) + items_sorted.size) * _SLOT_BYTES
            + sys.getsizeof(2**16) * int(np.count_nonzero(items_sorted > 256))
        )
        return [item_list[bounds[row] : bounds[row + 1]] for row in kept]

    def nbytes(self) -> int:
        """Estimated memory of what the index built (the miner's input, once built)."""
        return self._transactions_bytes

    def _miner_input(self) -> list[list[int]]:
        # pyfim never reports an itemset held by every transaction; one extra empty transaction
        # makes every support strictly smaller than the input size and changes no count.
        return [*self.transactions(), []]

    def _eclat(self, min_count: int, lengths: Sequence[int], report: str) -> Any:
        # Bit-vector Eclat is about twice as fast on dense data; its memory (rows × items bits)
        # is bounded with the public n_max, so the choice depends on public values only.
        bits = self._store.metadata.n_max * len(self._catalog.names)
        return fim.eclat(
            self._miner_input(),
            target="s",
            supp=-max(int(min_count), 1),
            zmin=min(lengths),
            zmax=max(lengths),
            report=report,
            algo="b" if bits <= _MAX_BITVECTOR_BITS else "a",
        )

    def spectrum(self, min_count: int, lengths: Sequence[int]) -> dict[int, int]:
        """Number of valid itemsets per exact count, for counts ≥ ``min_count``."""
        wanted = set(lengths)
        counts: dict[int, int] = {}
        for (size, support), number in dict(self._eclat(min_count, lengths, "#")).items():
            if size in wanted:
                counts[int(support)] = counts.get(int(support), 0) + int(number)
        return counts

    def mine(self, min_count: int, lengths: Sequence[int]) -> dict[Itemset, int]:
        """Every valid itemset with a length in ``lengths`` and count ≥ ``min_count``."""
        wanted = set(lengths)
        found = self._eclat(min_count, lengths, "a")
        return {tuple(sorted(itemset)): count for itemset, count in found if len(itemset) in wanted}

    def mine_raw(
        self, min_count: int, lengths: Sequence[int]
    ) -> tuple[list[tuple[int, ...]], npt.NDArray[np.int64]]:
        """:meth:`mine` without building a dict: the itemsets as the miner reports them (items
        in any order) and their counts, for callers that only need a few of them sorted."""
        found = self._eclat(min_count, lengths, "a")
        wanted = set(lengths)
        if wanted != set(range(min(lengths), max(lengths) + 1)):
            found = [(itemset, count) for itemset, count in found if len(itemset) in wanted]
        itemsets = [itemset for itemset, _count in found]
        counts = np.fromiter((count for _itemset, count in found), dtype=np.int64, count=len(found))
        return itemsets, counts

    def max_item_count(self) -> int:
        """The largest single-item count."""
        return max((self.item_rows(i).count() for i in range(len(self._catalog.names))), default=0)


def transaction_index(store: ColumnStore) -> TransactionIndex:
    """The index of a loaded store, cached on the store (it holds private data)."""
    return store.derived.get_or_build(
        ("itemsets.transaction_index",),
        lambda: TransactionIndex(store, item_catalog(store.metadata), weak=True),
        nbytes=TransactionIndex.nbytes,
    )


def row_subset_index(
    store: ColumnStore, catalog: ItemCatalog, rows: Bitset, *, key: tuple[Hashable, ...]
) -> TransactionIndex:
    """An index of ``catalog`` over the subset ``rows`` of a loaded store, cached on the store
    under ``("itemsets.row_subset_index", *key)``; ``key`` (public values) must identify both the
    catalog and the subset (e.g. the label spec, the class and the catalog's parameters)."""
    return store.derived.get_or_build(
        ("itemsets.row_subset_index", *key),
        lambda: TransactionIndex(store, catalog, weak=True, rows=rows),
        nbytes=TransactionIndex.nbytes,
    )
