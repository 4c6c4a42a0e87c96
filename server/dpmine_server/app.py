"""The FastAPI application: ``create_app(settings)``; ``dpmine-server serve`` runs it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI

from dpmine_server import __version__
from dpmine_server.api.collection_hold import CollectionHold
from dpmine_server.api.common import operation_id, operation_router
from dpmine_server.api.console import router as console_router
from dpmine_server.api.deps import flush_failed_logins
from dpmine_server.api.docs import add_docs
from dpmine_server.api.errors import add_exception_handlers
from dpmine_server.api.limits import UPLOAD_FORM_ALLOWANCE, UPLOAD_PATHS, BodySizeLimit, LoginGuard
from dpmine_server.api.router import api_router
from dpmine_server.api.routes.jobs import submit_job_router
from dpmine_server.api.upload_folders import sweep_uploads, uploads_dir
from dpmine_server.operations import CATALOG
from dpmine_server.operations.testing import TEST_OPERATIONS
from dpmine_server.services.container import Services, build_services
from dpmine_server.services.principals import SecretKeyMismatch
from dpmine_server.settings import Settings, get_settings

__all__ = ["create_app"]

logger = logging.getLogger(__name__)

DESCRIPTION = """
Differentially private data mining. Every operation that touches data is charged to the
dataset's privacy-budget ledger *before* the data is read and answers through a DP mechanism.
Send `Authorization: Bearer <api key>`; send an `Idempotency-Key` header (a UUID) with every
operation so that a retry returns the stored release instead of spending budget again.

Section numbers (§) cite the engine's algorithm specification; `docs/operations.md` explains each
one with its operation's mechanism, sensitivity and cost, and "contract item N" is an item of the
privacy contract in `docs/privacy.md` (both in the dpmine repository and source distribution).
"""


def _sweep_uploads(data_dir: Path) -> None:
    """Remove the upload folders of processes that died mid-upload (api/upload_folders.py: a
    folder whose owner lives is locked, so other live processes' uploads stay). A failure is
    logged and start-up goes on: the next upload sweeps again."""
    try:
        sweep_uploads(uploads_dir(data_dir, create=False))
    except OSError as error:
        logger.warning("could not sweep the upload folders of %s: %s", data_dir, error)


#: Worker threads kept free for requests that are not waiting in the kernel lane
#: (authentication, metadata reads, pricing), anyio's default of 40 at least.
_FREE_THREADS = 24


def _size_thread_limiter(max_in_flight: int) -> None:
    """Give the routes' worker threads room for every admitted request to wait in the kernel
    lane at once (services/kernel_lane.py) and :data:`_FREE_THREADS` more: an earlier request
    that has yet to reserve its place needs a thread to do it, so waiting requests must never
    hold them all."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = max(limiter.total_tokens, max_in_flight + _FREE_THREADS)


def create_app(settings: Settings | None = None, *, services: Services | None = None) -> FastAPI:
    """Build the app; services are created at start-up (migrations, recovery) unless given."""
    resolved = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            built = services or build_services(resolved)
        except SecretKeyMismatch as error:
            logger.error("dpmine cannot start: %s", error)
            raise
        app.state.services = built
        app.state.login_guard = LoginGuard.from_settings(built.settings)
        _size_thread_limiter(built.settings.max_in_flight)
        try:
            await anyio.to_thread.run_sync(_sweep_uploads, built.settings.data_dir)
            yield
        finally:
            flush_failed_logins(app)
            if services is None:
                built.close()

    app = FastAPI(
        title="dpmine",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # add_docs: the same pages with local assets instead of a CDN's
        redoc_url=None,
        generate_unique_id_function=operation_id,
    )
    add_docs(app)
    add_exception_handlers(app)
    if resolved.environment == "test":  # test-only operations (operations/testing.py)
        # Before api_router: this job route (the documented one plus the test operations)
        # answers in test mode, the documented one stays as the OpenAPI document shows it.
        every = [*CATALOG.values(), *TEST_OPERATIONS]
        app.include_router(submit_job_router(every, include_in_schema=False), prefix="/v1")
        app.include_router(operation_router(TEST_OPERATIONS), prefix="/v1", include_in_schema=False)
    app.include_router(api_router)
    app.include_router(console_router)  # the owner console's pages under /console
    # Refuses oversized bodies before routing, authentication and parsing.
    upload_limit = resolved.max_upload_bytes + UPLOAD_FORM_ALLOWANCE
    app.add_middleware(
        BodySizeLimit,
        default_limit=resolved.max_json_bytes,
        limits=dict.fromkeys(UPLOAD_PATHS, upload_limit),
    )
    # Outermost of all: nothing is read or answered inside a garbage collection's window.
    app.add_middleware(CollectionHold)
    return app
