"""Intervals from discrete Gaussian cells (issue #24; client/dpmine/intervals.py).

* half-widths: P(|noise| > t) ≤ miss for one cell and for sums of 2 and 3 cells, checked
  against the exact law computed here independently, and t is the smallest such (one cell) or
  at most one above it (sums: the truncation's added mass);
* coverage: cells of a fixed true table noised by the server's own sampler (σ = 1/ε) get
  90 % intervals that hold the truth ≥ 90 % of the time, and a joint box at miss 10⁻³ holds
  all four cells; the Gaussian's intervals are narrower than the Laplace's at the same ε;
* a reported σ below the one ε implies is refused.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pytest

from dpmine.errors import ParameterError
from dpmine.intervals import (
    cell_box,
    half_width,
    intervals_for,
    intervals_from_cells,
    noise_law,
    sum_half_width,
)
from dpmine.miners.itemsets import count_intervals
from dpmine.miners.trees import released_noise
from dpmine.wire import CountNoise, LeafCountsResponse, NoisyCells, Receipt
from dpmine.wire.statistics import jaccard, p_value
from dpmine_server.dp.mechanisms import discrete_gaussian

FloatArray = npt.NDArray[np.float64]


def exact_sum_law(sigma: float, terms: int) -> tuple[FloatArray, int]:
    """The pmf of a sum of ``terms`` discrete Gaussians on ±terms·K (K = 60σ + 5) and its centre."""
    k_max = math.ceil(60 * sigma) + 5
    ks = np.arange(-k_max, k_max + 1, dtype=np.float64)
    one = np.exp(-(ks**2) / (2 * sigma**2))
    one /= one.sum()
    law = one
    for _ in range(terms - 1):
        law = np.convolve(law, one)
    return law, terms * k_max


def exact_tail(sigma: float, terms: int, t: int) -> float:
    """P(|S| > t)."""
    law, centre = exact_sum_law(sigma, terms)
    return float(law[centre + t + 1 :].sum() + law[: max(centre - t, 0)].sum())


@pytest.mark.parametrize("sigma", [0.4, 1.0, 3.7, 25.0])
@pytest.mark.parametrize("miss", [0.1, 1e-3, 1e-8])
def test_one_cell_half_width_is_the_smallest_valid(sigma: float, miss: float) -> None:
    t = half_width(sigma, miss, "discrete_gaussian")
    assert exact_tail(sigma, 1, t) <= miss
    assert t == 0 or exact_tail(sigma, 1, t - 1) > miss * (1 - 1e-9)


@pytest.mark.parametrize("sigma", [0.6, 2.0, 12.0])
@pytest.mark.parametrize("terms", [2, 3])
@pytest.mark.parametrize("miss", [0.05, 1e-6])
def test_sum_half_width_is_valid_and_tight(sigma: float, terms: int, miss: float) -> None:
    t = sum_half_width(sigma, terms, miss, "discrete_gaussian")
    assert exact_tail(sigma, terms, t) <= miss
    assert t <= 1 or exact_tail(sigma, terms, t - 2) > miss


def test_wide_sums_use_the_sub_gaussian_bound() -> None:
    """σ = 2000 over 3 cells is too wide to convolve: t from 2e^(−t²/(2·3σ²)) ≤ miss."""
    sigma, miss = 2000.0, 1e-4
    t = sum_half_width(sigma, 3, miss, "discrete_gaussian")
    assert t == math.ceil(math.sqrt(2 * 3 * sigma**2 * math.log(2 / miss)))
    # Valid (the sum is within a hair of N(0, 3σ²) at this σ) and not 25 % too wide.
    normal = 3.8906 * sigma * math.sqrt(3)  # the two-sided 10⁻⁴ quantile
    assert normal < t < 1.25 * normal


def test_the_laplace_default_is_unchanged() -> None:
    assert half_width(2.0, 0.05) == half_width(2.0, 0.05, "laplace")
    assert sum_half_width(2.0, 3, 0.05) == sum_half_width(2.0, 3, 0.05, "laplace")


TRUE = (30, 12, 9, 150)
EPSILON = 0.25  # σ = 4 per cell
REPEATS = 1_500


def true_statistics() -> dict[str, float]:
    e11, e10, e01, e00 = TRUE
    return {
        "support": e11,
        "union": e11 + e10 + e01,
        "jaccard": jaccard(e11, e11 + e10 + e01),
        "support_left": e11 + e10,
        "support_right": e11 + e01,
        "p_value": p_value(e11 + e10 + e01 + e00, e11 + e10, e11 + e01, e11),
    }


def test_gaussian_intervals_cover_the_truth_on_a_zcdp_table() -> None:
    sigma = 1.0 / EPSILON
    noisy = discrete_gaussian(np.tile(np.array(TRUE, dtype=np.int64), REPEATS), epsilon=EPSILON)
    truth = true_statistics()
    hits = dict.fromkeys(truth, 0)
    box_hits = 0
    for cells in noisy.reshape(REPEATS, 4):
        e11, e10, e01, e00 = (int(v) for v in cells)
        iv = intervals_from_cells(e11, e10, e01, e00, scale=sigma, kind="discrete_gaussian")
        for name, value in truth.items():
            interval = getattr(iv, name)
            hits[name] += interval.contains(value)
        box = cell_box((e11, e10, e01, e00), scale=sigma, miss=1e-3, kind="discrete_gaussian")
        box_hits += all(
            getattr(box, name).contains(value)
            for name, value in zip(("e11", "e10", "e01", "e00"), TRUE, strict=True)
        )
    # The draws are OpenDP's, never seeded, so the bounds are set for false alarms below 10⁻⁶
    # a run: coverage measured over 60,000 tables is 0.905–0.910, 5 standard errors of 1,500
    # draws below 0.9 is crossed with probability < 4·10⁻⁹; the box misses 4.2·10⁻⁴ of the
    # time (≤ 10⁻³ by design), so more than 9 misses in 1,500 has probability 1.5·10⁻⁹.
    floor = 0.9 - 5 * math.sqrt(0.9 * 0.1 / REPEATS)
    for name, count in hits.items():
        assert count / REPEATS >= floor, (name, count / REPEATS)
    assert box_hits >= REPEATS - 9


def test_gaussian_intervals_are_narrower_than_laplace_ones_at_the_same_epsilon() -> None:
    """The point of issue #24: the same ρ buys narrower intervals, most at a small miss."""
    laplace = cell_box((30, 12, 9, 150), scale=1 / EPSILON, miss=1e-4)
    gaussian = cell_box((30, 12, 9, 150), scale=1 / EPSILON, miss=1e-4, kind="discrete_gaussian")
    assert gaussian.e11.width < 0.6 * laplace.e11.width


def test_a_release_is_read_with_its_reported_law() -> None:
    cells = NoisyCells(e11=30, e10=12, e01=9, e00=150)
    reported = CountNoise(kind="discrete_gaussian", scale=4.0)
    iv = intervals_for(cells, epsilon=EPSILON, mode="cells", noise=reported)
    assert iv.noise == "discrete_gaussian"
    assert iv == intervals_from_cells(30, 12, 9, 150, scale=4.0, kind="discrete_gaussian")
    assert intervals_for(cells, epsilon=EPSILON, mode="cells").noise == "laplace"
    assert noise_law(EPSILON, "paper", CountNoise(kind="discrete_gaussian", scale=5.66)) == (
        "discrete_gaussian",
        5.66,
    )
    with pytest.raises(ValueError, match="below"):
        noise_law(EPSILON, "paper", CountNoise(kind="discrete_gaussian", scale=4.0))


def leaf_release(partition: bool, noise: CountNoise | None) -> LeafCountsResponse:
    """A ``tree.leaf_counts`` answer of a 1 × 1 tree pair (values irrelevant here)."""
    receipt = Receipt(
        ledger_entry_id=1,
        dataset_id="d",
        operation="tree.leaf_counts",
        epsilon=0.5,
        epsilon_exact="0.5",
        guarantee="pure",
        remaining_epsilon=1.0,
        created_at=datetime.now(UTC),
    )
    return LeafCountsResponse(
        intersections=[[1]],
        left_counts=[1],
        partition=[[1, 2], [3, 4]] if partition else None,
        receipt=receipt,
        noise=noise,
    )


def test_tree_releases_are_read_with_their_reported_law() -> None:
    """``tree.leaf_counts``: Laplace of 1/ε or 2/ε when reported (or nothing is), the reported
    σ on a zCDP dataset, refused below the √2/ε of the paper's release."""
    assert released_noise(leaf_release(True, None), 0.5) == ("laplace", 2.0)
    paper = leaf_release(False, CountNoise(kind="laplace", scale=4.0))
    assert released_noise(paper, 0.5) == ("laplace", 4.0)
    gaussian = CountNoise(kind="discrete_gaussian", scale=math.sqrt(2) / 0.5)
    assert released_noise(leaf_release(False, gaussian), 0.5) == (
        "discrete_gaussian",
        gaussian.scale,
    )
    too_small = leaf_release(False, CountNoise(kind="discrete_gaussian", scale=2.0))
    with pytest.raises(ParameterError, match="below"):
        released_noise(too_small, 0.5)


def test_itemset_count_intervals_cover_all_k_counts_together() -> None:
    """fim.topk on a zCDP dataset: K = 5 counts with σ = √5/ε_p each; the K intervals hold
    all five true counts together ≥ 90 % of the time."""
    truth = np.array([40, 35, 33, 20, 7], dtype=np.int64)
    sigma = math.sqrt(5) / 0.5
    noisy = discrete_gaussian(np.tile(truth, REPEATS), epsilon=0.5, l2_squared=5)
    together = 0
    for counts in noisy.reshape(REPEATS, 5):
        _t, found = count_intervals([int(v) for v in counts], scale=sigma, kind="discrete_gaussian")
        together += all(low <= c <= high for (low, high), c in zip(found, truth, strict=True))
    assert together / REPEATS >= 0.9 - 4 * math.sqrt(0.9 * 0.1 / REPEATS)
    gaussian_t = count_intervals([0] * 5, scale=sigma, kind="discrete_gaussian")[0]
    assert gaussian_t < count_intervals([0] * 5, scale=5 / 0.5)[0] / 2  # Laplace: K/ε_p
