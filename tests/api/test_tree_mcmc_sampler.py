"""``tree.mcmc``'s sampler (issue #25 item 2): "auto" runs the exact sum-product sampler where
its public work bound fits, and its release is then "pure" in the response, the receipt and
the ledger, so a "pure_only" dataset serves it; the chain ("mcmc", or "auto" where the bound
does not fit) stays refused there, and an "exact" that does not fit is refused as invalid; all
refusals before any charge."""

from __future__ import annotations

import dpmine
from dpmine.miners.trees import AltMCMC
from dpmine.wire import AttributeTarget, TreeMCMCRequest
from support.inprocess import TestClient, expect_error

from .conftest import GRANT

#: A tree on the right view (color: 3 categories, member: Boolean) predicting the left view's
#: smoker: 4 candidate splits, enumerable at depth 2.
SMALL = TreeMCMCRequest(
    view="right", target=AttributeTarget(attribute="smoker"), depth=2, epsilon=0.5
)
#: A tree on the left view, whose numeric age offers one split per lattice point, in at most
#: n_max + 1 = 1,001 groups: the exact sampler's bound fits at depth 2, not at depth 3.
LARGE = {
    "view": "left",
    "target": {"kind": "attribute", "attribute": "member"},
    "depth": 3,
    "epsilon": 0.5,
}


def test_pure_only_serves_the_exact_sampler_and_refuses_the_chain_before_any_charge(
    client: TestClient,
    owner: dpmine.Connection,
    analyst: dpmine.Connection,
    analyst_headers: dict[str, str],
    labelled: str,
) -> None:
    owner.admin.set_guarantee_policy(labelled, "pure_only")
    handle = analyst.dataset(labelled)
    url = f"/v1/datasets/{labelled}/trees/mcmc"

    # The chain and "auto" where the exact bound does not fit: 403, nothing charged.
    for index, body in enumerate(
        (SMALL.model_dump(mode="json") | {"sampler": "mcmc"}, LARGE | {"sampler": "auto"})
    ):
        refused = client.post(
            url, json=body, headers={**analyst_headers, "Idempotency-Key": f"chain-{index}"}
        )
        detail = expect_error(refused, 403, "Forbidden")
        assert "nothing was charged" in detail
        assert "sampler='exact'" in detail
    # "exact" that does not fit: 422 saying what to change, before the policy and the charge.
    too_big = client.post(
        url, json=LARGE | {"sampler": "exact"}, headers={**analyst_headers, "Idempotency-Key": "x"}
    )
    detail = expect_error(too_big, 422, "InvalidRequest")
    assert "sampler 'exact' does not fit" in detail
    assert "smaller depth" in detail
    assert handle.budget().remaining_epsilon == GRANT
    assert owner.admin.ledger(labelled) == []

    # The estimate prices each call with its own guarantee, before anything is charged.
    estimate = f"/v1/datasets/{labelled}/estimate"
    small = SMALL.model_dump(mode="json")
    priced = client.post(
        estimate,
        json={"calls": [{"operation": "tree.mcmc", "request": small}]},
        headers=analyst_headers,
    )
    assert priced.status_code == 200, priced.text
    assert priced.json()["calls"][0]["guarantee"] == "pure"
    chain = {"operation": "tree.mcmc", "request": small | {"sampler": "mcmc"}}
    refused_plan = client.post(estimate, json={"calls": [chain]}, headers=analyst_headers)
    assert "call 0: tree.mcmc" in expect_error(refused_plan, 403, "Forbidden")

    # "auto" on the small view runs the exact sampler: served, pure everywhere.
    released = handle.run(SMALL)
    assert released.sampler == "exact"
    assert released.receipt.guarantee == "pure"
    assert released.tree.depth == 2
    assert [(e.operation, e.guarantee) for e in owner.admin.ledger(labelled)] == [
        ("tree.mcmc", "pure")
    ]
    # A miner whose every tree fits plans under the policy (AltMCMC at depth 1).
    assert AltMCMC(in_trees=1, rm_iterations=1, epsilon=1.0, depth=1).plan(handle).fits


def test_the_sampler_that_ran_is_a_public_function_of_the_request(
    analyst: dpmine.Connection, labelled: str
) -> None:
    handle = analyst.dataset(labelled)
    chain = handle.run(SMALL.model_copy(update={"sampler": "mcmc", "iterations": 1000}))
    assert (chain.sampler, chain.receipt.guarantee) == ("mcmc", "approximate")
    auto = handle.run(TreeMCMCRequest.model_validate(LARGE))
    assert (auto.sampler, auto.receipt.guarantee) == ("mcmc", "approximate")
    exact = handle.run(SMALL.model_copy(update={"sampler": "exact"}))
    assert (exact.sampler, exact.receipt.guarantee) == ("exact", "pure")
    # the numeric view at depth 2: its lattice's thresholds in groups, exact by "auto"
    numeric = handle.run(TreeMCMCRequest.model_validate(LARGE | {"depth": 2}))
    assert (numeric.sampler, numeric.receipt.guarantee) == ("exact", "pure")
    assert len(numeric.tree.splits) == 3
