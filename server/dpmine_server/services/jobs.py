"""Background jobs: a charged operation computed in a worker thread, progress in the database.

The charge is taken synchronously when the job is submitted (so a budget refusal is an immediate
409 and costs nothing); the release is stored in the ledger entry, so any server process can
report a job's progress and result, and a client that disconnects loses nothing.

Time is an output (DESIGN.md contract item 7): the analyst never sees when the kernel started or
ended. A job is shown ``running`` until its padded deadline (services/timing.py: submission time
plus a budget from public parameters, on the public grid), or the first grid tick after the
kernel finished when it overran; its progress is the elapsed share of that public schedule;
``created_at`` is the submission truncated to the second and ``updated_at`` the shown state
change, truncated likewise. The precise times stay in the database for the owner's logs.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from dpmine.wire import JobInfo, JobStatus
from dpmine_server.db.base import rows_affected
from dpmine_server.db.models import Job, LedgerEntry, Principal, utcnow
from dpmine_server.errors import (
    ChargeKeptNoResult,
    IdempotencyConflict,
    NotFound,
    OperationFailed,
    RequestInProgress,
    ServerError,
)
from dpmine_server.services.executor import Executor, Pending, Release
from dpmine_server.services.instances import dead_owners
from dpmine_server.services.timing import TimingPolicy

_JOBSTATUS: TypeAdapter[JobStatus] = TypeAdapter(JobStatus)

__all__ = ["JobRunner"]

logger = logging.getLogger(__name__)
_PROGRESS_INTERVAL_SECONDS = 0.5


class JobRunner:
    """Submits charged operations to a thread pool and reports their state."""

    def __init__(
        self,
        *,
        sessions: sessionmaker[Session],
        executor: Executor,
        workers: int,
        instance_id: str | None = None,
        timing: TimingPolicy | None = None,
    ) -> None:
        self._sessions = sessions
        self._executor = executor
        self._timing = timing or TimingPolicy(enabled=False, grid=0.0, base=0.0, scale=0.0)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpmine-job")
        self._instance_id = instance_id
        self._lock = threading.Lock()

    def submit(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        operation: str,
        request: dict[str, Any],
        idempotency_key: str | None,
    ) -> JobInfo:
        """Charge now, compute in the background; a retry with the same key returns the job."""
        job_id, _started = self._start(
            principal=principal,
            dataset_id=dataset_id,
            operation=operation,
            request=request,
            idempotency_key=idempotency_key,
        )
        with self._sessions() as session:
            return self._info(session, session.get_one(Job, job_id))

    def execute(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        operation: str,
        request: dict[str, Any],
        idempotency_key: str | None,
    ) -> Release:
        """Submit a job and wait for its release: the synchronous route of a ``job``-mode
        operation. A retry with the same key gets the stored release (marked replayed), or
        RequestInProgress while the first job is still computing."""
        job_id, started = self._start(
            principal=principal,
            dataset_id=dataset_id,
            operation=operation,
            request=request,
            idempotency_key=idempotency_key,
        )
        if isinstance(started, Future):
            return started.result()
        if started is not None:
            return started
        with self._sessions() as session:
            job = session.get_one(Job, job_id)
            if job.status in {"queued", "running"}:
                raise RequestInProgress(
                    "the job with this Idempotency-Key is still running; retry later with the "
                    "same key to get its result (nothing more is charged)"
                )
            entry = (
                None
                if job.ledger_entry_id is None
                else session.get(LedgerEntry, job.ledger_entry_id)
            )
            if job.status != "done" or entry is None or entry.release is None:
                raise ChargeKeptNoResult(
                    "the job with this Idempotency-Key was charged but it failed: the charge was "
                    "kept and no result exists. Use a new Idempotency-Key to ask again (it is "
                    "charged again)"
                )
            body = dict(entry.release)
            body["receipt"] = {**body["receipt"], "replayed": True}
            return Release(body=body, replayed=True, entry_id=entry.id)

    def _start(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        operation: str,
        request: dict[str, Any],
        idempotency_key: str | None,
    ) -> tuple[str, Future[Release] | Release | None]:
        """Create (or find, for a retry: ``None``) the job; a fresh one is charged and queued
        (its future), a charged request's retry is replayed from the ledger (its release)."""
        arrival = utcnow()
        key = idempotency_key or f"job-{uuid.uuid4()}"
        with self._sessions() as session:
            existing = session.scalar(
                select(Job).where(Job.principal_id == principal.id, Job.idempotency_key == key)
            )
            if existing is not None:
                same = (existing.dataset_id, existing.operation, existing.request) == (
                    dataset_id,
                    operation,
                    request,
                )
                if not same:
                    raise IdempotencyConflict(
                        "this Idempotency-Key was already used for a different job; "
                        "use a new key for a new request"
                    )
                return existing.id, None
        spec = self._executor.spec(operation)
        started = self._executor.begin(
            principal=principal,
            dataset_id=dataset_id,
            spec=spec,
            request=request,
            idempotency_key=key,
        )
        job = Job(
            id=str(uuid.uuid4()),
            principal_id=principal.id,
            dataset_id=dataset_id,
            operation=spec.name,
            status="done" if isinstance(started, Release) else "queued",
            progress=1.0 if isinstance(started, Release) else 0.0,
            request=request,
            idempotency_key=key,
            instance_id=self._instance_id,
            ledger_entry_id=started.entry_id
            if isinstance(started, Release)
            else started.reservation.entry_id,
            created_at=arrival,
            updated_at=utcnow(),
        )
        with self._sessions() as session, session.begin():
            session.add(job)
        if isinstance(started, Release):
            return job.id, started
        return job.id, self._pool.submit(self._run, job.id, started)

    def _run(self, job_id: str, pending: Pending) -> Release:
        self._set(job_id, status="running")
        last = 0.0

        def report(fraction: float, message: str = "") -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= _PROGRESS_INTERVAL_SECONDS:
                last = now
                self._set(job_id, progress=min(max(fraction, 0.0), 1.0), message=message)

        try:
            release = self._executor.finish(pending, report)
        except ServerError as error:
            self._set(job_id, status="failed", message=error.message)
            raise
        except Exception:
            logger.exception("job %s failed", job_id)
            self._set(job_id, status="failed", message="internal error; the charge stands")
            raise OperationFailed(
                "the job failed after its charge; nothing was released and the charge stands"
            ) from None
        self._set(job_id, status="done", progress=1.0, message="")
        return release

    def _set(self, job_id: str, **values: Any) -> None:
        with self._sessions() as session, session.begin():
            session.execute(
                update(Job).where(Job.id == job_id).values(updated_at=utcnow(), **values)
            )

    def get(self, principal: Principal, job_id: str) -> JobInfo:
        """A job of this principal (others' jobs are not found)."""
        with self._sessions() as session:
            job = session.get(Job, job_id)
            if job is None or job.principal_id != principal.id:
                raise NotFound(f"no job {job_id!r} of yours")
            return self._info(session, job)

    def _budget(self, session: Session, job: Job) -> float:
        try:
            metadata = self._executor.public_metadata(session, job.dataset_id)
        except NotFound:
            return self._timing.base
        return self._timing.budget(job.operation, job.request, metadata)

    def _info(self, session: Session, job: Job) -> JobInfo:
        """What the analyst may see: state changes on the padded public schedule only."""
        created = _aware(job.created_at)
        submitted = _to_second(created)
        finished = job.status in {"done", "failed"}
        if not self._timing.enabled:
            shown_at = _aware(job.updated_at) if finished else None
            deadline = 0.0
        else:
            budget = self._budget(session, job)
            deadline = self._timing.deadline_offset(budget)
            shown_at = (
                self._timing.visible_at(created, budget, _aware(job.updated_at))
                if finished
                else None
            )
        if shown_at is None or utcnow() < shown_at:
            elapsed = (utcnow() - created).total_seconds()
            progress = min(elapsed / deadline, 0.99) if deadline > 0 else 0.0
            return JobInfo(
                id=job.id,
                dataset_id=job.dataset_id,
                operation=job.operation,
                status="running",
                progress=round(progress, 2),
                message="",
                result=None,
                created_at=submitted,
                updated_at=submitted,
            )
        result = None
        if job.status == "done" and job.ledger_entry_id is not None:
            entry = session.get(LedgerEntry, job.ledger_entry_id)
            result = entry.release if entry is not None else None
        return JobInfo(
            id=job.id,
            dataset_id=job.dataset_id,
            operation=job.operation,
            status=_JOBSTATUS.validate_python(job.status),
            progress=1.0 if job.status == "done" else 0.0,
            message=job.message,
            result=result,
            created_at=submitted,
            updated_at=_to_second(shown_at),
        )

    def interrupt_unfinished(self, is_alive: Callable[[str | None], bool] | None = None) -> int:
        """At start-up: jobs that dead processes left queued or running are failed (charge
        kept); jobs of live workers (``is_alive``) are left alone."""
        active = Job.status.in_(("queued", "running"))
        with self._sessions() as session, session.begin():
            statement = update(Job).where(active)
            if is_alive is not None:
                dead = dead_owners(session, Job.instance_id, active, is_alive)
                if dead is None:
                    return 0
                statement = statement.where(dead)
            result = session.execute(
                statement.values(
                    status="failed",
                    message="interrupted by a server restart; the charge stands, nothing was "
                    "released; submit again with a new Idempotency-Key",
                    updated_at=utcnow(),
                )
            )
            return rows_affected(result)

    def shutdown(self) -> None:
        """Wait for running jobs to finish."""
        self._pool.shutdown(wait=True)


def _aware(moment: datetime) -> datetime:
    """``moment`` as an aware UTC time (SQLite hands back naive ones)."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _to_second(moment: datetime) -> datetime:
    """``moment`` truncated to the second: the only precision a job's times are shown at."""
    return moment.replace(microsecond=0)
