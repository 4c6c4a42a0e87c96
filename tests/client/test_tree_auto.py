"""The tree miners' ``auto`` preset (issue #21, :mod:`dpmine.miners.tree_auto`): a pure rule
of public values. Each price buys what its docstring says, the choice fits the budget and
releases the most leaves, given parameters win, and ``paper`` keeps the paper's split."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from dpmine.intervals import sum_half_width
from dpmine.miners import AltExpM, AltMCMC, MCMCTreePair
from dpmine.miners.tree_auto import (
    LEAF_RATIO,
    TREE_SIGNAL,
    TreeKind,
    auto_tree,
    count_epsilon,
    leaf_epsilon,
    tree_epsilon,
)
from dpmine.miners.trees import share_of, view_units
from dpmine.significance import ALPHA
from dpmine.treereds import query_cell_sets
from dpmine.wire import DatasetMetadata

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 5000,
        "attributes": [
            *({"type": "boolean", "name": f"l{i}", "view": "left"} for i in range(6)),
            *({"type": "boolean", "name": f"r{i}", "view": "right"} for i in range(6)),
        ],
    }
)


def test_the_row_count_costs_two_percent_of_epsilon_at_most_five_hundredths() -> None:
    assert count_epsilon(1.0) == pytest.approx(0.02)
    assert count_epsilon(0.5) == pytest.approx(0.01)
    assert count_epsilon(10.0) == pytest.approx(0.05)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_a_tree_price_gives_the_root_draw_twice_ln_m(depth: int) -> None:
    n, log_units = 3000.0, math.log(40)
    expmech = tree_epsilon("expmech", depth, log_units, n)
    assert expmech / depth / 4 * n == pytest.approx(TREE_SIGNAL * log_units)  # c = ε/(4d)
    mcmc = tree_epsilon("mcmc", depth, log_units, n)
    assert mcmc / 4 * n == pytest.approx(TREE_SIGNAL * (2**depth - 1) * log_units)  # c = ε/4
    assert tree_epsilon("pair", depth, log_units, n) == 0.0


@pytest.mark.parametrize(("depth", "releases", "n_rows"), [(3, 4, 2221), (2, 2, 900), (1, 1, 130)])
def test_a_leaf_price_makes_a_leaf_four_half_widths_of_its_row_sum(
    depth: int, releases: int, n_rows: float
) -> None:
    epsilon = leaf_epsilon(depth, releases, 3, n_rows)
    sets = query_cell_sets(2**depth, 3)
    miss = ALPHA / releases / (4 * sets * sets)
    t = sum_half_width(1.0 / epsilon, 2**depth + 1, miss)
    assert t <= n_rows / 2**depth / LEAF_RATIO  # the continuous pricing never buys too little
    assert t >= 0.9 * n_rows / 2**depth / LEAF_RATIO  # nor much more


@pytest.mark.parametrize("kind", ["expmech", "mcmc", "pair"])
@pytest.mark.parametrize("n_rows", [129.0, 920.0, 2221.0, 6404.0, 50_000.0])
def test_the_choice_spends_the_budget_and_releases_the_most_leaves_that_fit(
    kind: TreeKind, n_rows: float
) -> None:
    budget, log_units = 0.98, math.log(60)
    auto = auto_tree(budget, n_rows, kind=kind, log_units=log_units)
    trees = auto.rounds if kind == "pair" else auto.rounds + 1  # pair draws or trees
    spent = trees * auto.tree_epsilon + auto.rounds * auto.leaf_epsilon
    assert spent == pytest.approx(budget)
    assert auto.min_support >= max(10.0, 3 * math.sqrt(2) / auto.leaf_epsilon) - 1e-9
    if not auto.fits:
        assert (auto.depth, auto.rounds) == (1, 1)
        return
    assert auto.leaf_epsilon >= leaf_epsilon(auto.depth, auto.rounds, 3, n_rows) * (1 - 1e-9)
    if kind != "pair":
        tree_price = tree_epsilon(kind, auto.depth, log_units, n_rows)
        leaf_price = leaf_epsilon(auto.depth, auto.rounds, 3, n_rows)
        # The surplus over the prices goes half to the trees, half to the releases.
        tree_extra = (auto.rounds + 1) * (auto.tree_epsilon - tree_price)
        assert tree_extra == pytest.approx(auto.rounds * (auto.leaf_epsilon - leaf_price))
        assert tree_extra >= -1e-12
    # No candidate that fits releases more leaves, or as many with a deeper tree.
    for depth in (3, 2, 1):
        for k in (4, 3, 2, 1):
            leaf = leaf_epsilon(depth, k, 3, n_rows)
            if kind == "pair":
                cost = k * leaf / 0.9
            else:
                cost = (k + 1) * tree_epsilon(kind, depth, log_units, n_rows) + k * leaf
            if cost <= budget:
                assert (k << depth, depth) <= (auto.rounds << auto.depth, auto.depth)


def test_more_rows_never_buy_fewer_leaves() -> None:
    chosen = [
        auto_tree(0.98, n, kind="expmech", log_units=math.log(100))
        for n in (500.0, 1000.0, 2000.0, 4000.0, 8000.0)
    ]
    leaves = [a.rounds << a.depth for a in chosen]
    assert leaves == sorted(leaves)
    assert leaves[-1] == 32  # depth 3, 4 rounds: the most the rule offers


def test_given_depth_and_rounds_restrict_the_choice() -> None:
    auto = auto_tree(0.98, 2221.0, kind="expmech", log_units=4.8, depths=(2,), rounds=(3,))
    assert (auto.depth, auto.rounds) == (2, 3)


def test_paper_keeps_the_papers_split() -> None:
    settings = AltExpM(epsilon=1.0, preset="paper")._settle(METADATA, None)
    unit = share_of(1.0, Fraction(1, 9))
    assert (settings.depth, settings.rounds, settings.min_support, settings.max_clauses) == (
        3,
        4,
        10.0,
        3,
    )
    assert settings.tree_epsilon == settings.leaf_epsilon == unit
    assert settings.count_epsilon is None
    pair = MCMCTreePair(epsilon=1.0, preset="paper")._settle(METADATA, None)
    assert (pair.rounds, pair.tree_epsilon, pair.leaf_epsilon) == (
        4,
        share_of(1.0, Fraction(1, 40)),
        share_of(1.0, Fraction(9, 40)),
    )


@pytest.mark.parametrize("miner", [AltExpM, AltMCMC, MCMCTreePair])
def test_auto_settings_never_spend_more_than_epsilon(
    miner: type[AltExpM | AltMCMC | MCMCTreePair],
) -> None:
    for n_hat in (None, 300.0, 4000.0):
        settings = miner(epsilon=1.0, preset="auto")._settle(METADATA, n_hat)
        assert settings.count_epsilon is not None
        trees = 0 if miner is MCMCTreePair else settings.rounds + 1
        pair_draws = settings.rounds if miner is MCMCTreePair else 0
        total = (
            settings.count_epsilon
            + (trees + pair_draws) * settings.tree_epsilon
            + settings.rounds * settings.leaf_epsilon
        )
        assert 1.0 - 1e-6 <= total <= 1.0
        assert settings.provisional == (n_hat is None)


def test_given_parameters_win_over_auto() -> None:
    settings = AltExpM(
        epsilon=1.0, preset="auto", depth=2, rm_iterations=1, min_support=3.0, max_clauses=2
    )._settle(METADATA, 4000.0)
    assert (settings.depth, settings.rounds, settings.min_support, settings.max_clauses) == (
        2,
        1,
        3.0,
        2,
    )


def test_auto_reads_the_units_of_the_allowed_columns_only() -> None:
    few = AltExpM(epsilon=1.0, preset="auto", columns=["l0", "l1", "r0", "r1", "r2"])
    settings = few._settle(METADATA, 300.0)
    assert view_units(METADATA, "right", ["r0", "r1", "r2"]) == 3
    expected = auto_tree(1.0 - count_epsilon(1.0), 300.0, kind="expmech", log_units=math.log(3))
    assert settings.auto == expected
    every = AltExpM(epsilon=1.0, preset="auto")._settle(METADATA, 300.0)
    assert every.auto == auto_tree(
        1.0 - count_epsilon(1.0), 300.0, kind="expmech", log_units=math.log(6)
    )
