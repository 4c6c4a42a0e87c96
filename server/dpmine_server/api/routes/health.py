"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from dpmine.wire import WireModel
from dpmine_server import __version__
from dpmine_server.api.deps import ServicesDep

router = APIRouter(tags=["health"])


class Health(WireModel):
    """Server status."""

    status: str
    version: str
    database: str
    #: The timing calibration file in force (DPMINE_TIMING_CALIBRATION: public configuration),
    #: or None for the hand-set budget estimates.
    timing_calibration: str | None = None
    #: Data-touching requests this API process holds at once (DPMINE_MAX_IN_FLIGHT; more are
    #: refused 429 Overloaded before any charge).
    max_in_flight: int | None = None
    #: The fixed part of every padding budget in force, in ms (configured or calibrated;
    #: None when padding is off).
    timing_base_ms: float | None = None
    #: The fixed part of a background job's padding budget, in ms: the base, or more when the
    #: calibration measured the job path (hand-over to a worker and the final write).
    timing_job_base_ms: float | None = None
    #: When this process runs Python's full garbage collections: "when idle" (a padded
    #: process: only while it holds no request, services/collector.py) or "automatic".
    full_collections: str = "automatic"


@router.get("/health", response_model=Health)
def health(services: ServicesDep) -> Health:
    """200 when the server and its database answer."""
    with services.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    policy = services.timing
    return Health(
        status="ok",
        version=__version__,
        database=services.engine.dialect.name,
        timing_calibration=policy.calibration_label,
        max_in_flight=services.admission.limit,
        timing_base_ms=round(policy.base * 1000.0, 3) if policy.enabled else None,
        timing_job_base_ms=round(policy.for_jobs().base * 1000.0, 3) if policy.enabled else None,
        full_collections="when idle" if services.collector is not None else "automatic",
    )
