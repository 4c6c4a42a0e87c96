"""The private layered tree miner ``DPLayeredTrees`` (issue #26 item 1; ALGORITHMS.md §3.2–§3.7).

Each of ``in_trees`` seeds is a one-literal query on one view, drawn with the miner's own
generator (public, as AltExpM draws its first target): ``[a]`` for a Boolean attribute,
``[a = c]`` with c drawn uniformly for a categorical one, ``[a <= m]`` with m the midpoint of the
public lattice for a numeric one. It is the left leaf of a public one-split tree. Then, for
``layers`` public layers, alternating views:

1. ``tree.expmech`` grows a tree on the other view with target ``QueryTarget(current query)``:
   class 1 for the rows the query holds (the server labels them; nothing but the tree is
   released);
2. ``tree.leaf_counts`` releases the noisy partition of (the current query's tree, the new tree)
   (scale 1/ε per cell, every row in one cell);
3. the new query is the disjunction of the new tree's leaves whose noisy positive share (the
   current query's cells in that leaf's column, over the whole column) is above 1/2
   (:func:`layer_query`): post-processing of the release. The pair (current query, new query)
   is a candidate redescription, and the new query is the next layer's target.

ε, preset ``"paper"`` (the default): every call of a run gets ε / (InTr·2·layers) (the equal
split of §3.7, one tree and one leaf-count release per layer), InTr = 4, layers = 4 and depth 3
(the paper's k = 4 and maxTreeDepth, §3.8), and every layer's release is examined.

Preset ``"auto"`` (issue #26): fewer, stronger calls. It buys a noisy row count n̂ and
:func:`~dpmine.miners.tree_auto.auto_layered` chooses the seeds s, layers L and depth from ε, n̂
and the schema's units (given ``in_trees``, ``layers``, ``depth`` win). The releases of layers
1 … L − 1 are *steering* releases: bought at the price that makes a leaf's noisy positive sum
reliable (:func:`~dpmine.miners.tree_auto.steer_epsilon`), used only to choose the next query and
never examined. Only the last layer's release is examined, with most of the budget: its layer
candidate and the partition's own search of §3.6 (:func:`~dpmine.treereds.examine_partition`,
as the alternations). Privacy is unchanged: every release is a charged ``tree.leaf_counts`` or
``tree.expmech`` call; what is examined is a public choice fixed before the run; the union
bound then runs over the R = s examined releases only (:meth:`DPLayeredTrees._releases`).
``order`` picks the declared candidate rule (``"seeds"`` A, ``"layers"`` B, ``"strong"`` C, the
default: over mammals, asia, stroke and heart at ε ∈ {0.5, 1}, 5 runs each, C showed results in
7 of the 8 cells and 89 in all, A in 4 (79), B in 5 (59), every shown result truly significant;
bench/README.md).
``plan()`` lists every call first, priced at the public n_max.

``query_rule`` picks how a layer's new query is chosen from its released partition.
``"majority"`` (the default, LayeredT's rule): the leaves whose noisy positive share is above
1/2 (:func:`layer_query`). ``"jaccard"``: the set of leaves with the largest noisy Jaccard
with the target query whose noisy support is at most ``max_support_fraction`` of the noisy
total (:func:`jaccard_query`). Why: a diagnostic run (mammals, ε = 1, 3 runs of 4 expmech seeds
of 3 layers at depth 2) ended 7 of 12 chains on a query holding every row (or none): once
the target holds most rows, every leaf's share is above 1/2 and the majority rule takes them
all, a redescription the final filters must drop. Both rules are post-processing of the
release. Candidates declared before they were measured (``bench/bench_trees.py``): E =
``order="strong"``, ``seed_rule="expmech"``, ``query_rule="jaccard"``; F = E with
``order="seeds"``; G = E with ``seed_rule="uniform"``. The rule: the candidate with the
most shown results over mammals, asia, stroke and heart at ε ∈ {0.5, 1} (5 runs each)
becomes the auto default if it shows at least as many as C on mammals and asia together
and at a median true J no lower; otherwise C stays. Measured (bench/README.md): the rule
picks G (105 shown over the eight cells against C's 76; mammals and asia 102 at median true J
0.69 against 57 at 0.64), but G shows nothing on stroke (C: 5 and 5 in 5 runs), which breaks
the issue's guard on the weak tables, so ``"majority"`` stays the default.

``final_release="pair"`` (preset ``auto`` only): every layer's ``tree.leaf_counts`` release
steers, and each seed ends with one ``red.compute_quality`` release (cells mode) of its last
pair of queries, the seed's only result (:meth:`DPLayeredTrees._pair_result`). Why: the boxes of
the significance test on a partition release sum up to (2^d + 1)² cells per statistic at the
miss α/(R·4·L²), L up to 2^(2^d) leaf sets (mammals, ε = 1: results of true J 0.62 and p 4e-7
not shown); a pair release has one noise term per cell at the miss α/(4·R), so it is priced
(:func:`~dpmine.miners.tree_auto.pair_epsilon`) far below a partition's final release and
leaves budget for more seeds. Privacy: one more charged call per seed, on a pair of queries
chosen from earlier releases (post-processing); the union bound runs over the 4·R cells of the
R = s pair releases. Candidates declared before they were measured: H = ``"pair"``,
``query_rule="jaccard"``, ``seed_rule="expmech"``, ``order="seeds"``; I = H with
``seed_rule="uniform"``; judged by the rule of E–G above. Measured: H 19 and I 11 shown
over the eight cells (one result per seed, about 4 seeds fit at ε = 1), at the highest
median true J on asia (0.79): an option, not the default.

``seed_rule="expmech"`` (candidate D, either preset): each seed is a private depth-1
``tree.expmech`` on the other view than a drawn attribute, with that attribute as target; its
left leaf is the seed query. One more charged tree draw per seed, in the plan and the split; the
draw is the alternations' first tree at depth 1, so its privacy is that of §3.3.

Statistics, intervals and filters are those of the other tree miners: each candidate's figures
are sums of cells of its layer's partition (its two queries are positive disjunctions of
leaves, so a query's text holds exactly the rows of its leaves' cells, missing values
included), the final filters of §3.6 (:func:`dpmine.treereds.passes_final_filters`), the
duplicates dropped across layers and the noise-aware significance test. The union bound of a
release runs over every non-empty set of leaves of each tree (``max_clauses`` = the leaves,
:func:`~dpmine.miners.trees.release_miss`), a superset of the queries the rule can pick.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Self, Unpack, get_args

import numpy as np

from dpmine.connection import DatasetHandle
from dpmine.errors import ParameterError
from dpmine.miners._rho import GENERIC_RHO
from dpmine.miners.tree_auto import (
    LAYERED_DEPTHS,
    LAYERED_LAYERS,
    LAYERED_SEEDS,
    LayeredOrder,
    auto_layered,
)
from dpmine.miners.trees import (
    SUMS_PER_QUERY_PAIR,
    MinedTreeRedescription,
    TreeMinerParameters,
    TreeSettings,
    _Alternation,
    _Iteration,
    _nano_floor,
    _other,
    _placeholder_tree,
    _planned,
    _ReleasedPair,
    _view_of,
    leaf_paths,
    release_miss,
    released_noise,
    result_table,
    share_of,
    simplified_leaf_paths,
)
from dpmine.significance import ALPHA
from dpmine.treereds import (
    DEFAULT_MAX_CLAUSES,
    LeafQuery,
    TreeRedescription,
    examine_partition,
    jaccard_standard_error,
    noisy_statistics,
    partition_counts,
    passes_final_filters,
    render_query,
)
from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    ComputeQualityRequest,
    ComputeQualityResponse,
    CountNoiseKind,
    DatasetMetadata,
    DecisionTree,
    NumericAttribute,
    PlannedCall,
    QueryTarget,
    Redescription,
    TreeExpMechRequest,
    TreeSplit,
    TreeTargetSpec,
    View,
)
from dpmine.wire.operations import RED_COMPUTE_QUALITY, TREE_LEAF_COUNTS
from dpmine.wire.queries import check_query_limits

#: How a layer's new query is chosen from its release: ``"majority"`` the leaves of noisy
#: positive share above 1/2 (:func:`layer_query`), ``"jaccard"`` the best noisy Jaccard with
#: the target within the support bound (:func:`jaccard_query`).
QueryRule = Literal["majority", "jaccard"]

#: How a seed is chosen: ``"uniform"`` a drawn one-literal seed, ``"expmech"`` a private depth-1
#: tree on a drawn target (:meth:`DPLayeredTrees._seed_request`).
SeedRule = Literal["uniform", "expmech"]

#: What a seed's results are measured on: ``"partition"`` its last layer's released partition
#: (every set of leaves a candidate), ``"pair"`` one release of the four cells of its last pair
#: of queries (:meth:`DPLayeredTrees._pair_result`).
FinalRelease = Literal["partition", "pair"]

__all__ = [
    "DEFAULT_LAYERS",
    "DPLayeredTrees",
    "FinalRelease",
    "LayeredLayout",
    "QueryRule",
    "SeedRule",
    "jaccard_query",
    "layer_query",
    "pair_noise",
    "positive_shares",
    "seed_tree",
]

#: Layers per seed and seeds per run of the default preset: the paper's k = 4 (§3.7).
DEFAULT_LAYERS = 4
DEFAULT_SEEDS = 4


def seed_tree(schema: DatasetMetadata, attribute: str, rng: np.random.Generator) -> DecisionTree:
    """The public one-split tree of a seed whose left leaf is the seed query: ``[a]``, ``[a = c]``
    (c drawn uniformly by ``rng``) or ``[a <= m]`` with m the lattice midpoint lo + (hi − lo)/2,
    computed as the server's public lattice computes its points (so m is one of them)."""
    spec = next(a for a in schema.attributes if a.name == attribute)
    view = _view_of(schema, attribute)
    if isinstance(spec, NumericAttribute):
        midpoint = spec.lo + ((spec.hi / 2.0 - spec.lo / 2.0) * 0.5) * 2.0
        split = TreeSplit(attribute=attribute, threshold=midpoint)
    elif isinstance(spec, CategoricalAttribute):
        category = spec.categories[int(rng.integers(len(spec.categories)))]
        split = TreeSplit(attribute=attribute, category=category)
    elif isinstance(spec, BooleanAttribute):
        split = TreeSplit(attribute=attribute)
    else:  # pragma: no cover - the schema's attribute kinds are the three above
        raise ParameterError(f"attribute {attribute!r} cannot seed a layered run")
    return DecisionTree(view=view, depth=1, splits=[split])


def positive_shares(
    partition: Sequence[Sequence[int]], target: Collection[int], *, new_view: View
) -> list[float]:
    """Per leaf of the new tree, the noisy share of its rows that the target query holds.

    ``partition`` is a released (a + 1) × (b + 1) partition (rows: the left tree, last row and
    column: the rows outside a tree); ``target`` the cells of the query over the other tree;
    ``new_view`` the view of the new tree (its leaves are the columns when it is "right").
    Share of leaf j: Σ_{i ∈ target} P[i][j] / Σ_i P[i][j] (0 when that noisy total is ≤ 0).
    Post-processing of the release only."""
    rows = [list(row) for row in partition]
    if new_view == "left":
        rows = [list(column) for column in zip(*rows, strict=True)]
    shares = []
    for leaf in range(len(rows[0]) - 1):
        total = sum(row[leaf] for row in rows)
        positive = sum(rows[i][leaf] for i in target)
        shares.append(positive / total if total > 0 else 0.0)
    return shares


def layer_query(shares: Sequence[float], empty: Collection[int] = ()) -> LeafQuery:
    """The next query: the disjunction of the leaves whose noisy positive share is above 1/2,
    leaves that are empty on every dataset (contradictory paths) left out. When no leaf is
    above 1/2, the leaf of the largest share (the lowest index on ties), so that the next layer
    has a target: a public rule on released values, the number of calls never changes."""
    usable = [leaf for leaf in range(len(shares)) if leaf not in empty]
    if not usable:
        raise ValueError("every leaf of the tree is empty: it has no query")
    chosen = [leaf for leaf in usable if shares[leaf] > 0.5]
    if not chosen:
        chosen = [max(usable, key=lambda leaf: (shares[leaf], -leaf))]
    return LeafQuery.of(*((leaf, True) for leaf in chosen))


def jaccard_query(
    partition: Sequence[Sequence[int]],
    target: Collection[int],
    *,
    new_view: View,
    empty: Collection[int] = (),
    max_fraction: float = 1.0,
) -> LeafQuery:
    """The next query under ``query_rule="jaccard"``: the disjunction of new-tree leaves with
    the largest noisy Jaccard with the target query, among those whose noisy support is at most
    ``max_fraction`` of the release's noisy total.

    ``partition``, ``target`` and ``new_view`` are those of :func:`positive_shares`; leaf j has
    the noisy positive sum p_j (the target's cells in its column) and total t_j; T is the
    target's noisy size (its rows of the partition, every column) and N the sum of every cell.
    A set S has I = Σ_S p_j, support Σ_S t_j and J = I / (T + Σ_S t_j − I). Without the
    support bound (and with positive totals) a set of largest J is a prefix of the leaves
    sorted by share p_j / t_j: J(S) ≥ λ exactly when Σ_S (p_j − λ·(t_j − p_j)) ≥ λ·T, and at
    the optimal λ the left side is largest on the leaves of share above λ / (1 + λ)
    (Dinkelbach's argument). So the rule scans the prefixes of that order (ties: the lower
    index first) and keeps the best admissible one (a later prefix only on a strictly larger
    J); with the bound, or noisy non-positive totals, that is a public heuristic. No prefix
    admissible, or no positive J: the leaf of the largest share, so that the next layer has a
    target. Leaves that are empty on every dataset are left out. Post-processing of the
    release: it reads released values and public options only, and the number of calls never
    changes."""
    rows = [list(row) for row in partition]
    if new_view == "left":
        rows = [list(column) for column in zip(*rows, strict=True)]
    leaves = len(rows[0]) - 1
    usable = [leaf for leaf in range(leaves) if leaf not in empty]
    if not usable:
        raise ValueError("every leaf of the tree is empty: it has no query")
    totals = [sum(row[leaf] for row in rows) for leaf in range(leaves)]
    positives = [sum(rows[i][leaf] for i in target) for leaf in range(leaves)]
    shares = [positives[j] / totals[j] if totals[j] > 0 else 0.0 for j in range(leaves)]
    size = sum(sum(rows[i]) for i in target)
    bound = max_fraction * sum(sum(row) for row in rows)
    ordered = sorted(usable, key=lambda leaf: (-shares[leaf], leaf))
    best: tuple[float, int] | None = None  # (J, prefix length)
    inter = support = 0
    for length, leaf in enumerate(ordered, start=1):
        inter, support = inter + positives[leaf], support + totals[leaf]
        union = size + support - inter
        if support > bound or union <= 0:
            continue
        jaccard = inter / union
        if jaccard > 0 and (best is None or jaccard > best[0]):
            best = (jaccard, length)
    chosen = ordered[: best[1]] if best is not None else ordered[:1]
    return LeafQuery.of(*((leaf, True) for leaf in sorted(chosen)))


def pair_noise(response: ComputeQualityResponse, epsilon: float) -> tuple[CountNoiseKind, float]:
    """(kind, scale) of each cell of a pair release bought with ``epsilon``: discrete Laplace
    of scale 1/ε when the release reports Laplace or nothing, else the reported discrete
    Gaussian's σ, which must be at least 1/ε (a smaller one would narrow the intervals)."""
    noise = response.noise
    if noise is None or noise.kind == "laplace":
        return "laplace", 1.0 / epsilon
    if not noise.scale >= (1.0 / epsilon) * (1.0 - 1e-9):
        raise ParameterError(f"the reported noise scale {noise.scale} is below {1 / epsilon} at ε")
    return noise.kind, noise.scale


@dataclass(frozen=True)
class LayeredLayout:
    """A run's shape: seeds and layers, the ε of each steering release (layers 1 … L − 1) and
    whether every layer's release is examined (preset ``paper``) or only the last (``auto``:
    the steering releases only choose the next query)."""

    seeds: int
    layers: int
    steer_epsilon: float
    examine_every_layer: bool
    #: ``final_release="pair"``: every layer's release steers, each seed ends with a pair
    #: release of its last two queries.
    pair_final: bool = False

    def release_epsilon(self, layer: int, final_epsilon: float) -> float:
        """ε of the leaf-count release of ``layer`` (0-based)."""
        if self.pair_final:
            return self.steer_epsilon
        last = layer == self.layers - 1
        return final_epsilon if last or self.examine_every_layer else self.steer_epsilon

    def examined(self, layer: int) -> bool:
        """Whether the release of ``layer`` is examined for results."""
        if self.pair_final:
            return False
        return self.examine_every_layer or layer == self.layers - 1


class DPLayeredTrees(_Alternation):
    """Private layered trees (module docstring): ``in_trees`` seeds, ``layers`` layers each of
    one ``tree.expmech`` with a query target and one ``tree.leaf_counts`` release."""

    def __init__(
        self,
        *,
        layers: int | None = None,
        in_trees: int | None = None,
        order: LayeredOrder = "strong",
        seed_rule: SeedRule = "uniform",
        query_rule: QueryRule = "majority",
        final_release: FinalRelease = "partition",
        **parameters: Unpack[TreeMinerParameters],
    ) -> None:
        super().__init__(in_trees=DEFAULT_SEEDS if in_trees is None else in_trees, **parameters)
        #: The seeds the caller gave (None: the preset's); ``in_trees`` is then the paper's 4.
        self.given_seeds = in_trees
        self.layers = layers
        self.order = order
        self.seed_rule = seed_rule
        self.query_rule = query_rule
        self.final_release = final_release

    def _tree_request(self, view: View, target: TreeTargetSpec) -> TreeExpMechRequest:
        return self._expmech_request(view, target)

    def _releases(self) -> int:
        """R: the examined releases (every layer's under ``paper``, the last under ``auto``,
        the pair release under ``final_release="pair"``)."""
        layout = self.layout_
        if layout.pair_final:
            return layout.seeds
        return layout.seeds * (layout.layers if layout.examine_every_layer else 1)

    def _given_rounds(self) -> int | None:
        return self.layers

    def _check_params(self) -> None:
        super()._check_params()
        if self.layers is not None and (
            not isinstance(self.layers, int) or isinstance(self.layers, bool) or self.layers < 1
        ):
            raise ParameterError(
                f"layers must be a whole number of at least 1, got {self.layers!r}"
            )
        if self.order not in get_args(LayeredOrder):
            raise ParameterError(f"order must be 'seeds', 'layers' or 'strong', got {self.order!r}")
        if self.seed_rule not in get_args(SeedRule):
            raise ParameterError(
                f"seed_rule must be 'uniform' or 'expmech', got {self.seed_rule!r}"
            )
        if self.query_rule not in get_args(QueryRule):
            raise ParameterError(
                f"query_rule must be 'majority' or 'jaccard', got {self.query_rule!r}"
            )
        if self.final_release not in get_args(FinalRelease):
            raise ParameterError(
                f"final_release must be 'partition' or 'pair', got {self.final_release!r}"
            )
        if self.final_release == "pair" and self.preset != "auto":
            raise ParameterError(
                "final_release='pair' needs preset='auto' (its plan prices the pair releases); "
                "use preset='auto' or final_release='partition'"
            )
        if self.leaf_release != "partition":
            raise ParameterError(
                "DPLayeredTrees needs leaf_release='partition' (its queries' statistics count "
                f"the rows outside a tree), got {self.leaf_release!r}"
            )

    def _paper_settings(self, depth: int, min_support: float, max_clauses: int) -> TreeSettings:
        """E / (InTr·2·layers) for every tree and leaf-count call (one of each per layer), E = ε
        or on a zCDP dataset the E whose calls cost ρ (``_paper_budget``)."""
        seeds, layers = self.given_seeds or DEFAULT_SEEDS, self.layers or DEFAULT_LAYERS
        share = Fraction(1, seeds * (2 * layers + self._seed_draws()))
        calls = [(self._tree_rho(depth), float(share))] * (seeds * layers)
        calls += [(self._tree_rho(1), float(share))] * (seeds * self._seed_draws())
        calls += [(GENERIC_RHO, float(share))] * (seeds * layers)
        unit = share_of(self._paper_budget(calls), share)
        self.layout_ = LayeredLayout(seeds, layers, unit, examine_every_layer=True)
        return TreeSettings("paper", depth, layers, unit, unit, min_support, max_clauses)

    def _settle(self, schema: DatasetMetadata, n_hat: float | None) -> TreeSettings:
        """``paper``: the equal split; ``auto``: :func:`~dpmine.miners.tree_auto.auto_layered`
        at n̂ (None: the public n_max, for pricing); given seeds, layers and depth win."""
        if self.preset != "auto":
            return super()._settle(schema, n_hat)
        self._check_params()
        count = self._auto_count_epsilon()
        auto = auto_layered(
            self._after_count(count),
            float(schema.n_max) if n_hat is None else n_hat,
            log_units=self._log_units(schema),
            order=self.order,
            seeds=LAYERED_SEEDS if self.given_seeds is None else (self.given_seeds,),
            layers=LAYERED_LAYERS if self.layers is None else (self.layers,),
            depths=LAYERED_DEPTHS if self.depth is None else (self.depth,),
            seed_draws=self._seed_draws(),
            pair=self.final_release == "pair",
            composition=self._unit,
        )
        self.layout_ = LayeredLayout(
            auto.seeds,
            auto.layers,
            _nano_floor(auto.steer_epsilon),
            examine_every_layer=False,
            pair_final=self.final_release == "pair",
        )
        return TreeSettings(
            preset="auto",
            depth=auto.depth,
            rounds=auto.layers,
            tree_epsilon=_nano_floor(auto.tree_epsilon),
            leaf_epsilon=_nano_floor(auto.final_epsilon),
            min_support=self.min_support if self.min_support is not None else auto.min_support,
            max_clauses=self.max_clauses or DEFAULT_MAX_CLAUSES,
            count_epsilon=count,
            auto=auto,
            provisional=n_hat is None,
        )

    def _seed_draws(self) -> int:
        """Tree draws per seed before its layers: 1 under ``seed_rule="expmech"``, else 0."""
        return 1 if self.seed_rule == "expmech" else 0

    def _seeds(self, schema: DatasetMetadata) -> list[DecisionTree | str]:
        """Per seed, its public one-split tree (``"uniform"``: the miner's generator and the
        schema) or the drawn attribute whose depth-1 private tree will be the seed
        (``"expmech"``, :meth:`_seed_request`)."""
        attributes = self._attribute_draws(schema, self.layout_.seeds)
        if self.seed_rule == "expmech":
            return list(attributes)
        rng = np.random.default_rng(None if self.seed is None else (self.seed, 1))
        return [seed_tree(schema, attribute, rng) for attribute in attributes]

    def _seed_request(self, schema: DatasetMetadata, attribute: str) -> TreeExpMechRequest:
        """A selected seed (candidate D): ``tree.expmech`` of depth 1 on the other view than
        the drawn ``attribute`` with that attribute as target, so the seed's split is chosen
        privately for how well it predicts something on the other side (§3.3, the
        alternations' first tree at depth 1); its left leaf is the seed query."""
        return TreeExpMechRequest(
            view=_other(_view_of(schema, attribute)),
            target=self._target(attribute),
            depth=1,
            epsilon=self.settings_.tree_epsilon,
            columns=self._allowed,
        )

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        schema = dataset.schema
        self.settings_ = self._settle(schema, None)
        self._allowed = self.columns_for(schema)
        layout, depth = self.layout_, self.settings_.depth
        placeholder = {
            view: _placeholder_tree(schema, view, depth, self._allowed)
            for view in ("left", "right")
        }
        calls: list[PlannedCall] = self._count_calls()
        for seed in self._seeds(schema):
            if isinstance(seed, str):
                request = self._seed_request(schema, seed)
                calls.append(_planned(request))
                fixed = _placeholder_tree(schema, request.view, 1, self._allowed)
            else:
                fixed = seed
            for layer in range(layout.layers):
                view = _other(fixed.view)
                target = QueryTarget(
                    query=render_query(LeafQuery.of((0, True)), leaf_paths(fixed, schema))
                )
                calls.append(_planned(self._tree_request(view, target)))
                left, right = sorted((fixed, placeholder[view]), key=lambda t: t.view != "left")
                epsilon = layout.release_epsilon(layer, self.settings_.leaf_epsilon)
                calls.append(TREE_LEAF_COUNTS.plan(self._counts_request(left, right, epsilon)))
                fixed = placeholder[view]
            if layout.pair_final:
                pair = Redescription(
                    left=render_query(
                        LeafQuery.of((0, True)), leaf_paths(placeholder["left"], schema)
                    ),
                    right=render_query(
                        LeafQuery.of((0, True)), leaf_paths(placeholder["right"], schema)
                    ),
                )
                calls.append(RED_COMPUTE_QUALITY.plan(self._pair_request(pair)))
        return calls

    def _pair_request(self, pair: Redescription) -> ComputeQualityRequest:
        """The final pair release of a seed: the four noisy cells of ``pair`` (scale 1/ε)."""
        return ComputeQualityRequest(
            redescription=pair, epsilon=self.settings_.leaf_epsilon, mode="cells"
        )

    def mine(self, dataset: DatasetHandle) -> Self:
        """Run the layers of every seed; returns self (results in ``redescriptions_``)."""
        self._start(dataset)
        schema = dataset.schema
        layout = self.layout_
        self._layer_queries: dict[int, tuple[LeafQuery, LeafQuery]] = {}
        #: Per examined released pair, the layer's (left, right) queries over its trees.
        self.queries_: list[tuple[LeafQuery, LeafQuery]] = []
        #: Per seed index, its final pair and that pair's release (``final_release="pair"``).
        pairs: dict[int, tuple[Redescription, ComputeQualityResponse]] = {}
        steps = layout.seeds * (2 * layout.layers + self._seed_draws() + layout.pair_final)
        with self._progress(steps, "DPLayeredTrees") as advance:

            def run_layers(indexed: tuple[int, DecisionTree | str], iteration: _Iteration) -> None:
                index, seed = indexed
                if isinstance(seed, str):
                    drawn = self._charged(dataset, self._seed_request(schema, seed), iteration)
                    iteration.receipts.append(drawn.receipt)
                    seed = drawn.tree
                    advance()
                fixed, query = seed, LeafQuery.of((0, True))
                for layer in range(layout.layers):
                    paths = simplified_leaf_paths(fixed, schema)
                    target = QueryTarget(query=render_query(query, paths))
                    new = self._tree(dataset, _other(fixed.view), target, iteration)
                    advance()
                    epsilon = layout.release_epsilon(layer, self.settings_.leaf_epsilon)
                    self._release_counts(dataset, (fixed, new), epsilon, iteration)
                    advance()
                    released = iteration.pairs[-1]
                    new_query = self._next_query(released, query, new, schema)
                    if layout.examined(layer):
                        queries = (query, new_query) if fixed.view == "left" else (new_query, query)
                        self._layer_queries[id(released)] = queries
                    last = ((fixed, query), (new, new_query))
                    fixed, query = new, new_query
                if layout.pair_final:
                    pair = self._final_pair(last, schema)
                    if pair is not None:
                        response = self._charged(dataset, self._pair_request(pair), iteration)
                        iteration.receipts.append(response.receipt)
                        pairs[index] = (pair, response)
                    advance()

            self._run_iterations(dataset, list(enumerate(self._seeds(schema))), run_layers)
        for index in sorted(pairs):
            result = self._pair_result(*pairs[index], round_=(index + 1) * layout.layers - 1)
            if result is not None:
                self._keep_new([result])
        return self

    @staticmethod
    def _final_pair(
        last: tuple[tuple[DecisionTree, LeafQuery], tuple[DecisionTree, LeafQuery]],
        schema: DatasetMetadata,
    ) -> Redescription | None:
        """A seed's last pair of queries as text, left view first; None (no release) when a
        query has no rows to print or exceeds the public query limits: a choice made on
        released values and public limits only, so skipping the call is post-processing."""
        texts = {}
        for tree, query in last:
            try:
                text = render_query(query, simplified_leaf_paths(tree, schema))
                check_query_limits(text)
            except ValueError:
                return None
            texts[tree.view] = text
        return Redescription(left=texts["left"], right=texts["right"])

    def _pair_result(
        self, pair: Redescription, response: ComputeQualityResponse, *, round_: int
    ) -> MinedTreeRedescription | None:
        """A seed's result from its pair release (``final_release="pair"``): the four released
        cells are the partition [[E11, E10], [E01, E00]] of the two queries, so the statistics,
        the table and the standard error are those of a partition release of two one-leaf
        trees; the final filters of §3.6 on the clamped statistics (no tautology: each query
        was printed). Its box: each cell one noise term, D = E10 + E01 two, E11 − D three and
        E11 + E00 − D four, at the miss α/(7·R), R = the seeds, so the seven ranges of all R
        pair releases hold together with probability ≥ 1 − α (union bound over 7·R sums).
        ``round_``: the index in ``trees_`` of the seed's last steering release (seed i's
        layers are releases i·L … i·L + L − 1).
        Post-processing of the release."""
        cells = response.cells
        values = (cells.e11, cells.e10, cells.e01, cells.e00)
        assert all(v is not None for v in values), "the cells mode was asked for"
        e11, e10, e01, e00 = (int(v or 0) for v in values)
        partition = [[e11, e10], [e01, e00]]
        counts = partition_counts(partition)
        leaf = LeafQuery.of((0, True))
        red = TreeRedescription(leaf, leaf, noisy_statistics(counts, leaf, leaf))
        self.examined_ += 1
        stats, settings = red.statistics, self.settings_
        bound = self.max_support_fraction * max(stats.n_rows, 0.0)
        if not (
            stats.jaccard >= self.min_jaccard
            and stats.p_value <= self.p_max
            and settings.min_support <= stats.intersection <= bound
            and stats.support_left < bound
            and stats.support_right < bound
        ):
            return None
        kind, scale = pair_noise(response, settings.leaf_epsilon)
        table = result_table(red, partition, (1, 1), partition=True)
        releases = self._releases()
        return MinedTreeRedescription(
            redescription=pair,
            statistics=red.statistics,
            noise_scale=scale,
            round=round_,
            jaccard_error=jaccard_standard_error(red, 1, 1, scale, partition=True, noise=kind),
            noisy_cells=table[0],
            cell_terms=table[1],
            sum_miss=ALPHA / releases / SUMS_PER_QUERY_PAIR,
            joint_level=1.0 - ALPHA / releases,
            noise=kind,
        )

    def _next_query(
        self,
        released: _ReleasedPair,
        query: LeafQuery,
        new: DecisionTree,
        schema: DatasetMetadata,
    ) -> LeafQuery:
        """The new tree's query on the pair's released partition: :func:`layer_query`
        (``query_rule="majority"``) or :func:`jaccard_query` (``"jaccard"``)."""
        partition = released.counts.partition
        assert partition is not None, "the partition release was asked for"
        paths = simplified_leaf_paths(new, schema)
        empty = [leaf for leaf, path in enumerate(paths) if path is None]
        if self.query_rule == "jaccard":
            return jaccard_query(
                partition,
                query.used_leaves,
                new_view=new.view,
                empty=empty,
                max_fraction=self.max_support_fraction,
            )
        shares = positive_shares(partition, query.used_leaves, new_view=new.view)
        return layer_query(shares, empty)

    def _extract(
        self, schema: DatasetMetadata, released: _ReleasedPair
    ) -> list[MinedTreeRedescription]:
        """An examined layer's results from its released partition: its candidate (its two
        queries) and, under ``auto``, the partition's own search (§3.6, as the alternations);
        statistics, the final filters of §3.6 and the joint intervals (post-processing, free).
        A steering release is recorded (``trees_``) and yields nothing."""
        left, right, partition = released.left, released.right, released.counts.partition
        assert partition is not None, "the partition release was asked for"
        self.trees_.append((left, right))
        self.leaf_counts_.append(released.counts)
        queries = self._layer_queries.get(id(released))
        if queries is None:
            return []
        self.queries_.append(queries)
        counts = partition_counts(partition)
        left_paths = simplified_leaf_paths(left, schema)
        right_paths = simplified_leaf_paths(right, schema)
        empty = (
            [leaf for leaf, path in enumerate(left_paths) if path is None],
            [leaf for leaf, path in enumerate(right_paths) if path is None],
        )
        settings = self.settings_
        filters = {
            "min_supp": settings.min_support,
            "max_supp_fraction": self.max_support_fraction,
            "min_jaccard": self.min_jaccard,
            "p_max": self.p_max,
        }
        layer = TreeRedescription(*queries, noisy_statistics(counts, *queries))
        found = (
            [layer]
            if passes_final_filters(
                layer, counts, **filters, empty_left=empty[0], empty_right=empty[1]
            )
            else []
        )
        self.examined_ += 1
        if not self.layout_.examine_every_layer:
            searched, examined = examine_partition(
                partition,
                **filters,
                max_clauses=settings.max_clauses,
                empty_left=empty[0],
                empty_right=empty[1],
            )
            found += searched
            self.examined_ += examined
        shape = (left.n_leaves, right.n_leaves)
        miss = release_miss(shape, max(shape), self._releases())
        return [
            self._result_of(
                red,
                left_paths,
                right_paths,
                noise=released_noise(released.counts, released.epsilon),
                shape=shape,
                partition=True,
                table=result_table(red, partition, shape, partition=True),
                miss=miss,
            )
            for red in found
        ]
