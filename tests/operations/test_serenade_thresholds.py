"""The public grid of Serenade's numeric literals (ALGORITHMS.md §1.4,
operations/serenade_thresholds.py): literals built when read are the eager ones."""

from __future__ import annotations

import numpy as np

from dpmine.wire import NumericAttribute, NumLiteral
from dpmine_server.data.columns import NumericColumn
from dpmine_server.operations.serenade_thresholds import (
    GridLiterals,
    grid_intervals,
    grid_points,
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
