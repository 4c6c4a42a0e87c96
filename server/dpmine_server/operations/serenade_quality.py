"""Serenade's low-sensitivity quality and its global sensitivity (ALGORITHMS.md §2.1).

Q(q_L, q_R) = J · σ(s·(|I| − x0)), with J = |I|/|U| (0 when U = 0). Everything here is public
arithmetic on (s, x0, N_max): no data, no budget (``serenade.calibrate``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.special import expit

__all__ = [
    "DEFAULT_STEEPNESS_GRID",
    "calibrate",
    "jaccard",
    "quality",
    "sensitivity",
]

FloatArray = npt.NDArray[np.float64]

#: Line-search grid for the steepness s (the authors used 0.01 steps; §2.1 uses 0.0025).
DEFAULT_STEEPNESS_GRID: tuple[float, ...] = tuple(round(0.0025 * k, 4) for k in range(1, 41))

#: Rows i scanned exactly; beyond, a closed-form bound covers the rest (see sensitivity()).
_EXACT_SCAN = 1_000_000


def jaccard(intersection: npt.ArrayLike, union: npt.ArrayLike) -> FloatArray:
    """J = |I|/|U|, 0 where |U| = 0 (vectorised)."""
    i = np.asarray(intersection, dtype=np.float64)
    u = np.asarray(union, dtype=np.float64)
    return np.asarray(i / np.where(u > 0, u, 1.0) * (u > 0), dtype=np.float64)


def quality(
    intersection: npt.ArrayLike, union: npt.ArrayLike, *, s: float, x0: float
) -> FloatArray:
    """Q = (|I|/|U|)·σ(s(|I| − x0)), 0 where |U| = 0 (vectorised)."""
    i = np.asarray(intersection, dtype=np.float64)
    return np.asarray(jaccard(i, union) * expit(s * (i - x0)), dtype=np.float64)


def sensitivity(s: float, x0: float, n_max: int) -> float:
    """Δ(s, x0) = max over 0 ≤ i ≤ u < N_max of max(Q(i,u) − Q(i,u+1), Q(i+1,u+1) − Q(i,u)).

    Under add/remove one row (i, u) moves to (i, u±1) or (i±1, u±1) (§2.1). For fixed i both
    differences have closed-form maxima over u — D1 = σ_i·i/(u(u+1)) peaks at u = i, and
    D2 = A/(u+1) − B/u (A = (i+1)σ_{i+1}, B = iσ_i) peaks at u* = 1/(√(A/B) − 1) — so the scan is
    O(N_max) instead of the paper's O(N_max²). Rows beyond 10^6 are covered by the bound
    D ≤ 1/(i+1) + s·e^{−s(i − x0)}, so the result is always a valid upper bound.
    """
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"steepness s must be positive, got {s}")
    if not math.isfinite(x0):
        raise ValueError(f"x0 must be finite, got {x0}")
    if n_max < 1:
        raise ValueError(f"n_max must be at least 1, got {n_max}")
    best = float(expit(s * (1.0 - x0)))  # the jump (0,0) → (1,1)
    top = min(n_max - 1, _EXACT_SCAN)
    if top >= 1:
        i = np.arange(1, top + 1, dtype=np.float64)
        sigma = expit(s * (i - x0))
        sigma_next = expit(s * (i + 1.0 - x0))
        best = max(best, float(np.max(sigma / (i + 1.0))))
        a = sigma_next * (i + 1.0)
        b = sigma * i
        with np.errstate(divide="ignore", invalid="ignore"):
            peak = np.where(a > b, 1.0 / (np.sqrt(a / b) - 1.0), np.inf)
        last = float(n_max - 1)
        for guess in (np.floor(peak), np.ceil(peak), i):
            u = np.clip(np.nan_to_num(guess, posinf=last), i, last)
            best = max(best, float(np.max(a / (u + 1.0) - b / u)))
    if top < n_max - 1:
        best = max(best, 1.0 / (top + 1.0) + s * math.exp(-s * (top - x0)))
    return best


def calibrate(
    x0: float, n_max: int, grid: Sequence[float] = DEFAULT_STEEPNESS_GRID
) -> tuple[float, float]:
    """(s*, Δ(s*)): the grid steepness with the smallest sensitivity (§2.1 line search)."""
    if not grid:
        raise ValueError("the steepness grid is empty")
    scored = [(sensitivity(s, x0, n_max), s) for s in grid]
    delta, best = min(scored)
    return best, delta
