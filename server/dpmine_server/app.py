"""The FastAPI application: ``create_app(settings)``; ``dpmine-server serve`` runs it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from dpmine_server import __version__
from dpmine_server.api.router import api_router
from dpmine_server.errors import add_exception_handlers
from dpmine_server.services.container import Services, build_services
from dpmine_server.settings import Settings, get_settings

__all__ = ["create_app"]

DESCRIPTION = """
Differentially private data mining. Every operation that touches data is charged to the
dataset's privacy-budget ledger *before* the data is read and answers through a DP mechanism.
Send `Authorization: Bearer <api key>`; send an `Idempotency-Key` header (a UUID) with every
operation so that a retry returns the stored release instead of spending budget again.
"""


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app; services are created at start-up (migrations, recovery) unless given."""
    resolved = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        built = services or build_services(resolved)
        app.state.services = built
        try:
            yield
        finally:
            if services is None:
                built.close()

    app = FastAPI(
        title="dpmine",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    add_exception_handlers(app)
    app.include_router(api_router)
    return app
