"""Background jobs, the API side: submit (charge now), wait, cancel, report.

The charge is taken synchronously when the job is submitted (so a budget refusal is an immediate
409 and costs nothing); the job is then handed to a worker *process* through the queue
(services/queues.py; the worker side is services/workers.py) and its release is stored in the
ledger entry, so any server process can report a job's progress and result, and a client that
disconnects loses nothing. A job whose worker dies is left ``interrupted`` with its charge; a
cancelled job stops at its next public progress step, with its charge.

Time is an output (DESIGN.md contract item 7): the analyst never sees when the kernel started or
ended. A job is shown ``running`` until the first tick of the public grid, counted from its
submission, that is past both its padded deadline (services/timing.py: a budget from public
parameters) and its public settle time plus half the jobs' base (the worker's public schedule,
services/workers.py ``PublicSchedule``, recorded as the job's ``updated_at``; later than the
deadline when the job waited for a worker); its progress is the elapsed share of that public
schedule; ``created_at`` is the submission truncated to the second and ``updated_at`` the shown
state change, truncated likewise. The ledger entry keeps the precise times for the owner's logs.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import case, literal, or_, select, update
from sqlalchemy.orm import Session

from dpmine.wire import DatasetMetadata, JobInfo, JobStatus
from dpmine_server.db.base import rows_affected
from dpmine_server.db.models import Job, LedgerEntry, Principal, as_utc, utcnow
from dpmine_server.errors import (
    ChargeKeptNoResult,
    IdempotencyConflict,
    JobCancelled,
    NotFound,
    OperationFailed,
    RequestInProgress,
    TooManyJobs,
)
from dpmine_server.services.executor import Release
from dpmine_server.services.instances import dead_owners
from dpmine_server.services.queues import JobQueue
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.services.workers import (
    FINAL_STATES,
    NOT_QUEUED,
    SERVER_RESTARTED,
    WorkerRuntime,
    interrupt_jobs,
)

_JOBSTATUS: TypeAdapter[JobStatus] = TypeAdapter(JobStatus)

__all__ = ["JobRunner"]

logger = logging.getLogger(__name__)
#: Budgets kept by :meth:`JobRunner._budget` (cleared when full: a cache, never a source of
#: truth).
_BUDGET_CACHE_SIZE = 4096

#: Longest wait between two reads of a waited-for job's state: a safety net, since the queue
#: wakes the waiter when the job settles.
_RECHECK_S = 5.0
_CANCELLED = "cancelled (by you or the data owner); the charge stands and nothing was released"
_PAST = {
    "failed": "failed",
    "cancelled": "was cancelled",
    "interrupted": "was interrupted",
}


class JobRunner:
    """Charges jobs, hands them to worker processes through a queue and reports their state."""

    def __init__(
        self,
        *,
        runtime: WorkerRuntime,
        queue: JobQueue,
        instance_id: str | None = None,
        timing: TimingPolicy | None = None,
        wait_s: float = 3600.0,
        max_open_jobs: int | None = None,
    ) -> None:
        self._runtime = runtime
        self._sessions = runtime.write_sessions
        self._executor = runtime.executor
        self._queue = queue
        unpadded = TimingPolicy(enabled=False, grid=0.0, base=0.0, scale=0.0)
        self._timing = (timing or unpadded).for_jobs()  # the job path's base
        self._instance_id = instance_id
        self._wait_s = wait_s
        self._max_open_jobs = max_open_jobs
        #: job id → (the public metadata its budget was computed from, the budget).
        self._budgets: dict[str, tuple[DatasetMetadata, float]] = {}

    @property
    def timing(self) -> TimingPolicy:
        """The policy that pads jobs (``TimingPolicy.for_jobs``: the jobs' base)."""
        return self._timing

    @property
    def queue(self) -> JobQueue:
        """The queue that carries this runner's jobs to worker processes."""
        return self._queue

    def submit(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        operation: str,
        request: dict[str, Any],
        idempotency_key: str | None,
    ) -> JobInfo:
        """Charge now, compute in a worker; a retry with the same key returns the same job."""
        job_id, _replay, _fresh = self._start(
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
        job_id, replay, fresh = self._start(
            principal=principal,
            dataset_id=dataset_id,
            operation=operation,
            request=request,
            idempotency_key=idempotency_key,
        )
        if replay is not None:
            return replay
        # A fresh job is settled by its worker on the public schedule; a retry reads only the
        # state the original job shows (never whether its kernel is still running).
        status = self._wait(job_id) if fresh else self._wait_visible(job_id)
        if fresh:
            self._sleep_until_shown(job_id)
        with self._sessions() as session:
            job = session.get_one(Job, job_id)
            if status in {"queued", "running"}:
                raise RequestInProgress(
                    "the job with this Idempotency-Key is still running; retry later with the "
                    "same key to get its result (nothing more is charged)"
                )
            entry = (
                None
                if job.ledger_entry_id is None
                else session.get(LedgerEntry, job.ledger_entry_id)
            )
            if job.status == "done" and entry is not None and entry.release is not None:
                body = dict(entry.release)
                if not fresh:
                    body["receipt"] = {**body["receipt"], "replayed": True}
                return Release(body=body, replayed=not fresh, entry_id=entry.id)
            if fresh and job.status == "cancelled":
                raise JobCancelled(job.message)
            if fresh:
                raise OperationFailed(
                    job.message
                    or "the job failed after its charge; nothing was released and the charge stands"
                )
            raise ChargeKeptNoResult(
                "the job with this Idempotency-Key was charged but released nothing (it "
                f"{_PAST.get(job.status, 'failed')}): the charge was kept and no result exists. "
                "Use a new Idempotency-Key to ask again (it is charged again)"
            )

    def _wait(self, job_id: str) -> str:
        """Wait (at most ``job_wait_s``) until the job is settled; its last status."""
        deadline = time.monotonic() + self._wait_s
        while True:
            with self._sessions() as session:
                status = session.scalar(select(Job.status).where(Job.id == job_id)) or "failed"
            left = deadline - time.monotonic()
            if status in FINAL_STATES or left <= 0:
                return status
            self._queue.wait(job_id, min(left, _RECHECK_S))

    def _sleep_until_shown(self, job_id: str) -> None:
        """Sleep until a settled job is shown settled (:meth:`_shown_at`), so that the
        synchronous route answers at the job's public time, not when its worker's write
        landed."""
        with self._sessions() as session:
            _budget, shown_at = self._shown_times(session, session.get_one(Job, job_id))
        if shown_at is not None:
            time.sleep(max((shown_at - utcnow()).total_seconds(), 0.0))

    def _wait_visible(self, job_id: str) -> str:
        """Wait (at most ``job_wait_s``) until the job is *shown* settled; its shown status.
        Polled on the public grid, so the answer comes at the first grid step after the
        shown settlement, whatever the kernel did."""
        deadline = time.monotonic() + self._wait_s
        step = self._timing.grid if self._timing.enabled and self._timing.grid > 0 else 0.02
        while True:
            with self._sessions() as session:
                job = session.get_one(Job, job_id)
                shown = self._info(session, job).status
                settled = job.status in FINAL_STATES
            left = deadline - time.monotonic()
            if shown != "running" or left <= 0:
                return shown
            if settled:
                time.sleep(min(step, left))
            else:
                self._queue.wait(job_id, min(left, _RECHECK_S))

    def _start(
        self,
        *,
        principal: Principal,
        dataset_id: str,
        operation: str,
        request: dict[str, Any],
        idempotency_key: str | None,
    ) -> tuple[str, Release | None, bool]:
        """Create the job, or find it for a retry. Returns its id, the stored release of a
        charged request's retry (replayed from the ledger), and whether the job is new (charged
        now and handed to the queue)."""
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
                return existing.id, None, False
            self._check_open_jobs(session, principal.id, arrival)
        spec = self._executor.spec(operation)
        started = self._executor.begin(
            principal=principal,
            dataset_id=dataset_id,
            spec=spec,
            request=request,
            idempotency_key=key,
        )
        replayed = isinstance(started, Release)
        job = Job(
            id=str(uuid.uuid4()),
            principal_id=principal.id,
            dataset_id=dataset_id,
            operation=spec.name,
            status="done" if replayed else "queued",
            progress=1.0 if replayed else 0.0,
            request=request,
            idempotency_key=key,
            instance_id=self._instance_id,
            ledger_entry_id=started.entry_id
            if isinstance(started, Release)
            else started.reservation.entry_id,
            remaining_units=None
            if isinstance(started, Release)
            else started.reservation.remaining_after.units,
            created_at=arrival,
            updated_at=utcnow(),
        )
        with self._sessions() as session, session.begin():
            session.add(job)
        if isinstance(started, Release):
            return job.id, started, False
        try:
            queue_job_id = self._queue.enqueue(job.id)
        except Exception:
            logger.exception("job %s could not be queued", job.id)
            interrupt_jobs(self._runtime, [job.id], reason=NOT_QUEUED)
            raise OperationFailed(
                "the job was charged but could not be handed to a worker; nothing was released "
                "and the charge stands. The owner can see the server log."
            ) from None
        if queue_job_id is not None:
            with self._sessions() as session, session.begin():
                session.execute(
                    update(Job).where(Job.id == job.id).values(queue_job_id=queue_job_id)
                )
        return job.id, None, True

    def cancel(self, principal: Principal, job_id: str) -> JobInfo:
        """Cancel one of your jobs. The outcome depends only on what the job *shows*: a job
        not yet shown settled ends ``cancelled`` with nothing released, whatever its kernel
        had done (a queued job never runs; a running one stops at its next public progress
        step or, if it had finished, its release is withheld); it is shown cancelled at the
        time it would have been shown settled. A job shown settled is left as it is. The
        charge stays either way (issue #20, "cancel outcome")."""
        return self._cancel(job_id, principal_id=principal.id)

    def cancel_for_owner(self, job_id: str) -> JobInfo:
        """Cancel any analyst's job (the owner console): the same outcome, message and charge
        as the analyst's own cancel, so the analyst sees no state that a cancel of theirs
        could not have produced."""
        return self._cancel(job_id, principal_id=None)

    def _cancel(self, job_id: str, *, principal_id: int | None) -> JobInfo:
        """Cancel ``job_id`` (of ``principal_id`` only, unless None): see :meth:`cancel`."""
        with self._sessions() as session, session.begin():
            job = session.get(Job, job_id)
            if job is None or principal_id not in {None, job.principal_id}:
                raise NotFound(
                    f"no job {job_id!r} of yours" if principal_id else f"no job {job_id!r}"
                )
            if self._info(session, job).status != "running":
                return self._info(session, job)  # shown settled: as it is
            never_ran = rows_affected(
                session.execute(
                    update(Job)
                    .where(Job.id == job_id, Job.status == "queued")
                    .values(
                        status="cancelled",
                        cancel_requested=True,
                        message=_CANCELLED,
                        updated_at=utcnow(),
                    )
                )
            )
            if not never_ran:
                # Running: the worker withholds the release at the end of its slot. Already
                # settled but not yet shown: withheld here (a release stays in the owner's
                # ledger, never shown to the analyst), at the settle time already recorded.
                session.execute(
                    update(Job)
                    .where(Job.id == job_id, Job.status.in_(("running", "done", "failed")))
                    .values(
                        cancel_requested=True,
                        status=case(
                            (Job.status == "running", Job.status), else_=literal("cancelled")
                        ),
                        message=case(
                            (Job.status == "running", Job.message), else_=literal(_CANCELLED)
                        ),
                    )
                )
            entry_id = job.ledger_entry_id
        if never_ran and entry_id is not None:
            self._runtime.ledger.interrupt([entry_id], status="failed")
        with self._sessions() as session:
            return self._info(session, session.get_one(Job, job_id))

    def get(self, principal: Principal, job_id: str) -> JobInfo:
        """A job of this principal (others' jobs are not found)."""
        with self._sessions() as session:
            job = session.get(Job, job_id)
            if job is None or job.principal_id != principal.id:
                raise NotFound(f"no job {job_id!r} of yours")
            return self._info(session, job)

    def _check_open_jobs(self, session: Session, principal_id: int, now: datetime) -> None:
        """Refuse a new job (429 TooManyJobs, before any charge) when the principal already has
        ``max_open_jobs`` jobs not yet shown settled at ``now``.

        Proof that the refusal is public: a job counts exactly when :meth:`_info` would show
        it ``running`` at ``now`` (its shown state, which its analyst can poll), and that
        state changes only on the padded public schedule (:meth:`_shown_at`); the count is of
        the principal's own jobs, so it reveals nothing beyond states that principal sees."""
        limit = self._max_open_jobs
        if limit is None:
            return
        # A settled job is shown settled at most half the base plus two grid steps after its
        # recorded settle time (:meth:`_shown_at`); a minute more covers any clock slack.
        slack = 60.0 + self._timing.base + 2 * self._timing.grid
        recent = now - timedelta(seconds=slack)
        candidates = session.scalars(
            select(Job).where(
                Job.principal_id == principal_id,
                or_(Job.status.not_in(FINAL_STATES), Job.updated_at >= recent),
            )
        )
        shown_open = 0
        for job in candidates:
            if job.status not in FINAL_STATES:
                shown_open += 1  # shown running until it is settled (:meth:`_shown_at`)
                continue
            _budget, shown_at = self._shown_times(session, job)
            if shown_at is None or now < shown_at:
                shown_open += 1
        if shown_open >= limit:
            raise TooManyJobs(
                f"you have {shown_open} jobs that are not finished yet, the server's limit per "
                f"analyst (DPMINE_MAX_OPEN_JOBS = {limit}); nothing was charged. Submit again "
                "once one of them is shown settled (GET /v1/jobs/{id}), or cancel one."
            )

    def _shown_times(self, session: Session, job: Job) -> tuple[float, datetime | None]:
        """The job's padding budget (0 with padding off) and when it is shown settled
        (:meth:`_shown_at`)."""
        budget = self._budget(session, job) if self._timing.enabled else 0.0
        return budget, self._shown_at(job, budget)

    def _budget(self, session: Session, job: Job) -> float:
        """The job's padding budget: a public function of its operation, its request and the
        dataset's public metadata, cached per job for as long as that metadata is the one in
        force (the check of open jobs computes it for every recent job of the analyst at each
        submission: up to 100 ms per submission were measured without the cache, on a tree
        miner's run, and that delay came out of the new job's hand-over allowance)."""
        try:
            metadata = self._executor.public_metadata(session, job.dataset_id)
        except NotFound:
            return self._timing.base
        cached = self._budgets.get(job.id)
        if cached is not None and cached[0] is metadata:
            return cached[1]
        budget = self._timing.budget(job.operation, job.request, metadata)
        if len(self._budgets) >= _BUDGET_CACHE_SIZE:
            self._budgets.clear()
        self._budgets[job.id] = (metadata, budget)
        return budget

    def _shown_at(self, job: Job, budget: float) -> datetime | None:
        """When a settled job is shown settled (None while it is not settled): with padding
        on, the first grid tick after its padded deadline and after its recorded settle time
        plus half the jobs' base (``TimingPolicy.for_jobs``), counted from its submission; else
        its settle time.

        The margin: a worker writes the final state just after the job's public settle time,
        and the write must land before the state is shown, or the write's own (load-dependent)
        delay would show. The base is the budget's allowance for such bookkeeping; the worker
        spends its other half on the handover (services/workers.py, ``PublicSchedule``)."""
        if job.status not in FINAL_STATES:
            return None
        settled = as_utc(job.updated_at)
        if not self._timing.enabled:
            return settled
        margin = timedelta(seconds=self._timing.base / 2)
        return self._timing.visible_at(as_utc(job.created_at), budget, settled + margin)

    def _info(self, session: Session, job: Job) -> JobInfo:
        """What the analyst may see: state changes on the padded public schedule only."""
        created = as_utc(job.created_at)
        submitted = _to_second(created)
        budget, shown_at = self._shown_times(session, job)
        deadline = self._timing.deadline_offset(budget) if self._timing.enabled else 0.0
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

    def interrupt_unfinished(self, is_alive: Callable[[str | None], bool]) -> int:
        """At start-up: jobs that dead API processes left behind are interrupted (charge kept).

        Those are the jobs of the embedded pool (it dies with its server) and the jobs that
        were charged but never handed to the queue engine. Jobs the queue engine holds
        (``queue_job_id`` set) belong to their workers, whose heartbeats settle them
        (services/queues.py)."""
        active = Job.status.in_(("queued", "running")) & Job.queue_job_id.is_(None)
        with self._sessions() as session:
            dead = dead_owners(session, Job.instance_id, active, is_alive)
            if dead is None:
                return 0
            job_ids = list(session.scalars(select(Job.id).where(active, dead)))
        return interrupt_jobs(self._runtime, job_ids, reason=SERVER_RESTARTED)

    def shutdown(self) -> None:
        """Stop the queue (running jobs finish first)."""
        self._queue.close()


def _to_second(moment: datetime) -> datetime:
    """``moment`` truncated to the second: the only precision a job's times are shown at."""
    return moment.replace(microsecond=0)
