"""The layered miner's post-processing (issue #26 item 1): each layer's query is the
disjunction of the new tree's leaves whose noisy positive share of the released partition is
above 1/2, and a numeric seed splits at a point of the server's public lattice."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dpmine.errors import ParameterError
from dpmine.miners import DPLayeredTrees
from dpmine.miners.layered import jaccard_query, layer_query, positive_shares, seed_tree
from dpmine.miners.tree_auto import auto_layered, leaf_epsilon, pair_epsilon, steer_epsilon
from dpmine.treereds import LeafQuery
from dpmine.wire import DatasetMetadata, NumericAttribute
from dpmine_server.dp.lattice import public_lattice

#: A released partition: rows the seed tree's two leaves and its outside row, columns a
#: depth-2 tree's four leaves and its outside column (noisy: one cell is negative).
PARTITION = [
    [30, 2, 10, -1, 5],
    [5, 20, 12, 0, 3],
    [1, 1, 0, 2, 40],
]


def test_the_shares_are_the_targets_cells_over_the_whole_column() -> None:
    shares = positive_shares(PARTITION, [0], new_view="right")
    assert shares == pytest.approx([30 / 36, 2 / 23, 10 / 22, -1.0])
    # The same release with the new tree on the left: the shares of its rows.
    transposed = [list(column) for column in zip(*PARTITION, strict=True)]
    assert positive_shares(transposed, [0], new_view="left") == pytest.approx(shares)
    # A target of several cells sums them; a column whose noisy total is ≤ 0 has share 0.
    wide = positive_shares([[3, -4, 1], [2, 1, 0], [0, 0, 9]], [0, 1], new_view="right")
    assert wide == pytest.approx([1.0, 0.0])


def test_the_query_takes_the_leaves_above_one_half() -> None:
    shares = positive_shares(PARTITION, [0, 1], new_view="right")  # [35/36, 22/23, 1, -1]
    assert layer_query(shares).key == LeafQuery.of((0, True), (1, True), (2, True)).key
    assert layer_query([0.5, 0.6]).key == LeafQuery.of((1, True)).key  # a half is not above
    # Leaves with contradictory paths hold no rows: never chosen.
    assert layer_query(shares, empty=[1]).key == LeafQuery.of((0, True), (2, True)).key
    assert layer_query(positive_shares(PARTITION, [0], new_view="right")).key == (
        LeafQuery.of((0, True)).key
    )


def test_with_no_leaf_above_one_half_the_largest_share_is_the_query() -> None:
    assert layer_query([0.2, 0.4, 0.4, 0.5]).key == LeafQuery.of((3, True)).key
    assert layer_query([0.2, 0.4, 0.4]).key == LeafQuery.of((1, True)).key  # lowest on ties
    assert layer_query([0.9, 0.4], empty=[0]).key == LeafQuery.of((1, True)).key
    with pytest.raises(ValueError, match="every leaf of the tree is empty"):
        layer_query([0.9], empty=[0])


def test_the_jaccard_rule_keeps_the_best_prefix_by_share() -> None:
    """Target leaf 0 (T = 46 of N = 130): by share the leaves are 0, 2, 1, 3 and the
    prefixes' noisy J are 30/52, 40/64, 42/85, 41/87, so {0, 2}, where the majority rule
    keeps {0} only."""
    query = jaccard_query(PARTITION, [0], new_view="right")
    assert query.key == LeafQuery.of((0, True), (2, True)).key
    assert layer_query(positive_shares(PARTITION, [0], new_view="right")).key != query.key
    transposed = [list(column) for column in zip(*PARTITION, strict=True)]
    assert jaccard_query(transposed, [0], new_view="left").key == query.key
    # Empty leaves are left out: 0 then 1 (J 32/73) is worse than 0 alone.
    assert jaccard_query(PARTITION, [0], new_view="right", empty=[2]).key == (
        LeafQuery.of((0, True)).key
    )
    with pytest.raises(ValueError, match="every leaf of the tree is empty"):
        jaccard_query([[1, 2], [3, 4]], [0], new_view="right", empty=[0])


def test_the_jaccard_rule_never_takes_a_query_above_the_support_bound() -> None:
    """Target leaves 0 and 1 (T = 86, most rows): the best J takes leaves 0–2 (support 81 of
    130); the bound 0.5·130 = 65 stops at {0, 2} (support 58), a bound below every prefix
    falls back to the leaf of the largest share."""
    assert jaccard_query(PARTITION, [0, 1], new_view="right").key == (
        LeafQuery.of((0, True), (1, True), (2, True)).key
    )
    bounded = jaccard_query(PARTITION, [0, 1], new_view="right", max_fraction=0.5)
    assert bounded.key == LeafQuery.of((0, True), (2, True)).key
    tight = jaccard_query(PARTITION, [0, 1], new_view="right", max_fraction=0.1)
    assert tight.key == LeafQuery.of((2, True)).key


def test_a_numeric_seed_splits_at_the_lattice_midpoint() -> None:
    attribute = NumericAttribute(name="x", view="left", lo=0.1, hi=7.3, lattice_bits=5)
    schema = DatasetMetadata(kind="table", n_max=100, attributes=[attribute])
    tree = seed_tree(schema, "x", np.random.default_rng(0))
    threshold = tree.splits[0].threshold
    assert (tree.view, tree.depth) == ("left", 1)
    points = public_lattice(0.1, 7.3, 5).points
    assert threshold == points[2**4]
    assert threshold in points


BOOLEAN_VIEWS = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 2000,
        "attributes": [
            *({"type": "boolean", "name": f"l{i}", "view": "left"} for i in range(3)),
            *({"type": "boolean", "name": f"r{i}", "view": "right"} for i in range(3)),
        ],
    }
)


def test_every_call_gets_an_equal_share_of_epsilon() -> None:
    """Per layer one tree and one leaf-count release: ε/(2·InTr·layers) each."""
    settings = DPLayeredTrees(epsilon=1.6, layers=2, in_trees=4, depth=2)._settle(
        BOOLEAN_VIEWS, None
    )
    assert (settings.tree_epsilon, settings.leaf_epsilon) == (0.1, 0.1)
    assert (settings.rounds, settings.depth, settings.preset) == (2, 2, "paper")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"layers": 0}, "layers must be a whole number of at least 1"),
        ({"in_trees": 0}, "in_trees must be a whole number"),
        ({"order": "depth"}, "order must be 'seeds', 'layers' or 'strong'"),
        ({"seed_rule": "best"}, "seed_rule must be 'uniform' or 'expmech'"),
        ({"query_rule": "half"}, "query_rule must be 'majority' or 'jaccard'"),
        ({"final_release": "cells"}, "final_release must be 'partition' or 'pair'"),
        ({"final_release": "pair", "preset": "paper"}, "final_release='pair' needs preset='auto'"),
        ({"leaf_release": "paper"}, "needs leaf_release='partition'"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_priced(
    parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(ParameterError, match=message):
        DPLayeredTrees(**parameters)._settle(BOOLEAN_VIEWS, None)


@pytest.mark.parametrize("seed_rule", ["uniform", "expmech"])
@pytest.mark.parametrize("order", ["seeds", "layers", "strong"])
@pytest.mark.parametrize("n_hat", [40.0, 300.0, 2500.0, 20000.0])
@pytest.mark.parametrize("epsilon", [0.5, 1.0])
def test_the_layered_auto_choice_never_spends_more_than_epsilon(
    seed_rule: Any, order: Any, n_hat: float, epsilon: float
) -> None:
    """Row count + seeds·(seed draw + layers tree draws + layers − 1 steering + 1 final
    release) ≤ ε."""
    miner = DPLayeredTrees(epsilon=epsilon, preset="auto", order=order, seed_rule=seed_rule)
    settings = miner._settle(BOOLEAN_VIEWS, n_hat)
    layout = miner.layout_
    assert settings.count_epsilon is not None
    draws = layout.layers + (seed_rule == "expmech")
    spent = settings.count_epsilon + layout.seeds * (
        draws * settings.tree_epsilon
        + (layout.layers - 1) * layout.steer_epsilon
        + settings.leaf_epsilon
    )
    assert spent <= epsilon
    assert not layout.examine_every_layer
    assert miner._releases() == layout.seeds  # only the final releases are examined


@pytest.mark.parametrize("seed_rule", ["uniform", "expmech"])
@pytest.mark.parametrize("n_hat", [40.0, 300.0, 2500.0, 20000.0])
@pytest.mark.parametrize("epsilon", [0.5, 1.0])
def test_the_pair_final_choice_never_spends_more_than_epsilon(
    seed_rule: Any, n_hat: float, epsilon: float
) -> None:
    """Row count + seeds·(seed draw + layers tree draws + layers steering + 1 pair release)
    ≤ ε: under ``final_release="pair"`` every layer's release steers."""
    miner = DPLayeredTrees(
        epsilon=epsilon, preset="auto", order="seeds", seed_rule=seed_rule, final_release="pair"
    )
    settings = miner._settle(BOOLEAN_VIEWS, n_hat)
    layout = miner.layout_
    assert settings.count_epsilon is not None
    assert layout.pair_final
    assert all(not layout.examined(layer) for layer in range(layout.layers))
    assert layout.release_epsilon(layout.layers - 1, settings.leaf_epsilon) == layout.steer_epsilon
    draws = layout.layers + (seed_rule == "expmech")
    spent = settings.count_epsilon + layout.seeds * (
        draws * settings.tree_epsilon + layout.layers * layout.steer_epsilon + settings.leaf_epsilon
    )
    assert spent <= epsilon
    assert miner._releases() == layout.seeds


def test_a_pair_release_is_priced_below_a_partition_release() -> None:
    """One noise term per cell at the miss α/(4·s) against 2^d + 1 terms at α/(s·4·L²)."""
    for depth in (2, 3):
        for seeds in (1, 4):
            pair = pair_epsilon(depth, seeds, 2221.0)
            assert 0 < pair < leaf_epsilon(depth, seeds, 1 << depth, 2221.0) / 2
    # More seeds, a smaller miss per cell: a higher price.
    assert pair_epsilon(3, 4, 2221.0) > pair_epsilon(3, 1, 2221.0)


def test_the_layered_auto_order_ranks_seeds_or_layers_first() -> None:
    seeds = auto_layered(0.98, 2575.0, log_units=7.0, order="seeds")
    layers = auto_layered(0.98, 2575.0, log_units=7.0, order="layers")
    assert seeds.fits
    assert layers.fits
    assert seeds.seeds > layers.seeds
    assert layers.layers > seeds.layers
    # The final release gets at least its price, the steering ones exactly theirs.
    assert seeds.final_epsilon >= leaf_epsilon(seeds.depth, seeds.seeds, 1 << seeds.depth, 2575.0)
    assert seeds.steer_epsilon == steer_epsilon(seeds.depth, 2575.0)
    # More rows never buy fewer seeds·layers.
    small = auto_layered(0.98, 500.0, log_units=7.0)
    assert small.seeds * small.layers <= seeds.seeds * seeds.layers


def test_given_seeds_layers_and_depth_win_over_the_layered_auto() -> None:
    miner = DPLayeredTrees(epsilon=1.0, preset="auto", in_trees=2, layers=3, depth=3)
    for n_hat in (20000.0, 50.0):  # the prices fit, and the fallback keeps them too
        settings = miner._settle(BOOLEAN_VIEWS, n_hat)
        assert (miner.layout_.seeds, miner.layout_.layers, settings.depth) == (2, 3, 3)
    assert settings.auto is not None
    assert "2 seed(s) of 3 layer(s)" in settings.describe()
