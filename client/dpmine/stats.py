"""Statistics of redescriptions from (noisy) counts: pure post-processing (ALGORITHMS.md §1.2–1.3).

Nothing here sees data; the functions take released counts and are used by the client and, for
derived fields of a response, by the server.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import binom

__all__ = ["CellStatistics", "jaccard", "p_value", "statistics_from_cells"]


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
    return float(binom.sf(k - 1, n, probability))


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
