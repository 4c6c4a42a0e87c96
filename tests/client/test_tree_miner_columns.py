"""``columns`` / ``exclude`` of the tree miners (issue #21): the drawn target attributes come
from the allowed columns only, every tree request carries them (the server restricts the splits
to them), and a bad list is refused before anything is priced or charged. Also the plan's signal
report: uniform-like draws and noisy leaf counts, from public values."""

from __future__ import annotations

import math

import pytest

from dpmine.errors import ParameterError
from dpmine.miners import AltExpM, AltMCMC, MCMCTreePair
from dpmine.miners.trees import TreePlan, _placeholder_tree, leaf_noise, tree_signals
from dpmine.wire import (
    AttributeTarget,
    DatasetMetadata,
    EstimateResponse,
    LeafCountsRequest,
    TreeExpMechRequest,
    TreePairMCMCRequest,
)
from dpmine.wire.operations import TREE_EXPMECH, TREE_LEAF_COUNTS, TREE_PAIR_MCMC

METADATA = DatasetMetadata.model_validate(
    {
        "kind": "views",
        "n_max": 2000,
        "attributes": [
            *({"type": "boolean", "name": f"l{i}", "view": "left"} for i in range(4)),
            *({"type": "boolean", "name": f"r{i}", "view": "right"} for i in range(4)),
        ],
    }
)


def test_draws_come_from_the_allowed_columns_only() -> None:
    miner = AltExpM(seed=3, exclude=["l0", "r1"])
    draws = miner._attribute_draws(METADATA, 200)
    assert set(draws) == {"l1", "l2", "l3", "r0", "r2", "r3"}
    narrowed = MCMCTreePair(seed=3, columns=["l2", "l3", "r3"])
    assert set(narrowed._attribute_draws(METADATA, 200)) == {"l2", "l3", "r3"}


def test_tree_requests_carry_the_allowed_columns() -> None:
    miner = AltMCMC(seed=1, columns=["l1", "l2", "r0"], exclude="l2")
    miner._allowed = miner.columns_for(METADATA)
    assert miner._allowed == ["l1", "r0"]
    miner.settings_ = miner._settle(METADATA, None)
    request = miner._tree_request("left", AttributeTarget(attribute="r0"))
    assert request.columns == ["l1", "r0"]
    plain = AltExpM()
    plain.settings_ = plain._settle(METADATA, None)
    assert plain._tree_request("left", AttributeTarget(attribute="r0")).columns is None
    pair = MCMCTreePair(columns=["l1", "r0"])
    pair._allowed = pair.columns_for(METADATA)
    pair.settings_ = pair._settle(METADATA, None)
    assert pair._pair_request("r0").columns == ["l1", "r0"]


def test_the_pricing_tree_uses_allowed_columns_only() -> None:
    tree = _placeholder_tree(METADATA, "left", 2, ["l2", "l3", "r0"])
    assert {split.attribute for split in tree.splits} == {"l2", "l3"}
    with pytest.raises(ParameterError, match="too few attributes"):
        _placeholder_tree(METADATA, "left", 2, ["l2", "r0"])


@pytest.mark.parametrize(
    ("columns", "exclude", "message"),
    [
        (["l1", "zz"], None, "unknown column"),
        (["l0", "l1"], None, "leave the right view no attribute"),
        (None, ["r0", "r1", "r2", "r3"], "leave the right view no attribute"),
        (["l0"], ["l0"], "leave no column"),
    ],
)
def test_bad_columns_are_parameter_errors(
    columns: list[str] | None, exclude: list[str] | None, message: str
) -> None:
    with pytest.raises(ParameterError, match=message):
        AltExpM(columns=columns, exclude=exclude).columns_for(METADATA)


def test_plan_signals_flag_uniform_like_draws_and_noisy_leaf_counts() -> None:
    """The plan's measures from public values only (n_max = 2000, 4 Boolean attributes a view,
    ln M = ln 4 per split): c·R = ε/(4d)·n_max at the root of tree.expmech, ε/4·n_max for a
    tree.mcmc tree, ε/2 for a tree pair on the paper's score (ln M = 2·(2^d − 1)·ln 4) and
    ε/6·2·n_max on the default gain score."""
    depth = 2
    calls = [
        TREE_EXPMECH.plan(
            TreeExpMechRequest(
                view="left", target=AttributeTarget(attribute="r0"), depth=depth, epsilon=0.01
            )
        ),
        TREE_PAIR_MCMC.plan(
            TreePairMCMCRequest(attribute="r0", depth=depth, epsilon=1.0, pair_score="paper")
        ),
        TREE_PAIR_MCMC.plan(TreePairMCMCRequest(attribute="r0", depth=depth, epsilon=0.001)),
    ]
    expmech, pair, gain = tree_signals(calls, METADATA, None)
    assert gain.signal == pytest.approx(0.001 / 6 * 2 * 2000)  # 0.67 < ln M
    assert gain.uniform_like
    assert expmech.signal == pytest.approx(0.01 / (4 * depth) * 2000)  # 2.5 > ln 4
    assert expmech.deepest == pytest.approx(expmech.signal / 2)  # 1.25 < ln 4 = 1.386
    assert not expmech.uniform_like
    assert expmech.deep_uniform_like
    assert pair.signal == pytest.approx(0.5)
    assert pair.log_candidates == pytest.approx(2 * 3 * math.log(4))
    assert pair.uniform_like
    # Restricted to 2 left attributes, M shrinks: ln 2.
    narrowed = tree_signals(calls[:1], METADATA, ["l0", "l1", "r0"])[0]
    assert narrowed.log_candidates == pytest.approx(math.log(2))

    tree = _placeholder_tree(METADATA, "left", depth)
    other = _placeholder_tree(METADATA, "right", depth)
    counts = [
        TREE_LEAF_COUNTS.plan(LeafCountsRequest(left_tree=tree, right_tree=other, epsilon=e))
        for e in (1.0, 0.02)
    ]
    noise = leaf_noise(counts, METADATA)
    assert noise is not None
    assert noise.releases == 2
    assert noise.leaf_std == pytest.approx(math.sqrt(2 * 5) / 0.02)  # 158: the smaller ε
    assert noise.leaf_size == 500
    assert noise.noisy  # 500 < 5 · 158
    plan = TreePlan(
        calls=calls + counts,
        estimate=EstimateResponse(
            calls=[], total_epsilon=0, total_epsilon_exact="0", remaining_epsilon=1, fits=True
        ),
        n_max=2000,
        signals=[expmech, pair],
        noise=noise,
    )
    report = plan.report()
    assert "tree.pair_mcmc (both): 1 draw(s) at ε = 1: c·R = 0.5" in report
    assert "UNIFORM-LIKE" in report
    assert len(plan.warnings) == 3
