"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy import text

from dpmine.wire import WireModel
from dpmine_server import __version__
from dpmine_server.api.deps import ServicesDep
from dpmine_server.services.timing import TimingPolicy

router = APIRouter(tags=["health"])


class Health(WireModel):
    """Server status."""

    status: str
    version: str
    database: str
    #: The timing calibration file in force (DPMINE_TIMING_CALIBRATION: public configuration),
    #: or None for the hand-set budget estimates.
    timing_calibration: str | None = None


@router.get("/health", response_model=Health)
def health(services: ServicesDep) -> Health:
    """200 when the server and its database answer."""
    with services.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return Health(
        status="ok",
        version=__version__,
        database=services.engine.dialect.name,
        timing_calibration=TimingPolicy.from_settings(services.settings).calibration_label,
    )
