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
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["Noise", "TailCandidate", "noisy_top_k_with_tail", "upper_quantile"]

Noise = Literal["gumbel", "laplace"]
FloatArray = npt.NDArray[np.float64]


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


def _noise(size: int, *, noise: Noise, scale: float, rng: np.random.Generator) -> FloatArray:
    if noise == "gumbel":
        return rng.gumbel(0.0, scale, size=size)
    return rng.laplace(0.0, scale, size=size)


class _DescendingOrderStatistics:
    """The largest, second largest, … of ``count`` i.i.d. noise draws, one at a time."""

    def __init__(self, count: int, *, noise: Noise, scale: float, rng: np.random.Generator):
        self._left = count
        self._survival = 0.0  # survival probability of the previous value (none yet)
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

    ``draw_tail(rng)`` must return a candidate drawn uniformly from the whole tail (the
    function redraws candidates it has already revealed), with its true score ≤ ``tail_bound``.
    Privacy: with ``scale = 2Δ·K/ε`` and Gumbel noise this is the K-round peeling exponential
    mechanism, ε-DP for scores of sensitivity Δ (``scale = (Δ_up + Δ_down)·K/ε`` for one-sided
    bounds, ALGORITHMS.md §0.8: K/ε for scores that only grow when a row is added); with
    Laplace noise of scale ``2K·Δ/ε`` it is Bhaskar et al.'s Algorithm 2 selection (ε-DP).
    """
    scores = np.asarray(explicit_scores, dtype=np.float64)
    if scores.ndim != 1 or not np.all(np.isfinite(scores)):
        raise ValueError("explicit scores must be a finite vector")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"noise scale must be positive and finite, got {scale}")
    if tail_size < 0 or (tail_size > 0 and draw_tail is None):
        raise ValueError("a non-empty tail needs a draw_tail function")
    if k < 1 or k > scores.size + tail_size:
        raise ValueError(f"k = {k} exceeds the {scores.size + tail_size} candidates")
    if not math.isfinite(tail_bound):
        raise ValueError("tail_bound must be finite")

    noisy = scores + _noise(scores.size, noise=noise, scale=scale, rng=rng)
    # Min-heap of the best K (value, tiebreak, label) seen so far.
    best: list[tuple[float, int, int | Hashable]] = []
    for index in np.argsort(-noisy, kind="stable")[:k]:
        heapq.heappush(best, (float(noisy[index]), -int(index), int(index)))

    order = _DescendingOrderStatistics(tail_size, noise=noise, scale=scale, rng=rng)
    revealed: set[Hashable] = set()
    counter = scores.size
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
