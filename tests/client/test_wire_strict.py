"""Wire models parse strictly (issue #9): no string-to-number or string-to-bool coercion, while
the legitimate JSON forms (an int where a float is expected, ISO timestamps) keep working; an
object with very many unknown keys is refused at once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dpmine.wire import (
    MAX_ESTIMATE_CALLS,
    BudgetStatus,
    EstimateRequest,
    ExtendOneRequest,
    NoisyCountRequest,
    Receipt,
    Redescription,
    TopKItemsetsRequest,
)
from dpmine.wire.common import MAX_UNKNOWN_FIELDS
from dpmine.wire.queries import And, NumLiteral
from dpmine_server.settings import Settings

TOP_K = {"k": 10, "min_length": 2, "epsilon": 0.5}


def _refused(model: Any, data: Any) -> list[ErrorDetails]:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(data)
    return refused.value.errors()


@pytest.mark.parametrize(
    ("field", "value", "kind"),
    [
        ("k", "10", "int_type"),
        ("k", 10.0, "int_type"),
        ("k", True, "int_type"),
        ("with_counts", "off", "bool_type"),
        ("with_counts", 0, "bool_type"),
        ("epsilon", "0.5", "float_type"),
        ("rho", "0.1", "float_type"),
        ("min_length", "2", "int_type"),
    ],
)
def test_top_k_request_refuses_coercion(field: str, value: Any, kind: str) -> None:
    errors = _refused(TopKItemsetsRequest, {**TOP_K, field: value})
    assert [(e["loc"], e["type"]) for e in errors] == [((field,), kind)]


def test_a_literal_refuses_a_string_for_negated() -> None:
    body = {"predicate": {"kind": "bool", "attribute": "smoker", "negated": "yes"}, "epsilon": 1}
    errors = _refused(NoisyCountRequest, body)
    assert errors[0]["type"] == "bool_type"
    assert errors[0]["loc"][-1] == "negated"


def test_a_numeric_bound_refuses_a_string() -> None:
    body = {"predicate": {"kind": "num", "attribute": "age", "lower": "18"}, "epsilon": 1}
    assert _refused(NoisyCountRequest, body)[0]["type"] == "float_type"


def test_the_same_refusals_from_json_text() -> None:
    for text in (
        '{"k": "10", "min_length": 2, "epsilon": 0.5}',
        '{"k": 10, "min_length": 2, "epsilon": 0.5, "with_counts": "off"}',
    ):
        with pytest.raises(ValidationError):
            TopKItemsetsRequest.model_validate_json(text)


def test_legitimate_json_forms_still_parse() -> None:
    # An int where a float is expected (JSON 1 for an epsilon), from Python and from JSON.
    assert NoisyCountRequest.model_validate({"epsilon": 1}).epsilon == 1.0
    assert NoisyCountRequest.model_validate_json('{"epsilon": 2}').epsilon == 2.0
    request = TopKItemsetsRequest.model_validate(
        {**TOP_K, "with_counts": False, "count_share": 1 / 4}
    )
    assert request.with_counts is False
    assert TopKItemsetsRequest.model_validate_json(json.dumps(TOP_K)).k == 10
    # Timestamps are ISO strings on the wire (the one lax type), parsed from a dict too.
    receipt = Receipt.model_validate(
        {
            "ledger_entry_id": 1,
            "dataset_id": "d",
            "operation": "count.noisy",
            "epsilon": 1,
            "epsilon_exact": "1",
            "guarantee": "pure",
            "remaining_epsilon": 0,
            "created_at": "2026-11-24T10:00:00Z",
        }
    )
    assert receipt.created_at == datetime(2026, 11, 24, 10, tzinfo=UTC)
    assert receipt.remaining_epsilon == 0.0
    # A round trip through JSON gives the same model.
    again = Receipt.model_validate(receipt.model_dump(mode="json"))
    assert again == receipt
    status = BudgetStatus(
        dataset_id="d", grant_epsilon=1, grant_spent=0, dataset_remaining=1, remaining_epsilon=1
    )
    assert status.grant_epsilon == 1.0


def test_rho_of_zero_is_still_out_of_range() -> None:
    # Strictness does not replace the constraints.
    errors = _refused(TopKItemsetsRequest, {**TOP_K, "rho": 0})
    assert errors[0]["type"] == "greater_than"


def test_literal_and_discriminator_fields_take_their_strings() -> None:
    request = NoisyCountRequest.model_validate(
        {"predicate": {"kind": "cat", "attribute": "color", "category": "red"}, "epsilon": 0.5}
    )
    assert request.predicate is not None


def test_many_unknown_keys_are_refused_at_once() -> None:
    flood = {f"k{i}": i for i in range(200_000)}
    errors = _refused(NoisyCountRequest, {"epsilon": 1, **flood})
    assert len(errors) == 1  # one error, not 200,000
    assert "fields given" in errors[0]["msg"]


def test_a_few_unknown_keys_keep_the_usual_errors() -> None:
    extra = {f"x{i}": i for i in range(MAX_UNKNOWN_FIELDS)}
    errors = _refused(NoisyCountRequest, {"epsilon": 1, **extra})
    assert {e["type"] for e in errors} == {"extra_forbidden"}
    assert len(errors) == MAX_UNKNOWN_FIELDS


def test_estimate_requests_are_capped() -> None:
    call = {"operation": "count.noisy", "request": {"epsilon": 0.1}}
    assert len(EstimateRequest.model_validate({"calls": [call] * MAX_ESTIMATE_CALLS}).calls) == (
        MAX_ESTIMATE_CALLS
    )
    errors = _refused(EstimateRequest, {"calls": [call] * (MAX_ESTIMATE_CALLS + 1)})
    assert f"at most {MAX_ESTIMATE_CALLS} calls" in errors[0]["msg"]


def test_the_largest_legitimate_request_fits_the_default_body_limit() -> None:
    def query(side: str) -> And:
        terms = [
            NumLiteral(attribute=f"{side}{i:03d}".ljust(200, "x"), lower=0.1234567890123, upper=1e9)
            for i in range(16)
        ]
        return And(terms=terms)

    red = Redescription(left=query("l"), right=query("r"))
    request = ExtendOneRequest(collection=[red] * 1000, epsilon=0.1, quality={"x0": 10.0})
    size = len(request.model_dump_json().encode())
    assert size > 8 * 1024**2  # the realistic worst case is large...
    assert size < Settings.model_fields["max_json_bytes"].default  # ...and fits the default
