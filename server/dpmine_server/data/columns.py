"""Typed in-memory columns and the :class:`ColumnStore` that evaluates queries on them.

DESIGN.md "Data at rest and in memory": Boolean and categorical literals are packed bitsets,
numeric columns are float arrays (clipped to the public range, NaN = missing) with a presence
bitset and a sorted order, and transactions are per-item row lists (CSR) with per-item bitsets
built on demand. Query semantics follow ALGORITHMS.md §1.1 and :mod:`dpmine.wire.queries`.
Values the operations derive from a store or a numeric column are cached on it
(:class:`~dpmine_server.data.derived.DerivedCache`), so they die and are counted with it.

Everything here is private data. Nothing in this module may be released without a mechanism;
error messages raised here never mention row counts or values.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Generic, TypeVar, cast

import numpy as np
import numpy.typing as npt

from dpmine.wire.datasets import DatasetMetadata, View
from dpmine.wire.queries import And, BoolLiteral, CatLiteral, Expr, Not, NumLiteral, Or
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.derived import DerivedCache
from dpmine_server.data.validation import QueryError
from dpmine_server.data.value_order import stable_value_order

__all__ = [
    "BooleanColumn",
    "CategoricalColumn",
    "Column",
    "ColumnStore",
    "ItemColumns",
    "NumericColumn",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]

K = TypeVar("K")
V = TypeVar("V")


#: Derived values per numeric column: a few grids and lattices per attribute.
_COLUMN_DERIVED_ENTRIES = 16


def _read_only(array: npt.NDArray[np.generic]) -> None:
    array.flags.writeable = False


class _LruCache(Generic[K, V]):
    """A small thread-safe LRU map; the value is computed outside the lock (twice is harmless)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = max(0, capacity)
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        value = compute()
        with self._lock:
            self._entries[key] = value
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)
        return value

    @property
    def capacity(self) -> int:
        return self._capacity

    def values(self) -> list[V]:
        with self._lock:
            return list(self._entries.values())


@dataclass(frozen=True, eq=False)
class BooleanColumn:
    """A Boolean attribute: rows where it is true, and rows where it is not missing."""

    name: str
    true: Bitset
    present: Bitset

    @classmethod
    def from_arrays(cls, name: str, values: BoolArray, present: BoolArray) -> BooleanColumn:
        """Build from a value mask and a presence mask (values of missing rows are ignored)."""
        return cls(name, Bitset.from_bool_array(values & present), Bitset.from_bool_array(present))

    @property
    def n_rows(self) -> int:
        return self.present.n_rows

    def literal(self, *, negated: bool) -> Bitset:
        """``[A]``, or ``![A]`` = present and false (§1.1)."""
        return self.present - self.true if negated else self.true

    def array_bytes(self) -> int:
        """Memory of the arrays that are not bitsets."""
        return 0

    def bitsets(self) -> list[Bitset]:
        """Every bitset held, cached ones included."""
        return [self.true, self.present]


@dataclass(frozen=True, eq=False)
class CategoricalColumn:
    """A categorical attribute as codes into the public category list (-1 = missing).

    The codes array is taken over and made read-only.
    """

    name: str
    categories: tuple[str, ...]
    codes: Int32Array
    _bitsets: dict[int, Bitset] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.codes.dtype != np.int32 or self.codes.ndim != 1:
            raise ValueError(f"column {self.name!r}: codes must be a 1-d int32 array")
        if self.codes.size and not (
            int(self.codes.min()) >= -1 and int(self.codes.max()) < len(self.categories)
        ):
            raise ValueError(f"column {self.name!r}: codes must lie in [-1, n_categories)")
        _read_only(self.codes)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {category: code for code, category in enumerate(self.categories)}

    @cached_property
    def present(self) -> Bitset:
        return Bitset.from_bool_array(self.codes >= 0)

    @property
    def n_rows(self) -> int:
        return int(self.codes.shape[0])

    def code(self, category: str) -> int:
        """Position of ``category`` in the public list (QueryError if undeclared)."""
        try:
            return self._index[category]
        except KeyError:
            raise QueryError(f"{category!r} is not a declared category of {self.name!r}") from None

    def category_bitset(self, category: str) -> Bitset:
        """Rows with this category; computed on first use and cached."""
        code = self.code(category)
        cached = self._bitsets.get(code)
        if cached is None:
            cached = Bitset.from_bool_array(self.codes == code)
            self._bitsets[code] = cached
        return cached

    def literal(self, category: str, *, negated: bool) -> Bitset:
        """``[A = c]``, or ``![A = c]`` = present and another category (§1.1)."""
        rows = self.category_bitset(category)
        return self.present - rows if negated else rows

    def array_bytes(self) -> int:
        return int(self.codes.nbytes)

    def bitsets(self) -> list[Bitset]:
        return [self.present, *list(self._bitsets.values())]


@dataclass(frozen=True, eq=False)
class NumericColumn:
    """A numeric attribute clipped to its public range [lo, hi]; NaN marks missing values.

    ``sorted_order`` holds the rows of the present values, sorted by value (stable), for the
    operations that sweep thresholds (ALGORITHMS.md §1.4). Arrays are made read-only; build with
    :meth:`from_values`, which clips and derives ``present`` and ``sorted_order``. ``derived``
    caches what the operations compute from the column (threshold grids, continuous cells).
    """

    name: str
    lo: float
    hi: float
    values: FloatArray
    present: Bitset
    sorted_order: IntArray
    derived: DerivedCache = field(
        default_factory=lambda: DerivedCache(max_entries=_COLUMN_DERIVED_ENTRIES),
        init=False,
        repr=False,
    )

    @classmethod
    def from_values(cls, name: str, values: FloatArray, *, lo: float, hi: float) -> NumericColumn:
        """Clip ``values`` to [lo, hi] (NaN stays missing) and derive presence and order."""
        clipped = np.clip(np.asarray(values, dtype=np.float64), lo, hi)
        order = stable_value_order(clipped)
        return cls(
            name,
            lo,
            hi,
            clipped,
            Bitset.from_bool_array(~np.isnan(clipped)),
            order.astype(np.int64, copy=False),
        )

    def __post_init__(self) -> None:
        _read_only(self.values)
        _read_only(self.sorted_order)

    @property
    def n_rows(self) -> int:
        return int(self.values.shape[0])

    @cached_property
    def sorted_values(self) -> FloatArray:
        """The present values in increasing order (``values[sorted_order]``)."""
        ordered = self.values[self.sorted_order]
        _read_only(ordered)
        return ordered

    def range_bitset(self, lower: float | None, upper: float | None) -> Bitset:
        """Rows with ``lower <= value <= upper`` (a missing bound is unbounded; NaN is never in)."""
        mask: BoolArray
        if lower is not None and upper is not None:
            mask = (self.values >= lower) & (self.values <= upper)
        elif lower is not None:
            mask = self.values >= lower
        elif upper is not None:
            mask = self.values <= upper
        else:
            return self.present
        return Bitset.from_bool_array(mask)

    def literal(self, lower: float | None, upper: float | None, *, negated: bool) -> Bitset:
        """``[lower <= A <= upper]``, or its negation = present and outside the range (§1.1)."""
        rows = self.range_bitset(lower, upper)
        return self.present - rows if negated else rows

    def array_bytes(self) -> int:
        return int(self.values.nbytes + self.sorted_order.nbytes)

    def bitsets(self) -> list[Bitset]:
        return [self.present]


Column = BooleanColumn | CategoricalColumn | NumericColumn


def _fresh_column(column: Column) -> Column:
    """``column`` with its arrays shared and nothing computed from them since the load (a
    Boolean column computes nothing)."""
    return column if isinstance(column, BooleanColumn) else replace(column)


class ItemColumns:
    """Transaction data as per-item row lists in CSR form; item bitsets built lazily (LRU)."""

    def __init__(
        self,
        items: Sequence[str],
        indptr: IntArray,
        indices: Int32Array,
        n_rows: int,
        *,
        bitset_cache_size: int = 4096,
    ) -> None:
        """``indices[indptr[i]:indptr[i + 1]]`` are the sorted rows containing item ``i``."""
        if indptr.shape != (len(items) + 1,) or int(indptr[0]) != 0:
            raise ValueError("indptr must have n_items + 1 entries starting at 0")
        if int(indptr[-1]) != indices.shape[0] or bool(np.any(np.diff(indptr) < 0)):
            raise ValueError("indptr must be non-decreasing and end at len(indices)")
        if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= n_rows):
            raise ValueError("row indices must lie in [0, n_rows)")
        self._items = tuple(items)
        self._index = {item: position for position, item in enumerate(self._items)}
        if len(self._index) != len(self._items):
            raise ValueError("the item universe lists an item twice")
        self._indptr = indptr.astype(np.int64, copy=False)
        self._indices = indices.astype(np.int32, copy=False)
        _read_only(self._indptr)
        _read_only(self._indices)
        self._n_rows = n_rows
        self._bitsets: _LruCache[int, Bitset] = _LruCache(bitset_cache_size)

    def fresh_copy(self) -> ItemColumns:
        """The same row lists (shared, read-only) with no item bitset built yet."""
        return ItemColumns(
            self._items,
            self._indptr,
            self._indices,
            self._n_rows,
            bitset_cache_size=self._bitsets.capacity,
        )

    @classmethod
    def from_pairs(
        cls,
        items: Sequence[str],
        rows: IntArray,
        item_ids: IntArray,
        n_rows: int,
        *,
        max_row_width: int | None = None,
    ) -> ItemColumns:
        """Build from (row, item) occurrence pairs; duplicate pairs count once. With
        ``max_row_width``, a row holding more items keeps its first ``max_row_width`` in item
        order (the public row-width bound of the metadata, ALGORITHMS.md §4.1): a map applied to
        each row on its own, so neighbouring datasets stay neighbours."""
        keys = np.unique(item_ids.astype(np.int64) * max(n_rows, 1) + rows.astype(np.int64))
        if max_row_width is not None:
            keys = _first_items_per_row(keys, n_rows, max_row_width)
        item_of = keys // max(n_rows, 1)
        indptr = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(np.bincount(item_of, minlength=len(items)), out=indptr[1:])
        return cls(items, indptr, (keys % max(n_rows, 1)).astype(np.int32), n_rows)

    @property
    def items(self) -> tuple[str, ...]:
        return self._items

    @property
    def n_rows(self) -> int:
        return self._n_rows

    @property
    def indptr(self) -> IntArray:
        return self._indptr

    @property
    def indices(self) -> Int32Array:
        return self._indices

    def index_of(self, item: str) -> int:
        """Position of ``item`` in the universe (QueryError if unknown)."""
        try:
            return self._index[item]
        except KeyError:
            raise QueryError(f"unknown item {item!r}") from None

    def _position(self, item: str | int) -> int:
        if isinstance(item, str):
            return self.index_of(item)
        if not 0 <= item < len(self._items):
            raise IndexError("item position out of range")
        return item

    def tidlist(self, item: str | int) -> Int32Array:
        """Sorted rows containing the item (read-only view); ``item`` is a name or a position."""
        position = self._position(item)
        return self._indices[self._indptr[position] : self._indptr[position + 1]]

    def supports(self) -> IntArray:
        """Exact per-item row counts (private)."""
        return np.diff(self._indptr)

    def item_bitset(self, item: str | int) -> Bitset:
        """Rows containing the item, as a bitset (LRU-cached)."""
        position = self._position(item)
        return self._bitsets.get_or_compute(
            position, lambda: Bitset.from_indices(self.tidlist(position), self._n_rows)
        )

    def array_bytes(self) -> int:
        return int(self._indptr.nbytes + self._indices.nbytes)

    def bitsets(self) -> list[Bitset]:
        return self._bitsets.values()


def _first_items_per_row(keys: IntArray, n_rows: int, width: int) -> IntArray:
    """The (item · n_rows + row) keys whose item is among its row's ``width`` first items."""
    stride = max(n_rows, 1)
    row_of, item_of = keys % stride, keys // stride
    order = np.lexsort((item_of, row_of))
    starts = np.searchsorted(row_of[order], np.arange(stride))
    rank = np.arange(order.size) - starts[row_of[order]]
    return np.sort(keys[order[rank < width]])


class ColumnStore:
    """The loaded rows of one dataset version, with query evaluation.

    PRIVATE: :attr:`n_rows` is the exact row count. It must never be released, logged, put in
    an error message or used to compute a sensitivity; only ``metadata.n_max`` is public.
    :attr:`derived` caches the values the operations derive from the store (private too).
    """

    def __init__(
        self,
        metadata: DatasetMetadata,
        *,
        n_rows: int,
        columns: Mapping[str, Column] | None = None,
        items: ItemColumns | None = None,
        literal_cache_size: int = 4096,
    ) -> None:
        self._metadata = metadata
        self._n_rows = n_rows
        self._columns = dict(columns or {})
        self._items = items
        self._check_consistent()
        self._literals: _LruCache[BoolLiteral | CatLiteral | NumLiteral, Bitset] = _LruCache(
            literal_cache_size
        )
        self._all_rows = Bitset.all_set(n_rows)
        self._derived = DerivedCache()
        self._attachments: dict[str, object] = {}
        self._attachments_lock = threading.Lock()

    def _check_consistent(self) -> None:
        metadata = self._metadata
        if metadata.kind == "transactions":
            if self._items is None or self._columns:
                raise ValueError("a transaction store holds items and no attribute columns")
            if self._items.items != tuple(metadata.items) or self._items.n_rows != self._n_rows:
                raise ValueError("item columns do not match the metadata's item universe")
            return
        if self._items is not None:
            raise ValueError(f"a {metadata.kind!r} store holds attribute columns, not items")
        expected = {attribute.name: attribute.type for attribute in metadata.attributes}
        kinds = {
            BooleanColumn: "boolean",
            CategoricalColumn: "categorical",
            NumericColumn: "numeric",
        }
        actual = {name: kinds[type(column)] for name, column in self._columns.items()}
        if actual != expected:
            raise ValueError("columns do not match the declared attributes and types")
        if any(column.n_rows != self._n_rows for column in self._columns.values()):
            raise ValueError("all columns must have n_rows rows")

    @property
    def metadata(self) -> DatasetMetadata:
        return self._metadata

    @property
    def n_rows(self) -> int:
        """PRIVATE exact row count: never release it (see the class docstring)."""
        return self._n_rows

    @property
    def derived(self) -> DerivedCache:
        """Values derived from this store (evicted and counted with it)."""
        return self._derived

    def fresh_copy(self) -> ColumnStore:
        """The same rows (the read-only arrays shared) as the store is right after its load:
        no derived value, literal or item bitset, lazily sorted array or attachment. A request's
        padding budget does not know which of these earlier requests built (only the public
        cache model of ``serenade.extend_one`` does), so services/calibration.py times every
        call on one of these."""
        return ColumnStore(
            self._metadata,
            n_rows=self._n_rows,
            columns={name: _fresh_column(column) for name, column in self._columns.items()},
            items=None if self._items is None else self._items.fresh_copy(),
            literal_cache_size=self._literals.capacity,
        )

    def attachment(self, name: str, factory: Callable[[], V]) -> V:
        """A per-store object named ``name``, made by ``factory()`` on first use: it lives
        and dies with this store (e.g. the public cache model of services/
        extension_model.py, which pins derived values and must not outlive the dataset)."""
        with self._attachments_lock:
            if name not in self._attachments:
                self._attachments[name] = factory()
            return cast("V", self._attachments[name])

    @property
    def items(self) -> ItemColumns:
        if self._items is None:
            raise QueryError(f"a {self._metadata.kind!r} dataset has no items")
        return self._items

    def column(self, name: str) -> Column:
        try:
            return self._columns[name]
        except KeyError:
            raise QueryError(f"unknown attribute {name!r}") from None

    def view_of(self, name: str) -> View | None:
        """The public view of an attribute (None for "table" datasets)."""
        return self._metadata.attribute(name).view

    def attributes_in_view(self, view: View) -> tuple[str, ...]:
        return tuple(a.name for a in self._metadata.attributes if a.view == view)

    def all_rows(self) -> Bitset:
        return self._all_rows

    def literal_bitset(self, lit: BoolLiteral | CatLiteral | NumLiteral) -> Bitset:
        """Support of one literal (§1.1: a literal and its negation are false on missing values)."""
        return self._literals.get_or_compute(lit, lambda: self._compute_literal(lit))

    def _compute_literal(self, lit: BoolLiteral | CatLiteral | NumLiteral) -> Bitset:
        if self._items is not None:
            if not isinstance(lit, BoolLiteral):
                raise QueryError("transaction datasets only have item literals (kind 'bool')")
            rows = self._items.item_bitset(lit.attribute)
            return ~rows if lit.negated else rows
        column = self.column(lit.attribute)
        if isinstance(lit, BoolLiteral) and isinstance(column, BooleanColumn):
            return column.literal(negated=lit.negated)
        if isinstance(lit, CatLiteral) and isinstance(column, CategoricalColumn):
            return column.literal(lit.category, negated=lit.negated)
        if isinstance(lit, NumLiteral) and isinstance(column, NumericColumn):
            return column.literal(lit.lower, lit.upper, negated=lit.negated)
        raise QueryError(f"a {lit.kind!r} literal does not apply to attribute {lit.attribute!r}")

    def evaluate(self, expr: Expr) -> Bitset:
        """Support of a query; ``Not`` is the plain complement (missing rows included)."""
        if isinstance(expr, And):
            return Bitset.intersection(self.evaluate(term) for term in expr.terms)
        if isinstance(expr, Or):
            return Bitset.union(self.evaluate(term) for term in expr.terms)
        if isinstance(expr, Not):
            return ~self.evaluate(expr.term)
        return self.literal_bitset(expr)

    def memory_bytes(self) -> int:
        """Memory held by the arrays and bitsets (cached ones included, shared ones once) and
        the estimates of the derived values (of the store and of its numeric columns)."""
        holders: list[Column | ItemColumns] = list(self._columns.values())
        if self._items is not None:
            holders.append(self._items)
        bitsets = {id(b): b.nbytes for h in holders for b in h.bitsets()}
        bitsets |= {id(b): b.nbytes for b in [*self._literals.values(), self._all_rows]}
        derived = self._derived.nbytes() + sum(
            column.derived.nbytes()
            for column in self._columns.values()
            if isinstance(column, NumericColumn)
        )
        return sum(h.array_bytes() for h in holders) + sum(bitsets.values()) + derived
