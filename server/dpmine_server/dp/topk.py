"""Noisy top-K over an explicit candidate set plus a huge, lazily revealed tail (ALGORITHMS.md §4).

Both of Bhaskar et al.'s selections are "add i.i.d. noise to every candidate's score, output the
K largest in order":

* exponential mechanism with K rounds without replacement = Gumbel noise of scale ``2Δ/ε_round``
  (Algorithm 1, §4.2; the K-fold peeling EM is exactly Gumbel top-K);
* Laplace noise of scale ``b`` (Algorithm 2, §4.3).

The universe may hold billions of candidates, almost all with small scores. The *tail* (every
candidate not listed explicitly) is handled exactly without enumerating it: every tail candidate
``t`` has a score ``s(t) ≤ bound``; couple its noisy value ``v(t) = s(t) + Z(t)`` with
``u(t) = bound + Z(t) ≥ v(t)``. The largest ``u`` values of the tail are generated in decreasing
order by the order-statistics recursion (they are the sorted values of i.i.d. draws, and the
candidates holding them are distinct uniform draws from the tail), each revealed candidate's
true score is computed on demand and its value corrected to ``v = u − (bound − s)``. Revealing
stops when the next ``u`` is below the current K-th largest value: no unrevealed candidate can
enter the top K. The output has exactly the distribution of the full mechanism; only the
running time depends on the data (a timing side channel: never report it).

When every tail score equals ``bound`` (the paper's S2 block with truncated score τ) no correction
happens and this is §4.3's order-statistics sampler; at most K candidates are revealed.

Explicit candidates may come in *blocks* of equal score (:func:`noisy_top_k_blocks`): a block of
N members is N i.i.d. noise values at one score, so its values in decreasing order are the same
order-statistics recursion, and the members that hold them are a uniformly random ordering of the
block (the caller draws them, e.g. distinct uniform positions). Only blocks whose largest value is
among the K largest block maxima can hold a top-K value (any other block has K values above all of
its own), so the work is O(#blocks + K log K), whatever the blocks' sizes.

**How many tail candidates are revealed** (:func:`reveal_bound`). Let D = bound − (smallest
possible tail score) and Z₁ > Z₂ > … the noise order statistics of the tail. After j ≥ K reveals
the K-th best value is at least the K-th best revealed value ≥ Z_K + (smallest tail score), so a
(j+1)-th reveal needs Z_{j+1} ≥ Z_K − D. For both noises the upper quantile Q (Q(S(z)) = z)
satisfies |dQ/ds| ≥ scale/s (Gumbel: y·e^{−y} ≤ 1 − e^{−y}; Laplace: density ≤ S/scale), hence
Z_K − Z_{R+1} ≥ scale·ln(S_{R+1}/S_K), with S_i = S(Z_i) the ascending order statistics of
uniforms: S_K/S_{R+1} = Γ_K/Γ_{R+1} ~ Beta(K, R + 1 − K), whatever the tail size (Rényi). So
P[more than R reveals] ≤ P[Beta(K, R + 1 − K) ≥ e^{−D/scale}]: a public function of K, D and the
scale, and the law of the reveals is dominated by the worst case in which every tail score is
the smallest possible.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy import special

__all__ = [
    "BlockPick",
    "Noise",
    "TailCandidate",
    "draw_bound",
    "noisy_top_k_blocks",
    "noisy_top_k_with_tail",
    "reveal_bound",
    "upper_quantile",
]

Noise = Literal["gumbel", "laplace"]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class BlockPick:
    """The ``rank``-th largest value (0 = largest) picked from explicit block ``block``."""

    block: int
    rank: int


@dataclass(frozen=True, slots=True)
class TailCandidate:
    """A tail member drawn uniformly: its identity (hashable) and its true score (≤ bound)."""

    key: Hashable
    score: float


def upper_quantile(survival: float, *, noise: Noise, scale: float) -> float:
    """The x with P[Z > x] = ``survival`` for Z ~ Gumbel(0, scale) or Laplace(0, scale).

    Computed from the upper tail so that survival probabilities near 0 keep full precision.
    """
    if not 0.0 < survival < 1.0:
        raise ValueError(f"survival probability must be in (0, 1), got {survival}")
    if noise == "gumbel":
        # S(x) = 1 − exp(−e^{−x}) ⇒ x = −log(−log(1 − S))
        return -scale * math.log(-math.log1p(-survival))
    if survival <= 0.5:
        return -scale * math.log(2.0 * survival)
    return scale * math.log(2.0 * (1.0 - survival))


def _upper_quantiles(survival: FloatArray, *, noise: Noise, scale: float) -> FloatArray:
    """:func:`upper_quantile` of every entry (each in (0, 1))."""
    if noise == "gumbel":
        return np.asarray(-scale * np.log(-np.log1p(-survival)), dtype=np.float64)
    low = survival <= 0.5
    safe = np.where(low, survival, 0.25)
    high = np.where(low, 0.75, survival)
    return np.where(low, -scale * np.log(2.0 * safe), scale * np.log(2.0 * (1.0 - high)))


class _DescendingOrderStatistics:
    """The largest, second largest, … of ``count`` i.i.d. noise draws, one at a time; with
    ``after``, those below a largest value already drawn whose survival probability it is
    (``count`` then counts the draws left)."""

    def __init__(
        self,
        count: int,
        *,
        noise: Noise,
        scale: float,
        rng: np.random.Generator,
        after: float = 0.0,
    ):
        self._left = count
        self._survival = after  # survival probability of the previous value (0: none yet)
        self._noise: Noise = noise
        self._scale = scale
        self._rng = rng

    def __bool__(self) -> bool:
        return self._left > 0

    def next(self) -> float:
        """The next largest value: S_k = 1 − (1 − S_{k−1})·U^{1/left}, in log space."""
        if self._left <= 0:
            raise IndexError("no draws left")
        log_u = math.log(1.0 - self._rng.random())  # U in (0, 1]
        survival = -math.expm1(math.log1p(-self._survival) + log_u / self._left)
        self._left -= 1
        # Guard the open interval against rounding at the extremes.
        survival = min(max(survival, math.ulp(0.0)), math.nextafter(1.0, 0.0))
        self._survival = survival
        return upper_quantile(survival, noise=self._noise, scale=self._scale)


def _first_survivals(sizes: npt.NDArray[np.int64], rng: np.random.Generator) -> FloatArray:
    """Survival probability of the largest of each block's i.i.d. draws: 1 − U^{1/N}."""
    log_u = np.log1p(-rng.random(sizes.size))  # log U, U in (0, 1]
    survival = -np.expm1(log_u / sizes.astype(np.float64))
    return np.clip(survival, math.ulp(0.0), math.nextafter(1.0, 0.0))


def _explicit_top(
    scores: FloatArray,
    sizes: npt.NDArray[np.int64],
    *,
    k: int,
    noise: Noise,
    scale: float,
    rng: np.random.Generator,
) -> list[tuple[float, BlockPick]]:
    """The min(K, Σ sizes) largest explicit values, largest first, with their block picks."""
    survival = _first_survivals(sizes, rng)
    first = scores + _upper_quantiles(survival, noise=noise, scale=scale)
    blocks = np.arange(scores.size)
    if scores.size > k:  # only the K largest block maxima can hold top-K values
        blocks = np.argpartition(-first, k - 1)[:k]
    heap: list[tuple[float, int, int, _DescendingOrderStatistics]] = []
    for block in blocks.tolist():
        rest = _DescendingOrderStatistics(
            int(sizes[block]) - 1, noise=noise, scale=scale, rng=rng, after=float(survival[block])
        )
        heapq.heappush(heap, (-float(first[block]), block, 0, rest))
    top: list[tuple[float, BlockPick]] = []
    while heap and len(top) < k:
        negative, block, rank, rest = heapq.heappop(heap)
        top.append((-negative, BlockPick(block=block, rank=rank)))
        if rest:
            heapq.heappush(heap, (-(scores[block] + rest.next()), block, rank + 1, rest))
    return top


def noisy_top_k_blocks(
    block_scores: npt.ArrayLike,
    block_sizes: npt.ArrayLike,
    *,
    k: int,
    noise: Noise,
    scale: float,
    rng: np.random.Generator,
    tail_size: int = 0,
    tail_bound: float = 0.0,
    draw_tail: Callable[[np.random.Generator], TailCandidate] | None = None,
) -> list[BlockPick | Hashable]:
    """The K largest ``score + noise`` over explicit blocks (block b: ``block_sizes[b]``
    candidates of score ``block_scores[b]``) and the tail, largest first: a :class:`BlockPick`
    (the ``rank``-th pick of its block: the caller maps the picks of a block to distinct
    uniformly random members, in rank order) or a tail key.

    ``draw_tail(rng)`` must return a candidate drawn uniformly from the whole tail (the function
    redraws candidates it has already revealed), with its true score ≤ ``tail_bound``. Privacy:
    as :func:`noisy_top_k_with_tail`, whose law this is once the blocks are expanded (module
    docstring).
    """
    scores = np.asarray(block_scores, dtype=np.float64)
    sizes = np.asarray(block_sizes, dtype=np.int64)
    if scores.ndim != 1 or not np.all(np.isfinite(scores)):
        raise ValueError("explicit scores must be a finite vector")
    if sizes.shape != scores.shape or np.any(sizes < 1):
        raise ValueError("every explicit block needs a size of at least 1")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"noise scale must be positive and finite, got {scale}")
    if tail_size < 0 or (tail_size > 0 and draw_tail is None):
        raise ValueError("a non-empty tail needs a draw_tail function")
    explicit = int(sizes.sum(dtype=np.int64)) if sizes.size else 0
    if k < 1 or k > explicit + tail_size:
        raise ValueError(f"k = {k} exceeds the {explicit + tail_size} candidates")
    if not math.isfinite(tail_bound):
        raise ValueError("tail_bound must be finite")

    # Min-heap of the best K (value, tiebreak, label) seen so far.
    best: list[tuple[float, int, BlockPick | Hashable]] = [
        (value, -order, pick)
        for order, (value, pick) in enumerate(
            _explicit_top(scores, sizes, k=k, noise=noise, scale=scale, rng=rng)
        )
    ]
    heapq.heapify(best)
    order = _DescendingOrderStatistics(tail_size, noise=noise, scale=scale, rng=rng)
    revealed: set[Hashable] = set()
    counter = len(best)
    while order:
        upper = tail_bound + order.next()
        if len(best) == k and upper < best[0][0]:
            break  # no unrevealed tail candidate can enter the top K
        candidate = _draw_unrevealed(draw_tail, revealed, rng)
        if candidate.score > tail_bound:
            raise ValueError("a tail candidate scored above tail_bound")
        value = upper - (tail_bound - candidate.score)
        counter += 1
        entry = (value, -counter, candidate.key)
        if len(best) < k:
            heapq.heappush(best, entry)
        elif value > best[0][0]:
            heapq.heapreplace(best, entry)
    return [label for _value, _tie, label in sorted(best, reverse=True)]


def noisy_top_k_with_tail(
    explicit_scores: npt.ArrayLike,
    *,
    k: int,
    noise: Noise,
    scale: float,
    rng: np.random.Generator,
    tail_size: int = 0,
    tail_bound: float = 0.0,
    draw_tail: Callable[[np.random.Generator], TailCandidate] | None = None,
) -> list[int | Hashable]:
    """Indices (explicit) or keys (tail) of the K largest ``score + noise``, largest first.

    ``draw_tail(rng)`` must return a candidate drawn uniformly from the whole tail (the function
    redraws candidates it has already revealed), with its true score ≤ ``tail_bound``.
    Privacy: with ``scale = 2Δ·K/ε`` and Gumbel noise this is the K-round peeling exponential
    mechanism, ε-DP for scores of sensitivity Δ (``scale = (Δ_up + Δ_down)·K/ε`` for one-sided
    bounds, ALGORITHMS.md §0.8: K/ε for scores that only grow when a row is added); with
    Laplace noise of scale ``2K·Δ/ε`` it is Bhaskar et al.'s Algorithm 2 selection (ε-DP).
    """
    scores = np.asarray(explicit_scores, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError("explicit scores must be a finite vector")
    labels = noisy_top_k_blocks(
        scores,
        np.ones(scores.size, dtype=np.int64),
        k=k,
        noise=noise,
        scale=scale,
        rng=rng,
        tail_size=tail_size,
        tail_bound=tail_bound,
        draw_tail=draw_tail,
    )
    return [label.block if isinstance(label, BlockPick) else label for label in labels]


def _draw_unrevealed(
    draw_tail: Callable[[np.random.Generator], TailCandidate] | None,
    revealed: set[Hashable],
    rng: np.random.Generator,
) -> TailCandidate:
    assert draw_tail is not None
    while True:
        candidate = draw_tail(rng)
        if candidate.key not in revealed:
            revealed.add(candidate.key)
            return candidate


def reveal_bound(*, k: int, gap: float, scale: float, tail_size: int, failure: float) -> int:
    """R with P[more than R tail reveals] ≤ ``failure`` (module docstring): the smallest R ≥ K
    with P[Beta(K, R + 1 − K) ≥ e^{−gap/scale}] ≤ ``failure``, at most ``tail_size``. ``gap``
    bounds the tail bound minus the smallest possible tail score (public)."""
    if gap <= 0 or tail_size <= k:
        return min(k, tail_size)
    threshold = -math.expm1(-gap / scale)  # 1 − e^{−gap/scale}

    def exceeds(reveals: int) -> float:  # P[Beta(K, R + 1 − K) ≥ x] = I_{1−x}(R + 1 − K, K)
        return float(special.betainc(reveals + 1 - k, k, threshold))

    return _smallest(lambda reveals: exceeds(reveals) <= failure, k, tail_size)


def draw_bound(
    *, successes: int, success_probability: float, failure: float, limit: int = 2**62
) -> int:
    """X with P[more than X independent draws are needed for ``successes`` successes] ≤
    ``failure``, each draw succeeding with probability ≥ ``success_probability``: the smallest
    X ≥ successes with P[Binomial(X, p) < successes] = I_{1−p}(X − successes + 1, successes) ≤
    ``failure`` (``limit`` if that is more)."""
    if successes <= 0:
        return 0
    if not 0.0 < success_probability <= 1.0:
        raise ValueError("draws must succeed with a positive probability")
    if success_probability == 1.0:
        return successes
    miss = 1.0 - success_probability

    def fails(draws: int) -> float:
        return float(special.betainc(draws - successes + 1, successes, miss))

    return _smallest(lambda draws: fails(draws) <= failure, successes, max(limit, successes))


def _smallest(holds: Callable[[int], bool], start: int, limit: int) -> int:
    """The smallest n in [start, limit] where the monotone predicate ``holds`` becomes true,
    or ``limit`` if it holds nowhere below."""
    if start >= limit or holds(start):
        return min(start, limit)
    low, high = start, min(2 * start + 1, limit)
    while not holds(high):
        if high >= limit:
            return limit
        low, high = high, min(2 * high, limit)
    while high - low > 1:
        middle = (low + high) // 2
        if holds(middle):
            high = middle
        else:
            low = middle
    return high
