"""Routes of the top-K itemset operations (ALGORITHMS.md §4)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from dpmine.wire import TopKItemsetsRequest, TopKItemsetsResponse
from dpmine_server.api.common import ERRORS, run_operation
from dpmine_server.api.deps import AnalystDep, IdempotencyKeyDep, ServicesDep

router = APIRouter(tags=["operations"])


@router.post(
    "/datasets/{dataset_id}/itemsets/top-k-em",
    response_model=TopKItemsetsResponse,
    responses=ERRORS,
    summary="Top-K itemsets, exponential mechanism (fim.topk_em)",
)
def top_k_em(
    dataset_id: str,
    body: TopKItemsetsRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
    response: Response,
) -> dict[str, Any]:
    """K itemsets by K rounds of the exponential mechanism on truncated counts. Costs ε."""
    return run_operation(
        services,
        principal=analyst,
        dataset_id=dataset_id,
        operation="fim.topk_em",
        request=body,
        idempotency_key=idempotency_key,
        response=response,
    )


@router.post(
    "/datasets/{dataset_id}/itemsets/top-k-laplace",
    response_model=TopKItemsetsResponse,
    responses=ERRORS,
    summary="Top-K itemsets, Laplace noise (fim.topk_laplace)",
)
def top_k_laplace(
    dataset_id: str,
    body: TopKItemsetsRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
    response: Response,
) -> dict[str, Any]:
    """K itemsets with the largest Laplace-noised truncated counts. Costs ε."""
    return run_operation(
        services,
        principal=analyst,
        dataset_id=dataset_id,
        operation="fim.topk_laplace",
        request=body,
        idempotency_key=idempotency_key,
        response=response,
    )
