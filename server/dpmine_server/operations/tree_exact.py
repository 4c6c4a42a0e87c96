"""Exact sampler of the ``tree.mcmc`` target (ALGORITHMS.md §3.4; §3.1 trees, §0.3 EM).

The chain of :mod:`~dpmine_server.operations.tree_mcmc` targets, over the complete binary trees
of the public depth D that use no split twice on a root-to-leaf path (§3.1),

    π(T) ∝ Π_v μ(s_v) · exp(c · g₁(T)),   g₁(T) = −Σ_cells |cell|·Gini(cell),   c = ε/(2·2),

whose cells are the leaves and, at every inner node v, the rows of v with a missing value of
v's split (:mod:`~dpmine_server.operations.tree_kernels`, §6 item 18). A node's rows depend
only on the set P of (split, side) pairs on its path, and each cell on one node, so π
factorises and can be summed exactly (sum-product over the tree lattice):

    Z(P, 0) = exp(−c · WG(rows(P)))
    Z(P, d) = Σ_{s ∉ splits(P)} μ(s) · exp(−c · WG(rows(P) ∧ miss(s)))
                                     · Z(P + (s, L), d − 1) · Z(P + (s, R), d − 1)

(WG(c) = |c|·Gini(c) of the labelled rows; miss(s) = the rows with no value for s) and
Z(∅, D) is the normaliser. A tree is drawn top down: at a node with path P and d levels below,
split s is chosen with probability (the summand of s)/Z(P, d), which is π's conditional given
the choices above, so the product of the choices is π(T): no chain, no convergence. Z is
cached by (P, d): paths reaching the same set share the work.

Privacy (pure ε-DP): the set of valid trees and μ are public; g₁ has sensitivity 2 (the cells
partition the labelled rows, :data:`~dpmine_server.operations.tree_kernels.GINI_SENSITIVITY`),
so sampling π is the exponential mechanism over a public finite set, ε-DP (§0.3). The cell
scores are :func:`~dpmine_server.operations.tree_kernels.weighted_gini` of
:func:`~dpmine_server.operations.tree_kernels.leaf_class_counts`, the functions of the chain's
table, so both samplers target the same law by construction.

Floating point: everything is in log space (sums by :func:`log_sum_exp`), and each choice is a
Gumbel-max over its log-weights (:func:`~dpmine_server.dp.mechanisms.gumbel_scores`), an exact
draw from the softmax of the computed log-weights. Those carry an absolute rounding error
δ ≤ k·u·L (u = 2⁻⁵³, k ≤ the public number of terms summed, L ≤ c·N_max + D·ln S a public bound
on |log-weight|), so each conditional probability is within a factor e^{2δ} of the exact one
and the drawn tree's within e^{2Dδ}: the released law is (ε + 4Dδ)-DP, δ a public quantity
(e.g. 3·10⁻⁷ for N_max = 10⁶, S = 10³, k = 10⁴), far below every printed digit of ε.

Numeric attributes (one candidate split per lattice point, 2^bits + 1 of them): thresholds k < k'
of one attribute route every row of the table alike when no row's code (the number of lattice
points below its value, :func:`~.tree_kernels.split_codes`) lies in (k, k'], so the lattice
splits into **groups** of consecutive thresholds, at most min(lattice points, n + 1) per
attribute. The summand of a threshold depends on it only through its rows and the splits its
subtree may not reuse, and a subtree excludes a reused threshold from its group only (its
partition is its group's), so Z(P, d) depends on P only through the multiset of (group, side)
pairs: a group g at a node weighs m_g·μ(s)·(its summand), m_g = |g| − (its thresholds on the
path), and a drawn group is resolved to one of its m_g unused thresholds uniformly. Each
threshold k of g is then drawn with probability μ(s)·(summand)/Z(P, d), the ungrouped
conditional: the same law as over the ungrouped lattice (Boolean and categorical splits are
groups of one). The groups are data-dependent but only their count reaches the work, and it
is bounded by the public :func:`exact_split_groups` (n ≤ n_max).

Depth 1 (one split, :func:`sample_stump_exact`) needs no masks: every split's children are the
rows of one code or of the codes ≤ k, so one histogram of (code, class) per attribute and its
prefix sums give every group's class counts (left; right = present − left; missing = all −
present): O(n_max + L·K) per attribute (:func:`exact_stump_work`), the same weights as the
recursion's last level.

Work: a public function of public quantities, :func:`exact_tree_states` inner states (multisets
of k < D (group, side) pairs out of 2G: at most C(2G + k − 1, k)), each scoring its G groups by
three masked ANDs of W = ⌈N_max/64⌉ words and a popcount per class (:func:`exact_tree_work`),
G the public bound on the groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpmine_server.data.columns import ColumnStore
from dpmine_server.dp.mechanisms import em_coefficient, gumbel_scores
from dpmine_server.operations.tree_kernels import (
    GINI_SENSITIVITY,
    Labels,
    SplitKey,
    SplitMasks,
    SplitSpace,
    leaf_class_counts,
    split_codes,
    weighted_gini,
)
from dpmine_server.operations.tree_native import last_level_weights

__all__ = [
    "MAX_EXACT_TREE_MASK_WORDS",
    "MAX_EXACT_TREE_WORK",
    "ExactTreeTarget",
    "SplitGroup",
    "exact_split_groups",
    "exact_stump_fits",
    "exact_stump_seconds",
    "exact_stump_work",
    "exact_target",
    "exact_tree_fits",
    "exact_tree_mask_words",
    "exact_tree_seconds",
    "exact_tree_states",
    "exact_tree_work",
    "sample_stump_exact",
    "sample_tree_exact",
    "split_groups",
    "stump_weights",
]

WordArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: The (group index, side) pairs on a path, sorted (a multiset: two thresholds of one numeric
#: group may follow each other on a path): side 0 = left, 1 = right.
Path = tuple[tuple[int, int], ...]

#: Nodes per compiled call of the last level (the call holds no temporaries).
BATCH_NODES = 4096


#: Public cap on :func:`exact_tree_work` under which ``tree.mcmc``'s "auto" runs the exact
#: sampler: about 2 s on one core (1.6·10⁻¹⁰ s a word measured on mammals' left view at depth
#: 3, 124 Boolean splits, 8 classes, n_max = 5,000: 8.0·10⁹ words in 1.3 s).
MAX_EXACT_TREE_WORK = 12_000_000_000
#: Public cap on the words of the split masks the sampler holds (left, right and missing rows
#: of every candidate split: 3·S·⌈N_max/64⌉, :func:`exact_tree_mask_words`): 128 MiB.
MAX_EXACT_TREE_MASK_WORDS = 1 << 24


def log_sum_exp(weights: FloatArray) -> FloatArray:
    """log Σ exp over the last axis, shifted by the maximum (finite: every node has an allowed
    split), so no term overflows and −∞ terms add 0."""
    top = weights.max(axis=-1, keepdims=True)
    return np.asarray(top[..., 0] + np.log(np.exp(weights - top).sum(axis=-1)), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class SplitGroup:
    """Candidate splits of one family that route every row of the table alike: the values
    ``start`` … ``start + size − 1`` (lattice indices of a numeric family with no row's code
    in between; one value of a Boolean or categorical family). PRIVATE: the groups of a
    numeric family follow the data's values."""

    family: int
    start: int
    size: int

    @property
    def key(self) -> SplitKey:
        """Its first split: the one whose masks stand for the group's."""
        return self.family, self.start


def _group_starts(codes: npt.NDArray[np.int32], ordered: bool, size: int) -> IntArray:
    """The first values of one family's groups: every value of a Boolean or categorical
    family; for a numeric one 0 and every code in 1 … L − 1 that a row has (a threshold k
    sends left the rows of code ≤ k)."""
    if not ordered:
        return np.arange(size, dtype=np.int64)
    present = np.unique(codes[(codes >= 1) & (codes < size)]).astype(np.int64)
    return np.concatenate([np.zeros(1, dtype=np.int64), present])


def split_groups(columns: ColumnStore, space: SplitSpace) -> list[SplitGroup]:
    """The groups of ``space``'s splits on ``columns`` (module docstring), family by family:
    at most min(L, n + 1) per numeric family, one per other split."""
    codes, ordered = split_codes(columns, space)
    groups: list[SplitGroup] = []
    for family, spec in enumerate(space.families):
        starts = _group_starts(codes[family], bool(ordered[family]), spec.size)
        sizes = np.diff(np.append(starts, spec.size))
        groups.extend(
            SplitGroup(family, int(start), int(size))
            for start, size in zip(starts, sizes, strict=True)
        )
    return groups


def exact_split_groups(space: SplitSpace, n_max: int) -> int:
    """Public bound on :func:`split_groups`' count: min(L, n_max + 1) per numeric family (a
    group starts at 0 or at one of the ≤ n ≤ n_max rows' codes), the size of any other."""
    return sum(
        min(family.size, n_max + 1) if family.kind == "numeric" else family.size
        for family in space.families
    )


#: Public cap on :func:`exact_stump_work` (element operations; about 40 s at 40 ns each).
MAX_EXACT_STUMP_WORK = 1_000_000_000


def exact_stump_work(*, n_families: int, n_splits: int, n_max: int, n_classes: int) -> int:
    """Public bound on the element operations of :func:`stump_weights`: per attribute a pass
    over the n_max rows (codes, histogram) and a (values + 1) × K table (prefix sums, cell
    scores), S = ``n_splits`` values in all (the ungrouped count: lattice points, categories,
    Booleans)."""
    return n_families * n_max + (n_splits + n_families) * n_classes


def exact_stump_fits(*, n_families: int, n_splits: int, n_max: int, n_classes: int) -> bool:
    """Whether the depth-1 exact sampler fits its public cap (public inputs)."""
    work = exact_stump_work(
        n_families=n_families, n_splits=n_splits, n_max=n_max, n_classes=n_classes
    )
    return work <= MAX_EXACT_STUMP_WORK


def exact_stump_seconds(*, n_families: int, n_splits: int, n_max: int, n_classes: int) -> float:
    """Public time budget of one depth-1 exact draw (services/timing.py): a fixed part, the
    split codes and groups (a lattice search and a sort of the rows: budgeted 300 ns a row and
    attribute) and the histograms and tables (budgeted 100 ns an element operation; measured
    about 40 ns at load 7 on 2 cores, mammals' right view: 48 attributes of 65,537 lattice
    points, 0.27 s a draw)."""
    work = exact_stump_work(
        n_families=n_families, n_splits=n_splits, n_max=n_max, n_classes=n_classes
    )
    return 0.1 + 3e-7 * n_families * n_max + 1e-7 * work


def exact_tree_states(*, depth: int, n_splits: int) -> int:
    """Public bound on the inner states (P, d ≥ 1) the sum-product visits, ``n_splits`` = G
    groups: Σ_{k<D} C(2G + k − 1, k), the multisets of k (group, side) pairs."""
    return sum(math.comb(2 * n_splits + k - 1, k) for k in range(depth))


def exact_tree_work(*, depth: int, n_splits: int, n_max: int, n_classes: int) -> int:
    """Public bound on the word operations of :func:`sample_tree_exact` (module docstring):
    :func:`exact_tree_states` × G groups × 3 masks × W·(classes + 1) words."""
    words = max(1, math.ceil(n_max / 64))
    states = exact_tree_states(depth=depth, n_splits=n_splits)
    return states * n_splits * 3 * words * (n_classes + 1)


def exact_tree_mask_words(*, n_splits: int, n_max: int) -> int:
    """Public size of the masks :class:`ExactTreeTarget` holds (G groups), in 64-bit words."""
    return 3 * n_splits * max(1, math.ceil(n_max / 64))


def exact_tree_fits(*, depth: int, n_splits: int, n_max: int, n_classes: int) -> bool:
    """Whether the exact sampler fits the public caps on work and memory (public inputs;
    ``n_splits`` = the public bound on the groups, :func:`exact_split_groups`)."""
    work = exact_tree_work(depth=depth, n_splits=n_splits, n_max=n_max, n_classes=n_classes)
    masks = exact_tree_mask_words(n_splits=n_splits, n_max=n_max)
    return work <= MAX_EXACT_TREE_WORK and masks <= MAX_EXACT_TREE_MASK_WORDS


def exact_tree_seconds(*, depth: int, n_splits: int, n_max: int, n_classes: int) -> float:
    """Public time budget of one exact draw (services/timing.py), each term about 3× its
    measured worst on an idle 2-core Xeon (2026-11-28, 120 Boolean splits at depth 3 on 200 to
    5,000 rows, bench/bench_budgets.py's ``wide`` table):

    * a fixed part;
    * Python bookkeeping per state (its path multiset, its rows and its children's look-ups):
      10–30 µs measured, priced 40 µs;
    * the compiled last level per (state, group, class) triple, whatever the rows: its loop
      and the Gini of three cells, 8–10 ns measured at 1–4 words, priced 25 ns (the word
      price alone had under-priced narrow tables: 200 rows took 1.2–1.6 s against 0.94 s);
    * the popcounts per word (1.3–1.6·10⁻¹⁰ s measured at 80–160 words), priced 5·10⁻¹⁰."""
    states = exact_tree_states(depth=depth, n_splits=n_splits)
    work = exact_tree_work(depth=depth, n_splits=n_splits, n_max=n_max, n_classes=n_classes)
    loops = states * n_splits * (n_classes + 1)
    return 0.1 + 4e-5 * states + 2.5e-8 * loops + 5e-10 * work


def _extend(path: Path, index: int, side: int) -> Path:
    """The multiset ``path`` plus one (group, side) pair, sorted."""
    return tuple(sorted((*path, (index, side))))


class ExactTreeTarget:
    """log Z of every path state of π (module docstring) over the split groups, cached by
    (path multiset, levels below). Every value held is PRIVATE; only the drawn splits leave."""

    def __init__(
        self,
        space: SplitSpace,
        groups: list[SplitGroup],
        masks: SplitMasks,
        *,
        classes: WordArray,
        root: WordArray,
        coefficient: float,
    ) -> None:
        """``groups``: :func:`split_groups` of ``space`` on the data; ``masks``: the row masks
        of ``space``'s splits on the data; ``classes``: (K, W) rows of every class; ``root``:
        all rows; ``coefficient``: c of the target."""
        self._groups = groups
        self._log_mass = np.array([space.log_mass(g.key) for g in groups], dtype=np.float64)
        self._sizes = np.array([g.size for g in groups], dtype=np.int64)
        #: log(m_g·μ) with no threshold used: the root's weights, copied and patched per path
        #: (a path uses at most depth of the groups).
        self._log_mass_all = self._log_mass + np.log(self._sizes)
        self._left, self._right = masks.stacked([g.key for g in groups])
        self._missing = root[np.newaxis, :] & ~(self._left | self._right)
        self._classes = classes
        self._root = root
        self._coefficient = coefficient
        self._cache: dict[tuple[Path, int], float] = {}

    @property
    def groups(self) -> list[SplitGroup]:
        """The split groups, indexed as in the paths."""
        return self._groups

    def _log_weight(self, counts: npt.NDArray[np.int64]) -> FloatArray:
        """−c·WG of each class-count row of ``counts`` (…, K): the log-weight of a cell."""
        return np.asarray(-self._coefficient * weighted_gini(counts), dtype=np.float64)

    def _counts(self, rows: WordArray) -> npt.NDArray[np.int64]:
        """Class counts (…, K) of each row set of ``rows`` (…, W), by popcount."""
        flat = rows.reshape(-1, rows.shape[-1])
        return leaf_class_counts(flat, self._classes).reshape(*rows.shape[:-1], -1)

    def rows(self, path: Path) -> WordArray:
        """The rows reaching a node whose path is ``path``."""
        rows = self._root.copy()
        for index, side in path:
            rows &= (self._left if side == 0 else self._right)[index]
        return rows

    def _log_mass_below(self, path: Path) -> FloatArray:
        """log(m_g·μ) of every group: its unused thresholds m_g = |g| minus those ``path``
        uses (no split twice on a path), −∞ when none is left."""
        weights = self._log_mass_all.copy()
        used: dict[int, int] = {}
        for index, _side in path:
            used[index] = used.get(index, 0) + 1
        for index, count in used.items():
            unused = int(self._sizes[index]) - count
            weights[index] = self._log_mass[index] + math.log(unused) if unused > 0 else -np.inf
        return weights

    def _last_level(self, paths: list[Path]) -> FloatArray:
        """The (len(paths), G) log-weights of every group at nodes with one level below, whose
        children are cells: log(m_g·μ) − c·(WG(left) + WG(right) + WG(missing)), the missing
        cell's counts being the node's minus the children's. Compiled
        (:func:`~.tree_native.last_level_weights`), :data:`BATCH_NODES` nodes a call."""
        rows = np.stack([self.rows(path) for path in paths])
        weights = np.stack([self._log_mass_below(path) for path in paths])
        for start in range(0, len(paths), BATCH_NODES):
            last_level_weights(
                rows[start : start + BATCH_NODES],
                (self._left, self._right),
                self._classes,
                self._coefficient,
                weights[start : start + BATCH_NODES],
            )
        return weights

    def _inner_level(self, path: Path, depth: int) -> FloatArray:
        """The (G,) log-weights of every group at a node with ``depth`` ≥ 2 levels below:
        log(m_g·μ) − c·WG(missing cell) + log Z(left child) + log Z(right child)."""
        weights = self._log_mass_below(path)
        allowed = np.flatnonzero(np.isfinite(weights))
        children = [_extend(path, int(i), side) for side in (0, 1) for i in allowed]
        self._fill(children, depth - 1)
        below = np.array([self._cache[(child, depth - 1)] for child in children])
        missing = self._log_weight(self._counts(self.rows(path) & self._missing[allowed]))
        weights[allowed] += missing + below[: allowed.size] + below[allowed.size :]
        return weights

    def _fill(self, paths: list[Path], depth: int) -> None:
        """Cache log Z(P, ``depth``) of every path of ``paths`` not cached yet."""
        missing = list({path for path in paths if (path, depth) not in self._cache})
        if not missing:
            return
        if depth == 1:
            sums = log_sum_exp(self._last_level(missing))
            self._cache.update({(path, 1): float(z) for path, z in zip(missing, sums, strict=True)})
            return
        for path in missing:
            self._cache[(path, depth)] = float(log_sum_exp(self._inner_level(path, depth)))

    def choices(self, path: Path, depth: int) -> FloatArray:
        """The log-weights (G,) of every group at a node with path ``path`` and ``depth`` ≥ 1
        levels below (−∞ for the groups the path used up): π's conditional up to its sum."""
        return self._last_level([path])[0] if depth == 1 else self._inner_level(path, depth)

    def log_z(self, path: Path, depth: int) -> float:
        """log Z(P, d) (module docstring), cached by (P, d); d ≥ 1."""
        self._fill([path], depth)
        return self._cache[(path, depth)]


def _unused_split(
    group: SplitGroup, used: frozenset[SplitKey], rng: np.random.Generator
) -> SplitKey:
    """One of ``group``'s splits that ``used`` (the path's) does not hold, uniformly: the r-th
    unused value, r uniform below their number (exact integer draw; no draw for one)."""
    taken = sorted(value for family, value in used if family == group.family)
    taken = [value for value in taken if group.start <= value < group.start + group.size]
    free = group.size - len(taken)
    value = group.start + (int(rng.integers(free)) if free > 1 else 0)
    for skipped in taken:
        if skipped <= value:
            value += 1
    return group.family, value


def stump_weights(
    columns: ColumnStore, space: SplitSpace, labels: Labels, coefficient: float
) -> tuple[IntArray, FloatArray]:
    """The split groups of ``space`` on ``columns`` as (G, 3) rows (family, start, size), as
    :func:`split_groups` lists them, and their log-weights at the root of a depth-1 tree:
    log(|g|·μ) − c·(WG(left) + WG(right) + WG(missing)) (module docstring), the children's
    class counts from one (code, class) histogram per attribute: a threshold k sends left the
    codes ≤ k (prefix sums), any other split the code of its value. No Python work per group.
    PRIVATE."""
    codes, ordered = split_codes(columns, space)
    classes, n_classes = labels.classes, labels.n_classes
    labelled = classes >= 0
    everyone = np.bincount(classes[labelled], minlength=n_classes)
    tables: list[IntArray] = []
    weights: list[FloatArray] = []
    for family, spec in enumerate(space.families):
        starts = _group_starts(codes[family], bool(ordered[family]), spec.size)
        sizes = np.diff(np.append(starts, spec.size))
        kept = labelled & (codes[family] >= 0)
        cells = codes[family][kept].astype(np.int64) * n_classes + classes[kept]
        table = np.bincount(cells, minlength=(spec.size + 1) * n_classes).reshape(-1, n_classes)
        present = table.sum(axis=0)
        left = (np.cumsum(table, axis=0) if ordered[family] else table)[starts]
        scores = weighted_gini(left) + weighted_gini(present - left)
        scores += float(weighted_gini(everyone - present))
        log_mass = space.log_mass((family, 0))  # μ is uniform within a family
        weights.append(log_mass + np.log(sizes) - coefficient * scores)
        tables.append(np.stack([np.full_like(starts, family), starts, sizes], axis=1))
    return np.concatenate(tables), np.concatenate(weights)


def sample_stump_exact(
    columns: ColumnStore,
    space: SplitSpace,
    labels: Labels,
    *,
    epsilon: float,
    rng: np.random.Generator,
) -> list[SplitKey]:
    """One exact draw of a depth-1 tree from π (c = ε/(2·2)), without masks: a group by
    Gumbel-max over :func:`stump_weights`, then one of its splits uniformly. Pure ε-DP."""
    coefficient = em_coefficient(epsilon, GINI_SENSITIVITY)
    groups, weights = stump_weights(columns, space, labels, coefficient)
    family, start, size = (int(v) for v in groups[int(np.argmax(gumbel_scores(weights, rng=rng)))])
    return [_unused_split(SplitGroup(family, start, size), frozenset(), rng)]


def sample_tree_exact(
    target: ExactTreeTarget,
    *,
    depth: int,
    rng: np.random.Generator,
    progress: Callable[[float], None] | None = None,
) -> list[SplitKey]:
    """One exact draw from π (module docstring), heap order: each node's group by Gumbel-max
    over its exactly summed log-weights, given its ancestors' choices, then one of the group's
    splits unused on the path uniformly. Pure ε-DP. ``progress`` hears the public fraction of
    nodes drawn."""
    keys: list[SplitKey] = []
    paths: list[Path] = [()]
    used: list[frozenset[SplitKey]] = [frozenset()]
    for node in range(2**depth - 1):
        level = (node + 1).bit_length() - 1
        weights = target.choices(paths[node], depth - level)
        index = int(np.argmax(gumbel_scores(weights, rng=rng)))
        key = _unused_split(target.groups[index], used[node], rng)
        keys.append(key)
        paths.extend([_extend(paths[node], index, 0), _extend(paths[node], index, 1)])
        used.extend([used[node] | {key}] * 2)
        if progress is not None:
            progress((node + 1) / (2**depth - 1))
    return keys


def exact_target(
    columns: ColumnStore,
    space: SplitSpace,
    classes: WordArray,
    *,
    epsilon: float,
) -> ExactTreeTarget:
    """The target of ``tree.mcmc`` at ``epsilon`` on ``columns``: c = ε/(2·Δ), Δ = 2 (§3.4),
    over the split groups of the data."""
    return ExactTreeTarget(
        space,
        split_groups(columns, space),
        SplitMasks(columns, space),
        classes=classes,
        root=columns.all_rows().words,
        coefficient=em_coefficient(epsilon, GINI_SENSITIVITY),
    )
