"""Tree-based DP redescription miners ``AltExpM``, ``AltMCMC`` and ``MCMCTreePair``
(ALGORITHMS.md §3.7). Orchestration only: every data access is a charged server call
(``tree.expmech``, ``tree.mcmc``, ``tree.pair_mcmc``, ``tree.leaf_counts``); the redescriptions
are extracted from the released noisy leaf counts on the client (:mod:`dpmine.treereds`, free).

* AltExpM / AltMCMC: ε_unit = ε / (InTr·(2·RMIter + 1)). InTr times: draw an attribute a
  uniformly from both views (data-independent), grow a tree on the other view with target a,
  then RMIter times grow a tree on the other view with the previous tree's leaves as target and
  release the leaf counts of the pair. "standard" = (InTr 1, RMIter k), "stable" = (k, 1).
* MCMCTreePair: ε_iter = ε / InTr; per iteration a random attribute a, a tree pair sampled with
  ω·ε_iter, and the pair's leaf counts with (1 − ω)·ε_iter.

Presets (issue #21). ``preset="paper"`` (the default) keeps the split above with depth 3,
RMIter 4 / InTr 4, min_support 10 and max_clauses 3. ``preset="auto"`` buys a noisy row count
n̂ (2 % of ε, at most 0.05) and chooses depth, rounds and the ε of tree draws and leaf-count
releases from public values and n̂ (:mod:`dpmine.miners.tree_auto`); given parameters win;
``plan()`` prices at n_max (its settings are ``provisional``) and reports the choice.

The MCMC samplers (AltMCMC's trees, MCMCTreePair's pairs) run ``iterations`` steps, at least
the server's public minimum :data:`~dpmine.wire.MIN_TREE_ITERATIONS` (a shorter chain's release
is far from DP; ALGORITHMS.md §6 #16), from random trees the server draws.

The attribute draws use the miner's own generator (``seed``): they are public choices. The
iterations (one per drawn attribute) share no released value, so up to ``concurrent_iterations``
of them run their calls at the same time; their releases are then read in the order of the
draws, so the results and receipts are those of the sequential run.

Noise-aware significance (issue #21, :mod:`dpmine.significance`). The four cells of a result
are sums of released cells over a rectangle of (left cells) × (right cells)
(:func:`dpmine.treereds.table_sums`). Each of the run's R leaf-count releases gets the miss
α/R, split by a union bound over every rectangle the cells of a query can sum, at most
4·L_left·L_right with L the active cell sets a query can have, and over the three signed sums
of each of the L_left·L_right pairs of queries that cut the box's corners (D = E10 + E01,
E11 − D and E11 + E00 − D, :class:`dpmine.intervals.CellBox`)
(:func:`dpmine.treereds.query_cell_sets`): all those sums are in their ranges together with
probability ≥ 1 − α/R, so the boxes of every query the extraction could pick from that release
hold, and those of the whole run with probability ≥ 1 − α. m counts the candidates whose
statistics the extractions computed. ``results_`` are the results that pass, ``all_results_``
every result. With ``leaf_release="paper"`` the boxes sum the intersection matrix only (scale
2/ε): they hold the statistics of the rows that reach a leaf of both trees, which are the
printed queries' only when no row misses a value on the trees' paths.
"""

from __future__ import annotations

import json
import math
import threading
from abc import abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Literal, Self, TypedDict, TypeVar, Unpack, get_args

import numpy as np

from dpmine.canonical import redescription_key, simplify_conjunction
from dpmine.connection import DatasetHandle
from dpmine.errors import ParameterError
from dpmine.frames import PathLike, as_path, write_csv
from dpmine.intervals import CellBox, StatisticIntervals, box_intervals, excess_of, sum_box
from dpmine.miners._base import (
    GENERAL_HINTS,
    NotMinedError,
    Plan,
    SignificantMiner,
    _Spent,
    _Stopped,
)
from dpmine.miners._rho import (
    GENERIC_RHO,
    PURE,
    RHO_MARGIN,
    ZCDP,
    Composition,
    check_budget,
    composition_for,
    epsilon_for_rho,
)
from dpmine.miners.tree_auto import (
    AUTO_DEPTHS,
    AUTO_MAX_ROUNDS,
    LayeredAuto,
    TreeAuto,
    TreeKind,
    auto_tree,
    tree_cost,
)
from dpmine.miners.tree_auto import count_epsilon as auto_count_epsilon
from dpmine.queries import format_query
from dpmine.significance import ALPHA, Check, verdict_fields
from dpmine.treereds import (
    DEFAULT_MAX_CLAUSES,
    DEFAULT_MAX_JACCARD_ERROR,
    DEFAULT_MAX_SUPPORT_FRACTION,
    DEFAULT_MIN_JACCARD,
    DEFAULT_P_MAX,
    ExtractOptions,
    LeafPath,
    NoisyStatistics,
    TreeRedescription,
    active_cells,
    examine_partition,
    examine_release,
    jaccard_standard_error,
    prune_by_precision,
    query_cell_sets,
    render_redescription,
    save_support_jaccard_plot,
    table_sums,
)
from dpmine.wire import (
    DEFAULT_TREE_ITERATIONS,
    MIN_TREE_ITERATIONS,
    AnyLiteral,
    AttributeTarget,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    CountNoiseKind,
    DatasetMetadata,
    DecisionTree,
    LeafCountsRelease,
    LeafCountsRequest,
    LeafCountsResponse,
    NoisyCountRequest,
    NumericAttribute,
    NumLiteral,
    OperationRequest,
    PlannedCall,
    Receipt,
    Redescription,
    TreeExpMechRequest,
    TreeExpMechResponse,
    TreeMCMCRequest,
    TreeMCMCResponse,
    TreePairMCMCRequest,
    TreePairScore,
    TreeSampler,
    TreeSplit,
    TreeTarget,
    TreeTargetSpec,
    View,
    WireModel,
    operation_for,
)
from dpmine.wire.items import usable_columns
from dpmine.wire.operations import (
    COUNT_NOISY,
    TREE_EXPMECH,
    TREE_LEAF_COUNTS,
    TREE_MCMC,
    TREE_PAIR_MCMC,
)

__all__ = [
    "SUMS_PER_QUERY_PAIR",
    "AltExpM",
    "AltMCMC",
    "LeafNoise",
    "MCMCTreePair",
    "MinedTreeRedescription",
    "TreeDrawSignal",
    "TreeMinerParameters",
    "TreePlan",
    "TreePreset",
    "TreeSettings",
    "leaf_paths",
    "release_miss",
    "released_noise",
    "result_table",
    "simplified_leaf_paths",
    "tree_record",
]

#: Default depth: 3 split levels, the reference's maxTreeDepth = 4 (§3.1, §3.8).
DEFAULT_DEPTH = 3
#: Default minimum noisy support for mammals-sized data (§3.8: 10 for NPAS and MAMMAL).
DEFAULT_MIN_SUPPORT = 10.0
#: Iterations whose calls run at the same time. Each call's answer is held by the server's
#: release padding (a deadline from public values), so overlapping independent iterations
#: shortens a run without changing any release.
DEFAULT_CONCURRENT_ITERATIONS = 4

#: ``"paper"``: the paper's settings (§3.7); ``"auto"``: :mod:`dpmine.miners.tree_auto`.
TreePreset = Literal["auto", "paper"]
_NANO = 10**9
#: What starts one iteration: a drawn attribute, or the layered miner's seed.
SeedT = TypeVar("SeedT")
AnswerT = TypeVar("AnswerT", bound=WireModel)


@dataclass(frozen=True)
class TreeSettings:
    """What a run uses once the preset has filled in what was not given: depth, rounds (leaf-count
    releases per drawn attribute for AltExpM/AltMCMC, iterations for MCMCTreePair), ε per tree
    draw and per leaf-count release, min_support, max_clauses, and under ``auto`` the row
    count's ε and the rule's choice. ``provisional``: chosen at the public n_max for pricing;
    the run chooses again at its noisy n̂ (same total ε, the calls may differ)."""

    preset: TreePreset
    depth: int
    rounds: int
    tree_epsilon: float
    leaf_epsilon: float
    min_support: float
    max_clauses: int
    count_epsilon: float | None = None
    auto: TreeAuto | LayeredAuto | None = None
    provisional: bool = False

    def describe(self) -> str:
        """One line for the plan report."""
        if self.auto is None:
            return (
                f"preset paper: depth {self.depth}, {self.rounds} round(s), "
                f"ε {self.tree_epsilon:.4g} per tree draw, {self.leaf_epsilon:.4g} per "
                "leaf-count release"
            )
        at = "n_max (the run chooses again at its noisy n̂)" if self.provisional else "n̂"
        return f"preset {self.auto.describe()}, priced at {at}; row count ε {self.count_epsilon:g}"


def _nano_floor(value: float) -> float:
    """``value`` rounded down to a whole nano-ε, so that the server's rounding up to whole
    pico-ε never lifts the run above ε."""
    return math.floor(value * _NANO) / _NANO


@dataclass(frozen=True)
class MinedTreeRedescription:
    """One redescription: readable queries, noisy statistics (post-processed from noisy leaf
    counts whose every cell carries noise of ``noise_scale``: discrete Laplace, or the discrete
    Gaussian's σ when ``noise`` says so, on zCDP datasets), the standard error
    of the noisy Jaccard that noise implies (:func:`dpmine.treereds.jaccard_standard_error`) and
    the round that released them.

    With the default ``leaf_release="partition"`` the statistics are noisy counts of exactly the
    rows of the printed queries (a ``!(path)`` holds the rows missing a value on the path too).
    With ``"paper"`` they are the paper's estimates: exact only when no row misses a value on
    the trees' paths (:mod:`dpmine.treereds`). ``joint_intervals`` are those of the
    significance test (module docstring)."""

    redescription: Redescription
    statistics: NoisyStatistics
    noise_scale: float
    round: int
    jaccard_error: float
    #: Noisy (E11, E10, E01, E00) as sums of released cells, and how many cells each sums.
    noisy_cells: tuple[int, int, int, int]
    cell_terms: tuple[int, int, int, int]
    #: Probability that one such sum's range misses: α/(R·rectangles) (module docstring).
    sum_miss: float
    #: Probability ≥ which every range of the release holds together: 1 − α/R.
    joint_level: float
    #: The law of the cells' noise (the release's ``noise``; Laplace when it reports none).
    noise: CountNoiseKind = "laplace"

    @cached_property
    def joint_intervals(self) -> StatisticIntervals:
        """Intervals of |I|, |U|, J, the supports, the excess J − J_ind and the p-value that
        hold, with those of every query of the same release, with probability ≥
        ``joint_level`` (:func:`dpmine.intervals.sum_box`): those of the significance test."""
        return box_intervals(
            self.joint_box, level=self.joint_level, scale=self.noise_scale, kind=self.noise
        )

    @cached_property
    def joint_box(self) -> CellBox:
        """The box of the four true cells and of D = E10 + E01, E11 − D and E11 + E00 − D
        behind ``joint_intervals``: each a signed sum of released cells at the miss
        ``sum_miss`` (:func:`dpmine.intervals.sum_box`)."""
        return sum_box(
            self.noisy_cells,
            self.cell_terms,
            scale=self.noise_scale,
            miss=self.sum_miss,
            kind=self.noise,
            difference=True,
            association=True,
        )

    @property
    def noisy_excess(self) -> float:
        """J̃ − J_ind(ŝ_L/N̂, ŝ_R/N̂) from the noisy statistics."""
        stats = self.statistics
        return excess_of(stats.jaccard, stats.support_left, stats.support_right, stats.n_rows)

    @property
    def left(self) -> str:
        """The left query in the project's query syntax."""
        return format_query(self.redescription.left)

    @property
    def right(self) -> str:
        """The right query in the project's query syntax."""
        return format_query(self.redescription.right)


@dataclass(frozen=True)
class _ReleasedPair:
    """A tree pair and its released leaf counts, bought with ``epsilon``."""

    left: DecisionTree
    right: DecisionTree
    counts: LeafCountsResponse
    epsilon: float


@dataclass
class _Iteration:
    """What one iteration (one drawn attribute) released, in call order; ``number`` counts
    the run's iterations from 1."""

    number: int = 1
    receipts: list[Receipt] = field(default_factory=list)
    pairs: list[_ReleasedPair] = field(default_factory=list)


class TreeMinerParameters(TypedDict, total=False):
    """Keyword parameters shared by the three tree miners."""

    epsilon: float
    rho: float | None
    preset: TreePreset
    depth: int | None
    min_support: float | None
    max_support_fraction: float
    min_jaccard: float
    p_max: float
    max_clauses: int | None
    leaf_release: LeafCountsRelease
    concurrent_iterations: int
    target_bins: int | None
    seed: int | None
    progress: bool
    columns: str | Sequence[str] | None
    exclude: str | Sequence[str] | None


def _literal(split: TreeSplit, attribute: object, *, left: bool) -> AnyLiteral:
    """The test of a split as a literal: the left branch, or its negation (right branch; rows
    with a missing value go to neither, as a negated literal requires a present value)."""
    negated = not left
    if isinstance(attribute, NumericAttribute):
        return NumLiteral(attribute=split.attribute, upper=split.threshold, negated=negated)
    if isinstance(attribute, CategoricalAttribute):
        assert split.category is not None
        return CatLiteral(attribute=split.attribute, category=split.category, negated=negated)
    return BoolLiteral(attribute=split.attribute, negated=negated)


def simplified_leaf_paths(tree: DecisionTree, schema: DatasetMetadata) -> list[LeafPath]:
    """Each leaf's path (:func:`leaf_paths`) with the same rows on every dataset, merged and
    without implied tests, or None for a leaf that is empty on every dataset (a contradiction
    such as ``[g = 7] & [g = 6]``): :func:`dpmine.canonical.simplify_conjunction`."""
    return [simplify_conjunction(path, schema) for path in leaf_paths(tree, schema)]


def leaf_paths(tree: DecisionTree, schema: DatasetMetadata) -> list[list[AnyLiteral]]:
    """The tests on each leaf's root-to-leaf path (leaf 0 = always left), §3.1 and §3.6."""
    attributes = {attribute.name: attribute for attribute in schema.attributes}
    paths: list[list[AnyLiteral]] = []
    for leaf in range(tree.n_leaves):
        node, tests = 0, []
        for level in reversed(range(tree.depth)):
            goes_left = not (leaf >> level) & 1
            split = tree.splits[node]
            tests.append(_literal(split, attributes[split.attribute], left=goes_left))
            node = 2 * node + (1 if goes_left else 2)
        paths.append(tests)
    return paths


def _placeholder_tree(
    schema: DatasetMetadata, view: View, depth: int, columns: Sequence[str] | None = None
) -> DecisionTree:
    """A valid public tree of the view (on ``columns`` when given), only for pricing a plan
    (costs do not depend on it): level ℓ of the tree repeats the ℓ-th distinct split key, so
    no path reuses one."""
    keys: list[TreeSplit] = []
    for attribute in schema.attributes:
        if attribute.view != view or (columns is not None and attribute.name not in columns):
            continue
        if isinstance(attribute, NumericAttribute):
            keys += [
                TreeSplit(attribute=attribute.name, threshold=attribute.lo),
                TreeSplit(attribute=attribute.name, threshold=attribute.hi),
            ]
        elif isinstance(attribute, CategoricalAttribute):
            keys += [TreeSplit(attribute=attribute.name, category=c) for c in attribute.categories]
        elif isinstance(attribute, BooleanAttribute):
            keys.append(TreeSplit(attribute=attribute.name))
    if len(keys) < depth:
        raise ParameterError(f"the {view} view has too few attributes for a tree of depth {depth}")
    return DecisionTree(
        view=view,
        depth=depth,
        splits=[keys[(node + 1).bit_length() - 1] for node in range(2**depth - 1)],
    )


# -- the plan's signal report (public quantities only) --------------------------------------------

#: A leaf-count release is flagged when the expected leaf size is below this many standard
#: deviations of a released leaf size.
NOISY_LEAF_RATIO = 5.0


def view_units(schema: DatasetMetadata, view: View, columns: Sequence[str] | None) -> int:
    """Base-measure units of a view's splits (§3.1, as Serenade's §7 units): one per Boolean or
    numeric attribute (a numeric attribute's thresholds share its unit), one per category."""
    units = 0
    for attribute in schema.attributes:
        if attribute.view != view or (columns is not None and attribute.name not in columns):
            continue
        units += len(attribute.categories) if isinstance(attribute, CategoricalAttribute) else 1
    return units


@dataclass(frozen=True)
class TreeDrawSignal:
    """Signal of one kind of tree draw: c·R, the largest log-weight gap the mechanism can give
    two candidates, against ln M, the log of the candidates' base-measure units, both at the
    public n_max (an upper bound of the rows, so c·R is an upper bound too):

    * ``tree.expmech`` (§3.3): c = (ε/d)/(2·Δ), Δ = 2; a node at level ℓ holds about
      n_max/2^ℓ rows and the Gini gain of its splits spans at most that, R_ℓ = n_max/2^ℓ; M =
      the view's units. ``signal`` is the root's, ``deepest`` the last level's.
    * ``tree.mcmc`` (§3.4): c = ε/(2·Δ), R = n_max (the count-weighted Gini of a tree); M =
      units^(2^d − 1), the trees.
    * ``tree.pair_mcmc`` (§3.5): c = ε/2 (sensitivity 1), R = 1 (the pair score is in [0, 1]);
      with ``pair_score="gain"`` c = ε/6 (one-sided (2, 4)), R = 2·n_max (a Gini term and a
      Gini gain, each within [0, n_max]);
      M = the pairs, units_L^(2^d − 1)·units_R^(2^d − 1).

    ``uniform_like``: c·R < ln M, the best candidate weighs less than the crowd of the others,
    whatever the data; since c·R is an upper bound, a flagged draw is close to uniform."""

    operation: str
    view: str
    draws: int
    epsilon: float
    signal: float
    deepest: float
    log_candidates: float

    @property
    def uniform_like(self) -> bool:
        """Even the best split or tree is not favoured over the crowd at the root/whole tree."""
        return self.signal < self.log_candidates

    @property
    def deep_uniform_like(self) -> bool:
        """The last level's draws are close to uniform (``tree.expmech`` only)."""
        return self.deepest < self.log_candidates


@dataclass(frozen=True)
class LeafNoise:
    """Noise of the leaf-count releases against the expected leaf size n_max/2^d (an upper
    bound): a released leaf size sums 2^d + 1 cells of scale 1/ε ("partition", standard
    deviation √(2·(2^d + 1))/ε) or is one count of scale 2/ε ("paper", 2√2/ε)."""

    releases: int
    epsilon: float
    leaf_std: float
    leaf_size: float

    @property
    def noisy(self) -> bool:
        """The expected leaf size is below ``NOISY_LEAF_RATIO`` standard deviations."""
        return self.leaf_size < NOISY_LEAF_RATIO * self.leaf_std


def tree_signals(
    calls: Sequence[PlannedCall], schema: DatasetMetadata, columns: Sequence[str] | None
) -> list[TreeDrawSignal]:
    """One :class:`TreeDrawSignal` per (operation, view, ε) of a plan's tree draws."""
    n = float(schema.n_max)
    grouped: dict[tuple[str, str, float, int], int] = {}
    gain: set[tuple[str, str, float, int]] = set()
    for call in calls:
        if call.operation not in (TREE_EXPMECH.name, TREE_MCMC.name, TREE_PAIR_MCMC.name):
            continue
        body = call.request
        view = str(body.get("view", "both"))
        key = (call.operation, view, float(body["epsilon"]), int(body.get("depth") or 3))
        grouped[key] = grouped.get(key, 0) + 1
        if body.get("pair_score") == "gain":
            gain.add(key)
    signals = []
    for (operation, view, epsilon, depth), draws in grouped.items():
        nodes = 2**depth - 1
        if operation == TREE_PAIR_MCMC.name:
            units = [max(view_units(schema, v, columns), 1) for v in ("left", "right")]
            paper = (operation, view, epsilon, depth) not in gain
            signal = deepest = epsilon / 2.0 if paper else epsilon / 6.0 * 2.0 * n
            log_m = nodes * (math.log(units[0]) + math.log(units[1]))
        else:
            side: View = "left" if view == "left" else "right"
            log_units = math.log(max(view_units(schema, side, columns), 1))
            if operation == TREE_EXPMECH.name:
                c = epsilon / depth / 4.0
                signal, deepest = c * n, c * n / 2 ** (depth - 1)
                log_m = log_units
            else:
                signal = deepest = epsilon / 4.0 * n
                log_m = nodes * log_units
        signals.append(TreeDrawSignal(operation, view, draws, epsilon, signal, deepest, log_m))
    return signals


def leaf_noise(calls: Sequence[PlannedCall], schema: DatasetMetadata) -> LeafNoise | None:
    """The :class:`LeafNoise` of a plan's leaf-count releases (the smallest ε among them)."""
    releases = [call.request for call in calls if call.operation == TREE_LEAF_COUNTS.name]
    if not releases:
        return None
    body = min(releases, key=lambda request: float(request["epsilon"]))
    epsilon = float(body["epsilon"])
    depth = int(body["left_tree"]["depth"])
    cells = 2 * (2**depth + 1) if body.get("release", "partition") == "partition" else 8
    return LeafNoise(
        releases=len(releases),
        epsilon=epsilon,
        leaf_std=math.sqrt(cells) / epsilon,
        leaf_size=schema.n_max / 2**depth,
    )


@dataclass(frozen=True)
class TreePlan(Plan):
    """A tree miner's plan: the priced calls, each draw kind's signal and the leaf-count noise,
    all from public quantities at n_max (see :class:`TreeDrawSignal`, :class:`LeafNoise`)."""

    n_max: int = 0
    signals: list[TreeDrawSignal] = field(default_factory=list)
    noise: LeafNoise | None = None
    settings: TreeSettings | None = None

    @property
    def warnings(self) -> list[str]:
        """One line per uniform-like draw kind and for noisy leaf counts."""
        lines = []
        for s in self.signals:
            where = f"{s.operation} ({s.view})"
            if s.uniform_like:
                lines.append(
                    f"{where}: c·R = {s.signal:.3g} < ln(candidates) = {s.log_candidates:.3g}: "
                    "these draws are close to uniform (raise ε, or lower the depth or iterations)"
                )
            elif s.deep_uniform_like:
                lines.append(
                    f"{where}: the deepest level's c·R = {s.deepest:.3g} < ln(candidates) = "
                    f"{s.log_candidates:.3g}: its splits are close to uniform (lower the depth)"
                )
        if self.noise is not None and self.noise.noisy:
            lines.append(
                f"tree.leaf_counts: a leaf's expected size {self.noise.leaf_size:.4g} is below "
                f"{NOISY_LEAF_RATIO:g} noise standard deviations ({self.noise.leaf_std:.3g}): "
                "lower the depth or the number of releases"
            )
        return lines

    def report(self) -> str:
        """The signal report as text (one line per draw kind and for the leaf counts, then the
        warnings)."""
        lines = [f"signal at n_max = {self.n_max} rows (an upper bound of n)"]
        if self.settings is not None:
            lines.insert(0, self.settings.describe())
        for s in self.signals:
            deep = f", deepest level {s.deepest:.3g}" if s.operation == TREE_EXPMECH.name else ""
            flag = "  UNIFORM-LIKE" if s.uniform_like else ""
            lines.append(
                f"{s.operation} ({s.view}): {s.draws} draw(s) at ε = {s.epsilon:.4g}: c·R = "
                f"{s.signal:.3g}{deep} vs ln(candidates) = {s.log_candidates:.3g}{flag}"
            )
        if self.noise is not None:
            n = self.noise
            flag = "  NOISY" if n.noisy else ""
            lines.append(
                f"tree.leaf_counts: {n.releases} release(s) at ε = {n.epsilon:.4g}: noise s.d. "
                f"{n.leaf_std:.3g} per leaf size vs expected leaf size {n.leaf_size:.4g}{flag}"
            )
        lines += self.rho_lines()
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


#: The ledger's unit: a pico-ε. Charges are rounded up to it.
_UNITS_PER_EPSILON = 10**12


def share_of(epsilon: float, fraction: Fraction) -> float:
    """``epsilon · fraction`` rounded down to the ledger's pico-ε grid, so that the rounded-up
    charges of the parts never sum to more than ``epsilon``."""
    units = math.floor(Fraction(repr(epsilon)) * fraction * _UNITS_PER_EPSILON)
    if units < 1:
        raise ParameterError(f"ε = {epsilon!r} split {fraction!r} is below the ledger's unit")
    return float(Decimal(units) / _UNITS_PER_EPSILON)


def released_noise(response: LeafCountsResponse, epsilon: float) -> tuple[CountNoiseKind, float]:
    """(kind, scale) of the noise of every cell of a ``tree.leaf_counts`` release bought with
    ``epsilon``: discrete Laplace of scale 1/ε ("partition") or 2/ε ("paper") when the release
    reports Laplace or nothing; else the reported discrete Gaussian's σ, which must be at least
    the 1/ε or √2/ε it implies (a smaller one would make the intervals too narrow)."""
    partition = response.partition is not None
    noise = response.noise
    if noise is None or noise.kind == "laplace":
        return "laplace", (1.0 if partition else 2.0) / epsilon
    implied = (1.0 if partition else math.sqrt(2.0)) / epsilon
    if not noise.scale >= implied * (1.0 - 1e-9):
        raise ParameterError(f"the reported noise scale {noise.scale} is below {implied} at ε")
    return noise.kind, noise.scale


#: Ranges a pair of queries' box takes from one release: its four cells' rectangles, D =
#: E10 + E01, E11 − D and E11 + E00 − D (:func:`release_miss`).
SUMS_PER_QUERY_PAIR = 7


def release_miss(
    shape: tuple[int, int], max_clauses: int, releases: int, alpha: float = ALPHA
) -> tuple[float, float]:
    """(the miss of one sum's range, the joint level of a release) for a run of ``releases``
    leaf-count releases of trees with ``shape`` leaves (issue #21).

    Proof: the release gets the miss α/R. A query's four cells sum the released cells of a
    rectangle (side of the left query or its complement) × (the same on the right); a side is
    one of at most 2·L sets, L = :func:`~dpmine.treereds.query_cell_sets`, so at most
    4·L_left·L_right rectangles exist. Each pair of queries also has three signed sums of its
    rectangles, D = E10 + E01, E11 − D and E11 + E00 − D (:func:`~dpmine.intervals.sum_box`
    with ``difference`` and ``association``): at most 3·L_left·L_right more sums. Giving each
    of the 7·L_left·L_right sums the miss α/(R·7·L_left·L_right), all are in their ranges
    together with probability ≥ 1 − α/R (union
    bound), and the R releases' with probability ≥ 1 − α."""
    pairs = query_cell_sets(shape[0], max_clauses) * query_cell_sets(shape[1], max_clauses)
    share = alpha / releases
    return share / (SUMS_PER_QUERY_PAIR * pairs), 1.0 - share


def result_table(
    red: TreeRedescription,
    matrix: Sequence[Sequence[int]],
    shape: tuple[int, int],
    *,
    partition: bool,
) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The noisy sums and terms of a result's four cells (:func:`~dpmine.treereds.table_sums`)
    on the released ``matrix`` (the partition, or the paper's intersections) of trees with
    ``shape`` leaves."""
    return table_sums(
        matrix,
        active_cells(red.left, shape[0], outside=partition),
        active_cells(red.right, shape[1], outside=partition),
    )


def _other(view: View) -> View:
    return "right" if view == "left" else "left"


class _TreeMinerBase(SignificantMiner[MinedTreeRedescription]):
    """Parameters and plumbing of the three tree miners. ``columns`` / ``exclude`` restrict the
    attributes a run uses: the drawn targets and, sent with every tree request (public), the
    splits the server may choose.

    ``rho``: the run's budget on a zCDP dataset (issue #24), in place of ``epsilon``. Both
    presets keep their rules and spend ρ exactly (less a 10⁻⁶ margin for the server's
    rounding): ``paper`` gives every call the same share of an E chosen so that the calls' ρ
    (ε²/(8·depth) per ``tree.expmech``, ε²/8 per MCMC draw, ε²/2 per leaf-count release) sum
    to ρ (:func:`~dpmine.miners._rho.epsilon_for_rho`); ``auto`` prices the same ε per call
    and fits them in ρ (:func:`~dpmine.miners.tree_auto.auto_tree`), its row count taking 2 %
    of ρ. A budget in the dataset's other unit is refused before any call."""

    #: The allowed columns of the current plan or run (None: all), sent with each tree request.
    _allowed: list[str] | None = None
    #: The unit of the current plan or run's dataset (set by ``plan()``).
    _unit: Composition = PURE

    def __init__(
        self,
        *,
        epsilon: float = 1.0,
        rho: float | None = None,
        preset: TreePreset = "paper",
        depth: int | None = None,
        min_support: float | None = None,
        max_support_fraction: float = DEFAULT_MAX_SUPPORT_FRACTION,
        min_jaccard: float = DEFAULT_MIN_JACCARD,
        p_max: float = DEFAULT_P_MAX,
        max_clauses: int | None = None,
        leaf_release: LeafCountsRelease = "partition",
        concurrent_iterations: int = DEFAULT_CONCURRENT_ITERATIONS,
        target_bins: int | None = None,
        seed: int | None = None,
        progress: bool = False,
        columns: str | Sequence[str] | None = None,
        exclude: str | Sequence[str] | None = None,
    ) -> None:
        self.epsilon = epsilon
        self.rho = rho
        self.preset = preset
        self.depth = depth
        self.min_support = min_support
        self.max_support_fraction = max_support_fraction
        self.min_jaccard = min_jaccard
        self.p_max = p_max
        self.max_clauses = max_clauses
        self.leaf_release = leaf_release
        self.concurrent_iterations = concurrent_iterations
        self.target_bins = target_bins
        self.seed = seed
        self.progress = progress
        self.columns = columns
        self.exclude = exclude

    @abstractmethod
    def mine(self, dataset: DatasetHandle) -> Self:
        """Run the miner; returns self (results in ``redescriptions_``)."""

    @abstractmethod
    def _releases(self) -> int:
        """R: the leaf-count releases of a run (public, from the settings)."""

    #: The auto rule's tree kind (:func:`~dpmine.miners.tree_auto.auto_tree`).
    _kind: TreeKind = "expmech"
    #: The run's settings (:meth:`_settle`), set by ``plan()`` and again by ``mine()``.
    settings_: TreeSettings

    @abstractmethod
    def _given_rounds(self) -> int | None:
        """The rounds the caller gave (None: the preset's)."""

    @abstractmethod
    def _paper_settings(self, depth: int, min_support: float, max_clauses: int) -> TreeSettings:
        """The settings of preset ``"paper"`` (§3.7)."""

    def _auto_in_trees(self) -> int:
        """Drawn attributes per round under ``auto`` (alternations: ``in_trees``)."""
        return 1

    def _auto_omega(self) -> float:
        """The pair draw's fraction of an iteration (MCMCTreePair only)."""
        return 0.1

    def _settle(self, schema: DatasetMetadata, n_hat: float | None) -> TreeSettings:
        """Fill in what the preset chooses; given parameters always win. ``auto`` reads ε, the
        schema's units of the allowed columns and n̂ (None: the public n_max, for pricing)."""
        self._check_params()
        max_clauses = self.max_clauses or DEFAULT_MAX_CLAUSES
        if self.preset == "paper":
            min_support = DEFAULT_MIN_SUPPORT if self.min_support is None else self.min_support
            return self._paper_settings(self.depth or DEFAULT_DEPTH, min_support, max_clauses)
        count = self._auto_count_epsilon()
        log_units = self._log_units(schema)
        given = self._given_rounds()
        auto = auto_tree(
            self._after_count(count),
            float(schema.n_max) if n_hat is None else n_hat,
            kind=self._kind,
            log_units=log_units,
            in_trees=self._auto_in_trees(),
            omega=self._auto_omega(),
            max_clauses=max_clauses,
            depths=AUTO_DEPTHS if self.depth is None else (self.depth,),
            rounds=tuple(range(AUTO_MAX_ROUNDS, 0, -1)) if given is None else (given,),
            composition=self._unit,
        )
        return TreeSettings(
            preset="auto",
            depth=auto.depth,
            rounds=auto.rounds,
            tree_epsilon=_nano_floor(auto.tree_epsilon),
            leaf_epsilon=_nano_floor(auto.leaf_epsilon),
            min_support=self.min_support if self.min_support is not None else auto.min_support,
            max_clauses=max_clauses,
            count_epsilon=count,
            auto=auto,
            provisional=n_hat is None,
        )

    def _budget(self) -> float:
        """The run's budget in its dataset's unit: ``epsilon``, or ``rho`` on a zCDP dataset."""
        return self.rho if self._unit is ZCDP and self.rho is not None else self.epsilon

    def _after_count(self, count: float) -> float:
        """What the auto rule spends: the budget less the row count, on a zCDP dataset also
        less the margin :data:`~dpmine.miners._rho.RHO_MARGIN` for the server's rounding."""
        left = self._budget() - self._unit.generic(count)
        return left if self._unit is PURE else left * (1 - RHO_MARGIN)

    def _paper_budget(self, releases: Sequence[tuple[float, float]]) -> float:
        """The E whose paper split is spent: ``epsilon``, or on a zCDP dataset the E at which
        the ``releases`` ((ρ per ε², share of E) per call) cost ρ less the margin."""
        if self._unit is PURE:
            return self.epsilon
        return epsilon_for_rho(self._budget() * (1 - RHO_MARGIN), releases)

    def _tree_rho(self, depth: int) -> float:
        """ρ per ε² of one of this miner's tree draws (as the server charges it)."""
        return tree_cost(self._kind, depth, 1.0, ZCDP)

    def _auto_count_epsilon(self) -> float:
        """The row count's ε under ``auto``; a clear error when the budget is too small to buy
        it."""
        budget = self._budget()
        count = auto_count_epsilon(budget, self._unit)
        if count <= 0 or self._unit.generic(count) >= budget:
            name = "epsilon" if self._unit is PURE else "rho"
            raise ParameterError(
                f"{name} = {budget!r} is too small for preset 'auto' (it buys a row count "
                f"of 2 % of {name}): use a larger {name} or preset='paper'"
            )
        return count

    def _log_units(self, schema: DatasetMetadata) -> float:
        """ln of the larger view's units over the allowed columns (the auto rules' ln M)."""
        allowed = self.columns_for(schema)
        return max(
            math.log(max(view_units(schema, view, allowed), 1)) for view in ("left", "right")
        )

    def _count_calls(self) -> list[PlannedCall]:
        """The row count's planned call under ``auto`` (none under ``paper``)."""
        count = self.settings_.count_epsilon
        return [] if count is None else [COUNT_NOISY.plan(NoisyCountRequest(epsilon=count))]

    def plan(self, dataset: DatasetHandle) -> TreePlan:
        """Price the run (free) and report each tree draw's signal against ln(candidates) and
        the leaf counts' noise against the expected leaf size (:class:`TreePlan`); on a zCDP
        dataset also each call's ρ and the (ε, δ) the run implies."""
        self._check_params()
        self._unit = composition_for(dataset, self.rho, type(self).__name__)
        base = super().plan(dataset)
        schema = dataset.schema
        return TreePlan(
            calls=base.calls,
            estimate=base.estimate,
            budget_rho=base.budget_rho,
            delta=base.delta,
            n_max=schema.n_max,
            signals=tree_signals(base.calls, schema, self._allowed),
            noise=leaf_noise(base.calls, schema),
            settings=self.settings_,
        )

    # -- parameters ----------------------------------------------------------------------------

    def _check_params(self) -> None:
        if not self.epsilon > 0:
            raise ParameterError(f"epsilon must be positive, got {self.epsilon!r}")
        check_budget(self.rho, self.epsilon, 1.0)
        if self.preset not in ("auto", "paper"):
            raise ParameterError(f"preset must be 'auto' or 'paper', got {self.preset!r}")
        for name in ("depth", "max_clauses"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ParameterError(f"{name} must be a whole number of at least 1, got {value!r}")
        if self.min_support is not None and not self.min_support >= 0:
            raise ParameterError(f"min_support must be ≥ 0, got {self.min_support!r}")
        if not 0 <= self.min_jaccard <= 1:
            raise ParameterError(f"min_jaccard must be in [0, 1], got {self.min_jaccard!r}")
        if self.leaf_release not in get_args(LeafCountsRelease):
            raise ParameterError(
                f"leaf_release must be 'partition' or 'paper', got {self.leaf_release!r}"
            )
        for name in ("in_trees", "rm_iterations", "concurrent_iterations"):
            value = getattr(self, name, 1)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ParameterError(f"{name} must be a whole number of at least 1, got {value!r}")

    def columns_for(self, schema: DatasetMetadata) -> list[str] | None:
        """The attributes the run may use, as targets and as splits (``columns`` minus
        ``exclude``, schema order), or None for all (:func:`~dpmine.wire.items.usable_columns`);
        a :class:`~dpmine.errors.ParameterError` names an unknown column or an empty view."""
        try:
            allowed = usable_columns(schema, self.columns, self.exclude)
        except ValueError as error:
            raise ParameterError(str(error)) from None
        if allowed is not None:
            for view in ("left", "right"):
                if not any(a.view == view and a.name in allowed for a in schema.attributes):
                    raise ParameterError(
                        f"columns and exclude leave the {view} view no attribute: the trees of "
                        f"both views need one; allow at least one {view}-view attribute"
                    )
        return allowed

    def _attribute_draws(self, schema: DatasetMetadata, count: int) -> list[str]:
        """``count`` attributes drawn uniformly from both views' allowed attributes (public
        choices, §3.7)."""
        allowed = self.columns_for(schema)
        names = [
            a.name
            for a in schema.attributes
            if a.view in ("left", "right") and (allowed is None or a.name in allowed)
        ]
        rng = np.random.default_rng(self.seed)
        return [names[int(index)] for index in rng.integers(0, len(names), size=count)]

    def _target(self, attribute: str) -> AttributeTarget:
        return AttributeTarget(attribute=attribute, bins=self.target_bins)

    # -- calls ---------------------------------------------------------------------------------

    def _counts_request(
        self, left: DecisionTree, right: DecisionTree, epsilon: float
    ) -> LeafCountsRequest:
        return LeafCountsRequest(
            left_tree=left, right_tree=right, epsilon=epsilon, release=self.leaf_release
        )

    def _release_counts(
        self,
        dataset: DatasetHandle,
        trees: tuple[DecisionTree, DecisionTree],
        epsilon: float,
        iteration: _Iteration,
    ) -> None:
        """Release the pair's noisy leaf counts (one charged call)."""
        left, right = sorted(trees, key=lambda tree: tree.view != "left")
        response = self._charged(dataset, self._counts_request(left, right, epsilon), iteration)
        iteration.receipts.append(response.receipt)
        iteration.pairs.append(_ReleasedPair(left, right, response, epsilon))

    def _extract(
        self, schema: DatasetMetadata, released: _ReleasedPair
    ) -> list[MinedTreeRedescription]:
        """The pair's redescriptions from its released counts (§3.6; post-processing, free)."""
        left, right, response = released.left, released.right, released.counts
        self.trees_.append((left, right))
        self.leaf_counts_.append(response)
        settings = self.settings_
        options: ExtractOptions = {
            "min_supp": settings.min_support,
            "max_supp_fraction": self.max_support_fraction,
            "min_jaccard": self.min_jaccard,
            "p_max": self.p_max,
            "max_clauses": settings.max_clauses,
        }
        left_paths = simplified_leaf_paths(left, schema)
        right_paths = simplified_leaf_paths(right, schema)
        options["empty_left"] = [leaf for leaf, path in enumerate(left_paths) if path is None]
        options["empty_right"] = [leaf for leaf, path in enumerate(right_paths) if path is None]
        if response.partition is not None:
            found, examined = examine_partition(response.partition, **options)
            matrix = response.partition
        else:
            found, examined = examine_release(
                response.intersections, response.left_counts, **options
            )
            matrix = response.intersections  # the intervals use the leaf block only
        self.examined_ += examined
        partition = response.partition is not None
        shape = (left.n_leaves, right.n_leaves)
        miss = release_miss(shape, settings.max_clauses, self._releases())
        return [
            self._result_of(
                red,
                left_paths,
                right_paths,
                noise=released_noise(response, released.epsilon),
                shape=shape,
                partition=partition,
                table=result_table(red, matrix, shape, partition=partition),
                miss=miss,
            )
            for red in found
        ]

    def _run_iterations(
        self,
        dataset: DatasetHandle,
        attributes: Sequence[SeedT],
        run_one: Callable[[SeedT, _Iteration], None],
    ) -> None:
        """Run one iteration per drawn attribute, up to ``concurrent_iterations`` at a time,
        then read their releases in the order of the draws. After a failed call no further
        iteration starts and the receipts of every charged call are kept. A call that failed
        after its charge or was refused for budget (:meth:`_charged`) ends its iteration and
        the run keeps every release made before (``stopped_`` says where); any other error is
        raised once the running iterations have ended."""
        iterations = [_Iteration(number) for number in range(1, len(attributes) + 1)]
        failed = threading.Event()

        def guarded(attribute: SeedT, iteration: _Iteration) -> None:
            if failed.is_set():
                return  # no iteration starts after a failed call
            try:
                run_one(attribute, iteration)
            except _Stopped:
                failed.set()  # recorded by _charged; the releases so far are kept
            except BaseException:
                failed.set()
                raise

        workers = max(1, min(self.concurrent_iterations, len(attributes)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(guarded, attribute, iteration)
                for attribute, iteration in zip(attributes, iterations, strict=True)
            ]
            wait(futures, return_when=FIRST_EXCEPTION)
        for iteration in iterations:
            self._spent.receipts.extend(iteration.receipts)
            for released in iteration.pairs:
                self._keep_new(self._extract(dataset.schema, released))
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error

    def _charged(
        self,
        dataset: DatasetHandle,
        request: OperationRequest[AnswerT],
        iteration: _Iteration,
    ) -> AnswerT:
        """Send one charged call of ``iteration``; a failure after its charge (or a budget
        refusal) is recorded as where the run stopped (:meth:`BaseMiner._stopping`)."""
        call = f"{operation_for(request).name} in iteration {iteration.number}"
        with self._stopping(self._spent, dataset, call, [request]):
            return dataset.run(request)

    def _result_of(
        self,
        red: TreeRedescription,
        left_paths: Sequence[LeafPath],
        right_paths: Sequence[LeafPath],
        *,
        noise: tuple[CountNoiseKind, float],
        shape: tuple[int, int],
        partition: bool,
        table: tuple[tuple[int, int, int, int], tuple[int, int, int, int]],
        miss: tuple[float, float],
    ) -> MinedTreeRedescription:
        """One result: ``table`` its cells' noisy sums and terms, ``miss`` (a sum's miss, the
        release's joint level; ``noise`` the release's (kind, scale), :func:`released_noise`)."""
        kind, scale = noise
        return MinedTreeRedescription(
            redescription=render_redescription(red, left_paths, right_paths),
            statistics=red.statistics,
            noise_scale=scale,
            round=len(self.trees_) - 1,
            jaccard_error=jaccard_standard_error(
                red, *shape, scale, partition=partition, noise=kind
            ),
            noisy_cells=table[0],
            cell_terms=table[1],
            sum_miss=miss[0],
            joint_level=miss[1],
            noise=kind,
        )

    def _start(self, dataset: DatasetHandle) -> None:
        """Check the budget, buy the row count under ``auto`` and settle the run's settings at
        its n̂ (post-processing; the total ε is the plan's)."""
        self._check_params()
        self._check_budget(dataset)
        self._allowed = self.columns_for(dataset.schema)
        self._spent = _Spent()
        self.settings_ = self._settle(dataset.schema, None)
        if self.settings_.count_epsilon is not None:
            counted = dataset.count(epsilon=self.settings_.count_epsilon)
            self._spent.receipts.append(counted.receipt)
            self.settings_ = self._settle(dataset.schema, float(max(counted.count, 1)))
        self.trees_: list[tuple[DecisionTree, DecisionTree]] = []
        self.leaf_counts_: list[LeafCountsResponse] = []
        self.redescriptions_: list[MinedTreeRedescription] = []
        self.examined_ = 0
        self._seen: set[tuple[str, str]] = set()

    def _keep_new(self, found: Sequence[MinedTreeRedescription]) -> None:
        """Add the redescriptions whose pair of queries, in canonical form
        (:func:`dpmine.canonical.redescription_key`), no earlier result of the run has (§3.6
        "drop duplicates", across rounds). The first release of a pair is kept with its round's
        noisy statistics and later copies are dropped: picking the copy with the best noisy
        figures would favour the copy whose noise happened to flatter it."""
        for red in found:
            key = redescription_key(red.redescription)
            if key not in self._seen:
                self._seen.add(key)
                self.redescriptions_.append(red)

    # -- results -------------------------------------------------------------------------------

    def _results(self) -> list[MinedTreeRedescription]:
        found: list[MinedTreeRedescription] | None = getattr(self, "redescriptions_", None)
        if found is None:
            raise NotMinedError(f"{type(self).__name__} has not mined yet; call mine() first")
        return found

    def _examined(self) -> tuple[list[MinedTreeRedescription], int]:
        """Every result, and m: the candidates the extractions computed statistics of."""
        return self._results(), self.examined_

    def _hints(self) -> list[str]:
        """Tree-specific remedies, then the general ones."""
        preset = (
            [
                "preset='auto' (CLI --preset auto: fewer, more precise leaf-count releases, sized "
                "for this test)"
            ]
            if self.preset == "paper"
            else []
        )
        return [
            *preset,
            "shallower trees (depth, CLI --depth: fewer released cells per query, fewer tests)",
            *GENERAL_HINTS,
        ]

    def pruned(self, min_noisy_support: float) -> list[MinedTreeRedescription]:
        """The redescriptions with noisy support I ≥ ``min_noisy_support`` (§3.7 pruning; choose
        the threshold from :meth:`save_plot`)."""
        return [r for r in self._results() if r.statistics.intersection >= min_noisy_support]

    def reliable(
        self, max_error: float = DEFAULT_MAX_JACCARD_ERROR
    ) -> list[MinedTreeRedescription]:
        """The redescriptions whose noisy Jaccard has standard error ≤ ``max_error``: the public
        pruning rule [REC] that replaces the plot-read support threshold of §3.7 (free)."""
        return prune_by_precision(self._results(), max_error)

    def save_plot(self, path: PathLike, threshold: float | None = None) -> Path:
        """Noisy support against noisy Jaccard of every result (needs the ``plot`` extra)."""
        return save_support_jaccard_plot(self._results(), as_path(path), threshold)

    def _rows(self, min_jaccard: float | None = None) -> list[dict[str, object]]:
        """One record per result, by J's lower end, with its noisy statistics, joint intervals
        and whether it passes the significance test."""
        verdict = self.significance(min_jaccard)
        return [tree_record(r, failed=verdict.failed_checks(r)) for r in verdict.ranked]

    def to_json(self, path: PathLike) -> None:
        """Write every redescription by J's lower end (queries, noisy statistics, joint
        intervals, whether it passes the significance test), the test's summary, the released
        trees and the receipts."""
        verdict = self.significance()
        payload = {
            "miner": type(self).__name__,
            "redescriptions": [
                {**row, "query": red.redescription.model_dump(mode="json")}
                for row, red in zip(self._rows(), verdict.ranked, strict=True)
            ],
            "significance": verdict.summary.as_dict(),
            "trees": [
                {"left": left.model_dump(mode="json"), "right": right.model_dump(mode="json")}
                for left, right in self.trees_
            ],
            "receipts": [receipt.model_dump(mode="json") for receipt in self.receipts_],
        }
        as_path(path).write_text(json.dumps(payload, indent=2), encoding="utf-8")

    def to_csv(self, path: PathLike, min_jaccard: float | None = None) -> None:
        """Write one row per redescription (by J's lower end) with its noisy statistics, noise
        scale, joint interval ends (``joint_*_low``/``_high``), ``significant`` and the
        checks it failed (``failed_checks``, ``;``-separated)."""
        write_csv(path, *self._table(min_jaccard))

    def _table(self, min_jaccard: float | None = None) -> tuple[list[str], list[list[object]]]:
        rows = [_flat_row(row) for row in self._rows(min_jaccard)]
        columns = list(rows[0]) if rows else ["left", "right"]
        return columns, [[row[column] for column in columns] for row in rows]


def tree_record(r: MinedTreeRedescription, *, failed: tuple[Check, ...]) -> dict[str, object]:
    """The JSON record of a tree result: queries, round, noise, noisy statistics, the joint
    intervals of the significance test (``joint_intervals``) and its verdict (``failed``: the
    checks it failed, :func:`dpmine.significance.failed_checks`)."""
    stats = r.statistics
    return {
        "left": r.left,
        "right": r.right,
        "round": r.round,
        "noise": r.noise,
        "noise_scale": r.noise_scale,
        "noisy_jaccard_error": r.jaccard_error,
        "noisy_support_left": stats.support_left,
        "noisy_support_right": stats.support_right,
        "noisy_intersection": stats.intersection,
        "noisy_union": stats.union,
        "noisy_jaccard": stats.jaccard,
        "noisy_excess": r.noisy_excess,
        "noisy_p_value": stats.p_value,
        "noisy_rows": stats.n_rows,
        "joint_intervals": r.joint_intervals.as_dict(),
        **verdict_fields(failed),
    }


def _flat_row(record: dict[str, object]) -> dict[str, object]:
    """A JSON record as one CSV row: ``joint_intervals`` becomes ``joint_level`` and
    ``joint_<statistic>_low`` / ``_high`` columns."""
    joint = record["joint_intervals"]
    assert isinstance(joint, dict)
    flat = {key: value for key, value in record.items() if key != "joint_intervals"}
    significant = flat.pop("significant")
    failed = flat.pop("failed_checks")
    assert isinstance(failed, list)
    flat["joint_level"] = joint["level"]
    for name in ("support", "jaccard", "excess", "p_value"):
        low, high = joint[name]
        flat[f"joint_{name}_low"] = low
        flat[f"joint_{name}_high"] = high
    flat["significant"] = significant
    flat["failed_checks"] = ";".join(failed)
    return flat


class _Alternation(_TreeMinerBase):
    """AltExpM / AltMCMC (§3.7): alternate trees between the views."""

    def __init__(
        self,
        *,
        in_trees: int = 1,
        rm_iterations: int | None = None,
        **parameters: Unpack[TreeMinerParameters],
    ) -> None:
        super().__init__(**parameters)
        self.in_trees = in_trees
        self.rm_iterations = rm_iterations

    def _releases(self) -> int:
        """InTr·RMIter leaf-count releases."""
        return self.in_trees * self.settings_.rounds

    def _given_rounds(self) -> int | None:
        return self.rm_iterations

    def _auto_in_trees(self) -> int:
        return self.in_trees

    def _paper_settings(self, depth: int, min_support: float, max_clauses: int) -> TreeSettings:
        """RMIter = 4 unless given; E / (InTr·(2·RMIter + 1)) for every tree and leaf-count
        call (§3.7), E = ε, or on a zCDP dataset the E whose calls cost ρ."""
        rounds = self.rm_iterations or 4
        share = Fraction(1, self.in_trees * (2 * rounds + 1))
        trees = [(self._tree_rho(depth), float(share))] * (self.in_trees * (rounds + 1))
        leaves = [(GENERIC_RHO, float(share))] * (self.in_trees * rounds)
        unit = share_of(self._paper_budget(trees + leaves), share)
        return TreeSettings("paper", depth, rounds, unit, unit, min_support, max_clauses)

    @abstractmethod
    def _tree_request(
        self, view: View, target: TreeTargetSpec
    ) -> TreeExpMechRequest | TreeMCMCRequest:
        """The request of one tree of this miner's operation."""

    def _expmech_request(self, view: View, target: TreeTargetSpec) -> TreeExpMechRequest:
        """A ``tree.expmech`` request of the run's depth, tree ε and allowed columns."""
        return TreeExpMechRequest(
            view=view,
            target=target,
            depth=self.settings_.depth,
            epsilon=self.settings_.tree_epsilon,
            columns=self._allowed,
        )

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        schema = dataset.schema
        self.settings_ = self._settle(schema, None)
        settings = self.settings_
        self._allowed = self.columns_for(schema)
        placeholder = {
            view: _placeholder_tree(schema, view, settings.depth, self._allowed)
            for view in ("left", "right")
        }
        calls: list[PlannedCall] = self._count_calls()
        for attribute in self._attribute_draws(schema, self.in_trees):
            view = _other(_view_of(schema, attribute))
            calls.append(_planned(self._tree_request(view, self._target(attribute))))
            for _ in range(settings.rounds):
                view = _other(view)
                target = TreeTarget(tree=placeholder[_other(view)])
                calls.append(_planned(self._tree_request(view, target)))
                counts = self._counts_request(
                    placeholder["left"], placeholder["right"], settings.leaf_epsilon
                )
                calls.append(TREE_LEAF_COUNTS.plan(counts))
        return calls

    def mine(self, dataset: DatasetHandle) -> Self:
        """Run the alternations; returns self (results in ``redescriptions_``)."""
        self._start(dataset)
        schema = dataset.schema
        settings = self.settings_
        steps = self.in_trees * (2 * settings.rounds + 1)
        with self._progress(steps, type(self).__name__) as advance:

            def alternate(attribute: str, iteration: _Iteration) -> None:
                view = _other(_view_of(schema, attribute))
                previous = self._tree(dataset, view, self._target(attribute), iteration)
                advance()
                for _ in range(settings.rounds):
                    target = TreeTarget(tree=previous)
                    new = self._tree(dataset, _other(previous.view), target, iteration)
                    advance()
                    self._release_counts(dataset, (previous, new), settings.leaf_epsilon, iteration)
                    advance()
                    previous = new

            self._run_iterations(dataset, self._attribute_draws(schema, self.in_trees), alternate)
        return self

    def _tree(
        self, dataset: DatasetHandle, view: View, target: TreeTargetSpec, iteration: _Iteration
    ) -> DecisionTree:
        request = self._tree_request(view, target)
        response: TreeExpMechResponse | TreeMCMCResponse
        if isinstance(request, TreeExpMechRequest):
            response = self._charged(dataset, request, iteration)
        else:
            response = self._charged(dataset, request, iteration)
        iteration.receipts.append(response.receipt)
        return response.tree


def _planned(request: TreeExpMechRequest | TreeMCMCRequest) -> PlannedCall:
    """The planned call of a tree request (its operation follows from its model)."""
    if isinstance(request, TreeExpMechRequest):
        return TREE_EXPMECH.plan(request)
    return TREE_MCMC.plan(request)


def _view_of(schema: DatasetMetadata, attribute: str) -> View:
    for candidate in schema.attributes:
        if candidate.name == attribute and candidate.view is not None:
            return candidate.view
    raise ValueError(f"attribute {attribute!r} is in neither view")


class AltExpM(_Alternation):
    """Alternating exponential-mechanism trees (§3.3, §3.7)."""

    def _tree_request(self, view: View, target: TreeTargetSpec) -> TreeExpMechRequest:
        return self._expmech_request(view, target)

    @classmethod
    def standard(cls, k: int = 4, **parameters: Unpack[TreeMinerParameters]) -> AltExpM:
        """InTr = 1, RMIter = k (§3.7 "standard")."""
        return cls(in_trees=1, rm_iterations=k, **parameters)

    @classmethod
    def stable(cls, k: int = 4, **parameters: Unpack[TreeMinerParameters]) -> AltExpM:
        """InTr = k, RMIter = 1 (§3.7 "stable")."""
        return cls(in_trees=k, rm_iterations=1, **parameters)


def _check_iterations(iterations: object) -> None:
    """MCMC steps per sampled tree: a whole number of at least the server's public minimum."""
    if not isinstance(iterations, int) or iterations < MIN_TREE_ITERATIONS:
        raise ParameterError(
            f"iterations must be a whole number of at least {MIN_TREE_ITERATIONS} (the server's "
            f"public minimum for an MCMC release), got {iterations!r}"
        )


class AltMCMC(_Alternation):
    """Alternating MCMC-sampled trees (§3.4, §3.7): a fixed public number of iterations, at
    least :data:`~dpmine.wire.MIN_TREE_ITERATIONS`. ``sampler`` is each ``tree.mcmc`` call's:
    ``"auto"`` (the default) draws a tree exactly from the same target (guarantee "pure")
    wherever the server's public work bound fits, ``"exact"`` requires that, ``"mcmc"``
    always runs the chain."""

    _kind: TreeKind = "mcmc"

    def __init__(
        self,
        *,
        in_trees: int = 1,
        rm_iterations: int | None = None,
        iterations: int = DEFAULT_TREE_ITERATIONS,
        sampler: TreeSampler = "auto",
        **parameters: Unpack[TreeMinerParameters],
    ) -> None:
        super().__init__(in_trees=in_trees, rm_iterations=rm_iterations, **parameters)
        self.iterations = iterations
        self.sampler = sampler

    def _check_params(self) -> None:
        super()._check_params()
        _check_iterations(self.iterations)

    def _tree_request(self, view: View, target: TreeTargetSpec) -> TreeMCMCRequest:
        return TreeMCMCRequest(
            view=view,
            target=target,
            depth=self.settings_.depth,
            iterations=self.iterations,
            epsilon=self.settings_.tree_epsilon,
            columns=self._allowed,
            sampler=self.sampler,
        )

    @classmethod
    def standard(
        cls,
        k: int = 4,
        *,
        iterations: int = DEFAULT_TREE_ITERATIONS,
        sampler: TreeSampler = "auto",
        **parameters: Unpack[TreeMinerParameters],
    ) -> AltMCMC:
        """InTr = 1, RMIter = k (§3.7 "standard")."""
        return cls(
            in_trees=1, rm_iterations=k, iterations=iterations, sampler=sampler, **parameters
        )

    @classmethod
    def stable(
        cls,
        k: int = 4,
        *,
        iterations: int = DEFAULT_TREE_ITERATIONS,
        sampler: TreeSampler = "auto",
        **parameters: Unpack[TreeMinerParameters],
    ) -> AltMCMC:
        """InTr = k, RMIter = 1 (§3.7 "stable")."""
        return cls(
            in_trees=k, rm_iterations=1, iterations=iterations, sampler=sampler, **parameters
        )


class MCMCTreePair(_TreeMinerBase):
    """Tree pairs sampled jointly (§3.5, §3.7); ω = 0.1 "standard", 0.5 "balanced".
    ``pair_score``: the server's score of a pair, ``"gain"`` (the default: the Gini gain score,
    ALGORITHMS.md §6 item 19, more and truer results in bench/bench_trees.py) or ``"paper"``
    (§3.5)."""

    _kind: TreeKind = "pair"

    def __init__(
        self,
        *,
        in_trees: int | None = None,
        omega: float = 0.1,
        iterations: int = DEFAULT_TREE_ITERATIONS,
        pair_score: TreePairScore = "gain",
        **parameters: Unpack[TreeMinerParameters],
    ) -> None:
        super().__init__(**parameters)
        self.in_trees = in_trees
        self.omega = omega
        self.iterations = iterations
        self.pair_score = pair_score

    def _check_params(self) -> None:
        super()._check_params()
        if not 0 < self.omega < 1:
            raise ParameterError(f"omega must be in (0, 1), got {self.omega!r}")
        if self.pair_score not in get_args(TreePairScore):
            raise ParameterError(f"pair_score must be 'paper' or 'gain', got {self.pair_score!r}")
        _check_iterations(self.iterations)

    def _releases(self) -> int:
        """One leaf-count release per sampled pair: InTr."""
        return self.settings_.rounds

    def _given_rounds(self) -> int | None:
        return self.in_trees

    def _auto_omega(self) -> float:
        return self.omega

    def _paper_settings(self, depth: int, min_support: float, max_clauses: int) -> TreeSettings:
        """InTr = 4 unless given; per iteration ω·E/InTr for the pair, (1 − ω)·E/InTr for its
        leaf counts (§3.7), E = ε, or on a zCDP dataset the E whose calls cost ρ."""
        rounds = self.in_trees or 4
        omega = Fraction(repr(self.omega))
        pair, leaf = omega / rounds, (1 - omega) / rounds
        budget = self._paper_budget(
            [(self._tree_rho(depth), float(pair)), (GENERIC_RHO, float(leaf))] * rounds
        )
        return TreeSettings(
            "paper",
            depth,
            rounds,
            share_of(budget, pair),
            share_of(budget, leaf),
            min_support,
            max_clauses,
        )

    def _pair_request(self, attribute: str) -> TreePairMCMCRequest:
        return TreePairMCMCRequest(
            attribute=attribute,
            bins=self.target_bins,
            depth=self.settings_.depth,
            iterations=self.iterations,
            epsilon=self.settings_.tree_epsilon,
            columns=self._allowed,
            pair_score=self.pair_score,
        )

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        schema = dataset.schema
        self.settings_ = self._settle(schema, None)
        settings = self.settings_
        self._allowed = self.columns_for(schema)
        left = _placeholder_tree(schema, "left", settings.depth, self._allowed)
        right = _placeholder_tree(schema, "right", settings.depth, self._allowed)
        calls: list[PlannedCall] = self._count_calls()
        for attribute in self._attribute_draws(schema, settings.rounds):
            calls.append(TREE_PAIR_MCMC.plan(self._pair_request(attribute)))
            counts = self._counts_request(left, right, settings.leaf_epsilon)
            calls.append(TREE_LEAF_COUNTS.plan(counts))
        return calls

    def mine(self, dataset: DatasetHandle) -> Self:
        """Run InTr tree-pair iterations; returns self (results in ``redescriptions_``)."""
        self._start(dataset)
        settings = self.settings_
        with self._progress(2 * settings.rounds, "MCMCTreePair") as advance:

            def sample(attribute: str, iteration: _Iteration) -> None:
                pair = self._charged(dataset, self._pair_request(attribute), iteration)
                iteration.receipts.append(pair.receipt)
                advance()
                trees = (pair.left_tree, pair.right_tree)
                self._release_counts(dataset, trees, settings.leaf_epsilon, iteration)
                advance()

            attributes = self._attribute_draws(dataset.schema, settings.rounds)
            self._run_iterations(dataset, attributes, sample)
        return self
