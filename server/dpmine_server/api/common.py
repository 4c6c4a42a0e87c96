"""Shared pieces of the routes: the documented error responses and the one code path by which
a route runs a private operation."""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import BaseModel

from dpmine.wire import ErrorBody
from dpmine_server.db.models import Principal
from dpmine_server.services.container import Services

__all__ = ["ERRORS", "run_operation"]

#: Error responses documented on every route (all share the ErrorBody shape).
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (401, 403, 404, 409, 422)
}


def run_operation(
    services: Services,
    *,
    principal: Principal,
    dataset_id: str,
    operation: str,
    request: BaseModel,
    idempotency_key: str | None,
    response: Response,
) -> dict[str, Any]:
    """Validate, charge, compute, store; or replay the stored release of a retry."""
    executor = services.executor
    release = executor.execute(
        principal=principal,
        dataset_id=dataset_id,
        spec=executor.spec(operation),
        request=request,
        idempotency_key=idempotency_key,
    )
    if release.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Cache-Control"] = "no-store"
    return release.body
