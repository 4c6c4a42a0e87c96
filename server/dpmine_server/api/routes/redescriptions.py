"""Routes of the redescription operations: noisy quality (ALGORITHMS.md §1.6) and Serenade's
calibrate (free), initial pairs and extend-one (§2)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from dpmine.wire import (
    CalibrateRequest,
    CalibrateResponse,
    ComputeQualityRequest,
    ComputeQualityResponse,
    DatasetMetadata,
    ExtendOneRequest,
    ExtendOneResponse,
    InitialPairsRequest,
    InitialPairsResponse,
)
from dpmine_server.api.common import ERRORS, run_operation
from dpmine_server.api.deps import (
    AnalystDep,
    IdempotencyKeyDep,
    PrincipalDep,
    ServicesDep,
    SessionDep,
)
from dpmine_server.errors import InvalidRequest
from dpmine_server.operations.serenade_quality import (
    DEFAULT_STEEPNESS_GRID,
    calibrate,
    sensitivity,
)

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


@router.post(
    "/datasets/{dataset_id}/redescriptions/serenade/calibrate",
    response_model=CalibrateResponse,
    responses=ERRORS,
    summary="Sensitivity of Serenade's quality (serenade.calibrate); free",
)
def calibrate_quality(
    dataset_id: str,
    body: CalibrateRequest,
    principal: PrincipalDep,
    services: ServicesDep,
    session: SessionDep,
) -> CalibrateResponse:
    """Δ(s, x0) from the public n_max, and the steepness line search when s is null (§2.1)."""
    dataset = (
        services.datasets.get(session, dataset_id)
        if principal.role == "owner"
        else services.datasets.get_for_analyst(session, dataset_id, principal)
    )
    n_max = DatasetMetadata.model_validate(dataset.metadata_json).n_max
    if body.x0 >= n_max:
        raise InvalidRequest(f"x0 = {body.x0} must be below the public row bound n_max = {n_max}")
    try:
        if body.s is None:
            s, delta = calibrate(body.x0, n_max, body.grid or DEFAULT_STEEPNESS_GRID)
        else:
            s, delta = body.s, sensitivity(body.s, body.x0, n_max)
    except ValueError as error:
        raise InvalidRequest(str(error)) from error
    return CalibrateResponse(s=s, delta=delta, x0=body.x0, n_max=n_max)


@router.post(
    "/datasets/{dataset_id}/redescriptions/serenade/initial-pairs",
    response_model=InitialPairsResponse,
    responses=ERRORS,
    summary="Serenade initial pairs (serenade.initial_pairs)",
)
def serenade_initial_pairs(
    dataset_id: str,
    body: InitialPairsRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
    response: Response,
) -> dict[str, Any]:
    """``count`` independent exponential-mechanism draws of literal pairs. Costs ε."""
    return run_operation(
        services,
        principal=analyst,
        dataset_id=dataset_id,
        operation="serenade.initial_pairs",
        request=body,
        idempotency_key=idempotency_key,
        response=response,
    )


@router.post(
    "/datasets/{dataset_id}/redescriptions/serenade/extend",
    response_model=ExtendOneResponse,
    responses=ERRORS,
    summary="Serenade ExtendOne, CS or ES mode (serenade.extend_one)",
)
def serenade_extend_one(
    dataset_id: str,
    body: ExtendOneRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
    response: Response,
) -> dict[str, Any]:
    """One exponential-mechanism draw over the extensions of the collection. Costs ε."""
    return run_operation(
        services,
        principal=analyst,
        dataset_id=dataset_id,
        operation="serenade.extend_one",
        request=body,
        idempotency_key=idempotency_key,
        response=response,
    )
