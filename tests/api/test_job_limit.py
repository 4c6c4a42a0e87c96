"""The per-analyst limit of open jobs (``DPMINE_MAX_OPEN_JOBS``; services/jobs.py): a job past
the limit is refused 429 ``TooManyJobs`` before anything is charged, with a message that says
what to do; a retry of an accepted job is not a new job; a job shown settled (here: cancelled)
frees its place. The audit that the refusal does not depend on the data is
tests/privacy/test_audit_job_limit.py."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import func, select

from dpmine.wire import JobInfo
from dpmine_server.db.models import LedgerEntry
from dpmine_server.operations.testing import TEST_SPIN, SpinCountRequest
from dpmine_server.services.container import Services
from dpmine_server.settings import Settings
from support.inprocess import TestClient

LIMIT = 2
SHOWN_WITHIN_S = 30.0


@pytest.fixture
def api_settings(api_settings: Settings) -> Settings:
    """The suite's settings with a limit of two open jobs per analyst."""
    return api_settings.model_copy(update={"max_open_jobs": LIMIT})


def _job_body(seconds: float) -> dict[str, Any]:
    request = SpinCountRequest(epsilon=0.5, seconds=seconds).model_dump(mode="json")
    return {"operation": TEST_SPIN.name, "request": request}


def _entries(services: Services) -> int:
    with services.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(LedgerEntry)) or 0)


def test_a_job_past_the_limit_is_refused_before_its_charge(
    client: TestClient, toy: str, analyst_headers: dict[str, str], services: Services
) -> None:
    jobs_path = f"/v1/datasets/{toy}/jobs"
    keyed = {**analyst_headers, "Idempotency-Key": "limit-first"}
    accepted = [client.post(jobs_path, json=_job_body(10.0), headers=keyed)]
    accepted.append(client.post(jobs_path, json=_job_body(10.0), headers=analyst_headers))
    assert [answer.status_code for answer in accepted] == [202, 202], accepted[-1].text
    spent, entries = client.get(f"/v1/datasets/{toy}/budget", headers=analyst_headers).json(), 2
    assert _entries(services) == entries

    refused = client.post(jobs_path, json=_job_body(0.0), headers=analyst_headers)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "TooManyJobs"
    assert refused.headers["Retry-After"] == "1"
    detail = refused.json()["detail"]
    assert f"you have {LIMIT} jobs that are not finished yet" in detail
    assert f"DPMINE_MAX_OPEN_JOBS = {LIMIT}" in detail
    assert "nothing was charged" in detail
    # The synchronous route of a job-mode operation is a job too.
    sync = client.post(
        f"/v1/datasets/{toy}/{TEST_SPIN.path}",
        json=SpinCountRequest(epsilon=0.5, seconds=0.0).model_dump(mode="json"),
        headers={**analyst_headers, "Idempotency-Key": "limit-sync"},
    )
    assert (sync.status_code, sync.json()["error"]) == (429, "TooManyJobs")
    assert client.get(f"/v1/datasets/{toy}/budget", headers=analyst_headers).json() == spent
    assert _entries(services) == entries

    # A retry of an accepted job finds that job: no new job, nothing refused.
    again = client.post(jobs_path, json=_job_body(10.0), headers=keyed)
    assert again.status_code == 202, again.text
    assert again.json()["id"] == accepted[0].json()["id"]

    # Cancel one; once it is shown settled, its place is free.
    first = accepted[0].json()["id"]
    assert client.post(f"/v1/jobs/{first}/cancel", headers=analyst_headers).status_code == 200
    give_up = time.monotonic() + SHOWN_WITHIN_S
    while JobInfo.model_validate(
        client.get(f"/v1/jobs/{first}", headers=analyst_headers).json()
    ).status in {"queued", "running"}:
        assert time.monotonic() < give_up, "the cancelled job was not shown settled"
        time.sleep(0.05)
    third = client.post(jobs_path, json=_job_body(0.0), headers=analyst_headers)
    assert third.status_code == 202, third.text
    client.post(f"/v1/jobs/{accepted[1].json()['id']}/cancel", headers=analyst_headers)
