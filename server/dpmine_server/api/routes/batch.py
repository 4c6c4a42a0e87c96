"""The batch route: several independent inline calls in one request, charged as the sum of
their parts, padded once (issue #23, item 2; wire model in dpmine/wire/batch.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from dpmine.wire import BatchRequest, BatchResponse
from dpmine_server.api.common import OPERATION_ERRORS, padded_batch
from dpmine_server.api.deps import AnalystDep, ArrivalDep, IdempotencyKeyDep, ServicesDep

router = APIRouter(tags=["operations"])


@router.post(
    "/datasets/{dataset_id}/batch",
    response_model=BatchResponse,
    responses=OPERATION_ERRORS,
    summary="Several independent calls in one request, padded once",
)
async def run_batch(
    arrival: ArrivalDep,
    dataset_id: str,
    body: BatchRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
    response: Response,
) -> dict[str, Any]:
    """Run 1 to MAX_BATCH_PARTS calls of inline operations in order and answer their releases
    in order, each exactly as its own route would (its own mechanism, randomness, ledger entry
    and receipt). Every part is validated before anything is charged: a bad part refuses the
    whole batch (422 naming the part). The charge is the sum of the parts' costs, all or none;
    an Idempotency-Key covers the whole batch (a retry replays every part, another body under
    the same key is refused). The answer is held until the deadline of the batch's public budget:
    one base plus every part's work (README, Timing)."""
    return await padded_batch(
        services,
        arrival=arrival,
        principal=analyst,
        dataset_id=dataset_id,
        batch=body,
        idempotency_key=idempotency_key,
        response=response,
    )
