"""Shared pieces of the routes: the documented error responses and the one code path by which
a route runs a private operation."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel

from dpmine.wire import ErrorBody
from dpmine_server.api.deps import AnalystDep, IdempotencyKeyDep, ServicesDep
from dpmine_server.db.models import Principal
from dpmine_server.operations import OperationSpec
from dpmine_server.services.container import Services

__all__ = ["ERRORS", "operation_router", "run_operation"]

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


def operation_router(specs: Sequence[OperationSpec]) -> APIRouter:
    """A router with one ``POST /datasets/{dataset_id}/<spec.path>`` per operation.

    Every endpoint is the same thin function (validate, charge, compute, store via
    :func:`run_operation`); its body parameter is typed with the operation's request model so
    the OpenAPI document shows the exact request and response schemas.
    """
    router = APIRouter(tags=["operations"])
    for spec in specs:
        router.add_api_route(
            f"/datasets/{{dataset_id}}/{spec.path}",
            _operation_endpoint(spec),
            methods=["POST"],
            response_model=spec.response_model,
            responses=ERRORS,
            summary=f"{spec.summary} ({spec.name})",
            name=spec.name,
        )
    return router


def _operation_endpoint(spec: OperationSpec) -> Callable[..., dict[str, Any]]:
    def endpoint(
        dataset_id: str,
        body: BaseModel,
        services: ServicesDep,
        analyst: AnalystDep,
        idempotency_key: IdempotencyKeyDep,
        response: Response,
    ) -> dict[str, Any]:
        return run_operation(
            services,
            principal=analyst,
            dataset_id=dataset_id,
            operation=spec.name,
            request=body,
            idempotency_key=idempotency_key,
            response=response,
        )

    signature = inspect.signature(endpoint)
    parameters = [
        parameter.replace(annotation=spec.request_model) if parameter.name == "body" else parameter
        for parameter in signature.parameters.values()
    ]
    typed: Any = endpoint
    typed.__signature__ = signature.replace(parameters=parameters)
    typed.__name__ = spec.name.replace(".", "_")
    typed.__doc__ = (
        f"{spec.summary} Costs the request's ε, charged to the ledger before any data is read; "
        "send an Idempotency-Key so that a retry returns the stored release."
    )
    return endpoint
