"""Statistics of redescriptions from (noisy) counts: pure post-processing (ALGORITHMS.md §1.2,
§1.3, §1.6).

Nothing here sees data: the functions take released counts. The server derives the statistics
fields of a ``red.compute_quality`` response with them, and the client can recompute them from
released cells (:mod:`dpmine.stats` re-exports them). Like the rest of the wire package they
import only the standard library, so the binomial tail of the p-value is summed here in log
space rather than taken from scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CellStatistics", "jaccard", "p_value", "statistics_from_cells"]

#: Relative size below which the rest of a tail sum is dropped (2⁻⁶⁰ ≈ 8.7e-19).
_TAIL_TOLERANCE = 2.0**-60


def jaccard(intersection: float, union: float) -> float:
    """|I| / |U|, and 0 when the union is empty (§1.2)."""
    if union <= 0:
        return 0.0
    return max(0.0, min(1.0, intersection / union))


def p_value(n_rows: int, support_left: int, support_right: int, intersection: int) -> float:
    """P[X ≥ k] for X ~ Binomial(N, (s_L/N)(s_R/N)) (§1.3, clired's ``marg`` p-value).

    Inputs are clamped to a consistent range first (noisy counts may not be), and p = 1 when
    either support is 0.
    """
    n = max(int(n_rows), 0)
    s_left = min(max(int(support_left), 0), n)
    s_right = min(max(int(support_right), 0), n)
    k = min(max(int(intersection), 0), n)
    if n == 0 or s_left * s_right == 0:
        return 1.0
    probability = (s_left / n) * (s_right / n)
    return binomial_upper_tail(n, probability, k)


def binomial_upper_tail(n: int, probability: float, k: int) -> float:
    """P[X ≥ k] for X ~ Binomial(n, probability), summed from the smaller side (§1.3).

    Above the mean the upper tail P(k) + P(k+1) + … is summed directly; at or below it the
    result is 1 − P[X ≤ k − 1]. Both sums start next to the mode and run away from it, where the
    terms only shrink, so they stop once the rest is provably negligible."""
    if k <= 0 or probability >= 1.0:
        return 1.0
    if k > n or probability <= 0.0:
        return 0.0
    if k > n * probability:
        return min(1.0, _tail_sum(n, probability, k, upward=True))
    return max(0.0, 1.0 - _tail_sum(n, probability, k - 1, upward=False))


def _log_pmf(n: int, probability: float, k: int) -> float:
    """log P[X = k] for X ~ Binomial(n, probability), 0 < probability < 1, in the saddle-point
    form (Stirling remainders and deviances) that keeps full relative precision for large n,
    where differences of log-gamma values would lose about log10(n·log n) digits."""
    if k == 0:
        return n * math.log1p(-probability)
    if k == n:
        return n * math.log(probability)
    return (
        _stirling_remainder(n)
        - _stirling_remainder(k)
        - _stirling_remainder(n - k)
        - _deviance(k, n * probability)
        - _deviance(n - k, n * (1.0 - probability))
        + 0.5 * math.log(n / (2.0 * math.pi * k * (n - k)))
    )


def _stirling_remainder(m: int) -> float:
    """log(m!) − [(m + ½)·log m − m + ½·log 2π] for m ≥ 1 (its asymptotic series above 15)."""
    if m <= 15:
        return math.lgamma(m + 1) - (m + 0.5) * math.log(m) + m - 0.5 * math.log(2.0 * math.pi)
    inverse_square = 1.0 / (m * m)
    series = 0.0
    for coefficient in (1.0 / 1188.0, -1.0 / 1680.0, 1.0 / 1260.0, -1.0 / 360.0):
        series = (series + coefficient) * inverse_square
    return (1.0 / 12.0 + series) / m


def _deviance(x: float, mean: float) -> float:
    """x·log(x/mean) + mean − x, without cancellation when x is close to mean."""
    if abs(x - mean) >= 0.1 * (x + mean):
        return x * math.log(x / mean) + mean - x
    v = (x - mean) / (x + mean)
    total = (x - mean) * v
    power = 2.0 * x * v
    odd = 1
    while True:
        power *= v * v
        odd += 2
        updated = total + power / odd
        if updated == total:
            return total
        total = updated


def _tail_sum(n: int, probability: float, start: int, *, upward: bool) -> float:
    """Σ P[X = j] for j from ``start`` away from the mode (up to n, or down to 0).

    Successive terms follow the exact ratio P(j+1)/P(j) = (n−j)p/((j+1)(1−p)); the ratios only
    decrease away from the mode, so the rest after a term t with ratio r < 1 is below
    t·r/(1 − r)."""
    odds = probability / (1.0 - probability)
    term = math.exp(_log_pmf(n, probability, start))
    total = term
    j = start
    while term > 0.0 and (j < n if upward else j > 0):
        ratio = (n - j) * odds / (j + 1) if upward else j / ((n - j + 1) * odds)
        term *= ratio
        j += 1 if upward else -1
        total += term
        if ratio < 1.0 and term * ratio / (1.0 - ratio) <= total * _TAIL_TOLERANCE:
            break
    return total


@dataclass(frozen=True, slots=True)
class CellStatistics:
    """Derived statistics of four (noisy) cells, clamped at 0 (§1.6 [REC])."""

    support: int
    union: int
    jaccard: float
    support_left: int
    support_right: int
    n_rows: int
    p_value: float


def statistics_from_cells(e11: int, e10: int, e01: int, e00: int) -> CellStatistics:
    """Ĩ = max(Ẽ11,0), Ũ = Ĩ + max(Ẽ10,0) + max(Ẽ01,0), J̃ = Ĩ/Ũ, supports, N̂ and p̃ (§1.6)."""
    i, x10, x01, x00 = (max(int(v), 0) for v in (e11, e10, e01, e00))
    union = i + x10 + x01
    n_rows = union + x00
    return CellStatistics(
        support=i,
        union=union,
        jaccard=jaccard(i, union),
        support_left=i + x10,
        support_right=i + x01,
        n_rows=n_rows,
        p_value=p_value(n_rows, i + x10, i + x01, i),
    )
