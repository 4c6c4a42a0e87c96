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
from scipy.special import expit

from dpmine_server.dp.rng import seeded_generator
from dpmine_server.operations import serenade_quality
from dpmine_server.operations.serenade_quality import (
    DEFAULT_STEEPNESS_GRID,
    JACCARD_SENSITIVITY,
    calibrate,
    coverage,
    coverage_increase,
    covered_quality,
    jaccard,
    line_search,
    one_sided,
    quality,
    sensitivities,
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


# --------------------------------------------------------------------------------------------
# One-sided sensitivities and the coverage factor (§0.8, §2.1), against brute force


def brute_force_one_sided(
    s: float, x0: float, n_max: int, coverage_steepness: float | None, y0: float
) -> tuple[float, float, float]:
    """Largest increase and decrease of Q (times σ(s₂(E00 − y0)) when s₂ is given) over every
    state (i, u, d) with i ≤ u and u + d < N_max and every added row: in E11 (i+1, u+1, d), in
    E10 or E01 (i, u+1, d), in E00 (i, u, d+1). Also the largest increase from E00 moves alone.
    Removing a row is the reverse move, so these are all neighbouring pairs."""
    size = n_max + 1
    i = np.arange(size, dtype=np.float64)[:, None, None]
    u = np.arange(size, dtype=np.float64)[None, :, None]
    d = np.arange(size, dtype=np.float64)[None, None, :]
    q = np.where((u > 0) & (i <= u), i / np.maximum(u, 1.0) * _sigmoid(s * (i - x0)), 0.0)
    if coverage_steepness is not None:
        q = q * _sigmoid(coverage_steepness * (d - y0))
    q = np.broadcast_to(q, (size, size, size))
    valid = ((i <= u) & (u + d <= n_max - 1))[:-1, :-1, :-1]
    now = q[:-1, :-1, :-1]
    moves = [q[1:, 1:, :-1] - now, q[:-1, 1:, :-1] - now, q[:-1, :-1, 1:] - now]
    changes = np.stack([m[valid] for m in moves])
    return float(changes.max()), float(-changes.min()), float(changes[2].max())


def _random_case(rng: np.random.Generator, top: int) -> tuple[float, float, int]:
    n_max = int(rng.integers(1, top))
    s = float(math.exp(rng.uniform(math.log(1e-2), math.log(5.0))))
    x0 = float(rng.uniform(-3.0, n_max + 3.0))
    return s, x0, n_max


def test_one_sided_equals_brute_force_on_small_cases() -> None:
    rng = seeded_generator(2103)
    for _ in range(60):
        s, x0, n_max = _random_case(rng, 40)
        up, down, _e00 = brute_force_one_sided(s, x0, n_max, None, 0.0)
        got = one_sided(s, x0, n_max)
        assert got.up == pytest.approx(up, rel=1e-12, abs=1e-15), (s, x0, n_max)
        assert got.down == pytest.approx(down, rel=1e-12, abs=1e-15), (s, x0, n_max)
        assert got.symmetric == sensitivity(s, x0, n_max)


def test_coverage_sensitivities_bound_brute_force() -> None:
    """Every neighbour: Δ_up, Δ_down of Q·σ(s₂(E00 − y0)) cover the brute-force changes; the
    E00 term is exact; Δ_down is the paper's; the issue's max(Δ, s₂/4) is never below."""
    rng = seeded_generator(2104)
    for _ in range(60):
        s, x0, n_max = _random_case(rng, 30)
        s2 = float(math.exp(rng.uniform(math.log(1e-2), math.log(10.0))))
        y0 = float(rng.uniform(-3.0, n_max + 3.0))
        up, down, e00_up = brute_force_one_sided(s, x0, n_max, s2, y0)
        got = sensitivities(s, x0, n_max, y0=y0, s2=s2)
        case = (s, x0, s2, y0, n_max)
        assert got.up >= up - 1e-15, case
        assert got.down >= down - 1e-15, case
        assert got.down == one_sided(s, x0, n_max).down
        assert coverage_increase(s, x0, s2, y0, n_max) == pytest.approx(
            e00_up, rel=1e-12, abs=1e-15
        )
        assert max(sensitivity(s, x0, n_max), s2 / 4) >= got.symmetric


def test_coverage_sensitivities_are_tight_when_the_factor_is_near_one() -> None:
    """With y0 far below every E00 the factor is ≈ 1 and the bound is the brute-force value."""
    for s, x0, s2, n_max in [(0.5, 5.0, 5.0, 25), (1.0, 2.0, 10.0, 12), (0.2, 10.0, 2.0, 30)]:
        up, down, _e00 = brute_force_one_sided(s, x0, n_max, s2, -5.0)
        got = sensitivities(s, x0, n_max, y0=-5.0, s2=s2)
        assert got.up == pytest.approx(up, rel=1e-3)
        assert got.down == pytest.approx(down, rel=1e-3)


def test_coverage_term_can_dominate() -> None:
    """A steep coverage factor makes Δ_up the E00 move: the old Δ alone would understate it."""
    old = one_sided(1.0, 2.0, 5)
    steep = sensitivities(1.0, 2.0, 5, y0=0.5, s2=10.0)
    up, _down, e00_up = brute_force_one_sided(1.0, 2.0, 5, 10.0, 0.5)
    assert steep.up == pytest.approx(up, rel=1e-12)
    assert steep.up == pytest.approx(e00_up, rel=1e-12)
    assert steep.up > 2.5 * old.up
    assert steep.down == old.down


def test_covered_quality_by_hand() -> None:
    """E00 = n − |U|: (i, u) = (3, 4) on 10 rows leaves 6 rows uncovered, (5, 10) none."""
    s, x0, s2, y0 = 0.5, 2.0, 0.7, 4.0
    got = covered_quality([3, 0, 5], [4, 0, 10], 10, s=s, x0=x0, s2=s2, y0=y0)
    by_hand = 0.75 / (1 + math.exp(-s * (3 - x0))) / (1 + math.exp(-s2 * (6 - y0)))
    full = 0.5 / (1 + math.exp(-s * (5 - x0))) / (1 + math.exp(-s2 * (0 - y0)))
    np.testing.assert_allclose(got, [by_hand, 0.0, full], rtol=1e-12)
    assert float(coverage(4.0, s2=s2, y0=y0)) == 0.5


def test_jaccard_sensitivity_is_brute_force() -> None:
    """Plain J: Δ_up = 1 ((0,0) → (1,1)), Δ_down = ½ ((1,1) → (1,2))."""
    size = 30
    i = np.arange(size + 1, dtype=np.float64)[:, None]
    u = np.arange(size + 1, dtype=np.float64)[None, :]
    table = np.where((u > 0) & (i <= u), i / np.maximum(u, 1.0), 0.0)
    valid = np.triu(np.ones((size, size), dtype=bool))
    up = (table[1:, 1:] - table[:-1, :-1])[valid].max()
    down = (table[:-1, :-1] - table[:-1, 1:])[valid].max()
    assert (JACCARD_SENSITIVITY.up, JACCARD_SENSITIVITY.down) == (up, down) == (1.0, 0.5)


# --------------------------------------------------------------------------------------------
# Range calibration and the x0 trade-off (mammals-sized N_max = 2221)


MAMMALS_N = 2221


def test_range_calibration_gain_on_mammals() -> None:
    """§0.8: c = ε/(Δ_up + Δ_down) gains ×1.36–1.42 over ε/(2Δ) at x0 = 10 %–30 % of n."""
    for fraction, delta in [(0.1, 0.00625), (0.3, 0.0025)]:
        x0 = fraction * MAMMALS_N
        s, sides = line_search(x0, MAMMALS_N)
        s_sym, sym = line_search(x0, MAMMALS_N, calibration="symmetric")
        assert round(sym.symmetric, 5) == pytest.approx(delta, abs=1e-12)
        gain = sides.c_per_epsilon("range") / sym.c_per_epsilon("symmetric")
        assert 1.36 <= gain <= 1.43, (fraction, gain)
        assert sides.denominator("range") == sides.up + sides.down
        assert sym.denominator("symmetric") == 2 * sym.symmetric
        assert s_sym > 0
        assert s > 0


def test_coverage_with_s2_equal_to_s_costs_nothing_on_mammals() -> None:
    """s₂ = s: the E00 term ≤ tanh(s/4) is below the paper's Δ_up ≈ s/4 in the usual regime."""
    for fraction in (0.1, 0.3):
        x0 = fraction * MAMMALS_N
        plain = line_search(x0, MAMMALS_N)
        covered = line_search(x0, MAMMALS_N, y0=x0)
        assert covered == plain


def test_line_search_minimises_the_calibrated_denominator() -> None:
    grid = [0.01, 0.02, 0.03]
    for calibration in ("range", "symmetric"):
        best, sides = line_search(257.5, 2575, grid, y0=100.0, s2=0.05, calibration=calibration)
        scores = [
            sensitivities(s, 257.5, 2575, y0=100.0, s2=0.05).denominator(calibration) for s in grid
        ]
        assert sides.denominator(calibration) == min(scores)
        assert best == grid[scores.index(min(scores))]
    with pytest.raises(ValueError, match="empty"):
        line_search(10.0, 100, [])
    with pytest.raises(ValueError, match="s2"):
        sensitivities(0.1, 10.0, 100, y0=3.0, s2=-1.0)
    with pytest.raises(ValueError, match="y0"):
        sensitivities(0.1, 10.0, 100, y0=math.nan)


# --------------------------------------------------------------------------------------------
# The scans stop K/s from the sigmoid's centre: the work is bounded whatever N_max


def _full_scan_one_sided(s: float, x0: float, n_max: int) -> tuple[float, float]:
    """The scan over every i ≤ min(N_max − 1, 10⁶) that :func:`one_sided` made before its
    window (the same closed forms over u, the same ``expit``, so equal to the last bit), with
    the same tail bound beyond 10⁶ rows."""
    up, down = float(expit(s * (1.0 - x0))), 0.0
    top = min(n_max - 1, 1_000_000)
    if top >= 1:
        i = np.arange(1, top + 1, dtype=np.float64)
        sigma, sigma_next = expit(s * (i - x0)), expit(s * (i + 1.0 - x0))
        down = float(np.max(sigma / (i + 1.0)))
        a, b = sigma_next * (i + 1.0), sigma * i
        with np.errstate(divide="ignore", invalid="ignore"):
            peak = np.where(a > b, 1.0 / (np.sqrt(a / b) - 1.0), np.inf)
        for guess in (np.floor(peak), np.ceil(peak), i):
            u = np.clip(np.nan_to_num(guess, posinf=n_max - 1.0), i, n_max - 1.0)
            up = max(up, float(np.max(a / (u + 1.0) - b / u)))
    if top < n_max - 1:
        tail = 1.0 / (top + 1.0) + s * math.exp(-s * (top - x0))
        up, down = max(up, tail), max(down, tail)
    return up, down


def _full_scan_coverage(s: float, x0: float, s2: float, y0: float, n_max: int) -> float:
    d = np.arange(0, n_max, dtype=np.float64)
    best_q = np.where(n_max - 1.0 - d >= 1, expit(s * (n_max - 1.0 - d - x0)), 0.0)
    step = expit(s2 * (d + 1.0 - y0)) - expit(s2 * (d - y0))
    return float(np.max(step * best_q))


@pytest.mark.parametrize("n_max", [2, 10, 2221, 28_886, 120_000])
def test_the_windowed_scans_give_the_full_scans_sensitivities(n_max: int) -> None:
    """The parameters a request can carry (x0 < N_max, any y0, the line-search grid and a few
    steep s): the released sensitivities are exactly those of the full O(N_max) scans."""
    for s in (*DEFAULT_STEEPNESS_GRID[::8], 0.1, 3.0):
        for x0 in (0.5, 1.0, 0.1 * n_max, 0.5 * n_max, n_max - 0.5):
            got = one_sided(s, x0, n_max)
            assert (got.up, got.down) == _full_scan_one_sided(s, x0, n_max), (s, x0, n_max)
            for y0 in (0.1 * n_max, 0.9 * n_max, 1.5 * n_max):
                for s2 in (s, 0.01):
                    full = _full_scan_coverage(s, x0, s2, y0, n_max)
                    windowed = coverage_increase(s, x0, s2, y0, n_max)
                    # Equal, or both negligible: the bound for the unscanned d stands in.
                    bound = max(1.0, s2) * math.exp(-40.0)
                    assert windowed == full or windowed == bound > full, (s, x0, y0, s2)
                    combined = sensitivities.__wrapped__(s, x0, n_max, y0=y0, s2=s2)
                    assert combined.up == max(got.up, full), (s, x0, y0, s2)


@pytest.mark.parametrize("saturation", [0.25, 1.0, 3.0])
def test_a_narrow_window_still_bounds_every_row_it_skips(
    monkeypatch: pytest.MonkeyPatch, saturation: float
) -> None:
    """With K cut far below 40 the windows skip rows where the sigmoid is far from saturated:
    the bounds for the skipped rows must still make both results upper bounds."""
    monkeypatch.setattr(serenade_quality, "_SATURATION", saturation)
    rng = seeded_generator(2611)
    for _ in range(40):
        s, x0, n_max = _random_case(rng, 40)
        up, down, e00_up = brute_force_one_sided(s, x0, n_max, None, 0.0)
        got = one_sided(s, x0, n_max)
        assert got.up >= up - 1e-15, (s, x0, n_max)
        assert got.down >= down - 1e-15, (s, x0, n_max)
        s2, y0 = float(rng.uniform(0.05, 3.0)), float(rng.uniform(-3.0, n_max + 3.0))
        _up, _down, e00_up = brute_force_one_sided(s, x0, n_max, s2, y0)
        assert coverage_increase(s, x0, s2, y0, n_max) >= e00_up - 1e-15, (s, x0, s2, y0)


@pytest.mark.parametrize("mode", ["jaccard", "quality", "covered"])
def test_counts_quality_is_the_vectorised_quality_of_the_same_counts(mode: str) -> None:
    """The compiled pass over integer counts gives the vectorised functions' values (to the
    last bits of exp), with |U| = 0, sigmoids saturated both ways and every E00; other dtypes
    take the vectorised functions themselves."""
    generator = np.random.default_rng(9)
    n_rows = 5_000
    u = generator.integers(0, n_rows + 1, size=20_000, dtype=np.int64)
    i = (u * generator.random(u.size)).astype(np.int64)
    u[:50], i[:50] = 0, 0
    s, x0, s2, y0 = 0.05, 400.0, 0.2, 1_000.0
    if mode == "jaccard":
        expected = serenade_quality.jaccard(i, u)
        got = serenade_quality.counts_quality(i, u, serenade_quality.kernel_quality(n_rows))
    elif mode == "quality":
        expected = serenade_quality.quality(i, u, s=s, x0=x0)
        got = serenade_quality.counts_quality(
            i, u, serenade_quality.kernel_quality(n_rows, s=s, x0=x0)
        )
    else:
        expected = serenade_quality.covered_quality(i, u, n_rows, s=s, x0=x0, s2=s2, y0=y0)
        got = serenade_quality.counts_quality(
            i, u, serenade_quality.kernel_quality(n_rows, s=s, x0=x0, s2=s2, y0=y0)
        )
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=0.0)
    assert np.array_equal(got == 0.0, expected == 0.0)
    as_float = serenade_quality.counts_quality(
        i.astype(np.float64),
        u.astype(np.float64),
        serenade_quality.kernel_quality(n_rows, s=s, x0=x0, s2=s2, y0=y0),
    )
    reference = serenade_quality.covered_quality(i, u, n_rows, s=s, x0=x0, s2=s2, y0=y0)
    np.testing.assert_array_equal(as_float, reference)
    grid = serenade_quality.counts_quality(
        i.reshape(100, 200), u.reshape(100, 200), serenade_quality.kernel_quality(n_rows)
    )
    assert grid.shape == (100, 200)
