"""Route of ``count.noisy`` (ALGORITHMS.md §0.6)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from dpmine.wire import NoisyCountRequest, NoisyCountResponse
from dpmine_server.api.common import ERRORS, run_operation
from dpmine_server.api.deps import AnalystDep, IdempotencyKeyDep, ServicesDep

router = APIRouter(tags=["operations"])


@router.post(
    "/datasets/{dataset_id}/counts",
    response_model=NoisyCountResponse,
    responses=ERRORS,
    summary="Noisy count (count.noisy)",
)
def noisy_count(
    dataset_id: str,
    body: NoisyCountRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
    response: Response,
) -> dict[str, Any]:
    """Rows satisfying the predicate (all rows if null) + discrete Laplace(1/ε). Costs ε."""
    return run_operation(
        services,
        principal=analyst,
        dataset_id=dataset_id,
        operation="count.noisy",
        request=body,
        idempotency_key=idempotency_key,
        response=response,
    )
