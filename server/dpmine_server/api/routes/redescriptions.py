"""Routes of the redescription operations: noisy quality (ALGORITHMS.md §1.6) and Serenade's
calibrate (free), initial pairs and extend-one (§2)."""

from __future__ import annotations

from dpmine.wire import (
    CalibrateRequest,
    CalibrateResponse,
    DatasetMetadata,
)
from dpmine_server.api.common import ERRORS, operation_router
from dpmine_server.api.deps import (
    PrincipalDep,
    ServicesDep,
    SessionDep,
)
from dpmine_server.errors import InvalidRequest
from dpmine_server.operations import redescriptions
from dpmine_server.operations.serenade_quality import (
    DEFAULT_STEEPNESS_GRID,
    calibrate,
    sensitivity,
)

router = operation_router(redescriptions.OPERATIONS)


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
