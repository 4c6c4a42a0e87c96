"""Operations declared ``mode="job"``: always computed by the job runner.

``POST /v1/datasets/{id}/<path>`` submits a job and waits for its release (same answer, receipt
and idempotency as an inline operation); ``POST /v1/datasets/{id}/jobs`` returns at once. Every
catalogued operation is inline today, so a test-only operation (``count.noisy``'s kernel under
another name and route) is registered in the catalog and mounted on the app.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from dpmine.wire import JobInfo, NoisyCountRequest, NoisyCountResponse, Operation
from dpmine_server.api.common import operation_router
from dpmine_server.app import create_app
from dpmine_server.data.columns import ColumnStore
from dpmine_server.db.models import Job, LedgerEntry
from dpmine_server.dp.budget import Epsilon
from dpmine_server.operations import CATALOG, OperationSpec, counts
from dpmine_server.operations.base import Progress
from dpmine_server.services.container import Services
from dpmine_server.settings import Settings
from support.inprocess import TestClient

SLOW_COUNT = Operation(
    name="test.slow_count",
    path="test/slow-count",
    request_model=NoisyCountRequest,
    response_model=NoisyCountResponse,
    guarantee="pure",
    mode="job",
)


class Kernel:
    """``count.noisy``'s kernel that records its thread and can be held or made to fail."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.release = threading.Event()
        self.release.set()
        self.fail = False

    def __call__(
        self,
        columns: ColumnStore,
        request: NoisyCountRequest,
        epsilon: Epsilon,
        rng: np.random.Generator,
        progress: Progress,
    ) -> dict[str, Any]:
        """Test kernel: ``count.noisy`` (ALGORITHMS.md §0.6), pure ε-DP."""
        self.threads.append(threading.current_thread().name)
        assert self.release.wait(timeout=30)
        if self.fail:
            raise RuntimeError("kernel failure")
        return counts.OPERATIONS[0].run(columns, request, epsilon, rng, progress)


@pytest.fixture
def kernel() -> Kernel:
    return Kernel()


@pytest.fixture
def app(
    api_settings: Settings, kernel: Kernel, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FastAPI]:
    """The app with ``test.slow_count`` in the catalog and its route mounted."""
    spec: OperationSpec[NoisyCountRequest, NoisyCountResponse] = dataclasses.replace(
        counts.OPERATIONS[0], operation=SLOW_COUNT, run=kernel
    )
    monkeypatch.setitem(CATALOG, SLOW_COUNT.name, spec)
    application = create_app(api_settings)
    application.include_router(operation_router([spec]), prefix="/v1")
    yield application
    kernel.release.set()


def _post(
    client: TestClient, toy: str, headers: dict[str, str], path: str, body: dict[str, Any]
) -> Any:
    return client.post(f"/v1/datasets/{toy}/{path}", json=body, headers=headers)


def _jobs(services: Services) -> list[Job]:
    with services.sessions() as session:
        return list(session.scalars(select(Job)))


def _entries(services: Services) -> list[LedgerEntry]:
    with services.sessions() as session:
        return list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))


BODY = NoisyCountRequest(epsilon=0.5).model_dump(mode="json")


def test_the_synchronous_route_runs_a_job_and_answers_with_its_release(
    client: TestClient,
    toy: str,
    analyst_headers: dict[str, str],
    services: Services,
    kernel: Kernel,
) -> None:
    headers = {**analyst_headers, "Idempotency-Key": "sync-job-1"}
    response = _post(client, toy, headers, SLOW_COUNT.path, BODY)
    assert response.status_code == 200, response.text
    released = NoisyCountResponse.model_validate(response.json())
    assert released.receipt.operation == SLOW_COUNT.name
    assert not released.receipt.replayed
    # Computed by the job runner's pool, recorded as a job, stored in the ledger.
    assert [name.startswith("dpmine-job") for name in kernel.threads] == [True]
    [job] = _jobs(services)
    assert (job.operation, job.status, job.dataset_id) == (SLOW_COUNT.name, "done", toy)
    [entry] = _entries(services)
    assert (entry.id, entry.status, entry.release) == (
        released.receipt.ledger_entry_id,
        "released",
        response.json(),
    )
    # A retry with the same key replays the stored release: no new job, no new charge.
    again = _post(client, toy, headers, SLOW_COUNT.path, BODY)
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    replayed = NoisyCountResponse.model_validate(again.json())
    assert replayed.count == released.count
    assert replayed.receipt.replayed
    assert (len(_jobs(services)), len(_entries(services)), len(kernel.threads)) == (1, 1, 1)


def test_the_jobs_route_returns_at_once(
    client: TestClient,
    toy: str,
    analyst_headers: dict[str, str],
    services: Services,
    kernel: Kernel,
) -> None:
    kernel.release.clear()  # the kernel waits until the job was answered
    submitted = _post(
        client, toy, analyst_headers, "jobs", {"operation": SLOW_COUNT.name, "request": BODY}
    )
    assert submitted.status_code == 202, submitted.text
    info = JobInfo.model_validate(submitted.json())
    assert info.status in {"queued", "running"}
    assert info.result is None
    kernel.release.set()
    services.jobs.shutdown()  # waits for the pool
    done = JobInfo.model_validate(client.get(f"/v1/jobs/{info.id}", headers=analyst_headers).json())
    assert done.status == "done"
    assert done.result is not None
    assert NoisyCountResponse.model_validate(done.result).receipt.operation == SLOW_COUNT.name


def test_a_failed_job_fails_the_synchronous_request_and_keeps_the_charge(
    client: TestClient,
    toy: str,
    analyst_headers: dict[str, str],
    services: Services,
    kernel: Kernel,
) -> None:
    kernel.fail = True
    headers = {**analyst_headers, "Idempotency-Key": "sync-job-fails"}
    response = _post(client, toy, headers, SLOW_COUNT.path, BODY)
    assert response.status_code == 500, response.text
    assert response.json()["error"] == "OperationFailed"
    [job] = _jobs(services)
    assert job.status == "failed"
    [entry] = _entries(services)
    assert entry.status == "failed"
    retry = _post(client, toy, headers, SLOW_COUNT.path, BODY)
    assert retry.status_code == 409, retry.text
    assert retry.json()["error"] == "ChargeKeptNoResult"
