"""Numeric thresholds of Serenade's literals (ALGORITHMS.md §1.4): the continuous base measure
and the public grid.

* Continuous: each bound is unbounded with probability ½, otherwise a uniform point of the
  public lattice of [lo, hi]; pairs have a ≤ b and are not both unbounded. A released bound is a
  lattice point uniform inside its cell (:mod:`dpmine_server.dp.lattice`), never a data value
  nor arithmetic on one.
* Grid: the owner's grid or 20 equal-width interior points; every (lower, upper) interval of
  grid points (either unbounded, not both) is a discrete candidate. Rows are binned once per
  attribute so the support counts of every interval come from prefix sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpmine.wire import NumericAttribute, NumLiteral
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import NumericColumn
from dpmine_server.dp.lattice import LatticeCells, PublicLattice

__all__ = [
    "DEFAULT_GRID_POINTS",
    "ContinuousCells",
    "Grid",
    "continuous_cells",
    "grid_intervals",
    "grid_points",
    "interval_counts",
    "numeric_rows",
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


@dataclass(frozen=True, slots=True)
class Grid:
    """Public grid intervals of one numeric attribute, their literals, each row's cell."""

    intervals: list[tuple[float | None, float | None]]
    literals: dict[bool, list[NumLiteral]]  # by polarity (negated?)
    low_cells: npt.NDArray[np.int64]
    high_cells: npt.NDArray[np.int64]
    cells: npt.NDArray[np.int64]
    n_cells: int

    def nbytes(self) -> int:
        """Estimated memory (the arrays; intervals and literals are public)."""
        return int(self.low_cells.nbytes + self.high_cells.nbytes + self.cells.nbytes)


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
    present = column.present.to_bool_array()
    values = np.where(present, column.values, 0.0)
    cells = np.searchsorted(points, values, "left") + np.searchsorted(points, values, "right")
    literals = {
        negated: [
            NumLiteral(attribute=name, lower=low, upper=high, negated=negated)
            for low, high in intervals
        ]
        for negated in (False, True)
    }
    return Grid(
        intervals=intervals,
        literals=literals,
        low_cells=np.asarray(lows, dtype=np.int64),
        high_cells=np.asarray(highs, dtype=np.int64),
        cells=np.where(present, cells, -1).astype(np.int64),
        n_cells=2 * len(points) + 1,
    )


def interval_counts(grid: Grid, rows: Bitset, *, negated: bool) -> npt.NDArray[np.int64]:
    """|rows ∩ literal| for every grid interval (literal negated: present outside it)."""
    cells = grid.cells[rows.to_bool_array()]
    per_cell = np.bincount(cells[cells >= 0], minlength=grid.n_cells)
    prefix = np.concatenate([[0], np.cumsum(per_cell)])
    inside = prefix[grid.high_cells + 1] - prefix[grid.low_cells]
    return np.asarray(prefix[-1] - inside if negated else inside, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class ContinuousCells:
    """The cell pairs of §1.4 for one numeric attribute: distinct present values v_1 < … < v_V,
    lower cells a ∈ {atom, 1 … V+1} and upper cells b ∈ {0 … V, atom}, their base measure on the
    public lattice and, for a row mask, the number of its rows each pair selects. Released bounds
    are lattice points (:mod:`dpmine_server.dp.lattice`), never arithmetic on a value."""

    values: npt.NDArray[np.float64]
    value_index: npt.NDArray[np.int64]  # per row: 1 … V, or 0 when missing
    lattice: LatticeCells

    @property
    def size(self) -> int:
        """V, the number of distinct present values."""
        return int(self.values.size)

    def nbytes(self) -> int:
        """Estimated memory of the arrays (the public lattice's points are not counted)."""
        edges = self.lattice.lower_edges.nbytes + self.lattice.upper_edges.nbytes
        return int(self.values.nbytes + self.value_index.nbytes + edges)

    def log_mass(self, lower: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """log μ of the pairs (a, b) for lower cells ``lower`` (rows) and every upper cell b."""
        return self.lattice.log_mass(lower)

    def prefix(self, rows: Bitset) -> npt.NDArray[np.int64]:
        """P[i] = rows of the mask whose value index is ≤ i (i = 0 … V)."""
        indices = self.value_index[rows.to_bool_array()]
        counts = np.bincount(indices[indices > 0], minlength=self.size + 1)
        return np.asarray(np.cumsum(counts), dtype=np.int64)

    def selected(
        self, prefix: npt.NDArray[np.int64], lower: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """Rows of the mask (given by its prefix) that each pair (a in ``lower``, every b)
        selects: values with index in [max(a, 1), b] (b = V for the upper atom)."""
        size = self.size
        start = np.maximum(lower, 1)[:, None]
        end = np.minimum(np.arange(size + 2), size)[None, :]
        count = prefix[end] - prefix[np.minimum(start - 1, size)]
        return np.asarray(np.where(start <= end, count, 0), dtype=np.int64)

    def draw(
        self, lower: int, upper: int, rng: np.random.Generator
    ) -> tuple[float | None, float | None]:
        """Released bounds: uniform lattice points of the pair of cells (§1.4 on the lattice)."""
        return self.lattice.draw(lower, upper, rng)


def continuous_cells(column: NumericColumn, lattice: PublicLattice) -> ContinuousCells:
    """The §1.4 cells of a numeric column (all present values are cut-points), cached on the
    column."""
    return column.derived.get_or_build(
        ("serenade.continuous_cells", lattice),
        lambda: _build_continuous_cells(column, lattice),
        nbytes=ContinuousCells.nbytes,
    )


def _build_continuous_cells(column: NumericColumn, lattice: PublicLattice) -> ContinuousCells:
    present = column.present.to_bool_array()
    values = np.unique(column.values[present])
    index = np.zeros(present.size, dtype=np.int64)
    index[present] = np.searchsorted(values, column.values[present]) + 1
    return ContinuousCells(
        values=values, value_index=index, lattice=LatticeCells.build(lattice, values)
    )
