"""Serenade's low-sensitivity quality and its sensitivity (ALGORITHMS.md §2.1).

* Δ test vectors of §2.1 (x0 = 0.1·n, N_max = n) and the steepness line search on Mammals.
* ``sensitivity`` against a brute-force scan of the (i, u) table: equal while N_max − 1 is
  within the exact scan, an upper bound when the closed-form tail covers the rows beyond it.
* ``quality``/``jaccard`` values and edge cases (U = 0 → 0), invalid inputs.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import serenade_quality
from dpmine_server.operations.serenade_quality import (
    DEFAULT_STEEPNESS_GRID,
    calibrate,
    jaccard,
    quality,
    sensitivity,
)

FloatArray = npt.NDArray[np.float64]

#: §2.1 table: (case, n, s, Δ) with x0 = 0.1·n and N_max = n (five significant digits).
DELTA_VECTORS = [
    ("Mammals", 2575, 0.02, 0.00588),
    ("VAA", 1656, 0.03, 0.00750),
    ("RightW", 2863, 0.02, 0.00500),
    ("SR", 4184, 0.02, 0.00500),
    ("Psycho", 6019, 0.01, 0.00250),
    ("synthetic", 500, 0.02, 0.27289),
]
#: §2.1 steepness line search on Mammals (x0 = 257.5): s → Δ(s).
MAMMALS_LINE = [(0.0175, 0.01111), (0.02, 0.00588), (0.0225, 0.00562), (0.025, 0.00625)]


def _sigmoid(z: FloatArray) -> FloatArray:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)), dtype=np.float64)


def brute_force_sensitivity(s: float, x0: float, n_max: int) -> float:
    """The O(N_max²) scan of §2.1, written from the definition: every (i, u) with
    0 ≤ i ≤ u < N_max, both moves (i, u) → (i, u+1) and (i, u) → (i+1, u+1)."""
    i = np.arange(n_max + 1, dtype=np.float64)[:, None]
    u = np.arange(n_max + 1, dtype=np.float64)[None, :]
    table = np.where((u > 0) & (i <= u), i / np.maximum(u, 1.0) * _sigmoid(s * (i - x0)), 0.0)
    valid = np.triu(np.ones((n_max, n_max), dtype=bool))  # i ≤ u < N_max
    one_side = table[:-1, :-1] - table[:-1, 1:]
    both_sides = table[1:, 1:] - table[:-1, :-1]
    return float(max(one_side[valid].max(), both_sides[valid].max()))


# --------------------------------------------------------------------------------------------
# Test vectors


@pytest.mark.parametrize(("case", "n", "s", "expected"), DELTA_VECTORS)
def test_sensitivity_test_vectors(case: str, n: int, s: float, expected: float) -> None:
    delta = sensitivity(s, 0.1 * n, n)
    assert round(delta, 5) == pytest.approx(expected, abs=1e-12), case


def test_mammals_maximum_is_the_first_jump() -> None:
    """Mammals' Δ is the jump (0,0) → (1,1): σ(s(1 − x0))."""
    x0 = 257.5
    jump = 1.0 / (1.0 + math.exp(-0.02 * (1.0 - x0)))
    assert sensitivity(0.02, x0, 2575) == pytest.approx(jump, rel=1e-12)


def test_vaa_maximum_sits_at_x0() -> None:
    """VAA's Δ comes from the move (165, 165) → (166, 166), about s/4 (§2.1)."""
    s, x0 = 0.03, 165.6

    def q(i: float, u: float) -> float:
        return i / u / (1.0 + math.exp(-s * (i - x0)))

    assert sensitivity(s, x0, 1656) == pytest.approx(q(166, 166) - q(165, 165), rel=1e-9)


@pytest.mark.parametrize(("s", "expected"), MAMMALS_LINE)
def test_mammals_steepness_line(s: float, expected: float) -> None:
    assert round(sensitivity(s, 257.5, 2575), 5) == pytest.approx(expected, abs=1e-12)


def test_calibrate_finds_the_best_steepness_of_the_grid() -> None:
    grid = [s for s, _delta in MAMMALS_LINE]
    best, delta = calibrate(257.5, 2575, grid)
    assert best == 0.0225
    assert round(delta, 5) == pytest.approx(0.00562, abs=1e-12)
    assert delta == sensitivity(0.0225, 257.5, 2575)
    # The default 0.0025 grid contains the same minimum.
    assert 0.0225 in DEFAULT_STEEPNESS_GRID
    assert calibrate(257.5, 2575) == (best, delta)
    assert all(delta <= sensitivity(s, 257.5, 2575) for s in DEFAULT_STEEPNESS_GRID)


# --------------------------------------------------------------------------------------------
# Against brute force


def test_sensitivity_equals_brute_force_on_small_cases() -> None:
    rng = seeded_generator(2101)
    for _ in range(120):
        n_max = int(rng.integers(1, 301))
        s = float(math.exp(rng.uniform(math.log(1e-3), math.log(5.0))))
        x0 = float(rng.uniform(-5.0, n_max + 10.0))
        expected = brute_force_sensitivity(s, x0, n_max)
        assert sensitivity(s, x0, n_max) == pytest.approx(expected, rel=1e-12, abs=1e-15), (
            s,
            x0,
            n_max,
        )


def test_sensitivity_is_an_upper_bound_beyond_the_exact_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the exact scan cut at a few rows, the closed-form tail must still cover the rest."""
    rng = seeded_generator(2102)
    for limit in (1, 3, 10, 40):
        monkeypatch.setattr(serenade_quality, "_EXACT_SCAN", limit)
        for _ in range(25):
            n_max = int(rng.integers(limit + 2, 301))
            s = float(math.exp(rng.uniform(math.log(1e-3), math.log(5.0))))
            x0 = float(rng.uniform(-5.0, n_max + 10.0))
            exact = brute_force_sensitivity(s, x0, n_max)
            assert sensitivity(s, x0, n_max) >= exact - 1e-15, (limit, s, x0, n_max)
        # At N_max − 1 = limit the scan is still complete and exact.
        exact_case = brute_force_sensitivity(0.3, 4.0, limit + 1)
        assert sensitivity(0.3, 4.0, limit + 1) == pytest.approx(exact_case, rel=1e-12)


def test_sensitivity_does_not_grow_with_n_max_far_beyond_x0() -> None:
    """§2.1 [REC]: the maximum sits near u ≈ x0, so a loose public N_max costs nothing."""
    base = sensitivity(0.0225, 257.5, 2575)
    assert sensitivity(0.0225, 257.5, 100_000) == pytest.approx(base, rel=1e-12)


# --------------------------------------------------------------------------------------------
# quality and jaccard


def test_jaccard_values_and_empty_union() -> None:
    values = jaccard([0, 1, 3, 0, 5], [0, 2, 3, 4, 10])
    assert values.dtype == np.float64
    np.testing.assert_array_equal(values, [0.0, 0.5, 1.0, 0.0, 0.5])
    assert jaccard(0, 0) == 0.0
    assert float(jaccard(7, 7)) == 1.0


def test_quality_values_and_empty_union() -> None:
    s, x0 = 0.02, 257.5
    got = quality([0, 10, 300, 300], [0, 20, 300, 600], s=s, x0=x0)
    sigma = [1.0 / (1.0 + math.exp(-s * (i - x0))) for i in (0, 10, 300, 300)]
    expected = [0.0, 0.5 * sigma[1], sigma[2], 0.5 * sigma[3]]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0.0)
    assert float(quality(0, 0, s=1.0, x0=-100.0)) == 0.0  # U = 0 → 0, even with σ ≈ 1
    assert float(quality(5, 5, s=1.0, x0=5.0)) == pytest.approx(0.5)
    # Q ≤ J and Q ∈ [0, 1].
    i = np.arange(0, 50)
    u = np.arange(0, 50) * 2
    q = quality(i, u, s=0.3, x0=10.0)
    assert np.all((q >= 0.0) & (q <= jaccard(i, u)))


def test_quality_broadcasts() -> None:
    q = quality(np.array([[1], [2]]), np.array([2, 4]), s=0.5, x0=1.0)
    assert q.shape == (2, 2)
    assert q[1, 1] == pytest.approx(0.5 / (1.0 + math.exp(-0.5)))


# --------------------------------------------------------------------------------------------
# invalid inputs


@pytest.mark.parametrize(
    ("s", "x0", "n_max", "message"),
    [
        (0.0, 10.0, 100, "steepness"),
        (-0.1, 10.0, 100, "steepness"),
        (math.nan, 10.0, 100, "steepness"),
        (math.inf, 10.0, 100, "steepness"),
        (0.1, math.nan, 100, "x0"),
        (0.1, math.inf, 100, "x0"),
        (0.1, 10.0, 0, "n_max"),
        (0.1, 10.0, -3, "n_max"),
    ],
)
def test_sensitivity_rejects_invalid_inputs(s: float, x0: float, n_max: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sensitivity(s, x0, n_max)


def test_calibrate_rejects_an_empty_or_invalid_grid() -> None:
    with pytest.raises(ValueError, match="empty"):
        calibrate(10.0, 100, [])
    with pytest.raises(ValueError, match="steepness"):
        calibrate(10.0, 100, [0.1, -0.2])


def test_sensitivity_of_a_single_row_bound() -> None:
    """N_max = 1: only the jump (0,0) → (1,1) exists."""
    assert sensitivity(0.5, 3.0, 1) == pytest.approx(1.0 / (1.0 + math.exp(-0.5 * (1 - 3.0))))
