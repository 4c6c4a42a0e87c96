"""Routes of the redescription operations (ALGORITHMS.md §1.6; Serenade §2 joins here)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from dpmine.wire import ComputeQualityRequest, ComputeQualityResponse
from dpmine_server.api.common import ERRORS, run_operation
from dpmine_server.api.deps import AnalystDep, IdempotencyKeyDep, ServicesDep

router = APIRouter(tags=["operations"])


@router.post(
    "/datasets/{dataset_id}/redescriptions/quality",
    response_model=ComputeQualityResponse,
    responses=ERRORS,
    summary="Noisy quality of a redescription (red.compute_quality)",
)
def compute_quality(
    dataset_id: str,
    body: ComputeQualityRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
    response: Response,
) -> dict[str, Any]:
    """Four noisy support cells (or |I|, |U| in paper mode) with derived J̃ and p̃. Costs ε."""
    return run_operation(
        services,
        principal=analyst,
        dataset_id=dataset_id,
        operation="red.compute_quality",
        request=body,
        idempotency_key=idempotency_key,
        response=response,
    )
