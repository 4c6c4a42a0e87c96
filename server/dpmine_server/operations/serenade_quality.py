"""Serenade's low-sensitivity quality and its sensitivities (ALGORITHMS.md §2.1, §0.8).

Q(q_L, q_R) = J · σ(s·(|I| − x0)), with J = |I|/|U| (0 when U = 0), optionally times the
coverage factor σ(s₂·(E00 − y0)), E00 = rows in neither support. The sensitivities are split
into the largest increase and decrease under one added row (the range-calibrated EM of §0.8).
Everything here is public arithmetic on (s, x0, s₂, y0, N_max): no data, no budget
(``serenade.calibrate``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from scipy.special import expit

from dpmine_server.compiled import compiled_counted_free, inlined_counted_free, kernel_input
from dpmine_server.dp.mechanisms import OneSided, em_coefficient
from dpmine_server.public_cache import public_cache

__all__ = [
    "DEFAULT_STEEPNESS_GRID",
    "JACCARD_SENSITIVITY",
    "Calibration",
    "KernelQuality",
    "Sensitivity",
    "calibrate",
    "counts_quality",
    "coverage",
    "coverage_increase",
    "covered_quality",
    "jaccard",
    "kernel_quality",
    "line_search",
    "one_sided",
    "quality",
    "quality_of",
    "sensitivities",
    "sensitivity",
    "sensitivity_scan_length",
]

FloatArray = npt.NDArray[np.float64]
Calibration = Literal["range", "symmetric"]

#: Line-search grid for the steepness s (the authors used 0.01 steps; §2.1 uses 0.0025).
DEFAULT_STEEPNESS_GRID: tuple[float, ...] = tuple(round(0.0025 * k, 4) for k in range(1, 41))

#: Rows i scanned exactly; beyond, a closed-form bound covers the rest (see sensitivity()).
_EXACT_SCAN = 1_000_000
#: K: a sigmoid of slope s is within e^−K of 0 (or its steps of size s·e^−K) farther than K/s
#: from its centre, so the sensitivity scans stop there (:func:`one_sided`,
#: :func:`coverage_increase`); e^−40 ≈ 4·10⁻¹⁸, far below every sensitivity of §2.1's grid.
_SATURATION = 40.0


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


def covered_quality(
    intersection: npt.ArrayLike,
    union: npt.ArrayLike,
    n_rows: int,
    *,
    s: float,
    x0: float,
    s2: float,
    y0: float,
) -> FloatArray:
    """Q·σ(s₂(E00 − y0)) with E00 = n − |U|: rows in neither support, rows whose values are
    missing included (a literal on a missing value is false, as in ``red.compute_quality``)."""
    e00 = n_rows - np.asarray(union, dtype=np.float64)
    return np.asarray(
        quality(intersection, union, s=s, x0=x0) * coverage(e00, s2=s2, y0=y0), dtype=np.float64
    )


#: How a compiled kernel evaluates Q: ``(mode, (n, s, x0, s₂, y0))``, mode 0 for J alone, 1
#: for :func:`quality`, 2 for :func:`covered_quality` (:func:`kernel_quality`).
KernelQuality = tuple[int, tuple[float, float, float, float, float]]


def kernel_quality(
    n_rows: int,
    *,
    s: float | None = None,
    x0: float = 0.0,
    s2: float | None = None,
    y0: float | None = None,
) -> KernelQuality:
    """The :data:`KernelQuality` of :func:`jaccard` (``s`` None), :func:`quality` (``y0``
    None) or :func:`covered_quality` (s₂ = s when None) on ``n_rows`` rows."""
    mode = 0 if s is None else 1 if y0 is None else 2
    slope = 0.0 if s is None else s
    coverage_slope = slope if s2 is None else s2
    return mode, (float(n_rows), slope, x0, coverage_slope, 0.0 if y0 is None else y0)


def counts_quality(
    intersection: npt.NDArray[np.int64], union: npt.NDArray[np.int64], kernel: KernelQuality
) -> FloatArray:
    """Q of integer counts as ``kernel`` says (:func:`kernel_quality`: J, :func:`quality` or
    :func:`covered_quality`), by one compiled pass (:func:`_counts_quality`) instead of a
    dozen vectorised ones: the same arithmetic in the same order (:func:`quality_of`), so
    equal to those functions up to the last bit of ``exp``
    (tests/operations/test_serenade_quality.py). Counts of another dtype take the vectorised
    functions."""
    i, u = np.asarray(intersection), np.asarray(union)
    mode, constants = kernel
    if i.dtype != np.int64 or u.dtype != np.int64 or i.shape != u.shape:
        n_rows, s, x0, s2, y0 = constants
        if mode == 0:
            return jaccard(i, u)
        if mode == 1:
            return quality(i, u, s=s, x0=x0)
        return covered_quality(i, u, int(n_rows), s=s, x0=x0, s2=s2, y0=y0)
    out = np.empty(i.shape, dtype=np.float64)
    _counts_quality(
        kernel_input(i.ravel(), np.int64),
        kernel_input(u.ravel(), np.int64),
        constants,
        mode,
        out.reshape(-1),
    )
    return out


@inlined_counted_free
def quality_of(
    inter: float, union: float, constants: tuple[float, float, float, float, float], mode: int
) -> float:
    """Q of one candidate (|I|, |U|) as :func:`counts_quality` computes it: J (0 where
    |U| = 0), times σ(s(|I| − x0)) when mode ≥ 1, times σ(s₂((n − |U|) − y0)) when mode is 2;
    ``constants`` = (n, s, x0, s₂, y0)."""
    n_rows, s, x0, s2, y0 = constants
    value = inter / union if union > 0 else 0.0
    if mode >= 1:
        value *= 1.0 / (1.0 + math.exp(-(s * (inter - x0))))
    if mode == 2:
        value *= 1.0 / (1.0 + math.exp(-(s2 * ((n_rows - union) - y0))))
    return value


@compiled_counted_free
def _counts_quality(
    i: npt.NDArray[np.int64],
    u: npt.NDArray[np.int64],
    constants: tuple[float, float, float, float, float],
    mode: int,
    out: FloatArray,
) -> None:
    """``out[k]`` = :func:`quality_of` (i[k], u[k])."""
    for k in range(i.size):
        out[k] = quality_of(float(i[k]), float(u[k]), constants, mode)


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """One-sided sensitivities of Q (§0.8): the largest increase (``up``) and decrease
    (``down``) of any candidate's Q when one row is added (removal: the mirror amounts)."""

    up: float
    down: float

    @property
    def symmetric(self) -> float:
        """The usual global sensitivity Δ = max(Δ_up, Δ_down)."""
        return max(self.up, self.down)

    def denominator(self, calibration: Calibration) -> float:
        """Δ_up + Δ_down ("range", §0.8) or 2Δ ("symmetric"): c = ε / this."""
        return self.up + self.down if calibration == "range" else 2.0 * self.symmetric

    def c_per_epsilon(self, calibration: Calibration) -> float:
        """The factor of ε in the EM exponent, by the shared ``em_coefficient``."""
        if calibration == "range":
            return em_coefficient(1.0, OneSided(up=self.up, down=self.down))
        return em_coefficient(1.0, self.symmetric)


def _check(s: float, x0: float, n_max: int) -> None:
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"steepness s must be positive, got {s}")
    if not math.isfinite(x0):
        raise ValueError(f"x0 must be finite, got {x0}")
    if n_max < 1:
        raise ValueError(f"n_max must be at least 1, got {n_max}")


def one_sided(s: float, x0: float, n_max: int) -> Sensitivity:
    """(Δ_up, Δ_down) of Q = J·σ(s(|I| − x0)) over 0 ≤ i ≤ u < N_max (§2.1, §0.8).

    Adding a row moves (i, u) to (i, u) (no change), (i, u+1) — a decrease D1 = Q(i,u) −
    Q(i,u+1) ≥ 0, since J drops and σ stays — or (i+1, u+1) — an increase D2 = Q(i+1,u+1) −
    Q(i,u) ≥ 0, since J = i/u ≤ (i+1)/(u+1) and σ grows. So Δ_down = max D1 and Δ_up = max D2,
    and max(Δ_up, Δ_down) is the paper's Δ. For fixed i both have closed-form maxima over u —
    D1 = σ_i·i/(u(u+1)) peaks at u = i, and D2 = A/(u+1) − B/u (A = (i+1)σ_{i+1}, B = iσ_i)
    peaks at u* = 1/(√(A/B) − 1) — so the scan is O(N_max) instead of O(N_max²); i = 0 gives
    D2 = σ_1/(u+1) ≤ σ_1, the jump (0,0) → (1,1).

    Only i within K/s of x0 is scanned (K = :data:`_SATURATION`), so the work is bounded by
    public values whatever N_max. Below, i + 1 ≤ x0 − K/s: σ_{i+1} ≤ e^{−K}, D1 ≤ σ_{i+1}, and
    D2 ≤ (A − B)/(i+1) ≤ σ_{i+1}(1 + i·s)/(i+1) ≤ max(1, s)·e^{−K} (σ' = σ(1 − σ) ≤ σ).
    Above the scan (i > top, top ≥ the last scanned i; also beyond 10^6 rows): D ≤ 1/(i+1) +
    s·e^{−s(i − x0)}, decreasing in i. Both bounds enter the maxima, so the results are always
    valid upper bounds; they are far below the scanned peak near x0 (it lies within ln(s·N)/s
    of x0), so the maxima are the full scan's.
    """
    _check(s, x0, n_max)
    up = float(expit(s * (1.0 - x0)))  # the jump (0,0) → (1,1)
    down = 0.0
    low, top = _window(x0, s, 1, min(n_max - 1, _EXACT_SCAN))
    top = max(top, 0)  # the tail bound below holds from i = top + 1 ≥ 1
    if low > 1:
        below = max(1.0, s) * math.exp(-_SATURATION)
        up, down = max(up, below), max(down, below)
    if low <= top:
        i = np.arange(low, top + 1, dtype=np.float64)
        sigma = expit(s * (i - x0))
        sigma_next = expit(s * (i + 1.0 - x0))
        down = max(down, float(np.max(sigma / (i + 1.0))))
        a = sigma_next * (i + 1.0)
        b = sigma * i
        with np.errstate(divide="ignore", invalid="ignore"):
            peak = np.where(a > b, 1.0 / (np.sqrt(a / b) - 1.0), np.inf)
        last = float(n_max - 1)
        for guess in (np.floor(peak), np.ceil(peak), i):
            u = np.clip(np.nan_to_num(guess, posinf=last), i, last)
            up = max(up, float(np.max(a / (u + 1.0) - b / u)))
    if top < n_max - 1:
        tail = 1.0 / (top + 1.0) + s * math.exp(-s * (top - x0))
        up, down = max(up, tail), max(down, tail)
    return Sensitivity(up=up, down=down)


def sensitivity(s: float, x0: float, n_max: int) -> float:
    """Δ(s, x0) = max over 0 ≤ i ≤ u < N_max of max(Q(i,u) − Q(i,u+1), Q(i+1,u+1) − Q(i,u))
    (§2.1): the larger of :func:`one_sided`'s two maxima."""
    return one_sided(s, x0, n_max).symmetric


def coverage(e00: npt.ArrayLike, *, s2: float, y0: float) -> FloatArray:
    """The coverage factor σ(s₂(E00 − y0)) of §2.1 (vectorised)."""
    return np.asarray(expit(s2 * (np.asarray(e00, dtype=np.float64) - y0)), dtype=np.float64)


def coverage_increase(s: float, x0: float, s2: float, y0: float, n_max: int) -> float:
    """Largest increase of Q·σ(s₂(E00 − y0)) when the added row lies outside both supports.

    Only E00 moves, d → d + 1, so the change is Q(i,u)·(G(d+1) − G(d)) ≥ 0 with G the coverage
    factor. After the addition u + d + 1 ≤ N_max rows, so Q(i,u) ≤ max over i ≤ u ≤ m of
    J·σ(s(i − x0)) = σ(s(m − x0)), m = N_max − 1 − d (J = 1 at i = u = m; 0 when m = 0). The
    exact maximum is therefore max over 0 ≤ d < N_max of (G(d+1) − G(d))·σ(s(m − x0)), and it
    is at most max_d (G(d+1) − G(d)) ≤ tanh(s₂/4) < s₂/4. Only d within K/s₂ of y0 is scanned
    (K = :data:`_SATURATION`): below, d + 1 ≤ y0 − K/s₂ − 1 and G(d+1) − G(d) ≤ G(d+1) ≤
    e^{−K}; above, d > y0 + K/s₂ and G(d+1) − G(d) ≤ s₂·max σ' ≤ s₂·e^{−K}; the factor
    σ(·) ≤ 1. So max(1, s₂)·e^{−K} bounds every unscanned d, and it enters the maximum.
    """
    _check(s, x0, n_max)
    if not (math.isfinite(s2) and s2 > 0):
        raise ValueError(f"coverage steepness s2 must be positive, got {s2}")
    if not math.isfinite(y0):
        raise ValueError(f"y0 must be finite, got {y0}")
    low = _window(y0 - 1.0, s2, 0, n_max - 1)[0]  # every d < low has d + 1 ≤ y0 − K/s₂ − 1
    top = _window(y0, s2, 0, n_max - 1)[1]  # every d > top has d > y0 + K/s₂
    outside = max(1.0, s2) * math.exp(-_SATURATION) if low > 0 or top < n_max - 1 else 0.0
    if low > top:
        return outside
    d = np.arange(low, top + 1, dtype=np.float64)
    m = n_max - 1.0 - d
    best_q = np.where(m >= 1, expit(s * (m - x0)), 0.0)
    step = coverage(d + 1.0, s2=s2, y0=y0) - coverage(d, s2=s2, y0=y0)
    return max(float(np.max(step * best_q)), outside)


def _window(centre: float, steepness: float, first: int, last: int) -> tuple[int, int]:
    """The integers of [first, last] within K/steepness of ``centre`` (K =
    :data:`_SATURATION`), as (low, top) with low > top when none is; clamped in floats first,
    so a vanishing steepness gives the whole range."""
    reach = _SATURATION / steepness
    low = math.floor(max(float(first), centre - reach))
    top = math.ceil(min(float(last), centre + reach))
    return low, top


def sensitivity_scan_length(
    s: float, x0: float, n_max: int, *, y0: float | None = None, s2: float | None = None
) -> int:
    """How many values :func:`sensitivities` scans for these public parameters: the i of
    :func:`one_sided`'s window and, with the coverage factor, the d of
    :func:`coverage_increase`'s (the same windows as theirs). Its time is a fixed cost plus a
    cost per scanned value (services/timing.py prices it so), a public function of the
    request's quality options and n_max."""
    low, top = _window(x0, s, 1, min(n_max - 1, _EXACT_SCAN))
    length = max(top - low + 1, 0)
    if y0 is not None:
        steep = s if s2 is None else s2
        low = _window(y0 - 1.0, steep, 0, n_max - 1)[0]
        top = _window(y0, steep, 0, n_max - 1)[1]
        length += max(top - low + 1, 0)
    return length


@public_cache(maxsize=4096)
def sensitivities(
    s: float, x0: float, n_max: int, *, y0: float | None = None, s2: float | None = None
) -> Sensitivity:
    """(Δ_up, Δ_down) of Q, with the coverage factor when y0 is given (s₂ defaults to s).

    Proof for Q·G, G(d) = σ(s₂(d − y0)) ∈ (0, 1), d = E00 [§2.1, §0.8]. An added row falls into
    exactly one of E11, E10, E01, E00 of every candidate. In E11, E10 or E01 it moves (i, u) as
    for the paper's Q while d stays, so the change is G(d)·(Q(i',u') − Q(i,u)): an increase
    ≤ G·Δ_up(Q) ≤ Δ_up(Q) and a decrease ≤ Δ_down(Q). In E00 only G moves, and upwards (G is
    increasing), by at most :func:`coverage_increase` ≤ tanh(s₂/4) < s₂/4. Removing a row is the
    reverse move (the same changes negated). Hence Δ_up = max(Δ_up(Q), coverage increase) and
    Δ_down = Δ_down(Q) hold for every candidate at once, as §0.8 needs, and the symmetric
    Δ = max(Δ(s, x0), coverage increase) ≤ max(Δ(s, x0), s₂/4), the bound of §2.1. The factor
    G ≤ 1 is not used jointly with u + d < N_max, so Δ_up may exceed the exact maximum by the
    factor max G (≈ 1 unless y0 is near N_max). Cached: the arguments are public.
    """
    base = one_sided(s, x0, n_max)
    if y0 is None:
        return base
    steep = s if s2 is None else s2
    return Sensitivity(up=max(base.up, coverage_increase(s, x0, steep, y0, n_max)), down=base.down)


#: Plain Jaccard (the NoSens ablation): (0,0) → (1,1) lifts J from 0 to 1, and the largest
#: drop is (1,1) → (1,2), from 1 to ½ (i/(u(u+1)) ≤ ½).
JACCARD_SENSITIVITY = Sensitivity(up=1.0, down=0.5)


def calibrate(
    x0: float, n_max: int, grid: Sequence[float] = DEFAULT_STEEPNESS_GRID
) -> tuple[float, float]:
    """(s*, Δ(s*)): the grid steepness with the smallest sensitivity (§2.1 line search)."""
    if not grid:
        raise ValueError("the steepness grid is empty")
    scored = [(sensitivity(s, x0, n_max), s) for s in grid]
    delta, best = min(scored)
    return best, delta


def line_search(
    x0: float,
    n_max: int,
    grid: Sequence[float] = DEFAULT_STEEPNESS_GRID,
    *,
    y0: float | None = None,
    s2: float | None = None,
    calibration: Calibration = "range",
) -> tuple[float, Sensitivity]:
    """(s*, its sensitivities): the grid steepness with the largest c per unit ε, i.e. the
    smallest Δ_up + Δ_down ("range") or 2Δ ("symmetric"); with the coverage factor, s₂ = s
    unless s₂ is given (§2.1 line search, §0.8)."""
    if not grid:
        raise ValueError("the steepness grid is empty")
    scored = [(sensitivities(s, x0, n_max, y0=y0, s2=s2), s) for s in grid]
    best, s_best = min(scored, key=lambda item: (item[0].denominator(calibration), item[1]))
    return s_best, best
