"""The largest §1.3 p-value over a box of four true cells, by branch and bound (issue #21).

The noise-aware test shows a result only when the p-value's upper end over its joint box is
≤ α/m. One corner bound over the whole box lets E11 be low in k and high in the success
probability, and E00 high in N and low in the success probability, at once: on the wide boxes
of a noisy tree release it reads 10⁻⁴ where no table of the box has a p-value above 10⁻¹².
:func:`p_value_upper` takes the corner bound on sub-boxes instead, and splits the sub-boxes
that could hold the maximum until their bounds are within a factor of a p-value that some
table of the box has.

Proof of the bound on one integer sub-box [a0, a1] × [b0, b1] × [c0, c1] × [d0, d1] (E11,
E10, E01, E00). A table's p-value is T(N, xy, k) = P[Bin(N, xy) ≥ k] with k = E11, N the sum of
the cells, x = s_L/N, y = s_R/N (``dpmine.intervals.p_value_range``). T is nondecreasing in N
at a fixed success probability, nondecreasing in the success probability and nonincreasing in
k; on the sub-box k ≥ a0, N ≤ a1 + b1 + c1 + d1 and xy ≤ x_hi·y_hi with
x_hi = (a1 + b1)/(a1 + b1 + c0 + d0), y_hi = (a1 + c1)/(a1 + c1 + b0 + d0)
(``dpmine.intervals.margin_ranges``), so T ≤ T(N_hi, x_hi·y_hi, a0). Also, when
a0 > μ_hi + 1 with μ_hi = (a1 + b1)(a1 + c1)/(a1 + b1 + c1 + d0), the largest mean s_L·s_R/N on
the sub-box, T ≤ P[Poi(μ_hi) ≥ a0] (Anderson & Samuels 1967; the proof of
``dpmine.intervals._poisson_p_upper``). The sub-box's bound is the smaller of the two.

Proof of the search. The sub-boxes always partition the box's integer tables (a range
[lo, hi] splits into [lo, m] and [m + 1, hi]); when the box has ranges of sums of cells
(D = E10 + E01, E11 − D, E11 + E00 − D: :class:`dpmine.intervals.CellBox`), each sub-box is
narrowed to the tables of its own whose sums are in range, and dropped when it holds none
(:func:`dpmine.cell_region.narrow`: no table of the event is lost). The p-value of an actual table
of the box (``best``) is at most the maximum, so a sub-box whose bound is ≤ ``best`` cannot
raise the answer and is dropped too. The answer, the largest of ``best`` and the kept
sub-boxes' bounds, is therefore at least every table's p-value, whenever the search stops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dpmine.cell_region import NARROW_ROUNDS, CellSum, narrow

if TYPE_CHECKING:
    from dpmine.intervals import CellBox

__all__ = [
    "P_VALUE_CANDIDATES",
    "P_VALUE_DECISION_ROUNDS",
    "P_VALUE_DIGITS",
    "P_VALUE_FLOOR",
    "P_VALUE_ROUNDS",
    "P_VALUE_SPLIT",
    "P_VALUE_TOLERANCE",
    "corner_bounds",
    "p_value_upper",
    "table_p_values",
]

FloatArray = npt.NDArray[np.float64]

#: Rounds of splitting at most; each splits the sub-boxes with the largest bounds.
P_VALUE_ROUNDS = 60
#: Sub-boxes split per round (each in two).
P_VALUE_SPLIT = 256
#: Children per round whose tables are tried for a larger p-value (those of largest bound).
P_VALUE_CANDIDATES = 32
#: Rounds at most while a threshold given as ``target`` lies between a table's p-value and the
#: upper end (the test's verdict is still open).
P_VALUE_DECISION_ROUNDS = 400
#: The search stops once the largest bound is at most 2·p^0.95 for p a table's p-value:
#: within a factor 2 near the test's thresholds, and within 5 % of the digits far in the tail
#: (a factor 2 at p = 10⁻¹⁰⁰ would need sub-boxes of single counts).
P_VALUE_TOLERANCE = 2.0
P_VALUE_DIGITS = 0.95
#: Bounds below this are not refined: no test threshold α/m comes near it (α = 0.01 and m
#: below 10¹⁰ examined results), so only the printed digits of a tiny upper end would change.
P_VALUE_FLOOR = 1e-12
#: Relative slack on scipy's binomial and Poisson tails (``bdtrc``, ``pdtrc``: Cephes'
#: incomplete beta and gamma):
#: against ``dpmine.wire.statistics.binomial_upper_tail`` their relative error is below 1e-12
#: on the tests' cases, so a bound raised by this factor stays a bound.
TAIL_SLACK = 1e-9


@lru_cache(maxsize=4096)
def p_value_upper(box: CellBox, *, known: float = 1.0, target: float | None = None) -> float:
    """An upper end of the p-value of every integer table of ``box`` (module docstring: the
    bound and its proof), at most ``known`` (an upper end already proved: the search stops as
    soon as it is close to a table's p-value, :func:`_close_to`); ``known`` when the box holds no
    integer table. Cached: a box's answer depends on the box and ``target`` alone (boxes repeat,
    e.g. a result's intervals read again, or draws of little noise).

    ``target``: a threshold the answer will be compared with (the test's α/m). While the
    search cannot yet tell on which side of it the maximum lies (a table's p-value at or below
    it, the largest bound above it), it goes on past closeness, for up to
    :data:`P_VALUE_DECISION_ROUNDS` rounds. Every stopping point gives a valid upper end."""
    if known <= P_VALUE_FLOOR:
        return known
    cells = (box.e11, box.e10, box.e01, box.e00)
    lows = np.array([[math.ceil(cell.low - 1e-9) for cell in cells]], dtype=np.int64)
    highs = np.array([[math.floor(cell.high + 1e-9) for cell in cells]], dtype=np.int64)
    d_low, d_high = box.difference_low - 1e-9, box.difference_high + 1e-9
    sums = box.sums
    lows, highs = _in_region(lows, highs, sums)
    if len(lows) == 0:
        return known  # no integer table in the box's region: nothing to add
    best = _best_table(lows, highs, box)
    if known <= _close_to(best) and not _undecided(best, known, target):
        return known
    bounds = corner_bounds(lows, highs, d_low, d_high)
    rounds = P_VALUE_ROUNDS if target is None else P_VALUE_DECISION_ROUNDS
    for round_ in range(rounds):
        alive = bounds > best
        lows, highs, bounds = lows[alive], highs[alive], bounds[alive]
        if len(bounds) == 0:
            break
        upper = min(known, float(bounds.max()))
        if not _undecided(best, upper, target) and (
            upper <= _close_to(best) or round_ >= P_VALUE_ROUNDS
        ):
            break  # close to a table's p-value, or out of rounds with the verdict known
        order = np.argsort(-bounds)
        chosen, rest = order[:P_VALUE_SPLIT], order[P_VALUE_SPLIT:]
        if bool(np.all(lows[chosen] == highs[chosen])):
            break  # the largest bounds are single tables: nothing left to split
        children_low, children_high = _in_region(
            *_halves(lows[chosen], highs[chosen]), sums, rounds=1
        )
        children_bounds = corner_bounds(children_low, children_high, d_low, d_high)
        likely = np.argsort(-children_bounds)[:P_VALUE_CANDIDATES]
        best = max(best, _best_table(children_low[likely], children_high[likely], box))
        lows = np.concatenate([lows[rest], children_low])
        highs = np.concatenate([highs[rest], children_high])
        bounds = np.concatenate([bounds[rest], children_bounds])
    return min(known, max(best, float(bounds.max(initial=0.0))) * (1.0 + TAIL_SLACK))


def _undecided(best: float, upper: float, target: float | None) -> bool:
    """Whether a table's p-value ``best`` and an upper end ``upper`` leave ``target`` between
    them (best ≤ target < upper): the test's verdict is not known yet."""
    return target is not None and best <= target < upper


def _close_to(best: float) -> float:
    """The bound at which the search stops: ``P_VALUE_TOLERANCE``·best^``P_VALUE_DIGITS``, or
    ``P_VALUE_FLOOR``."""
    return max(P_VALUE_TOLERANCE * best**P_VALUE_DIGITS if best > 0 else 0.0, P_VALUE_FLOOR)


def _in_region(
    lows: npt.NDArray[np.int64],
    highs: npt.NDArray[np.int64],
    sums: Sequence[CellSum],
    *,
    rounds: int = NARROW_ROUNDS,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The sub-boxes that hold an integer table of the region, each narrowed to those tables
    in ``rounds`` passes (:func:`dpmine.cell_region.narrow`: every such table stays in its
    narrowed sub-box; a child of a narrowed box needs few)."""
    if not sums:
        keep = np.all(lows <= highs, axis=1)
        return lows[keep], highs[keep]
    narrowed_lows, narrowed_highs, feasible = narrow(lows, highs, sums, integer=True, rounds=rounds)
    return (
        narrowed_lows[feasible].astype(np.int64),
        narrowed_highs[feasible].astype(np.int64),
    )


def corner_bounds(
    lows: npt.NDArray[np.int64],
    highs: npt.NDArray[np.int64],
    d_low: float = -math.inf,
    d_high: float = math.inf,
) -> FloatArray:
    """The bound of each integer sub-box (rows of ``lows``/``highs``: E11, E10, E01, E00):
    the smaller of the binomial corner and the Poisson bound (module docstring), with E10's and
    E01's ranges first narrowed to the tables whose E10 + E01 is in [``d_low``, ``d_high``]
    (E10 ≤ d_high − E01 low, and so on: the event holds no other table)."""
    from scipy import special  # noqa: PLC0415 (0.5 s to import: `dpmine --help` waits)

    a0, b0, c0, d0 = (lows[:, i].astype(np.float64) for i in range(4))
    a1, b1, c1, d1 = (highs[:, i].astype(np.float64) for i in range(4))
    b0, c0 = np.maximum(b0, d_low - c1), np.maximum(c0, d_low - b1)
    b1, c1 = np.minimum(b1, d_high - c0), np.minimum(c1, d_high - b0)
    x_high = _ratio(a1 + b1, a1 + b1 + c0 + d0)
    y_high = _ratio(a1 + c1, a1 + c1 + b0 + d0)
    rows = np.floor(a1 + np.minimum(b1 + c1, d_high) + d1).astype(np.int64)
    binomial = special.bdtrc(a0 - 1.0, rows, np.minimum(x_high * y_high, 1.0))
    mean = _ratio((a1 + b1) * (a1 + c1), a1 + b1 + c1 + d0)
    poisson = np.where(a0 > mean + 1.0, special.pdtrc(a0 - 1.0, mean), 1.0)
    bounds = np.where(rows > 0, np.minimum(binomial, poisson), 1.0)
    return np.asarray(np.nan_to_num(bounds, nan=1.0), dtype=np.float64)


def table_p_values(tables: npt.NDArray[np.int64]) -> FloatArray:
    """The §1.3 p-value of each integer table (rows: E11, E10, E01, E00), 1 when a support
    is 0 (``dpmine.wire.statistics.p_value``, vectorised with scipy's tail)."""
    from scipy import special  # noqa: PLC0415

    a, b, c, d = (tables[:, i].astype(np.float64) for i in range(4))
    rows = a + b + c + d
    probability = _ratio(a + b, rows) * _ratio(a + c, rows)
    values = np.nan_to_num(special.bdtrc(a - 1.0, rows.astype(np.int64), probability), nan=1.0)
    return np.asarray(np.where(probability > 0, values, 1.0), dtype=np.float64)


def _best_table(lows: npt.NDArray[np.int64], highs: npt.NDArray[np.int64], box: CellBox) -> float:
    """The largest p-value among a few tables of each sub-box that lie in the box's region:
    E00 low, E11 at its low end, middle and high end, and D = E10 + E01 as large as the region
    allows there (E01 filled first, then E10, and the other way round); and the centre. Each is
    an actual table of the region (the others are dropped), so its p-value is at most the
    maximum."""
    candidates = [(lows + highs) // 2]
    d = lows[:, 3]
    cells_high = np.minimum(highs[:, 1] + highs[:, 2], math.floor(box.difference_high + 1e-9))
    for a in (lows[:, 0], (lows[:, 0] + highs[:, 0]) // 2, highs[:, 0]):
        d_high = cells_high
        if box.balance is not None:  # E11 − D ≥ its range's low end
            d_high = np.minimum(d_high, a - math.ceil(box.balance.low - 1e-9))
        if box.agreement is not None:  # E11 + E00 − D ≥ its range's low end
            d_high = np.minimum(d_high, a + d - math.ceil(box.agreement.low - 1e-9))
        c_first = np.minimum(highs[:, 2], d_high - lows[:, 1])
        b_first = np.minimum(highs[:, 1], d_high - lows[:, 2])
        candidates.append(np.stack([a, d_high - c_first, c_first, d], axis=1))
        candidates.append(np.stack([a, b_first, d_high - b_first, d], axis=1))
    tables = np.concatenate(candidates)
    inside = np.all((tables >= lows.min(axis=0)) & (tables <= highs.max(axis=0)), axis=1)
    for cell_sum in box.sums:
        inside &= cell_sum.holds(tables)
    tables = tables[inside]
    if len(tables) == 0:
        return 0.0
    return float(table_p_values(tables).max())


def _halves(
    lows: npt.NDArray[np.int64], highs: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Each sub-box cut in two along its widest cell: [lo, m] and [m + 1, hi] with
    m = ⌊(lo + hi)/2⌋. The two children partition their parent's integer tables."""
    rows = np.arange(len(lows))
    widest = np.argmax(highs - lows, axis=1)
    middle = (lows[rows, widest] + highs[rows, widest]) // 2
    low_half_high, high_half_low = highs.copy(), lows.copy()
    low_half_high[rows, widest] = middle
    high_half_low[rows, widest] = middle + 1
    return np.concatenate([lows, high_half_low]), np.concatenate([low_half_high, highs])


def _ratio(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    out = np.zeros(np.broadcast(numerator, denominator).shape)
    return np.divide(numerator, denominator, out=out, where=denominator > 0)
