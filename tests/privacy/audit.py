"""A black-box ε lower-bound auditor for pure-DP mechanisms (DP-ENGINES.md §5).

Method (the ε-only core of a histogram tester):

1. Run the mechanism N times on each of two neighbouring inputs D₀, D₁ and map every output to one
   *cell* of a fixed, data-independent partition of the output space: numeric outputs by bin
   edges (:func:`audit_histogram`), discrete outputs (a candidate index, an ordered tuple, a hashed
   structure) by an ordered list of categories (:func:`audit_categorical`).
2. The tested events are every single cell, every prefix union of cells and every suffix union of
   cells (for numeric outputs: the bins and both tails {y < t}, {y ≥ t}).
3. For each event E a one-sided Clopper-Pearson interval bounds P₀(E) and P₁(E) from both sides.
   ``log(lower P₁) - log(upper P₀)`` and ``log(lower P₀) - log(upper P₁)`` are then lower bounds on
   the privacy loss of E in the two directions. Bonferroni spreads alpha over the four intervals of
   every candidate event, so all bounds hold simultaneously with probability ≥ 1 - alpha.
4. The reported lower bound is the largest of them (never below 0). For an ε-DP mechanism it
   exceeds ε with probability at most alpha, whatever N is: a value above ε proves a privacy bug.

The Bonferroni denominator counts every candidate event fixed by the bins or categories before
sampling; ``min_count`` only skips events seen too rarely to be informative, so it cannot raise the
false-alarm rate. A small alpha costs little power: the interval widths grow like √log(1/alpha).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy.stats import beta

__all__ = [
    "AuditResult",
    "CellCounts",
    "EventBound",
    "Samples",
    "assert_audit_flags",
    "assert_audit_passes",
    "audit_categorical",
    "audit_cells",
    "audit_histogram",
    "categorical_cells",
    "clopper_pearson",
    "epsilon_lower_bound",
    "histogram_cells",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Direction = Literal["P1/P0", "P0/P1"]
#: Mechanism outputs: numbers for the histogram audit, hashable outcomes for the categorical one.
Samples = Iterable[Hashable] | npt.NDArray[Any]

DEFAULT_ALPHA = 1e-3
DEFAULT_MIN_COUNT = 20
#: Unions of 2 .. size-1 consecutive cells (other than single cells) need three cells or more.
_MIN_CELLS_FOR_UNIONS = 3
_TABLE_NDIM = 2


@dataclass(frozen=True, slots=True)
class CellCounts:
    """How many samples of each side fell in each cell of an ordered partition of the outputs."""

    labels: tuple[str, ...]
    counts_0: IntArray
    counts_1: IntArray

    def __post_init__(self) -> None:
        size = len(self.labels)
        if self.counts_0.shape != (size,) or self.counts_1.shape != (size,):
            raise ValueError("one count per cell and side is needed")
        if size < 1:
            raise ValueError("a partition needs at least one cell")

    @property
    def n_0(self) -> int:
        """Number of samples on side 0."""
        return int(self.counts_0.sum())

    @property
    def n_1(self) -> int:
        """Number of samples on side 1."""
        return int(self.counts_1.sum())


@dataclass(frozen=True, slots=True)
class EventBound:
    """The privacy-loss lower bound witnessed by one event in one direction."""

    event: str
    direction: Direction
    lower_bound: float
    count_0: int
    count_1: int


@dataclass(frozen=True, slots=True)
class AuditResult:
    """Outcome of one audit: the ε lower bound and the event that witnesses it."""

    lower_bound: float
    witness: EventBound | None
    events_tested: int
    alpha: float
    n_0: int
    n_1: int

    def describe(self) -> str:
        """A one-line human-readable summary for assertion messages."""
        head = (
            f"eps lower bound {self.lower_bound:.4f} (alpha={self.alpha:g}, "
            f"{self.events_tested} events, N0={self.n_0}, N1={self.n_1})"
        )
        if self.witness is None:
            return head + "; no informative event"
        w = self.witness
        return f"{head}; witness {w.direction} on [{w.event}] with counts {w.count_0}/{w.count_1}"


def clopper_pearson(
    successes: npt.ArrayLike, trials: int, tail: float
) -> tuple[FloatArray, FloatArray]:
    """One-sided Clopper-Pearson bounds: each misses the true proportion with probability ≤ tail.

    Returns ``(lower, upper)``; ``lower`` is 0 where there are no successes and ``upper`` is 1
    where every trial succeeded (exact binomial bounds through the Beta quantiles).
    """
    if trials < 1:
        raise ValueError(f"need at least one trial, got {trials}")
    if not 0.0 < tail < 1.0:
        raise ValueError(f"tail probability must lie in (0, 1), got {tail}")
    k = np.asarray(successes, dtype=np.float64)
    if np.any(k < 0) or np.any(k > trials):
        raise ValueError("successes must lie in [0, trials]")
    # Clip the Beta parameters away from 0 so that scipy never sees an invalid shape; the
    # boundary cases are then overwritten by their exact values.
    lower = np.asarray(beta.ppf(tail, np.maximum(k, 1.0), np.maximum(trials - k + 1.0, 1.0)))
    upper = np.asarray(beta.isf(tail, k + 1.0, np.maximum(trials - k, 1.0)))
    lower = np.where(k == 0, 0.0, lower).astype(np.float64)
    upper = np.where(k == trials, 1.0, upper).astype(np.float64)
    return lower, upper


def _events(cells: CellCounts) -> tuple[list[str], IntArray, IntArray]:
    """Single cells, then prefix unions and suffix unions of at least two cells."""
    c0, c1, labels = cells.counts_0, cells.counts_1, cells.labels
    size = len(labels)
    names = list(labels)
    k0: list[IntArray] = [c0]
    k1: list[IntArray] = [c1]
    if size >= _MIN_CELLS_FOR_UNIONS:
        prefix_0, prefix_1 = np.cumsum(c0)[1:-1], np.cumsum(c1)[1:-1]
        suffix_0 = np.cumsum(c0[::-1])[::-1][1:-1]
        suffix_1 = np.cumsum(c1[::-1])[::-1][1:-1]
        names += [f"{labels[0]} .. {labels[i]}" for i in range(1, size - 1)]
        names += [f"{labels[i]} .. {labels[-1]}" for i in range(1, size - 1)]
        k0 += [prefix_0, suffix_0]
        k1 += [prefix_1, suffix_1]
    return names, np.concatenate(k0).astype(np.int64), np.concatenate(k1).astype(np.int64)


def audit_cells(
    cells: CellCounts, *, alpha: float = DEFAULT_ALPHA, min_count: int = DEFAULT_MIN_COUNT
) -> AuditResult:
    """Audit per-cell counts of the two sides (the shared core of both front ends)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    n_0, n_1 = cells.n_0, cells.n_1
    if n_0 < 1 or n_1 < 1:
        raise ValueError("both sides need at least one sample")
    names, k0, k1 = _events(cells)
    tail = alpha / (4 * len(names))
    lo0, hi0 = clopper_pearson(k0, n_0, tail)
    lo1, hi1 = clopper_pearson(k1, n_1, tail)
    informative = (k0 + k1) >= min_count
    best: EventBound | None = None
    for index in np.flatnonzero(informative):
        candidates: tuple[tuple[Direction, float, float], ...] = (
            ("P1/P0", float(lo1[index]), float(hi0[index])),
            ("P0/P1", float(lo0[index]), float(hi1[index])),
        )
        for direction, lower, upper in candidates:
            if lower <= 0.0:
                continue
            bound = math.log(lower) - math.log(upper)
            if bound > 0.0 and (best is None or bound > best.lower_bound):
                best = EventBound(
                    event=names[index],
                    direction=direction,
                    lower_bound=bound,
                    count_0=int(k0[index]),
                    count_1=int(k1[index]),
                )
    return AuditResult(
        lower_bound=0.0 if best is None else best.lower_bound,
        witness=best,
        events_tested=len(names),
        alpha=alpha,
        n_0=n_0,
        n_1=n_1,
    )


def histogram_cells(samples_0: Samples, samples_1: Samples, *, bins: npt.ArrayLike) -> CellCounts:
    """Cells (-inf, e0), [e0, e1), ..., [e_last, +inf) of strictly increasing finite ``bins``."""
    edges = np.asarray(bins, dtype=np.float64)
    if edges.ndim != 1 or edges.size < 1:
        raise ValueError("bins must be a non-empty vector of edges")
    if not np.all(np.isfinite(edges)) or np.any(np.diff(edges) <= 0):
        raise ValueError("bin edges must be finite and strictly increasing")
    size = edges.size + 1
    inner = (f"{lo:g} <= y < {hi:g}" for lo, hi in itertools.pairwise(edges))
    labels = (f"y < {edges[0]:g}", *inner, f"y >= {edges[-1]:g}")
    counts = []
    for samples in (samples_0, samples_1):
        values = np.asarray(samples, dtype=np.float64).ravel()
        if np.any(np.isnan(values)):
            raise ValueError("samples must not be NaN")
        cell = np.searchsorted(edges, values, side="right")
        counts.append(np.bincount(cell, minlength=size).astype(np.int64))
    return CellCounts(labels=labels, counts_0=counts[0], counts_1=counts[1])


def categorical_cells(
    samples_0: Iterable[Hashable],
    samples_1: Iterable[Hashable],
    *,
    categories: Sequence[Hashable],
) -> CellCounts:
    """One cell per category in the given order, plus a final cell for any other outcome."""
    position = {category: i for i, category in enumerate(categories)}
    if len(position) != len(categories):
        raise ValueError("categories must be distinct")
    if not position:
        raise ValueError("categories must not be empty")
    other = len(position)
    labels = (*(repr(category) for category in categories), "other")
    counts = []
    for samples in (samples_0, samples_1):
        cell = np.fromiter((position.get(s, other) for s in samples), dtype=np.int64)
        counts.append(np.bincount(cell, minlength=other + 1).astype(np.int64))
    return CellCounts(labels=labels, counts_0=counts[0], counts_1=counts[1])


def audit_histogram(
    samples_0: Samples,
    samples_1: Samples,
    *,
    bins: npt.ArrayLike,
    alpha: float = DEFAULT_ALPHA,
    min_count: int = DEFAULT_MIN_COUNT,
) -> AuditResult:
    """Audit numeric outputs with bins and both tails (see :func:`histogram_cells`)."""
    cells = histogram_cells(samples_0, samples_1, bins=bins)
    return audit_cells(cells, alpha=alpha, min_count=min_count)


def audit_categorical(
    samples_0: Iterable[Hashable],
    samples_1: Iterable[Hashable],
    *,
    categories: Sequence[Hashable],
    alpha: float = DEFAULT_ALPHA,
    min_count: int = DEFAULT_MIN_COUNT,
) -> AuditResult:
    """Audit discrete outputs: single outcomes plus cumulative events over ``categories``' order.

    ``categories`` must be fixed before sampling (e.g. ``range(K)`` for a candidate index, all
    ordered k-tuples for a top-k, hash buckets for a structure); outcomes outside it share one
    extra cell. Put outcomes likely to differ most between the sides next to each other.
    """
    cells = categorical_cells(samples_0, samples_1, categories=categories)
    return audit_cells(cells, alpha=alpha, min_count=min_count)


def epsilon_lower_bound(
    samples_0: Samples,
    samples_1: Samples,
    *,
    bins: npt.ArrayLike | None = None,
    categories: Sequence[Hashable] | None = None,
    alpha: float = DEFAULT_ALPHA,
    min_count: int = DEFAULT_MIN_COUNT,
) -> float:
    """The audited ε lower bound: pass exactly one of ``bins`` (numeric) or ``categories``."""
    if categories is not None and bins is None:
        result = audit_categorical(
            _hashables(samples_0),
            _hashables(samples_1),
            categories=categories,
            alpha=alpha,
            min_count=min_count,
        )
    elif bins is not None and categories is None:
        result = audit_histogram(samples_0, samples_1, bins=bins, alpha=alpha, min_count=min_count)
    else:
        raise ValueError("pass exactly one of bins= or categories=")
    return result.lower_bound


def _hashables(samples: Samples) -> list[Hashable]:
    """Outcomes as hashable Python values; rows of a 2-D array become tuples."""
    if not isinstance(samples, np.ndarray):
        return list(samples)
    if samples.ndim == 1:
        return list(samples.tolist())
    if samples.ndim == _TABLE_NDIM:
        return [tuple(row) for row in samples.tolist()]
    raise ValueError("categorical samples must be a 1-D array or a 2-D array of rows")


def _bound_and_message(result: AuditResult | float) -> tuple[float, str]:
    if isinstance(result, AuditResult):
        return result.lower_bound, result.describe()
    return float(result), f"eps lower bound {float(result):.4f}"


def assert_audit_passes(result: AuditResult | float, epsilon: float, slack: float = 0.0) -> None:
    """Fail when the audited lower bound exceeds the claimed ``epsilon`` (+ ``slack``)."""
    bound, message = _bound_and_message(result)
    if not bound <= epsilon + slack:
        raise AssertionError(f"privacy violation: {message} > claimed eps {epsilon} + {slack}")


def assert_audit_flags(result: AuditResult | float, epsilon: float) -> None:
    """Fail unless the audit proves a violation (lower bound above ``epsilon``): a power check."""
    bound, message = _bound_and_message(result)
    if not bound > epsilon:
        raise AssertionError(f"audit missed a violation: {message} <= claimed eps {epsilon}")
