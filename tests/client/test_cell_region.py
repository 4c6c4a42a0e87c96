"""Ranges of signed sums of the four true cells and the boxes they narrow
(``dpmine.cell_region``, issue #21).

* Narrowing keeps every table of the region: by brute force over every integer table of 400
  random small boxes with random ranges of E10 + E01, E11 − E10 − E01 and E11 + E00 − E10 − E01,
  each table whose sums are in range lies in the narrowed box (integer and real ends), and a
  box said to hold none holds none.
* It narrows: a box whose corner (E11 low, E10 and E01 high) breaks the balance range loses it.
* The polygon of (E11, D) has the vertices where J takes its extremes.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpmine.cell_region import (
    AGREEMENT,
    BALANCE,
    DIFFERENCE,
    CellSum,
    interval_vertices,
    narrow,
)
from dpmine.wire.statistics import jaccard


def _random_case(rng: np.random.Generator) -> tuple[list[int], list[int], list[CellSum]]:
    lows = [int(rng.choice([0, 1, 5, 30])) + int(rng.integers(0, 6)) for _ in "abcd"]
    highs = [low + int(rng.integers(0, 7)) for low in lows]
    sums = []
    for coefficients in (DIFFERENCE, BALANCE, AGREEMENT):
        if rng.random() < 0.25:
            continue
        least = sum(
            min(c * lo, c * hi) for c, lo, hi in zip(coefficients, lows, highs, strict=True)
        )
        largest = sum(
            max(c * lo, c * hi) for c, lo, hi in zip(coefficients, lows, highs, strict=True)
        )
        low = int(rng.integers(least - 3, largest + 2))
        sums.append(CellSum(coefficients, low, low + int(rng.integers(0, 6))))
    return lows, highs, sums


@pytest.mark.parametrize("integer", [True, False])
def test_narrowing_keeps_every_table_of_the_region(integer: bool) -> None:
    """Every integer table of the box whose sums are in range lies in the narrowed box; a box
    called infeasible holds no such table; and some boxes do get narrower."""
    rng = np.random.default_rng(2611 + integer)
    narrowed_some = emptied_some = 0
    for _ in range(400):
        lows, highs, sums = _random_case(rng)
        got_lows, got_highs, feasible = narrow(
            np.array([lows], dtype=np.float64),
            np.array([highs], dtype=np.float64),
            sums,
            integer=integer,
        )
        tables = np.array(
            list(
                itertools.product(*(range(lo, hi + 1) for lo, hi in zip(lows, highs, strict=True)))
            ),
            dtype=np.int64,
        )
        inside = np.ones(len(tables), dtype=bool)
        for cell_sum in sums:
            inside &= cell_sum.holds(tables)
        region = tables[inside]
        if not feasible[0]:
            assert len(region) == 0, (lows, highs, sums)
            emptied_some += 1
            continue
        assert np.all(region >= got_lows[0] - 1e-9), (lows, highs, sums)
        assert np.all(region <= got_highs[0] + 1e-9), (lows, highs, sums)
        narrowed_some += bool(np.any(got_lows[0] > lows) or np.any(got_highs[0] < highs))
    assert narrowed_some >= 50, narrowed_some
    assert emptied_some >= 5, emptied_some


def test_the_balance_range_cuts_the_corner_of_a_wide_box() -> None:
    """E11 ∈ [100, 300], E10, E01 ∈ [0, 200] and E11 − E10 − E01 ≥ 150: E11 is at least 150
    and E10, E01 at most 150."""
    lows, highs, feasible = narrow(
        np.array([[100.0, 0.0, 0.0, 500.0]]),
        np.array([[300.0, 200.0, 200.0, 900.0]]),
        [CellSum(BALANCE, 150, 400)],
        integer=True,
    )
    assert feasible[0]
    assert lows[0].tolist() == [150, 0, 0, 500]
    assert highs[0].tolist() == [300, 150, 150, 900]


def test_j_takes_its_extremes_over_the_polygon_at_its_vertices() -> None:
    """On 200 random polygons (E11 range, D range, E11 − D range) the least and largest J
    over every integer point equal those over the vertices."""
    rng = np.random.default_rng(7)
    checked = 0
    for _ in range(200):
        a0 = int(rng.integers(0, 30))
        a1 = a0 + int(rng.integers(0, 12))
        d0 = int(rng.integers(0, 30))
        d1 = d0 + int(rng.integers(0, 12))
        g0 = int(rng.integers(a0 - d1 - 2, a1 - d0 + 2))
        g1 = g0 + int(rng.integers(0, 10))
        points = [(x, y) for x in range(a0, a1 + 1) for y in range(d0, d1 + 1) if g0 <= x - y <= g1]
        vertices = interval_vertices((a0, a1), (d0, d1), (g0, g1))
        if not points:
            continue
        checked += 1
        values = [jaccard(x, x + y) for x, y in points]
        at_vertices = [jaccard(x, x + y) for x, y in vertices]
        assert min(at_vertices) == pytest.approx(min(values))
        assert max(at_vertices) == pytest.approx(max(values))
    assert checked >= 100
