"""The public lattice of released thresholds (dp/lattice.py; DESIGN.md contract item 6, §1.4).

The cell measure is checked against brute force over every pair of lattice points, the draws
inside cells against uniformity (chi-square) and exact lattice membership."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chisquare

from dpmine.wire import NumericAttribute
from dpmine_server.dp.lattice import (
    LatticeCells,
    PublicLattice,
    draw_threshold_pair,
    public_lattice,
)
from dpmine_server.dp.rng import seeded_generator

SEEDED_P_VALUE = 1e-4


def brute_force_measure(points: list[float], values: list[float]) -> dict[tuple[int, int], float]:
    """P(cell pair) by enumerating the base measure's atoms: each bound unbounded w.p. ½ or a
    uniform point, a ≤ b, not both unbounded; cells a = 1 + #{v < x}, b = #{v ≤ y}."""
    size, count = len(values), len(points)
    lower_atom, upper_atom = 0, size + 1
    mass: dict[tuple[int, int], float] = {}
    for x in [None, *points]:
        for y in [None, *points]:
            if (x is None and y is None) or (x is not None and y is not None and x > y):
                continue
            weight = (0.5 if x is None else 0.5 / count) * (0.5 if y is None else 0.5 / count)
            a = lower_atom if x is None else bisect.bisect_left(values, x) + 1
            b = upper_atom if y is None else bisect.bisect_right(values, y)
            mass[(a, b)] = mass.get((a, b), 0.0) + weight
    total = sum(mass.values())
    return {cell: weight / total for cell, weight in mass.items()}


@pytest.mark.parametrize(
    "values",
    [[], [2.0], [0.0, 10.0], [1.3, 2.5, 2.6, 7.0], [4.9, 5.0, 5.1], [0.0, 0.1, 9.9, 10.0]],
)
def test_cell_measure_is_the_lattice_measure(values: list[float]) -> None:
    lattice = public_lattice(0.0, 10.0, 4)
    cells = LatticeCells.build(lattice, np.asarray(values, dtype=np.float64))
    expected = brute_force_measure(lattice.points.tolist(), values)
    lower = np.arange(len(values) + 2)
    log_mass = cells.log_mass(lower)
    for a, b in itertools.product(range(len(values) + 2), range(len(values) + 2)):
        want = expected.get((a, b), 0.0)
        got = math.exp(log_mass[a, b])
        assert got == pytest.approx(want, abs=1e-12), (a, b)


def test_draws_are_uniform_lattice_points_of_their_cells() -> None:
    lattice = public_lattice(-1.0, 3.0, 3)  # 9 points, step 0.5
    values = np.asarray([-0.2, 0.5, 1.7], dtype=np.float64)
    cells = LatticeCells.build(lattice, values)
    rng = seeded_generator(11)
    points = set(lattice.points.tolist())
    # Lower cell 3 = (0.5, 1.7] holds 1.0 and 1.5; upper cell 1 = [-0.2, 0.5) holds 0.0; the gap
    # (0.5, 1.7) holds 1.0 and 1.5: three ordered pairs.
    lows = Counter(cells.draw(3, 4, rng)[0] for _ in range(4_000))
    assert set(lows) == {1.0, 1.5}
    assert chisquare(list(lows.values())).pvalue > SEEDED_P_VALUE
    highs = Counter(cells.draw(0, 1, rng)[1] for _ in range(100))
    assert set(highs) == {0.0}
    same_gap = Counter(cells.draw(3, 2, rng) for _ in range(6_000))
    assert set(same_gap) == {(1.0, 1.0), (1.0, 1.5), (1.5, 1.5)}
    assert chisquare(list(same_gap.values())).pvalue > SEEDED_P_VALUE
    for low, high in same_gap:
        assert low in points
        assert high in points


def test_impossible_cell_pairs_are_refused() -> None:
    cells = LatticeCells.build(public_lattice(0.0, 1.0, 2), np.asarray([0.5]))
    rng = seeded_generator(1)
    with pytest.raises(ValueError, match="unbounded"):
        cells.draw(0, 2, rng)
    with pytest.raises(ValueError, match="lower ≤ upper"):
        cells.draw(2, 0, rng)


def test_base_measure_draws_are_lattice_points_in_order() -> None:
    lattice = PublicLattice.of(NumericAttribute(name="x", lo=0.0, hi=1.0, lattice_bits=2))
    rng = seeded_generator(5)
    draws = Counter(draw_threshold_pair(lattice, rng) for _ in range(20_000))
    points = lattice.points.tolist()
    bounded = [(a, b) for a in points for b in points if a <= b]
    expected = {**dict.fromkeys([(None, b) for b in points], 0.25 / 5)}
    expected |= dict.fromkeys([(a, None) for a in points], 0.25 / 5)
    expected |= dict.fromkeys(bounded, 0.25 / 25)
    assert set(draws) == set(expected)
    total = sum(expected.values())
    observed = [draws[key] for key in expected]
    wanted = [20_000 * expected[key] / total for key in expected]
    assert chisquare(observed, wanted).pvalue > SEEDED_P_VALUE


@pytest.mark.parametrize(
    ("lo", "hi", "bits"),
    [(0.0, 10.0, 16), (-1e308, 1e308, 8), (5.0, 5.0 + 1e-12, 20), (-3.5, 1e6, 1)],
)
def test_lattice_is_strictly_increasing_and_spans_the_range(
    lo: float, hi: float, bits: int
) -> None:
    lattice = public_lattice(lo, hi, bits)
    assert lattice.points[0] == lo
    assert lattice.points[-1] == hi
    assert np.all(np.diff(lattice.points) > 0)
    assert np.all(np.isfinite(lattice.points))
    assert lattice.size <= 2**bits + 1
    assert not lattice.points.flags.writeable


@pytest.mark.parametrize(("lo", "hi", "bits"), [(1.0, 1.0, 4), (0.0, 1.0, 0), (0.0, 1.0, 25)])
def test_bad_lattices_are_refused(lo: float, hi: float, bits: int) -> None:
    with pytest.raises(ValueError, match="lattice"):
        public_lattice(lo, hi, bits)


def _sorted_lattice(lo: float, hi: float, bits: int) -> np.ndarray:
    """The points as the lattice was first defined: every rounded point, sorted and
    deduplicated by ``np.unique``."""
    steps = np.arange(2**bits + 1, dtype=np.float64) / 2.0**bits
    with np.errstate(over="ignore"):
        points = lo + ((hi / 2.0 - lo / 2.0) * steps) * 2.0
    points = np.unique(np.clip(points, lo, hi))
    points[0], points[-1] = lo, hi
    return points


def test_one_pass_deduplication_equals_the_sorted_lattice() -> None:
    """The lattice's points drop equal neighbours in one pass, relying on the rounded points
    being in order already: the same array as ``np.unique``'s sort, on ranges where rounding
    merges points (tiny and huge widths, subnormal ends, ends near the float maximum) and on
    random ones."""
    generator = np.random.default_rng(5)
    big = np.finfo(np.float64).max
    ranges = [
        (0.0, 1.0),
        (-1.0, 1.0),
        (1.0, 1.0 + 2**-40),
        (1e300, 1e300 * (1 + 2**-30)),
        (-big, big),
        (-big, -big / 2),
        (0.0, 5e-324 * 64),
        (-3e-310, 2e-310),
        (123456.789, 123456.789 + 1e-9),
    ]
    ranges += [
        tuple(sorted(generator.normal(0.0, 10.0 ** generator.integers(-5, 6), 2)))
        for _ in range(40)
    ]
    for lo, hi in ranges:
        if not lo < hi:
            continue
        for bits in (1, 5, 12, 16, 20):
            expected = _sorted_lattice(lo, hi, bits)
            got = public_lattice.__wrapped__(lo, hi, bits).points
            assert np.array_equal(got, expected), (lo, hi, bits)
            assert np.all(np.diff(got) > 0)
