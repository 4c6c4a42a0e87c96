"""Itemsets over a dataset: the public item universe and the private counting index (§4.1).

* :class:`ItemCatalog` is public (built from metadata and the public request only): the item
  names and their *groups*. Transaction data: every item is its own group. Attribute data:
  items are the Boolean attributes (``A``), the attribute=value pairs of categorical attributes
  (``A=c``) and, when a request asks for them, the public bins of numeric attributes
  (``A=[lo, hi)``, :mod:`dpmine.wire.items`), over the attributes the request allows; the
  items of one attribute form a group; an itemset holds at most one item per group, so the
  universe of ℓ-itemsets has size e_ℓ(group sizes) (elementary symmetric polynomial), which is
  C(m, ℓ) for transactions.
* :func:`rule_list_catalog` is the item universe of rule-list antecedents (ALGORITHMS.md §5.1,
  :mod:`dpmine.wire.rule_lists`): ``[A = c]`` per category, ``[A]`` and ``![A]`` per Boolean
  attribute, one closed interval per public bin of a numeric attribute; the label's attribute
  gives none. One group per attribute.
* :class:`TransactionIndex` is private: exact counts of itemsets (bitset intersections) and
  frequent-itemset mining above a count threshold with the bounded-work miner of
  :mod:`~dpmine_server.data.itemset_miner`, over every row or over a subset of the rows (one
  label class, §5.2). Nothing it returns may be released.

Valid itemsets of one length ℓ are numbered 0 … e_ℓ − 1 in colexicographic order
(:class:`ItemsetRanks`): with items ascending, item i_p at
position p (0-based) in group g_p, a_p its place in the group, s_g the group sizes and
E[g][j] = e_j(s_0 … s_{g−1}) (the valid j-itemsets of the groups before g),

    rank = Σ_p (E[g_p][p + 1] + a_p · E[g_p][p]).

Proof of the bijection: the valid ℓ-itemsets whose last item lies in a group before g_ℓ₋₁ are
E[g][ℓ] many; those with the same last group and a smaller last item a_ℓ₋₁ · E[g][ℓ − 1] many;
the rest is the rank of the first ℓ − 1 items among the (ℓ − 1)-itemsets of the groups before
g (induction on ℓ). Unranking inverts it position by position from the last.
"""

from __future__ import annotations

import bisect
import threading
import weakref
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpmine.wire import (
    AnyLiteral,
    BoolLiteral,
    CatLiteral,
    DatasetMetadata,
    elementary_symmetric,
    itemset_items,
    rule_list_items,
)
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import ColumnStore
from dpmine_server.data.itemset_miner import (
    MinedSelection,
    MinerWork,
    RowItems,
    mine_dense,
    mine_selected,
    mine_spectrum,
    rows_from_columns,
)
from dpmine_server.errors import InternalError

__all__ = [
    "ItemCatalog",
    "Itemset",
    "ItemsetRanks",
    "TransactionIndex",
    "item_catalog",
    "row_subset_index",
    "rule_list_catalog",
    "transaction_index",
]

#: An itemset as sorted item positions in the catalog.
Itemset = tuple[int, ...]
#: Largest rank kept in an int64 (dense counts are indexed by rank).
_INT64_RANKS = 2**62


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

    def group_ends(self) -> npt.NDArray[np.int64]:
        """``ends[i]``: the first item after item i's group (groups are ranges of items)."""
        ends = np.zeros(max(len(self.names), 1), dtype=np.int64)
        for group in self.groups:
            ends[list(group)] = group[-1] + 1
        return ends

    def position(self, name: str) -> int:
        """Position of the item called ``name``."""
        return self.names.index(name)

    def ranks(self, max_length: int) -> ItemsetRanks:
        """The colexicographic ranking of the valid itemsets of up to ``max_length`` items."""
        return ItemsetRanks(self, max_length)


class ItemsetRanks:
    """Rank and unrank the valid itemsets of one catalog (module docstring), with the table
    E[g][j] built once: unranking costs O(ℓ log G) big-integer steps."""

    def __init__(self, catalog: ItemCatalog, max_length: int) -> None:
        self._group_of = catalog.group_of
        self._start = tuple(group[0] for group in catalog.groups)
        table = [[1] + [0] * max_length]
        for group in catalog.groups:
            previous = table[-1]
            table.append(
                [1] + [previous[j] + len(group) * previous[j - 1] for j in range(1, max_length + 1)]
            )
        self._table = table
        #: columns[j][g] = E[g][j], non-decreasing in g (for the binary search).
        self._columns = [[row[j] for row in table] for j in range(max_length + 1)]
        self.max_length = max_length

    def rank(self, itemset: Itemset) -> int:
        """The rank of a valid itemset among those of its length."""
        table, total = self._table, 0
        for position, item in enumerate(itemset):
            group = self._group_of[item]
            place = item - self._start[group]
            total += table[group][position + 1] + place * table[group][position]
        return total

    def unrank(self, rank: int, length: int) -> Itemset:
        """The valid ``length``-itemset of rank ``rank`` (inverse of :meth:`rank`): from the
        last position, the group is the last g with E[g][p + 1] ≤ rank."""
        items: list[int] = []
        groups = len(self._table)
        for position in range(length - 1, -1, -1):
            group = bisect.bisect_right(self._columns[position + 1], rank, 0, groups) - 1
            rank -= self._table[group][position + 1]
            place, rank = divmod(rank, self._table[group][position])
            items.append(self._start[group] + place)
            groups = group + 1
        return tuple(reversed(items))

    def terms(self) -> npt.NDArray[np.int64]:
        """``terms[i, p]`` = E[g][p + 1] + a · E[g][p] for item i (group g, place a) at position
        p: an itemset's rank is the sum of its items' terms. Only while every e_j, j ≤
        ``max_length``, is below 2^62 (int64)."""
        if max(self._table[-1]) >= _INT64_RANKS:  # E[g][j] ≤ E[G][j] = e_j
            raise ValueError("ranks of this universe do not fit in int64")
        terms = np.zeros((max(len(self._group_of), 1), self.max_length), dtype=np.int64)
        for item, group in enumerate(self._group_of):
            place = item - self._start[group]
            for position in range(self.max_length):
                row = self._table[group]
                terms[item, position] = row[position + 1] + place * row[position]
        return terms


def item_catalog(
    metadata: DatasetMetadata,
    *,
    numeric_bins: int | None = None,
    columns: Collection[str] | None = None,
) -> ItemCatalog:
    """The item universe of itemset mining (:func:`~dpmine.wire.items.itemset_items`): the
    declared items of transaction data; Boolean attributes and attribute=value pairs of a
    table, its numeric attributes' public bins when ``numeric_bins`` is given, restricted to
    ``columns`` when given. Public values only."""
    return _catalog(itemset_items(metadata, numeric_bins, columns))


def _catalog(groups: Sequence[Sequence[tuple[str, AnyLiteral]]]) -> ItemCatalog:
    """The catalog of named items, one group per inner sequence (positions in order)."""
    names: list[str] = []
    literals: list[AnyLiteral] = []
    positions: list[tuple[int, ...]] = []
    for group in groups:
        start = len(names)
        for name, literal in group:
            names.append(name)
            literals.append(literal)
        positions.append(tuple(range(start, len(names))))
    return ItemCatalog(names=tuple(names), literals=tuple(literals), groups=tuple(positions))


def _item_name(literal: AnyLiteral) -> str:
    """The catalog name of a rule-list item, in the query syntax."""
    if isinstance(literal, BoolLiteral):
        return f"{'!' if literal.negated else ''}[{literal.attribute}]"
    if isinstance(literal, CatLiteral):
        return f"[{literal.attribute} = {literal.category}]"
    return f"[{literal.lower!r} <= {literal.attribute} <= {literal.upper!r}]"


def rule_list_catalog(
    metadata: DatasetMetadata, *, numeric_bins: int, columns: Collection[str] | None = None
) -> ItemCatalog:
    """The public item universe of rule-list antecedents (§5.1, §5.2): ``[A = c]`` for every
    category, ``[A]`` and ``![A]`` for a Boolean attribute, one closed interval
    ``[e_i <= A <= e_{i+1}⁻]`` per public bin of a numeric attribute (:func:`numeric_bins_of`:
    disjoint bins, a cut-point belongs to the bin above it), over ``columns`` when given. The
    label's attribute gives no items; the items of one attribute form one group (an antecedent
    holds at most one of them)."""
    return _catalog(
        [
            [(_item_name(literal), literal) for literal in items]
            for items in rule_list_items(metadata, numeric_bins, columns)
        ]
    )


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
        self._row_items: RowItems | None = None
        #: Rank tables, dense offsets and group ends, built once (catalog only).
        self._ranks: dict[int, ItemsetRanks] = {}
        self._offsets: dict[tuple[int, int], npt.NDArray[np.int64]] = {}
        self._group_ends: npt.NDArray[np.int64] | None = None

    @property
    def catalog(self) -> ItemCatalog:
        """The public item universe."""
        return self._catalog

    @property
    def n_max(self) -> int:
        """The public bound on the rows (the dataset's ``n_max``; a subset has no more)."""
        return self._store.metadata.n_max

    @property
    def width(self) -> int:
        """The public bound on a row's items: a transaction dataset's declared width (longer
        rows are cut at load), else the number of item groups (one item per group)."""
        metadata = self._store.metadata
        return metadata.row_width if metadata.kind == "transactions" else len(self._catalog.groups)

    @property
    def row_lists(self) -> bool:
        """Whether the rows are read from stored per-item row lists (transaction data, all
        rows; public), rather than from one bitset per item."""
        return self._rows is None and self._store.metadata.kind == "transactions"

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

    def rows(self) -> RowItems:
        """The index's rows as item lists (built once: the miner's input). Transaction data
        reads the stored per-item row lists, O(nnz + n); attribute data each item's bitset,
        O(items · n). Rows outside the subset are left out, the others renumbered."""
        with self._lock:
            if self._row_items is None:
                self._row_items = self._build_rows()
            return self._row_items

    def _build_rows(self) -> RowItems:
        store = self._store
        n_items = len(self._catalog.names)
        if self.row_lists:
            columns = store.items
            return rows_from_columns(
                [columns.tidlist(item) for item in range(n_items)], store.n_rows
            )
        kept = None if self._rows is None else self._rows.to_indices()
        renumber = np.full(store.n_rows, -1, dtype=np.int64)
        if kept is None:
            renumber = np.arange(store.n_rows, dtype=np.int64)
        else:
            renumber[kept] = np.arange(kept.size, dtype=np.int64)
        n_rows = store.n_rows if kept is None else int(kept.size)
        return rows_from_columns(
            [renumber[self.item_rows(item).to_indices()] for item in range(n_items)], n_rows
        )

    def nbytes(self) -> int:
        """Memory of what the index built (the miner's input, once built)."""
        return 0 if self._row_items is None else self._row_items.nbytes()

    def spectrum(
        self, min_count: int, lengths: tuple[int, int]
    ) -> tuple[npt.NDArray[np.int64], MinerWork]:
        """(spectrum, work): ``spectrum[c]`` itemsets of lengths ``lengths`` (min, max) have
        count c, for c ≥ ``min_count`` (:func:`~dpmine_server.data.itemset_miner.mine_spectrum`)."""
        return mine_spectrum(self.rows(), min_count=min_count, lengths=lengths)

    def select(
        self, min_count: int, lengths: tuple[int, int], places: dict[int, list[int]]
    ) -> MinedSelection:
        """The itemsets at ``places`` (count → positions among that count's itemsets), in the
        order of :meth:`spectrum` (:func:`~dpmine_server.data.itemset_miner.mine_selected`)."""
        return mine_selected(self.rows(), min_count=min_count, lengths=lengths, places=places)

    def dense(self, lengths: tuple[int, int]) -> tuple[npt.NDArray[np.int32], MinerWork]:
        """(counts, work): the count of every valid itemset of lengths ``lengths``, indexed by
        :meth:`dense_itemset` (:func:`~dpmine_server.data.itemset_miner.mine_dense`)."""
        offsets = self.dense_offsets(lengths)
        terms = self.ranks(lengths[1]).terms()
        return mine_dense(
            self.rows(),
            lengths=lengths,
            rank_of=terms,
            block_offset=offsets,
            group_end=self._ends(),
        )

    def _ends(self) -> npt.NDArray[np.int64]:
        """The catalog's :meth:`ItemCatalog.group_ends`, built on first use (read-only)."""
        if self._group_ends is None:
            ends = self._catalog.group_ends()
            ends.flags.writeable = False
            self._group_ends = ends
        return self._group_ends

    def ranks(self, max_length: int) -> ItemsetRanks:
        """The catalog's ranking of itemsets of up to ``max_length`` items (:meth:`ItemCatalog.
        ranks`), built on first use and kept: a function of the public catalog only."""
        ranks = self._ranks.get(max_length)
        if ranks is None:
            ranks = self._ranks.setdefault(max_length, self._catalog.ranks(max_length))
        return ranks

    def dense_offsets(self, lengths: tuple[int, int]) -> npt.NDArray[np.int64]:
        """``offsets[ℓ]``: where the itemsets of length ℓ start in :meth:`dense`'s array;
        ``offsets[max + 1]`` its size (kept per ``lengths``, read-only)."""
        offsets = self._offsets.get(lengths)
        if offsets is None:
            low, high = lengths
            offsets = np.zeros(high + 2, dtype=np.int64)
            for length in range(low, high + 1):
                offsets[length + 1] = offsets[length] + self._catalog.universe_size([length])
            offsets.flags.writeable = False
            offsets = self._offsets.setdefault(lengths, offsets)
        return offsets

    def dense_itemset(self, index: int, lengths: tuple[int, int]) -> Itemset:
        """The itemset at ``index`` of :meth:`dense`'s array."""
        offsets = self.dense_offsets(lengths)
        length = int(np.searchsorted(offsets, index, side="right")) - 1
        return self.ranks(length).unrank(index - int(offsets[length]), length)


def transaction_index(
    store: ColumnStore,
    *,
    numeric_bins: int | None = None,
    columns: Collection[str] | None = None,
) -> TransactionIndex:
    """The index of a loaded store over the catalog of :func:`item_catalog` (``numeric_bins``
    and ``columns`` are public request values), cached on the store per catalog (it holds
    private data)."""
    key: tuple[Hashable, ...] = ("itemsets.transaction_index",)
    if numeric_bins is not None or columns is not None:
        key = (*key, numeric_bins, None if columns is None else tuple(sorted(columns)))
    return store.derived.get_or_build(
        key,
        lambda: TransactionIndex(
            store,
            item_catalog(store.metadata, numeric_bins=numeric_bins, columns=columns),
            weak=True,
        ),
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
