"""90 % intervals for the statistics of released noisy cells: pure post-processing (§1.6).

``red.compute_quality`` releases integer cells with discrete Laplace noise of a public scale:
b = 1/ε per cell in "cells" mode (four cells, L1 sensitivity 1), b = 2/ε per count in "paper"
mode (|I| and |U|, sensitivity 1 each, ε/2 each). The noise law is public, so intervals for
the true counts and for anything derived from them cost no budget.

Construction (confidence sets, exact for this noise law). For noise Z with
P(Z = k) ∝ q^|k|, q = exp(−1/b), P(|Z| > t) = 2q^(t+1)/(1 + q); a sum of m cells has the
m-fold convolution of that law as its noise. A count (one cell or a sum of cells) gets
[y − t, y + t] ∩ [0, ∞) with P(|noise| > t) ≤ 1 − level. A statistic of several independent
counts gets each of them at level^(1/m), so that all m are inside together with probability
≥ level, and is bounded by its minimum and maximum over that box: J = E11/(E11 + E10 + E01)
uses (E11, E10 + E01), the p-value the four cells. The coverage is ≥ level for every true
table (no prior, no boundary effect), at the price of some width. A flat-prior posterior
simulation was measured first and rejected: its Jaccard intervals covered 0–78 % of the truth
near J = 0 or 1 and at large noise scales.

Gaussian noise (issue #24). On a zCDP dataset the counts carry discrete Gaussian noise
N_Z(0, σ²) instead (the response's ``noise``), σ = 1/ε per cell ("cells") or √2/ε per count
("paper"). Every function below takes the law's ``kind`` beside its ``scale`` (b or σ) and
uses that law's exact tail: for one cell from its pmf, for a sum of cells from the exact
convolution of the pmfs truncated at a public K (the mass beyond K is bounded and added), so
every half-width is an upper bound that keeps its stated miss probability; the union bounds
over cells are unchanged.

Boxes (issue #21). A :class:`CellBox` holds a range for each of the four true cells; on the
event that every true cell is in its range, :func:`box_intervals` bounds every derived
statistic (|I|, |U|, the supports, J, the excess J − J_ind over independence and the p-value)
by monotone functions of the ends, so its intervals hold together with the box's probability.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from dpmine.box_p_value import p_value_upper
from dpmine.cell_region import (
    AGREEMENT,
    BALANCE,
    DIFFERENCE,
    CellSum,
    interval_vertices,
    narrow,
)
from dpmine.wire import (
    ComputeQualityResponse,
    CountNoise,
    CountNoiseKind,
    NoisyCells,
    QualityMode,
)
from dpmine.wire.statistics import binomial_upper_tail, jaccard

__all__ = [
    "EXCESS_SPLITS",
    "LEVEL",
    "UNINFORMATIVE_WIDTH",
    "CellBox",
    "Interval",
    "StatisticIntervals",
    "box_intervals",
    "cell_box",
    "cell_interval",
    "excess_of",
    "excess_range",
    "format_with_interval",
    "gaussian_sum_tail",
    "half_width",
    "independence_jaccard",
    "intervals_for",
    "intervals_from_cells",
    "intervals_from_paper",
    "jaccard_range",
    "margin_ranges",
    "noise_law",
    "noise_scale",
    "p_value_decision",
    "p_value_range",
    "quality_intervals",
    "signed_interval",
    "sum_box",
    "sum_half_width",
    "sum_interval",
]

FloatArray = npt.NDArray[np.float64]

#: Default confidence level of every interval.
LEVEL = 0.9
#: Standard deviations of the negative binomial summed term by term in a sum's tail.
_TAIL_SPAN = 40.0
#: A Jaccard interval wider than this says little about the true J ("uninformative").
UNINFORMATIVE_WIDTH = 0.8


@dataclass(frozen=True, slots=True)
class Interval:
    """A closed interval [low, high] holding the true value with probability ≥ its level."""

    low: float
    high: float

    @property
    def width(self) -> float:
        """high − low."""
        return self.high - self.low

    def contains(self, value: float, *, tolerance: float = 1e-12) -> bool:
        """Whether ``value`` lies in the interval (with a float tolerance)."""
        return self.low - tolerance <= value <= self.high + tolerance

    def as_list(self) -> list[float]:
        """[low, high], for JSON."""
        return [self.low, self.high]


@dataclass(frozen=True, slots=True)
class StatisticIntervals:
    """Intervals of one released table (§1.6). Supports and p-value are None in "paper" mode,
    which releases |I| and |U| only."""

    level: float
    scale: float
    support: Interval
    union: Interval
    jaccard: Interval
    support_left: Interval | None = None
    support_right: Interval | None = None
    p_value: Interval | None = None
    #: J − J_ind, J_ind the Jaccard expected of independent sides (:func:`excess_range`).
    excess: Interval | None = None
    #: The noise law whose ``scale`` this is: discrete Laplace (b) or discrete Gaussian (σ).
    noise: CountNoiseKind = "laplace"

    @property
    def uninformative(self) -> bool:
        """The Jaccard interval spans most of [0, 1] (width > ``UNINFORMATIVE_WIDTH``)."""
        return self.jaccard.width > UNINFORMATIVE_WIDTH

    def as_dict(self) -> dict[str, object]:
        """For JSON: the level and [low, high] of every statistic that has an interval."""
        record: dict[str, object] = {
            "level": self.level,
            "support": self.support.as_list(),
            "union": self.union.as_list(),
            "jaccard": self.jaccard.as_list(),
        }
        for name, interval in (
            ("support_left", self.support_left),
            ("support_right", self.support_right),
            ("excess", self.excess),
            ("p_value", self.p_value),
        ):
            if interval is not None:
                record[name] = interval.as_list()
        return record


def noise_scale(epsilon: float, mode: QualityMode, kind: CountNoiseKind = "laplace") -> float:
    """Scale of each released count of ``red.compute_quality`` (§1.6): the discrete Laplace's
    b = 1/ε ("cells") or 2/ε ("paper"), or the discrete Gaussian's σ = Δ₂/ε with Δ₂ = 1
    ("cells") or √2 ("paper": one row moves |I| and |U| by one each)."""
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon!r}")
    if kind == "discrete_gaussian":
        return (1.0 if mode == "cells" else math.sqrt(2.0)) / epsilon
    return (1.0 if mode == "cells" else 2.0) / epsilon


def half_width(scale: float, miss: float, kind: CountNoiseKind = "laplace") -> int:
    """The smallest integer t ≥ 0 with P(|Z| > t) ≤ ``miss`` for Z discrete Laplace of
    ``scale`` (P(|Z| > t) = 2q^(t+1)/(1 + q), q = exp(−1/scale)) or, with ``kind``
    "discrete_gaussian", Z discrete Gaussian of σ = ``scale`` (:func:`gaussian_sum_tail`)."""
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale!r}")
    if not 0 < miss < 1:
        raise ValueError(f"miss must be in (0, 1), got {miss!r}")
    if kind == "discrete_gaussian":
        return _gaussian_half_width(scale, 1, miss)
    log_q = -1.0 / scale
    # 2q^(t+1)/(1+q) ≤ miss  ⇔  (t+1)·log q ≤ log(miss·(1+q)/2)
    bound = math.log(miss * (1.0 + math.exp(log_q)) / 2.0) / log_q - 1.0
    t = max(math.ceil(bound - 1e-9), 0)
    while t > 0 and _tail(t - 1, log_q) <= miss:  # float guard: keep t the smallest
        t -= 1
    while _tail(t, log_q) > miss:
        t += 1
    return t


def _tail(t: int, log_q: float) -> float:
    return 2.0 * math.exp((t + 1) * log_q) / (1.0 + math.exp(log_q))


@lru_cache(maxsize=1024)
def sum_half_width(scale: float, terms: int, miss: float, kind: CountNoiseKind = "laplace") -> int:
    """The smallest integer t ≥ 0 with P(|Z_1 + … + Z_terms| > t) ≤ ``miss`` for independent
    discrete Laplace Z_i of ``scale``, from the exact law of the sum (:class:`_SumTails`);
    any ``miss`` in (0, 1), however small. With ``kind`` "discrete_gaussian", Z_i discrete
    Gaussian of σ = ``scale`` (:func:`gaussian_sum_tail`: an upper bound on the tail, so t
    may exceed the smallest by the bound's slack, never fall below it)."""
    if terms == 1:
        return half_width(scale, miss, kind)
    if terms < 1:
        raise ValueError(f"terms must be at least 1, got {terms}")
    half_width(scale, miss)  # validates scale and miss
    if kind == "discrete_gaussian":
        return _gaussian_half_width(scale, terms, miss)
    target = math.log(miss / 2.0)  # P(|S| > t) = 2·P(S > t) for t ≥ 0 (S is symmetric)
    tails = _SumTails(scale, terms)
    if tails.log_tail(0) <= target:
        return 0
    low, high = 0, max(1, math.ceil(scale))
    while tails.log_tail(high) > target:
        low, high = high, 2 * high
    while high - low > 1:  # P(S > low) > miss/2 ≥ P(S > high)
        middle = (low + high) // 2
        if tails.log_tail(middle) > target:
            low = middle
        else:
            high = middle
    return high


class _SumTails:
    """log P(S > t) for S the sum of ``terms`` independent discrete Laplace noises of
    ``scale``, for any t ≥ 0, from one table of the negative binomial's log-pmf.

    A discrete Laplace variable is the difference of two independent geometrics, so S = X − Y
    with X, Y independent negative binomials NB(terms, 1 − q), q = exp(−1/scale), and
    P(S > t) = Σ_y P(Y = y)·P(X > t + y). The sum runs over y ≤ y_max (the mean plus
    ``_TAIL_SPAN`` standard deviations); the rest is at most P(Y > y_max)·P(X > t + y_max),
    which is added, so the value is an upper bound that is exact to that rest. The survival
    function on 0…G is the pmf summed from the top, log P(X > k) = log(P(X = k + 1) +
    P(X > k + 1)), started from scipy's log-survival at G (one value) and accumulated with
    logaddexp; all in log space (scipy's log-pmf), so tails far below 1e-300 keep their
    precision. The table grows (doubling) as larger t are asked for."""

    def __init__(self, scale: float, terms: int) -> None:
        self.terms = terms
        self.success = -math.expm1(-1.0 / scale)
        q = 1.0 - self.success
        mean = terms * q / self.success
        spread = math.sqrt(terms * q) / self.success
        self.y_max = math.ceil(mean + _TAIL_SPAN * spread) + 50
        self.log_pmf = np.empty(0)
        self.log_sf = np.empty(0)

    def _extend(self, last: int) -> None:
        """Tables of log P(X = k) and log P(X > k) for k = 0 … at least ``last``."""
        if last < len(self.log_sf):
            return
        from scipy import stats  # noqa: PLC0415 (0.5 s to import: `dpmine --help` waits)

        size = max(last + 1, 2 * len(self.log_sf))
        self.log_pmf = stats.nbinom.logpmf(np.arange(size + 2), self.terms, self.success)
        top = float(stats.nbinom.logsf(size, self.terms, self.success))
        if not math.isfinite(top):  # scipy's value underflowed: bound it (_log_sf_bound)
            top = _log_sf_bound(float(self.log_pmf[size + 1]), size, self.terms, self.success)
        # log P(X > k) for k = size, size − 1, …, 0: add P(X = k + 1) at each step down.
        from_top = np.logaddexp.accumulate(np.concatenate(([top], self.log_pmf[size:0:-1])))
        self.log_sf = from_top[::-1]

    def log_tail(self, t: int) -> float:
        """log P(S > t), an upper bound exact to the rest beyond y_max (class docstring)."""
        from scipy import special  # noqa: PLC0415

        y_max = self.y_max
        self._extend(t + y_max)
        terms_log = self.log_pmf[: y_max + 1] + self.log_sf[t : t + y_max + 1]
        rest = self.log_sf[y_max] + self.log_sf[t + y_max]
        return float(special.logsumexp(np.append(terms_log, rest)))


def _log_sf_bound(log_pmf_next: float, k: int, terms: int, success: float) -> float:
    """An upper bound on log P(X > k) for X ~ NB(``terms``, ``success``) past its mean, from
    ``log_pmf_next`` = log P(X = k + 1): the ratios P(X = j + 1)/P(X = j) = q·(j + terms)/(j + 1)
    fall with j, so past k + 1 the pmf is below a geometric series of ratio
    ρ = q·(k + 1 + terms)/(k + 2) < 1, and P(X > k) ≤ P(X = k + 1)/(1 − ρ)."""
    ratio = (1.0 - success) * (k + 1 + terms) / (k + 2)
    if ratio >= 1.0:
        return 0.0  # not past the mean: the trivial bound
    return log_pmf_next - math.log1p(-ratio)


#: Largest truncated support (2K + 1 points) convolved exactly (a thousand times more for one
#: cell, which needs no convolution); wider ones use the sub-Gaussian bound.
_MAX_EXACT_SUPPORT = 4001


def gaussian_sum_tail(sigma: float, terms: int, miss: float) -> FloatArray:
    """Upper bounds on P(|S| > t), t = 0, 1, …, terms·K, for S the sum of ``terms`` independent
    discrete Gaussians N_Z(0, σ²) (P(X = k) = e^(−k²/2σ²)/Z, Z = Σ_k e^(−k²/2σ²)); the last
    value bounds every larger t too, and it is below ``miss``.

    Proof. Truncate each X_i at |k| ≤ K and divide by Z_K = Σ_{|k|≤K} e^(−k²/2σ²) ≤ Z, which
    can only raise each point's mass; then P(|S| > t) ≤ P̃(|S| > t) + terms·r with P̃ the
    exact convolution of the truncated masses and r ≥ P(|X| > K) (the event that some X_i
    leaves [−K, K] has probability ≤ terms·r). With k = K + 1 + j, k² ≥ (K + 1)² + 2j(K + 1),
    and Z ≥ 1 (the term k = 0), so r = 2e^(−(K+1)²/2σ²)/(1 − e^(−(K+1)/σ²)). K is public:
    σ·√(2 ln(4000·terms·(1 + σ)/miss)) + 1, which makes terms·r < miss/2000 (r ≤
    2σ²/(K + 1)·e^(−(K+1)²/2σ²) and σ²/(K + 1) < σ). When the exact
    law would be too large to convolve, the bound is CKS20's sub-Gaussian tail instead:
    E e^(λX) ≤ e^(λ²σ²/2) (the discrete Gaussian is σ²-sub-Gaussian, Canonne, Kamath &
    Steinke 2020), so
    P(|S| > t) ≤ 2e^(−t²/(2·terms·σ²)).
    """
    log_room = math.log(4000.0 * terms * (1.0 + sigma) / miss)
    k_max = math.ceil(sigma * math.sqrt(2.0 * log_room)) + 1
    if 2 * k_max + 1 > (_MAX_EXACT_SUPPORT if terms > 1 else 1000 * _MAX_EXACT_SUPPORT):
        ts = np.arange(terms * k_max + 1, dtype=np.float64)
        return np.minimum(1.0, 2.0 * np.exp(-(ts**2) / (2.0 * terms * sigma**2)))
    ks = np.arange(-k_max, k_max + 1, dtype=np.float64)
    weights = np.exp(-(ks**2) / (2.0 * sigma**2))
    masses = weights / weights.sum()
    law = masses
    for _ in range(terms - 1):
        law = np.convolve(law, masses)
    centre = terms * k_max  # law[centre] is P̃(S = 0)
    above = np.cumsum(law[::-1])[::-1]  # above[i] = P̃(S ≥ i − centre)
    one_side = np.append(above[centre + 1 :], 0.0)  # P̃(S > t) for t = 0 … centre
    k1 = k_max + 1.0
    rest = 2.0 * math.exp(-(k1**2) / (2.0 * sigma**2)) / -math.expm1(-k1 / sigma**2)
    return np.minimum(1.0, 2.0 * one_side + terms * rest)


@lru_cache(maxsize=1024)
def _gaussian_half_width(sigma: float, terms: int, miss: float) -> int:
    """The smallest t whose :func:`gaussian_sum_tail` bound is ≤ ``miss`` (the last bound is,
    so there is one)."""
    return int(np.flatnonzero(gaussian_sum_tail(sigma, terms, miss) <= miss)[0])


def cell_interval(observed: int, t: int) -> tuple[int, int]:
    """[y − t, y + t] clamped at 0: where a true count lies when |noise| ≤ t."""
    return max(observed - t, 0), max(observed + t, 0)


def sum_interval(cells: tuple[int, ...], t: int) -> tuple[int, int]:
    """Where a true sum of cells lies when the noise of their noisy sum y is at most t:
    [y − t, y' + t] ∩ [0, ∞), with y' the sum of the cells clamped at 0 (§1.6 [REC]).

    Proof: the truth is in [y − t, y + t] and y' ≥ y, so the wider range holds it too; and the
    point statistic, which adds the clamped cells, is y' ∈ [y − t, y' + t]: the interval always
    holds the value printed beside it (with y alone, a negative noisy cell put the point above
    the interval's upper end, and J̃ below its lower end)."""
    observed, clamped = sum(cells), sum(max(cell, 0) for cell in cells)
    return max(observed - t, 0), max(clamped + t, 0)


def _miss(level: float, cells: int) -> float:
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return 1.0 - math.pow(level, 1.0 / cells)


def intervals_from_cells(
    e11: int,
    e10: int,
    e01: int,
    e00: int,
    *,
    scale: float,
    level: float = LEVEL,
    kind: CountNoiseKind = "laplace",
) -> StatisticIntervals:
    """Intervals of |I|, |U|, J, the supports, the excess and the §1.3 p-value from four noisy
    cells, each holding the truth with probability ≥ ``level``.

    Sums of cells (|U|, the supports, E10 + E01) use the exact law of a sum of noises; J uses
    the box of (E11, E10 + E01), which is all it depends on; the p-value and the excess the
    four-cell box (:func:`cell_box`, :func:`p_value_range`, :func:`excess_range`)."""
    _miss(level, 1)  # validates the level before anything else
    i_lo, i_hi = cell_interval(e11, sum_half_width(scale, 1, 1.0 - level, kind))
    two = sum_half_width(scale, 2, 1.0 - level, kind)
    u_lo, u_hi = sum_interval((e11, e10, e01), sum_half_width(scale, 3, 1.0 - level, kind))
    # J = E11 / (E11 + D) with D = E10 + E01: increasing in E11, decreasing in D.
    j11, k11 = cell_interval(e11, sum_half_width(scale, 1, _miss(level, 2), kind))
    jd, kd = sum_interval((e10, e01), sum_half_width(scale, 2, _miss(level, 2), kind))
    box = cell_box((e11, e10, e01, e00), scale=scale, miss=1.0 - level, kind=kind)
    return StatisticIntervals(
        level=level,
        scale=scale,
        noise=kind,
        support=Interval(i_lo, i_hi),
        union=Interval(u_lo, u_hi),
        jaccard=Interval(jaccard(j11, j11 + kd), jaccard(k11, k11 + jd)),
        support_left=Interval(*sum_interval((e11, e10), two)),
        support_right=Interval(*sum_interval((e11, e01), two)),
        p_value=p_value_range(box),
        excess=excess_range(box),
    )


# -- boxes of the four true cells (issue #21) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class CellBox:
    """A range for each true cell E11, E10, E01, E00 of §1.2 (integers ≥ 0). Whatever holds
    for every table of the box holds for the true table whenever the four true cells are in
    their ranges together: the functions below bound statistics over the box.

    ``difference``, ``balance`` and ``agreement``, when given, are ranges of D = E10 + E01,
    E11 − E10 − E01 and E11 + E00 − E10 − E01 that hold on the same event: each a sum of
    released cells with its own noise range, narrower than its cells' ranges added (the noises
    of a sum partly cancel). The statistics are then bounded over the *region*, the tables of
    the box whose sums are in those ranges (:mod:`dpmine.cell_region`): the box's corners that
    put E11 low and E10, E01 high at once, where the p-value and the excess are worst, are cut
    off by the balance and agreement ranges."""

    e11: Interval
    e10: Interval
    e01: Interval
    e00: Interval
    difference: Interval | None = None
    balance: Interval | None = None
    agreement: Interval | None = None

    @property
    def sums(self) -> tuple[CellSum, ...]:
        """The box's ranges of sums of cells (none for a plain box of four ranges)."""
        ranges = (
            (DIFFERENCE, self.difference),
            (BALANCE, self.balance),
            (AGREEMENT, self.agreement),
        )
        return tuple(CellSum(c, r.low, r.high) for c, r in ranges if r is not None)

    def narrowed(self) -> CellBox:
        """The box with its four cell ranges narrowed to the region
        (:func:`dpmine.cell_region.narrow`, integer ends); itself when it has no sum range.
        When the region holds no table, no true table is in it on the event and any bound
        will do: the plain box of the four cell ranges then stands in for it, so that every
        interval stays an interval."""
        return _narrowed(self) if self.sums else self

    @property
    def difference_high(self) -> float:
        """The largest E10 + E01 of the box (its ``difference`` range, when tighter)."""
        high = self.e10.high + self.e01.high
        return high if self.difference is None else min(high, self.difference.high)

    @property
    def difference_low(self) -> float:
        """The least E10 + E01 of the box (its ``difference`` range, when tighter)."""
        low = self.e10.low + self.e01.low
        return low if self.difference is None else max(low, self.difference.low)

    def balance_range(self) -> Interval:
        """A range of E11 − D over the region (:func:`_balance_ends` of the box's own ends)."""
        low, high = _balance_ends(
            self,
            (self.e11.low, self.e11.high),
            (self.difference_low, self.difference_high),
            (self.e00.low, self.e00.high),
        )
        return Interval(float(low), float(high))


def _balance_ends(
    box: CellBox,
    e11: tuple[FloatArray | float, FloatArray | float],
    difference: tuple[FloatArray | float, FloatArray | float],
    e00: tuple[FloatArray | float, FloatArray | float],
) -> tuple[FloatArray | float, FloatArray | float]:
    """The ends of E11 − D on (sub-)boxes with those ends of E11, D and E00 (numbers or arrays
    of sub-boxes): E11's ends less D's, cut by ``box``'s ``balance`` range and by its
    ``agreement`` range less E00's ends (E11 − D = agreement − E00)."""
    low, high = e11[0] - difference[1], e11[1] - difference[0]
    if box.balance is not None:
        low, high = np.maximum(low, box.balance.low), np.minimum(high, box.balance.high)
    if box.agreement is not None:
        low = np.maximum(low, box.agreement.low - e00[1])
        high = np.minimum(high, box.agreement.high - e00[0])
    return low, high


@lru_cache(maxsize=4096)
def _narrowed(box: CellBox) -> CellBox:
    """:meth:`CellBox.narrowed` (cached: every statistic of a box reads it)."""
    cells = (box.e11, box.e10, box.e01, box.e00)
    lows, highs, feasible = narrow(
        np.array([[c.low for c in cells]]),
        np.array([[c.high for c in cells]]),
        box.sums,
        integer=True,
    )
    if not bool(feasible[0]):
        return CellBox(*cells)
    e11, e10, e01, e00 = (Interval(int(lows[0, i]), int(highs[0, i])) for i in range(4))
    return CellBox(e11, e10, e01, e00, box.difference, box.balance, box.agreement)


def cell_box(
    noisy: tuple[int, int, int, int],
    *,
    scale: float,
    miss: float,
    kind: CountNoiseKind = "laplace",
    difference: bool = False,
    association: bool = False,
) -> CellBox:
    """The box of four independently noised cells (one ``red.compute_quality`` release) that
    holds the true cells together with probability ≥ 1 − ``miss``: each cell gets
    [y − t, y + t] ∩ [0, ∞) with P(|Z| > t) ≤ 1 − (1 − miss)^(1/4), and the four noises are
    independent, so all four are inside with probability ≥ ((1 − miss)^(1/4))⁴ = 1 − miss.

    With ``difference``, also a range of D = E10 + E01: the noisy E10 + E01 is the true D plus
    the sum of two independent noises, so [y − t₂, y' + t₂] (:func:`sum_interval`, t₂ from the
    law of the sum, :func:`sum_half_width`) holds D but for probability ≤ ``miss``/r. With
    ``association``, also ranges of the balance E11 − E10 − E01 and the agreement
    E11 + E00 − E10 − E01: the noisy sum less the true one is a signed sum of three (four)
    independent noises, whose law is that of their plain sum (each law is symmetric), so
    [y − t, y + t] holds it but for probability ≤ ``miss``/r. The r ranges (four cells and
    those sums) are not independent, so each gets the miss ``miss``/r and a union bound gives
    P(some range misses) ≤ ``miss``. D's range is about 40 % narrower than E10's and E01's
    added, and the two others cut off the box's corners where E11 is low and E10, E01 high
    (:class:`CellBox`)."""
    if not 0 < miss < 1:
        raise ValueError(f"miss must be in (0, 1), got {miss!r}")
    ranges = 4 + difference + 2 * association
    each_miss = miss / ranges if ranges > 4 else -math.expm1(math.log1p(-miss) / 4.0)
    t = half_width(scale, each_miss, kind)
    e11, e10, e01, e00 = (Interval(*cell_interval(y, t)) for y in noisy)
    both = None
    if difference:
        t_sum = sum_half_width(scale, 2, each_miss, kind)
        both = Interval(*sum_interval(noisy[1:3], t_sum))
    box = CellBox(e11, e10, e01, e00, difference=both)
    if not association:
        return box
    return _with_association(
        box, noisy, (1, 1, 1, 1), lambda terms: sum_half_width(scale, terms, each_miss, kind)
    )


def _with_association(
    box: CellBox,
    sums: tuple[int, int, int, int],
    terms: tuple[int, int, int, int],
    width: Callable[[int], int],
) -> CellBox:
    """``box`` with the ranges of the balance E11 − E10 − E01 and the agreement
    E11 + E00 − E10 − E01 of the noisy ``sums`` (each cell a sum of ``terms`` released cells),
    each ± ``width`` of its number of released cells."""
    y11, y10, y01, y00 = sums
    k11, k10, k01, k00 = terms
    return replace(
        box,
        balance=signed_interval(y11 - y10 - y01, width(k11 + k10 + k01)),
        agreement=signed_interval(y11 + y00 - y10 - y01, width(k11 + k10 + k01 + k00)),
    )


def signed_interval(observed: int, t: int) -> Interval:
    """[y − t, y + t], not clamped: where a signed sum of true counts (which may be negative)
    lies when the noise of its noisy value y is at most t."""
    return Interval(observed - t, observed + t)


def sum_box(
    sums: tuple[int, int, int, int],
    terms: tuple[int, int, int, int],
    *,
    scale: float,
    miss: float,
    kind: CountNoiseKind = "laplace",
    difference: bool = False,
    association: bool = False,
) -> CellBox:
    """The box of four true cells that are each a sum of ``terms`` released cells (noisy sums
    ``sums``, discrete Laplace noise of ``scale`` per released cell): a cell of k ≥ 1 terms
    gets [y − t, y + t] ∩ [0, ∞) with P(|noise of the sum| > t) ≤ ``miss``
    (:func:`sum_half_width`), a cell of no term is 0 exactly. With ``difference``, the range of
    D = E10 + E01 too, the sum of their disjoint released cells, the same way. With
    ``association``, the ranges of the balance E11 − E10 − E01 and the agreement
    E11 + E00 − E10 − E01: signed sums of disjoint released cells, whose noise (a signed sum of
    independent symmetric noises) has the law of the plain sum of as many noises. Each range
    misses with probability ≤ ``miss``; the caller's union bound says what holds together (four
    to seven ranges)."""

    def ranged(value: int, count: int) -> Interval:
        if count < 0:
            raise ValueError(f"a cell is a sum of at least 0 released cells, got {count}")
        t = sum_half_width(scale, count, miss, kind) if count else 0
        return Interval(*cell_interval(value, t))

    e11, e10, e01, e00 = (ranged(v, c) for v, c in zip(sums, terms, strict=True))
    both = ranged(sums[1] + sums[2], terms[1] + terms[2]) if difference else None
    box = CellBox(e11, e10, e01, e00, difference=both)
    if not association:
        return box
    return _with_association(
        box, sums, terms, lambda count: sum_half_width(scale, count, miss, kind) if count else 0
    )


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator > 0 else 0.0


def jaccard_range(box: CellBox) -> Interval:
    """Range of J = E11/(E11 + E10 + E01) over the box's region (0 when the union is empty).

    Proof: with U = E11 + E10 + E01 > 0, ∂J/∂E11 = (E10 + E01)/U² ≥ 0 and
    ∂J/∂E10 = ∂J/∂E01 = −E11/U² ≤ 0; an empty union has E11 = 0 and J = 0, which no ratio
    undercuts. J depends on E10 and E01 through D = E10 + E01 only, and J = E11/(E11 + D) is
    linear-fractional in (E11, D), so its extremes over a convex polygon are at its vertices.
    The region's (E11, D) lie in the polygon of E11's range on the narrowed box
    (:meth:`CellBox.narrowed`), D's (:attr:`CellBox.difference_low`, ``difference_high``) and
    E11 − D's (:meth:`CellBox.balance_range`); the least and largest J over its vertices
    (:func:`dpmine.cell_region.interval_vertices`) bound J over the region. Without sum
    ranges the polygon is the rectangle of E11 and D, whose extreme vertices are
    (E11 low, D high) and (E11 high, D low)."""
    region = box.narrowed()
    a = region.e11
    d_low, d_high = region.difference_low, region.difference_high
    balance = region.balance_range()
    vertices = interval_vertices((a.low, a.high), (d_low, d_high), (balance.low, balance.high))
    if not vertices:  # the polygon holds no real point: the rectangle's corners will do
        vertices = [(a.low, d_high), (a.high, d_low)]
    values = [jaccard(x, x + y) for x, y in vertices]
    return Interval(min(values), max(values))


def margin_ranges(box: CellBox) -> tuple[Interval, Interval]:
    """Ranges of x = s_L/N and y = s_R/N over the box (0 when N = 0), s_L = E11 + E10,
    s_R = E11 + E01, N the sum of the cells.

    Proof: x = (E11 + E10)/(E11 + E10 + E01 + E00) has ∂x/∂E11 = ∂x/∂E10 = (N − s_L)/N² ≥ 0
    and ∂x/∂E01 = ∂x/∂E00 = −s_L/N² ≤ 0, so its extremes are at (E11, E10 high, E01, E00 low)
    and the opposite corner; the same for y with E10 and E01 exchanged. N = 0 only at the
    origin, where x = 0 is the least value anyway."""
    a, b, c, d = box.e11, box.e10, box.e01, box.e00
    x = Interval(
        _ratio(a.low + b.low, a.low + b.low + c.high + d.high),
        _ratio(a.high + b.high, a.high + b.high + c.low + d.low),
    )
    y = Interval(
        _ratio(a.low + c.low, a.low + c.low + b.high + d.high),
        _ratio(a.high + c.high, a.high + c.high + b.low + d.low),
    )
    return x, y


def independence_jaccard(x: float, y: float) -> float:
    """J_ind = xy/(x + y − xy): the Jaccard expected when the sides are independent with
    support fractions x = s_L/N and y = s_R/N, i.e. (s_L·s_R/N)/(s_L + s_R − s_L·s_R/N)
    (issue #21); 0 when x = y = 0. Nondecreasing in x and in y on [0, 1]²:
    ∂J_ind/∂x = y²/(x + y − xy)² ≥ 0 (and symmetrically)."""
    denominator = x + y - x * y
    return x * y / denominator if denominator > 0 else 0.0


def excess_of(
    jaccard_value: float, support_left: float, support_right: float, n_rows: float
) -> float:
    """J − J_ind of one set of (noisy or true) statistics, J_ind at x = s_L/N, y = s_R/N
    (:func:`independence_jaccard`; x = y = 0 when N ≤ 0)."""
    x, y = _ratio(support_left, n_rows), _ratio(support_right, n_rows)
    return jaccard_value - independence_jaccard(x, y)


#: Parts each of E11's, E10's and E01's ranges is cut into by :func:`excess_range`.
EXCESS_SPLITS = 16


def excess_range(box: CellBox, *, splits: int = EXCESS_SPLITS) -> Interval:
    """An interval holding J − J_ind for every table of the box's region (issue #21).

    Proof, on one box: over it J ∈ [J_lo, J_hi] and x ∈ [x_lo, x_hi], y ∈ [y_lo, y_hi]
    (:func:`margin_ranges`); J_ind is nondecreasing in x and y (:func:`independence_jaccard`),
    so J_ind(x_lo, y_lo) ≤ J_ind ≤ J_ind(x_hi, y_hi) and
    J − J_ind ∈ [J_lo − J_ind(x_hi, y_hi), J_hi − J_ind(x_lo, y_lo)]. These "corner" ends bound
    J and J_ind at corners that need not coincide (J_lo has E11 low, J_ind's upper end E11
    high), so they are loose on a wide box. Refinement: the ranges of E11, E10 and E01 of the
    narrowed box (:meth:`CellBox.narrowed`) are each cut into ``splits`` equal parts, E00's
    range kept whole (J does not depend on E00; the corners above already put it at the end
    that is worst for each side), and each of the ``splits``³ sub-boxes is narrowed to the
    region in turn (:func:`dpmine.cell_region.narrow`); those that hold no table of the region
    are dropped. The rest hold every table of the region, so the least lower end and the
    largest upper end of the corner ends over them bound J − J_ind on it; each sub-box lies in
    the box, so the result is never wider than the corner ends of the whole box
    (``splits=1`` and no sum range). On a sub-box, J_lo = a0/(a0 + D_hi) and
    J_hi = a1/(a1 + D_lo) (J rises with E11 and falls with D = E10 + E01), where D's ends are
    the tightest of its cells' sums, D's range and E11's range less E11 − D's
    (:meth:`CellBox.balance_range` on the sub-box). The ranges are real intervals that hold the
    integer cells: bounding the relaxation bounds the integers."""
    if splits < 1:
        raise ValueError(f"splits must be at least 1, got {splits}")
    region = box.narrowed()
    a0, a1 = _parts(region.e11, splits, axis=0)
    b0, b1 = _parts(region.e10, splits, axis=1)
    c0, c1 = _parts(region.e01, splits, axis=2)
    lows = np.stack(np.broadcast_arrays(a0, b0, c0, region.e00.low), axis=-1).reshape(-1, 4)
    highs = np.stack(np.broadcast_arrays(a1, b1, c1, region.e00.high), axis=-1).reshape(-1, 4)
    sums = region.sums
    if sums:
        narrowed_lows, narrowed_highs, feasible = narrow(lows, highs, sums, rounds=1)
        if bool(feasible.any()):  # else no real table meets the ranges: any bound will do
            lows, highs = narrowed_lows[feasible], narrowed_highs[feasible]
    a0, b0, c0, d0 = lows.T
    a1, b1, c1, d1 = highs.T
    g_low, g_high = _balance_ends(region, (a0, a1), (b0 + c0, b1 + c1), (d0, d1))
    d_high = np.minimum(np.minimum(b1 + c1, region.difference_high), a1 - g_low)
    d_low = np.maximum(np.maximum(b0 + c0, region.difference_low), a0 - g_high)
    # Lower end: J at (E11 low, D high) minus J_ind at the margins' upper ends.
    j_low = _ratios(a0, a0 + np.maximum(d_high, 0.0))
    x_high = _ratios(a1 + b1, a1 + b1 + c0 + d0)
    y_high = _ratios(a1 + c1, a1 + c1 + b0 + d0)
    low = float(np.min(j_low - _independence(x_high, y_high)))
    # Upper end: J at (E11 high, D low) minus J_ind at the margins' lower ends.
    j_high = _ratios(a1, a1 + np.maximum(d_low, 0.0))
    x_low = _ratios(a0 + b0, a0 + b0 + c1 + d1)
    y_low = _ratios(a0 + c0, a0 + c0 + b1 + d1)
    high = float(np.max(j_high - _independence(x_low, y_low)))
    return Interval(low, high)


def _parts(cell: Interval, splits: int, *, axis: int) -> tuple[FloatArray, FloatArray]:
    """The low and high ends of ``splits`` equal parts of ``cell``, shaped to broadcast along
    ``axis`` of three (the first part starts at cell.low, the last ends at cell.high)."""
    edges = np.linspace(cell.low, cell.high, splits + 1)
    shape = [1, 1, 1]
    shape[axis] = splits
    return edges[:-1].reshape(shape), edges[1:].reshape(shape)


def _ratios(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    """numerator/denominator elementwise, clamped to [0, 1], and 0 where the denominator is not
    positive (as :func:`_ratio` and :func:`~dpmine.wire.statistics.jaccard`)."""
    numerator, denominator = np.broadcast_arrays(numerator, denominator)
    ratio = np.divide(numerator, denominator, out=np.zeros(numerator.shape), where=denominator > 0)
    return np.clip(ratio, 0.0, 1.0)


def _independence(x: FloatArray, y: FloatArray) -> FloatArray:
    """:func:`independence_jaccard` elementwise."""
    x, y = np.broadcast_arrays(x, y)
    denominator = x + y - x * y
    return np.divide(x * y, denominator, out=np.zeros(x.shape), where=denominator > 0)


#: The threshold the p-value's upper ends are about to be compared with (the significance
#: test's α/m), while :func:`p_value_decision` is in force; None otherwise.
_DECISION: ContextVar[float | None] = ContextVar("p_value_decision", default=None)


@contextmanager
def p_value_decision(threshold: float) -> Iterator[None]:
    """Within this context, the p-value's upper ends computed by :func:`p_value_range` aim at
    ``threshold``: the search goes on while the maximum may lie on either side of it
    (:func:`dpmine.box_p_value.p_value_upper` with ``target``), so that a result whose upper
    end the default search leaves just above α/m is decided. The significance test reads a
    run's joint intervals inside it. Any stopping point gives a valid upper end."""
    token = _DECISION.set(threshold)
    try:
        yield
    finally:
        _DECISION.reset(token)


def p_value_range(box: CellBox, *, refine: bool = True) -> Interval:
    """An interval holding the §1.3 p-value for every table of the box's region (the
    corner bounds below on its narrowed box, :meth:`CellBox.narrowed`; the refinement on the
    region itself).

    Proof: for consistent cells the p-value is T(N, μ/N, k) = P[Bin(N, μ/N) ≥ k] with k = E11
    and mean μ = s_L·s_R/N (also when a support is 0: then k = 0 and both are 1). T is
    nondecreasing in N at a fixed success probability (one more trial only adds a success),
    nondecreasing in the success probability (the usual coupling) and nonincreasing in k; with
    x = s_L/N, y = s_R/N, over the box N ∈ [Σ lows, Σ highs], xy ∈ [x_lo·y_lo, x_hi·y_hi]
    (:func:`margin_ranges`) and k ∈ [E11 low, E11 high], which gives the lower end
    T(N_lo, x_lo·y_lo, k_hi) and one upper end T(N_hi, x_hi·y_hi, k_lo). That upper end lets E11
    be high in the success probability and low in k at once, and E00 high in N and low in xy;
    :func:`_poisson_p_upper` keeps E11 together, and with ``refine``
    :func:`dpmine.box_p_value.p_value_upper` takes the corner on sub-boxes, split until it is
    within a factor 2 of a p-value that a table of the box has. The upper end is the least of
    the three, each an upper end of every table's p-value. (The p-value is not monotone in
    every cell: one more row in E10 can lower it, so no single corner bounds it.)"""
    region = box.narrowed()
    cells = (region.e11, region.e10, region.e01, region.e00)
    x, y = margin_ranges(region)
    n_low = round(sum(cell.low for cell in cells))
    n_high = round(sum(cell.high for cell in cells))
    separate = binomial_upper_tail(n_high, min(1.0, x.high * y.high), round(region.e11.low))
    upper = min(separate, _poisson_p_upper(region))
    if refine and upper > 0.0:
        upper = p_value_upper(region, known=upper, target=_DECISION.get())
    return Interval(binomial_upper_tail(n_low, x.low * y.low, round(region.e11.high)), upper)


def _poisson_p_upper(box: CellBox) -> float:
    """An upper end of the p-value over the box, one value of E11 at a time.

    Proof: the mean μ = s_L·s_R/N = (E11 + E10)(E11 + E01)/N is nondecreasing in E11, E10, E01
    (∂μ/∂E10 = y(1 − x) ≥ 0, ∂μ/∂E11 = x + y − xy ≥ 0) and nonincreasing in E00
    (∂μ/∂E00 = −xy), so at E11 = k the box's largest mean is μ*(k) = μ(k, E10 high, E01 high,
    E00 low). Anderson & Samuels (1967, "Some inequalities among binomial and Poisson
    probabilities", Proc. 5th Berkeley Symp.) prove P[Bin(N, μ/N) ≤ j] > P[Poi(μ) ≤ j] for
    j > μ, i.e. P[Bin(N, μ/N) ≥ k] ≤ P[Poi(μ) ≥ k] for k > μ + 1; the Poisson tail rises with μ.
    So when every k of the box has k > μ*(k) + 1, the p-value of any table of the box is at most
    max_k P[Poi(μ*(k)) ≥ k], taken over every integer k in E11's range; otherwise the bound
    is 1."""
    ks = np.arange(round(box.e11.low), round(box.e11.high) + 1, dtype=np.float64)
    others = box.e10.high + box.e01.high + box.e00.low
    rows = ks + others
    means = np.divide(
        (ks + box.e10.high) * (ks + box.e01.high),
        rows,
        out=np.zeros_like(ks),
        where=rows > 0,
    )
    if bool(np.any(ks <= means + 1.0)):
        return 1.0
    from scipy import stats  # noqa: PLC0415 (0.5 s to import: `dpmine --help` waits)

    return float(np.max(stats.poisson.sf(ks - 1.0, means)))


def box_intervals(
    box: CellBox, *, level: float, scale: float, kind: CountNoiseKind = "laplace"
) -> StatisticIntervals:
    """Every statistic's interval over one box (:func:`jaccard_range`, :func:`excess_range`,
    :func:`p_value_range`; |I|, |U| and the supports are sums of cells, nondecreasing in each):
    they hold together whenever the true cells are in the box, i.e. with the box's probability
    ``level``."""
    region = box.narrowed()
    a, b, c = region.e11, region.e10, region.e01
    return StatisticIntervals(
        level=level,
        scale=scale,
        support=a,
        union=Interval(a.low + region.difference_low, a.high + region.difference_high),
        jaccard=jaccard_range(box),
        support_left=Interval(a.low + b.low, a.high + b.high),
        support_right=Interval(a.low + c.low, a.high + c.high),
        p_value=p_value_range(box),
        excess=excess_range(box),
        noise=kind,
    )


def intervals_from_paper(
    intersection: int,
    union: int,
    *,
    scale: float,
    level: float = LEVEL,
    kind: CountNoiseKind = "laplace",
) -> StatisticIntervals:
    """Intervals of |I|, |U| and J from the "paper" mode's noisy |I| and |U| (U ≥ I)."""
    i_lo, i_hi = cell_interval(intersection, half_width(scale, _miss(level, 1), kind))
    u_lo, u_hi = cell_interval(union, half_width(scale, _miss(level, 1), kind))
    t2 = half_width(scale, _miss(level, 2), kind)
    ji_lo, ji_hi = cell_interval(intersection, t2)
    ju_lo, ju_hi = cell_interval(union, t2)
    low = jaccard(ji_lo, max(ju_hi, ji_lo))
    high = jaccard(ji_hi, max(ju_lo, ji_hi))
    return StatisticIntervals(
        level=level,
        scale=scale,
        support=Interval(i_lo, i_hi),
        union=Interval(u_lo, u_hi),
        jaccard=Interval(low, high),
        noise=kind,
    )


def intervals_for(
    cells: NoisyCells,
    *,
    epsilon: float,
    mode: QualityMode,
    level: float = LEVEL,
    noise: CountNoise | None = None,
) -> StatisticIntervals:
    """Intervals of a ``red.compute_quality`` release bought with ``epsilon`` in ``mode``, its
    noise law ``noise`` as the response reports it (None: discrete Laplace)."""
    kind, scale = noise_law(epsilon, mode, noise)
    if mode == "cells":
        values = (cells.e11, cells.e10, cells.e01, cells.e00)
        if any(v is None for v in values):
            raise ValueError("'cells' mode needs the four released cells e11, e10, e01, e00")
        e11, e10, e01, e00 = (int(v) for v in values if v is not None)
        return intervals_from_cells(e11, e10, e01, e00, scale=scale, level=level, kind=kind)
    if cells.intersection is None or cells.union is None:
        raise ValueError("'paper' mode needs the released intersection and union")
    return intervals_from_paper(
        cells.intersection, cells.union, scale=scale, level=level, kind=kind
    )


def noise_law(
    epsilon: float, mode: QualityMode, noise: CountNoise | None
) -> tuple[CountNoiseKind, float]:
    """(kind, scale) of a ``red.compute_quality`` release: the discrete Laplace of
    ``noise_scale(epsilon, mode)`` when the release reports Laplace or nothing (as before
    the report existed), else the reported discrete Gaussian's σ. A reported σ below the one
    ``epsilon`` implies is refused (the intervals would be too narrow)."""
    kind: CountNoiseKind = "laplace" if noise is None else noise.kind
    implied = noise_scale(epsilon, mode, kind)
    if noise is None or kind == "laplace":
        return kind, implied
    if not noise.scale >= implied * (1.0 - 1e-9):
        raise ValueError(f"the reported noise scale {noise.scale} is below {implied} at ε")
    return kind, noise.scale


def quality_intervals(
    response: ComputeQualityResponse, *, level: float = LEVEL
) -> StatisticIntervals:
    """Intervals of a ``DatasetHandle.quality(...)`` answer (ε from its receipt)."""
    return intervals_for(
        response.cells,
        epsilon=response.receipt.epsilon,
        mode=response.mode,
        level=level,
        noise=response.noise,
    )


def format_with_interval(value: float, interval: Interval | None, spec: str = ".2f") -> str:
    """``format_with_interval(0.7, Interval(0.62, 0.77)) == "0.70 [0.62, 0.77]"``; ``spec`` is a
    format spec (".0f" for counts, ".2g" for p-values); the bare value when there is no
    interval."""
    if interval is None:
        return format(value, spec)
    return f"{value:{spec}} [{interval.low:{spec}}, {interval.high:{spec}}]"
