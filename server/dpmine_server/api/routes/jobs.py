"""Background jobs: submit a charged operation, poll its progress and result.

A submission names its operation and carries that operation's own request model: the body is a
union of one ``<Operation>Job`` model per operation, told apart by ``operation``, so the OpenAPI
document types every submission exactly as the operation's own route types its body.
"""

from __future__ import annotations

import functools
import inspect
import operator
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Protocol

from fastapi import APIRouter, Body, status
from pydantic import Field, create_model

from dpmine.wire import JobInfo
from dpmine.wire.common import WireModel
from dpmine_server.api.common import ERRORS
from dpmine_server.api.deps import AnalystDep, IdempotencyKeyDep, PrincipalDep, ServicesDep
from dpmine_server.api.examples import job_examples
from dpmine_server.operations import CATALOG, OperationSpec

__all__ = ["router", "submit_job_router", "submit_job_type"]


class _Submission(Protocol):
    """What every job model has (the route reads nothing else)."""

    @property
    def operation(self) -> str: ...
    @property
    def request(self) -> WireModel: ...


def _job_model(spec: OperationSpec[Any, Any]) -> type[WireModel]:
    """``{"operation": <name>, "request": <its request model>}``, named e.g. ``CountNoisyJob``."""
    name = "".join(part.capitalize() for part in spec.name.replace(".", "_").split("_")) + "Job"
    tag: Any = Literal[spec.name]
    model: type[WireModel] = create_model(
        name,
        __base__=WireModel,
        __doc__=f"A {spec.name} job: {spec.summary}",
        operation=(tag, Field(description="The operation to run.")),
        request=(spec.request_model, Field(description=f"The body of {spec.name}'s own route.")),
    )
    return model


def submit_job_type(specs: Iterable[OperationSpec[Any, Any]]) -> Any:
    """The body of ``POST .../jobs`` for these operations: their job models, by ``operation``."""
    variants: list[Any] = [_job_model(spec) for spec in specs]
    return Annotated[functools.reduce(operator.or_, variants), Field(discriminator="operation")]


def submit_job_router(
    specs: Iterable[OperationSpec[Any, Any]], *, include_in_schema: bool = True
) -> APIRouter:
    """A router with ``POST /datasets/{dataset_id}/jobs`` for these operations."""

    def submit_job(
        dataset_id: str,
        body: _Submission,
        services: ServicesDep,
        analyst: AnalystDep,
        idempotency_key: IdempotencyKeyDep,
    ) -> JobInfo:
        """Charge now and compute in the background; poll ``GET /v1/jobs/{id}``."""
        return services.jobs.submit(
            principal=analyst,
            dataset_id=dataset_id,
            operation=body.operation,
            request=body.request.model_dump(mode="json"),
            idempotency_key=idempotency_key,
        )

    signature = inspect.signature(submit_job)
    body_type: Any = Annotated[submit_job_type(specs), Body(openapi_examples=job_examples())]
    typed: Any = submit_job
    typed.__signature__ = signature.replace(
        parameters=[
            parameter.replace(annotation=body_type) if parameter.name == "body" else parameter
            for parameter in signature.parameters.values()
        ]
    )
    router = APIRouter(tags=["jobs"])
    router.add_api_route(
        "/datasets/{dataset_id}/jobs",
        submit_job,
        methods=["POST"],
        response_model=JobInfo,
        status_code=status.HTTP_202_ACCEPTED,
        responses=ERRORS,
        include_in_schema=include_in_schema,
    )
    return router


router = submit_job_router(CATALOG.values())


@router.get("/jobs/{job_id}", response_model=JobInfo, responses=ERRORS)
def get_job(job_id: str, services: ServicesDep, principal: PrincipalDep) -> JobInfo:
    """Status, progress and (once done) the result of one of your jobs."""
    return services.jobs.get(principal, job_id)


@router.post("/jobs/{job_id}/cancel", response_model=JobInfo, responses=ERRORS)
def cancel_job(job_id: str, services: ServicesDep, analyst: AnalystDep) -> JobInfo:
    """Cancel one of your jobs: a queued job never runs; a running one stops at its next public
    progress step. The charge stays (nothing is refunded once charged); a settled job is
    returned as it is."""
    return services.jobs.cancel(analyst, job_id)
