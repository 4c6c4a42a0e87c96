"""Serenade's private selections: initial pairs and one extension step (ALGORITHMS.md §2.2–2.4).

Every selection is one exponential-mechanism draw with weight μ(x)·exp(c·Q(x)), with
c = ε/(Δ_up + Δ_down) (range-calibrated, §0.8: Δ_up and Δ_down are the largest increase and
decrease of any candidate's Q when one row is added, from the public calibration scan) or the
paper's c = ε/(2Δ), Q the low-sensitivity quality of :mod:`serenade_quality` (optionally with the
coverage factor σ(s₂(E00 − y0)), E00 = n − |U|) and μ the data-independent base measure
of §7: one unit per discrete literal (Boolean, attribute=category), one unit per numeric
attribute spread over its threshold pairs (§1.4: each bound unbounded with probability ½,
otherwise uniform on the public range; a ≤ b; not both unbounded), one unit for "leave it
unextended". Numeric thresholds are handled in one of two exact ways, chosen from public
quantities only:

* ``continuous`` (the default while c ≤ 8): exact EM over the threshold cells of §1.4 by
  :class:`~dpmine_server.dp.candidates.CandidateSampler` — by rejection from the base measure
  while c ≤ 8 (at most :func:`rejection_proposals` proposals per call, a public cap exceeded
  with probability ≤ 10⁻⁹, after which the call's remaining draws enumerate), by enumerating
  every cell pair with prefix sums and a chunked Gumbel-max above (O(V²) time, O(128·V) memory
  per numeric attribute); a threshold is a lattice point drawn uniformly inside its cell, never
  a data value;
* ``grid`` (what "auto" picks above c = 8, since enumeration is slow on large data):
  thresholds on the attribute's public grid (owner's grid, else 20 equal-width interior
  points), every interval a discrete candidate, exact enumeration with Gumbel-max.

The candidate sets depend only on public metadata, the public queries and the public options
(§2.2): no support filters. ``ExtensionRules.columns`` (the request's ``options.columns``)
restricts the attributes whose literals may start or extend a query; the list is public, so the
candidate set stays a function of public values and Q's sensitivities, which bound every
candidate's change when one row is added, are unchanged (a subset of candidates needs no more).
Nothing but the chosen candidate leaves this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from dpmine.wire import (
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    DatasetMetadata,
    Expr,
    NumericAttribute,
    NumLiteral,
    Redescription,
    extend_query,
    serenade_steps,
)
from dpmine_server.data.bitsets import Bitset
from dpmine_server.data.columns import ColumnStore, NumericColumn
from dpmine_server.dp.candidates import (
    Bounds,
    CandidateSampler,
    ContinuousCells,
    ProposalPool,
    SortedValues,
    ThresholdWeights,
    continuous_cells,
    rejection_proposal_cap,
    shared_pool,
)
from dpmine_server.dp.lattice import PublicLattice
from dpmine_server.dp.mechanisms import OneSided, batch_work, em_coefficient
from dpmine_server.operations.serenade_quality import (
    KernelQuality,
    counts_quality,
    kernel_quality,
)
from dpmine_server.operations.serenade_thresholds import (
    Grid,
    GridLiterals,
    class_interval_counts,
    grid_intervals,
    grid_points,
    numeric_rows,
    pair_interval_quality,
    threshold_grid,
)
from dpmine_server.services.extension_model import active_ticket, canonical_text

__all__ = [
    "REJECTION_MAX_EXPONENT",
    "ExtensionResources",
    "ExtensionRules",
    "Op",
    "QualityParams",
    "RejectionPlan",
    "SideQuery",
    "ThresholdMode",
    "build_extension_resources",
    "check_pair_space",
    "choose_threshold_mode",
    "enumerated_cells",
    "extend_one",
    "extension_cache_key",
    "extension_families",
    "extension_key_text",
    "extension_public_candidates",
    "extension_public_size",
    "extension_resources_key",
    "extension_resources_key_text",
    "extension_resources_public_size",
    "initial_pairs",
    "joint_rejection_seconds",
    "pair_families",
    "parse_side",
    "rejection_proposals",
]

Op = Literal["and", "or"]
Side = Literal["left", "right"]
ThresholdMode = Literal["continuous", "grid"]
WordMatrix = npt.NDArray[np.uint64]

#: Continuous thresholds by rejection only while c·(q_hi − q_lo) ≤ this (expected proposals
#: ≤ e^8 ≈ 3000 per draw, capped by :func:`rejection_proposals`); above it, the public grid.
#: Public: depends on ε, Δ only.
REJECTION_MAX_EXPONENT = 8.0


@dataclass(frozen=True, slots=True)
class QualityParams:
    """Public parameters of Q: steepness s, centre x0 (a count) and sensitivity Δ; optionally
    the coverage factor (y0, s₂) and the one-sided sensitivities of §0.8.

    ``function="jaccard"`` is the paper's NoSens ablation: Q = J, whose sensitivity is 1.
    ``delta`` is the symmetric Δ = max(Δ_up, Δ_down); when ``delta_up`` and ``delta_down`` are
    both set the draws are range-calibrated, c = ε/(Δ_up + Δ_down), else c = ε/(2Δ).
    """

    s: float
    x0: float
    delta: float
    function: Literal["serenade", "jaccard"] = "serenade"
    y0: float | None = None
    s2: float | None = None
    delta_up: float | None = None
    delta_down: float | None = None

    def coefficient(self, epsilon: float) -> float:
        """c = ε/(Δ_up + Δ_down) (range-calibrated, §0.8) or ε/(2Δ), the exponent's factor.
        ε = 0 gives c = 0, the uniform draw over the candidates' base measure: never charged
        (requests need ε > 0), it is what the candidate-set tests compare with."""
        if epsilon == 0.0:
            return 0.0
        if self.delta_up is not None and self.delta_down is not None:
            return em_coefficient(epsilon, OneSided(up=self.delta_up, down=self.delta_down))
        return em_coefficient(epsilon, self.delta)

    def evaluate(self, i: npt.ArrayLike, u: npt.ArrayLike, n_rows: int) -> npt.NDArray[np.float64]:
        """Q for statistics (|I|, |U|) on n rows (E00 = n − |U|), vectorised (integer counts
        by one compiled pass: :func:`~dpmine_server.operations.serenade_quality.
        counts_quality`)."""
        return counts_quality(np.asarray(i), np.asarray(u), self.kernel_quality(n_rows))

    def kernel_quality(self, n_rows: int) -> KernelQuality:
        """How a compiled kernel evaluates :meth:`evaluate` on ``n_rows`` rows."""
        if self.function == "jaccard":
            return kernel_quality(n_rows)
        return kernel_quality(n_rows, s=self.s, x0=self.x0, s2=self.s2, y0=self.y0)


@dataclass(frozen=True, slots=True)
class ExtensionRules:
    """Data-independent restrictions on candidates (§2.2); ``columns``: the attributes whose
    literals candidates may use (None = all), a public list."""

    operators: frozenset[Op] = frozenset({"and", "or"})
    negations: bool = False
    max_literals: int = 4
    single_side_or: bool = True
    columns: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class SideQuery:
    """One side of a redescription in Serenade form (left-to-right fold of ∧/∨)."""

    expr: Expr
    literals: tuple[AnyLiteral, ...]
    operators: tuple[Op, ...]

    @property
    def attributes(self) -> frozenset[str]:
        """Attributes the query uses."""
        return frozenset(literal.attribute for literal in self.literals)

    @property
    def has_or(self) -> bool:
        """Whether the query holds a disjunction."""
        return "or" in self.operators


def parse_side(expr: Expr, *, side: str) -> SideQuery:
    """The Serenade form of a query; ValueError if it is not a left-to-right fold of literals."""
    steps = serenade_steps(expr)
    if steps is None:
        raise ValueError(
            f"the {side} query is not in Serenade form (a literal extended left to right with "
            "& or |); build it with dpmine.queries.serenade_query"
        )
    first, rest = steps
    return SideQuery(
        expr=expr,
        literals=(first, *(literal for _op, literal in rest)),
        operators=tuple(op for op, _literal in rest),
    )


def choose_threshold_mode(
    c: float, requested: Literal["auto", "continuous", "grid"]
) -> ThresholdMode:
    """The public rule of the module docstring: "auto" takes continuous thresholds while
    c ≤ 8 (fast exact rejection) and the grid above; an explicit choice is kept (continuous
    with c > 8 is sampled by exact enumeration of the cell pairs, O(V²) per family)."""
    if requested == "grid":
        return "grid"
    if requested == "continuous" or c <= REJECTION_MAX_EXPONENT:
        return "continuous"
    return "grid"


# -- literal supports -------------------------------------------------------------------------


def _popcount(words: WordMatrix) -> npt.NDArray[np.int64]:
    return np.asarray(np.bitwise_count(words).sum(axis=-1, dtype=np.int64), dtype=np.int64)


@dataclass(frozen=True, slots=True)
class _DiscreteBank:
    """The discrete literals of some attributes, their attributes and support bitsets."""

    literals: tuple[AnyLiteral, ...]
    attributes: tuple[str, ...]
    words: WordMatrix  # [n_literals, n_words]

    def nbytes(self) -> int:
        """Estimated memory (the support words; the literals are public)."""
        return int(self.words.nbytes)


def _discrete_literals(
    metadata: DatasetMetadata, names: Sequence[str], *, negations: bool
) -> list[AnyLiteral]:
    literals: list[AnyLiteral] = []
    for name in names:
        attribute = metadata.attribute(name)
        polarities = (False, True) if negations else (False,)
        for negated in polarities:
            if isinstance(attribute, BooleanAttribute):
                literals.append(BoolLiteral(attribute=name, negated=negated))
            elif isinstance(attribute, CategoricalAttribute):
                literals.extend(
                    CatLiteral(attribute=name, category=category, negated=negated)
                    for category in attribute.categories
                )
    return literals


def _bank(store: ColumnStore, names: tuple[str, ...], negations: bool) -> _DiscreteBank:
    """The bank of these attributes' literals, cached on the store."""
    return store.derived.get_or_build(
        ("serenade.bank", names, negations),
        lambda: _build_bank(store, names, negations),
        nbytes=_DiscreteBank.nbytes,
    )


@dataclass(frozen=True, slots=True)
class ExtensionResources:
    """What every position that one ``serenade.extend_one`` call builds reads besides its own
    queries' rows (§2.2): each side's discrete bank and, in grid mode, the grid of every
    numeric attribute a side may use. Built whole (:func:`build_extension_resources`), never
    in part, so that a copy held by the public cache model (services/extension_model.py)
    spares a later call exactly the per-call work that services/timing.py
    ``_grids_and_banks_work`` prices."""

    banks: dict[Side, _DiscreteBank]
    grids: dict[str, Grid]

    def nbytes(self) -> int:
        """Estimated memory (the banks' words and the grids' arrays)."""
        banks = sum(bank.nbytes() for bank in self.banks.values())
        return banks + sum(grid.nbytes() for grid in self.grids.values())


def build_extension_resources(
    store: ColumnStore, rules: ExtensionRules, mode: ThresholdMode
) -> ExtensionResources:
    """:class:`ExtensionResources` of the attributes ``rules`` allows, each bank and grid
    taken from (or put in) the store's own caches."""
    metadata = store.metadata
    banks: dict[Side, _DiscreteBank] = {}
    grids: dict[str, Grid] = {}
    sides: tuple[Side, Side] = ("left", "right")
    for side in sides:
        view = _view_attributes(metadata, side, rules.columns)
        banks[side] = _bank(store, tuple(_discrete_names(metadata, view)), rules.negations)
        if mode != "grid":
            continue
        for name in _numeric_names(metadata, view):
            if name not in grids:
                attribute, column = _numeric(store, name)
                grids[name] = threshold_grid(column, attribute)
    return ExtensionResources(banks=banks, grids=grids)


def extension_resources_key(
    rules: ExtensionRules, mode: ThresholdMode
) -> tuple[str, frozenset[str] | None, bool, ThresholdMode]:
    """The cache key of a call's :class:`ExtensionResources`: public values only (the store
    it is held for stands for the dataset version)."""
    return ("serenade.extension_resources", rules.columns, rules.negations, mode)


def extension_resources_key_text(rules: ExtensionRules, mode: ThresholdMode) -> str:
    """A canonical text of :func:`extension_resources_key`."""
    return canonical_text(
        {
            "resources": "serenade.extension_resources",
            "columns": None if rules.columns is None else sorted(rules.columns),
            "negations": rules.negations,
            "mode": mode,
        }
    )


def extension_resources_public_size(
    metadata: DatasetMetadata, rules: ExtensionRules, mode: ThresholdMode
) -> int:
    """Public size estimate (bytes) of :class:`ExtensionResources`: a bitset of ``n_max`` bits
    per bank literal, and in grid mode a cell (8 bytes) per ``n_max`` row and a few KiB per
    numeric attribute. Public: metadata and options only."""
    bitset = 8 * (metadata.n_max // 64 + 1)
    size = 4096
    numeric: set[str] = set()
    sides: tuple[Side, Side] = ("left", "right")
    for side in sides:
        view = _view_attributes(metadata, side, rules.columns)
        names = _discrete_names(metadata, view)
        size += bitset * len(_discrete_literals(metadata, names, negations=rules.negations))
        numeric.update(_numeric_names(metadata, view))
    if mode == "grid":
        size += len(numeric) * (8 * metadata.n_max + 4096)
    return size


def _extension_resources(
    store: ColumnStore, rules: ExtensionRules, mode: ThresholdMode
) -> ExtensionResources:
    """The call's resources: those the active ticket pinned when its model holds them, else
    built (and delivered to the ticket, so that a shown call enters them in the model)."""

    def build() -> ExtensionResources:
        return build_extension_resources(store, rules, mode)

    ticket = active_ticket(store)
    if ticket is None:
        return build()
    value = ticket.value(extension_resources_key(rules, mode), build)
    assert isinstance(value, ExtensionResources)
    return value


class _LazyResources:
    """A call's :class:`ExtensionResources`, fetched (:func:`_extension_resources`) once, on
    first use."""

    def __init__(self, store: ColumnStore, rules: ExtensionRules, mode: ThresholdMode) -> None:
        self._args = (store, rules, mode)
        self._value: ExtensionResources | None = None

    def __call__(self) -> ExtensionResources:
        if self._value is None:
            self._value = _extension_resources(*self._args)
        return self._value


def _build_bank(store: ColumnStore, names: tuple[str, ...], negations: bool) -> _DiscreteBank:
    literals = _discrete_literals(store.metadata, names, negations=negations)
    n_words = store.all_rows().words.size
    words = np.zeros((len(literals), n_words), dtype=np.uint64)
    for row, literal in enumerate(literals):
        words[row] = store.literal_bitset(literal).words
    return _DiscreteBank(
        literals=tuple(literals),
        attributes=tuple(literal.attribute for literal in literals),
        words=words,
    )


def _numeric_names(metadata: DatasetMetadata, names: Sequence[str]) -> list[str]:
    return [n for n in names if isinstance(metadata.attribute(n), NumericAttribute)]


def _discrete_names(metadata: DatasetMetadata, names: Sequence[str]) -> list[str]:
    return [n for n in names if not isinstance(metadata.attribute(n), NumericAttribute)]


def _view_attributes(
    metadata: DatasetMetadata, side: Side, columns: frozenset[str] | None = None
) -> list[str]:
    """The attributes of one side's view (every attribute of a table), those of ``columns``
    only when given: public, from the metadata and the request."""
    return [
        a.name
        for a in metadata.attributes
        if (metadata.kind != "views" or a.view == side) and (columns is None or a.name in columns)
    ]


def _numeric(store: ColumnStore, name: str) -> tuple[NumericAttribute, NumericColumn]:
    attribute = store.metadata.attribute(name)
    column = store.column(name)
    if not isinstance(attribute, NumericAttribute) or not isinstance(column, NumericColumn):
        raise TypeError(f"attribute {name!r} is not numeric")
    return attribute, column


# -- the quality of one candidate given the supports ------------------------------------------


def _combine(side_words: WordMatrix, literal_words: WordMatrix, op: Op) -> WordMatrix:
    return side_words & literal_words if op == "and" else side_words | literal_words


def _pair_stats(
    x: WordMatrix, y: npt.NDArray[np.uint64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    return _popcount(x & y), _popcount(x | y)


# -- candidate sets ---------------------------------------------------------------------------

Outcome = tuple[int, Redescription]  # (position in the collection, chosen redescription)


class _Outcomes(Protocol):
    """Indexable redescriptions of a block (a list, or built lazily on access)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Redescription: ...


@dataclass(frozen=True, slots=True)
class _Block:
    """Explicit candidates: log base masses, qualities and (lazily built) outcomes."""

    log_mass: npt.NDArray[np.float64]
    quality: npt.NDArray[np.float64]
    outcomes: _Outcomes


@dataclass(frozen=True, slots=True)
class _Terms:
    """|I| = i_constant + |i_rows ∩ ℓ| and |U| = u_constant + |u_rows ∩ ℓ| for a literal ℓ."""

    i_constant: int
    i_rows: Bitset
    u_constant: int
    u_rows: Bitset


@dataclass(frozen=True, slots=True)
class _ClassTerms:
    """:class:`_Terms` whose two masks are row classes of (X, Y) (:meth:`_ExtendMaker.
    class_terms`): |I| = i_constant + |class i_class ∩ ℓ|, |U| = u_constant + |class u_class ∩
    ℓ|."""

    i_constant: int
    i_class: int
    u_constant: int
    u_class: int


@dataclass(frozen=True, slots=True)
class _ExtendMaker:
    """Extends side ``side`` of ``base`` by ``op`` and a literal with support ``rows``."""

    base: Redescription
    side: Side
    op: Op
    support: Bitset  # the extended side's support
    other: Bitset  # the other side's support

    def supports(self) -> tuple[Bitset, ...]:
        """The row masks held (for memory estimates)."""
        return self.support, self.other

    def terms(self) -> _Terms:
        """|I| and |U| of an extension as constants plus rows of masks the literal selects."""
        x, y = self.support, self.other
        if self.op == "and":  # new = X ∩ ℓ
            return _Terms(0, x & y, y.count(), x - y)
        return _Terms((x & y).count(), y - x, (x | y).count(), ~(x | y))  # new = X or ℓ

    def class_terms(self) -> _ClassTerms:
        """:meth:`terms` with each mask named as its row class of (X, Y) = (``support``,
        ``other``), k = 2·[row ∈ X] + [row ∈ Y] (:func:`~dpmine_server.operations.
        serenade_thresholds.class_interval_counts`): X ∩ Y is class 3, X − Y class 2, Y − X
        class 1 and the rows in neither class 0 (tests/operations/test_serenade.py checks
        them against :meth:`terms`)."""
        x, y = self.support, self.other
        if self.op == "and":
            return _ClassTerms(0, 3, y.count(), 2)
        return _ClassTerms((x & y).count(), 1, (x | y).count(), 0)

    def statistics(self, rows: Bitset) -> tuple[int, int]:
        """(|I|, |U|) of the extension by a literal with support ``rows``."""
        new = self.support & rows if self.op == "and" else self.support | rows
        return new.count_and(self.other), (new | self.other).count()

    def build(self, literal: AnyLiteral) -> Redescription:
        """The extended redescription."""
        return _extended(self.base, self.side, self.op, literal)


@dataclass(frozen=True, slots=True)
class _PairMaker:
    """Pairs the left literal ``left`` (support ``support``) with a right literal."""

    left: AnyLiteral
    support: Bitset

    def supports(self) -> tuple[Bitset, ...]:
        """The row masks held (for memory estimates)."""
        return (self.support,)

    def terms(self) -> _Terms:
        """|I| = |S_L ∩ ℓ| and |U| = |S_L| + |ℓ - S_L|."""
        return _Terms(0, self.support, self.support.count(), ~self.support)

    def statistics(self, rows: Bitset) -> tuple[int, int]:
        """(|I|, |U|) of the pair with a right literal of support ``rows``."""
        return self.support.count_and(rows), (self.support | rows).count()

    def build(self, literal: AnyLiteral) -> Redescription:
        """The pair."""
        return Redescription(left=self.left, right=literal)


@dataclass(frozen=True, slots=True)
class _Family:
    """A numeric-threshold family: base mass exp(log_mass) (1 unless its pair's left literal
    carries less) spread by §1.4's measure."""

    column: NumericColumn
    attribute: NumericAttribute
    negated: bool
    make: _ExtendMaker | _PairMaker
    log_mass: float = 0.0


class _Candidates:
    """The candidates of one redescription (or of the pair space): explicit blocks and
    continuous families. Position-free, so it can be cached while its redescription stays."""

    def __init__(self, params: QualityParams, n_rows: int) -> None:
        self.params = params
        self.n_rows = n_rows  # private; only ever enters Q (E00 = n − |U|)
        self.blocks: list[_Block] = []
        self.families: list[_Family] = []
        self._nbytes: int | None = None

    def nbytes(self) -> int:
        """Estimated memory: the blocks' arrays and the supports the makers hold (each once).
        Measured on first call, once the set is complete (it is not changed after caching)."""
        if self._nbytes is None:
            makers = [family.make for family in self.families] + [
                block.outcomes.maker
                for block in self.blocks
                if isinstance(block.outcomes, _LazyOutcomes)
            ]
            supports = {id(rows): rows.nbytes for maker in makers for rows in maker.supports()}
            arrays = sum(block.log_mass.nbytes + block.quality.nbytes for block in self.blocks)
            self._nbytes = int(arrays) + sum(supports.values())
        return self._nbytes

    def add(
        self, log_mass: npt.ArrayLike, i: npt.ArrayLike, u: npt.ArrayLike, outcomes: _Outcomes
    ) -> None:
        """Explicit candidates with base masses exp(log_mass) and statistics (|I|, |U|)."""
        self.add_evaluated(log_mass, self.params.evaluate(i, u, self.n_rows), outcomes)

    def add_evaluated(
        self, log_mass: npt.ArrayLike, quality: npt.NDArray[np.float64], outcomes: _Outcomes
    ) -> None:
        """Explicit candidates with base masses exp(log_mass) and qualities Q, in the row-major
        order of ``outcomes`` (``log_mass`` broadcast to Q's shape, never copied)."""
        q = np.atleast_1d(quality)
        mass = np.broadcast_to(np.asarray(log_mass, dtype=np.float64), q.shape)
        self.blocks.append(_Block(mass, q, outcomes))


@dataclass(frozen=True, slots=True)
class _WeightedFamily:
    """A numeric-threshold family of the collection's position ``position``, weighted for one
    EM with coefficient c: the :class:`~dpmine_server.dp.candidates.ThresholdFamily` of a §1.4
    threshold pair (Serenade's quality of the extended redescription or initial pair)."""

    position: int
    family: _Family
    params: QualityParams
    n_rows: int
    c: float

    @property
    def bounds(self) -> Bounds:
        """Serenade's numeric literals are bound pairs (§1.4)."""
        return "pair"

    @property
    def log_mass(self) -> float:
        """The family's base mass (1 unless its pair's left literal carries less)."""
        return self.family.log_mass

    @property
    def lattice(self) -> PublicLattice:
        """The public lattice of the attribute."""
        return PublicLattice.of(self.family.attribute)

    def cells(self) -> ContinuousCells:
        """The column's cells over the lattice (cached on the column)."""
        return continuous_cells(self.family.column, self.lattice)

    def cell_weights(
        self, cells: ContinuousCells
    ) -> Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]:
        """c·Q of every cell pair from prefix sums of the |I| and |U| row masks (§7)."""
        terms = self.family.make.terms()
        i_prefix, u_prefix = cells.prefix(terms.i_rows), cells.prefix(terms.u_rows)

        def weights(lower: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
            i_rows = cells.selected(i_prefix, lower)
            u_rows = cells.selected(u_prefix, lower)
            return self._weights(terms, (i_rows, int(i_prefix[-1])), (u_rows, int(u_prefix[-1])))

        return weights

    def threshold_weights(self) -> ThresholdWeights:
        """c·Q of literals [lower ≤ A ≤ upper] from prefix sums of the |I| and |U| row masks
        along the column's value order (§7): two passes over the rows here, then two binary
        searches a proposal. The counts are those of :func:`numeric_rows` on the exact data
        (tests/dp/test_candidates.py)."""
        terms = self.family.make.terms()
        ordered = SortedValues.of(self.family.column)
        i_prefix, u_prefix = ordered.prefix(terms.i_rows), ordered.prefix(terms.u_rows)

        def weights(
            lower: npt.NDArray[np.float64], upper: npt.NDArray[np.float64]
        ) -> npt.NDArray[np.float64]:
            start, end = ordered.ranks(lower, upper)
            i_rows = SortedValues.counted(i_prefix, start, end)
            u_rows = SortedValues.counted(u_prefix, start, end)
            return self._weights(terms, (i_rows, int(i_prefix[-1])), (u_rows, int(u_prefix[-1])))

        return weights

    def log_weight(self, lower: float | None, upper: float | None) -> float:
        """c·Q of the candidate with the literal [lower ≤ A ≤ upper] (negated if the family
        is), weighed alone: one comparison pass over the column and two popcounts."""
        family = self.family
        rows = numeric_rows(family.column, lower, upper, family.negated)
        i, u = family.make.statistics(rows)
        return self.c * float(self.params.evaluate(i, u, self.n_rows))

    def _weights(
        self,
        terms: _Terms,
        i_rows: tuple[npt.NDArray[np.int64], int],
        u_rows: tuple[npt.NDArray[np.int64], int],
    ) -> npt.NDArray[np.float64]:
        """c·Q from the rows of the |I| and |U| masks that the literals' ranges select, each
        with the mask's present rows: a negated literal holds the present rows outside."""
        (i_inside, i_present), (u_inside, u_present) = i_rows, u_rows
        if self.family.negated:
            i_inside, u_inside = i_present - i_inside, u_present - u_inside
        q = self.params.evaluate(
            terms.i_constant + i_inside, terms.u_constant + u_inside, self.n_rows
        )
        return np.asarray(self.c * q, dtype=np.float64)

    def outcome(self, lower: float | None, upper: float | None) -> Outcome:
        """The redescription with the literal [lower ≤ A ≤ upper] (negated if the family is)
        at this position."""
        family = self.family
        literal = NumLiteral(
            attribute=family.attribute.name, lower=lower, upper=upper, negated=family.negated
        )
        return self.position, family.make.build(literal)


def rejection_proposals(c: float, draws: int) -> int:
    """Public cap on the rejection proposals of ``draws`` draws at coefficient c: Q ∈ [0, 1], so
    a proposal is accepted with probability ≥ e^(−c) (bound c, least c·Q 0), and the cap is
    exceeded with probability ≤ 10⁻⁹ (:func:`~dpmine_server.dp.candidates.
    rejection_proposal_cap`); 0 above c = 8, where continuous families are enumerated."""
    if c > REJECTION_MAX_EXPONENT:
        return 0
    return rejection_proposal_cap(draws, c)


#: The public work model of rejection proposals (seconds; services/timing.py prices with it,
#: times a calibration's factor), each term at least twice what was measured on the
#: development machine, quiet (2,000 to 10⁵ rows, 1 to 960 families, /tmp/mb-style loops over
#: the real kernels; bench/bench_budgets.py checks the resulting budgets). *Scanned*: each
#: proposal weighed alone, a comparison pass over the column's rows into a bitset, two
#: popcounts and Q: 70–80 µs + 0.45 ns a row. *Prepared*: each family's two row masks summed
#: along the column's value order once (0.1–0.2 ms + 10–25 ns a row), then proposals weighed
#: a batch at a time by binary searches (≤ 0.45 µs a proposal, and ≤ 135 µs per family
#: present in a batch).
SCANNED_PROPOSAL_SECONDS = 1.6e-4
SCANNED_PROPOSAL_ROW_SECONDS = 2.5e-9
PREPARED_FAMILY_SECONDS = 5e-4
PREPARED_FAMILY_ROW_SECONDS = 6e-8
PREPARED_PROPOSAL_SECONDS = 1e-6
PREPARED_BATCH_FAMILY_SECONDS = 3e-4


@dataclass(frozen=True, slots=True)
class RejectionPlan:
    """How one sampler's rejection proposals are weighed, from public values only: its number
    of continuous families, its proposal cap, its draws and the table's ``n_max`` (§7).

    Both ways weigh a proposal exactly (the same counts on the exact data,
    tests/dp/test_candidates.py), so the choice changes the time only, and it is made by
    comparing the two public work bounds: :meth:`scanned_seconds` (at most ``cap`` proposals,
    one at a time) and :meth:`prepared_seconds` (every family prepared, plus the batches'
    proposals: :func:`~dpmine_server.dp.mechanisms.batch_work`)."""

    families: int
    cap: int
    draws: int
    n_max: int

    def scanned_seconds(self) -> float:
        """Public bound on the scanned way: ``cap`` proposals, each a pass over the rows."""
        return self.cap * (SCANNED_PROPOSAL_SECONDS + SCANNED_PROPOSAL_ROW_SECONDS * self.n_max)

    def prepared_seconds(self) -> float:
        """Public bound on the prepared way: every family's passes, the proposals weighed in
        batches (at most 2·cap + 64·draws of them) and the cost of each family present in a
        batch (a batch of s proposals holds at most min(families, s) of them, so all batches
        hold at most min(families × batches, proposals weighed))."""
        if self.cap <= 0 or self.families <= 0:
            return 0.0
        return self._preparation_seconds() + self._batch_seconds()

    def _preparation_seconds(self) -> float:
        """Every family's passes over the rows."""
        return self.families * (PREPARED_FAMILY_SECONDS + PREPARED_FAMILY_ROW_SECONDS * self.n_max)

    def _batch_seconds(self) -> float:
        """The proposals weighed in batches and each family's share of every batch."""
        work = batch_work(self.draws, self.cap)
        batch_families = min(self.families * work.batches, work.proposals)
        return (
            work.proposals * PREPARED_PROPOSAL_SECONDS
            + batch_families * PREPARED_BATCH_FAMILY_SECONDS
        )

    @property
    def prepared(self) -> bool:
        """Whether the sampler prepares its families (the smaller public bound)."""
        return self.prepared_seconds() < self.scanned_seconds()

    def seconds(self) -> float:
        """Public bound on the proposals' work, the way the sampler weighs them."""
        return self.prepared_seconds() if self.prepared else self.scanned_seconds()


def joint_rejection_seconds(plans: Sequence[RejectionPlan], cap: int) -> float:
    """Public bound on the proposals' work of samplers that share one pool of ``cap``
    proposals (a batch's parts, :func:`~dpmine_server.dp.candidates.joint_proposal_cap`),
    each weighing them the way its own plan says: the prepared ones' family passes, their
    batches over all their draws, and ``cap`` scanned proposals if any part scans (the
    proposals counted in all are at most ``cap``, whoever makes them)."""
    prepared = [plan for plan in plans if plan.prepared]
    seconds = 0.0
    if prepared and cap > 0:
        batches = RejectionPlan(
            families=max(plan.families for plan in prepared),  # a batch is one part's
            cap=cap,
            draws=sum(plan.draws for plan in prepared),
            n_max=prepared[0].n_max,
        )
        seconds += sum(plan._preparation_seconds() for plan in prepared)
        seconds += batches._batch_seconds()
    if len(prepared) < len(plans):
        seconds += replace(plans[0], cap=cap).scanned_seconds()
    return seconds


def _proposal_cap(cap: int) -> int | ProposalPool:
    """This call's own cap on its rejection draws, or the batch's shared pool when the executor
    runs the call in one (only calls that sample by rejection, c ≤ 8, are run in one)."""
    pool = shared_pool()
    return pool if pool is not None and cap > 0 else cap


class _Draws:
    """The EM, weight μ·exp(c·Q), over the union of the groups' candidates (§2.3, §2.4),
    prepared once for ``draws`` independent draws.

    Continuous families are sampled by rejection from the base measure while c ≤ 8, at most
    :func:`rejection_proposals` proposals in all, then (and from the start above c = 8) by exact
    enumeration of their cell pairs; all exact, the cap depends on c and ``draws`` only
    (:class:`~dpmine_server.dp.candidates.CandidateSampler`). Inside a batch whose rejection
    draws are priced jointly (:func:`~dpmine_server.dp.candidates.joint_proposal_cap`), the
    executor's shared pool replaces the cap (while c ≤ 8: above, nothing is proposed)."""

    def __init__(
        self, groups: Sequence[tuple[int, _Candidates]], *, c: float, draws: int, n_max: int
    ) -> None:
        self._blocks = [(position, block) for position, group in groups for block in group.blocks]
        families = [
            _WeightedFamily(position, family, group.params, group.n_rows, c)
            for position, group in groups
            for family in group.families
        ]
        explicit = np.empty(sum(block.quality.size for _p, block in self._blocks))
        start = 0
        for _position, block in self._blocks:  # log μ + c·Q, written in place block by block
            part = explicit[start : start + block.quality.size].reshape(block.quality.shape)
            np.multiply(block.quality, c, out=part)
            part += block.log_mass
            start += block.quality.size
        cap = rejection_proposals(c, draws)
        # len(families) is the public extension_families / pair_families count (tests/
        # operations/test_serenade.py), so the plan is the one the budget prices.
        plan = RejectionPlan(families=len(families), cap=cap, draws=draws, n_max=n_max)
        self._sampler = CandidateSampler(
            explicit,
            families,
            log_weight_bound=c,
            proposal_cap=_proposal_cap(cap),
            prepared=plan.prepared,
            owned=True,  # written here block by block, read by no one else
        )

    def draw(self, rng: np.random.Generator) -> Outcome:
        """One exact draw."""
        kind, chosen = self._sampler.draw(rng)
        if kind == "family":
            assert not isinstance(chosen, int)
            return chosen
        assert isinstance(chosen, int)
        return _block_choice(self._blocks, chosen)


def _block_choice(blocks: Sequence[tuple[int, _Block]], index: int) -> Outcome:
    for position, block in blocks:
        if index < block.quality.size:
            return position, block.outcomes[index]
        index -= block.quality.size
    raise IndexError("candidate index outside the blocks")


def _extended(red: Redescription, side: Side, op: Op, literal: AnyLiteral) -> Redescription:
    if side == "left":
        return Redescription(left=extend_query(red.left, op, literal), right=red.right)
    return Redescription(left=red.left, right=extend_query(red.right, op, literal))


# -- extension candidates (§2.2, §2.4) --------------------------------------------------------


def _extension_candidates(
    store: ColumnStore,
    red: Redescription,
    *,
    rules: ExtensionRules,
    mode: ThresholdMode,
    params: QualityParams,
    resources: ExtensionResources,
) -> _Candidates:
    """C(q_L, q_R) of §2.2: the redescription itself and every allowed one-literal extension
    (the sides' banks and grids from the call's ``resources``)."""
    metadata = store.metadata
    sides = {
        "left": parse_side(red.left, side="left"),
        "right": parse_side(red.right, side="right"),
    }
    rows = {"left": store.evaluate(red.left), "right": store.evaluate(red.right)}
    candidates = _Candidates(params, store.all_rows().count())
    both, either = rows["left"] & rows["right"], rows["left"] | rows["right"]
    candidates.add(0.0, both.count(), either.count(), [red])
    polarities = (False, True) if rules.negations else (False,)
    pairs: tuple[tuple[Side, Side], ...] = (("left", "right"), ("right", "left"))
    # Row classes' interval counts per attribute, shared by both operators and polarities.
    classes: dict[str, npt.NDArray[np.int64]] = {}
    for side, other_side in pairs:
        mine, other = sides[side], sides[other_side]
        if len(mine.literals) >= rules.max_literals:
            continue
        used = mine.attributes | (other.attributes if metadata.kind != "views" else frozenset())
        view = _view_attributes(metadata, side, rules.columns)
        bank = resources.banks[side]
        keep = np.fromiter((a not in used for a in bank.attributes), dtype=bool)
        for op in sorted(rules.operators):
            if op == "or" and rules.single_side_or and other.has_or:
                continue
            maker = _ExtendMaker(red, side, op, rows[side], rows[other_side])
            terms = maker.class_terms()
            _add_discrete_extensions(candidates, maker, bank, keep)
            for name in _numeric_names(metadata, [n for n in view if n not in used]):
                attribute, column = _numeric(store, name)
                for negated in polarities:
                    if mode == "continuous":
                        candidates.families.append(_Family(column, attribute, negated, maker))
                    else:
                        grid = resources.grids[name]
                        counts = classes.get(name)
                        if counts is None:
                            counts = classes[name] = class_interval_counts(
                                grid, rows[side], rows[other_side]
                            )
                        literals = grid.literals[negated]
                        by_class = counts[int(negated)]
                        _add_grid_extensions(candidates, (maker, terms), literals, by_class)
    return candidates


def _cached_extension_candidates(
    store: ColumnStore,
    red_json: str,
    rules: ExtensionRules,
    mode: ThresholdMode,
    params: QualityParams,
    *,
    resources: Callable[[], ExtensionResources],
) -> _Candidates:
    """The candidate set of a redescription, cached on the store (a round of SerenadeES
    rebuilds only the changed position's); ``resources()`` gives the call's banks and grids
    when it must be built."""

    key = extension_cache_key(red_json, rules, mode, params)

    def build() -> _Candidates:
        red = Redescription.model_validate_json(red_json)
        return _extension_candidates(
            store, red, rules=rules, mode=mode, params=params, resources=resources()
        )

    def cached() -> _Candidates:
        return store.derived.get_or_build(key, build, nbytes=_Candidates.nbytes)

    ticket = active_ticket(store)
    if ticket is None:
        return cached()
    value = ticket.value(key, cached)
    assert isinstance(value, _Candidates)
    return value


def extension_cache_key(
    red_json: str, rules: ExtensionRules, mode: ThresholdMode, params: QualityParams
) -> tuple[str, str, ExtensionRules, ThresholdMode, QualityParams]:
    """The cache key of a redescription's candidate set: public values only (the store it is
    cached on stands for the dataset version)."""
    return ("serenade.extension_candidates", red_json, rules, mode, params)


def extension_key_text(
    red_json: str, rules: ExtensionRules, mode: ThresholdMode, params: QualityParams
) -> str:
    """A canonical text of :func:`extension_cache_key` (sorted JSON of its public parts)."""
    return canonical_text(
        {
            "redescription": red_json,
            "operators": sorted(rules.operators),
            "negations": rules.negations,
            "max_literals": rules.max_literals,
            "single_side_or": rules.single_side_or,
            "columns": None if rules.columns is None else sorted(rules.columns),
            "mode": mode,
            "params": repr(params),
        }
    )


def _maker_literals(metadata: DatasetMetadata, rules: ExtensionRules, mode: ThresholdMode) -> int:
    """Public bound on the explicit candidates one (side, operator) maker adds: every discrete
    literal of every attribute (negated too when allowed) and, in grid mode, every grid
    interval of every numeric attribute (both polarities when allowed); the attributes of both
    views are counted, an upper bound for either side."""
    polarities = 2 if rules.negations else 1
    literals = 0
    for attribute in metadata.attributes:
        if isinstance(attribute, NumericAttribute):
            if mode == "grid":
                literals += polarities * len(grid_intervals(grid_points(attribute)))
            continue
        categories = getattr(attribute, "categories", None)
        literals += polarities * (len(categories) if categories else 1)
    return literals


def extension_public_candidates(
    metadata: DatasetMetadata, rules: ExtensionRules, mode: ThresholdMode
) -> int:
    """Public bound on the explicit candidates of one redescription's set (§2.2): itself, and
    per (side, operator) maker :func:`_maker_literals`. Continuous families (c ≤ 8) are
    sampled by rejection and priced by their proposals, at c > 8 by their enumerated cells."""
    return 1 + 2 * len(rules.operators) * _maker_literals(metadata, rules, mode)


def extension_public_size(
    metadata: DatasetMetadata, rules: ExtensionRules, mode: ThresholdMode
) -> int:
    """Public size estimate (bytes) of one candidate set (:meth:`_Candidates.nbytes` measures
    the real one, which the model never reads): per (side, operator) maker up to four row
    bitsets of ``n_max`` bits, and 64 bytes per candidate (its mass, its Q, its share of the
    outcome list). Public: metadata and options only."""
    bitset = 8 * (metadata.n_max // 64 + 1)
    makers = 2 * len(rules.operators)
    return 4096 + makers * 4 * bitset + 64 * extension_public_candidates(metadata, rules, mode)


def _add_discrete_extensions(
    candidates: _Candidates,
    maker: _ExtendMaker,
    bank: _DiscreteBank,
    keep: npt.NDArray[np.bool_],
) -> None:
    if not keep.any():
        return
    new = _combine(maker.support.words[None, :], bank.words[keep], maker.op)
    i, u = _pair_stats(new, maker.other.words)
    literals = [lit for lit, k in zip(bank.literals, keep, strict=True) if k]
    candidates.add(0.0, i, u, _LazyOutcomes(maker, literals))


def _add_grid_extensions(
    candidates: _Candidates,
    extension: tuple[_ExtendMaker, _ClassTerms],
    literals: GridLiterals,
    classes: npt.NDArray[np.int64],
) -> None:
    """The extensions of a maker by every grid interval (``literals``) of one numeric
    attribute at one polarity, from the maker's :meth:`_ExtendMaker.class_terms` and the
    intervals' counts per row class of (X, Y) (``classes``, [4, intervals]:
    :func:`~dpmine_server.operations.serenade_thresholds.class_interval_counts`)."""
    maker, terms = extension
    i = terms.i_constant + classes[terms.i_class]
    u = terms.u_constant + classes[terms.u_class]
    candidates.add(-math.log(len(literals)), i, u, _LazyOutcomes(maker, literals))


class _LazyOutcomes:
    """Extensions of one redescription by each of many literals, built on access."""

    def __init__(self, maker: _ExtendMaker, literals: Sequence[AnyLiteral]) -> None:
        self.maker = maker
        self._literals = literals

    def __len__(self) -> int:
        return len(self._literals)

    def __getitem__(self, index: int) -> Redescription:
        maker = self.maker
        return _extended(maker.base, maker.side, maker.op, self._literals[index])


# -- initial pairs (§2.3) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _LeftGridBlock:
    """The left literals ``start`` … ``start`` + (intervals) − 1 of initial pairs: the grid
    intervals of one left numeric attribute at one polarity, in the grid's order."""

    start: int
    attribute: str
    negated: bool
    grid: Grid


@dataclass(frozen=True, slots=True)
class _LeftLiterals:
    """Left literals of initial pairs: the discrete ones first, then the grid blocks."""

    literals: list[AnyLiteral]
    masses: npt.NDArray[np.float64]
    rows: list[Bitset]
    discrete: int
    blocks: list[_LeftGridBlock]


def _left_pair_literals(
    store: ColumnStore, rules: ExtensionRules, *, with_numeric_rows: bool
) -> _LeftLiterals:
    """Left literals of initial pairs, their log base masses and supports: discrete literals of
    the left view (one unit each) and, if the left view has numeric attributes, their public-grid
    intervals (one unit per attribute) — §2.3 [REC] for two numeric views. Only the attributes
    of ``rules.columns`` when given. The grid intervals' supports (a pass over the rows each)
    only ``with_numeric_rows`` (:func:`_left_numeric_rows_needed`); otherwise ``rows`` holds
    the discrete literals' alone."""
    metadata = store.metadata
    negations = rules.negations
    names = _view_attributes(metadata, "left", rules.columns)
    bank = _bank(store, tuple(_discrete_names(metadata, names)), negations)
    literals: list[AnyLiteral] = list(bank.literals)
    masses = [0.0] * len(literals)
    rows = [store.literal_bitset(literal) for literal in literals]
    discrete = len(literals)
    blocks: list[_LeftGridBlock] = []
    polarities = (False, True) if negations else (False,)
    for name in _numeric_names(metadata, names):
        attribute, column = _numeric(store, name)
        grid = threshold_grid(column, attribute)
        for negated in polarities:
            blocks.append(_LeftGridBlock(len(literals), name, negated, grid))
            for literal in grid.literals[negated]:
                literals.append(literal)
                masses.append(-math.log(len(grid.intervals)))
                if with_numeric_rows:
                    rows.append(numeric_rows(column, literal.lower, literal.upper, negated))
    return _LeftLiterals(literals, np.asarray(masses, dtype=np.float64), rows, discrete, blocks)


def check_pair_space(metadata: DatasetMetadata, columns: frozenset[str] | None = None) -> None:
    """ValueError unless some (left, right) attribute pair exists among ``columns`` (None: all
    attributes), so that §2.3's candidate set is not empty whatever the data (public metadata
    and request only; checked before the charge). Every attribute has at least one literal (a
    Boolean, a category, grid intervals), so a pair of distinct attributes, one per side, is
    enough."""
    lefts = _view_attributes(metadata, "left", columns)
    rights = _view_attributes(metadata, "right", columns)
    if columns is not None and metadata.kind == "views":
        sides: tuple[tuple[Side, list[str]], ...] = (("left", lefts), ("right", rights))
        for side, kept in sides:
            if not kept:
                raise ValueError(
                    f"options.columns leaves the {side} view no attribute; allow at least one "
                    f"of {_view_attributes(metadata, side)}"
                )
    if not any(left != right for left in lefts for right in rights):
        if columns is None:
            raise ValueError(
                "initial pairs need two different attributes, one per query; this dataset "
                f"declares only {sorted(set(lefts) | set(rights))}"
            )
        raise ValueError(
            "initial pairs need two different attributes, one per query; options.columns "
            f"allows only {sorted(set(lefts) | set(rights))}: allow at least one more"
        )


# -- public bounds on the enumeration (DESIGN.md contract item 7) ----------------------------


def enumerated_cells(families: int, draws: int, n_max: int) -> int:
    """Cell pairs evaluated when continuous families are enumerated (c > 8): every family's
    total once, and the chosen family again for each draw. A family of a column with V distinct
    present values has (V + 2)² cell pairs (lower cells 0 … V+1 × upper cells 0 … V+1), and
    V ≤ n_max: a public bound whatever the data."""
    return (families + draws) * (n_max + 2) ** 2


def extension_families(
    metadata: DatasetMetadata, collection: Sequence[Redescription], rules: ExtensionRules
) -> int:
    """The number of continuous threshold families of :func:`extend_one` over ``collection``
    (the numeric attributes :func:`_extension_candidates` extends with, per side, operator and
    polarity): public, from the metadata and the public queries."""
    polarities = 2 if rules.negations else 1
    pairs: tuple[tuple[Side, Side], ...] = (("left", "right"), ("right", "left"))
    # Each side's numeric attributes, found once: a position then only removes its own.
    numeric_of: dict[Side, frozenset[str]] = {
        side: frozenset(_numeric_names(metadata, _view_attributes(metadata, side, rules.columns)))
        for side in ("left", "right")
    }
    families = 0
    for red in collection:
        sides = {
            "left": parse_side(red.left, side="left"),
            "right": parse_side(red.right, side="right"),
        }
        for side, other_side in pairs:
            mine, other = sides[side], sides[other_side]
            if len(mine.literals) >= rules.max_literals:
                continue
            used = mine.attributes | (other.attributes if metadata.kind != "views" else frozenset())
            numeric = len(numeric_of[side] - used)
            for op in rules.operators:
                if op == "or" and rules.single_side_or and other.has_or:
                    continue
                families += numeric * polarities
    return families


def _pair_left_attributes(metadata: DatasetMetadata, rules: ExtensionRules) -> list[str]:
    """The attribute of every left literal of :func:`initial_pairs` (§2.3): the discrete ones
    and the public grid intervals of the left view's numeric attributes (per polarity). Public,
    from the metadata alone."""
    polarities = 2 if rules.negations else 1
    lefts = _view_attributes(metadata, "left", rules.columns)
    left_attributes = [
        literal.attribute
        for literal in _discrete_literals(
            metadata, _discrete_names(metadata, lefts), negations=rules.negations
        )
    ]
    for name in _numeric_names(metadata, lefts):
        attribute = metadata.attribute(name)
        assert isinstance(attribute, NumericAttribute)
        left_attributes += [name] * len(grid_intervals(grid_points(attribute))) * polarities
    return left_attributes


def pair_families(metadata: DatasetMetadata, rules: ExtensionRules) -> int:
    """The number of continuous threshold families of :func:`initial_pairs`: one per (left
    literal, right numeric attribute, polarity), the left literals being the discrete ones and
    the public grid intervals of the left view (§2.3); public, from the metadata alone."""
    polarities = 2 if rules.negations else 1
    left_attributes = _pair_left_attributes(metadata, rules)
    same_table = metadata.kind != "views"
    families = 0
    for name in _numeric_names(metadata, _view_attributes(metadata, "right", rules.columns)):
        kept = sum(1 for left in left_attributes if not (same_table and left == name))
        families += kept * polarities
    return families


def _left_numeric_rows_needed(right_discrete: bool, mode: ThresholdMode) -> bool:
    """Whether initial pairs need the left grid intervals' supports: to pair them with right
    discrete literals (popcounts), or as continuous families' left literals. Grid mode with
    numeric right attributes alone counts them from the grids (:func:`_left_cell_counts`)."""
    return right_discrete or mode != "grid"


@dataclass(frozen=True, slots=True)
class GridPairWork:
    """Public bounds on the work of grid-mode initial pairs (:func:`_add_grid_pairs`):
    ``products``, the multiply-adds of the discrete left literals' per-cell counts (n_max ·
    literals · cells per right numeric attribute, one matrix product each); ``histogram_rows``,
    the rows of the joint histograms of the left numeric attributes' grids (n_max per left
    attribute, polarity and right attribute); and ``candidates``, the (left literal, grid
    interval) pairs, each with its Q and base mass (a histogram's interval sums, intervals ×
    cells, are fewer than its candidates). What the pairs with right discrete literals and
    the set-up add (:func:`_pair_candidates`): ``matrix_rows``, the discrete left literals'
    rows turned into the products' float matrix (n_max per literal, once); ``interval_rows``,
    the left grid intervals' supports, a pass over the rows each, built only to pair them with
    right discrete literals; ``pair_words``, the 64-bit words of the left supports that each
    right discrete literal copies, intersects, joins and counts; ``discrete_pairs``, those
    (left literal, right discrete literal) candidates."""

    products: int
    histogram_rows: int
    candidates: int
    matrix_rows: int = 0
    interval_rows: int = 0
    pair_words: int = 0
    discrete_pairs: int = 0


def grid_pair_work(metadata: DatasetMetadata, rules: ExtensionRules) -> GridPairWork:
    """:class:`GridPairWork` of grid-mode initial pairs. Public: the metadata and the
    options."""
    polarities = 2 if rules.negations else 1
    lefts = _view_attributes(metadata, "left", rules.columns)
    discrete = [
        literal.attribute
        for literal in _discrete_literals(
            metadata, _discrete_names(metadata, lefts), negations=rules.negations
        )
    ]
    numeric = [
        (name, len(grid_intervals(grid_points(_numeric_attribute(metadata, name)))))
        for name in _numeric_names(metadata, lefts)
    ]
    same_table = metadata.kind != "views"
    products = histogram_rows = candidates = 0
    for name in _numeric_names(metadata, _view_attributes(metadata, "right", rules.columns)):
        points = grid_points(_numeric_attribute(metadata, name))
        cells = 2 * len(points) + 1
        intervals = len(grid_intervals(points)) * polarities
        kept_discrete = sum(1 for left in discrete if not (same_table and left == name))
        kept_numeric = [count for left, count in numeric if not (same_table and left == name)]
        products += kept_discrete * metadata.n_max * cells
        histogram_rows += len(kept_numeric) * polarities * metadata.n_max
        candidates += (kept_discrete + sum(kept_numeric) * polarities) * intervals
    rights = _view_attributes(metadata, "right", rules.columns)
    right_discrete = len(
        _discrete_literals(metadata, _discrete_names(metadata, rights), negations=rules.negations)
    )
    right_numeric = bool(_numeric_names(metadata, rights))
    intervals = sum(count for _name, count in numeric) * polarities
    interval_rows = intervals * metadata.n_max if right_discrete else 0
    paired = len(discrete) + (intervals if right_discrete else 0)
    return GridPairWork(
        products,
        histogram_rows,
        candidates,
        matrix_rows=len(discrete) * metadata.n_max if right_numeric else 0,
        interval_rows=interval_rows,
        pair_words=paired * right_discrete * (metadata.n_max // 64 + 1),
        discrete_pairs=paired * right_discrete,
    )


def _numeric_attribute(metadata: DatasetMetadata, name: str) -> NumericAttribute:
    attribute = metadata.attribute(name)
    assert isinstance(attribute, NumericAttribute)
    return attribute


def _pair_candidates(
    store: ColumnStore, *, rules: ExtensionRules, mode: ThresholdMode, params: QualityParams
) -> _Candidates:
    """Every (left literal, right literal) pair of §2.3; numeric right literals as families."""
    metadata = store.metadata
    candidates = _Candidates(params, store.all_rows().count())
    right_names = _view_attributes(metadata, "right", rules.columns)
    bank = _bank(store, tuple(_discrete_names(metadata, right_names)), rules.negations)
    with_numeric_rows = _left_numeric_rows_needed(bool(bank.literals), mode)
    lefts = _left_pair_literals(store, rules, with_numeric_rows=with_numeric_rows)
    left_literals, left_masses, left_rows = lefts.literals, lefts.masses, lefts.rows
    if not left_literals:
        raise ValueError("the left view has no attribute that can start an initial pair")
    same_table = metadata.kind != "views"
    left_attributes = np.asarray([literal.attribute for literal in left_literals])
    left_words = np.stack([rows.words for rows in left_rows]) if bank.literals else None
    for j, literal in enumerate(bank.literals):
        assert left_words is not None
        allowed = ~(same_table & (left_attributes == literal.attribute))
        i, u = _pair_stats(left_words[allowed], bank.words[j])
        kept = [left for left, ok in zip(left_literals, allowed, strict=True) if ok]
        candidates.add(left_masses[allowed], i, u, _PairOutcomes(kept, literal))
    polarities = (False, True) if rules.negations else (False,)
    left_matrix: npt.NDArray[np.float32] | None = None
    for name in _numeric_names(metadata, right_names):
        attribute, column = _numeric(store, name)
        if mode == "grid":
            if left_matrix is None:
                discrete_rows = [r.to_bool_array() for r in left_rows[: lefts.discrete]]
                left_matrix = (
                    np.stack(discrete_rows).astype(np.float32)
                    if discrete_rows
                    else np.zeros((0, store.n_rows), dtype=np.float32)
                )
            _add_grid_pairs(
                candidates,
                (lefts, left_matrix),
                (attribute, column),
                negations=rules.negations,
                same_table=same_table,
            )
            continue
        for index, left in enumerate(left_literals):
            if same_table and left.attribute == name:
                continue
            rows = left_rows[index]
            for negated in polarities:
                maker = _PairMaker(left, rows)
                family = _Family(column, attribute, negated, maker, float(left_masses[index]))
                candidates.families.append(family)
    return candidates


def _add_grid_pairs(
    candidates: _Candidates,
    lefts: tuple[_LeftLiterals, npt.NDArray[np.float32]],
    numeric: tuple[NumericAttribute, NumericColumn],
    *,
    negations: bool,
    same_table: bool,
) -> None:
    """Every (left literal, grid interval of one right numeric attribute) pair, from each left
    literal's rows per grid cell (:func:`_left_cell_counts`), intervals by prefix sums."""
    left, left_matrix = lefts
    literals, masses = left.literals, left.masses
    attribute, column = numeric
    keep = [
        k for k, lit in enumerate(literals) if not (same_table and lit.attribute == attribute.name)
    ]
    if not keep:
        return
    grid = threshold_grid(column, attribute)
    skip = attribute.name if same_table else None
    per_cell_all, sizes_all = _left_cell_counts(left, left_matrix, grid, skip=skip)
    per_cell, sizes = per_cell_all[keep], sizes_all[keep]  # [n_left, n_cells], [n_left]
    prefix = np.concatenate([np.zeros((len(keep), 1), dtype=np.int64), np.cumsum(per_cell, 1)], 1)
    kernel = candidates.params.kernel_quality(candidates.n_rows)
    for negated in (False, True) if negations else (False,):
        q = pair_interval_quality(grid, prefix, sizes, negated=negated, quality=kernel)
        right = grid.literals[negated]
        log_mass = masses[keep][:, None] - math.log(len(right))
        outcomes = _GridPairOutcomes([literals[k] for k in keep], right)
        candidates.add_evaluated(np.broadcast_to(log_mass, q.shape), q, outcomes)


def _left_cell_counts(
    left: _LeftLiterals,
    left_matrix: npt.NDArray[np.float32],
    right: Grid,
    *,
    skip: str | None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For every left literal: its rows in each cell of the right grid, [n_left, cells], and
    its size |rows|, [n_left] (rows of a block on attribute ``skip`` are left at 0: a single
    table never pairs an attribute with itself).

    Discrete literals by one matrix product of their rows with the cells' indicator matrix
    (n_max · literals · cells multiply-adds). A left numeric attribute's grid intervals share
    one joint histogram of (left cell, right cell) over the rows, O(rows): an interval's
    rows in a right cell are the sum of its left cells' counts (a prefix sum over left
    cells), and a negated interval holds the attribute's present rows outside it, so the
    counts are exactly those of the literals' row sets (tests/operations/test_serenade.py
    checks them against the product)."""
    n_cells = right.n_cells
    present = right.cells >= 0
    per_cell = np.zeros((len(left.literals), n_cells), dtype=np.int64)
    sizes = np.zeros(len(left.literals), dtype=np.int64)
    if left.discrete:
        onehot = np.zeros((right.cells.size, n_cells), dtype=np.float32)
        onehot[np.flatnonzero(present), right.cells[present]] = 1.0
        per_cell[: left.discrete] = np.rint(left_matrix @ onehot).astype(np.int64)
        missing = np.rint(left_matrix @ ~present).astype(np.int64)
        sizes[: left.discrete] = per_cell[: left.discrete].sum(axis=1) + missing
    for block in left.blocks:
        if block.attribute == skip:
            continue
        cells = block.grid.cells
        both = (cells >= 0) & present
        joint = np.bincount(
            cells[both] * n_cells + right.cells[both], minlength=block.grid.n_cells * n_cells
        ).reshape(block.grid.n_cells, n_cells)
        joint_prefix = np.concatenate([np.zeros((1, n_cells), dtype=np.int64), np.cumsum(joint, 0)])
        inside = joint_prefix[block.grid.high_cells + 1] - joint_prefix[block.grid.low_cells]
        alone = np.bincount(cells[(cells >= 0) & ~present], minlength=block.grid.n_cells)
        alone_prefix = np.concatenate([[0], np.cumsum(alone)])
        alone_inside = alone_prefix[block.grid.high_cells + 1] - alone_prefix[block.grid.low_cells]
        if block.negated:
            inside = joint_prefix[-1][None, :] - inside
            alone_inside = alone_prefix[-1] - alone_inside
        rows = slice(block.start, block.start + inside.shape[0])
        per_cell[rows] = inside
        sizes[rows] = inside.sum(axis=1) + alone_inside
    return per_cell, sizes


class _GridPairOutcomes:
    """All (left literal, right grid literal) pairs in row-major order, built on access."""

    def __init__(self, lefts: Sequence[AnyLiteral], rights: Sequence[AnyLiteral]) -> None:
        self._lefts = lefts
        self._rights = rights

    def __len__(self) -> int:
        return len(self._lefts) * len(self._rights)

    def __getitem__(self, index: int) -> Redescription:
        row, column = divmod(index, len(self._rights))
        return Redescription(left=self._lefts[row], right=self._rights[column])


class _PairOutcomes:
    """Pairs of many left literals with one right literal, built on access."""

    def __init__(self, lefts: Sequence[AnyLiteral], right: AnyLiteral) -> None:
        self._lefts = lefts
        self._right = right

    def __len__(self) -> int:
        return len(self._lefts)

    def __getitem__(self, index: int) -> Redescription:
        return Redescription(left=self._lefts[index], right=self._right)


# -- the two kernels --------------------------------------------------------------------------


def initial_pairs(
    store: ColumnStore,
    *,
    count: int,
    epsilon: float,
    params: QualityParams,
    rules: ExtensionRules,
    mode: ThresholdMode,
    rng: np.random.Generator,
) -> list[Redescription]:
    """``count`` independent EM draws over all literal pairs, ε/count each; ε-DP (§2.3).

    Weight μ·exp(c·Q), c = (ε/count)/(Δ_up + Δ_down) (range-calibrated, §0.8) or
    (ε/count)/(2Δ), with Q's public sensitivities (from N_max); draws with replacement, so
    duplicates are possible. Numeric bounds are drawn inside their cells.
    """
    c = params.coefficient(epsilon / count)
    candidates = _pair_candidates(store, rules=rules, mode=mode, params=params)
    draws = _Draws([(0, candidates)], c=c, draws=count, n_max=store.metadata.n_max)
    return [draws.draw(rng)[1] for _ in range(count)]


def extend_one(
    store: ColumnStore,
    collection: Sequence[Redescription],
    *,
    epsilon: float,
    params: QualityParams,
    rules: ExtensionRules,
    mode: ThresholdMode,
    rng: np.random.Generator,
) -> Outcome:
    """One EM draw over the union of the candidate sets of every redescription of the
    collection (§2.4; CS mode is a collection of one); ε-DP for Q's sensitivities (c from
    :meth:`QualityParams.coefficient`: ε/(Δ_up + Δ_down) or ε/(2Δ), §0.8).

    Returns (position, redescription): the chosen candidate, possibly the position's own
    unextended redescription. Candidate sets are cached per redescription (they depend only on
    it, the data version and public options), so a round costs only the changed position.
    """
    c = params.coefficient(epsilon)
    # Priced against the public cache model, the call always asks for its resources, so that
    # a shown call leaves them in the model whether or not it built a position; otherwise
    # they are built only for a position that needs them.
    resources = _LazyResources(store, rules, mode)
    if active_ticket(store) is not None:
        resources()
    groups = [
        (
            position,
            _cached_extension_candidates(
                store, red.model_dump_json(), rules, mode, params, resources=resources
            ),
        )
        for position, red in enumerate(collection)
    ]
    return _Draws(groups, c=c, draws=1, n_max=store.metadata.n_max).draw(rng)
