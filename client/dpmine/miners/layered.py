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

ε: every call of a run gets ε / (InTr·2·layers) (the paper preset's equal split of §3.7, one tree
and one leaf-count release per layer); ``plan()`` lists every call first. Defaults: InTr = 4,
layers = 4 and depth 3, the paper's k = 4 and maxTreeDepth (§3.8); only preset ``"paper"``.

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
from fractions import Fraction
from typing import Self, Unpack

import numpy as np

from dpmine.connection import DatasetHandle
from dpmine.errors import ParameterError
from dpmine.miners.trees import (
    MinedTreeRedescription,
    TreeMinerParameters,
    TreeSettings,
    _Alternation,
    _Iteration,
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
from dpmine.treereds import (
    LeafQuery,
    TreeRedescription,
    noisy_statistics,
    partition_counts,
    passes_final_filters,
    render_query,
)
from dpmine.wire import (
    BooleanAttribute,
    CategoricalAttribute,
    DatasetMetadata,
    DecisionTree,
    NumericAttribute,
    PlannedCall,
    QueryTarget,
    TreeExpMechRequest,
    TreeSplit,
    TreeTargetSpec,
    View,
)
from dpmine.wire.operations import TREE_LEAF_COUNTS

__all__ = ["DEFAULT_LAYERS", "DPLayeredTrees", "layer_query", "positive_shares", "seed_tree"]

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


class DPLayeredTrees(_Alternation):
    """Private layered trees (module docstring): ``in_trees`` seeds, ``layers`` layers each of
    one ``tree.expmech`` with a query target and one ``tree.leaf_counts`` release."""

    def __init__(
        self,
        *,
        layers: int = DEFAULT_LAYERS,
        in_trees: int = DEFAULT_SEEDS,
        **parameters: Unpack[TreeMinerParameters],
    ) -> None:
        super().__init__(in_trees=in_trees, **parameters)
        self.layers = layers

    def _tree_request(self, view: View, target: TreeTargetSpec) -> TreeExpMechRequest:
        return self._expmech_request(view, target)

    def _check_params(self) -> None:
        super()._check_params()
        if not isinstance(self.layers, int) or isinstance(self.layers, bool) or self.layers < 1:
            raise ParameterError(
                f"layers must be a whole number of at least 1, got {self.layers!r}"
            )
        if self.preset != "paper":
            raise ParameterError(
                "DPLayeredTrees has one preset, 'paper' (an equal ε split over its calls): "
                f"use preset='paper', got {self.preset!r}"
            )
        if self.leaf_release != "partition":
            raise ParameterError(
                "DPLayeredTrees needs leaf_release='partition' (its queries' statistics count "
                f"the rows outside a tree), got {self.leaf_release!r}"
            )

    def _paper_settings(self, depth: int, min_support: float, max_clauses: int) -> TreeSettings:
        """ε / (InTr·2·layers) for every tree and leaf-count call (one of each per layer)."""
        unit = share_of(self.epsilon, Fraction(1, 2 * self.in_trees * self.layers))
        return TreeSettings("paper", depth, self.layers, unit, unit, min_support, max_clauses)

    def _seeds(self, schema: DatasetMetadata) -> list[DecisionTree]:
        """The seeds' one-split trees (public: the miner's generator and the schema)."""
        attributes = self._attribute_draws(schema, self.in_trees)
        rng = np.random.default_rng(None if self.seed is None else (self.seed, 1))
        return [seed_tree(schema, attribute, rng) for attribute in attributes]

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        schema = dataset.schema
        self.settings_ = self._settle(schema, None)
        self._allowed = self.columns_for(schema)
        depth, epsilon = self.settings_.depth, self.settings_.leaf_epsilon
        placeholder = {
            view: _placeholder_tree(schema, view, depth, self._allowed)
            for view in ("left", "right")
        }
        calls: list[PlannedCall] = []
        for seed in self._seeds(schema):
            fixed = seed
            for _ in range(self.layers):
                view = _other(fixed.view)
                target = QueryTarget(
                    query=render_query(LeafQuery.of((0, True)), leaf_paths(fixed, schema))
                )
                calls.append(_planned(self._tree_request(view, target)))
                left, right = sorted((fixed, placeholder[view]), key=lambda t: t.view != "left")
                calls.append(TREE_LEAF_COUNTS.plan(self._counts_request(left, right, epsilon)))
                fixed = placeholder[view]
        return calls

    def mine(self, dataset: DatasetHandle) -> Self:
        """Run the layers of every seed; returns self (results in ``redescriptions_``)."""
        self._start(dataset)
        schema = dataset.schema
        self._layer_queries: dict[int, tuple[LeafQuery, LeafQuery]] = {}
        #: Per released pair (as ``trees_``), the layer's (left, right) queries over its trees.
        self.queries_: list[tuple[LeafQuery, LeafQuery]] = []
        with self._progress(2 * self.in_trees * self.layers, "DPLayeredTrees") as advance:

            def run_layers(seed: DecisionTree, iteration: _Iteration) -> None:
                fixed, query = seed, LeafQuery.of((0, True))
                for _ in range(self.layers):
                    paths = simplified_leaf_paths(fixed, schema)
                    target = QueryTarget(query=render_query(query, paths))
                    new = self._tree(dataset, _other(fixed.view), target, iteration)
                    advance()
                    self._release_counts(
                        dataset, (fixed, new), self.settings_.leaf_epsilon, iteration
                    )
                    advance()
                    released = iteration.pairs[-1]
                    new_query = self._next_query(released, query, new, schema)
                    queries = (query, new_query) if fixed.view == "left" else (new_query, query)
                    self._layer_queries[id(released)] = queries
                    fixed, query = new, new_query

            self._run_iterations(dataset, self._seeds(schema), run_layers)
        return self

    @staticmethod
    def _next_query(
        released: _ReleasedPair, query: LeafQuery, new: DecisionTree, schema: DatasetMetadata
    ) -> LeafQuery:
        """:func:`layer_query` of the new tree on the pair's released partition."""
        assert released.counts.partition is not None, "the partition release was asked for"
        shares = positive_shares(released.counts.partition, query.used_leaves, new_view=new.view)
        paths = simplified_leaf_paths(new, schema)
        return layer_query(shares, [leaf for leaf, path in enumerate(paths) if path is None])

    def _extract(
        self, schema: DatasetMetadata, released: _ReleasedPair
    ) -> list[MinedTreeRedescription]:
        """The layer's candidate (its two queries) from its released partition: statistics,
        the final filters of §3.6 and the joint intervals (post-processing, free)."""
        left, right, partition = released.left, released.right, released.counts.partition
        assert partition is not None, "the partition release was asked for"
        self.trees_.append((left, right))
        self.leaf_counts_.append(released.counts)
        self.examined_ += 1
        left_query, right_query = self._layer_queries[id(released)]
        self.queries_.append((left_query, right_query))
        counts = partition_counts(partition)
        red = TreeRedescription(
            left_query, right_query, noisy_statistics(counts, left_query, right_query)
        )
        left_paths = simplified_leaf_paths(left, schema)
        right_paths = simplified_leaf_paths(right, schema)
        settings = self.settings_
        if not passes_final_filters(
            red,
            counts,
            min_supp=settings.min_support,
            max_supp_fraction=self.max_support_fraction,
            min_jaccard=self.min_jaccard,
            p_max=self.p_max,
            empty_left=[leaf for leaf, path in enumerate(left_paths) if path is None],
            empty_right=[leaf for leaf, path in enumerate(right_paths) if path is None],
        ):
            return []
        shape = (left.n_leaves, right.n_leaves)
        return [
            self._result_of(
                red,
                left_paths,
                right_paths,
                noise=released_noise(released.counts, released.epsilon),
                shape=shape,
                partition=True,
                table=result_table(red, partition, shape, partition=True),
                miss=release_miss(shape, max(shape), self._releases()),
            )
        ]
