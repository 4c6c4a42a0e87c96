"""Operations declared ``mode="job"`` run in worker processes (services/queues.py, workers.py).

``POST /v1/datasets/{id}/<path>`` submits a job and waits for its release (same answer, receipt
and idempotency as an inline operation); ``POST /v1/datasets/{id}/jobs`` returns at once. The
test-mode operation ``test.spin`` (a public-length GIL-holding loop, then ``count.noisy``) is
the job; on the SQLite app of these tests it runs in the embedded process pool, so these tests
also cover cancellation and a pool process killed mid-job.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

import dpmine
from dpmine.wire import DatasetMetadata, JobInfo, NoisyCountResponse
from dpmine_server.db.models import Job, LedgerEntry
from dpmine_server.dp.budget import Epsilon
from dpmine_server.dp.zcdp import generic_release, rho_of_parts
from dpmine_server.operations.testing import TEST_SPIN, SpinCountRequest
from dpmine_server.services.container import Services
from support.inprocess import TestClient, bearer

SPIN = TEST_SPIN.path
JOB_TIMEOUT_S = 60.0


def _post(
    client: TestClient, toy: str, headers: dict[str, str], path: str, body: dict[str, Any]
) -> Any:
    return client.post(f"/v1/datasets/{toy}/{path}", json=body, headers=headers)


def _body(seconds: float = 0.0, *, fail: bool = False) -> dict[str, Any]:
    return SpinCountRequest(epsilon=0.5, seconds=seconds, fail=fail).model_dump(mode="json")


def _submit(client: TestClient, toy: str, headers: dict[str, str], body: dict[str, Any]) -> JobInfo:
    response = _post(client, toy, headers, "jobs", {"operation": TEST_SPIN.name, "request": body})
    assert response.status_code == 202, response.text
    return JobInfo.model_validate(response.json())


def _jobs(services: Services) -> list[Job]:
    with services.sessions() as session:
        return list(session.scalars(select(Job).order_by(Job.created_at)))


def _job(services: Services, job_id: str) -> Job:
    with services.sessions() as session:
        return session.get_one(Job, job_id)


def _entries(services: Services) -> list[LedgerEntry]:
    with services.sessions() as session:
        return list(session.scalars(select(LedgerEntry).order_by(LedgerEntry.id)))


def _wait_status(services: Services, job_id: str, wanted: set[str]) -> Job:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        job = _job(services, job_id)
        if job.status in wanted:
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job.status}"
        time.sleep(0.05)


@pytest.fixture(params=["pure", "zcdp"])
def any_toy(
    request: pytest.FixtureRequest,
    register: Callable[..., str],
    analyst_key: str,
    toy_csv: Path,
    toy_metadata: DatasetMetadata,
) -> str:
    """The toy data on a pure ledger (``toy``) or on a zCDP one (``ztoy``, ρ cap 10, alice 5)."""
    if request.param == "pure":
        toy: str = request.getfixturevalue("toy")
        return toy
    del analyst_key  # alice must exist before the grant
    return register("ztoy", toy_csv, toy_metadata, cap=10.0, grants={"alice": 5.0}, zcdp=True)


def test_the_synchronous_route_runs_a_job_in_a_worker_process(
    client: TestClient, any_toy: str, analyst_headers: dict[str, str], services: Services
) -> None:
    toy = any_toy
    headers = {**analyst_headers, "Idempotency-Key": "sync-job-1"}
    response = _post(client, toy, headers, SPIN, _body())
    assert response.status_code == 200, response.text
    released = NoisyCountResponse.model_validate(response.json())
    assert released.receipt.operation == TEST_SPIN.name
    assert not released.receipt.replayed
    # The worker ran the kernel at the request's ε and the receipt shows what was debited.
    assert released.receipt.epsilon_exact == "0.5"
    if toy == "ztoy":
        assert released.receipt.zcdp is not None
        assert (
            released.receipt.zcdp.rho_exact
            == rho_of_parts(generic_release(Epsilon.charge("0.5"))).exact_str()
        )
    # Computed by a spawned pool process, not in this (the API) process.
    workers = multiprocessing.active_children()
    assert workers
    assert all(worker.pid != os.getpid() for worker in workers)
    [job] = _jobs(services)
    assert (job.operation, job.status, job.dataset_id) == (TEST_SPIN.name, "done", toy)
    [entry] = _entries(services)
    assert (entry.id, entry.status, entry.release) == (
        released.receipt.ledger_entry_id,
        "released",
        response.json(),
    )
    # A retry with the same key replays the stored release: no new job, no new charge.
    again = _post(client, toy, headers, SPIN, _body())
    assert again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true"
    replayed = NoisyCountResponse.model_validate(again.json())
    assert replayed.count == released.count
    assert replayed.receipt.replayed
    assert (len(_jobs(services)), len(_entries(services))) == (1, 1)


def test_the_jobs_route_returns_at_once(
    client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
) -> None:
    started = time.monotonic()
    info = _submit(client, toy, analyst_headers, _body(seconds=3.0))
    assert time.monotonic() - started < 3.0  # answered before the 3 s job could finish
    assert info.status in {"queued", "running"}
    assert info.result is None
    _wait_status(services, info.id, {"done"})
    done = JobInfo.model_validate(client.get(f"/v1/jobs/{info.id}", headers=analyst_headers).json())
    assert done.status == "done"
    assert done.result is not None
    assert NoisyCountResponse.model_validate(done.result).receipt.operation == TEST_SPIN.name


def test_a_failed_job_fails_the_synchronous_request_and_keeps_the_charge(
    client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
) -> None:
    headers = {**analyst_headers, "Idempotency-Key": "sync-job-fails"}
    response = _post(client, toy, headers, SPIN, _body(fail=True))
    assert response.status_code == 500, response.text
    assert response.json()["error"] == "OperationFailed"
    [job] = _jobs(services)
    assert job.status == "failed"
    [entry] = _entries(services)
    assert (entry.status, entry.release) == ("failed", None)
    retry = _post(client, toy, headers, SPIN, _body(fail=True))
    assert retry.status_code == 409, retry.text
    assert retry.json()["error"] == "ChargeKeptNoResult"


def test_cancel_stops_a_running_job_and_a_queued_one_never_runs(
    client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
) -> None:
    # Two pool processes: the first two jobs run, the third waits in the queue.
    running = [_submit(client, toy, analyst_headers, _body(seconds=30.0)) for _ in range(2)]
    queued = _submit(client, toy, analyst_headers, _body(seconds=30.0))
    for info in running:
        _wait_status(services, info.id, {"running"})
    assert _job(services, queued.id).status == "queued"

    answer = client.post(f"/v1/jobs/{queued.id}/cancel", headers=analyst_headers)
    assert answer.status_code == 200, answer.text
    assert JobInfo.model_validate(answer.json()).status == "cancelled"

    started = time.monotonic()
    for info in running:
        cancelled = client.post(f"/v1/jobs/{info.id}/cancel", headers=analyst_headers)
        assert cancelled.status_code == 200, cancelled.text
    for info in running:
        job = _wait_status(services, info.id, {"cancelled", "done", "failed"})
        assert job.status == "cancelled"
    assert time.monotonic() - started < 20.0  # stopped at a progress step, not after 30 s

    for info in [*running, queued]:
        job = _job(services, info.id)
        assert job.status == "cancelled"
        with services.sessions() as session:
            entry = session.get_one(LedgerEntry, job.ledger_entry_id)
        # The charge stands; nothing was released.
        assert (entry.status, entry.release) == ("failed", None)
        assert entry.epsilon_units > 0
    shown = JobInfo.model_validate(
        client.get(f"/v1/jobs/{queued.id}", headers=analyst_headers).json()
    )
    assert (shown.status, shown.result) == ("cancelled", None)


def test_cancel_is_refused_for_other_analysts_jobs(
    client: TestClient,
    toy: str,
    analyst_headers: dict[str, str],
    bob_headers: dict[str, str],
    services: Services,
) -> None:
    info = _submit(client, toy, analyst_headers, _body())
    answer = client.post(f"/v1/jobs/{info.id}/cancel", headers=bob_headers)
    assert answer.status_code == 404, answer.text
    assert _wait_status(services, info.id, {"done", "cancelled", "failed"}).status == "done"


def test_a_pool_process_killed_mid_job_interrupts_the_job_and_keeps_the_charge(
    client: TestClient, any_toy: str, analyst_headers: dict[str, str], services: Services
) -> None:
    toy = any_toy
    victim = _submit(client, toy, analyst_headers, _body(seconds=30.0))
    _wait_status(services, victim.id, {"running"})
    workers = multiprocessing.active_children()
    assert workers
    for worker in workers:  # which process holds the job is not recorded: kill the pool
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)

    job = _wait_status(services, victim.id, {"interrupted", "failed", "done"})
    assert job.status == "interrupted"
    with services.sessions() as session:
        entry = session.get_one(LedgerEntry, job.ledger_entry_id)
    assert (entry.status, entry.release) == ("interrupted", None)
    assert entry.epsilon_units > 0
    shown = JobInfo.model_validate(
        client.get(f"/v1/jobs/{victim.id}", headers=analyst_headers).json()
    )
    assert shown.status == "interrupted"

    # A fresh pool takes the next job; the interrupted one is never run again.
    after = _post(client, toy, analyst_headers, SPIN, _body())
    assert after.status_code == 200, after.text
    assert _job(services, victim.id).status == "interrupted"
    assert services.ledger.verify() == []


@pytest.fixture
def bob_headers(owner: dpmine.Connection, bob_key: str, toy: str) -> dict[str, str]:
    """A second analyst with a grant on ``toy``."""
    owner.admin.grant(toy, "bob", 1.0)
    return bearer(bob_key)
