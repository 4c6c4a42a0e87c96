"""Pure kernels of the tree family (ALGORITHMS.md §3): split spaces, routing, targets, scores,
``tree.expmech`` and ``tree.leaf_counts``. The Metropolis–Hastings samplers are in
:mod:`dpmine_server.operations.tree_mcmc`.

Representation. A split is a key (family, value): family = position of the attribute in the
view's :class:`SplitSpace`, value = lattice index (numeric), category code (categorical) or 0
(Boolean). Row sets are packed bitsets (``uint64`` words, :mod:`dpmine_server.data.bitsets`);
a tree's node row sets form a ``(2m + 1, W)`` array in heap order (m inner nodes, then the
2^depth leaves, left to right). A node's children are its rows ∧ the split's left mask and ∧ its
right mask; rows whose value is missing are in neither mask, so they reach no leaf (§3.1).

Missing values as a child (ALGORITHMS.md §6 item 18). The Gini scores count the rows a split
cannot route as one more child: a split's quality (§3.3) is −Σ |c|·Gini(c) over its left, right
and *missing* children, and a tree's score (§3.4) sums |c|·Gini(c) over its **cells**: the
leaves and, at every inner node, the node's rows with a missing value for its split (the rows
that stop there, in no leaf below). The cells of a tree partition its labelled rows, so a
missing value costs what it costs instead of removing the row from the penalty. The printed
queries are unchanged: a leaf's path is false on a row with a missing value on it (§1.1), and
that row is in no leaf (:func:`tree_leaves`), so printed = measured.

Everything here is private (row sets, counts, scores); only the chosen splits leave, as public
syntax (:class:`dpmine.wire.TreeSplit` with lattice thresholds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from dpmine.wire import (
    DEFAULT_TARGET_BINS,
    AnyTreeTarget,
    CategoricalAttribute,
    DatasetMetadata,
    DecisionTree,
    NumericAttribute,
    QueryTarget,
    TreeSplit,
    TreeTarget,
    View,
)
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import (
    BooleanColumn,
    CategoricalColumn,
    ColumnStore,
    NumericColumn,
)
from dpmine_server.dp.lattice import PublicLattice
from dpmine_server.dp.mechanisms import CountRelease, exponential_mechanism, noisy_counts

__all__ = [
    "GINI_SENSITIVITY",
    "Labels",
    "SplitFamily",
    "SplitKey",
    "SplitMasks",
    "SplitSpace",
    "ancestors",
    "exact_leaf_counts",
    "exact_partition_counts",
    "grow_tree_expmech",
    "lattice_ranks",
    "leaf_class_counts",
    "leaf_counts",
    "leaf_fields",
    "make_target",
    "node_rows",
    "partition_leaf_counts",
    "query_labels",
    "reroute_subtree",
    "split_codes",
    "subtree_levels",
    "tree_cell_counts",
    "tree_gini",
    "weighted_gini",
]

WordArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
CodeArray = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]

#: Sensitivity of q = −Σ_children |c|·Gini(c) and of g₁ = −Σ_cells |c|·Gini(c) (§3.3, §3.4;
#: Friedman–Schuster). The children (left, right, missing) of a split, and the cells (leaves,
#: inner nodes' missing rows) of a tree, partition the labelled rows: one added row enters one of
#: them, whose |c|·Gini(c) = |c| − Σ_k c_k²/|c| grows by 1 + S/(n(n+1)) − (2c_j + 1)/(n + 1)
#: ∈ [0, 2) (n rows, S = Σ_k c_k², c_j of the row's class; ≥ 0 as |c|·Gini is concave and
#: 1-homogeneous, < 2 at c_j = 0, S ≤ n²). So |Δq| < 2: Δ = 2, as without the missing child.
GINI_SENSITIVITY = 2.0

#: (family index, value index) of one split.
SplitKey = tuple[int, int]


# --------------------------------------------------------------------------------------------
# The public candidate space of one view (§3.1)


@dataclass(frozen=True, slots=True)
class SplitFamily:
    """All splits of one attribute: ``size`` values (lattice points, categories, or 1)."""

    name: str
    kind: Literal["boolean", "categorical", "numeric"]
    size: int
    lattice: PublicLattice | None = None
    categories: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SplitSpace:
    """Candidate splits of one view with the public base measure of §3.1 [REC]: the attribute
    uniformly among the view's attributes (without an excluded target attribute), then a lattice
    point (numeric) or a category (categorical) uniformly; a Boolean attribute has one split."""

    view: View
    families: tuple[SplitFamily, ...]

    @classmethod
    def of(
        cls,
        metadata: DatasetMetadata,
        view: View,
        exclude: str | None = None,
        columns: Collection[str] | None = None,
    ) -> SplitSpace:
        """The space of ``view``'s attributes (public metadata only), without ``exclude`` and,
        when ``columns`` is given, only those it names (a public restriction of the candidates:
        the scores' sensitivity does not change)."""
        families: list[SplitFamily] = []
        for attribute in metadata.attributes:
            if attribute.view != view or attribute.name == exclude:
                continue
            if columns is not None and attribute.name not in columns:
                continue
            if isinstance(attribute, NumericAttribute):
                lattice = PublicLattice.of(attribute)
                families.append(SplitFamily(attribute.name, "numeric", lattice.size, lattice))
            elif isinstance(attribute, CategoricalAttribute):
                categories = tuple(attribute.categories)
                families.append(
                    SplitFamily(attribute.name, "categorical", len(categories), None, categories)
                )
            else:
                families.append(SplitFamily(attribute.name, "boolean", 1))
        return cls(view=view, families=tuple(families))

    @property
    def n_splits(self) -> int:
        """Number of distinct splits (public)."""
        return sum(family.size for family in self.families)

    def log_mass(self, key: SplitKey) -> float:
        """log μ(split) under the normalised base measure."""
        return -math.log(len(self.families)) - math.log(self.families[key[0]].size)

    def draw(self, rng: np.random.Generator, excluded: Iterable[SplitKey] = ()) -> SplitKey:
        """One split from the base measure conditioned on not being ``excluded`` (rejection:
        exact; validation guarantees that some split remains)."""
        banned = set(excluded)
        while True:
            family = int(rng.integers(len(self.families)))
            key = (family, int(rng.integers(self.families[family].size)))
            if key not in banned:
                return key

    def key_of(self, split: TreeSplit) -> SplitKey:
        """The key of a validated wire split of this view."""
        family = next(i for i, f in enumerate(self.families) if f.name == split.attribute)
        spec = self.families[family]
        if spec.kind == "numeric":
            assert spec.lattice is not None
            assert split.threshold is not None
            return family, int(np.searchsorted(spec.lattice.points, split.threshold))
        if spec.kind == "categorical":
            assert split.category is not None
            return family, spec.categories.index(split.category)
        return family, 0

    def split_of(self, key: SplitKey) -> TreeSplit:
        """The public wire form of a split: a lattice look-up or a category name."""
        family = self.families[key[0]]
        if family.kind == "numeric":
            assert family.lattice is not None
            return TreeSplit(attribute=family.name, threshold=family.lattice.point(key[1]))
        if family.kind == "categorical":
            return TreeSplit(attribute=family.name, category=family.categories[key[1]])
        return TreeSplit(attribute=family.name)

    def tree(self, depth: int, keys: Sequence[SplitKey]) -> DecisionTree:
        """The released tree of ``keys`` (heap order)."""
        return DecisionTree(
            view=self.view, depth=depth, splits=[self.split_of(key) for key in keys]
        )


# --------------------------------------------------------------------------------------------
# Row masks and routing


def _pack(mask: BoolArray) -> WordArray:
    return Bitset.from_bool_array(mask).words


class SplitMasks:
    """Packed left/right row masks of the splits of a :class:`SplitSpace` on one store.

    A threshold at lattice index k of a numeric column sends left exactly the rows whose value
    is ≤ point k (``value ≤ points[k]``); rows with a missing value go to neither side. All
    masks are computed on demand (a tree needs a handful) and cached."""

    def __init__(self, columns: ColumnStore, space: SplitSpace) -> None:
        self._space = space
        self._columns = [columns.column(family.name) for family in space.families]
        self._cache: dict[SplitKey, tuple[WordArray, WordArray]] = {}

    @property
    def space(self) -> SplitSpace:
        return self._space

    def masks(self, key: SplitKey) -> tuple[WordArray, WordArray]:
        """(rows going left, rows going right) of a split; missing rows are in neither."""
        cached = self._cache.get(key)
        if cached is None:
            cached = self._compute(key)
            self._cache[key] = cached
        return cached

    def _compute(self, key: SplitKey) -> tuple[WordArray, WordArray]:
        family, value = key
        column = self._columns[family]
        if isinstance(column, NumericColumn):
            lattice = self._space.families[family].lattice
            assert lattice is not None
            present = ~np.isnan(column.values)
            left = present & (column.values <= lattice.point(value))
            return _pack(left), _pack(present & ~left)
        if isinstance(column, CategoricalColumn):
            left_set = column.category_bitset(column.categories[value])
        else:
            assert isinstance(column, BooleanColumn)
            left_set = column.true
        return left_set.words, (column.present - left_set).words

    def stacked(self, keys: Sequence[SplitKey]) -> tuple[WordArray, WordArray]:
        """Left and right masks of ``keys`` as two ``(len(keys), W)`` arrays."""
        pairs = [self.masks(key) for key in keys]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def split_codes(columns: ColumnStore, space: SplitSpace) -> tuple[CodeArray, BoolArray]:
    """Per-row split codes of a view for the compiled samplers (:mod:`.tree_native`): a
    ``(families, rows)`` int32 array and, per family, whether a split is a threshold. Numeric:
    the number of lattice points below the value (split k sends left the codes ≤ k);
    categorical: the category code; Boolean: 0 = true, 1 = false (split 0 sends left the code
    0); −1 = missing (no child)."""
    codes = np.empty((len(space.families), columns.n_rows), dtype=np.int32)
    ordered = np.zeros(len(space.families), dtype=np.bool_)
    for index, family in enumerate(space.families):
        column = columns.column(family.name)
        if isinstance(column, NumericColumn):
            # The present values in their stored order, so the binary searches walk the
            # lattice forwards (about 4× faster than searching the rows as they come).
            assert family.lattice is not None
            present = column.sorted_order
            codes[index] = -1
            codes[index, present] = np.searchsorted(
                family.lattice.points, column.values[present], side="left"
            )
            ordered[index] = True
        elif isinstance(column, CategoricalColumn):
            codes[index] = column.codes
        else:
            assert isinstance(column, BooleanColumn)
            false = np.where(column.true.to_bool_array(), 0, 1)
            codes[index] = np.where(column.present.to_bool_array(), false, -1)
    return codes, ordered


def ancestors(node: int) -> list[int]:
    """Heap indices of the ancestors of ``node``, nearest first."""
    found: list[int] = []
    while node > 0:
        node = (node - 1) // 2
        found.append(node)
    return found


def subtree_levels(node: int, depth: int) -> list[tuple[int, int]]:
    """The heap ranges [start, stop) of ``node``'s subtree, one per level from ``node``'s own
    level down to the leaves (each level of a subtree is contiguous in heap order)."""
    level = (node + 1).bit_length() - 1
    return [((node + 1) * 2**r - 1, (node + 1) * 2**r - 1 + 2**r) for r in range(depth + 1 - level)]


def reroute_subtree(
    nodes: WordArray, left: WordArray, right: WordArray, node: int, depth: int
) -> None:
    """Recompute (in place) the row sets of every node below ``node`` from ``node``'s rows:
    children = parent ∧ left mask and parent ∧ right mask, level by level."""
    for start, stop in subtree_levels(node, depth)[:-1]:
        parents = nodes[start:stop]
        np.bitwise_and(parents, left[start:stop], out=nodes[2 * start + 1 : 2 * stop + 1 : 2])
        np.bitwise_and(parents, right[start:stop], out=nodes[2 * start + 2 : 2 * stop + 2 : 2])


def node_rows(root: WordArray, left: WordArray, right: WordArray, depth: int) -> WordArray:
    """Row sets of every node (heap order, leaves last) given the splits' row masks."""
    nodes = np.zeros((2 ** (depth + 1) - 1, root.shape[0]), dtype=np.uint64)
    nodes[0] = root
    reroute_subtree(nodes, left, right, 0, depth)
    return nodes


def tree_leaves(columns: ColumnStore, tree: DecisionTree) -> WordArray:
    """The leaf row sets ``(2^depth, W)`` of a released tree (§3.1 routing)."""
    space = SplitSpace.of(columns.metadata, tree.view)
    masks = SplitMasks(columns, space)
    left, right = masks.stacked([space.key_of(split) for split in tree.splits])
    nodes = node_rows(columns.all_rows().words, left, right, tree.depth)
    return nodes[len(tree.splits) :]


# --------------------------------------------------------------------------------------------
# Targets (§3.2) and scores


@dataclass(frozen=True, slots=True)
class Labels:
    """The class of every row (−1: no class) among ``n_classes`` public classes."""

    classes: IntArray
    n_classes: int
    _in_order: dict[str, IntArray] = field(default_factory=dict, compare=False, repr=False)

    def in_order(self, column: NumericColumn) -> IntArray:
        """The classes of the column's present rows in its sorted order (``sorted_order``),
        computed once per column for all the nodes of a tree."""
        found = self._in_order.get(column.name)
        if found is None:
            found = self.classes[column.sorted_order]
            self._in_order[column.name] = found
        return found

    def class_words(self) -> WordArray:
        """The rows of every class as a ``(n_classes, W)`` packed array."""
        return np.stack([_pack(self.classes == k) for k in range(self.n_classes)])


def _leaf_labels(leaves: WordArray, n_rows: int) -> Labels:
    classes = np.full(n_rows, -1, dtype=np.int64)
    for index, words in enumerate(leaves):
        classes[Bitset(words.copy(), n_rows).to_bool_array()] = index
    return Labels(classes=classes, n_classes=int(leaves.shape[0]))


def query_labels(columns: ColumnStore, target: QueryTarget) -> Labels:
    """The binary target of the layered miner (§3.2 "target from a tree", applied to a public
    query): class 1 for the rows of ``columns.evaluate(query)`` — the very support that
    ``count.noisy`` and the redescription statistics use, so a row with a missing value is in
    class 1 exactly when the printed query selects it — and class 0 for every other row.

    Proof that the expmech and MCMC score sensitivities (§3.3: Δ = 2 for
    q = −Σ_c |c|·Gini(c); §3.4, §6 #17) hold unchanged: those bounds are proved for *any*
    labelling in which each row's class is a function of that row alone and of public inputs,
    for any number of classes (here 2). A row's class here depends on its own values and on the
    public query only, so adding or removing one row adds or removes one labelled row and
    relabels no other one — the premise of the bound, as for a released tree's leaves (§3.2
    privacy note). Work: one bitset operation of ⌈n/64⌉ words per query node, at most
    MAX_QUERY_LITERALS × MAX_QUERY_DEPTH nodes (priced in services/timing.py)."""
    selected = columns.evaluate(target.query).to_bool_array()
    return Labels(classes=selected.astype(np.int64), n_classes=2)


def make_target(columns: ColumnStore, target: AnyTreeTarget) -> Labels:
    """makeTarget (§3.2 [REC]): the value of a Boolean or categorical attribute, the equal-width
    bin of a numeric one over its public range (``bins`` public, default 10), the leaf a row
    reaches in a released tree, or whether a public query selects the row
    (:func:`query_labels`). Missing values give no class. Never data-dependent bins."""
    if isinstance(target, QueryTarget):
        return query_labels(columns, target)
    if isinstance(target, TreeTarget):
        return _leaf_labels(tree_leaves(columns, target.tree), columns.n_rows)
    column = columns.column(target.attribute)
    if isinstance(column, BooleanColumn):
        classes = np.where(column.true.to_bool_array(), 1, 0)
        classes = np.where(column.present.to_bool_array(), classes, -1)
        return Labels(classes=classes.astype(np.int64), n_classes=2)
    if isinstance(column, CategoricalColumn):
        return Labels(classes=column.codes.astype(np.int64), n_classes=len(column.categories))
    bins = target.bins or DEFAULT_TARGET_BINS
    present = ~np.isnan(column.values)
    scaled = np.floor(
        (np.where(present, column.values, column.lo) - column.lo) * bins / (column.hi - column.lo)
    )
    classes = np.where(present, np.clip(scaled, 0, bins - 1), -1).astype(np.int64)
    return Labels(classes=classes, n_classes=bins)


def leaf_class_counts(leaves: WordArray, classes: WordArray) -> IntArray:
    """``counts[i, k]`` = |leaf i ∩ class k| by popcount (one pass per class)."""
    counts = np.empty((leaves.shape[0], classes.shape[0]), dtype=np.int64)
    for k in range(classes.shape[0]):
        counts[:, k] = np.bitwise_count(leaves & classes[k]).sum(axis=1, dtype=np.int64)
    return counts


def weighted_gini(counts: npt.NDArray[np.integer] | FloatArray) -> FloatArray:
    """|c|·Gini(c) = |c| − Σ_k c_k²/|c| per row of a (…, classes) count table; 0 when empty."""
    values = np.asarray(counts, dtype=np.float64)
    sizes = values.sum(axis=-1)
    squares = (values * values).sum(axis=-1)
    return np.asarray(sizes - squares / np.maximum(sizes, 1.0), dtype=np.float64)


def tree_cell_counts(nodes: npt.NDArray[np.integer], inner: int) -> IntArray:
    """The class counts of a tree's cells from its node × class table (heap order, ``inner``
    inner nodes then the leaves): row u < ``inner`` becomes u's missing child, the rows of u
    that reach neither child (u − left child − right child); leaves stay as they are."""
    table = np.asarray(nodes, dtype=np.int64)
    cells = table.copy()
    cells[:inner] -= table[1 : 2 * inner + 1 : 2] + table[2 : 2 * inner + 2 : 2]
    return cells


def tree_gini(nodes: npt.NDArray[np.integer], inner: int) -> float:
    """Σ over a tree's cells of |c|·Gini(c) (module docstring): −g₁ of §3.4 with the missing
    rows as cells. ``nodes`` is the node × class table in heap order."""
    return float(weighted_gini(tree_cell_counts(nodes, inner)).sum())


# --------------------------------------------------------------------------------------------
# tree.expmech (§3.3)


@dataclass(frozen=True, slots=True)
class _Candidates:
    """The candidate splits of one attribute at one node: their qualities, log base masses and,
    for a numeric attribute, the cells' lattice index edges."""

    quality: FloatArray
    log_mass: FloatArray
    edges: IntArray | None = None


def _split_quality(
    left_size: FloatArray,
    left_squares: FloatArray,
    right_size: FloatArray,
    right_squares: FloatArray,
) -> FloatArray:
    """q = −(|L|·Gini(L) + |R|·Gini(R)) per candidate (§3.3) from each child's size and sum of
    squared class counts (|c|·Gini(c) = |c| − Σ_k c_k²/|c|); empty children give 0."""
    left = left_size - left_squares / np.maximum(left_size, 1.0)
    right = right_size - right_squares / np.maximum(right_size, 1.0)
    return np.asarray(-(left + right), dtype=np.float64)


def _table_quality(left: FloatArray, present: FloatArray) -> FloatArray:
    """q of candidates given as left class tables ``(candidates, classes)`` and the class
    counts of all rows with a value (right = present − left)."""
    right = present[None, :] - left
    return _split_quality(
        left.sum(axis=1), (left * left).sum(axis=1), right.sum(axis=1), (right * right).sum(axis=1)
    )


def lattice_ranks(column: NumericColumn, lattice: PublicLattice) -> IntArray:
    """Per present value in sorted order (``column.sorted_values``), its rank on the lattice:
    #{lattice points < value}. A threshold at lattice index k sends left exactly the values of
    rank ≤ k, so rows of equal rank are never split. Cached on the column."""
    return column.derived.get_or_build(
        ("tree.lattice_ranks", lattice),
        lambda: np.searchsorted(lattice.points, column.sorted_values, side="left").astype(np.int64),
        nbytes=lambda ranks: int(ranks.nbytes),
    )


def _numeric_candidates(
    column: NumericColumn, family: SplitFamily, rows: BoolArray, labels: Labels
) -> tuple[FloatArray, FloatArray, IntArray]:
    """Per upper cell b = 0 … R of the R distinct lattice ranks d_1 < … < d_R of the node's
    labelled rows (:func:`lattice_ranks`; R ≤ min(rows, L)): the quality of the thresholds k in
    [d_b, d_{b+1}) (d_0 = 0, d_{R+1} = L), which all send left the rows of rank ≤ d_b, the
    number of those lattice points and the cells' index edges. The quality is constant on a
    cell, so the EM over cells weighted by their lattice points is the EM over lattice points
    (§0.3, §1.4). Only cell 0 can hold no lattice point (a value at lo); the cells between
    two data values with no lattice point between them are never formed.

    Work O(present rows + R), whatever the number of classes: sweeping the rows by increasing
    rank, a row of class k raises |L| by 1, Σ_k L_k² by 2·L_k + 1 (L_k the rows of its class
    before it) and Σ_k P_k·L_k by P_k (P the classes of all the node's rows), and the right
    child has |R| = |P| − |L|, Σ_k R_k² = Σ_k P_k² − 2·Σ_k P_k·L_k + Σ_k L_k²; all exact
    integers, read at the last row of each rank."""
    assert family.lattice is not None
    keep = rows[column.sorted_order]
    ranks = lattice_ranks(column, family.lattice)[keep]  # the node's labelled rows, by rank
    classes = labels.in_order(column)[keep]
    count = ranks.size
    ends = np.flatnonzero(np.append(ranks[1:] != ranks[:-1], count > 0))  # last row of a rank
    present = np.bincount(classes, minlength=labels.n_classes)
    before = _earlier_of_class(classes, present)
    zero = np.zeros(1, dtype=np.int64)
    size = np.concatenate([zero, ends + 1])
    squares = np.concatenate([zero, np.cumsum(2 * before + 1)[ends]])
    cross = np.concatenate([zero, np.cumsum(present[classes])[ends]])
    right_squares = int(np.dot(present, present)) - 2 * cross + squares
    quality = _split_quality(
        size.astype(np.float64),
        squares.astype(np.float64),
        (count - size).astype(np.float64),
        right_squares.astype(np.float64),
    )
    size_l = np.asarray([family.lattice.size], dtype=np.int64)
    edges = np.concatenate([zero, ranks[ends], size_l])
    return quality, np.diff(edges).astype(np.float64), edges


def _earlier_of_class(classes: IntArray, counts: IntArray) -> IntArray:
    """For each position, how many earlier positions hold the same class (``counts`` = the
    classes' sizes): a stable sort by class (numpy's radix sort on 16 bits, O(n)), in which the
    j-th row of a class has j − 1 before it, scattered back."""
    narrow = classes.astype(np.int16 if counts.size <= np.iinfo(np.int16).max else np.int32)
    order = np.argsort(narrow, kind="stable")
    starts = np.cumsum(counts) - counts
    earlier = np.empty(classes.size, dtype=np.int64)
    earlier[order] = np.arange(classes.size) - np.repeat(starts, counts)
    return earlier


def _excluded_by_cell(edges: IntArray, excluded: Sequence[int], cells: int) -> FloatArray:
    """How many excluded lattice indices lie in each upper cell."""
    found = np.searchsorted(edges, np.asarray(excluded, dtype=np.int64), side="right") - 1
    return np.bincount(found, minlength=cells)[:cells].astype(np.float64)


def _nth_free_index(start: int, pick: int, excluded: Sequence[int]) -> int:
    """The ``pick``-th lattice index ≥ ``start`` (from 0) that is not excluded."""
    index = start + pick
    for banned in sorted(excluded):
        if start <= banned <= index:
            index += 1
    return index


def _attribute_candidates(
    column: BooleanColumn | CategoricalColumn | NumericColumn,
    family: SplitFamily,
    rows: BoolArray,
    labels: Labels,
    banned: Sequence[int],
) -> _Candidates:
    """Candidates of one attribute at a node with labelled rows ``rows``; ``banned`` are the
    values used by ancestors (mass 0; for numeric cells one lattice point less each). Every
    candidate's quality includes the attribute's missing child (:func:`_missing_penalty`)."""
    classes, n_classes = labels.classes, labels.n_classes
    missing = _missing_penalty(column, rows, labels)
    if isinstance(column, NumericColumn):
        quality, points, edges = _numeric_candidates(column, family, rows, labels)
        free = points - _excluded_by_cell(edges, banned, points.size)
        with np.errstate(divide="ignore"):
            log_mass = np.log(free) - math.log(family.size)
        return _Candidates(quality - missing, log_mass, edges)
    if isinstance(column, CategoricalColumn):
        codes = column.codes.astype(np.int64)
        keep = rows & (codes >= 0)
        table = np.bincount(
            codes[keep] * n_classes + classes[keep], minlength=family.size * n_classes
        ).reshape(family.size, n_classes)
        present = table.sum(axis=0)
    else:
        keep = column.present.to_bool_array() & rows
        true = column.true.to_bool_array() & rows
        table = np.bincount(classes[true], minlength=n_classes)[None, :]
        present = np.bincount(classes[keep], minlength=n_classes)
    log_mass = np.full(family.size, -math.log(family.size))
    log_mass[list(banned)] = -np.inf
    quality = _table_quality(table.astype(np.float64), present.astype(np.float64)) - missing
    return _Candidates(quality, log_mass)


def _missing_penalty(
    column: BooleanColumn | CategoricalColumn | NumericColumn, rows: BoolArray, labels: Labels
) -> float:
    """|M|·Gini(M) of the missing child M: the labelled rows of the node whose value of the
    attribute is missing (§3.1: they go to neither child). The same for every split of the
    attribute; one pass over the rows. With it the quality is −Σ over the three children, which
    partition the node's labelled rows (sensitivity: :data:`GINI_SENSITIVITY`)."""
    if isinstance(column, NumericColumn):
        absent = np.isnan(column.values)
    elif isinstance(column, CategoricalColumn):
        absent = column.codes < 0
    else:
        absent = ~column.present.to_bool_array()
    counts = np.bincount(labels.classes[rows & absent], minlength=labels.n_classes)
    return float(weighted_gini(counts))


def _node_split(
    columns: ColumnStore,
    space: SplitSpace,
    rows: BoolArray,
    labels: Labels,
    *,
    excluded: set[SplitKey],
    epsilon: float,
    rng: np.random.Generator,
) -> SplitKey:
    """One exponential mechanism over the splits of a node (§3.3): weight μ(split)·exp(c·q),
    q = −Σ |c|·Gini(c) over the left, right and missing children (Δ = 2, see
    :data:`GINI_SENSITIVITY`), c = ε/(2·2), μ = the base measure without the ancestors'
    splits. A numeric candidate is a cell of lattice points with one quality; the released
    threshold is a uniform non-excluded lattice point of the chosen cell (an integer draw and a
    table look-up)."""
    labelled = rows & (labels.classes >= 0)
    families: list[_Candidates] = []
    for index, family in enumerate(space.families):
        banned = [value for f, value in excluded if f == index]
        column = columns.column(family.name)
        families.append(_attribute_candidates(column, family, labelled, labels, banned))
    pick = exponential_mechanism(
        np.concatenate([candidates.quality for candidates in families]),
        epsilon=epsilon,
        sensitivity=GINI_SENSITIVITY,
        rng=rng,
        log_base_measure=np.concatenate([c.log_mass for c in families]) - math.log(len(families)),
    )
    chosen = 0
    while pick >= families[chosen].log_mass.size:
        pick -= families[chosen].log_mass.size
        chosen += 1
    edges = families[chosen].edges
    if edges is None:
        return chosen, pick
    start, stop = int(edges[pick]), int(edges[pick + 1])
    banned = [value for f, value in excluded if f == chosen and start <= value < stop]
    return chosen, _nth_free_index(start, int(rng.integers(stop - start - len(banned))), banned)


def grow_tree_expmech(
    columns: ColumnStore,
    space: SplitSpace,
    labels: Labels,
    *,
    depth: int,
    epsilon: float,
    rng: np.random.Generator,
    progress: Callable[[float], None] | None = None,
) -> list[SplitKey]:
    """The splits (heap order) of a tree grown top-down with ε/depth per level (§3.3): nodes of
    one level hold disjoint rows (parallel composition). Every node gets a split, empty or pure
    ones included (no data-dependent shape). ε-DP. ``progress`` hears the fraction of nodes
    done (a public count)."""
    masks = SplitMasks(columns, space)
    inner = 2**depth - 1
    nodes = np.zeros((2 * inner + 1, columns.all_rows().words.shape[0]), dtype=np.uint64)
    nodes[0] = columns.all_rows().words
    keys: list[SplitKey] = []
    for node in range(inner):
        rows = Bitset(nodes[node].copy(), columns.n_rows).to_bool_array()
        excluded = {keys[parent] for parent in ancestors(node)}
        key = _node_split(
            columns, space, rows, labels, excluded=excluded, epsilon=epsilon / depth, rng=rng
        )
        keys.append(key)
        left, right = masks.masks(key)
        nodes[2 * node + 1] = nodes[node] & left
        nodes[2 * node + 2] = nodes[node] & right
        if progress is not None:
            progress((node + 1) / inner)
    return keys


# --------------------------------------------------------------------------------------------
# tree.leaf_counts (§3.6)


def exact_partition_counts(
    columns: ColumnStore, left_tree: DecisionTree, right_tree: DecisionTree
) -> IntArray:
    """Exact (a + 1) × (b + 1) partition of the rows by (left leaf, right leaf) (private).

    Row a holds the rows in no leaf of T_L (a value missing on their path, §3.1), column b the
    rows in no leaf of T_R; every row is in exactly one cell.
    """
    everyone = columns.all_rows().words
    left_leaves = tree_leaves(columns, left_tree)
    right_leaves = tree_leaves(columns, right_tree)
    left_cells = np.vstack([left_leaves, everyone & ~np.bitwise_or.reduce(left_leaves, axis=0)])
    right_cells = np.vstack([right_leaves, everyone & ~np.bitwise_or.reduce(right_leaves, axis=0)])
    return leaf_class_counts(left_cells, right_cells)


def leaf_fields(partition: IntArray) -> tuple[IntArray, IntArray]:
    """The paper's (intersections a × b, left leaf sizes a) of an (a + 1) × (b + 1) partition:
    its leaf block and the sums of its leaf rows (§3.6)."""
    leaf_rows = partition[:-1]
    return leaf_rows[:, :-1], leaf_rows.sum(axis=1)


def exact_leaf_counts(
    columns: ColumnStore, left_tree: DecisionTree, right_tree: DecisionTree
) -> tuple[IntArray, IntArray]:
    """Exact |leaf_i(T_L) ∩ leaf_j(T_R)| (a × b) and |leaf_i(T_L)| (private)."""
    return leaf_fields(exact_partition_counts(columns, left_tree, right_tree))


def partition_leaf_counts(
    columns: ColumnStore, left_tree: DecisionTree, right_tree: DecisionTree, *, epsilon: float
) -> tuple[IntArray, CountRelease]:
    """The ``partition`` release of ``tree.leaf_counts`` [REC, §3.6]: every cell of
    :func:`exact_partition_counts` + noise of the dataset's unit (the matrix, and the law).

    The cells are disjoint and cover every row, so adding or removing one row moves exactly one
    cell by 1: L1 = 1 and Δ₂² = 1. Discrete Laplace of scale 1/ε is ε-DP for the whole matrix;
    on a zCDP dataset the discrete Gaussian of σ = 1/ε is ε²/2-zCDP
    (:func:`~dpmine_server.dp.mechanisms.noisy_counts`). The paper's two releases (Ĩ and ĉ_L)
    are functions of it, with a quarter of the noise variance for the same ε.
    """
    partition = exact_partition_counts(columns, left_tree, right_tree)
    release = noisy_counts(partition.ravel(), epsilon=epsilon, l1=1, l2_squared=1)
    return release.values.reshape(partition.shape), release


def leaf_counts(
    columns: ColumnStore, left_tree: DecisionTree, right_tree: DecisionTree, *, epsilon: float
) -> tuple[IntArray, IntArray, CountRelease]:
    """Noisy leaf statistics (§3.6): the intersection matrix and the left leaf sizes (and the
    law of their noise), released as one vector.

    Each part counts disjoint row sets, so one row moves at most one intersection and one
    leaf size by 1: L1 = 2 and Δ₂² = 2. Discrete Laplace of scale 2/ε (the paper's ε/2 per
    part) is ε-DP; on a zCDP dataset the discrete Gaussian of σ = √2/ε is ε²/2-zCDP."""
    intersections, sizes = exact_leaf_counts(columns, left_tree, right_tree)
    values = np.concatenate([intersections.ravel(), sizes])
    release = noisy_counts(values, epsilon=epsilon, l1=2, l2_squared=2)
    noisy = release.values
    return (
        noisy[: intersections.size].reshape(intersections.shape),
        noisy[intersections.size :],
        release,
    )
