"""Exactness of the noisy top-K sampler with a lazily revealed tail (ALGORITHMS.md §4.2, §4.3,
§7 notes (b), (c)).

* Without a tail, Gumbel top-K is the K-round peeling exponential mechanism: the ordered pairs
  (first, second) follow P(i, j) = w_i/W · w_j/(W − w_i) with w = exp(score/scale), and match a
  sequential sampler built from :func:`exponential_mechanism`.
* With a tail, the output must have the law of the all-explicit mechanism, whatever part of the
  universe is listed explicitly and whatever bound is declared for the tail, for Gumbel and Laplace
  noise. Exact ordered-pair probabilities: closed form (Gumbel) or one-dimensional integrals
  P(i first, j second) = ∫ f_j(y)·S_i(y)·Π_{l≠i,j} F_l(y) dy (Laplace).
* The descending order-statistics recursion against the exact law of the r-th largest of N i.i.d.
  draws, P(V_(r) ≤ x) = P(Binomial(N, S(x)) ≤ r − 1), and against brute force (sorted draws).
* Explicit blocks of equal scores have the law of their candidates listed one by one; the public
  bound on tail reveals holds in its worst case (every tail score the furthest below the bound),
  and the bound on draws is the negative-binomial quantile.

Every generator is seeded, so each test is reproducible; every goodness-of-fit test uses the
threshold p > 1e-5 (a correct sampler fails one with probability 1e-5).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
import numpy.typing as npt
import pytest
from scipy import integrate, stats

from dpmine_server.dp.mechanisms import exponential_mechanism
from dpmine_server.dp.rng import seeded_generator
from dpmine_server.dp.topk import (
    BlockPick,
    Noise,
    TailCandidate,
    _DescendingOrderStatistics,
    draw_bound,
    noisy_top_k_blocks,
    noisy_top_k_with_tail,
    reveal_bound,
    upper_quantile,
)

FloatArray = npt.NDArray[np.float64]
Outcome = tuple[int, ...]

P_VALUE = 1e-5
#: Cells with a smaller expected count are pooled before a chi-square test.
MIN_EXPECTED = 5.0
DRAWS = 20_000
#: Draws per configuration of the tail tests.
TAIL_DRAWS = 12_000

#: The small universe of the tail tests: candidate c has score SCORES[c].
SCORES = (3.0, 2.5, 1.5, 1.0, 0.0, -1.0)
SCALE = 1.0
NOISES: tuple[Noise, ...] = ("gumbel", "laplace")


# --------------------------------------------------------------------------------------------
# Exact references and test statistics


def gumbel_order_probabilities(
    scores: Sequence[float], scale: float, k: int
) -> dict[Outcome, float]:
    """Exact law of the ordered top-k (k ≤ 2) of scores + Gumbel(0, scale): the peeling EM."""
    weights = np.exp((np.asarray(scores) - max(scores)) / scale)
    total = float(weights.sum())
    n = len(scores)
    if k == 1:
        return {(i,): float(weights[i]) / total for i in range(n)}
    return {
        (i, j): float(weights[i]) / total * float(weights[j]) / (total - float(weights[i]))
        for i, j in itertools.permutations(range(n), 2)
    }


def laplace_order_probabilities(
    scores: Sequence[float], scale: float, k: int
) -> dict[Outcome, float]:
    """Exact law of the ordered top-k (k ≤ 2) of scores + Laplace(0, scale), by quadrature."""
    n = len(scores)
    low, high = min(scores) - 40 * scale, max(scores) + 40 * scale

    def cdf(y: float, centre: float) -> float:
        z = (y - centre) / scale
        return 0.5 * math.exp(z) if z < 0 else 1.0 - 0.5 * math.exp(-z)

    def pdf(y: float, centre: float) -> float:
        return 0.5 * math.exp(-abs(y - centre) / scale) / scale

    def below(y: float, skip: tuple[int, ...]) -> float:
        return math.prod(cdf(y, scores[other]) for other in range(n) if other not in skip)

    def integral(function: Callable[[float], float]) -> float:
        value, _error = integrate.quad(function, low, high, points=list(scores), limit=200)
        return float(value)

    def first(y: float, i: int) -> float:
        return pdf(y, scores[i]) * below(y, (i,))

    def first_then(y: float, i: int, j: int) -> float:
        return pdf(y, scores[j]) * (1.0 - cdf(y, scores[i])) * below(y, (i, j))

    result: dict[Outcome, float] = {}
    for i in range(n):
        if k == 1:
            result[(i,)] = integral(partial(first, i=i))
            continue
        for j in range(n):
            if j != i:
                result[(i, j)] = integral(partial(first_then, i=i, j=j))
    return result


def exact_probabilities(
    scores: Sequence[float], noise: Noise, scale: float, k: int
) -> dict[Outcome, float]:
    """Exact output law of the full mechanism (every candidate explicit)."""
    if noise == "gumbel":
        return gumbel_order_probabilities(scores, scale, k)
    return laplace_order_probabilities(scores, scale, k)


def goodness_of_fit(observed: Counter[Outcome], probabilities: dict[Outcome, float]) -> float:
    """Chi-square p-value of observed outcomes against exact probabilities (small cells pooled)."""
    assert set(observed) <= set(probabilities), set(observed) - set(probabilities)
    draws = sum(observed.values())
    big = [o for o in probabilities if probabilities[o] * draws >= MIN_EXPECTED]
    small = [o for o in probabilities if probabilities[o] * draws < MIN_EXPECTED]
    counts = [observed[o] for o in big]
    expected = [probabilities[o] * draws for o in big]
    if small:
        counts.append(sum(observed[o] for o in small))
        expected.append(sum(probabilities[o] for o in small) * draws)
    scale = draws / sum(expected)  # absorb quadrature rounding in the total
    _statistic, p_value = stats.chisquare(counts, [e * scale for e in expected])
    return float(p_value)


def homogeneity(first: Counter[Outcome], second: Counter[Outcome]) -> float:
    """Chi-square p-value that two samples share one law (cells with < 10 in total pooled)."""
    outcomes = sorted(set(first) | set(second))
    big = [o for o in outcomes if first[o] + second[o] >= 10]
    small = [o for o in outcomes if first[o] + second[o] < 10]
    rows = [[first[o] for o in big], [second[o] for o in big]]
    if small:
        rows[0].append(sum(first[o] for o in small))
        rows[1].append(sum(second[o] for o in small))
    result = stats.chi2_contingency(np.array(rows))
    return float(result.pvalue)


# --------------------------------------------------------------------------------------------
# Samplers under test


def uniform_tail(members: Sequence[int]) -> Callable[[np.random.Generator], TailCandidate]:
    """A draw_tail that picks a tail member uniformly and reports its true score."""

    def draw(rng: np.random.Generator) -> TailCandidate:
        member = members[int(rng.integers(len(members)))]
        return TailCandidate(key=member, score=SCORES[member])

    return draw


def sample_top_k(
    explicit: Sequence[int],
    tail_bound: float | None,
    *,
    noise: Noise,
    k: int,
    draws: int,
    seed: int,
) -> Counter[Outcome]:
    """Outcomes (candidate ids) of :func:`noisy_top_k_with_tail` with ``explicit`` listed and
    every other candidate of SCORES in the tail (no tail when ``tail_bound`` is None)."""
    rng = seeded_generator(seed)
    explicit_scores = [SCORES[c] for c in explicit]
    tail = [c for c in range(len(SCORES)) if c not in explicit]
    if tail_bound is None:
        assert not tail
    draw_tail = uniform_tail(tail) if tail else None
    outcomes: Counter[Outcome] = Counter()
    for _ in range(draws):
        labels = noisy_top_k_with_tail(
            explicit_scores,
            k=k,
            noise=noise,
            scale=SCALE,
            rng=rng,
            tail_size=len(tail),
            tail_bound=0.0 if tail_bound is None else tail_bound,
            draw_tail=draw_tail,
        )
        outcomes[tuple(_candidate(label, explicit) for label in labels)] += 1
    return outcomes


def _candidate(label: int | Hashable, explicit: Sequence[int]) -> int:
    """Candidate id of an output label: explicit labels are positions, tail labels are ids."""
    if isinstance(label, int) and not isinstance(label, bool):
        return explicit[label]
    raise AssertionError(f"unexpected label {label!r}")


def sample_with_tail_keys(
    explicit: Sequence[int], tail_bound: float, *, noise: Noise, k: int, draws: int, seed: int
) -> Counter[Outcome]:
    """Like :func:`sample_top_k`, but tail labels (candidate ids as strings) are mapped back."""
    rng = seeded_generator(seed)
    tail = [c for c in range(len(SCORES)) if c not in explicit]

    def draw(generator: np.random.Generator) -> TailCandidate:
        member = tail[int(generator.integers(len(tail)))]
        return TailCandidate(key=f"tail-{member}", score=SCORES[member])

    outcomes: Counter[Outcome] = Counter()
    for _ in range(draws):
        labels = noisy_top_k_with_tail(
            [SCORES[c] for c in explicit],
            k=k,
            noise=noise,
            scale=SCALE,
            rng=rng,
            tail_size=len(tail),
            tail_bound=tail_bound,
            draw_tail=draw,
        )
        outcomes[tuple(_label_to_candidate(label, explicit) for label in labels)] += 1
    return outcomes


def _label_to_candidate(label: int | Hashable, explicit: Sequence[int]) -> int:
    if isinstance(label, str):
        return int(label.removeprefix("tail-"))
    return _candidate(label, explicit)


def peeling_em(scores: Sequence[float], *, k: int, draws: int, seed: int) -> Counter[Outcome]:
    """K sequential exponential-mechanism rounds without replacement (§4.2 step 2)."""
    rng = seeded_generator(seed)
    outcomes: Counter[Outcome] = Counter()
    for _ in range(draws):
        left = list(range(len(scores)))
        chosen: list[int] = []
        for _round in range(k):
            # weight exp(ε·q/(2Δ)) = exp(q/SCALE) with ε = 2/SCALE, Δ = 1
            pick = exponential_mechanism(
                [scores[c] for c in left], epsilon=2.0 / SCALE, sensitivity=1.0, rng=rng
            )
            chosen.append(left.pop(pick))
        outcomes[tuple(chosen)] += 1
    return outcomes


# --------------------------------------------------------------------------------------------
# (a) no tail: Gumbel top-K is the peeling exponential mechanism

PEELING_SCORES = (0.0, 0.5, 1.0, 2.0, 2.2)


def test_exact_references_are_distributions() -> None:
    for noise in NOISES:
        for k in (1, 2):
            law = exact_probabilities(SCORES, noise, SCALE, k)
            assert math.isclose(sum(law.values()), 1.0, abs_tol=1e-7), (noise, k)
            assert min(law.values()) > 0.0
    # Laplace with a huge scale is nearly uniform; Gumbel ratios follow exp(Δscore/scale).
    near_uniform = laplace_order_probabilities((0.0, 0.1, 0.2), 1000.0, 1)
    assert all(abs(p - 1 / 3) < 1e-3 for p in near_uniform.values())
    gumbel = gumbel_order_probabilities((0.0, 1.0), 1.0, 1)
    assert math.isclose(gumbel[(1,)] / gumbel[(0,)], math.e)


def test_gumbel_top_2_without_tail_is_the_peeling_exponential_mechanism() -> None:
    law = gumbel_order_probabilities(PEELING_SCORES, SCALE, 2)
    rng = seeded_generator(101)
    one_shot: Counter[Outcome] = Counter()
    for _ in range(30_000):
        labels = noisy_top_k_with_tail(PEELING_SCORES, k=2, noise="gumbel", scale=SCALE, rng=rng)
        one_shot[tuple(int(label) for label in labels if isinstance(label, int))] += 1
    assert sum(one_shot.values()) == 30_000
    assert goodness_of_fit(one_shot, law) > P_VALUE
    peeled = peeling_em(PEELING_SCORES, k=2, draws=30_000, seed=102)
    assert goodness_of_fit(peeled, law) > P_VALUE
    assert homogeneity(one_shot, peeled) > P_VALUE


def test_top_1_marginals_without_tail() -> None:
    scores = (0.0, 0.4, 1.3, 2.0)
    for noise, seed in zip(NOISES, (111, 112), strict=True):
        rng = seeded_generator(seed)
        observed: Counter[Outcome] = Counter()
        for _ in range(DRAWS):
            (label,) = noisy_top_k_with_tail(scores, k=1, noise=noise, scale=0.7, rng=rng)
            assert isinstance(label, int)
            observed[(label,)] += 1
        assert goodness_of_fit(observed, exact_probabilities(scores, noise, 0.7, 1)) > P_VALUE


def test_a_tiny_scale_returns_the_exact_order() -> None:
    rng = seeded_generator(5)
    scores = [4.0, 9.0, 1.0, 7.0, 3.0]
    for noise in NOISES:
        for k in range(1, 6):
            labels = noisy_top_k_with_tail(scores, k=k, noise=noise, scale=1e-6, rng=rng)
            assert labels == [1, 3, 0, 4, 2][:k]


# --------------------------------------------------------------------------------------------
# (b) the tail scheme is exact

#: (explicit candidates, tail bound): the tail holds every other candidate. The bound equals the
#: best tail score or lies strictly above it; the tail holds several distinct scores below it.
LAYOUTS = [
    pytest.param((0, 1), 1.5, id="two-explicit-bound-equal"),
    pytest.param((0,), 2.75, id="one-explicit-bound-above"),
    pytest.param((1, 3), 3.0, id="tail-holds-the-best"),
    pytest.param((), 3.0, id="all-tail"),
]


@pytest.fixture(scope="module")
def explicit_reference() -> dict[str, Counter[Outcome]]:
    """Top-2 outcomes with every candidate explicit, for both noises."""
    everything = tuple(range(len(SCORES)))
    return {
        noise: sample_top_k(everything, None, noise=noise, k=2, draws=TAIL_DRAWS, seed=seed)
        for noise, seed in zip(NOISES, (201, 202), strict=True)
    }


@pytest.fixture(scope="module")
def exact_top_2() -> dict[str, dict[Outcome, float]]:
    """Exact ordered top-2 law of SCORES for both noises."""
    return {noise: exact_probabilities(SCORES, noise, SCALE, 2) for noise in NOISES}


def test_all_explicit_matches_the_exact_law(
    explicit_reference: dict[str, Counter[Outcome]], exact_top_2: dict[str, dict[Outcome, float]]
) -> None:
    for noise in NOISES:
        assert goodness_of_fit(explicit_reference[noise], exact_top_2[noise]) > P_VALUE, noise


@pytest.mark.parametrize("noise", ["gumbel", "laplace"])
@pytest.mark.parametrize(("explicit", "tail_bound"), LAYOUTS)
def test_tail_gives_the_law_of_the_full_mechanism(
    noise: Noise,
    explicit: tuple[int, ...],
    tail_bound: float,
    explicit_reference: dict[str, Counter[Outcome]],
    exact_top_2: dict[str, dict[Outcome, float]],
) -> None:
    assert all(SCORES[c] <= tail_bound for c in range(len(SCORES)) if c not in explicit)
    seed = 300 + 10 * len(explicit) + (noise == "laplace") + int(4 * tail_bound)
    observed = sample_with_tail_keys(
        explicit, tail_bound, noise=noise, k=2, draws=TAIL_DRAWS, seed=seed
    )
    assert goodness_of_fit(observed, exact_top_2[noise]) > P_VALUE
    assert homogeneity(observed, explicit_reference[noise]) > P_VALUE


def test_tail_scheme_detects_a_wrong_law() -> None:
    """Power check of the statistics above: a tail sampler that forgets the score correction
    (reports every tail candidate at the bound) is rejected."""
    rng = seeded_generator(401)
    explicit = (0, 1)
    tail = [2, 3, 4, 5]

    def biased(generator: np.random.Generator) -> TailCandidate:
        member = tail[int(generator.integers(len(tail)))]
        return TailCandidate(key=f"tail-{member}", score=2.5)  # true scores are lower

    observed: Counter[Outcome] = Counter()
    for _ in range(TAIL_DRAWS):
        labels = noisy_top_k_with_tail(
            [SCORES[c] for c in explicit],
            k=2,
            noise="gumbel",
            scale=SCALE,
            rng=rng,
            tail_size=len(tail),
            tail_bound=2.5,
            draw_tail=biased,
        )
        observed[tuple(_label_to_candidate(label, explicit) for label in labels)] += 1
    assert goodness_of_fit(observed, gumbel_order_probabilities(SCORES, SCALE, 2)) < 1e-12


@pytest.mark.parametrize("noise", ["gumbel", "laplace"])
def test_tail_at_its_bound_reveals_at_most_k_candidates(noise: Noise) -> None:
    """When every tail score equals the bound (the paper's S2 block) at most K tail candidates
    are revealed, even in a tail of 10^15 candidates."""
    rng = seeded_generator(501)
    for k in (1, 3, 5):
        for explicit in ([], [0.5, 0.25], [10.0] * 6):
            revealed: list[str] = []

            def draw(
                generator: np.random.Generator, revealed: list[str] = revealed
            ) -> TailCandidate:
                key = f"t{int(generator.integers(10**15))}"
                revealed.append(key)
                return TailCandidate(key=key, score=0.0)

            labels = noisy_top_k_with_tail(
                explicit,
                k=k,
                noise=noise,
                scale=1.0,
                rng=rng,
                tail_size=10**15,
                tail_bound=0.0,
                draw_tail=draw,
            )
            assert len(labels) == k
            assert len(set(labels)) == k
            assert len(set(revealed)) <= k
            assert {label for label in labels if isinstance(label, str)} <= set(revealed)
            assert all(label in range(len(explicit)) for label in labels if isinstance(label, int))


def test_far_ahead_explicit_candidates_reveal_nothing() -> None:
    rng = seeded_generator(502)

    def never(generator: np.random.Generator) -> TailCandidate:
        del generator
        raise AssertionError("no tail candidate can enter the top K")

    for noise in NOISES:
        labels = noisy_top_k_with_tail(
            [1000.0, 900.0, 800.0],
            k=3,
            noise=noise,
            scale=1.0,
            rng=rng,
            tail_size=10**9,
            tail_bound=0.0,
            draw_tail=never,
        )
        assert labels == [0, 1, 2]


def test_tail_only_with_k_equal_to_the_universe() -> None:
    rng = seeded_generator(503)
    labels = noisy_top_k_with_tail(
        [],
        k=6,
        noise="laplace",
        scale=1.0,
        rng=rng,
        tail_size=6,
        tail_bound=3.0,
        draw_tail=uniform_tail(range(6)),
    )
    assert sorted(int(label) for label in labels if isinstance(label, int)) == list(range(6))


def test_tail_candidate_above_the_bound_is_refused() -> None:
    def liar(generator: np.random.Generator) -> TailCandidate:
        del generator
        return TailCandidate(key="x", score=2.0)

    with pytest.raises(ValueError, match="above tail_bound"):
        noisy_top_k_with_tail(
            [],
            k=1,
            noise="gumbel",
            scale=1.0,
            rng=seeded_generator(1),
            tail_size=5,
            tail_bound=1.0,
            draw_tail=liar,
        )


# --------------------------------------------------------------------------------------------
# (c) the descending order statistics


def _survival(x: FloatArray, noise: Noise, scale: float) -> FloatArray:
    if noise == "gumbel":
        return np.asarray(stats.gumbel_r.sf(x, scale=scale), dtype=np.float64)
    return np.asarray(stats.laplace.sf(x, scale=scale), dtype=np.float64)


def _order_statistic_cdf(
    rank: int, count: int, noise: Noise, scale: float
) -> Callable[[FloatArray], FloatArray]:
    """CDF of the rank-th largest of ``count`` i.i.d. draws: P(Bin(count, S(x)) ≤ rank − 1)."""

    def cdf(x: FloatArray) -> FloatArray:
        survival = _survival(np.asarray(x, dtype=np.float64), noise, scale)
        return np.asarray(stats.binom.cdf(rank - 1, count, survival), dtype=np.float64)

    return cdf


def _largest_three(count: int, noise: Noise, scale: float, repeats: int, seed: int) -> FloatArray:
    rng = seeded_generator(seed)
    values = np.empty((repeats, 3))
    for row in range(repeats):
        order = _DescendingOrderStatistics(count, noise=noise, scale=scale, rng=rng)
        values[row] = [order.next() for _ in range(3)]
    return values


def _brute_force_three(
    count: int, noise: Noise, scale: float, repeats: int, seed: int
) -> FloatArray:
    rng = seeded_generator(seed)
    if noise == "gumbel":
        draws = rng.gumbel(0.0, scale, size=(repeats, count))
    else:
        draws = rng.laplace(0.0, scale, size=(repeats, count))
    return -np.sort(-draws, axis=1)[:, :3]


@pytest.mark.parametrize("noise", ["gumbel", "laplace"])
@pytest.mark.parametrize("count", [5, 50])
def test_order_statistics_match_the_exact_law_and_brute_force(noise: Noise, count: int) -> None:
    scale = 1.7
    seed = 600 + count + (noise == "laplace")
    recursion = _largest_three(count, noise, scale, DRAWS, seed)
    brute = _brute_force_three(count, noise, scale, DRAWS, seed + 1000)
    assert np.all(np.isfinite(recursion))
    assert np.all(recursion[:, 0] > recursion[:, 1])
    assert np.all(recursion[:, 1] > recursion[:, 2])
    for column, rank in ((0, 1), (1, 2), (2, 3)):
        exact = _order_statistic_cdf(rank, count, noise, scale)
        assert stats.kstest(recursion[:, column], exact).pvalue > P_VALUE, rank
        assert stats.kstest(brute[:, column], exact).pvalue > P_VALUE, rank  # the reference
    for column in (0, 2):
        assert stats.ks_2samp(recursion[:, column], brute[:, column]).pvalue > P_VALUE


def test_order_statistics_count_down_and_stop() -> None:
    order = _DescendingOrderStatistics(5, noise="gumbel", scale=1.0, rng=seeded_generator(7))
    values = []
    while order:
        values.append(order.next())
    assert len(values) == 5
    assert values == sorted(values, reverse=True)
    with pytest.raises(IndexError):
        order.next()
    assert not _DescendingOrderStatistics(0, noise="laplace", scale=1.0, rng=seeded_generator(7))


def test_maximum_of_a_huge_gumbel_tail_is_exact() -> None:
    """The largest of N i.i.d. Gumbel(0, s) is Gumbel(s·ln N, s): exact for N = 10^15."""
    count, scale = 10**15, 2.0
    values = _largest_three(count, "gumbel", scale, 5_000, 701)
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(values, axis=1) < 0)
    shifted = values[:, 0] - scale * math.log(count)
    assert stats.kstest(shifted, stats.gumbel_r(scale=scale).cdf).pvalue > P_VALUE


def test_maximum_of_a_huge_laplace_tail_is_exact() -> None:
    """P(V₁ ≤ x) = F(x)^N = exp(N·log1p(−½e^{−x/b})) for x ≥ 0, N = 10^15."""
    count, scale = 10**15, 0.5
    values = _largest_three(count, "laplace", scale, 5_000, 702)
    assert np.all(np.isfinite(values))
    assert np.all(np.diff(values, axis=1) < 0)
    assert np.all(values[:, 0] > 0)

    def cdf(x: FloatArray) -> FloatArray:
        return np.asarray(np.exp(count * np.log1p(-0.5 * np.exp(-x / scale))), dtype=np.float64)

    assert stats.kstest(values[:, 0], cdf).pvalue > P_VALUE


@pytest.mark.parametrize("noise", ["gumbel", "laplace"])
def test_order_statistics_beyond_64_bit_counts(noise: Noise) -> None:
    rng = seeded_generator(703)
    order = _DescendingOrderStatistics(10**30, noise=noise, scale=1.0, rng=rng)
    values = [order.next() for _ in range(50)]
    assert all(math.isfinite(v) for v in values)
    assert all(a > b for a, b in itertools.pairwise(values))
    assert 40 < values[0] < 120  # about ln(10^30) = 69 for both noises


# --------------------------------------------------------------------------------------------
# upper_quantile and input validation

SURVIVALS = np.concatenate(
    [np.geomspace(1e-300, 0.5, 120), 0.5 + np.linspace(1e-9, 0.5 - 1e-9, 60), [1 - 1e-16]]
)


@pytest.mark.parametrize("scale", [0.3, 1.0, 25.0])
def test_upper_quantile_is_the_inverse_survival_function(scale: float) -> None:
    for noise, law in zip(NOISES, (stats.gumbel_r, stats.laplace), strict=True):
        ours = np.array([upper_quantile(float(s), noise=noise, scale=scale) for s in SURVIVALS])
        reference = law.isf(SURVIVALS, scale=scale)
        np.testing.assert_allclose(ours, reference, rtol=1e-12, atol=1e-12 * scale)
        # and it inverts the survival function
        back = law.sf(ours, scale=scale)
        np.testing.assert_allclose(back, SURVIVALS, rtol=1e-9)


@pytest.mark.parametrize("survival", [0.0, 1.0, -0.25, 1.5, math.nan, math.inf])
def test_upper_quantile_rejects_invalid_probabilities(survival: float) -> None:
    for noise in NOISES:
        with pytest.raises(ValueError, match="survival probability"):
            upper_quantile(survival, noise=noise, scale=1.0)


def _draw_nothing(generator: np.random.Generator) -> TailCandidate:
    del generator
    return TailCandidate(key="t", score=0.0)


@dataclass(frozen=True)
class BadCall:
    """Arguments of a call that must be refused."""

    scores: list[float] | list[list[float]]
    k: int = 1
    scale: float = 1.0
    tail_size: int = 0
    tail_bound: float = 0.0
    has_drawer: bool = True


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(BadCall([1.0, math.nan]), "finite vector", id="nan-score"),
        pytest.param(BadCall([1.0, math.inf]), "finite vector", id="inf-score"),
        pytest.param(BadCall([[1.0, 2.0]]), "finite vector", id="matrix"),
        pytest.param(BadCall([1.0, 2.0], scale=0.0), "noise scale", id="zero-scale"),
        pytest.param(BadCall([1.0, 2.0], scale=-1.0), "noise scale", id="negative-scale"),
        pytest.param(BadCall([1.0, 2.0], scale=math.inf), "noise scale", id="infinite-scale"),
        pytest.param(BadCall([1.0, 2.0], scale=math.nan), "noise scale", id="nan-scale"),
        pytest.param(BadCall([1.0], tail_size=-1), "draw_tail", id="negative-tail"),
        pytest.param(BadCall([1.0], tail_size=3, has_drawer=False), "draw_tail", id="no-drawer"),
        pytest.param(BadCall([1.0, 2.0], k=0), "exceeds", id="k-zero"),
        pytest.param(BadCall([1.0, 2.0], k=3), "exceeds", id="k-too-large"),
        pytest.param(BadCall([1.0], k=5, tail_size=3), "exceeds", id="k-above-tail"),
        pytest.param(BadCall([1.0], tail_size=3, tail_bound=math.inf), "tail_bound", id="inf"),
        pytest.param(BadCall([1.0], tail_size=3, tail_bound=math.nan), "tail_bound", id="nan"),
    ],
)
def test_invalid_inputs_raise_value_error(call: BadCall, message: str) -> None:
    for noise in NOISES:
        with pytest.raises(ValueError, match=message):
            noisy_top_k_with_tail(
                call.scores,
                k=call.k,
                noise=noise,
                scale=call.scale,
                rng=seeded_generator(1),
                tail_size=call.tail_size,
                tail_bound=call.tail_bound,
                draw_tail=_draw_nothing if call.has_drawer else None,
            )


# --------------------------------------------------------------------------------------------
# (d) explicit blocks of equal scores, and the public bounds on reveals and draws

#: Blocks (score, size): the expanded candidates are SCORES-like, with repeated scores.
BLOCKS = ((3.0, 1), (2.0, 3), (1.0, 2), (0.0, 4))


def _expanded(blocks: Sequence[tuple[float, int]]) -> tuple[list[float], list[tuple[int, int]]]:
    """The candidates of the blocks (scores) and their (block, member) names."""
    scores, names = [], []
    for block, (score, size) in enumerate(blocks):
        for member in range(size):
            scores.append(score)
            names.append((block, member))
    return scores, names


def sample_blocks(
    blocks: Sequence[tuple[float, int]],
    *,
    tail: Sequence[float],
    tail_bound: float,
    noise: Noise,
    draws: int,
    seed: int,
) -> Counter[Outcome]:
    """Top-2 outcomes (indices into the expanded blocks, then the tail) of
    :func:`noisy_top_k_blocks`, each block's picks mapped to distinct uniform members."""
    rng = seeded_generator(seed)
    _scores, names = _expanded(blocks)
    position = {name: i for i, name in enumerate(names)}
    offset = len(names)

    def draw(generator: np.random.Generator) -> TailCandidate:
        member = int(generator.integers(len(tail)))
        return TailCandidate(key=offset + member, score=tail[member])

    outcomes: Counter[Outcome] = Counter()
    for _ in range(draws):
        picks = noisy_top_k_blocks(
            [score for score, _size in blocks],
            [size for _score, size in blocks],
            k=2,
            noise=noise,
            scale=SCALE,
            rng=rng,
            tail_size=len(tail),
            tail_bound=tail_bound,
            draw_tail=draw if tail else None,
        )
        members: dict[int, list[int]] = {}
        outcome = []
        for pick in picks:
            if isinstance(pick, BlockPick):
                if pick.block not in members:
                    size = blocks[pick.block][1]
                    members[pick.block] = [int(m) for m in rng.permutation(size)]
                outcome.append(position[(pick.block, members[pick.block][pick.rank])])
            else:
                assert isinstance(pick, int)
                outcome.append(pick)
        outcomes[tuple(outcome)] += 1
    return outcomes


@pytest.mark.parametrize("noise", ["gumbel", "laplace"])
@pytest.mark.parametrize("with_tail", [False, True], ids=["blocks", "blocks+tail"])
def test_blocks_give_the_law_of_their_expanded_candidates(noise: Noise, with_tail: bool) -> None:
    """Blocks of equal scores (and a tail below them, scores corrected) have the exact law of
    the mechanism over every candidate listed one by one."""
    scores, _names = _expanded(BLOCKS)
    tail = [-0.5, -1.0, 0.5] if with_tail else []
    law = exact_probabilities([*scores, *tail], noise, SCALE, 2)
    seed = 800 + 2 * with_tail + (noise == "laplace")
    observed = sample_blocks(
        BLOCKS, tail=tail, tail_bound=0.5, noise=noise, draws=TAIL_DRAWS, seed=seed
    )
    assert goodness_of_fit(observed, law) > P_VALUE


def test_a_huge_block_is_sampled_without_expanding_it() -> None:
    """A block of 10^15 candidates at score 0 against one at 40 (scale 1): the block's maximum
    is Gumbel(ln 10^15 ≈ 34.5) and beats the single candidate with probability 1/(1 + e^5.5)."""
    rng = seeded_generator(811)
    wins = 0
    runs = 4000
    for _ in range(runs):
        (pick,) = noisy_top_k_blocks(
            [0.0, 40.0], [10**15, 1], k=1, noise="gumbel", scale=1.0, rng=rng
        )
        assert isinstance(pick, BlockPick)
        wins += pick.block == 0
    p = 1.0 / (1.0 + math.exp(40.0 - math.log(10**15)))
    assert stats.binomtest(wins, runs, p).pvalue > P_VALUE


@pytest.mark.parametrize("noise", ["gumbel", "laplace"])
@pytest.mark.parametrize(("k", "gap"), [(1, 0.7), (3, 2.0), (5, 1.0)])
def test_reveals_stay_within_the_public_bound(noise: Noise, k: int, gap: float) -> None:
    """The worst case of the bound: no explicit candidate, every tail score `gap` below the
    declared bound. More than R(δ) reveals happen at most a δ share of the runs (binomial upper
    limit), and R(½) is not vacuous (exceeded in at least 5 % of the runs)."""
    rng = seeded_generator(820 + k + int(10 * gap) + (noise == "laplace"))
    runs, delta = 2000, 0.01
    tail_size = 10**6
    strict = reveal_bound(k=k, gap=gap, scale=1.0, tail_size=tail_size, failure=delta)
    loose = reveal_bound(k=k, gap=gap, scale=1.0, tail_size=tail_size, failure=0.5)
    assert k <= loose <= strict
    counts = []
    for _ in range(runs):
        revealed = 0

        def draw(generator: np.random.Generator) -> TailCandidate:
            nonlocal revealed
            revealed += 1
            return TailCandidate(key=int(generator.integers(10**12)), score=-gap)

        noisy_top_k_blocks(
            [],
            [],
            k=k,
            noise=noise,
            scale=1.0,
            rng=rng,
            tail_size=tail_size,
            tail_bound=0.0,
            draw_tail=draw,
        )
        counts.append(revealed)
    above = sum(count > strict for count in counts)
    assert stats.binomtest(above, runs, delta, alternative="greater").pvalue > P_VALUE
    assert sum(count > loose for count in counts) >= 0.05 * runs
    assert reveal_bound(k=k, gap=0.0, scale=1.0, tail_size=tail_size, failure=delta) == k


@pytest.mark.parametrize(("successes", "p"), [(1, 0.5), (30, 0.9), (200, 0.55), (5, 0.01)])
def test_draw_bound_is_the_negative_binomial_quantile(successes: int, p: float) -> None:
    failure = 1e-6
    draws = draw_bound(successes=successes, success_probability=p, failure=failure)
    # P[more than X draws] = P[more than X − R failures before the R-th success]
    assert stats.nbinom.sf(draws - successes, successes, p) <= failure * (1 + 1e-9)
    assert stats.nbinom.sf(draws - successes - 1, successes, p) > failure
    assert draw_bound(successes=successes, success_probability=1.0, failure=failure) == successes
    capped = draw_bound(successes=successes, success_probability=p, failure=failure, limit=3)
    assert capped == max(3, successes) if draws > 3 else capped == draws
