"""The owner's guarantee policy (issue #25): a "pure_only" dataset refuses the operations whose
guarantee is "approximate" (the MCMC samplers) with a 403 that says what to do, on the route,
as a job and in an estimate (so a miner's plan() fails first), before any charge; exact
operations are still served. The default serves everything; the owner changes the policy
through the API and the console (audited); analysts see it in the dataset info."""

from __future__ import annotations

from pathlib import Path

import pytest

import dpmine
from dpmine.miners.trees import AltExpM, AltMCMC, MCMCTreePair
from dpmine.wire import (
    MIN_TREE_ITERATIONS,
    AttributeTarget,
    CreateDatasetRequest,
    CsvSource,
    DatasetInfo,
    DatasetMetadata,
    TreeExpMechRequest,
)
from support.inprocess import TestClient, expect_error

from .conftest import GRANT
from .test_console import csrf_of, login, post_form

SAMPLER_CALLS = {
    "tree.mcmc": (
        "trees/mcmc",
        {
            "view": "right",
            "target": {"kind": "attribute", "attribute": "age", "bins": 4},
            "depth": 2,
            "iterations": MIN_TREE_ITERATIONS,
            "epsilon": 0.5,
            "sampler": "mcmc",
        },
    ),
    "tree.pair_mcmc": (
        "trees/pair-mcmc",
        {"attribute": "member", "depth": 2, "iterations": MIN_TREE_ITERATIONS, "epsilon": 0.5},
    ),
    "brl.sample_rule_list": (
        "rule-lists/sample",
        {"antecedents": [{"items": [{"kind": "bool", "attribute": "smoker"}]}], "epsilon": 0.5},
    ),
}


def _estimate(client: TestClient, headers: dict[str, str], dataset: str, operation: str) -> int:
    """The status of an estimate of one sampler call (its detail when it is not 200 or 403)."""
    response = client.post(
        f"/v1/datasets/{dataset}/estimate",
        json={"calls": [{"operation": operation, "request": SAMPLER_CALLS[operation][1]}]},
        headers=headers,
    )
    status: int = response.status_code
    assert status in {200, 403}, response.text
    if status == 403:
        assert expect_error(response, 403, "Forbidden").startswith(f"call 0: {operation} ")
    return status


def test_by_default_every_operation_is_served(
    client: TestClient, analyst: dpmine.Connection, analyst_headers: dict[str, str], labelled: str
) -> None:
    handle = analyst.dataset(labelled)
    assert handle.guarantee_policy == "allow_approximate"
    assert handle.allows("tree.mcmc")
    assert handle.allows("tree.expmech")
    for operation in SAMPLER_CALLS:
        assert _estimate(client, analyst_headers, labelled, operation) == 200
    assert AltMCMC(in_trees=1, rm_iterations=1, epsilon=1.0, depth=1).plan(handle).fits


def test_pure_only_refuses_the_samplers_before_any_charge_and_serves_exact_operations(
    client: TestClient,
    owner: dpmine.Connection,
    analyst: dpmine.Connection,
    analyst_headers: dict[str, str],
    labelled: str,
) -> None:
    changed = owner.admin.set_guarantee_policy(labelled, "pure_only")
    assert changed.guarantee_policy == "pure_only"
    handle = analyst.dataset(labelled)
    assert handle.guarantee_policy == "pure_only"
    assert not handle.allows("tree.mcmc")
    assert handle.allows("tree.expmech")
    with pytest.raises(dpmine.ParameterError, match="unknown operation"):
        handle.allows("tree.nope")

    # The miners' plans fail first, with the reason and what to do.
    for miner in (
        AltMCMC(in_trees=1, rm_iterations=1, epsilon=1.0, depth=1, sampler="mcmc"),
        MCMCTreePair(in_trees=1, epsilon=1.0, depth=1),
        dpmine.DPBayesianRuleList(epsilon=1.0, k_per_class=3, max_length=1, sampler="mcmc"),
    ):
        with pytest.raises(dpmine.PermissionDeniedError) as refused:
            miner.plan(handle)
        assert "'pure_only'" in str(refused.value)
        assert "tree.expmech" in str(refused.value)

    # The raw routes, the jobs endpoint and the estimate refuse the same way.
    for operation, (path, body) in SAMPLER_CALLS.items():
        for url, sent in (
            (path, body),
            ("jobs", {"operation": operation, "request": body}),
        ):
            response = client.post(
                f"/v1/datasets/{labelled}/{url}",
                json=sent,
                headers={**analyst_headers, "Idempotency-Key": f"policy-{operation}-{url}"},
            )
            detail = expect_error(response, 403, "Forbidden")
            assert f"{operation} releases the final state of an MCMC chain" in detail
            assert "nothing was charged" in detail
        assert _estimate(client, analyst_headers, labelled, operation) == 403
    assert handle.budget().remaining_epsilon == GRANT
    assert owner.admin.ledger(labelled) == []

    # Exact operations are served as before.
    grown = handle.run(
        TreeExpMechRequest(
            view="left", target=AttributeTarget(attribute="member"), depth=1, epsilon=0.5
        )
    )
    assert grown.receipt.guarantee == "pure"
    assert AltExpM(in_trees=1, rm_iterations=1, epsilon=1.0, depth=1).plan(handle).fits
    # A rule-list fit plans the exact sampler by default (pure): served.
    rule_lists = dpmine.DPBayesianRuleList(epsilon=1.0, k_per_class=3, max_length=1).plan(handle)
    assert "brl.sample_rule_list_exact" in [call.operation for call in rule_lists.calls]
    assert [e.operation for e in owner.admin.ledger(labelled)] == ["tree.expmech"]


def test_the_owner_sets_it_at_registration_and_changes_it_audited(
    *,
    client: TestClient,
    owner: dpmine.Connection,
    owner_headers: dict[str, str],
    analyst: dpmine.Connection,
    analyst_headers: dict[str, str],
    toy_csv: Path,
    toy_metadata: DatasetMetadata,
) -> None:
    request = CreateDatasetRequest(
        id="strict",
        name="Strict",
        epsilon_cap=5.0,
        guarantee_policy="pure_only",
        metadata=toy_metadata,
        source=CsvSource(path=toy_csv.name),
    )
    registered = owner.admin.upload_dataset(request, {"path": toy_csv})
    assert registered["dataset"]["guarantee_policy"] == "pure_only"
    owner.admin.grant("strict", "alice", 1.0)
    listed = {info.id: info for info in analyst.datasets()}
    assert listed["strict"].guarantee_policy == "pure_only"
    assert _estimate(client, analyst_headers, "strict", "tree.mcmc") == 403

    url = "/v1/admin/datasets/strict/guarantee-policy"
    allowed = client.put(url, json={"guarantee_policy": "allow_approximate"}, headers=owner_headers)
    assert DatasetInfo.model_validate(allowed.json()).guarantee_policy == "allow_approximate"
    assert _estimate(client, analyst_headers, "strict", "tree.mcmc") == 200

    for body in ({"guarantee_policy": "exact"}, {"guarantee_policy": None}, {}):
        expect_error(client.put(url, json=body, headers=owner_headers), 422, "InvalidRequest")
    as_analyst = client.put(url, json={"guarantee_policy": "pure_only"}, headers=analyst_headers)
    assert as_analyst.status_code == 403
    missing = client.put(
        "/v1/admin/datasets/nope/guarantee-policy",
        json={"guarantee_policy": "pure_only"},
        headers=owner_headers,
    )
    expect_error(missing, 404, "NotFound")

    events = owner.admin.audit()
    assert [
        e.details for e in events if e.action == "dataset_registered" and e.target == "strict"
    ] == [{"guarantee_policy": "pure_only"}]
    assert [e.details for e in events if e.action == "dataset_guarantee_policy_set"] == [
        {"from": "pure_only", "to": "allow_approximate"}
    ]

    owner.admin.retire_dataset("strict")
    retired = client.put(url, json={"guarantee_policy": "pure_only"}, headers=owner_headers)
    assert "retired" in expect_error(retired, 422, "InvalidRequest")


def test_the_console_form_changes_the_policy(
    client: TestClient,
    owner: dpmine.Connection,
    owner_headers: dict[str, str],
    analyst: dpmine.Connection,
    toy: str,
) -> None:
    login(client, owner_headers["Authorization"].removeprefix("Bearer "))
    token = csrf_of(client, "/console/datasets")
    url = f"/console/datasets/{toy}/guarantee-policy"
    saved = post_form(client, url, {"guarantee_policy": "pure_only"}, token=token)
    assert (saved.status_code, saved.headers["location"]) == (
        303,
        "/console/datasets?notice=policy_set",
    )
    page = client.get("/console/datasets?notice=policy_set").text
    assert "Guarantee policy saved" in page
    assert '<option value="pure_only" selected>' in page
    assert analyst.dataset(toy).guarantee_policy == "pure_only"
    bad = post_form(client, url, {"guarantee_policy": "sometimes"}, token=token)
    assert bad.status_code == 422
    assert "guarantee_policy" in bad.text
    assert analyst.dataset(toy).guarantee_policy == "pure_only"
    changes = [e.details for e in owner.admin.audit() if e.action == "dataset_guarantee_policy_set"]
    assert changes == [{"from": "allow_approximate", "to": "pure_only"}]
