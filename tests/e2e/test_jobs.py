"""Background jobs against a live server, on SQLite and PostgreSQL (DESIGN.md "Architecture":
background jobs with progress; the charge is taken at submission and the result is the release
stored in the ledger, so a client that disconnects loses nothing).

Noisy counts are checked against the exact Mushroom counts with a band of 40 at epsilon 1
(P(|noise| >= 40) < 1e-17).
"""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest

import dpmine
from dpmine.queries import parse_query
from dpmine.wire import (
    ComputeQualityRequest,
    ComputeQualityResponse,
    NoisyCountRequest,
    NoisyCountResponse,
    Redescription,
)
from support.datasets import count_rows, mushroom_rows, register_mushroom
from support.servers import Account, LiveServer, add_analyst

WAIT_SECONDS = 60.0


@pytest.fixture
def mushroom(owner: dpmine.Connection, analyst: Account) -> dpmine.DatasetHandle:
    """A fresh Mushroom dataset on which the analyst holds 3."""
    info = register_mushroom(owner, epsilon_cap=10.0)
    owner.admin.grant(info.id, analyst.name, 3.0)
    return analyst.connection.dataset(info.id)


def test_job_result_is_the_stored_release(
    mushroom: dpmine.DatasetHandle, owner: dpmine.Connection, analyst: Account
) -> None:
    submitted = mushroom.submit(
        "count.noisy", NoisyCountRequest(predicate=parse_query("[class = e]"), epsilon=1.0)
    )
    assert submitted.operation == "count.noisy"
    assert submitted.dataset_id == mushroom.id
    assert submitted.status in {"queued", "running", "done"}
    # Charged at submission, before the job ran.
    assert mushroom.budget().grant_spent == 1.0

    done = analyst.connection.wait_for_job(submitted.id, timeout=WAIT_SECONDS)
    assert done.status == "done", done.message
    assert done.progress == 1.0
    assert done.result is not None
    result = NoisyCountResponse.model_validate(done.result)
    truth = count_rows(mushroom_rows(), lambda row: row["class"] == "e")
    assert abs(result.count - truth) <= 40
    entry = next(
        e for e in owner.admin.ledger(mushroom.id) if e.id == result.receipt.ledger_entry_id
    )
    assert entry.status == "released"
    assert entry.release == done.result
    assert entry.principal == analyst.name
    assert analyst.connection.job(submitted.id) == done, "a finished job stays as it is"


def test_quality_job_in_paper_mode(
    mushroom: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    request = ComputeQualityRequest(
        redescription=Redescription(
            left=parse_query("[cap-shape = x]"), right=parse_query("[class = e]")
        ),
        epsilon=0.5,
        mode="paper",
    )
    submitted = mushroom.submit("red.compute_quality", request)
    done = mushroom.connection.wait_for_job(submitted.id, timeout=WAIT_SECONDS)
    assert done.status == "done", done.message
    result = ComputeQualityResponse.model_validate(done.result)
    assert result.mode == "paper"
    assert result.cells.intersection is not None
    assert result.receipt.epsilon_exact == "0.5"
    (entry,) = owner.admin.ledger(mushroom.id)
    assert entry.release == done.result
    assert entry.parameters == request.model_dump(mode="json")


def test_a_client_that_disconnects_fetches_the_result_later(
    any_server: LiveServer,
    mushroom: dpmine.DatasetHandle,
    owner: dpmine.Connection,
    analyst: Account,
) -> None:
    key = str(uuid.uuid4())
    request = NoisyCountRequest(predicate=parse_query("[odor = n]"), epsilon=0.5)
    with dpmine.connect(any_server.url, analyst.api_key, retries=0) as first:
        job_id = first.dataset(mushroom.id).submit("count.noisy", request, idempotency_key=key).id

    with dpmine.connect(any_server.url, analyst.api_key, retries=0) as later:
        done = later.wait_for_job(job_id, timeout=WAIT_SECONDS)
        assert done.status == "done", done.message
        # Submitting again with the same key returns the same job, charged once.
        again = later.dataset(mushroom.id).submit("count.noisy", request, idempotency_key=key)
        assert again.id == job_id
        assert again.result == done.result
    entries = owner.admin.ledger(mushroom.id)
    assert [entry.idempotency_key for entry in entries] == [key]
    assert mushroom.budget().grant_spent == 0.5


def test_same_key_with_another_job_request_is_refused(
    mushroom: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    """DESIGN.md "The budget ledger": the same Idempotency-Key with a different request is an
    error, for jobs as for direct calls; it must not hand back the other job's result."""
    key = str(uuid.uuid4())
    first = mushroom.submit("count.noisy", NoisyCountRequest(epsilon=0.5), idempotency_key=key)
    mushroom.connection.wait_for_job(first.id, timeout=WAIT_SECONDS)
    different = NoisyCountRequest(predicate=parse_query("[class = p]"), epsilon=0.25)
    try:
        answer = mushroom.submit("count.noisy", different, idempotency_key=key)
    except dpmine.IdempotencyConflictError:
        answer = None
    assert answer is None, (
        f"a job with a reused Idempotency-Key and another request was answered with job "
        f"{answer.id if answer else ''} (the first job: {first.id}) instead of "
        "IdempotencyConflict (services/jobs.py JobRunner.submit returns any job with that key)"
    )
    with pytest.raises(dpmine.IdempotencyConflictError):
        mushroom.count("[class = p]", epsilon=0.25, idempotency_key=key)
    assert [entry.epsilon_exact for entry in owner.admin.ledger(mushroom.id)] == ["0.5"]


def test_budget_refusal_at_submission_is_immediate_and_free(
    mushroom: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    with pytest.raises(dpmine.BudgetExhaustedError) as refused:
        mushroom.submit("count.noisy", NoisyCountRequest(epsilon=3.5))
    assert refused.value.status_code == 409
    assert "requested epsilon=3.5" in refused.value.detail
    assert owner.admin.ledger(mushroom.id) == []
    assert mushroom.budget().grant_spent == 0.0

    fits = mushroom.submit("count.noisy", NoisyCountRequest(epsilon=3.0))
    assert mushroom.connection.wait_for_job(fits.id, timeout=WAIT_SECONDS).status == "done"
    with pytest.raises(dpmine.BudgetExhaustedError):
        mushroom.submit("count.noisy", NoisyCountRequest(epsilon=0.1))
    entries = owner.admin.ledger(mushroom.id)
    assert sum(Decimal(entry.epsilon_exact) for entry in entries) == Decimal(3)
    assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}


def test_another_analyst_cannot_see_the_job(
    any_server: LiveServer, mushroom: dpmine.DatasetHandle, owner: dpmine.Connection
) -> None:
    job = mushroom.submit("count.noisy", NoisyCountRequest(epsilon=0.25))
    other = add_analyst(any_server, owner)
    with other.connection:
        owner.admin.grant(mushroom.id, other.name, 1.0)  # even with a grant on the same data
        with pytest.raises(dpmine.NotFoundError) as hidden:
            other.connection.job(job.id)
        missing = str(uuid.uuid4())
        with pytest.raises(dpmine.NotFoundError) as unknown:
            other.connection.job(missing)
        # The same answer as for a job that does not exist.
        assert hidden.value.detail.replace(job.id, "X") == unknown.value.detail.replace(
            missing, "X"
        )
    assert mushroom.connection.wait_for_job(job.id, timeout=WAIT_SECONDS).status == "done"
