"""Routes of the redescription operations: noisy quality (ALGORITHMS.md §1.6) and Serenade's
calibrate (free), initial pairs and extend-one (§2)."""

from __future__ import annotations

from dpmine.wire import (
    CalibrateRequest,
    CalibrateResponse,
    CalibrationRow,
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
    line_search,
    sensitivities,
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
    """Δ(s, x0), Δ_up, Δ_down and c per unit ε from the public n_max, with the steepness line
    search when s is null, the coverage factor when y0 is given and one trade-off row per
    ``tradeoff_x0`` (§2.1, §0.8). Public inputs only: no data access, no budget."""
    dataset = (
        services.datasets.get(session, dataset_id)
        if principal.role == "owner"
        else services.datasets.get_for_analyst(session, dataset_id, principal)
    )
    n_max = DatasetMetadata.model_validate(dataset.metadata_json).n_max
    for name, x0 in [("x0", body.x0)] + [("tradeoff_x0", x) for x in body.tradeoff_x0 or []]:
        if x0 >= n_max:
            raise InvalidRequest(
                f"{name} = {x0} must be below the public row bound n_max = {n_max}"
            )
    try:
        main = _calibration_row(body, body.x0, n_max)
        rows = [_calibration_row(body, x0, n_max) for x0 in body.tradeoff_x0 or []]
    except ValueError as error:
        raise InvalidRequest(str(error)) from error
    return CalibrateResponse(
        s=main.s,
        delta=main.delta,
        x0=body.x0,
        n_max=n_max,
        y0=body.y0,
        s2=None if body.y0 is None else (main.s if body.s2 is None else body.s2),
        calibration=body.calibration,
        delta_up=main.delta_up,
        delta_down=main.delta_down,
        c_per_epsilon=main.c_per_epsilon,
        tradeoff=rows,
    )


def _calibration_row(body: CalibrateRequest, x0: float, n_max: int) -> CalibrationRow:
    """The steepness (given or line-searched) and sensitivities of Q at one x0."""
    if body.s is None:
        s, sens = line_search(
            x0,
            n_max,
            body.grid or DEFAULT_STEEPNESS_GRID,
            y0=body.y0,
            s2=body.s2,
            calibration=body.calibration,
        )
    else:
        s, sens = body.s, sensitivities(body.s, x0, n_max, y0=body.y0, s2=body.s2)
    return CalibrationRow(
        x0=x0,
        s=s,
        delta=sens.symmetric,
        delta_up=sens.up,
        delta_down=sens.down,
        c_per_epsilon=sens.c_per_epsilon(body.calibration),
    )
