"""Numeric thresholds of Serenade's literals (ALGORITHMS.md §1.4): the continuous base measure
and the public grid.

* Continuous: each bound is unbounded with probability ½, otherwise uniform on the public range
  [lo, hi]; pairs have a ≤ b and are not both unbounded. A draw from this measure is a
  threshold reported as drawn (uniform inside its cell), never a data value.
* Grid: the owner's grid or 20 equal-width interior points; every (lower, upper) interval of
  grid points (either unbounded, not both) is a discrete candidate. Rows are binned once per
  attribute so the support counts of every interval come from prefix sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from dpmine.wire import NumericAttribute, NumLiteral
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import NumericColumn

__all__ = [
    "DEFAULT_GRID_POINTS",
    "ContinuousCells",
    "Grid",
    "continuous_cells",
    "draw_threshold_pair",
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


def draw_threshold_pair(
    lo: float, hi: float, rng: np.random.Generator
) -> tuple[float | None, float | None]:
    """A draw from §1.4's base measure: each bound unbounded w.p. ½, else uniform on [lo, hi];
    conditioned on a ≤ b and not both unbounded."""
    while True:
        lower = None if rng.random() < 0.5 else float(lo + (hi - lo) * rng.random())
        upper = None if rng.random() < 0.5 else float(lo + (hi - lo) * rng.random())
        if lower is None and upper is None:
            continue
        if lower is not None and upper is not None and lower > upper:
            continue
        return lower, upper


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


def threshold_grid(column: NumericColumn, attribute: NumericAttribute) -> Grid:
    grid = tuple(attribute.grid) if attribute.grid else None
    return grid_for(column, attribute.name, attribute.lo, attribute.hi, grid)


@lru_cache(maxsize=512)
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
    lower cells a ∈ {atom, (v_{a−1}, v_a] for a = 1 … V+1} and upper cells
    b ∈ {[v_b, v_{b+1}) for b = 0 … V, atom} (v_0 = lo, v_{V+1} = hi), with the normalised base
    measure of each pair and, for a row mask, the number of its rows each pair selects."""

    values: npt.NDArray[np.float64]
    value_index: npt.NDArray[np.int64]  # per row: 1 … V, or 0 when missing
    lo: float
    hi: float

    @property
    def size(self) -> int:
        """V, the number of distinct present values."""
        return int(self.values.size)

    def bounds(self) -> npt.NDArray[np.float64]:
        """v_0 = lo, v_1 … v_V, v_{V+1} = hi."""
        return np.concatenate([[self.lo], self.values, [self.hi]])

    def log_mass(self, lower: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """log μ of the pairs (a, b) for lower cells ``lower`` (rows) and every upper cell b."""
        cuts = self.bounds()
        width = self.hi - self.lo
        size = self.size
        upper_length = np.diff(cuts)[: size + 1]  # b = 0 … V
        lower_length = np.diff(cuts)[np.maximum(lower - 1, 0)]  # a = 1 … V+1
        a = lower[:, None]
        b = np.arange(size + 2)[None, :]
        mass = np.zeros((lower.size, size + 2))
        bounded_upper = b <= size
        is_atom = a == 0
        upper_cell = np.broadcast_to(upper_length[np.minimum(b, size)] / width, mass.shape)
        lower_cell = np.broadcast_to((lower_length / width)[:, None], mass.shape)
        mass = np.where(is_atom & bounded_upper, 0.25 * upper_cell, mass)
        mass = np.where(~is_atom & ~bounded_upper, 0.25 * lower_cell, mass)
        both = ~is_atom & bounded_upper
        mass = np.where(both & (a <= b), 0.25 * lower_cell * upper_cell, mass)
        mass = np.where(both & (a - 1 == b), 0.125 * lower_cell * upper_cell, mass)
        with np.errstate(divide="ignore"):
            return np.asarray(np.log(mass / 0.625), dtype=np.float64)

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
        """Thresholds uniform inside the pair of cells (a ≤ b when both lie in one interval)."""
        cuts = self.bounds()
        size = self.size
        low = (
            None
            if lower == 0
            else float(cuts[lower - 1] + (cuts[lower] - cuts[lower - 1]) * rng.random())
        )
        high = (
            None
            if upper == size + 1
            else float(cuts[upper] + (cuts[upper + 1] - cuts[upper]) * rng.random())
        )
        if low is not None and high is not None and low > high:
            low, high = high, low  # same interval: the ordered pair of two uniforms
        return low, high


@lru_cache(maxsize=512)
def continuous_cells(column: NumericColumn, lo: float, hi: float) -> ContinuousCells:
    """The §1.4 cells of a numeric column (all present values are cut-points)."""
    present = column.present.to_bool_array()
    values = np.unique(column.values[present])
    index = np.zeros(present.size, dtype=np.int64)
    index[present] = np.searchsorted(values, column.values[present]) + 1
    return ContinuousCells(values=values, value_index=index, lo=lo, hi=hi)
