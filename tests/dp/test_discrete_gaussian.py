"""The discrete Gaussian count release of zCDP datasets (issue #24; dp/mechanisms.py).

* the sampler's law: a chi-square test of OpenDP's draws against the exact pmf
  P(X = k) ∝ e^(−k²/2σ²), with a power check (the same draws against σ·1.25 are rejected);
* σ: ρ = Δ₂²/(2σ²) ≤ ε²/2 exactly, and OpenDP's own privacy map agrees;
* the ρ map against a numerically computed Rényi divergence of the two neighbouring laws;
* ``noisy_counts`` draws Laplace by default and the Gaussian only inside ``count_noise``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from dpmine_server.dp.mechanisms import (
    _vector_gaussian,
    count_noise,
    discrete_gaussian,
    gaussian_sigma,
    laplace_scale,
    noisy_counts,
)

FloatArray = npt.NDArray[np.float64]
ALPHAS = np.concatenate([1 + np.logspace(-3, 0, 25), np.logspace(0.31, 2.5, 40)])


def gaussian_pmf(sigma: float, support: npt.NDArray[np.int64]) -> FloatArray:
    """The exact discrete Gaussian pmf on ``support`` (normalised over ±60σ, far beyond it)."""
    span = np.arange(-math.ceil(60 * sigma) - 1, math.ceil(60 * sigma) + 2)
    normaliser = float(np.exp(-(span.astype(np.float64) ** 2) / (2 * sigma**2)).sum())
    return np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma**2)) / normaliser


def chi_square_p(draws: npt.NDArray[np.int64], sigma: float) -> float:
    """p-value of the draws against the discrete Gaussian of ``sigma`` (cells |k| < 3σ, two
    tails pooled)."""
    edge = max(1, math.floor(3 * sigma))
    inner = np.arange(-edge + 1, edge)
    expected = gaussian_pmf(sigma, inner)
    observed = np.array([np.count_nonzero(draws == k) for k in inner], dtype=np.float64)
    tails = 1.0 - float(expected.sum())
    observed = np.append(observed, np.count_nonzero(np.abs(draws) >= edge))
    expected = np.append(expected, tails) * draws.size
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("sigma", [0.8, 3.0])
def test_the_sampler_has_the_discrete_gaussian_law(sigma: float) -> None:
    draws = discrete_gaussian(np.zeros(20_000, dtype=np.int64), epsilon=1.0 / sigma)
    assert chi_square_p(draws, sigma) > 1e-4  # a correct sampler fails with probability 1e-4
    # Power: the same draws are far from the law of a 25 % larger σ.
    assert chi_square_p(draws, 1.25 * sigma) < 1e-6


def test_the_noise_is_added_to_each_count() -> None:
    draws = discrete_gaussian(np.full(5_000, 40, dtype=np.int64), epsilon=0.5)
    assert draws.dtype == np.int64
    assert abs(float(draws.mean()) - 40.0) < 0.3  # σ = 2: the mean's sd is 0.028
    assert float(draws.std()) == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("epsilon", [0.01, 0.3, 1.0, 1 / 3, 7.0])
@pytest.mark.parametrize("l2_squared", [1, 2, 4, 10])
def test_sigma_costs_at_most_eps_squared_over_two(epsilon: float, l2_squared: int) -> None:
    sigma = gaussian_sigma(epsilon=epsilon, l2_squared=l2_squared)
    rho = Fraction(l2_squared) / (2 * Fraction(sigma) ** 2)
    assert rho <= Fraction(epsilon) ** 2 / 2
    # The smallest such float: one ulp less would cost more.
    below = Fraction(math.nextafter(sigma, 0.0))
    assert Fraction(l2_squared) / (2 * below**2) > Fraction(epsilon) ** 2 / 2
    root = math.isqrt(l2_squared)
    if root * root == l2_squared:  # OpenDP's L2 metric on i64 takes integer distances
        assert _vector_gaussian(sigma).map(root) <= epsilon**2 / 2 * (1 + 1e-12)


def test_bad_sensitivities_are_refused() -> None:
    for bad in (0, -1, True):
        with pytest.raises(ValueError, match="l2_squared"):
            gaussian_sigma(epsilon=1.0, l2_squared=bad)
    with pytest.raises(ValueError, match="epsilon"):
        gaussian_sigma(epsilon=0.0, l2_squared=1)
    with pytest.raises(ValueError, match="integer counts"):
        discrete_gaussian([0.5], epsilon=1.0)


def renyi(log_p: FloatArray, log_q: FloatArray, alpha: float) -> float:
    """D_α(P ‖ Q) of two laws on the same finite support, from their log-probabilities."""
    terms = alpha * log_p + (1 - alpha) * log_q
    top = terms.max()
    return float((top + np.log(np.exp(terms - top).sum())) / (alpha - 1))


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.0])
@pytest.mark.parametrize("shift", [1, 2])
def test_rho_is_delta_squared_over_two_sigma_squared(epsilon: float, shift: int) -> None:
    """ρ-zCDP: D_α(M(x) ‖ M(x')) ≤ ρα for every α (Bun & Steinke 2016, Def. 1.1); for counts
    shifted by an integer Δ, ρ = Δ²/(2σ²) (CKS20), reached at integer α: the release is charged
    what it costs, not more."""
    sigma = gaussian_sigma(epsilon=epsilon, l2_squared=shift**2)
    support = np.arange(-math.ceil(40 * sigma) - shift, math.ceil(40 * sigma) + shift + 1)
    log_z = math.log(float(gaussian_pmf(sigma, np.array([0]))[0]))  # log(1/Z)
    log_p = -(support.astype(np.float64) ** 2) / (2 * sigma**2) + log_z
    log_q = -((support - shift).astype(np.float64) ** 2) / (2 * sigma**2) + log_z
    rho = shift**2 / (2 * sigma**2)
    ratios = [renyi(log_p, log_q, float(a)) / float(a) for a in ALPHAS]
    assert max(ratios) <= rho * (1 + 1e-9)
    # Tight at integer α: the tilted sum Σ_k e^(−(k − (1 − α)Δ)²/2σ²) equals Z exactly when
    # (1 − α)Δ is an integer (below Z otherwise), so D_α/α = ρ there.
    for alpha in (2.0, 3.0, 5.0):
        assert renyi(log_p, log_q, alpha) / alpha == pytest.approx(rho, rel=1e-9)
    assert rho <= epsilon**2 / 2 * (1 + 1e-12)


def test_counts_are_laplace_unless_the_executor_says_gaussian() -> None:
    plain = noisy_counts([3, 4], epsilon=0.5, l1=2, l2_squared=2)
    assert plain.kind == "laplace"
    assert plain.scale == laplace_scale(epsilon=0.5, sensitivity=2)
    with count_noise("discrete_gaussian"):
        drawn = noisy_counts([3, 4], epsilon=0.5, l1=2, l2_squared=2)
        with count_noise("laplace"):
            assert noisy_counts([1], epsilon=1.0, l1=1, l2_squared=1).kind == "laplace"
        assert noisy_counts([1], epsilon=1.0, l1=1, l2_squared=1).kind == "discrete_gaussian"
    assert drawn.kind == "discrete_gaussian"
    assert drawn.scale == gaussian_sigma(epsilon=0.5, l2_squared=2)
    assert drawn.scale == pytest.approx(math.sqrt(2) / 0.5)
    assert drawn.noise() == {"kind": "discrete_gaussian", "scale": drawn.scale}
    assert noisy_counts([1], epsilon=1.0, l1=1, l2_squared=1).kind == "laplace"
