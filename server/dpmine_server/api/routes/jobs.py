"""Background jobs: submit a charged operation, poll its progress and result."""

from __future__ import annotations

from fastapi import APIRouter, status

from dpmine.wire import JobInfo, SubmitJobRequest
from dpmine_server.api.common import ERRORS
from dpmine_server.api.deps import AnalystDep, IdempotencyKeyDep, PrincipalDep, ServicesDep

router = APIRouter(tags=["jobs"])


@router.post(
    "/datasets/{dataset_id}/jobs",
    response_model=JobInfo,
    status_code=status.HTTP_202_ACCEPTED,
    responses=ERRORS,
)
def submit_job(
    dataset_id: str,
    body: SubmitJobRequest,
    services: ServicesDep,
    analyst: AnalystDep,
    idempotency_key: IdempotencyKeyDep,
) -> JobInfo:
    """Charge now and compute in the background; poll ``GET /v1/jobs/{id}``."""
    return services.jobs.submit(
        principal=analyst,
        dataset_id=dataset_id,
        operation=body.operation,
        request=body.request,
        idempotency_key=idempotency_key,
    )


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
