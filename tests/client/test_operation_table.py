"""The wire operation table (``dpmine.wire.OPERATIONS``): finding the operation of a request."""

from __future__ import annotations

import pytest

from dpmine.wire import (
    COUNT_NOISY,
    FIM_TOPK_EM,
    FIM_TOPK_LAPLACE,
    OPERATIONS,
    NoisyCountRequest,
    NoisyCountResponse,
    Operation,
    TopKItemsetsRequest,
    TopKItemsetsResponse,
    operation_for,
    operations_for,
)


def test_each_request_model_finds_its_operations() -> None:
    for operation in OPERATIONS.values():
        assert operation in operations_for(operation.request_model)
        assert OPERATIONS[operation.name] is operation
    assert operations_for(TopKItemsetsRequest) == (FIM_TOPK_EM, FIM_TOPK_LAPLACE)
    assert operation_for(NoisyCountRequest(epsilon=0.1)) is COUNT_NOISY


def test_a_shared_request_model_needs_the_operation_name() -> None:
    request = TopKItemsetsRequest(k=3, min_length=2, epsilon=1.0)
    with pytest.raises(ValueError, match="name the operation"):
        operation_for(request)
    assert operation_for(request, "fim.topk_laplace") is FIM_TOPK_LAPLACE
    with pytest.raises(ValueError, match="does not take"):
        operation_for(request, "count.noisy")


def test_a_request_declares_the_response_its_operation_answers_with() -> None:
    assert COUNT_NOISY.url("toy") == "/v1/datasets/toy/counts"
    assert COUNT_NOISY.plan(NoisyCountRequest(epsilon=0.5)).operation == "count.noisy"
    with pytest.raises(TypeError, match="declared with NoisyCountResponse"):
        Operation(
            name="count.wrong",
            path="wrong",
            request_model=NoisyCountRequest,
            response_model=TopKItemsetsResponse,
            guarantee="pure",
        )
    assert NoisyCountRequest.model_json_schema()["title"] == "NoisyCountRequest"
    assert NoisyCountResponse.model_fields["receipt"].is_required()
