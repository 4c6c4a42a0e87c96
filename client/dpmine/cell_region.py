"""Ranges of sums of the four true cells, and the sub-boxes they leave (issue #21).

A joint box (:class:`dpmine.intervals.CellBox`) holds each true cell E11, E10, E01, E00 in a
range, and may also hold signed sums of them in ranges: D = E10 + E01, the balance
E11 − E10 − E01 and the agreement E11 + E00 − E10 − E01. Each such sum of released cells has its
own noise, a sum of independent noises, whose range is much narrower than the cells' ranges
added. The box's corners let every cell reach its end at once (E11 low with E10 and E01 high);
the sums' ranges cut those corners off. The functions of :mod:`dpmine.intervals` and
:mod:`dpmine.box_p_value` bound a statistic over the *region*: the tables of the box whose sums
are in their ranges. A bound over a set that holds the region is a bound over the region.

:func:`narrow` shrinks boxes towards the region by bound propagation. Proof, for one range
Σ cᵢ·Eᵢ ∈ [L, H] (cᵢ ∈ {−1, 0, 1}) and a table of the region in the box
[lo, hi]: for a cell i with cᵢ ≠ 0, cᵢ·Eᵢ = Σ cⱼ·Eⱼ − Σ_{j ≠ i} cⱼ·Eⱼ lies in
[L − Σ_{j ≠ i} max cⱼ·Eⱼ, H − Σ_{j ≠ i} min cⱼ·Eⱼ], the max and min over the box. So every
table of the region in the box is in the narrowed box; repeating the step keeps that. When a
narrowed range is empty, or a sum's range cannot meet [L, H] over the box, the box holds no
table of the region. With ``integer``, the ends are rounded inwards to integers: true cells
are integers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "AGREEMENT",
    "BALANCE",
    "DIFFERENCE",
    "NARROW_ROUNDS",
    "CellSum",
    "interval_vertices",
    "narrow",
]

FloatArray = npt.NDArray[np.float64]

#: E10 + E01: the cells outside the intersection, |U| − |I|.
DIFFERENCE = (0, 1, 1, 0)
#: E11 − E10 − E01: the intersection less the rows on one side only.
BALANCE = (1, -1, -1, 0)
#: E11 + E00 − E10 − E01: the rows on which the two sides agree less those on which they differ.
AGREEMENT = (1, -1, -1, 1)
#: Passes of :func:`narrow` over the ranges (each pass only narrows; three settle the boxes
#: of the tests and of the miners' releases to within a count).
NARROW_ROUNDS = 3
#: Slack on comparisons of real ends (the ends are integers or sums of a few integers).
_SLACK = 1e-9


@dataclass(frozen=True, slots=True)
class CellSum:
    """The range [``low``, ``high``] of Σ cᵢ·Eᵢ over the cells (E11, E10, E01, E00), with
    ``coefficients`` cᵢ ∈ {−1, 0, 1}."""

    coefficients: tuple[int, int, int, int]
    low: float
    high: float

    def holds(self, tables: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which rows of ``tables`` (E11, E10, E01, E00) have their sum in the range."""
        values = tables @ np.asarray(self.coefficients, dtype=np.int64)
        return (values >= self.low - _SLACK) & (values <= self.high + _SLACK)


def narrow(
    lows: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    highs: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    sums: Sequence[CellSum],
    *,
    integer: bool = False,
    rounds: int = NARROW_ROUNDS,
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Boxes (rows of ``lows``/``highs``: E11, E10, E01, E00) narrowed in ``rounds`` passes
    towards the tables of theirs whose ``sums`` are in range: each keeps every such table
    (module docstring: proof). Also which boxes can hold such a table at all (``False``: none
    can; its narrowed ends are then meaningless)."""
    low_columns = [np.array(lows[:, i], dtype=np.float64) for i in range(4)]
    high_columns = [np.array(highs[:, i], dtype=np.float64) for i in range(4)]
    if integer:
        low_columns = [np.ceil(column - _SLACK) for column in low_columns]
        high_columns = [np.floor(column + _SLACK) for column in high_columns]
    for _ in range(rounds if sums else 0):
        for cell_sum in sums:
            _narrow_once(low_columns, high_columns, cell_sum, integer=integer)
    feasible = np.ones(len(lows), dtype=bool)
    for low, high in zip(low_columns, high_columns, strict=True):
        feasible &= low <= high + _SLACK
    for cell_sum in sums:
        least, largest = _sum_ends(low_columns, high_columns, cell_sum.coefficients)
        feasible &= (least <= cell_sum.high + _SLACK) & (largest >= cell_sum.low - _SLACK)
    return np.stack(low_columns, axis=1), np.stack(high_columns, axis=1), feasible


def _sum_ends(
    lows: list[FloatArray], highs: list[FloatArray], coefficients: tuple[int, int, int, int]
) -> tuple[FloatArray, FloatArray]:
    """The least and largest Σ cᵢ·Eᵢ over each box."""
    least = np.zeros(len(lows[0]))
    largest = np.zeros(len(lows[0]))
    for low, high, c in zip(lows, highs, coefficients, strict=True):
        if c > 0:
            least, largest = least + low, largest + high
        elif c < 0:
            least, largest = least - high, largest - low
    return least, largest


def _narrow_once(
    lows: list[FloatArray], highs: list[FloatArray], cell_sum: CellSum, *, integer: bool
) -> None:
    """One propagation step of ``cell_sum`` over every cell it holds, in place: cᵢ·Eᵢ is in
    [L − (the others' largest sum), H − (the others' least sum)]; the sums' ends are kept up to
    date as each cell narrows."""
    least, largest = _sum_ends(lows, highs, cell_sum.coefficients)
    for i, c in enumerate(cell_sum.coefficients):
        if c == 0:
            continue
        own_least, own_largest = (lows[i], highs[i]) if c > 0 else (-highs[i], -lows[i])
        floor = cell_sum.low - (largest - own_largest)
        ceiling = cell_sum.high - (least - own_least)
        low, high = (floor, ceiling) if c > 0 else (-ceiling, -floor)
        if integer:
            low, high = np.ceil(low - _SLACK), np.floor(high + _SLACK)
        lows[i] = np.maximum(lows[i], low)
        highs[i] = np.minimum(highs[i], high)
        new_least, new_largest = (lows[i], highs[i]) if c > 0 else (-highs[i], -lows[i])
        least = least + (new_least - own_least)
        largest = largest + (new_largest - own_largest)


def interval_vertices(
    e11: tuple[float, float], difference: tuple[float, float], balance: tuple[float, float]
) -> list[tuple[float, float]]:
    """The vertices (E11, D) of the polygon E11 ∈ ``e11``, D ∈ ``difference``,
    E11 − D ∈ ``balance`` (empty when the polygon is). A function quasi-linear in (E11, D),
    such as J = E11/(E11 + D), takes its extremes over the polygon at these vertices: the
    polygon is convex and bounded, and a linear-fractional function's level sets are lines.

    Each vertex is where two of the six boundary lines cross and that is inside the polygon;
    every vertex of a bounded convex polygon is such a crossing."""
    (a0, a1), (d0, d1), (g0, g1) = e11, difference, balance
    points: list[tuple[float, float]] = []
    for x in (a0, a1):
        points += [(x, d0), (x, d1), (x, x - g0), (x, x - g1)]
    for y in (d0, d1):
        points += [(y + g0, y), (y + g1, y)]
    inside = [
        (x, y)
        for x, y in points
        if math.isfinite(x)
        and math.isfinite(y)
        and a0 - _SLACK <= x <= a1 + _SLACK
        and d0 - _SLACK <= y <= d1 + _SLACK
        and g0 - _SLACK <= x - y <= g1 + _SLACK
    ]
    return inside
