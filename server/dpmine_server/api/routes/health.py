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


@router.get("/health", response_model=Health)
def health(services: ServicesDep) -> Health:
    """200 when the server and its database answer."""
    with services.engine.connect() as connection:
        connection.execute(text("SELECT 1"))
    return Health(status="ok", version=__version__, database=services.engine.dialect.name)
