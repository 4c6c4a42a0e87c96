"""The worker side of a job: what a worker process does with a job id (DESIGN.md "Jobs").

A job was validated and charged when it was submitted (services/jobs.py); the worker

1. claims it: ``queued → running`` in one conditional UPDATE. A job leaves ``queued`` exactly
   once, so it is never run twice (a crash after the claim leaves it to the recovery, which
   marks it ``interrupted``; nothing runs it again with fresh noise);
2. rebuilds the charged request from the database and runs the kernel through the executor
   (release stored in the ledger entry before anyone can read it);
3. marks the job ``done``, ``failed`` or ``cancelled`` and, on PostgreSQL, notifies the API
   processes waiting for it (``NOTIFY dpmine_job_done``).

While the kernel runs, a reporter thread writes the kernel's latest progress (a fraction of the
operation's *public* steps) at a fixed cadence, and reads the job's cancel flag; the kernel's
next progress call then raises :class:`~dpmine_server.errors.JobCancelled` (the charge stays).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from dpmine_server.db.base import is_sqlite, make_engine, make_session_factory, rows_affected
from dpmine_server.db.models import Job, LedgerEntry, Principal, utcnow
from dpmine_server.dp.rng import secure_generator, seeded_generator
from dpmine_server.errors import JobCancelled, ServerError
from dpmine_server.operations.testing import TEST_OPERATIONS
from dpmine_server.services.datasets import DatasetService
from dpmine_server.services.executor import Executor
from dpmine_server.services.ledger import Ledger
from dpmine_server.services.release_guard import OVERRAN, ReleaseGuard
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.settings import Settings

__all__ = [
    "FINAL_STATES",
    "JOB_DONE_CHANNEL",
    "NOT_QUEUED",
    "PROGRESS_INTERVAL_S",
    "SERVER_RESTARTED",
    "WORKER_DIED",
    "WorkerRuntime",
    "build_runtime",
    "interrupt_jobs",
    "run_job",
    "slot_seconds",
]

logger = logging.getLogger(__name__)

#: Seconds between two progress writes of a running job (fixed: not data-dependent).
PROGRESS_INTERVAL_S = 0.5
#: PostgreSQL notification channel; the payload is the id of a job that reached a final state.
JOB_DONE_CHANNEL = "dpmine_job_done"
FINAL_STATES = frozenset({"done", "failed", "cancelled", "interrupted"})
#: Why a job was interrupted, as the analyst reads it.
WORKER_DIED = (
    "interrupted: the worker process running this job stopped; the charge stands and nothing "
    "was released. Submit again with a new Idempotency-Key (charged again)"
)
SERVER_RESTARTED = (
    "interrupted by a server restart before the job finished; the charge stands and nothing "
    "was released. Submit again with a new Idempotency-Key (charged again)"
)
NOT_QUEUED = (
    "interrupted: the job could not be handed to a worker; the charge stands and nothing was "
    "released. Submit again with a new Idempotency-Key (charged again)"
)

Outcome = Literal["done", "failed", "cancelled", "interrupted", "skipped"]


@dataclass(frozen=True, slots=True)
class WorkerRuntime:
    """What runs operations in a process: database access, the ledger, the loaded datasets and
    the executor. API processes and worker processes each build one (:func:`build_runtime`)."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    write_sessions: sessionmaker[Session]
    ledger: Ledger
    datasets: DatasetService
    executor: Executor

    def close(self) -> None:
        """Release the database connections."""
        self.engine.dispose()


def rng_factory(settings: Settings) -> Callable[[int], np.random.Generator]:
    """The generator of one release, by its ledger entry id: the OS CSPRNG-seeded generator,
    or in test mode (``DPMINE_TEST_SEED``; Settings refuses it elsewhere) one seeded from the
    seed and the entry id, reproducible and distinct per release in every process."""
    if settings.test_seed is None:
        return lambda _entry_id: secure_generator()
    seed = settings.test_seed
    return lambda entry_id: seeded_generator(seed * 1_000_003 + entry_id)


def build_runtime(settings: Settings, *, instance_id: str | None = None) -> WorkerRuntime:
    """Connect to the engine's database and build the ledger, datasets and executor."""
    engine = make_engine(settings.database_url)
    sessions = make_session_factory(engine)
    write_sessions = make_session_factory(engine, immediate=True)
    ledger = Ledger(engine, sessions, instance_id=instance_id)
    datasets = DatasetService(
        data_dir=settings.data_dir,
        sessions=sessions,
        allow_sql=settings.allow_sql_sources,
        max_cached=settings.max_cached_datasets,
        load_padding=TimingPolicy.from_settings(settings).load_budget,
    )
    test_operations = (
        {spec.name: spec for spec in TEST_OPERATIONS} if settings.environment == "test" else None
    )
    executor = Executor(
        sessions=sessions,
        ledger=ledger,
        datasets=datasets,
        rng_factory=rng_factory(settings),
        extra_operations=test_operations,
    )
    return WorkerRuntime(
        settings=settings,
        engine=engine,
        sessions=sessions,
        write_sessions=write_sessions,
        ledger=ledger,
        datasets=datasets,
        executor=executor,
    )


class _Reporter:
    """Writes the latest public progress every ``interval`` seconds and watches the cancel flag."""

    def __init__(self, sessions: sessionmaker[Session], job_id: str, interval: float) -> None:
        self._sessions = sessions
        self._job_id = job_id
        self._interval = interval
        self._fraction = 0.0
        self._cancelled = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dpmine-progress", daemon=True)
        self._thread.start()

    def report(self, fraction: float, message: str = "") -> None:
        """The kernel's progress callback: record the fraction; stop if the job was cancelled."""
        del message
        self._fraction = min(max(fraction, 0.0), 1.0)
        if self._cancelled.is_set():
            raise JobCancelled(
                "the job was cancelled (by you or the data owner); the charge stands and nothing "
                "was released"
            )

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                with self._sessions() as session, session.begin():
                    flag = session.scalar(
                        update(Job)
                        .where(Job.id == self._job_id)
                        .values(progress=self._fraction)
                        .returning(Job.cancel_requested)
                    )
            except Exception:  # a missed progress write is harmless; the next tick retries
                logger.warning("progress of job %s not written", self._job_id, exc_info=True)
                continue
            if flag:
                self._cancelled.set()

    def close(self) -> None:
        """Stop the reporter thread."""
        self._stop.set()
        self._thread.join()


def _notify_settled(session: Session, job_ids: list[str]) -> None:
    """``NOTIFY dpmine_job_done`` per job, delivered when the session's transaction commits
    (PostgreSQL only): wakes the API processes waiting for these jobs."""
    for job_id in job_ids:
        session.execute(
            text("SELECT pg_notify(:channel, :job_id)"),
            {"channel": JOB_DONE_CHANNEL, "job_id": job_id},
        )


def _claim(sessions: sessionmaker[Session], job_id: str) -> bool:
    """``queued → running`` if the job is still queued and not cancelled (exactly once)."""
    with sessions() as session, session.begin():
        claimed = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "queued", Job.cancel_requested.is_(False))
            .values(status="running", updated_at=utcnow())
        )
        return rows_affected(claimed) == 1


def _finish(
    engine: Engine, sessions: sessionmaker[Session], job_id: str, status: str, message: str
) -> None:
    """Record the final state (only from ``running``) and notify waiting API processes."""
    with sessions() as session, session.begin():
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "running")
            .values(
                status=status,
                progress=1.0 if status == "done" else 0.0,
                message=message,
                updated_at=utcnow(),
            )
        )
        if not is_sqlite(engine):
            _notify_settled(session, [job_id])


def slot_seconds(runtime: WorkerRuntime, job: Job) -> float:
    """How long a worker holds a job's slot from its claim: the job's padded budget
    (services/timing.py), plus the public load budget when this process has not loaded the
    job's dataset yet (the load is padded to it). Public values only: the operation, its
    parameters, the public metadata and what this process has loaded (its history of jobs)."""
    policy = TimingPolicy.from_settings(runtime.settings)
    if not policy.enabled:
        return 0.0
    datasets = runtime.datasets
    with runtime.sessions() as session:
        metadata = runtime.executor.public_metadata(session, job.dataset_id)
        version = datasets.current_version(session, job.dataset_id)
    cold = version is not None and not datasets.is_resident(job.dataset_id, version)
    budget = policy.budget(job.operation, job.request, metadata)
    return policy.deadline_offset(budget) + (policy.load_budget(metadata) if cold else 0.0)


def _cancel_requested(sessions: sessionmaker[Session], job_id: str) -> bool:
    with sessions() as session:
        return bool(session.scalar(select(Job.cancel_requested).where(Job.id == job_id)))


def _sleep_until(moment: float) -> None:
    time.sleep(max(moment - time.monotonic(), 0.0))


def run_job(runtime: WorkerRuntime, job_id: str) -> Outcome:
    """Claim, compute and settle one job; returns what happened (``skipped``: not claimable).

    Queues on a public schedule (DESIGN.md contract item 7; issue #20, "queue contention"):
    the worker holds the job's slot from its claim for :func:`slot_seconds`, whatever the
    kernel took, and settles the job only then (done, failed or cancelled alike). The next
    job this worker takes therefore starts at a time set by the public budgets of the jobs
    ahead of it, and a job's visible state changes at public times. A cancel that arrives
    while the slot is held withholds the release even when the kernel had finished."""
    if not _claim(runtime.write_sessions, job_id):
        return "skipped"
    claimed = time.monotonic()
    with runtime.sessions() as session:
        job = session.get_one(Job, job_id)
        entry = session.get_one(LedgerEntry, job.ledger_entry_id)
        principal = session.get_one(Principal, job.principal_id)
        session.expunge_all()
    try:
        release_at = claimed + slot_seconds(runtime, job)
    except Exception:  # the dataset vanished: hold nothing, the kernel fails the same way
        logger.exception("no padding budget for job %s", job_id)
        release_at = claimed

    def settle() -> bool:
        _sleep_until(release_at)
        return not _cancel_requested(runtime.write_sessions, job_id)

    reporter = _Reporter(runtime.write_sessions, job_id, PROGRESS_INTERVAL_S)
    guard = _arm_deadline(runtime, job_id, entry.id, release_at if release_at > claimed else None)

    def progress(fraction: float, message: str = "") -> None:
        guard.progress(fraction, message)
        reporter.report(fraction, message)

    status: Outcome
    try:
        pending = runtime.executor.resume(job, entry, principal)
        runtime.executor.finish(pending, progress, settle=settle, guard=guard)
        status, message = "done", ""
    except JobCancelled as cancelled:
        status, message = "cancelled", cancelled.message
    except ServerError as error:
        status, message = "failed", error.message
    except Exception:
        logger.exception("job %s failed", job_id)
        runtime.ledger.interrupt([entry.id], status="failed")
        status, message = "failed", "internal error; the charge stands, nothing was released"
    finally:
        reporter.close()
    guard.claim()  # a kernel that ended in time (failed or cancelled too) settles the job itself
    if release_at > claimed and time.monotonic() > release_at:
        # The owner's signal to raise DPMINE_TIMING_SCALE (never shown to the analyst).
        logger.warning("job %s (%s) overran its padded slot", job_id, job.operation)
    _sleep_until(release_at)  # failures and cancels hold the slot like releases
    if not guard.expired:  # else the deadline settled it already
        _finish(runtime.engine, runtime.write_sessions, job_id, status, message)
    return "failed" if guard.expired else status


def _arm_deadline(
    runtime: WorkerRuntime, job_id: str, entry_id: int, release_at: float | None
) -> ReleaseGuard:
    """A release guard that, when overruns fail closed, settles the job as failed at the end
    of its slot (``release_at``, monotonic) unless its kernel claimed its release first
    (services/release_guard.py): the job is then shown failed at the public time it would have
    been shown done, its ledger entry failed with its charge, and the kernel stops at its next
    progress call. The timer thread is a daemon; it fires at most once."""
    guard = ReleaseGuard()
    guard.bind(entry_id)
    if release_at is None or not TimingPolicy.from_settings(runtime.settings).fails_closed:
        return guard

    def expire() -> None:
        if guard.expire():
            logger.warning("job %s overran its padded slot: settled as failed", job_id)
            runtime.ledger.interrupt([entry_id], status="failed")
            _finish(runtime.engine, runtime.write_sessions, job_id, "failed", OVERRAN)

    timer = threading.Timer(max(release_at - time.monotonic(), 0.0), expire)
    timer.daemon = True
    timer.start()
    return guard


def interrupt_jobs(runtime: WorkerRuntime, job_ids: list[str], *, reason: str) -> int:
    """Mark these jobs ``interrupted`` if not yet final (their worker died, or their server
    stopped before a worker took them) and their ledger entries interrupted, in one
    transaction: the charge stands, nothing is released, and the job is never run again.
    Returns how many jobs changed."""
    if not job_ids:
        return 0
    with runtime.write_sessions() as session, session.begin():
        active = Job.id.in_(job_ids) & Job.status.in_(("queued", "running"))
        entries = [
            entry
            for entry in session.scalars(select(Job.ledger_entry_id).where(active))
            if entry is not None
        ]
        changed = rows_affected(
            session.execute(
                update(Job)
                .where(active)
                .values(status="interrupted", progress=0.0, message=reason, updated_at=utcnow())
            )
        )
        if entries:
            session.execute(
                update(LedgerEntry)
                .where(LedgerEntry.id.in_(entries), LedgerEntry.status == "reserved")
                .values(status="interrupted", completed_at=utcnow())
            )
        if changed and not is_sqlite(runtime.engine):
            _notify_settled(session, job_ids)
    return changed
