"""``DPLayeredTrees`` through the HTTP API in-process on the toy views, seeded on the numeric
``age``: the seed's one-split tree at the lattice midpoint is a valid public tree for
``tree.leaf_counts``, its text ``[age <= 54.0]`` a valid query target, and the run makes and is
charged exactly the planned calls."""

from __future__ import annotations

from decimal import Decimal

import dpmine
from dpmine.miners import DPLayeredTrees
from dpmine.queries import format_query
from dpmine.wire import QueryTarget


def test_a_numeric_seed_runs_through_the_layers(analyst: dpmine.Connection, toy: str) -> None:
    dataset = analyst.dataset(toy)
    # seed=2 draws color, age, age from the allowed [age, color, member] (a public choice).
    miner = DPLayeredTrees(
        epsilon=3.0, layers=2, in_trees=3, depth=1, columns=["age", "color", "member"], seed=2
    )
    plan = miner.plan(dataset)
    seeds = [call.request for call in plan.calls if call.operation == "tree.expmech"][::2]
    targets = [QueryTarget.model_validate(request["target"]).query for request in seeds]
    assert [format_query(target) for target in targets][1:] == ["[age <= 54.0]"] * 2

    miner.mine(dataset)
    assert [r.operation for r in miner.receipts_] == [c.operation for c in plan.calls]
    spent = sum(Decimal(r.epsilon_exact) for r in miner.receipts_)
    assert spent == Decimal(plan.estimate.total_epsilon_exact)
    assert dataset.budget().remaining_epsilon == float(Decimal("5") - spent)
    seed_trees = [min(pair, key=lambda tree: tree.view != "left") for pair in miner.trees_[2::2]]
    for tree in seed_trees:
        assert (tree.view, tree.splits[0].attribute, tree.splits[0].threshold) == (
            "left",
            "age",
            54,
        )
    for red in miner.redescriptions_:
        assert red.left == format_query(red.redescription.left)
