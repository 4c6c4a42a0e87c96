"""The tree operations (ALGORITHMS.md §3) end to end through the HTTP API in-process: each route
runs its job in a worker process and returns a release that validates against its wire model,
with the receipt's guarantee ("pure" for tree.expmech and tree.leaf_counts, "approximate" for
the two MCMC samplers) and the charged ε."""

from __future__ import annotations

import pytest

import dpmine
from dpmine.errors import InvalidRequestError
from dpmine.wire import (
    AttributeTarget,
    LeafCountsRequest,
    TreeExpMechRequest,
    TreeMCMCRequest,
    TreePairMCMCRequest,
)


def test_each_tree_operation_runs_through_the_api(analyst: dpmine.Connection, toy: str) -> None:
    grown = analyst.run(
        toy,
        TreeExpMechRequest(
            view="left", target=AttributeTarget(attribute="member"), depth=2, epsilon=0.5
        ),
    )
    assert (grown.tree.view, grown.tree.depth) == ("left", 2)
    assert (grown.receipt.operation, grown.receipt.guarantee) == ("tree.expmech", "pure")

    sampled = analyst.run(
        toy,
        TreeMCMCRequest(
            view="right",
            target=AttributeTarget(attribute="age", bins=4),
            depth=2,
            iterations=300,
            epsilon=0.5,
        ),
    )
    assert sampled.tree.view == "right"
    assert (sampled.receipt.operation, sampled.receipt.guarantee) == ("tree.mcmc", "approximate")

    pair = analyst.run(
        toy, TreePairMCMCRequest(attribute="member", depth=2, iterations=300, epsilon=0.5)
    )
    assert (pair.left_tree.view, pair.right_tree.view) == ("left", "right")
    assert pair.receipt.guarantee == "approximate"

    counts = analyst.run(
        toy, LeafCountsRequest(left_tree=grown.tree, right_tree=sampled.tree, epsilon=0.5)
    )
    assert len(counts.intersections) == 4
    assert all(len(row) == 4 for row in counts.intersections)
    assert len(counts.left_counts) == 4
    assert counts.receipt.epsilon_exact == "0.5"
    assert counts.receipt.remaining_epsilon == 3.0


def test_an_invalid_threshold_is_refused_before_the_charge(
    analyst: dpmine.Connection, toy: str
) -> None:
    body = {
        "left_tree": {
            "view": "left",
            "depth": 1,
            "splits": [{"attribute": "age", "threshold": 40.123}],
        },
        "right_tree": {"view": "right", "depth": 1, "splits": [{"attribute": "member"}]},
        "epsilon": 0.5,
    }
    request = LeafCountsRequest.model_validate(body)
    with pytest.raises(InvalidRequestError, match="public lattice"):
        analyst.run(toy, request)
    assert analyst.dataset(toy).budget().remaining_epsilon == 5.0
