"""Exact exponential mechanism over discrete candidates and numeric threshold cells
(ALGORITHMS.md §0.3 "continuous candidates", §1.4, §3.1, §7 "exact EM by rejection").

A selection draws, with probability ∝ μ(x)·exp(c·q(x)), either an explicit candidate (given by
its log-weight log μ + c·q) or a member of a *threshold family*: one numeric attribute whose base
mass exp(log_mass) is spread over thresholds by a data-independent measure on the public lattice
(:mod:`dpmine_server.dp.lattice`). Two threshold shapes are supported:

* ``"pair"``: a bound pair (a, b), each unbounded with probability ½, otherwise a uniform lattice
  point, a ≤ b, not both unbounded (§1.4 step 3; Serenade's interval literals);
* ``"upper"``: one threshold t uniform on the lattice (§3.1: a tree split ``A ≤ t``), which is the
  pair with the lower bound unbounded, in upper cell b = #{v ≤ t}.

The quality of a family member is constant on each *cell* of the column's distinct values (§1.4),
so the EM is exact in either of two ways:

* rejection from the base measure (:class:`~dpmine_server.dp.mechanisms.RejectionSampler`): a
  threshold is drawn from the family's normalised measure and accepted with probability
  exp(c·q − bound), at most a public number of proposals per sampler
  (:func:`rejection_proposal_cap`);
* enumeration: every cell gets log μ(cell) (its exact share of lattice points) + c·q(cell); the
  family is chosen by its exact total, the cell by Gumbel-max over chunks of cells.

:class:`CandidateSampler` draws by rejection until the public cap is spent, then by enumeration
(a cap of 0, which the caller picks from public quantities, enumerates from the start).

Either way the released thresholds are lattice points, uniform inside the chosen cell
(:meth:`ContinuousCells.draw`), never a data value nor arithmetic on one. The family decides only
what a threshold means (its quality and the outcome it builds), not how it is sampled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import NumericColumn
from dpmine_server.dp.lattice import (
    UNBOUNDED,
    LatticeCells,
    PublicLattice,
    draw_threshold,
    draw_threshold_indices,
    draw_threshold_pair,
    draw_threshold_pair_indices,
)
from dpmine_server.dp.mechanisms import Choice, LogWeightSampler, RejectionSampler, gumbel_scores
from dpmine_server.dp.topk import draw_bound

__all__ = [
    "ENUMERATION_ROWS",
    "OVERRUN_PROBABILITY",
    "Bounds",
    "CandidateSampler",
    "ContinuousCells",
    "ProposalPool",
    "SortedValues",
    "ThresholdFamily",
    "ThresholdWeights",
    "cell_log_mass",
    "continuous_cells",
    "draw_base_indices",
    "draw_base_thresholds",
    "drawing_from",
    "family_cell_weights",
    "family_log_total",
    "joint_proposal_cap",
    "rejection_proposal_cap",
    "shared_pool",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: The shape of a family's thresholds: a bound pair (§1.4) or one upper bound ``A ≤ t`` (§3.1).
Bounds = Literal["pair", "upper"]
Thresholds = tuple[float | None, float | None]
#: c·q of the candidates with thresholds [lower ≤ A ≤ upper], two arrays with NaN for an
#: unbounded side (:meth:`ThresholdFamily.threshold_weights`).
ThresholdWeights = Callable[[FloatArray, FloatArray], FloatArray]

#: Lower cells per enumeration chunk: memory O(128·V) per family.
ENUMERATION_ROWS = 128
#: Public bound on P(the rejection draws of one sampler spend their whole proposal cap).
OVERRUN_PROBABILITY = 1e-9


@dataclass(frozen=True, slots=True)
class ContinuousCells:
    """The cells of §1.4 for one numeric column: distinct present values v_1 < … < v_V, lower
    cells a ∈ {atom, 1 … V+1} and upper cells b ∈ {0 … V, atom}, their base measure on the
    public lattice and, for a row mask, the number of its rows each pair selects. Released bounds
    are lattice points (:mod:`dpmine_server.dp.lattice`), never arithmetic on a value."""

    values: FloatArray
    value_index: IntArray  # per row: 1 … V, or 0 when missing
    lattice: LatticeCells

    @property
    def size(self) -> int:
        """V, the number of distinct present values."""
        return int(self.values.size)

    def nbytes(self) -> int:
        """Estimated memory of the arrays (the public lattice's points are not counted)."""
        edges = self.lattice.lower_edges.nbytes + self.lattice.upper_edges.nbytes
        return int(self.values.nbytes + self.value_index.nbytes + edges)

    def log_mass(self, lower: IntArray) -> FloatArray:
        """log μ of the pairs (a, b) for lower cells ``lower`` (rows) and every upper cell b."""
        return self.lattice.log_mass(lower)

    def prefix(self, rows: Bitset) -> IntArray:
        """P[i] = rows of the mask whose value index is ≤ i (i = 0 … V)."""
        indices = self.value_index[rows.to_bool_array()]
        counts = np.bincount(indices[indices > 0], minlength=self.size + 1)
        return np.asarray(np.cumsum(counts), dtype=np.int64)

    def selected(self, prefix: IntArray, lower: IntArray) -> IntArray:
        """Rows of the mask (given by its prefix) that each pair (a in ``lower``, every b)
        selects: values with index in [max(a, 1), b] (b = V for the upper atom)."""
        size = self.size
        start = np.maximum(lower, 1)[:, None]
        end = np.minimum(np.arange(size + 2), size)[None, :]
        count = prefix[end] - prefix[np.minimum(start - 1, size)]
        return np.asarray(np.where(start <= end, count, 0), dtype=np.int64)

    def draw(self, lower: int, upper: int, rng: np.random.Generator) -> Thresholds:
        """Released bounds: uniform lattice points of the pair of cells (§1.4 on the lattice);
        lower cell 0 (the atom) for a single upper threshold."""
        return self.lattice.draw(lower, upper, rng)


def continuous_cells(column: NumericColumn, lattice: PublicLattice) -> ContinuousCells:
    """The §1.4 cells of a numeric column (all present values are cut-points), cached on the
    column."""
    return column.derived.get_or_build(
        ("continuous_cells", lattice),
        lambda: _build_continuous_cells(column, lattice),
        nbytes=ContinuousCells.nbytes,
    )


def _build_continuous_cells(column: NumericColumn, lattice: PublicLattice) -> ContinuousCells:
    present = column.present.to_bool_array()
    values = np.unique(column.values[present])
    index = np.zeros(present.size, dtype=np.int64)
    index[present] = np.searchsorted(values, column.values[present]) + 1
    return ContinuousCells(
        values=values, value_index=index, lattice=LatticeCells.build(lattice, values)
    )


@dataclass(frozen=True, slots=True)
class SortedValues:
    """A numeric column's present values in increasing order (its stable ``sorted_order``):
    the rows of a mask that ``lower ≤ A ≤ upper`` selects are counted by two binary searches
    and a prefix sum along that order (§7 rejection proposals), after one O(rows) pass per
    mask, with no sort and no cells. A missing value is in no range."""

    order: IntArray
    values: FloatArray

    @classmethod
    def of(cls, column: NumericColumn) -> SortedValues:
        """The column's present values in order (one gather, cached on the column: the
        families of one column share it)."""
        return column.derived.get_or_build(
            ("sorted_values",),
            lambda: cls(order=column.sorted_order, values=column.values[column.sorted_order]),
            nbytes=lambda ordered: int(ordered.values.nbytes),
        )

    def prefix(self, rows: Bitset) -> IntArray:
        """P[k] = rows of the mask among the first k values in order (k = 0 … present)."""
        inside = rows.to_bool_array()[self.order]
        prefix = np.zeros(inside.size + 1, dtype=np.int64)
        np.cumsum(inside, out=prefix[1:])
        return prefix

    def ranks(self, lower: FloatArray, upper: FloatArray) -> tuple[IntArray, IntArray]:
        """[start, end) in order of the values with ``lower ≤ v ≤ upper``, NaN for an unbounded
        side (exact float comparisons, as :meth:`NumericColumn.range_bitset`)."""
        start = np.searchsorted(self.values, lower, side="left")
        end = np.searchsorted(self.values, upper, side="right")
        return (
            np.asarray(np.where(np.isnan(lower), 0, start), dtype=np.int64),
            np.asarray(np.where(np.isnan(upper), self.values.size, end), dtype=np.int64),
        )

    @staticmethod
    def counted(prefix: IntArray, start: IntArray, end: IntArray) -> IntArray:
        """Rows of the mask (given by its prefix) in each range [start, end)."""
        return np.asarray(np.where(start < end, prefix[end] - prefix[start], 0), dtype=np.int64)


class ThresholdFamily(Protocol[T_co]):
    """A continuous candidate family of one numeric attribute (§0.3, §1.4): what a threshold
    means is the family's; how it is sampled is :class:`CandidateSampler`'s."""

    @property
    def bounds(self) -> Bounds:
        """The shape of the thresholds: a bound pair or a single upper bound."""
        ...

    @property
    def log_mass(self) -> float:
        """log of the family's total base mass (relative to the explicit candidates')."""
        ...

    @property
    def lattice(self) -> PublicLattice:
        """The public lattice of the attribute's range."""
        ...

    def cells(self) -> ContinuousCells:
        """The cells of the attribute's column over :attr:`lattice`."""
        ...

    def cell_weights(self, cells: ContinuousCells) -> Callable[[IntArray], FloatArray]:
        """c·q of the pairs (a in the given lower cells, every upper cell b = 0 … V+1), prepared
        once per enumeration (for ``"upper"`` only a = 0 is asked)."""
        ...

    def log_weight(self, lower: float | None, upper: float | None) -> float:
        """c·q of the candidate with these thresholds, weighed alone (a scanned proposal)."""
        ...

    def threshold_weights(self) -> ThresholdWeights:
        """c·q of the candidates with thresholds [lower ≤ A ≤ upper] (two arrays, NaN for an
        unbounded side): what a batch of rejection proposals needs, prepared once per sampler
        in O(rows) and then O(log rows) a proposal (:class:`SortedValues`)."""
        ...

    def outcome(self, lower: float | None, upper: float | None) -> T_co:
        """The candidate with these released thresholds (built for the chosen one only)."""
        ...


def cell_log_mass(cells: ContinuousCells, bounds: Bounds, lower: IntArray) -> FloatArray:
    """Normalised log μ of the cells (a in ``lower``, every b) under the family's measure:
    §1.4's pair measure, or a uniform lattice point in upper cell b (a = 0 only)."""
    if bounds == "pair":
        return cells.log_mass(lower)
    return np.broadcast_to(cells.lattice.upper_log_mass(), (lower.size, cells.size + 2))


def _lower_cells(cells: ContinuousCells, bounds: Bounds) -> int:
    """Number of lower cells to enumerate: all V+2 for pairs, the atom alone for one bound."""
    return cells.size + 2 if bounds == "pair" else 1


def family_cell_weights(
    family: ThresholdFamily[object], cells: ContinuousCells
) -> Iterator[tuple[IntArray, FloatArray]]:
    """(lower cells, log μ + c·q for every upper cell) in chunks of lower cells (§1.4, §7)."""
    weights = family.cell_weights(cells)
    rows = _lower_cells(cells, family.bounds)
    for start in range(0, rows, ENUMERATION_ROWS):
        lower = np.arange(start, min(start + ENUMERATION_ROWS, rows))
        yield lower, cell_log_mass(cells, family.bounds, lower) + weights(lower)


def family_log_total(family: ThresholdFamily[object], cells: ContinuousCells) -> float:
    """log Σ over the family's cells of μ·exp(c·q), exact (relative to its base mass)."""
    total = -math.inf
    for _lower, weights in family_cell_weights(family, cells):
        top = float(np.max(weights))
        if top > -math.inf:
            total = float(np.logaddexp(total, top + math.log(np.sum(np.exp(weights - top)))))
    return total


def draw_base_thresholds(
    bounds: Bounds, lattice: PublicLattice, rng: np.random.Generator
) -> Thresholds:
    """One draw from the family's normalised base measure on the lattice (§1.4, §3.1)."""
    if bounds == "pair":
        return draw_threshold_pair(lattice, rng)
    return None, draw_threshold(lattice, rng)


def draw_base_indices(
    bounds: Bounds, lattice: PublicLattice, count: int, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """``count`` independent draws of :func:`draw_base_thresholds` as lattice indices (lower,
    upper), :data:`~dpmine_server.dp.lattice.UNBOUNDED` for an unbounded side."""
    if bounds == "pair":
        return draw_threshold_pair_indices(lattice, count, rng)
    return np.full(count, UNBOUNDED, dtype=np.int64), draw_threshold_indices(lattice, count, rng)


def _enumerated_draw(family: ThresholdFamily[T], rng: np.random.Generator) -> T:
    """A cell ∝ μ·exp(c·q) by Gumbel-max over all cells, thresholds uniform inside."""
    cells = family.cells()
    best = (-math.inf, 0, 0)
    for lower, weights in family_cell_weights(family, cells):
        keys = gumbel_scores(weights, rng=rng)
        flat = int(np.argmax(keys))
        row, column = divmod(flat, keys.shape[1])
        if keys[row, column] > best[0]:
            best = (float(keys[row, column]), int(lower[row]), column)
    low, high = cells.draw(best[1], best[2], rng)
    return family.outcome(low, high)


def rejection_proposal_cap(
    draws: int, exponent: float, overrun: float = OVERRUN_PROBABILITY
) -> int:
    """Public cap N on the proposals of ``draws`` rejection draws whose every proposal is
    accepted with probability at least p = e^(−``exponent``) (``exponent`` ≥ bound − least
    c·q, a public value), such that P(more than N proposals) ≤ ``overrun``.

    Proof. One sampler's proposals are independent, each accepted with the same probability
    α ≥ p (:class:`~dpmine_server.dp.mechanisms.RejectionSampler`). Continue the sequence past
    the last draw with fictitious proposals: the draws need more than N proposals iff fewer than
    ``draws`` of the first N are accepted, so P(> N) = P(Binomial(N, α) < draws) =
    I_{1−α}(N − draws + 1, draws), which only grows as α falls to p (coupling). N is the
    smallest value with I_{1−p}(N − draws + 1, draws) ≤ ``overrun``
    (:func:`~dpmine_server.dp.topk.draw_bound`, the exact negative-binomial tail); for one draw
    N = ⌈ln(overrun)/ln(1 − p)⌉, about 20.7·e^exponent at 10⁻⁹."""
    if draws < 0 or not (math.isfinite(exponent) and exponent >= 0):
        raise ValueError("a proposal cap needs draws ≥ 0 and a finite exponent ≥ 0")
    return draw_bound(successes=draws, success_probability=math.exp(-exponent), failure=overrun)


def joint_proposal_cap(
    demands: Sequence[tuple[int, float]], overrun: float = OVERRUN_PROBABILITY
) -> int:
    """Public cap J on the *total* proposals of several rejection samplers run one after
    another (the parts of a batch, issue #23 item 2), sampler i making ``draws`` dᵢ draws whose
    every proposal is accepted with probability at least e^(−``exponent`` aᵢ), such that
    P(the samplers need more than J proposals in all) ≤ ``overrun``.

    Proof. Number the proposals of all samplers in the order they are made, t = 1, 2, …, and
    continue past the last draw with fictitious proposals of acceptance probability p =
    e^(−max aᵢ). Given everything before it, proposal t is accepted with a probability αₜ ≥ p
    (whichever sampler makes it). Realise it as [Uₜ ≤ αₜ] with Uₜ independent uniforms, and
    let Bₜ = [Uₜ ≤ p]: the Bₜ are independent Bernoulli(p) and Bₜ = 1 implies an acceptance.
    So the D = Σ dᵢ draws are done no later than the D-th success of the Bₜ, and P(more than J
    proposals) ≤ P(Binomial(J, p) < D) = I_{1−p}(J − D + 1, D), the tail bounded by
    :func:`rejection_proposal_cap` (D draws at exponent max aᵢ). A sum of geometric variables
    concentrates: 20 draws at a = 0.5 need J = 75 here against 20 × 23 = 460 for twenty caps
    of one draw each, each at ``overrun``."""
    draws = 0
    for count, exponent in demands:
        rejection_proposal_cap(0, exponent)  # the same checks as one sampler's cap
        if count < 0:
            raise ValueError("a proposal cap needs draws ≥ 0 and a finite exponent ≥ 0")
        draws += count
    if draws == 0:
        return 0
    worst = max(exponent for count, exponent in demands if count > 0)
    return rejection_proposal_cap(draws, worst, overrun)


class ProposalPool:
    """A public number of rejection proposals, spent by one or several samplers in turn."""

    def __init__(self, cap: int) -> None:
        self.left = max(cap, 0)

    def spend(self, made: int) -> None:
        """Record ``made`` proposals (at most :attr:`left`)."""
        self.left -= made


_SHARED_POOL: ContextVar[ProposalPool | None] = ContextVar("dpmine_shared_pool", default=None)


@contextmanager
def drawing_from(pool: ProposalPool) -> Iterator[None]:
    """Within the block, the samplers of kernels that opt in (:func:`shared_pool`) spend
    ``pool`` instead of their own cap: the executor runs a batch's jointly priced parts in it
    (:func:`joint_proposal_cap`; services/executor.py)."""
    token = _SHARED_POOL.set(pool)
    try:
        yield
    finally:
        _SHARED_POOL.reset(token)


def shared_pool() -> ProposalPool | None:
    """The pool of the enclosing :func:`drawing_from` block, or None."""
    return _SHARED_POOL.get()


class CandidateSampler(Generic[T]):
    """The exact EM over explicit candidates and threshold families (module docstring),
    prepared once for any number of independent draws.

    ``explicit_log_weights`` are log μ + c·q of the explicit candidates; every family's c·q must
    be ≤ ``log_weight_bound``. Draws are by rejection (expected proposals ≤ exp(bound − least
    c·q)) until ``proposal_cap`` proposals are spent over all draws, then by enumeration
    (exact totals per family, O(V²) for pairs, O(V) for one bound), built on first use. The cap
    must depend on public quantities only (:func:`rejection_proposal_cap`; 0 enumerates from
    the start), so the work is bounded by a public value except with probability
    :data:`OVERRUN_PROBABILITY`, when the enumeration's time is an overrun. A
    :class:`ProposalPool` instead of a number is a cap shared with the samplers run before and
    after this one (:func:`joint_proposal_cap`): the same rule, over all their draws.

    ``owned``: the caller hands ``explicit_log_weights`` over, and without families their
    memory holds the enumeration's cumulative weights (:class:`~dpmine_server.dp.mechanisms.
    LogWeightSampler` ``consume``); only their number is read afterwards.

    ``prepared`` (a public choice, e.g. Serenade's ``RejectionPlan``) weighs proposals a batch
    at a time from each family's :meth:`~ThresholdFamily.threshold_weights`, prepared on the
    family's first proposal; otherwise one at a time by :meth:`~ThresholdFamily.log_weight`.
    Both give every proposal its exact c·q, so the law is the same.

    Exactness. Let π be the EM law and H_j everything drawn before draw j (choices and
    proposal counts, of this sampler and of those that spent a shared pool before it). Draw j
    gets the r_j proposals left, a function of H_j; it is accepted
    within r_j proposals, and then its choice has law π independently of how many proposals it
    took (:class:`~dpmine_server.dp.mechanisms.RejectionSampler`), or else it is an
    enumerated draw, of law π, from fresh randomness. So P(choice_j = x | H_j) = π(x)·P(accepted
    | H_j) + π(x)·P(not accepted | H_j) = π(x) whatever H_j, and the choices are independent
    draws of π, exactly as without a cap. The number of proposals is a timing side channel, never
    reported (README "Timing")."""

    def __init__(
        self,
        explicit_log_weights: npt.ArrayLike,
        families: Sequence[ThresholdFamily[T]],
        *,
        log_weight_bound: float,
        proposal_cap: int | ProposalPool,
        prepared: bool = True,
        owned: bool = False,
    ) -> None:
        explicit = np.asarray(explicit_log_weights, dtype=np.float64)
        self._owned = owned
        self._explicit = explicit
        self._families = list(families)
        self._masses = np.asarray([family.log_mass for family in self._families], dtype=np.float64)
        self._prepared: dict[int, ThresholdWeights] = {}
        self._prepared_weights = prepared
        self._enumerated: LogWeightSampler | None = None
        self._rejection: RejectionSampler | None = None
        self._pool = (
            proposal_cap if isinstance(proposal_cap, ProposalPool) else ProposalPool(proposal_cap)
        )
        if self._families and self._pool.left > 0:
            self._rejection = RejectionSampler(
                explicit, self._masses, log_weight_bound=log_weight_bound, batches=prepared
            )
        else:
            self._enumerated = self._enumeration()

    def draw(self, rng: np.random.Generator) -> Choice[T]:
        """One exact draw: ("explicit", index) or ("family", the family's outcome)."""
        if self._rejection is not None and self._pool.left > 0:
            choice, made = self._rejection.draw(self._propose, rng, limit=self._pool.left)
            self._pool.spend(made)
            if choice is not None:
                if choice[0] == "family":
                    index, lower, upper = choice[1]
                    return "family", self._families[index].outcome(lower, upper)
                return "explicit", choice[1]
        return self._enumerated_draw(rng)

    def _threshold_weights(self, index: int) -> ThresholdWeights:
        """Family ``index``'s prepared c·q of thresholds (O(rows), once per sampler)."""
        weights = self._prepared.get(index)
        if weights is None:
            weights = self._prepared[index] = self._families[index].threshold_weights()
        return weights

    def _enumeration(self) -> LogWeightSampler:
        """Explicit weights and every family's exact total (O(V²) per pair family)."""
        if not self._families:  # no copy of a large explicit set (overwritten when owned)
            return LogWeightSampler(self._explicit, consume=self._owned)
        totals = [family_log_total(family, family.cells()) for family in self._families]
        masses = np.asarray(totals, dtype=np.float64) + self._masses
        return LogWeightSampler(np.concatenate([self._explicit, masses]))

    def _enumerated_draw(self, rng: np.random.Generator) -> Choice[T]:
        if self._enumerated is None:
            self._enumerated = self._enumeration()
        index = self._enumerated.draw(rng)
        explicit_size = int(self._explicit.size)
        if index < explicit_size:
            return "explicit", index
        return "family", _enumerated_draw(self._families[index - explicit_size], rng)

    def _propose(
        self, families: IntArray, rng: np.random.Generator
    ) -> tuple[FloatArray, Callable[[int], tuple[int, float | None, float | None]]]:
        """One proposal from each listed family's base measure, independently: their c·q,
        from the family's prepared weights (O(log rows) each, no pass over the rows), and a
        builder of the k-th proposal's (family, lower, upper)."""
        if not self._prepared_weights:
            return self._scanned_proposal(int(families[0]), rng)
        log_weights = np.empty(families.size, dtype=np.float64)
        lows = np.empty(families.size, dtype=np.int64)
        highs = np.empty(families.size, dtype=np.int64)
        order = np.argsort(families, kind="stable")  # each family's positions, in order
        present, starts = np.unique(families[order], return_index=True)
        for index, at in zip(present.tolist(), np.split(order, starts[1:]), strict=True):
            family = self._families[index]
            low, high = draw_base_indices(family.bounds, family.lattice, at.size, rng)
            points = family.lattice.points
            lower = np.where(low == UNBOUNDED, np.nan, points[low])
            upper = np.where(high == UNBOUNDED, np.nan, points[high])
            log_weights[at] = self._threshold_weights(index)(lower, upper)
            lows[at], highs[at] = low, high

        def build(k: int) -> tuple[int, float | None, float | None]:
            index = int(families[k])
            lattice = self._families[index].lattice
            low, high = int(lows[k]), int(highs[k])
            return (
                index,
                None if low == UNBOUNDED else lattice.point(low),
                None if high == UNBOUNDED else lattice.point(high),
            )

        return log_weights, build

    def _scanned_proposal(
        self, index: int, rng: np.random.Generator
    ) -> tuple[FloatArray, Callable[[int], tuple[int, float | None, float | None]]]:
        """One proposal of family ``index``, weighed alone (the sampler asks for one at a time
        when not ``prepared``)."""
        family = self._families[index]
        lower, upper = draw_base_thresholds(family.bounds, family.lattice, rng)
        weight = np.asarray([family.log_weight(lower, upper)], dtype=np.float64)
        return weight, lambda _k: (index, lower, upper)
