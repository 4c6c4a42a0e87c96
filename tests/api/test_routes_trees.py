"""The tree operations (ALGORITHMS.md §3) end to end through the HTTP API in-process: each route
runs its job in a worker process and returns a release that validates against its wire model,
with the receipt's guarantee ("pure" for tree.expmech, tree.leaf_counts and tree.mcmc's exact
sampler, which "auto" runs on the toy's small right view; "approximate" for tree.pair_mcmc's
chain) and the charged ε."""

from __future__ import annotations

import pytest

import dpmine
from dpmine.errors import InvalidRequestError
from dpmine.wire import (
    MIN_TREE_ITERATIONS,
    AttributeTarget,
    LeafCountsRequest,
    TreeExpMechRequest,
    TreeMCMCRequest,
    TreePairMCMCRequest,
)
from support.inprocess import TestClient, expect_error


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
            iterations=MIN_TREE_ITERATIONS,
            epsilon=0.5,
        ),
    )
    assert (sampled.tree.view, sampled.sampler) == ("right", "exact")
    assert (sampled.receipt.operation, sampled.receipt.guarantee) == ("tree.mcmc", "pure")

    pair = analyst.run(
        toy,
        TreePairMCMCRequest(
            attribute="member", depth=2, iterations=MIN_TREE_ITERATIONS, epsilon=0.5
        ),
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


def test_a_chain_below_the_public_minimum_is_refused_before_the_charge(
    client: TestClient, analyst: dpmine.Connection, analyst_headers: dict[str, str], toy: str
) -> None:
    """§3.4, §3.5, ALGORITHMS.md §6 #16: both samplers refuse fewer steps than the public
    minimum with a 422 that says why, on the route and as a job; nothing is charged."""
    target = {"kind": "attribute", "attribute": "member"}
    short = MIN_TREE_ITERATIONS - 1
    requests = {
        "tree.mcmc": ("trees/mcmc", {"view": "right", "target": target, "epsilon": 0.5}),
        "tree.pair_mcmc": ("trees/pair-mcmc", {"attribute": "member", "epsilon": 0.5}),
    }
    for operation, (path, body) in requests.items():
        request = {**body, "iterations": short}
        job = {"operation": operation, "request": request}
        for route, sent in ((path, request), ("jobs", job)):
            response = client.post(
                f"/v1/datasets/{toy}/{route}",
                json=sent,
                headers={**analyst_headers, "Idempotency-Key": f"short-{operation}-{route}"},
            )
            detail = expect_error(response, 422, "InvalidRequest")
            assert f"at least {MIN_TREE_ITERATIONS}, got {short}" in detail, detail
    assert analyst.dataset(toy).budget().remaining_epsilon == 5.0


def test_tree_columns_are_refused_before_the_charge(analyst: dpmine.Connection, toy: str) -> None:
    """An unknown column, columns that leave a tree's view without an attribute, or a target
    outside them is a 422 that says what to fix; nothing is charged."""
    target = AttributeTarget(attribute="member")
    unknown = TreeExpMechRequest(view="left", target=target, epsilon=0.5, columns=["height"])
    with pytest.raises(InvalidRequestError, match="unknown column"):
        analyst.run(toy, unknown)
    empty = TreeMCMCRequest(
        view="left",
        target=target,
        depth=1,
        iterations=MIN_TREE_ITERATIONS,
        epsilon=0.5,
        columns=["member", "color"],
    )
    with pytest.raises(InvalidRequestError, match="leave the left view no attribute"):
        analyst.run(toy, empty)
    outside = TreePairMCMCRequest(
        attribute="member",
        depth=1,
        iterations=MIN_TREE_ITERATIONS,
        epsilon=0.5,
        columns=["age", "smoker"],
    )
    with pytest.raises(InvalidRequestError, match="not among the allowed columns"):
        analyst.run(toy, outside)
    assert analyst.dataset(toy).budget().remaining_epsilon == 5.0
