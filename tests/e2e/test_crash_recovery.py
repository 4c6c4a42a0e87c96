"""A server killed (SIGKILL) mid-burst and restarted on the same database loses no charge and
never charges twice (DESIGN.md "The budget ledger": a crash leaves the charge in place;
idempotent retries replay the stored release).

To have requests that are certainly charged but unfinished when the process dies, one request
and one background job on a dataset run the test-mode spin (operations/testing.py) for far
longer than the test: both are charged (the reservation commits before any data is read) and
still computing at the kill. A burst of ordinary requests runs on another dataset while the
server is killed.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select

import dpmine
from dpmine import ChargeKeptNoResultError
from dpmine.wire import LedgerEntryInfo, NoisyCountRequest, NoisyCountResponse
from dpmine_server.db.base import make_engine
from dpmine_server.db.models import Job
from dpmine_server.operations.testing import SpinCountRequest
from support.datasets import TABLE_ROWS, register_table
from support.servers import Account, LiveServer, http_client, wait_for

BURST_THREADS = 8
REQUESTS_PER_THREAD = 40
KILL_AFTER_SUCCESSES = 24
EPSILON = 0.01
#: Seconds the stuck request and job spin: far beyond the kill, which comes a few seconds in on
#: a quiet machine but took over 15 s on a loaded one (the inline spin holds the API process's
#: GIL while the burst runs), so the request finished before the kill and the test failed. The
#: kill cuts the inline spin short (a PostgreSQL worker's orphaned job spin may hold the
#: test a little longer; 30 s keeps a wide margin without that cost growing).
STUCK_S = 30.0


@dataclass(frozen=True)
class Sent:
    """One request of the burst and what its client saw."""

    key: str
    response: NoisyCountResponse | None
    error: dpmine.DPMineError | None


def job_state(server: LiveServer, job_id: str) -> str:
    """The job's state in the server's database (the analyst sees it only on the padded
    public schedule)."""
    engine = make_engine(server.database_url)
    try:
        with engine.connect() as connection:
            state = connection.execute(select(Job.status).where(Job.id == job_id)).scalar_one()
    finally:
        engine.dispose()
    return str(state)


def burst(server: LiveServer, analyst: Account, dataset_id: str) -> list[Sent]:
    """Send counts from several threads; SIGKILL the server once enough have been answered.

    Each thread sends one request after another until its connection breaks."""
    successes = Counter[str]()
    lock = threading.Lock()
    enough = threading.Event()

    def worker(_index: int) -> list[Sent]:
        sent: list[Sent] = []
        with (
            http_client(server.url, timeout=120) as http,
            dpmine.connect(server.url, analyst.api_key, http=http, retries=0) as connection,
        ):
            body = NoisyCountRequest(epsilon=EPSILON)
            for _ in range(REQUESTS_PER_THREAD):
                key = str(uuid.uuid4())
                try:
                    response = connection.call(
                        f"/v1/datasets/{dataset_id}/counts",
                        body,
                        NoisyCountResponse,
                        idempotency_key=key,
                    )
                except dpmine.TransportError as error:
                    sent.append(Sent(key, None, error))
                    break
                sent.append(Sent(key, response, None))
                with lock:
                    successes["ok"] += 1
                    if successes["ok"] >= KILL_AFTER_SUCCESSES:
                        enough.set()
        return sent

    with ThreadPoolExecutor(max_workers=BURST_THREADS) as pool:
        futures = [pool.submit(worker, index) for index in range(BURST_THREADS)]
        assert enough.wait(timeout=60), "the burst never got going"
        server.kill()
        results = [future.result(timeout=120) for future in futures]
    return [sent for result in results for sent in result]


def retry(handle: dpmine.DatasetHandle, key: str) -> NoisyCountResponse | ChargeKeptNoResultError:
    """The answer to a burst request sent again with its key, or the 409 that says its charge
    was kept and no result exists (the request was interrupted by the kill)."""
    try:
        return handle.count(None, epsilon=EPSILON, idempotency_key=key)
    except ChargeKeptNoResultError as error:
        return error


def entries_by_key(entries: list[LedgerEntryInfo]) -> dict[str, LedgerEntryInfo]:
    """Ledger entries by Idempotency-Key; fails if a key was ever charged twice."""
    counts = Counter(entry.idempotency_key for entry in entries)
    twice = {key: n for key, n in counts.items() if n > 1}
    assert twice == {}, f"keys charged more than once: {twice}"
    return {entry.idempotency_key: entry for entry in entries if entry.idempotency_key}


def test_kill_mid_burst_then_restart(
    any_server: LiveServer, owner: dpmine.Connection, analyst: Account, tmp_path: Path
) -> None:
    busy = register_table(owner, tmp_path, epsilon_cap=100.0)
    stuck = register_table(owner, tmp_path, epsilon_cap=10.0)
    owner.admin.grant(busy.id, analyst.name, 100.0)
    owner.admin.grant(stuck.id, analyst.name, 10.0)
    stuck_key, job_key = str(uuid.uuid4()), str(uuid.uuid4())

    with ThreadPoolExecutor(max_workers=1) as side:
        # A charged request that never finishes, and a charged job that never finishes: the
        # test-mode spin (operations/testing.py) holds each for far longer than the test.
        # (Registration leaves a dataset loaded, so blocking its file would block nothing.)
        lost: Future[NoisyCountResponse] = side.submit(
            analyst.connection.call,
            f"/v1/datasets/{stuck.id}/test/spin-inline",
            SpinCountRequest(epsilon=0.5, seconds=STUCK_S),
            NoisyCountResponse,
            idempotency_key=stuck_key,
        )
        job = analyst.connection.dataset(stuck.id).submit(
            "test.spin", SpinCountRequest(epsilon=0.25, seconds=STUCK_S), idempotency_key=job_key
        )
        wait_for(
            "both requests on the blocked dataset to be charged",
            lambda: [e.status for e in owner.admin.ledger(stuck.id)] == ["reserved", "reserved"],
        )
        # The job is certainly held by a worker (claimed, then blocked on the file) at the kill.
        wait_for("a worker to take the job", lambda: job_state(any_server, job.id) == "running")
        sent = burst(any_server, analyst, busy.id)
        lost_error = lost.exception(timeout=120)
    assert isinstance(lost_error, dpmine.TransportError)
    assert not any_server.is_running()

    any_server.start()
    with dpmine.connect(any_server.url, any_server.owner_key, retries=0) as keeper:
        admin = keeper.admin
        # The job's worker died with the server. The embedded pool's job is interrupted by the
        # start-up recovery; a PostgreSQL worker's job once the live workers see its heartbeat
        # stopped (DPMINE_WORKER_STALLED_AFTER_S, 3 s in the tests).
        wait_for(
            "the job of the dead worker to be interrupted",
            lambda: analyst.connection.job(job.id).status == "interrupted",
        )
        assert admin.verify_ledger() == {"consistent": True, "problems": []}
        everything = admin.ledger()
        statuses = Counter(entry.status for entry in everything)
        assert set(statuses) <= {"released", "interrupted"}, statuses
        for entry in everything:
            assert (entry.release is not None) == (entry.status == "released"), entry

        # The two charges that were under way at the crash: interrupted, still charged.
        blocked = admin.ledger(stuck.id)
        assert [entry.status for entry in blocked] == ["interrupted", "interrupted"]
        assert {entry.idempotency_key for entry in blocked} == {stuck_key, job_key}
        assert sum(Decimal(e.epsilon_exact) for e in blocked) == Decimal("0.75")
        assert analyst.connection.dataset(stuck.id).budget().grant_spent == 0.75
        recovery = [event for event in admin.audit() if event.action == "recovery"]
        assert len(recovery) == 1
        recovered_jobs = 1 if any_server.backend == "sqlite" else 0  # else: the heartbeats
        assert recovery[0].details["failed_jobs"] == recovered_jobs
        assert recovery[0].details["interrupted_entries"] == statuses["interrupted"] - (
            1 - recovered_jobs
        )

        # Every release a client received is in the ledger, released, with the same body.
        received = [s for s in sent if s.response is not None]
        assert len(received) >= KILL_AFTER_SUCCESSES
        before = entries_by_key(admin.ledger(busy.id))
        for item in received:
            assert item.response is not None
            entry = before[item.key]
            assert entry.id == item.response.receipt.ledger_entry_id
            assert entry.status == "released"
            assert NoisyCountResponse.model_validate(entry.release) == item.response

        # Retrying a request whose answer was lost never charges it twice.
        unanswered = [s for s in sent if s.response is None]
        assert unanswered, "the kill must have cut some requests off"
        assert all(isinstance(s.error, dpmine.TransportError) for s in unanswered)
        with dpmine.connect(any_server.url, analyst.api_key, retries=0) as again:
            handle = again.dataset(busy.id)
            for item in unanswered:
                earlier = before.get(item.key)
                retried = retry(handle, item.key)
                if isinstance(retried, ChargeKeptNoResultError):
                    assert earlier is not None
                    assert earlier.status == "interrupted"
                    assert retried.status_code == 409
                    continue
                if earlier is None:  # the request never reached the server: charged now, once
                    assert not retried.receipt.replayed
                else:
                    assert earlier.status == "released"
                    assert retried.receipt.replayed
                    assert retried.receipt.ledger_entry_id == earlier.id
                    stored = NoisyCountResponse.model_validate(earlier.release)
                    assert retried.count == stored.count

            with dpmine.connect(any_server.url, analyst.api_key, retries=0) as late:
                with pytest.raises(ChargeKeptNoResultError, match="the charge was kept"):
                    late.call(
                        f"/v1/datasets/{stuck.id}/test/spin-inline",
                        SpinCountRequest(epsilon=0.5, seconds=STUCK_S),
                        NoisyCountResponse,
                        idempotency_key=stuck_key,
                    )
                failed_job = late.job(job.id)
                assert failed_job.status == "interrupted"
                assert failed_job.message.startswith("interrupted")
                assert "the charge stands" in failed_job.message
                assert failed_job.result is None
                resubmitted = late.dataset(stuck.id).submit(
                    "test.spin",
                    SpinCountRequest(epsilon=0.25, seconds=STUCK_S),
                    idempotency_key=job_key,
                )
                assert resubmitted.id == job.id
                assert resubmitted.status == "interrupted"

            after = entries_by_key(admin.ledger(busy.id))
            assert {s.key for s in sent} <= set(after)
            assert len(admin.ledger(stuck.id)) == 2
            assert admin.verify_ledger() == {"consistent": True, "problems": []}
            spent = sum(Decimal(e.epsilon_exact) for e in after.values())
            assert spent == Decimal(str(EPSILON)) * len(after)
            assert handle.budget().grant_spent == float(spent)

            # The restarted server works normally, also on the formerly blocked dataset.
            assert handle.count(None, epsilon=EPSILON).receipt.replayed is False
            fresh = again.dataset(stuck.id).count(None, epsilon=0.5)
            assert abs(fresh.count - TABLE_ROWS) <= 40  # scale-2 noise: P(miss) < 1e-8
