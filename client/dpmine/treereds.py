"""Redescriptions from a pair of public trees and their released leaf counts (ALGORITHMS.md §3.6,
§3.7): the client ``extractReds`` and the support-based pruning.

The server op ``tree.leaf_counts`` (§3.6) releases, for public trees T_L (leaves 0..a−1) and T_R
(leaves 0..b−1), either one noisy (a+1)×(b+1) partition matrix of the rows by (left leaf, right
leaf), the last row and column holding the rows in no leaf ([REC], the default:
:func:`partition_counts`), or the paper's noisy leaf×leaf intersection matrix Ĩ (a×b) and noisy
left-leaf count vector ĉ_L (length a). Everything here is post-processing of that release: it
reads no data and costs no budget. Noisy entries may be fractional or negative; the statistics
clamp them (§3.6).

Leaves are numbered from 0 here (row i of Ĩ and entry i of ĉ_L are leaf i); the spec numbers
them from 1. A query over one tree is a :class:`LeafQuery`, a disjunction of signed leaves: +i is
the conjunction of the tests on leaf i's root-to-leaf path, −i its complement (§1.1, §3.6).
:func:`render_query` turns it into a query of the project's syntax from the leaves' paths.

Printed ≡ measured [REC]. A row missing a value on a path reaches no leaf (§3.1), so the
complement ``!(path)`` of leaf i holds the other leaves *and* the rows outside every leaf. The
partition release counts those rows in a cell of their own, and −i is measured as exactly that
complement (:func:`noisy_statistics`): the printed query's rows are the measured rows. The
paper's release has no such cell; there −i is measured as the other leaves (the heuristic of
§3.6) and the right supports and N̂ count only rows that reach a left leaf, so its statistics
describe the printed queries only when no row misses a value on the trees' paths. A leaf whose
path is a contradiction (:func:`dpmine.canonical.simplify_conjunction`) is empty on every
dataset: it is never a disjunct, so it yields no result.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, Protocol, TypedDict, TypeVar

from dpmine.errors import ParameterError
from dpmine.queries import tree_query
from dpmine.stats import jaccard, p_value
from dpmine.wire.counts import CountNoiseKind
from dpmine.wire.queries import AnyLiteral, Expr, Redescription

__all__ = [
    "DEFAULT_MAX_CLAUSES",
    "DEFAULT_MAX_JACCARD_ERROR",
    "DEFAULT_MAX_SUPPORT_FRACTION",
    "DEFAULT_MIN_JACCARD",
    "DEFAULT_MIN_SUPPORT",
    "DEFAULT_P_MAX",
    "ExtractOptions",
    "Extraction",
    "HasJaccardError",
    "HasNoisyStatistics",
    "LeafCounts",
    "LeafPath",
    "LeafQuery",
    "NoisyStatistics",
    "SignedLeaf",
    "TreeRedescription",
    "active_cells",
    "active_leaves",
    "clamped_statistics",
    "consistent_release",
    "derived_counts",
    "examine_partition",
    "examine_release",
    "extract_redescriptions",
    "extract_redescriptions_from_partition",
    "is_acceptable",
    "is_tautology",
    "jaccard_standard_error",
    "leaf_counts",
    "noisy_statistics",
    "partition_counts",
    "passes_final_filters",
    "prune",
    "prune_by_precision",
    "query_cell_sets",
    "render_query",
    "render_redescription",
    "save_support_jaccard_plot",
    "table_sums",
]

#: Defaults of §3.8 (paper Table 6, App. C.3).
DEFAULT_P_MAX = 0.01
DEFAULT_MIN_JACCARD = 0.1
DEFAULT_MAX_CLAUSES = 3
DEFAULT_MAX_SUPPORT_FRACTION = 0.8
#: §3.8 has no universal minimum support: 10 (NPAS, MAMMAL) or 100 (CMS, MIMIC-III); the paper
#: (App. C.3) calls ≥ 10 the preferable setting when nothing is known about the data size.
DEFAULT_MIN_SUPPORT = 10.0
#: Public pruning rule [REC, replaces the analyst-chosen support threshold of §3.7]: keep a
#: redescription when the standard error of its noisy Jaccard (:func:`jaccard_standard_error`)
#: is at most this. 0.07 keeps, on mammals at ε = 1, the redescriptions whose noisy J ranks like
#: the true J (Spearman ≥ 0.9; bench/README.md, trees section).
DEFAULT_MAX_JACCARD_ERROR = 0.07

_PLOT_EXTRA_HINT = "install the 'plot' extra: pip install 'dpmine[plot]'"


# --------------------------------------------------------------------------------------------
# Queries over one tree


class SignedLeaf(NamedTuple):
    """One disjunct of a tree query: leaf ``leaf`` (+i) or its negation (−i) (§3.6)."""

    leaf: int
    positive: bool


@dataclass(frozen=True, slots=True)
class LeafQuery:
    """A disjunction of signed leaves of one tree, in the order they were added (§1.1, §3.6).

    Two queries with the same disjuncts in another order are the same query: compare
    :attr:`key`, not the objects.
    """

    disjuncts: tuple[SignedLeaf, ...]

    def __post_init__(self) -> None:
        if not self.disjuncts:
            raise ValueError("a leaf query needs at least one signed leaf")
        for disjunct in self.disjuncts:
            if not isinstance(disjunct, SignedLeaf):
                raise TypeError(f"a disjunct must be a SignedLeaf, not {disjunct!r}")
            if isinstance(disjunct.leaf, bool) or not isinstance(disjunct.leaf, int):
                raise TypeError(f"a leaf index must be an int, not {disjunct.leaf!r}")
            if disjunct.leaf < 0:
                raise ValueError(f"leaf indices start at 0, not {disjunct.leaf}")

    @classmethod
    def of(cls, *disjuncts: tuple[int, bool]) -> LeafQuery:
        """``LeafQuery.of((2, True), (5, False))`` is +2 ∨ −5."""
        return cls(tuple(SignedLeaf(leaf, positive) for leaf, positive in disjuncts))

    @property
    def key(self) -> frozenset[SignedLeaf]:
        """The set of disjuncts: equal for the same query written in another order."""
        return frozenset(self.disjuncts)

    @property
    def used_leaves(self) -> frozenset[int]:
        """Leaves appearing in the query, whatever their sign."""
        return frozenset(disjunct.leaf for disjunct in self.disjuncts)

    def extended(self, leaf: int, positive: bool) -> LeafQuery:
        """This query ∨ the signed leaf (an extension of §3.6)."""
        return LeafQuery((*self.disjuncts, SignedLeaf(leaf, positive)))


def active_leaves(query: LeafQuery, n_leaves: int) -> frozenset[int]:
    """Union over the disjuncts of {i} for +i and (all leaves but i) for −i (§3.6).

    −i stands for the other leaves: the missing-value heuristic of paper §4.5.
    """
    _check_leaves(query, n_leaves)
    active: set[int] = set()
    for leaf, positive in query.disjuncts:
        if positive:
            active.add(leaf)
        else:
            active.update(other for other in range(n_leaves) if other != leaf)
    return frozenset(active)


def active_cells(query: LeafQuery, n_leaves: int, *, outside: bool) -> frozenset[int]:
    """The cells whose rows a query holds: its active leaves and, when the counts have a cell
    ``n_leaves`` for the rows outside the tree (``outside``) and the query negates a leaf, that
    cell too. −i is then the complement of leaf i exactly, as ``!(path)`` prints it [REC]."""
    active = active_leaves(query, n_leaves)
    if outside and not all(positive for _leaf, positive in query.disjuncts):
        return active | {n_leaves}
    return active


def is_tautology(query: LeafQuery, n_leaves: int, empty: Iterable[int] = ()) -> bool:
    """True when the active set and the ``empty`` leaves (paths that are contradictions) make
    every leaf of the tree (§3.6): ¬a ∨ a, two negated leaves, positive leaves covering the
    tree."""
    return len(active_leaves(query, n_leaves) | frozenset(empty)) == n_leaves


def _check_leaves(query: LeafQuery, n_leaves: int) -> None:
    if n_leaves < 1:
        raise ValueError(f"a tree has at least one leaf, not {n_leaves}")
    for leaf in query.used_leaves:
        if leaf >= n_leaves:
            raise ValueError(f"leaf {leaf} is out of range for a tree with {n_leaves} leaves")


# --------------------------------------------------------------------------------------------
# Released counts and derived counts


@dataclass(frozen=True, slots=True)
class LeafCounts:
    """The release of ``tree.leaf_counts`` and the counts derived from it (§3.6).

    ``intersections[i][j]`` = Ĩ[i][j], ``left`` = ĉ_L, ``right`` = ĉ_R[j] = Σ_i Ĩ[i][j],
    ``n_rows`` = N̂ = Σ_i ĉ_L[i]; all as released (unclamped). With ``outside`` (the partition
    release) each side has one more cell, last, for the rows in none of its leaves: the
    matrix is (a + 1) × (b + 1) and the sums run over every cell.
    """

    intersections: tuple[tuple[float, ...], ...]
    left: tuple[float, ...]
    right: tuple[float, ...]
    n_rows: float
    outside: bool = False

    @property
    def n_left(self) -> int:
        """Number of leaves a of T_L."""
        return len(self.left) - self.outside

    @property
    def n_right(self) -> int:
        """Number of leaves b of T_R."""
        return len(self.right) - self.outside


def derived_counts(
    intersections: Sequence[Sequence[float]], left_counts: Sequence[float]
) -> tuple[tuple[float, ...], float]:
    """(ĉ_R, N̂) with ĉ_R[j] = Σ_i Ĩ[i][j] and N̂ = Σ_i ĉ_L[i] (§3.6, paper §4.5).

    Heuristics when rows miss a split attribute (they fall outside every leaf), as in the paper.
    """
    matrix, left = _checked_release(intersections, left_counts)
    right = tuple(math.fsum(row[j] for row in matrix) for j in range(len(matrix[0])))
    return right, math.fsum(left)


def leaf_counts(
    intersections: Sequence[Sequence[float]], left_counts: Sequence[float]
) -> LeafCounts:
    """Check the release (shapes, finite entries) and add the derived counts (§3.6)."""
    matrix, left = _checked_release(intersections, left_counts)
    right, n_rows = derived_counts(matrix, left)
    return LeafCounts(intersections=matrix, left=left, right=right, n_rows=n_rows)


def partition_counts(partition: Sequence[Sequence[float]]) -> LeafCounts:
    """Leaf counts from the ``partition`` release of ``tree.leaf_counts`` [REC, §3.6].

    ``partition`` is (a+1)×(b+1): cell (i, j) for i < a, j < b is leaf i ∩ leaf j; row a holds the
    rows in no left leaf, column b those in no right leaf. The counts keep every cell
    (``outside``): ĉ_L[i] = the sum of row i, ĉ_R[j] = the sum of column j (the last of each:
    the rows outside the tree) and N̂ = the sum of every cell. Each support counts its rows
    once, also when values are missing, the complement of a leaf can count the rows outside
    the tree, and every statistic is a sum of independent cells.
    """
    matrix = tuple(tuple(float(value) for value in row) for row in partition)
    if len(matrix) < 2 or len(matrix[0]) < 2:
        raise ValueError("a partition matrix has at least two rows and two columns")
    if any(len(row) != len(matrix[0]) for row in matrix):
        raise ValueError("the partition matrix must be rectangular")
    if not all(math.isfinite(value) for row in matrix for value in row):
        raise ValueError("released counts must be finite")
    return LeafCounts(
        intersections=matrix,
        left=tuple(math.fsum(row) for row in matrix),
        right=tuple(math.fsum(row[j] for row in matrix) for j in range(len(matrix[0]))),
        n_rows=math.fsum(value for row in matrix for value in row),
        outside=True,
    )


def consistent_release(
    intersections: Sequence[Sequence[float]], left_counts: Sequence[float]
) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
    """The least-squares estimate of the leaf×leaf matrix from both parts of the release [REC].

    Model: Ĩ[i][j] = M[i][j] + e_ij and ĉ_L[i] = Σ_j M[i][j] + f_i with independent noises of
    equal variance (both Lap(2/ε_red), §3.6). Row i has b + 1 observations of its b unknowns; the
    best linear unbiased estimate spreads the row's disagreement evenly over its cells:
    M̂[i][j] = Ĩ[i][j] + (ĉ_L[i] − Σ_k Ĩ[i][k]) / (b + 1), and ĉ_L is replaced by the row sums of M̂,
    so that the two parts agree. Every support, intersection and union derived from M̂ then uses
    both releases, and a left support minus an intersection cancels their common cells: this is
    what makes noisy J rank like true J.

    Privacy: a fixed function of the released (Ĩ, ĉ_L) and of public shapes, i.e.
    post-processing of an ε_red-DP release; it reads no data and costs nothing.
    With missing values (rows in a left leaf but in no right leaf) Σ_j M[i][j] < |leaf_i|, and the
    estimate moves 1/(b + 1) of that gap into each cell of row i: a heuristic then, as the
    derived counts of §3.6 already are.
    """
    matrix, left = _checked_release(intersections, left_counts)
    share = 1.0 / (len(matrix[0]) + 1)
    rows = tuple(
        tuple(value + (total - math.fsum(row)) * share for value in row)
        for row, total in zip(matrix, left, strict=True)
    )
    return rows, tuple(math.fsum(row) for row in rows)


def _checked_release(
    intersections: Sequence[Sequence[float]], left_counts: Sequence[float]
) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
    matrix = tuple(tuple(float(value) for value in row) for row in intersections)
    left = tuple(float(value) for value in left_counts)
    if not matrix or not matrix[0]:
        raise ValueError("the intersection matrix needs at least one row and one column")
    if any(len(row) != len(matrix[0]) for row in matrix):
        raise ValueError("the intersection matrix must be rectangular")
    if len(left) != len(matrix):
        raise ValueError(
            f"{len(left)} left-leaf counts for an intersection matrix with {len(matrix)} rows"
        )
    if not all(math.isfinite(value) for row in (*matrix, left) for value in row):
        raise ValueError("released counts must be finite")
    return matrix, left


# --------------------------------------------------------------------------------------------
# Noisy statistics of a pair of tree queries


@dataclass(frozen=True, slots=True)
class NoisyStatistics:
    """Clamped noisy statistics of a redescription (§3.6): N̂, s_L, s_R, I, U, J and p."""

    n_rows: float
    support_left: float
    support_right: float
    intersection: float
    union: float
    jaccard: float
    p_value: float


def clamped_statistics(
    n_rows: float, support_left: float, support_right: float, intersection: float
) -> NoisyStatistics:
    """The clamps of §3.6 on raw noisy sums, then J and p.

    Every value ≥ 0; s_L, s_R ≤ N̂; I ≤ min(s_L, s_R); U = s_L + s_R − I clamped to
    [max(s_L, s_R, I), N̂]; J = I/U (0 when U = 0); p of §1.3 on (N̂, s_L, s_R, I) rounded.
    """
    n = max(n_rows, 0.0)
    s_left = min(max(support_left, 0.0), n)
    s_right = min(max(support_right, 0.0), n)
    inter = min(max(intersection, 0.0), s_left, s_right)
    union = min(max(s_left + s_right - inter, s_left, s_right, inter), n)
    return NoisyStatistics(
        n_rows=n,
        support_left=s_left,
        support_right=s_right,
        intersection=inter,
        union=union,
        jaccard=jaccard(inter, union),
        p_value=p_value(round(n), round(s_left), round(s_right), round(inter)),
    )


def noisy_statistics(counts: LeafCounts, left: LeafQuery, right: LeafQuery) -> NoisyStatistics:
    """Statistics of (Q_L, Q_R) from the active cell sets A_L, A_R (§3.6, :func:`active_cells`).

    s_L = Σ_{i∈A_L} ĉ_L[i], s_R = Σ_{j∈A_R} ĉ_R[j], I = Σ_{i∈A_L, j∈A_R} Ĩ[i][j], then
    :func:`clamped_statistics`.
    """
    active_left = sorted(active_cells(left, counts.n_left, outside=counts.outside))
    active_right = sorted(active_cells(right, counts.n_right, outside=counts.outside))
    return clamped_statistics(
        counts.n_rows,
        math.fsum(counts.left[i] for i in active_left),
        math.fsum(counts.right[j] for j in active_right),
        math.fsum(counts.intersections[i][j] for i in active_left for j in active_right),
    )


def table_sums(
    matrix: Sequence[Sequence[int]], left: Collection[int], right: Collection[int]
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The cells (E11, E10, E01, E00) of §1.2 of a pair of queries as sums of released cells,
    and how many released cells each one sums [REC, issue #21].

    ``left`` and ``right`` are the queries' active cells (:func:`active_cells`): E11 sums the
    rows of ``left`` × the columns of ``right``, E10 ``left`` × the other columns, E01 the other
    rows × ``right`` and E00 the rest. On the partition release every data row is in one cell,
    so these are noisy counts of exactly the printed queries' four cells; on the paper's
    intersection matrix, of the rows that reach a leaf of both trees."""
    rows = range(len(matrix))
    columns = range(len(matrix[0]) if matrix else 0)
    sides = (
        ([i for i in rows if i in left], [j for j in columns if j in right]),
        ([i for i in rows if i in left], [j for j in columns if j not in right]),
        ([i for i in rows if i not in left], [j for j in columns if j in right]),
        ([i for i in rows if i not in left], [j for j in columns if j not in right]),
    )
    sums = tuple(sum(int(matrix[i][j]) for i in r for j in c) for r, c in sides)
    terms = tuple(len(r) * len(c) for r, c in sides)
    return (sums[0], sums[1], sums[2], sums[3]), (terms[0], terms[1], terms[2], terms[3])


def query_cell_sets(n_leaves: int, max_clauses: int) -> int:
    """At most how many sets of active cells a query over one tree of ``n_leaves`` leaves can
    have [REC, issue #21]: the size of the family a union bound over queries runs over.

    Proof: a query is a disjunction of at most ``max_clauses`` signed leaves, each leaf used
    once, and is no tautology (§3.6), so it negates at most one leaf (two negated leaves cover
    every leaf). With a negated leaf i its active leaves are all but i (its positive leaves are
    among them): n sets. Otherwise they are its positive leaves, at most min(c, n − 1) of them:
    Σ_{j ≤ min(c, n − 1)} C(n, j) sets. The outside cell of the partition release only follows
    the sign, so it adds no set."""
    if n_leaves < 1 or max_clauses < 1:
        raise ValueError("a tree has at least one leaf and a query at least one clause")
    largest = min(max_clauses, n_leaves - 1)
    return sum(math.comb(n_leaves, size) for size in range(1, largest + 1)) + n_leaves


def jaccard_standard_error(
    red: TreeRedescription,
    n_left: int,
    n_right: int,
    noise_scale: float,
    *,
    consistent: bool = True,
    partition: bool = False,
    noise: CountNoiseKind = "laplace",
) -> float:
    """Standard error of a redescription's noisy J from the noise it carries [REC, §3.7 pruning].

    With I the noisy intersection and D = U − I (the cells of A_L×Ā_R and Ā_L×A_R), the delta
    method gives Var J ≈ (D²·Var I + I²·Var D − 2·I·D·Cov(I, D)) / U⁴. Each released count has
    variance v = 2·``noise_scale``² (Laplace), or at most v = ``noise_scale``² with ``noise``
    "discrete_gaussian" (zCDP datasets: the discrete Gaussian's variance is below σ², Canonne,
    Kamath & Steinke 2020). With ``consistent`` (the estimate of
    :func:`consistent_release`, c = b + 1 observations per left row, m = |A_R|): a left row in
    A_L adds v·m(c − m)/c to Var I, v·(b − m)(m + 1)/c to Var D and −v·m(b − m)/c to the
    covariance; a left row outside A_L adds v·m(c − m)/c to Var D. Without (the raw §3.6
    sums): Var I = v·|A_L|·m, Var D = v·(|A_L| + a·m), Cov = −Var I. With ``partition`` (the
    release of :func:`partition_counts`; ``consistent`` is then ignored) I and D are sums of
    disjoint independent cells: Var I = v·|A_L|·m, Cov = 0 and
    Var D = v·(|A_L|·(b + 1 − m) + (a + 1 − |A_L|)·m), where |A_L| and m count the active cells
    (:func:`active_cells`: a negated leaf's complement holds the cell of the rows outside).

    Privacy: a function of the noisy statistics, the public tree shapes, the query and the public
    noise scale: post-processing, free. A pruning rule on it is a public rule that needs no
    analyst-chosen, data-size-dependent support threshold.
    """
    if not (math.isfinite(noise_scale) and noise_scale >= 0):
        raise ParameterError(f"noise_scale must be a finite number ≥ 0, not {noise_scale!r}")
    in_left = len(active_cells(red.left, n_left, outside=partition))
    m = len(active_cells(red.right, n_right, outside=partition))
    v = (1.0 if noise == "discrete_gaussian" else 2.0) * noise_scale**2
    if partition:
        var_i = v * in_left * m
        var_d = v * (in_left * (n_right + 1 - m) + (n_left + 1 - in_left) * m)
        cov = 0.0
    elif consistent:
        c = n_right + 1
        var_i = v * in_left * m * (c - m) / c
        var_d = v * (in_left * (n_right - m) * (m + 1) + (n_left - in_left) * m * (c - m)) / c
        cov = -v * in_left * m * (n_right - m) / c
    else:
        var_i = v * in_left * m
        var_d = v * (in_left + n_left * m)
        cov = -var_i
    inter = red.statistics.intersection
    rest = red.statistics.union - inter
    union = red.statistics.union
    if union <= 0:
        return math.inf
    variance = (rest**2 * var_i + inter**2 * var_d - 2.0 * inter * rest * cov) / union**4
    return math.sqrt(max(variance, 0.0))


def is_acceptable(
    new: NoisyStatistics, current: NoisyStatistics, *, max_support: float, p_max: float
) -> bool:
    """Whether ``new`` replaces ``current`` (§3.6).

    I_new ≤ maxSupp and [ (J_new > J_cur and (p_cur ≥ p_max or p_new < p_max)) or
    (p_cur > p_max and p_new < p_max) ].
    """
    if new.intersection > max_support:
        return False
    better_jaccard = new.jaccard > current.jaccard and (
        current.p_value >= p_max or new.p_value < p_max
    )
    becomes_significant = current.p_value > p_max and new.p_value < p_max
    return better_jaccard or becomes_significant


# --------------------------------------------------------------------------------------------
# extractReds


@dataclass(frozen=True, slots=True)
class TreeRedescription:
    """A redescription (Q_L over T_L, Q_R over T_R) and its noisy statistics (§3.6)."""

    left: LeafQuery
    right: LeafQuery
    statistics: NoisyStatistics

    @property
    def key(self) -> tuple[frozenset[SignedLeaf], frozenset[SignedLeaf]]:
        """Identity of the pair of queries, whatever the order of their disjuncts."""
        return (self.left.key, self.right.key)


class ExtractOptions(TypedDict, total=False):
    """The keyword options of :func:`extract_redescriptions` and
    :func:`extract_redescriptions_from_partition`."""

    min_supp: float
    max_supp_fraction: float
    min_jaccard: float
    p_max: float
    max_clauses: int
    empty_left: Collection[int]
    empty_right: Collection[int]


class Extraction(NamedTuple):
    """What an extraction found, and m (issue #21): how many distinct candidates, pairs of
    active cell sets, the search computed statistics of on the way (a public count)."""

    redescriptions: list[TreeRedescription]
    examined: int


def extract_redescriptions(
    intersections: Sequence[Sequence[float]],
    left_counts: Sequence[float],
    *,
    min_supp: float = DEFAULT_MIN_SUPPORT,
    max_supp_fraction: float = DEFAULT_MAX_SUPPORT_FRACTION,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    p_max: float = DEFAULT_P_MAX,
    max_clauses: int = DEFAULT_MAX_CLAUSES,
    empty_left: Collection[int] = (),
    empty_right: Collection[int] = (),
    consistent: bool = True,
) -> list[TreeRedescription]:
    """The redescriptions of :func:`examine_release` (the client ``extractReds`` of §3.6)."""
    return examine_release(
        intersections,
        left_counts,
        min_supp=min_supp,
        max_supp_fraction=max_supp_fraction,
        min_jaccard=min_jaccard,
        p_max=p_max,
        max_clauses=max_clauses,
        empty_left=empty_left,
        empty_right=empty_right,
        consistent=consistent,
    ).redescriptions


def examine_release(
    intersections: Sequence[Sequence[float]],
    left_counts: Sequence[float],
    *,
    min_supp: float = DEFAULT_MIN_SUPPORT,
    max_supp_fraction: float = DEFAULT_MAX_SUPPORT_FRACTION,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    p_max: float = DEFAULT_P_MAX,
    max_clauses: int = DEFAULT_MAX_CLAUSES,
    empty_left: Collection[int] = (),
    empty_right: Collection[int] = (),
    consistent: bool = True,
) -> Extraction:
    """The client ``extractReds`` of §3.6 on a release (Ĩ, ĉ_L) of ``tree.leaf_counts``, and
    the number of candidates it examined.

    maxSupp = ``max_supp_fraction``·N̂ (N̂ clamped at 0). For every leaf pair (i, j), in row-major
    order: start from (+i, +j); try (−i, +j), (+i, −j), (−i, −j) in that order, each replacing
    the current when :func:`is_acceptable`; discard the pair if then I > maxSupp. Then
    ``max_clauses`` − 1 rounds, each extending Q_L and then Q_R by the acceptable disjunct ±w of
    largest J over the unused leaves w ([REC]: all unused leaves, skipping a disjunct that makes
    the active set every leaf); the first of equal J wins, +w before −w. Keep the result iff
    J ≥ ``min_jaccard``, p ≤ ``p_max``, ``min_supp`` ≤ I ≤ maxSupp, s_L < maxSupp and
    s_R < maxSupp; drop tautologies (:func:`is_tautology` on either side) and duplicates (same
    pair of queries, the first kept). ``min_supp`` defaults to 10 (see
    :data:`DEFAULT_MIN_SUPPORT`). With ``consistent`` (default [REC]) every statistic is computed
    on :func:`consistent_release` of the release; ``False`` sums the raw release as §3.6 prints.

    ``empty_left`` / ``empty_right`` [REC]: leaves whose path is a contradiction, empty on every
    dataset (public, from the trees). They start no pair and extend no query, and count as
    covered in the tautology test; two results with the same active cells are one result.
    """
    _check_parameters(min_supp, max_supp_fraction, min_jaccard, p_max, max_clauses)
    if consistent:
        intersections, left_counts = consistent_release(intersections, left_counts)
    search = _Search.of(
        leaf_counts(intersections, left_counts),
        max_supp_fraction=max_supp_fraction,
        p_max=p_max,
        max_clauses=max_clauses,
        empty=(empty_left, empty_right),
    )
    return Extraction(search.run(min_supp=min_supp, min_jaccard=min_jaccard), len(search.examined))


def extract_redescriptions_from_partition(
    partition: Sequence[Sequence[float]],
    *,
    min_supp: float = DEFAULT_MIN_SUPPORT,
    max_supp_fraction: float = DEFAULT_MAX_SUPPORT_FRACTION,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    p_max: float = DEFAULT_P_MAX,
    max_clauses: int = DEFAULT_MAX_CLAUSES,
    empty_left: Collection[int] = (),
    empty_right: Collection[int] = (),
) -> list[TreeRedescription]:
    """The redescriptions of :func:`examine_partition`."""
    return examine_partition(
        partition,
        min_supp=min_supp,
        max_supp_fraction=max_supp_fraction,
        min_jaccard=min_jaccard,
        p_max=p_max,
        max_clauses=max_clauses,
        empty_left=empty_left,
        empty_right=empty_right,
    ).redescriptions


def examine_partition(
    partition: Sequence[Sequence[float]],
    *,
    min_supp: float = DEFAULT_MIN_SUPPORT,
    max_supp_fraction: float = DEFAULT_MAX_SUPPORT_FRACTION,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    p_max: float = DEFAULT_P_MAX,
    max_clauses: int = DEFAULT_MAX_CLAUSES,
    empty_left: Collection[int] = (),
    empty_right: Collection[int] = (),
) -> Extraction:
    """:func:`examine_release` on the ``partition`` release [REC, §3.6], through
    :func:`partition_counts`: the same search, filters and tie rules; the release is already
    consistent, so no estimate is needed. A negated leaf is the exact complement of its
    leaf (:func:`active_cells`)."""
    _check_parameters(min_supp, max_supp_fraction, min_jaccard, p_max, max_clauses)
    search = _Search.of(
        partition_counts(partition),
        max_supp_fraction=max_supp_fraction,
        p_max=p_max,
        max_clauses=max_clauses,
        empty=(empty_left, empty_right),
    )
    return Extraction(search.run(min_supp=min_supp, min_jaccard=min_jaccard), len(search.examined))


def _check_parameters(
    min_supp: float, max_supp_fraction: float, min_jaccard: float, p_max: float, max_clauses: int
) -> None:
    if not (math.isfinite(min_supp) and min_supp >= 0):
        raise ParameterError(f"min_supp must be a finite number ≥ 0, not {min_supp!r}")
    if not 0 < max_supp_fraction <= 1:
        raise ParameterError(f"max_supp_fraction must be in (0, 1], not {max_supp_fraction!r}")
    if not 0 <= min_jaccard <= 1:
        raise ParameterError(f"min_jaccard must be in [0, 1], not {min_jaccard!r}")
    if not 0 < p_max <= 1:
        raise ParameterError(f"p_max must be in (0, 1], not {p_max!r}")
    if isinstance(max_clauses, bool) or not isinstance(max_clauses, int) or max_clauses < 1:
        raise ParameterError(f"max_clauses must be an int ≥ 1, not {max_clauses!r}")


@dataclass(frozen=True, slots=True)
class _Search:
    """The search and filters of §3.6 on checked leaf counts."""

    counts: LeafCounts
    max_support: float
    p_max: float
    max_clauses: int
    empty_left: frozenset[int]
    empty_right: frozenset[int]
    #: The pairs of active cell sets whose statistics the search computed (m of issue #21).
    examined: set[tuple[frozenset[int], frozenset[int]]] = field(default_factory=set)

    @classmethod
    def of(
        cls,
        counts: LeafCounts,
        *,
        max_supp_fraction: float,
        p_max: float,
        max_clauses: int,
        empty: tuple[Collection[int], Collection[int]],
    ) -> _Search:
        """The search on ``counts``: maxSupp = ``max_supp_fraction``·N̂ (N̂ clamped at 0) and
        the checked empty leaves of each side."""
        return cls(
            counts,
            max_support=max_supp_fraction * max(counts.n_rows, 0.0),
            p_max=p_max,
            max_clauses=max_clauses,
            empty_left=_checked_empty(empty[0], counts.n_left),
            empty_right=_checked_empty(empty[1], counts.n_right),
        )

    def run(self, *, min_supp: float, min_jaccard: float) -> list[TreeRedescription]:
        """Every pair of non-empty leaves grown, filtered, and kept once per pair of active
        cell sets (the rows the pair measures; the first one found is kept)."""
        counts = self.counts
        results: list[TreeRedescription] = []
        seen: set[tuple[frozenset[int], frozenset[int]]] = set()
        for i in range(counts.n_left):
            for j in range(counts.n_right):
                if i in self.empty_left or j in self.empty_right:
                    continue
                red = self._grow_pair(i, j)
                if red is None or not self._passes_filters(red, min_supp, min_jaccard):
                    continue
                cells = (
                    active_cells(red.left, counts.n_left, outside=counts.outside),
                    active_cells(red.right, counts.n_right, outside=counts.outside),
                )
                if cells not in seen:
                    seen.add(cells)
                    results.append(red)
        return results

    def _grow_pair(self, i: int, j: int) -> TreeRedescription | None:
        """Start, sign variants and extension rounds of one leaf pair; None if discarded."""
        current = self._red(LeafQuery.of((i, True)), LeafQuery.of((j, True)))
        for left_positive, right_positive in ((False, True), (True, False), (False, False)):
            candidate = self._red(
                LeafQuery.of((i, left_positive)), LeafQuery.of((j, right_positive))
            )
            if self._acceptable(candidate, current):
                current = candidate
        if current.statistics.intersection > self.max_support:
            return None
        for _ in range(self.max_clauses - 1):
            current = self._extend(current, "left")
            current = self._extend(current, "right")
        return current

    def _extend(
        self, current: TreeRedescription, side: Literal["left", "right"]
    ) -> TreeRedescription:
        """The acceptable one-disjunct extension of one side with the largest J, or
        ``current``; empty leaves and disjuncts that make a tautology are skipped."""
        query = current.left if side == "left" else current.right
        n_leaves = self.counts.n_left if side == "left" else self.counts.n_right
        empty = self.empty_left if side == "left" else self.empty_right
        best: TreeRedescription | None = None
        for leaf in range(n_leaves):
            if leaf in query.used_leaves or leaf in empty:
                continue
            for positive in (True, False):
                extended = query.extended(leaf, positive)
                if is_tautology(extended, n_leaves, empty):
                    continue
                candidate = (
                    self._red(extended, current.right)
                    if side == "left"
                    else self._red(current.left, extended)
                )
                if not self._acceptable(candidate, current):
                    continue
                if best is None or candidate.statistics.jaccard > best.statistics.jaccard:
                    best = candidate
        return current if best is None else best

    def _acceptable(self, new: TreeRedescription, current: TreeRedescription) -> bool:
        return is_acceptable(
            new.statistics, current.statistics, max_support=self.max_support, p_max=self.p_max
        )

    def _red(self, left: LeafQuery, right: LeafQuery) -> TreeRedescription:
        counts = self.counts
        self.examined.add(
            (
                active_cells(left, counts.n_left, outside=counts.outside),
                active_cells(right, counts.n_right, outside=counts.outside),
            )
        )
        return TreeRedescription(left, right, noisy_statistics(counts, left, right))

    def _passes_filters(self, red: TreeRedescription, min_supp: float, min_jaccard: float) -> bool:
        """The final filters of §3.6, tautologies included."""
        stats = red.statistics
        return (
            stats.jaccard >= min_jaccard
            and stats.p_value <= self.p_max
            and min_supp <= stats.intersection <= self.max_support
            and stats.support_left < self.max_support
            and stats.support_right < self.max_support
            and not is_tautology(red.left, self.counts.n_left, self.empty_left)
            and not is_tautology(red.right, self.counts.n_right, self.empty_right)
        )


def passes_final_filters(
    red: TreeRedescription,
    counts: LeafCounts,
    *,
    min_supp: float = DEFAULT_MIN_SUPPORT,
    max_supp_fraction: float = DEFAULT_MAX_SUPPORT_FRACTION,
    min_jaccard: float = DEFAULT_MIN_JACCARD,
    p_max: float = DEFAULT_P_MAX,
    empty_left: Collection[int] = (),
    empty_right: Collection[int] = (),
) -> bool:
    """The final filters of §3.6 (those of :func:`examine_partition`) on a redescription found
    by another rule, e.g. the layered miner's: J, p, the supports against maxSupp and no
    tautology. Post-processing of ``counts``."""
    _check_parameters(min_supp, max_supp_fraction, min_jaccard, p_max, 1)
    search = _Search.of(
        counts,
        max_supp_fraction=max_supp_fraction,
        p_max=p_max,
        max_clauses=1,
        empty=(empty_left, empty_right),
    )
    return search._passes_filters(red, min_supp, min_jaccard)


def _checked_empty(leaves: Collection[int], n_leaves: int) -> frozenset[int]:
    empty = frozenset(leaves)
    if any(isinstance(leaf, bool) or not 0 <= leaf < n_leaves for leaf in empty):
        raise ParameterError(f"empty leaves must be leaf indices below {n_leaves}, not {leaves}")
    return empty


# --------------------------------------------------------------------------------------------
# Rendering


#: A leaf's path after :func:`dpmine.canonical.simplify_conjunction`: its tests, or None when
#: they contradict each other (the leaf is empty on every dataset).
LeafPath = Sequence[AnyLiteral] | None


def render_query(query: LeafQuery, paths: Sequence[LeafPath]) -> Expr:
    """The query of the project's syntax whose rows are the query's active cells (§1.1, §3.6).

    ``paths[i]`` holds the tests on leaf i's root-to-leaf path (thresholds as released; best
    simplified), None for a leaf that is empty on every dataset. The text is canonical: a
    query that negates leaf i is ``!(path_i)``, its positive disjuncts being inside that
    complement already; otherwise the disjunction of the paths of its leaves in leaf order,
    empty leaves left out. ``!(path_i)`` holds the rows outside the tree, which the partition
    release measures (:func:`active_cells`). ValueError for a query with no rows to print: a
    tautology, or only empty leaves.
    """
    n_leaves = len(paths)
    for leaf in query.used_leaves:
        if leaf >= n_leaves:
            raise ValueError(f"no path given for leaf {leaf} ({n_leaves} paths)")
    active = active_leaves(query, n_leaves)
    if all(positive for _leaf, positive in query.disjuncts):
        kept = [path for leaf, path in enumerate(paths) if leaf in active and path is not None]
        if not kept:
            raise ValueError("every leaf of the query is empty: it has no rows to print")
        return tree_query([(True, path) for path in kept])
    inactive = [leaf for leaf in range(n_leaves) if leaf not in active]
    path = paths[inactive[0]] if len(inactive) == 1 else None
    if path is None:
        raise ValueError("the query is a tautology: it holds every row")
    return tree_query([(False, path)])


def render_redescription(
    red: TreeRedescription, left_paths: Sequence[LeafPath], right_paths: Sequence[LeafPath]
) -> Redescription:
    """Both queries of ``red`` rendered with :func:`render_query` (§3.6 "Report")."""
    return Redescription(
        left=render_query(red.left, left_paths), right=render_query(red.right, right_paths)
    )


# --------------------------------------------------------------------------------------------
# Pruning (§3.7, paper §4.6)


class HasNoisyStatistics(Protocol):
    """Anything carrying the noisy statistics of a redescription (the pruning reads only them)."""

    @property
    def statistics(self) -> NoisyStatistics: ...


StatisticsT = TypeVar("StatisticsT", bound=HasNoisyStatistics)


def prune(reds: Iterable[StatisticsT], min_noisy_support: float) -> list[StatisticsT]:
    """Keep the redescriptions whose noisy support I is at least ``min_noisy_support`` (§3.7).

    The paper's thresholds: 2000 (MIMIC-III), 1000 (CMS), 500 (MAMMAL), 200 (NPAS); choose one
    from :func:`save_support_jaccard_plot` (the dense low-support, high-J block is noise).
    """
    if not math.isfinite(min_noisy_support):
        raise ValueError(f"min_noisy_support must be finite, not {min_noisy_support!r}")
    return [red for red in reds if red.statistics.intersection >= min_noisy_support]


class HasJaccardError(Protocol):
    """Anything carrying the standard error of its noisy Jaccard."""

    @property
    def jaccard_error(self) -> float: ...


ErrorT = TypeVar("ErrorT", bound=HasJaccardError)


def prune_by_precision(
    reds: Iterable[ErrorT], max_error: float = DEFAULT_MAX_JACCARD_ERROR
) -> list[ErrorT]:
    """Keep the redescriptions whose noisy J has standard error ≤ ``max_error`` [REC, §3.7].

    The public counterpart of :func:`prune`: the error follows from ε (the noise scale), the
    tree shapes and the noisy counts (:func:`jaccard_standard_error`), so no threshold has to
    be read off a plot of the results. Post-processing, free.
    """
    if not (math.isfinite(max_error) and max_error > 0):
        raise ParameterError(f"max_error must be a finite number > 0, not {max_error!r}")
    return [red for red in reds if red.jaccard_error <= max_error]


def save_support_jaccard_plot(
    reds: Iterable[HasNoisyStatistics], path: str | Path, threshold: float | None = None
) -> Path:
    """Scatter plot of noisy support I against noisy Jaccard J, written to ``path`` (§3.7).

    The format follows the file suffix (PNG, PDF, SVG, ...). With ``threshold``, a vertical line
    marks it and the redescriptions :func:`prune` would drop are grey diamonds. Needs
    matplotlib (the ``plot`` extra).
    """
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415 (optional dependency)
    except ImportError as exc:
        raise ImportError(
            f"save_support_jaccard_plot needs matplotlib; {_PLOT_EXTRA_HINT}"
        ) from exc
    items = list(reds)
    kept = items if threshold is None else prune(items, threshold)
    dropped = (
        []
        if threshold is None
        else [red for red in items if red.statistics.intersection < threshold]
    )
    figure = Figure(figsize=(6.4, 4.8))
    axes = figure.add_subplot()
    if dropped:
        axes.scatter(
            [red.statistics.intersection for red in dropped],
            [red.statistics.jaccard for red in dropped],
            marker="D",
            s=14,
            color="lightgrey",
            label="pruned",
        )
    axes.scatter(
        [red.statistics.intersection for red in kept],
        [red.statistics.jaccard for red in kept],
        s=18,
        color="tab:blue",
        label="kept",
    )
    if threshold is not None:
        axes.axvline(threshold, color="tab:red", linestyle="--", label=f"threshold {threshold:g}")
        axes.legend(loc="lower right")
    axes.set_xlabel("noisy support I")
    axes.set_ylabel("noisy Jaccard J")
    axes.set_ylim(0.0, 1.05)
    axes.set_title(f"{len(items)} redescriptions")
    figure.savefig(path)
    return Path(path)
