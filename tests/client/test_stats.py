"""Redescription statistics from (noisy) counts: Jaccard, p-value, derived cells (ALGORITHMS.md
§1.2, §1.3, §1.6 [REC]); defined in dpmine.wire.statistics, re-exported by dpmine.stats."""

from __future__ import annotations

import math

import pytest
from scipy.stats import binom

from dpmine.stats import CellStatistics, jaccard, p_value, statistics_from_cells
from dpmine.wire.statistics import binomial_upper_tail

# --------------------------------------------------------------------------------------------
# p-value (§1.3)


@pytest.mark.parametrize(
    ("n_rows", "support_left", "support_right", "intersection", "expected"),
    [
        (1000, 300, 200, 80, 0.006231),
        (1000, 300, 200, 60, 0.5188),
        (2575, 500, 400, 120, 3.549e-6),
    ],
)
def test_p_value_matches_the_spec_test_vectors(
    n_rows: int, support_left: int, support_right: int, intersection: int, expected: float
) -> None:
    assert p_value(n_rows, support_left, support_right, intersection) == pytest.approx(
        expected, rel=1e-3
    )


def test_p_value_is_the_upper_tail_including_k() -> None:
    # P[X >= k], not P[X > k] (§1.3: the tree reference code's strict inequality is wrong).
    n, s_left, s_right, k = 50, 20, 10, 6
    probability = (s_left / n) * (s_right / n)
    expected = sum(binom.pmf(x, n, probability) for x in range(k, n + 1))
    assert p_value(n, s_left, s_right, k) == pytest.approx(expected, rel=1e-12)
    assert p_value(n, s_left, s_right, k) > p_value(n, s_left, s_right, k + 1)


@pytest.mark.parametrize("n", [1, 7, 50, 2575, 100_000, 1_000_000])
@pytest.mark.parametrize("probability", [1e-6, 0.004, 0.2, 0.5, 0.93])
def test_the_pure_python_binomial_tail_matches_scipy(n: int, probability: float) -> None:
    # The wire package has no scipy: its log-space sum must agree with binom.sf to ~1e-12.
    mean, sd = n * probability, math.sqrt(n * probability * (1.0 - probability))
    ks = {0, 1, 2, n - 1, n, int(mean), int(mean) + 1, int(mean - 3 * sd), int(mean + 3 * sd)}
    ks |= {int(mean + 12 * sd), int(mean + 40 * sd)}
    for k in sorted(k for k in ks if 0 <= k <= n):
        want = float(binom.sf(k - 1, n, probability))
        got = binomial_upper_tail(n, probability, k)
        assert 0.0 <= got <= 1.0
        if want > 1e-290:
            assert got == pytest.approx(want, rel=1e-11), (n, probability, k)
        else:
            assert got < 1e-280, (n, probability, k)


def test_p_value_of_intersection_zero_is_one() -> None:
    assert p_value(100, 30, 40, 0) == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize(
    ("n_rows", "support_left", "support_right", "intersection"),
    [
        (100, 0, 50, 0),
        (100, 50, 0, 0),
        (100, 0, 0, 0),
        (100, 0, 50, 10),  # inconsistent: k > 0 with an empty support still gives 1
        (0, 0, 0, 0),
        (0, 5, 5, 5),  # N = 0 (clamped noisy N̂)
        (-4, 5, 5, 5),
        (100, -3, 50, 2),  # a negative noisy support clamps to 0
    ],
)
def test_p_value_is_one_when_a_support_is_zero(
    n_rows: int, support_left: int, support_right: int, intersection: int
) -> None:
    assert p_value(n_rows, support_left, support_right, intersection) == 1.0


def test_p_value_clamps_inconsistent_noisy_inputs() -> None:
    # Supports above N are read as N; an intersection above N as N; below 0 as 0.
    assert p_value(100, 150, 50, 40) == p_value(100, 100, 50, 40)
    assert p_value(100, 60, 170, 40) == p_value(100, 60, 100, 40)
    assert p_value(100, 60, 50, 130) == p_value(100, 60, 50, 100)
    assert p_value(100, 60, 50, -7) == p_value(100, 60, 50, 0) == pytest.approx(1.0)
    # An intersection larger than both supports is still a valid (tiny) probability.
    value = p_value(100, 10, 10, 30)
    assert 0.0 <= value < 1e-12


def test_p_value_is_a_probability_on_a_grid_of_noisy_inputs() -> None:
    for n_rows in (-2, 0, 1, 7, 40):
        for s_left in (-3, 0, 1, 5, 45):
            for s_right in (-1, 0, 2, 7, 50):
                for k in (-5, 0, 1, 3, 60):
                    value = p_value(n_rows, s_left, s_right, k)
                    assert 0.0 <= value <= 1.0
                    assert not math.isnan(value)


# --------------------------------------------------------------------------------------------
# Jaccard (§1.2)


@pytest.mark.parametrize(
    ("intersection", "union", "expected"),
    [
        (3, 4, 0.75),
        (0, 0, 0.0),  # empty union: J = 0 by definition
        (5, 0, 0.0),
        (5, -2, 0.0),  # noisy union below 0
        (0, 10, 0.0),
        (10, 10, 1.0),
        (12, 10, 1.0),  # noisy I above U clamps to 1
        (-3, 10, 0.0),  # noisy I below 0 clamps to 0
        (1, 3, 1 / 3),
    ],
)
def test_jaccard_edge_cases(intersection: float, union: float, expected: float) -> None:
    assert jaccard(intersection, union) == pytest.approx(expected, abs=1e-15)


# --------------------------------------------------------------------------------------------
# statistics_from_cells (§1.6 [REC])


def test_statistics_from_consistent_cells() -> None:
    stats = statistics_from_cells(80, 220, 120, 580)
    assert (stats.support, stats.union, stats.n_rows) == (80, 420, 1000)
    assert (stats.support_left, stats.support_right) == (300, 200)
    assert stats.jaccard == pytest.approx(80 / 420)
    assert stats.p_value == pytest.approx(0.006231, rel=1e-3)
    assert isinstance(stats, CellStatistics)


def test_statistics_clamp_negative_cells_at_zero() -> None:
    stats = statistics_from_cells(-3, 5, -2, 10)
    assert stats.support == 0
    assert stats.union == 5
    assert stats.jaccard == 0.0
    assert stats.support_left == 5
    assert stats.support_right == 0
    assert stats.n_rows == 15
    assert stats.p_value == 1.0  # s_R = 0


def test_statistics_when_every_cell_is_negative() -> None:
    stats = statistics_from_cells(-1, -2, -3, -4)
    assert (stats.support, stats.union, stats.support_left, stats.support_right) == (0, 0, 0, 0)
    assert stats.n_rows == 0
    assert stats.jaccard == 0.0
    assert stats.p_value == 1.0


def test_statistics_with_only_e00_negative() -> None:
    stats = statistics_from_cells(4, 1, 2, -9)
    assert stats.union == 7
    assert stats.n_rows == 7  # N̂ = sum of the clamped cells, here the union
    assert stats.jaccard == pytest.approx(4 / 7)
    assert stats.p_value == pytest.approx(p_value(7, 5, 6, 4))


def test_derived_statistics_are_consistent_on_a_grid() -> None:
    values = (-4, -1, 0, 1, 3, 9)
    for e11 in values:
        for e10 in values:
            for e01 in values:
                for e00 in values:
                    stats = statistics_from_cells(e11, e10, e01, e00)
                    cells = [max(v, 0) for v in (e11, e10, e01, e00)]
                    assert stats.support == cells[0]
                    assert stats.union == cells[0] + cells[1] + cells[2]
                    assert stats.n_rows == sum(cells)
                    assert stats.support_left == cells[0] + cells[1]
                    assert stats.support_right == cells[0] + cells[2]
                    assert 0.0 <= stats.jaccard <= 1.0
                    assert 0.0 <= stats.p_value <= 1.0
                    assert stats.p_value == p_value(
                        stats.n_rows, stats.support_left, stats.support_right, stats.support
                    )
