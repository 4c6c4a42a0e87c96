"""Correctness of the DP mechanisms (ALGORITHMS.md §0.3, §1.4, §1.5, §4.2; DP-ENGINES.md §2, §5).

Distributions are checked against exact probabilities. Draws from a seeded generator are
reproducible, so their goodness-of-fit tests use a fixed seed and p > 1e-4. ``discrete_laplace``
draws from OpenDP's CSPRNG and cannot be seeded: its checks use 6-standard-error bands (two-sided
false-alarm rate 2e-9 each) and a chi-square threshold of 1e-8, so the file fails spuriously with
probability below 1e-7 (CI runs the suite once per change, and a spurious failure refuses it).
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import opendp.prelude as dp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.mechanisms import (
    OneSided,
    discrete_laplace,
    em_coefficient,
    exponential_mechanism,
    laplace_scale,
    noisy_top_k,
)
from dpmine_server.dp.rng import seeded_generator

dp.enable_features("contrib")

FloatArray = npt.NDArray[np.float64]

#: Width of the tolerance bands of the unseeded (OpenDP) checks, in standard errors.
Z_BAND = 6.0
UNSEEDED_P_VALUE = 1e-8
SEEDED_P_VALUE = 1e-4
DRAWS = 20_000
BAD_EPSILONS = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1.0]


# --------------------------------------------------------------------------------------------
# Exact reference distributions


def _two_sided_geometric_pmf(ratio: float, support: npt.NDArray[np.int64]) -> FloatArray:
    """P(Z = k) = (1 - r)/(1 + r) · r^|k| with r = exp(-1/scale): the discrete Laplace law."""
    return np.asarray((1.0 - ratio) / (1.0 + ratio) * ratio ** np.abs(support), dtype=np.float64)


def _discrete_laplace_moments(ratio: float) -> tuple[float, float]:
    """Variance and fourth central moment of the discrete Laplace law, by exact-enough summation."""
    support = np.arange(-(10**4), 10**4 + 1, dtype=np.int64)
    pmf = _two_sided_geometric_pmf(ratio, support)
    squares = support.astype(np.float64) ** 2
    return float(np.sum(pmf * squares)), float(np.sum(pmf * squares**2))


def _softmax(log_weights: FloatArray) -> FloatArray:
    """Normalised exp(log_weights) in log space (-inf entries get probability 0)."""
    shifted = log_weights - np.max(log_weights)
    weights = np.exp(shifted)
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def _em_probabilities(
    quality: npt.ArrayLike,
    *,
    epsilon: float,
    sensitivity: float,
    log_base_measure: npt.ArrayLike | None = None,
) -> FloatArray:
    """Exact exponential-mechanism law P(c) ∝ μ(c)·exp(ε·q(c)/(2Δ)) (ALGORITHMS.md §0.3)."""
    log_weights = epsilon / (2.0 * sensitivity) * np.asarray(quality, dtype=np.float64)
    if log_base_measure is not None:
        log_weights = log_weights + np.asarray(log_base_measure, dtype=np.float64)
    return _softmax(log_weights)


def _assert_fits(
    observed: npt.NDArray[np.int64], probabilities: FloatArray, *, threshold: float
) -> None:
    """Chi-square goodness of fit on the cells of positive probability; none outside them."""
    positive = probabilities > 0
    assert observed[~positive].sum() == 0, "a zero-probability outcome was drawn"
    expected = probabilities[positive] * observed.sum()
    result = chisquare(observed[positive], expected)
    assert float(result.pvalue) > threshold, (observed, expected)


# --------------------------------------------------------------------------------------------
# discrete_laplace


def test_discrete_laplace_returns_an_integer_vector_of_the_input_shape() -> None:
    released = discrete_laplace([3, 0, 7], epsilon=1.0)
    assert released.dtype == np.int64
    assert released.shape == (3,)
    scalar = discrete_laplace(5, epsilon=1.0)
    assert scalar.dtype == np.int64
    assert scalar.shape == (1,)
    empty = discrete_laplace(np.zeros(0, dtype=np.int64), epsilon=1.0)
    assert empty.shape == (0,)


def test_reference_moments_match_the_closed_form_variance() -> None:
    for epsilon in (0.1, 0.5, 1.0, 3.0):
        ratio = math.exp(-epsilon)
        variance, _ = _discrete_laplace_moments(ratio)
        assert variance == pytest.approx(2 * ratio / (1 - ratio) ** 2, rel=1e-9)


@pytest.mark.parametrize(
    ("value", "epsilon", "sensitivity"),
    [(0, 1.0, 1), (1_000, 0.5, 1), (-7, 2.0, 3)],
)
def test_discrete_laplace_mean_and_variance(value: int, epsilon: float, sensitivity: int) -> None:
    released = discrete_laplace(
        np.full(DRAWS, value, dtype=np.int64), epsilon=epsilon, sensitivity=sensitivity
    )
    noise = (released - value).astype(np.float64)
    ratio = math.exp(-epsilon / sensitivity)  # scale b = Δ/ε, r = exp(-1/b)
    variance = 2 * ratio / (1 - ratio) ** 2
    _, fourth = _discrete_laplace_moments(ratio)
    mean_se = math.sqrt(variance / DRAWS)
    variance_se = math.sqrt((fourth - variance**2) / DRAWS)
    assert abs(noise.mean()) < Z_BAND * mean_se
    assert abs(noise.var() - variance) < Z_BAND * variance_se


@pytest.mark.parametrize(("epsilon", "sensitivity"), [(1.0, 1), (0.3, 2)])
def test_discrete_laplace_noise_follows_the_two_sided_geometric_law(
    epsilon: float, sensitivity: int
) -> None:
    noise = discrete_laplace(
        np.zeros(DRAWS, dtype=np.int64), epsilon=epsilon, sensitivity=sensitivity
    )
    ratio = math.exp(-epsilon / sensitivity)
    edge = 8
    inner = np.arange(-edge + 1, edge, dtype=np.int64)
    inner_pmf = _two_sided_geometric_pmf(ratio, inner)
    tail = (1.0 - inner_pmf.sum()) / 2.0  # by symmetry, P(Z ≤ -edge) = P(Z ≥ edge)
    probabilities = np.concatenate([[tail], inner_pmf, [tail]])
    observed = np.concatenate(
        [
            [np.count_nonzero(noise <= -edge)],
            [np.count_nonzero(noise == k) for k in inner],
            [np.count_nonzero(noise >= edge)],
        ]
    ).astype(np.int64)
    _assert_fits(observed, probabilities, threshold=UNSEEDED_P_VALUE)


# --------------------------------------------------------------------------------------------
# laplace_scale: OpenDP's privacy map never exceeds the epsilon handed to the mechanism


def _decimal_above_its_float(text: str) -> bool:
    return Fraction(float(text)) > Fraction(Decimal(text))


#: Includes tiny and huge values and decimals whose nearest float lies *above* them (0.1, 1.1...).
SCALE_EPSILONS = [
    "1e-12",
    "1e-6",
    "1e-3",
    "0.01",
    "0.1",
    "0.2",
    "0.3",
    "0.7",
    "1",
    "1.1",
    "2.3",
    "1e2",
    "1e3",
]


def _laplace_measurement(scale: float) -> Any:
    """The measurement the mechanism builds (DP-ENGINES.md §2.1); OpenDP's ``map`` is untyped."""
    return dp.m.make_laplace(
        dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64), scale=scale
    )


def _map(scale: float, sensitivity: int) -> float:
    """OpenDP's privacy map: the ε spent on inputs at L1 distance ``sensitivity``."""
    return float(_laplace_measurement(scale).map(sensitivity))


def _check_scale(epsilon: float, sensitivity: int) -> None:
    scale = laplace_scale(epsilon=epsilon, sensitivity=sensitivity)
    assert _map(scale, sensitivity) <= epsilon
    assert Fraction(scale) >= Fraction(sensitivity) / Fraction(epsilon)
    # ... and it is the smallest such float: the one below fails one of the two conditions.
    below = math.nextafter(scale, 0.0)
    assert (
        Fraction(below) < Fraction(sensitivity) / Fraction(epsilon)
        or _map(below, sensitivity) > epsilon
    )


def test_scale_epsilons_include_decimals_whose_float_is_above_them() -> None:
    assert _decimal_above_its_float("0.1")
    assert _decimal_above_its_float("1.1")
    assert not _decimal_above_its_float("0.3")


@pytest.mark.parametrize("text", SCALE_EPSILONS)
@pytest.mark.parametrize("sensitivity", [1, 2, 3, 7])
def test_laplace_scale_privacy_map_never_exceeds_epsilon(text: str, sensitivity: int) -> None:
    _check_scale(float(text), sensitivity)
    # The budget path: the mechanism gets Epsilon.for_mechanism(), and OpenDP's map of the
    # resulting measurement stays below the exact decimal charged to the ledger.
    charged = Epsilon.charge(text)
    scale = laplace_scale(epsilon=charged.for_mechanism(), sensitivity=sensitivity)
    assert Fraction(_map(scale, sensitivity)) <= charged.as_fraction()


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    epsilon=st.floats(min_value=1e-6, max_value=1e3, allow_nan=False),
    sensitivity=st.integers(min_value=1, max_value=50),
)
def test_laplace_scale_property(epsilon: float, sensitivity: int) -> None:
    _check_scale(epsilon, sensitivity)


# --------------------------------------------------------------------------------------------
# Invalid inputs


@pytest.mark.parametrize("epsilon", BAD_EPSILONS)
def test_every_mechanism_rejects_a_bad_epsilon(epsilon: float) -> None:
    rng = seeded_generator(1)
    with pytest.raises(ValueError, match="epsilon"):
        discrete_laplace([1], epsilon=epsilon)
    with pytest.raises(ValueError, match="epsilon"):
        laplace_scale(epsilon=epsilon, sensitivity=1)
    with pytest.raises(ValueError, match="epsilon"):
        exponential_mechanism([0.0, 1.0], epsilon=epsilon, sensitivity=1.0, rng=rng)
    with pytest.raises(ValueError, match="epsilon"):
        noisy_top_k([0.0, 1.0], k=1, epsilon=epsilon, sensitivity=1.0, rng=rng)


@pytest.mark.parametrize("sensitivity", [0, -1])
def test_discrete_laplace_rejects_a_bad_sensitivity(sensitivity: int) -> None:
    with pytest.raises(ValueError, match="sensitivity"):
        discrete_laplace([1], epsilon=1.0, sensitivity=sensitivity)


def test_discrete_laplace_rejects_a_matrix() -> None:
    with pytest.raises(ValueError, match="vector"):
        discrete_laplace([[1, 2], [3, 4]], epsilon=1.0)


@pytest.mark.parametrize("sensitivity", [math.nan, math.inf, 0.0, -1.0])
def test_selections_reject_a_bad_sensitivity(sensitivity: float) -> None:
    rng = seeded_generator(1)
    with pytest.raises(ValueError, match="sensitivity"):
        exponential_mechanism([0.0, 1.0], epsilon=1.0, sensitivity=sensitivity, rng=rng)
    with pytest.raises(ValueError, match="sensitivity"):
        noisy_top_k([0.0, 1.0], k=1, epsilon=1.0, sensitivity=sensitivity, rng=rng)


@pytest.mark.parametrize(
    ("quality", "log_base_measure", "message"),
    [
        ([], None, "non-empty vector"),
        ([[0.0, 1.0]], None, "non-empty vector"),
        ([0.0, math.nan], None, "finite"),
        ([0.0, math.inf], None, "finite"),
        ([0.0, 1.0], [0.0], "one entry per candidate"),
        ([0.0, 1.0], [0.0, math.nan], "finite or -inf"),
        ([0.0, 1.0], [0.0, math.inf], "finite or -inf"),
        ([0.0, 1.0], [-math.inf, -math.inf], "no candidate positive mass"),
    ],
)
def test_selections_reject_bad_qualities_and_base_measures(
    quality: list[float] | list[list[float]],
    log_base_measure: list[float] | None,
    message: str,
) -> None:
    rng = seeded_generator(1)
    with pytest.raises(ValueError, match=message):
        exponential_mechanism(
            quality, epsilon=1.0, sensitivity=1.0, rng=rng, log_base_measure=log_base_measure
        )
    with pytest.raises(ValueError, match=message):
        noisy_top_k(
            quality, k=1, epsilon=1.0, sensitivity=1.0, rng=rng, log_base_measure=log_base_measure
        )


@pytest.mark.parametrize(
    ("k", "log_base_measure", "message"),
    [
        (0, None, "at least 1"),
        (-1, None, "at least 1"),
        (4, None, "exceeds the 3 candidates"),
        (3, [0.0, -math.inf, 0.0], "exceeds the 2 candidates"),
    ],
)
def test_noisy_top_k_rejects_a_bad_k(
    k: int, log_base_measure: list[float] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        noisy_top_k(
            [0.0, 1.0, 2.0],
            k=k,
            epsilon=1.0,
            sensitivity=1.0,
            rng=seeded_generator(1),
            log_base_measure=log_base_measure,
        )


# --------------------------------------------------------------------------------------------
# exponential_mechanism against exact probabilities


def _em_counts(
    quality: npt.ArrayLike,
    *,
    epsilon: float,
    sensitivity: float,
    log_base_measure: npt.ArrayLike | None,
    seed: int,
) -> npt.NDArray[np.int64]:
    rng = seeded_generator(seed)
    size = np.asarray(quality).size
    picks = [
        exponential_mechanism(
            quality,
            epsilon=epsilon,
            sensitivity=sensitivity,
            rng=rng,
            log_base_measure=log_base_measure,
        )
        for _ in range(DRAWS)
    ]
    return np.bincount(picks, minlength=size).astype(np.int64)


LOG_BASE = [0.0, math.log(2.0), math.log(0.5), -math.inf, math.log(3.0)]


@pytest.mark.parametrize(
    ("quality", "epsilon", "sensitivity", "log_base_measure"),
    [
        ([0.0, 1.0, 2.0, 3.0, -1.0], 1.0, 1.0, None),
        ([0.0, 1.0, 2.0, 3.0, -1.0], 3.0, 2.5, None),
        ([0.0, 1.0, 2.0, 3.0, -1.0], 1.0, 1.0, LOG_BASE),
        # Log-weights of ±5·10^5: exponentiating them would overflow; log space does not.
        ([1e6, 1e6 + 1.0, 1e6 - 1.0, 1e6 + 2.5], 1.0, 1.0, None),
        ([-1e6, -1e6 + 1.0, -1e6 - 1.0, -1e6 + 2.5], 1.0, 1.0, None),
        ([1e6, 1e6 + 1.0, 1e6 - 1.0, 1e6 + 2.5, 1e6], 2.0, 1.0, LOG_BASE),
    ],
)
def test_exponential_mechanism_matches_exact_probabilities(
    quality: list[float],
    epsilon: float,
    sensitivity: float,
    log_base_measure: list[float] | None,
) -> None:
    observed = _em_counts(
        quality,
        epsilon=epsilon,
        sensitivity=sensitivity,
        log_base_measure=log_base_measure,
        seed=101,
    )
    expected = _em_probabilities(
        quality, epsilon=epsilon, sensitivity=sensitivity, log_base_measure=log_base_measure
    )
    _assert_fits(observed, expected, threshold=SEEDED_P_VALUE)


def test_exponential_mechanism_returns_a_python_int_index() -> None:
    pick = exponential_mechanism([0.0, 5.0], epsilon=1.0, sensitivity=1.0, rng=seeded_generator(3))
    assert type(pick) is int
    assert pick in (0, 1)


# --------------------------------------------------------------------------------------------
# noisy_top_k: one-shot Gumbel top-k = K rounds of peeling EM at ε/K (ALGORITHMS.md §4.2)


@pytest.mark.parametrize("log_base_measure", [None, [0.0, math.log(2.0), -math.inf, 0.5, 0.0, 1.0]])
def test_noisy_top_k_first_pick_is_the_em_at_epsilon_over_k(
    log_base_measure: list[float] | None,
) -> None:
    quality = [0.0, 1.0, 2.0, 3.0, -1.0, 0.5]
    k, epsilon = 3, 3.0
    rng = seeded_generator(202)
    firsts = [
        int(
            noisy_top_k(
                quality,
                k=k,
                epsilon=epsilon,
                sensitivity=1.0,
                rng=rng,
                log_base_measure=log_base_measure,
            )[0]
        )
        for _ in range(DRAWS)
    ]
    observed = np.bincount(firsts, minlength=len(quality)).astype(np.int64)
    expected = _em_probabilities(
        quality, epsilon=epsilon / k, sensitivity=1.0, log_base_measure=log_base_measure
    )
    _assert_fits(observed, expected, threshold=SEEDED_P_VALUE)


@pytest.mark.parametrize("log_base_measure", [None, [0.0, math.log(2.0), 0.0, math.log(0.5)]])
def test_noisy_top_k_pairs_follow_sequential_peeling(log_base_measure: list[float] | None) -> None:
    quality = [0.0, 1.0, 2.0, 3.0]
    k, epsilon, candidates = 2, 2.0, 4
    # Peeling: the first pick from the EM at ε/k, the second from the EM on the remaining ones.
    p = _em_probabilities(
        quality, epsilon=epsilon / k, sensitivity=1.0, log_base_measure=log_base_measure
    )
    exact = np.zeros((candidates, candidates))
    for first in range(candidates):
        for second in range(candidates):
            if second != first:
                exact[first, second] = p[first] * p[second] / (1.0 - p[first])
    assert exact.sum() == pytest.approx(1.0)
    rng = seeded_generator(303)
    observed = np.zeros((candidates, candidates), dtype=np.int64)
    for _ in range(DRAWS):
        first, second = noisy_top_k(
            quality,
            k=k,
            epsilon=epsilon,
            sensitivity=1.0,
            rng=rng,
            log_base_measure=log_base_measure,
        )
        observed[first, second] += 1
    _assert_fits(observed.ravel(), exact.ravel(), threshold=SEEDED_P_VALUE)


def test_noisy_top_k_returns_distinct_positive_mass_candidates_in_order() -> None:
    rng = seeded_generator(404)
    log_base = [0.0, -math.inf, 0.0, 0.0, -math.inf]
    for _ in range(200):
        picks = noisy_top_k(
            [5.0, 9.0, 1.0, 3.0, 9.0],
            k=3,
            epsilon=1.0,
            sensitivity=1.0,
            rng=rng,
            log_base_measure=log_base,
        )
        assert picks.dtype == np.int64
        assert sorted(picks.tolist()) == [0, 2, 3]  # exactly the candidates with positive mass


# --------------------------------------------------------------------------------------------
# Range-calibrated exponential mechanism (ALGORITHMS.md §0.8)


def test_em_coefficient_symmetric_and_one_sided() -> None:
    assert em_coefficient(1.0, 0.5) == 1.0  # ε/(2Δ)
    assert em_coefficient(1.0, OneSided(up=1.0, down=0.0)) == 1.0  # ε/(Δ_up + Δ_down)
    assert em_coefficient(2.0, OneSided(up=1.0, down=1.0)) == em_coefficient(2.0, 1.0)
    assert em_coefficient(1.0, OneSided(up=0.3, down=0.1)) == pytest.approx(2.5)


@pytest.mark.parametrize(("up", "down"), [(0.0, 0.0), (-1.0, 2.0), (math.inf, 0.0)])
def test_one_sided_sensitivities_must_be_sane(up: float, down: float) -> None:
    with pytest.raises(ValueError, match="one-sided"):
        OneSided(up=up, down=down)


def test_one_sided_exponential_mechanism_matches_its_exact_law() -> None:
    """P(c) ∝ exp(ε·q(c)/(Δ_up + Δ_down)): twice the symmetric coefficient for a monotone q."""
    quality = np.array([0.0, 1.0, 2.0, 3.0])
    rng = seeded_generator(812)
    draws = [
        exponential_mechanism(quality, epsilon=1.0, sensitivity=OneSided(up=1.0, down=0.0), rng=rng)
        for _ in range(20_000)
    ]
    weights = np.exp(quality)
    expected = 20_000 * weights / weights.sum()
    observed = np.bincount(draws, minlength=quality.size)
    assert chisquare(observed, expected).pvalue > 1e-4
