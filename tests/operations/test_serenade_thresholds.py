"""The public grid of Serenade's numeric literals (ALGORITHMS.md §1.4,
operations/serenade_thresholds.py): literals built when read are the eager ones."""

from __future__ import annotations

import numpy as np
import pytest

from dpmine.wire import NumericAttribute, NumLiteral
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import NumericColumn
from dpmine_server.operations.serenade_quality import counts_quality, kernel_quality
from dpmine_server.operations.serenade_thresholds import (
    GridLiterals,
    class_interval_counts,
    grid_intervals,
    grid_points,
    pair_interval_quality,
    threshold_grid,
)


def test_grid_literals_read_as_the_list_of_every_interval_at_each_polarity() -> None:
    attribute = NumericAttribute(name="age", lo=0.0, hi=100.0, grid=[18.0, 40.0, 65.0])
    intervals = grid_intervals(grid_points(attribute))
    column = NumericColumn.from_values(
        "age", np.array([3.0, 18.0, 50.0, np.nan, 90.0]), lo=0.0, hi=100.0
    )
    grid = threshold_grid(column, attribute)
    assert grid.intervals == intervals
    for negated in (False, True):
        literals = grid.literals[negated]
        eager = [
            NumLiteral(attribute="age", lower=low, upper=high, negated=negated)
            for low, high in intervals
        ]
        assert isinstance(literals, GridLiterals)
        assert len(literals) == len(eager) == 12  # 3 open below, 3 open above, 6 closed
        assert list(literals) == eager
        assert [literals[i] for i in range(-len(eager), 0)] == eager
        assert literals[2:7:2] == eager[2:7:2]
        assert literals.index(eager[5]) == 5
        assert eager[-1] in literals


def _column_with_ties(
    rng: np.random.Generator, rows: int, points: np.ndarray
) -> tuple[NumericAttribute, NumericColumn]:
    """Values drawn from the grid points themselves, from between them and outside [lo, hi]
    (clipped to the bounds), a tenth of them missing."""
    on_points = rng.choice(points, rows)
    anywhere = rng.uniform(-0.2, 1.2, rows)
    values = np.where(rng.random(rows) < 0.3, on_points, anywhere)
    values[rng.random(rows) < 0.1] = np.nan
    attribute = NumericAttribute(name="v", lo=0.0, hi=1.0, grid=sorted({*points.tolist()}))
    return attribute, NumericColumn.from_values("v", values, lo=0.0, hi=1.0)


@pytest.mark.parametrize("size", [1, 2, 3, 20, 57, 1000])
def test_grid_cells_are_the_searchsorted_cells_of_every_present_row(size: int) -> None:
    """Each row's cell, found by the compiled search, is searchsorted left + right over the
    points (−1 for a missing value), for grids of 1 to 1,000 points and row counts that are
    not multiples of 64."""
    rng = np.random.default_rng(size)
    points = np.unique(np.round(rng.uniform(0.0, 1.0, size), 2 if size < 50 else 4))
    rows = int(rng.integers(1, 700))
    attribute, column = _column_with_ties(rng, rows, points)
    grid = threshold_grid(column, attribute)
    grid_at = np.asarray(attribute.grid)
    values = np.nan_to_num(column.values)
    expected = np.searchsorted(grid_at, values, "left") + np.searchsorted(grid_at, values, "right")
    expected[~column.present.to_bool_array()] = -1
    np.testing.assert_array_equal(grid.cells, expected)


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 1.0), (-3.7, 12.25), (1e-9, 2e-9), (0.0, 1e6)])
def test_default_grid_cells_are_the_searchsorted_cells_of_every_present_row(
    lo: float, hi: float
) -> None:
    """On the default (equal-width) grid, each row's cell, found from a guess and exact
    steps, is searchsorted left + right over the points, for values at the points, one ulp
    either side of them, at the bounds and in between, a tenth of them missing."""
    rng = np.random.default_rng(7)
    attribute = NumericAttribute(name="v", lo=lo, hi=hi)
    points = grid_points(attribute)
    values = np.concatenate(
        [
            points,
            np.nextafter(points, np.inf),
            np.nextafter(points, -np.inf),
            [lo, hi, np.nextafter(lo, np.inf), np.nextafter(hi, -np.inf)],
            rng.uniform(lo, hi, 500),
        ]
    )
    values[rng.random(values.size) < 0.1] = np.nan
    column = NumericColumn.from_values("v", values, lo=lo, hi=hi)
    grid = threshold_grid(column, attribute)
    clipped = np.nan_to_num(column.values)
    expected = np.searchsorted(points, clipped, "left") + np.searchsorted(points, clipped, "right")
    expected[~column.present.to_bool_array()] = -1
    np.testing.assert_array_equal(grid.cells, expected)


@pytest.mark.parametrize("seed", range(6))
def test_class_interval_counts_are_the_literal_rows_of_each_class(seed: int) -> None:
    """For every grid interval, polarity and row class of (x, y), the count equals the rows
    of the literal (``NumericColumn.literal``, missing values false either way) in that
    class, on exact data with ties at the points."""
    rng = np.random.default_rng(100 + seed)
    points = np.unique(np.round(rng.uniform(0.0, 1.0, int(rng.integers(1, 8))), 1))
    rows = int(rng.integers(1, 300))
    attribute, column = _column_with_ties(rng, rows, points)
    x = Bitset.from_bool_array(rng.random(rows) < 0.4)
    y = Bitset.from_bool_array(rng.random(rows) < 0.6)
    classes = [~(x | y), y - x, x - y, x & y]
    grid = threshold_grid(column, attribute)
    counts = class_interval_counts(grid, x, y)
    assert counts.shape == (2, 4, len(grid.intervals))
    for negated in (False, True):
        for k, (lower, upper) in enumerate(grid.intervals):
            rows_of = column.literal(lower, upper, negated=negated)
            for cls, mask in enumerate(classes):
                assert counts[int(negated), cls, k] == rows_of.count_and(mask)


@pytest.mark.parametrize("seed", range(4))
def test_pair_interval_quality_is_the_quality_of_each_pairs_exact_counts(seed: int) -> None:
    """Q of (left literal, grid interval) pairs from the left literals' rows per cell equals Q
    of |S_L ∩ ℓ| and the size of their union counted on the rows, ℓ the interval's literal
    (negated or not, missing values false either way), for every pair and each quality
    function."""
    rng = np.random.default_rng(200 + seed)
    points = np.unique(np.round(rng.uniform(0.0, 1.0, int(rng.integers(1, 6))), 1))
    rows = int(rng.integers(2, 250))
    attribute, column = _column_with_ties(rng, rows, points)
    grid = threshold_grid(column, attribute)
    lefts = [Bitset.from_bool_array(rng.random(rows) < p) for p in (0.1, 0.5, 0.9)]
    per_cell = np.stack(
        [
            np.bincount(
                grid.cells[left.to_bool_array() & (grid.cells >= 0)], minlength=grid.n_cells
            )
            for left in lefts
        ]
    )
    prefix = np.concatenate([np.zeros((3, 1), dtype=np.int64), np.cumsum(per_cell, 1)], 1)
    sizes = np.asarray([left.count() for left in lefts], dtype=np.int64)
    settings = [{}, {"s": 0.3, "x0": rows / 5}, {"s": 0.3, "x0": rows / 5, "y0": rows / 3}]
    for negated in (False, True):
        literal_rows = [column.literal(lo, hi, negated=negated) for lo, hi in grid.intervals]
        i = np.asarray([[left.count_and(r) for r in literal_rows] for left in lefts])
        u = np.asarray([[(left | r).count() for r in literal_rows] for left in lefts])
        for setting in settings:
            kernel = kernel_quality(rows, **setting)
            got = pair_interval_quality(grid, prefix, sizes, negated=negated, quality=kernel)
            expected = counts_quality(i.astype(np.int64), u.astype(np.int64), kernel)
            np.testing.assert_array_equal(got, expected)
