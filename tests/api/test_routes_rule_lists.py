"""The DP Bayesian rule-list operations (ALGORITHMS.md §5) end to end through the HTTP API
in-process: antecedents per class, a sampled rule list (a job in a worker process, through the
synchronous route and through ``POST .../jobs``) and its noisy capture counts, each with its
receipt (guarantee "pure", "approximate", "pure") and the charged ε; invalid requests are
refused with a 4xx that says what to fix, before any charge."""

from __future__ import annotations

import pytest

import dpmine
from dpmine.errors import InvalidRequestError
from dpmine.wire import (
    MIN_RULE_LIST_ITERATIONS,
    Antecedent,
    BoolLiteral,
    PointEstimatesRequest,
    RuleListAntecedentsRequest,
    SampleRuleListRequest,
)
from support.inprocess import TestClient, expect_error

from .conftest import GRANT


def test_each_rule_list_operation_runs_through_the_api(
    analyst: dpmine.Connection, labelled: str
) -> None:
    mined = analyst.run(
        labelled, RuleListAntecedentsRequest(k_per_class=5, max_length=2, epsilon=0.5)
    )
    assert [entry.label for entry in mined.by_class] == ["positive", "negative"]
    assert all(len(entry.antecedents) == 5 for entry in mined.by_class)
    assert all(
        item.attribute != "member"
        for entry in mined.by_class
        for antecedent in entry.antecedents
        for item in antecedent.items
    )
    assert (mined.receipt.operation, mined.receipt.guarantee) == ("brl.antecedents", "pure")
    assert mined.receipt.epsilon_exact == "0.5"

    union: list[Antecedent] = []
    for entry in mined.by_class:
        union += [a for a in entry.antecedents if a not in union]
    sampled = analyst.run(
        labelled, SampleRuleListRequest(antecedents=union, epsilon=0.5, iterations=1200)
    )
    assert sampled.iterations == 1200
    assert all(rule in union for rule in sampled.rules)
    assert (sampled.receipt.operation, sampled.receipt.guarantee) == (
        "brl.sample_rule_list",
        "approximate",
    )

    estimates = analyst.run(labelled, PointEstimatesRequest(rules=sampled.rules, epsilon=0.5))
    assert (
        len(estimates.negative_counts) == len(estimates.positive_counts) == len(sampled.rules) + 1
    )
    assert estimates.noise_scale == pytest.approx(2.0)
    assert estimates.receipt.guarantee == "pure"
    assert estimates.receipt.remaining_epsilon == pytest.approx(GRANT - 1.5)


def test_the_sampler_runs_as_a_background_job(analyst: dpmine.Connection, labelled: str) -> None:
    request = SampleRuleListRequest(
        antecedents=[
            Antecedent(items=[BoolLiteral(attribute="smoker")]),
            Antecedent(items=[BoolLiteral(attribute="smoker", negated=True)]),
        ],
        epsilon=0.25,
        iterations=2000,
    )
    job = analyst.submit(labelled, request)
    assert job.status in {"queued", "running", "done"}
    released = analyst.wait_for_job(job, poll_seconds=0.05, timeout=120)
    assert released.receipt.guarantee == "approximate"
    assert released.receipt.epsilon_exact == "0.25"
    assert analyst.dataset(labelled).budget().remaining_epsilon == pytest.approx(GRANT - 0.25)


def test_a_dataset_without_a_label_is_refused_before_the_charge(
    analyst: dpmine.Connection, toy: str
) -> None:
    with pytest.raises(InvalidRequestError, match=r'label: \{"attribute"'):
        analyst.run(toy, RuleListAntecedentsRequest(epsilon=0.5))
    rules = [Antecedent(items=[BoolLiteral(attribute="smoker")])]
    with pytest.raises(InvalidRequestError, match="label"):
        analyst.run(toy, PointEstimatesRequest(rules=rules, epsilon=0.5))
    assert analyst.dataset(toy).budget().remaining_epsilon == GRANT


def test_bad_antecedents_are_refused_before_the_charge(
    client: TestClient, analyst: dpmine.Connection, analyst_headers: dict[str, str], labelled: str
) -> None:
    cases = [
        (
            "rule-lists/sample",
            {"antecedents": [{"items": [{"kind": "bool", "attribute": "member"}]}], "epsilon": 1},
            "label attribute",
        ),
        (
            "rule-lists/point-estimates",
            {
                "rules": [{"items": [{"kind": "cat", "attribute": "color", "category": "pink"}]}],
                "epsilon": 1,
            },
            "not a declared category",
        ),
        (
            "rule-lists/point-estimates",
            {"rules": [{"items": [{"kind": "bool", "attribute": "age"}]}], "epsilon": 1},
            "does not apply",
        ),
        (
            "rule-lists/antecedents",
            {"k_per_class": 500, "max_length": 1, "epsilon": 1},
            "k_per_class = 500 exceeds",
        ),
    ]
    for path, body, message in cases:
        response = client.post(
            f"/v1/datasets/{labelled}/{path}",
            json=body,
            headers={**analyst_headers, "Idempotency-Key": f"bad-{path}-{message}"},
        )
        detail = expect_error(response, 422, "InvalidRequest")
        assert message in detail, detail
    assert analyst.dataset(labelled).budget().remaining_epsilon == GRANT


def test_a_short_chain_or_a_chosen_start_is_refused_before_the_charge(
    client: TestClient, analyst: dpmine.Connection, analyst_headers: dict[str, str], labelled: str
) -> None:
    """§5.3, ALGORITHMS.md §6 #16: fewer steps than the public minimum, or a start list of the
    analyst's, are refused with a 422 that says why, on the route and as a job; nothing is
    charged."""
    antecedents = [{"items": [{"kind": "bool", "attribute": "smoker"}]}]
    body = {"antecedents": antecedents, "epsilon": 1}
    short = {**body, "iterations": MIN_RULE_LIST_ITERATIONS - 1}
    chosen = {**body, "iterations": 1, "initial": [0]}  # the old attack's request
    messages = {
        "short": f"at least {MIN_RULE_LIST_ITERATIONS}, got {MIN_RULE_LIST_ITERATIONS - 1}",
        "chosen": "'initial' is no longer accepted",
    }
    for name, request in (("short", short), ("chosen", chosen)):
        for path, sent in (
            ("rule-lists/sample", request),
            ("jobs", {"operation": "brl.sample_rule_list", "request": request}),
        ):
            response = client.post(
                f"/v1/datasets/{labelled}/{path}",
                json=sent,
                headers={**analyst_headers, "Idempotency-Key": f"chain-{name}-{path}"},
            )
            detail = expect_error(response, 422, "InvalidRequest")
            assert messages[name] in detail, detail
    assert analyst.dataset(labelled).budget().remaining_epsilon == GRANT
