"""The p-value's upper end over a box by branch and bound (``dpmine.box_p_value``, issue #21).

* The bound holds: by brute force over every integer table of 300 random small boxes, with and
  without a range of E10 + E01, no table's exact §1.3 p-value is above it.
* It is tight where the old corner bound was not: on wide boxes of noisy tree releases on
  mammals, within a factor 20 of the largest p-value found on a grid of the box's tables,
  where the corner bound read 10³ to 10⁷ times more.
* The pieces: the halves partition their parent's integer tables; scipy's tails agree with
  the exact ``binomial_upper_tail`` far below the slack the bound adds; an upper end already
  known is never raised.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest

from dpmine.box_p_value import (
    P_VALUE_FLOOR,
    TAIL_SLACK,
    _halves,
    corner_bounds,
    p_value_upper,
    table_p_values,
)
from dpmine.intervals import CellBox, Interval, p_value_decision, p_value_range, sum_box
from dpmine.wire.statistics import binomial_upper_tail, p_value


def _random_box(rng: np.random.Generator, *, with_difference: bool) -> CellBox:
    lows = [int(rng.choice([0, 1, 4, 20, 60])) + int(rng.integers(0, 6)) for _ in "abcd"]
    widths = [int(rng.integers(0, 9)) for _ in "abcd"]
    e11, e10, e01, e00 = (
        Interval(low, low + width) for low, width in zip(lows, widths, strict=True)
    )
    difference = None
    if with_difference:
        d_low = lows[1] + lows[2] + int(rng.integers(0, widths[1] + widths[2] + 1))
        difference = Interval(d_low, d_low + int(rng.integers(0, 5)))
    return CellBox(e11, e10, e01, e00, difference=difference)


@pytest.mark.parametrize("with_difference", [False, True])
def test_the_upper_end_holds_every_table_of_the_box(with_difference: bool) -> None:
    """Every integer table of 300 random boxes (and, with a range of D, every one whose
    E10 + E01 is in it) has its exact p-value at or below the refined upper end, and the
    refined end is never above the corner bound of the whole box."""
    rng = np.random.default_rng(2811 + with_difference)
    for _ in range(300):
        box = _random_box(rng, with_difference=with_difference)
        refined = p_value_range(box).high
        assert refined <= p_value_range(box, refine=False).high
        ranges = [
            range(round(cell.low), round(cell.high) + 1)
            for cell in (box.e11, box.e10, box.e01, box.e00)
        ]
        for a, b, c, d in itertools.product(*ranges):
            if not box.difference_low <= b + c <= box.difference_high:
                continue
            truth = p_value(a + b + c + d, a + b, a + c, a)
            assert truth <= refined * (1 + 1e-9), (box, a, b, c, d)


#: Joint boxes of noisy tree releases on mammals (E11, E10, E01, E00 and D ranges, from
#: AltMCMC runs at ε = 1), each with a result whose true p-value is below 10⁻¹⁹.
WIDE_BOXES = [
    ((404, 928), (0, 366), (0, 611), (974, 1874), (0, 751)),
    ((260, 784), (0, 495), (0, 450), (828, 1728), (0, 719)),
    ((338, 862), (0, 465), (0, 531), (788, 1688), (0, 770)),
    ((357, 881), (0, 536), (0, 436), (872, 1772), (0, 746)),
]


def _grid_maximum(ranges: tuple[tuple[int, int], ...]) -> float:
    """The largest p-value over a grid of about 40 steps per cell of the box's tables that
    meet D's range (a lower end of the box's maximum)."""
    grids = [np.arange(low, high + 1, max(1, (high - low) // 40)) for low, high in ranges[:4]]
    a, b, c, d = (axis.reshape(-1) for axis in np.meshgrid(*grids, indexing="ij"))
    tables = np.stack([a, b, c, d], axis=1)
    allowed = (b + c >= ranges[4][0]) & (b + c <= ranges[4][1])
    return float(table_p_values(tables[allowed]).max())


@pytest.mark.parametrize("ranges", WIDE_BOXES)
def test_the_upper_end_is_close_to_the_largest_p_value_of_a_wide_box(
    ranges: tuple[tuple[int, int], ...],
) -> None:
    """On wide boxes the corner bound of the whole box is 10³–10⁷ times the refined end; the
    refined end is at least the largest p-value on a grid of the box's tables and within a
    factor 20 of it (or at the floor below which nothing is refined)."""
    e11, e10, e01, e00 = (Interval(*r) for r in ranges[:4])
    box = CellBox(e11, e10, e01, e00, difference=Interval(*ranges[4]))
    refined, corner = p_value_range(box).high, p_value_range(box, refine=False).high
    grid = _grid_maximum(ranges)
    assert grid <= refined
    assert refined <= max(20 * grid, P_VALUE_FLOOR * (1 + TAIL_SLACK))
    assert corner >= 500 * refined


def test_the_halves_partition_their_parent() -> None:
    """Each cut keeps every integer table of its parent in exactly one child."""
    lows = np.array([[0, 3, 5, 7], [2, 2, 2, 2]], dtype=np.int64)
    highs = np.array([[4, 3, 9, 8], [2, 2, 2, 2]], dtype=np.int64)
    child_low, child_high = _halves(lows, highs)
    for parent in range(2):
        tables = set(
            itertools.product(
                *(range(int(lows[parent, i]), int(highs[parent, i]) + 1) for i in range(4))
            )
        )
        counted: list[tuple[int, ...]] = []
        for child in (parent, parent + 2):
            counted += itertools.product(
                *(range(int(child_low[child, i]), int(child_high[child, i]) + 1) for i in range(4))
            )
        assert sorted(counted) == sorted(tables)


def test_scipy_tails_agree_with_the_exact_binomial_tail() -> None:
    """``table_p_values`` (scipy's tail) against ``binomial_upper_tail`` on 400 tables from
    p = 1 to 10⁻²⁰⁰: relative error far below ``TAIL_SLACK``."""
    rng = np.random.default_rng(5)
    tables = np.stack(
        [
            rng.integers(1, 900, 400),
            rng.integers(0, 300, 400),
            rng.integers(0, 300, 400),
            rng.integers(0, 2000, 400),
        ],
        axis=1,
    ).astype(np.int64)
    fast = table_p_values(tables)
    for row, value in zip(tables, fast, strict=True):
        a, b, c, d = (int(v) for v in row)
        n = a + b + c + d
        exact = binomial_upper_tail(n, (a + b) / n * (a + c) / n, a)
        if exact > 1e-290:
            assert abs(value - exact) <= TAIL_SLACK / 10 * exact, (row, value, exact)


def test_a_known_upper_end_is_never_raised_and_a_box_without_tables_keeps_it() -> None:
    """``known`` caps the answer; a box that holds no integer table (or whose E10 + E01 cannot
    meet D's range) returns it unchanged."""
    box = CellBox(Interval(10, 30), Interval(0, 20), Interval(0, 20), Interval(50, 90))
    assert p_value_upper(box, known=1e-3) <= 1e-3
    empty = CellBox(Interval(10.2, 10.8), Interval(0, 2), Interval(0, 2), Interval(5, 6))
    assert p_value_upper(empty, known=0.5) == 0.5
    unreachable = CellBox(
        Interval(10, 12), Interval(0, 2), Interval(0, 2), Interval(5, 6), difference=Interval(9, 9)
    )
    assert p_value_upper(unreachable, known=0.25) == 0.25


def test_corner_bounds_bound_the_tables_of_their_sub_box() -> None:
    """One sub-box's bound is at least every table's p-value in it (the module's proof, on
    50 random sub-boxes)."""
    rng = np.random.default_rng(9)
    for _ in range(50):
        lows = rng.integers(0, 40, 4).astype(np.int64)
        highs = lows + rng.integers(0, 5, 4).astype(np.int64)
        bound = float(corner_bounds(lows[None], highs[None])[0])
        tables: npt.NDArray[np.int64] = np.array(
            list(
                itertools.product(*(range(lo, hi + 1) for lo, hi in zip(lows, highs, strict=True)))
            ),
            dtype=np.int64,
        )
        assert float(table_p_values(tables).max()) <= bound * (1 + 1e-9)


def test_a_target_decides_a_box_that_the_default_search_leaves_open() -> None:
    """A mammals tree result (AltMCMC at ε = 1, true p below 10⁻³⁰): the default search stops
    after its rounds with an upper end of 7.6·10⁻⁶, above the run's α/m = 0.01/3200; aimed at
    that threshold (:func:`dpmine.intervals.p_value_decision`, as the significance test reads
    a run's intervals) it goes on and decides it below. Both ends are at least the largest
    p-value on a grid of the region's tables."""
    box = sum_box(
        (1147, 287, 136, 563),
        (64, 8, 8, 1),
        scale=9.0,
        miss=5e-8 * 5 / 7,
        difference=True,
        association=True,
    )
    threshold = 0.01 / 3200
    default = p_value_range(box).high
    with p_value_decision(threshold):
        decided = p_value_range(box).high
    assert decided <= threshold < default
    grids = [
        np.linspace(cell.low, cell.high, 30).round().astype(np.int64)
        for cell in (box.e11, box.e10, box.e01, box.e00)
    ]
    tables = np.stack([axis.reshape(-1) for axis in np.meshgrid(*grids, indexing="ij")], axis=1)
    for cell_sum in box.sums:
        tables = tables[cell_sum.holds(tables)]
    assert len(tables) > 1000
    assert float(table_p_values(tables).max()) <= decided
