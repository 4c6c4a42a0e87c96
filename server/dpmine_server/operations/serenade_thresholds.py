"""Numeric thresholds of Serenade's literals (ALGORITHMS.md §1.4): the public grid and the
literal supports of threshold pairs.

* Continuous: each bound is unbounded with probability ½, otherwise a uniform point of the
  public lattice of [lo, hi]; pairs have a ≤ b and are not both unbounded. The cells, the base
  measure and the exact sampler are family-independent and live in
  :mod:`dpmine_server.dp.candidates`; a released bound is a lattice point uniform inside its cell,
  never a data value nor arithmetic on one.
* Grid: the owner's grid or 20 equal-width interior points; every (lower, upper) interval of
  grid points (either unbounded, not both) is a discrete candidate. Rows are binned once per
  attribute so the support counts of every interval come from prefix sums.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
import numpy.typing as npt

from dpmine.wire import NumericAttribute, NumLiteral
from dpmine_server.compiled import compiled_counted_free, kernel_input
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import NumericColumn
from dpmine_server.operations.serenade_quality import KernelQuality, quality_of

__all__ = [
    "DEFAULT_GRID_POINTS",
    "Grid",
    "GridLiterals",
    "class_interval_counts",
    "grid_intervals",
    "grid_points",
    "numeric_rows",
    "pair_interval_quality",
    "threshold_grid",
]

DEFAULT_GRID_POINTS = 20


def grid_points(attribute: NumericAttribute) -> npt.NDArray[np.float64]:
    """The public grid: the owner's, else 20 equal-width interior points of [lo, hi]."""
    if attribute.grid:
        return np.asarray(attribute.grid, dtype=np.float64)
    steps = np.arange(1, DEFAULT_GRID_POINTS + 1, dtype=np.float64)
    return attribute.lo + (attribute.hi - attribute.lo) * steps / (DEFAULT_GRID_POINTS + 1)


def grid_intervals(points: npt.NDArray[np.float64]) -> list[tuple[float | None, float | None]]:
    """Every (lower, upper) on the grid with lower ≤ upper, either unbounded, not both."""
    values: list[float | None] = [float(p) for p in points]
    lowers: list[float | None] = [None, *values]
    uppers: list[float | None] = [*values, None]
    return [
        (low, high)
        for low in lowers
        for high in uppers
        if not (low is None and high is None) and (low is None or high is None or low <= high)
    ]


def numeric_rows(
    column: NumericColumn, lower: float | None, upper: float | None, negated: bool
) -> Bitset:
    rows = column.range_bitset(lower, upper)
    return column.present - rows if negated else rows


class GridLiterals(Sequence[NumLiteral]):
    """The literals of one attribute's grid intervals at one polarity, each built when it is
    read. A draw over a grid reads the count and then one literal, the drawn one; building all
    of them up front (2 × 230 pydantic objects per attribute) took 0.19 s of the 0.22 s that the
    first ``serenade.extend_one`` call on a 48-numeric-attribute table took (public values
    only: the attribute's name and the grid's intervals)."""

    __slots__ = ("_attribute", "_intervals", "_negated")

    def __init__(
        self, attribute: str, intervals: Sequence[tuple[float | None, float | None]], negated: bool
    ) -> None:
        self._attribute = attribute
        self._intervals = intervals
        self._negated = negated

    def __len__(self) -> int:
        return len(self._intervals)

    @overload
    def __getitem__(self, index: int) -> NumLiteral: ...
    @overload
    def __getitem__(self, index: slice) -> list[NumLiteral]: ...
    def __getitem__(self, index: int | slice) -> NumLiteral | list[NumLiteral]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        lower, upper = self._intervals[index]
        return NumLiteral(
            attribute=self._attribute, lower=lower, upper=upper, negated=self._negated
        )

    def __iter__(self) -> Iterator[NumLiteral]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True, slots=True)
class Grid:
    """Public grid intervals of one numeric attribute, their literals, each row's cell."""

    intervals: list[tuple[float | None, float | None]]
    literals: dict[bool, GridLiterals]  # by polarity (negated?)
    low_cells: npt.NDArray[np.int64]
    high_cells: npt.NDArray[np.int64]
    cells: npt.NDArray[np.int64]
    n_cells: int
    #: Present rows in the first k cells, k = 0 … n_cells (an interval's support by one
    #: difference).
    present_prefix: npt.NDArray[np.int64]

    def nbytes(self) -> int:
        """Estimated memory (the arrays; intervals and literals are public)."""
        arrays = (self.low_cells, self.high_cells, self.cells, self.present_prefix)
        return int(sum(array.nbytes for array in arrays))


def threshold_grid(column: NumericColumn, attribute: NumericAttribute) -> Grid:
    """The grid of a numeric attribute over its column, cached on the column."""
    grid = tuple(attribute.grid) if attribute.grid else None
    key = ("serenade.grid", attribute.name, attribute.lo, attribute.hi, grid)
    return column.derived.get_or_build(
        key,
        lambda: grid_for(column, attribute.name, attribute.lo, attribute.hi, grid),
        nbytes=Grid.nbytes,
    )


def grid_for(
    column: NumericColumn, name: str, lo: float, hi: float, grid: tuple[float, ...] | None
) -> Grid:
    points = grid_points(
        NumericAttribute(name=name, lo=lo, hi=hi, grid=list(grid) if grid else None)
    )
    intervals = grid_intervals(points)
    index = {float(p): k for k, p in enumerate(points)}
    lows = [0 if low is None else 2 * index[low] + 1 for low, _high in intervals]
    highs = [2 * len(points) if high is None else 2 * index[high] + 1 for _low, high in intervals]
    cells = np.empty(column.values.size, dtype=np.int64)
    values = np.asarray(column.values, dtype=np.float64)
    if grid is None and hi > lo:  # the default grid: equal widths, a row's cell found by a guess
        _uniform_grid_cells(values, column.present.words, (points, lo, hi), cells)
    else:
        _grid_cells(values, column.present.words, points, cells)
    literals = {negated: GridLiterals(name, intervals, negated) for negated in (False, True)}
    n_cells = 2 * len(points) + 1
    per_cell = np.bincount(cells[cells >= 0], minlength=n_cells)
    return Grid(
        intervals=intervals,
        literals=literals,
        low_cells=np.asarray(lows, dtype=np.int64),
        high_cells=np.asarray(highs, dtype=np.int64),
        cells=cells,
        n_cells=n_cells,
        present_prefix=np.concatenate([[0], np.cumsum(per_cell)]).astype(np.int64),
    )


@compiled_counted_free
def _uniform_grid_cells(
    values: npt.NDArray[np.float64],
    present: npt.NDArray[np.uint64],
    grid: tuple[npt.NDArray[np.float64], float, float],
    out: npt.NDArray[np.int64],
) -> None:
    """:func:`_grid_cells` for points spread evenly over [lo, hi] (``grid`` = (points, lo,
    hi), lo < hi, the values clipped to it): the number of points below a value is guessed
    as ⌊(v − lo)·(size + 1)/(hi − lo)⌋ (clamped), then corrected by stepping down while the
    point below is ≥ v and up while the point at it is < v. The steps keep "every point
    before ``low`` is < v" and stop at the first point ≥ v, so the count is exact whatever
    the guess; on an equal-width grid the guess is off by at most one or two steps of
    rounding, so a row costs O(1) (4.9 ns against 11 for the binary search over 20 points)."""
    points, lo, hi = grid
    size = points.size
    scale = (size + 1) / (hi - lo)
    for row in range(values.size):
        if not (present[row >> 6] >> np.uint64(row & 63)) & np.uint64(1):
            out[row] = -1
            continue
        value = values[row]
        low = min(max(int((value - lo) * scale), 0), size)
        while low > 0 and points[low - 1] >= value:
            low -= 1
        while low < size and points[low] < value:
            low += 1
        out[row] = 2 * low + np.int64(low < size and points[low] == value)


@compiled_counted_free
def _grid_cells(
    values: npt.NDArray[np.float64],
    present: npt.NDArray[np.uint64],
    points: npt.NDArray[np.float64],
    out: npt.NDArray[np.int64],
) -> None:
    """Each row's grid cell: 2k + 1 when its value is the k-th point, 2k when k points lie
    below it and it is none of them, −1 when it is missing (bit r % 64 of ``present[r //
    64]`` clear); that is ``searchsorted(points, v, "left") + searchsorted(points, v,
    "right")`` on the sorted public points (at least one).

    A binary search for the first point ≥ v, every row's step in one pass over the rows:
    the steps' count depends on the public points only, and a row's steps are independent of
    the other rows' (one search a row at a time waits on each comparison: 25 ns a row
    against 7 over 20 points). Throughout, the answer lies in [low, low + length] and
    low + length ≤ size, so every index read is a point."""
    size, rows = points.size, values.size
    for row in range(rows):
        out[row] = 0
    length = size
    while length > 1:
        half = length >> 1
        for row in range(rows):
            out[row] += half * np.int64(points[out[row] + half - 1] < values[row])
        length -= half
    for row in range(rows):
        value = values[row]
        low = out[row] + np.int64(points[out[row]] < value)
        equal = np.int64(low < size and points[min(low, size - 1)] == value)
        present_bit = (present[row >> 6] >> np.uint64(row & 63)) & np.uint64(1)
        out[row] = 2 * low + equal if present_bit else -1


def class_interval_counts(grid: Grid, x: Bitset, y: Bitset) -> npt.NDArray[np.int64]:
    """For each polarity (0: the interval, 1: negated, the present rows outside it), row
    class k = 2·[row ∈ x] + [row ∈ y] (0: neither, 1: y only, 2: x only, 3: both) and grid
    interval, the class's rows in the literal, [2, 4, intervals].

    One compiled pass over the rows (:func:`_class_cell_counts`, reading the packed words)
    counts each class's rows per grid cell, then an interval's count is a difference of prefix
    sums over its cells, and its negation's the class's present rows less that. Exact: a
    present row lies in exactly one cell and one class, and an interval is a run of cells
    (tests/operations/test_serenade_thresholds.py checks every interval, polarity and class
    against the literal's rows). Any mask made of x and y by intersection, union and
    complement is a union of classes, so one pass serves every extension operator and
    polarity."""
    width = grid.n_cells + 1  # slot 0 gathers the missing rows (cell −1)
    flat = np.zeros(4 * width, dtype=np.int64)
    _class_cell_counts(grid.cells, x.words, y.words, width, flat)
    per_cell = flat.reshape(4, width)[:, 1:]
    prefix = np.concatenate([np.zeros((4, 1), dtype=np.int64), np.cumsum(per_cell, 1)], 1)
    inside = prefix[:, grid.high_cells + 1] - prefix[:, grid.low_cells]
    return np.stack([inside, prefix[:, -1:] - inside]).astype(np.int64, copy=False)


@compiled_counted_free
def _class_cell_counts(
    cells: npt.NDArray[np.int64],
    x: npt.NDArray[np.uint64],
    y: npt.NDArray[np.uint64],
    width: int,
    out: npt.NDArray[np.int64],
) -> None:
    """``out[k · width + cell + 1] += 1`` for every row, k = 2·(its bit in x) + its bit in y
    (row r: bit r % 64 of word r // 64); a missing row (cell −1) lands in slot 0 of its
    class. ``out`` starts at zero."""
    rows = cells.size
    for word in range(x.size):
        x_word, y_word = x[word], y[word]
        base = word << 6
        for bit in range(min(64, rows - base)):
            shift = np.uint64(bit)
            k = np.int64(((x_word >> shift) & np.uint64(1)) << np.uint64(1)) + np.int64(
                (y_word >> shift) & np.uint64(1)
            )
            out[k * width + cells[base + bit] + 1] += 1


def pair_interval_quality(
    grid: Grid,
    left_prefix: npt.NDArray[np.int64],
    left_sizes: npt.NDArray[np.int64],
    *,
    negated: bool,
    quality: KernelQuality,
) -> npt.NDArray[np.float64]:
    """Q of every (left literal, grid interval) pair, [left literals, intervals] (interval
    negated: the present rows outside it), from each left literal's rows per grid cell as
    prefix sums over the cells (``left_prefix``, [left literals, cells + 1]) and its size
    |S_L| (``left_sizes``): |I| is the literal's rows in the interval's cells (a difference of
    prefix sums, or its present rows less that), |U| = |S_L| + |interval| − |I|. One compiled
    pass (:func:`_pair_interval_quality`) writes Q without the counts' arrays; the counts are
    those of the literals' row sets (tests/operations/test_serenade.py), and Q is
    :func:`~dpmine_server.operations.serenade_quality.quality_of` of them."""
    out = np.empty((left_prefix.shape[0], grid.low_cells.size), dtype=np.float64)
    _pair_interval_quality(
        (kernel_input(left_prefix, np.int64), kernel_input(left_sizes, np.int64)),
        (grid.low_cells, grid.high_cells, grid.present_prefix),
        negated,
        quality,
        out,
    )
    return out


@compiled_counted_free
def _pair_interval_quality(
    lefts: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
    intervals: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
    negated: bool,
    quality: KernelQuality,
    out: npt.NDArray[np.float64],
) -> None:
    """``out[l, k]`` = Q of left literal l paired with interval k (:func:`pair_interval_
    quality`); ``lefts`` = (prefix sums over the cells, sizes), ``intervals`` = (first
    cells, last cells, all present rows' prefix sums)."""
    left_prefix, left_sizes = lefts
    low, high, all_prefix = intervals
    mode, constants = quality
    last = left_prefix.shape[1] - 1
    total = all_prefix[all_prefix.size - 1]
    for left in range(left_prefix.shape[0]):
        size, row_total = left_sizes[left], left_prefix[left, last]
        for k in range(low.size):
            inside = left_prefix[left, high[k] + 1] - left_prefix[left, low[k]]
            support = all_prefix[high[k] + 1] - all_prefix[low[k]]
            if negated:
                inside, support = row_total - inside, total - support
            out[left, k] = quality_of(
                float(inside), float(size + support - inside), constants, mode
            )
