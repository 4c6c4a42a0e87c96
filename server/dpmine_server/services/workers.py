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

import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import numpy as np
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from dpmine_server.db.base import is_sqlite, make_engine, make_session_factory, rows_affected
from dpmine_server.db.models import Job, LedgerEntry, Principal, as_utc, utcnow
from dpmine_server.dp.rng import secure_generator, seeded_generator
from dpmine_server.errors import JobCancelled, ServerError
from dpmine_server.operations.testing import TEST_OPERATIONS
from dpmine_server.services.datasets import DatasetService
from dpmine_server.services.executor import Executor
from dpmine_server.services.failpoints import FailPoints, parse_fail_calls
from dpmine_server.services.ledger import Ledger
from dpmine_server.services.release_guard import OVERRAN, ReleaseGuard
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.settings import Settings

__all__ = [
    "FINAL_STATES",
    "JOB_DONE_CHANNEL",
    "NOT_QUEUED",
    "PROGRESS_INTERVAL_S",
    "SCHEDULE",
    "SERVER_RESTARTED",
    "WORKER_DIED",
    "HeldSlot",
    "PublicSchedule",
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
        fail_points=(
            None
            if settings.test_fail_calls is None
            else FailPoints(parse_fail_calls(settings.test_fail_calls))
        ),
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
            raise JobCancelled(JobCancelled.MESSAGE)

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
    engine: Engine,
    sessions: sessionmaker[Session],
    job_id: str,
    status: str,
    message: str,
    *,
    settled_at: datetime | None = None,
) -> None:
    """Record the final state (only from ``running``) and notify waiting API processes.
    ``updated_at`` is ``settled_at``, the job's public settle time, when it has one (a padded
    job: the API shows the state from it, services/jobs.py), else now."""
    with sessions() as session, session.begin():
        session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "running")
            .values(
                status=status,
                progress=1.0 if status == "done" else 0.0,
                message=message,
                updated_at=settled_at or utcnow(),
            )
        )
        if not is_sqlite(engine):
            _notify_settled(session, [job_id])


def slot_seconds(runtime: WorkerRuntime, job: Job) -> float:
    """How long a worker holds a job's slot from its claim: the job's padded budget
    (services/timing.py), plus the public load budget when this process has not loaded the
    job's dataset yet (the load is padded to it). Public values only: the operation, its
    parameters, the public metadata and what this process has loaded (its history of jobs)."""
    policy = TimingPolicy.from_settings(runtime.settings).for_jobs()
    if not policy.enabled:
        return 0.0
    datasets = runtime.datasets
    with runtime.sessions() as session:
        metadata = runtime.executor.public_metadata(session, job.dataset_id)
        version = datasets.current_version(session, job.dataset_id)
    cold = version is not None and not datasets.is_resident(job.dataset_id, version)
    budget = policy.budget(job.operation, job.request, metadata)
    return policy.deadline_offset(budget) + (policy.load_budget(metadata) if cold else 0.0)


@dataclass(slots=True)
class HeldSlot:
    """A job slot taken from :data:`SCHEDULE`: its public start, and when it comes free
    again (set by the job once it knows; now, if the job ends without setting it)."""

    start: datetime
    free_at: datetime | None = None


class PublicSchedule:
    """The public times at which this process's job slots come free (DESIGN.md contract item
    7; issue #20, "queue contention").

    A padded job's slot starts at its *public start* s = max(its submission time, the public
    time the slot it takes came free) and lasts :func:`slot_seconds`; the job settles at
    s + slot, is recorded as settled then, and is shown from that time on
    (services/jobs.py). Proof that these times are public: the submission time is the
    analyst's request's arrival; a slot comes free at the public settle time of the job that
    held it, public by induction; the slot's length is a function of public values. So when
    a queued job starts and when it is shown settled never depend on how long the worker
    really took to hand over: a kernel still running on other data (an overrun's, in another
    thread of this process, or another process's on the same cores) can stretch that handover
    by milliseconds, which a job settled at its *real* end would show whenever they cross a
    grid step. The real claim trails the public start by the handover; the kernel's deadline
    is the public settle time, so the handover comes out of the budget's base margin. A claim
    that trails it by more than ``allowance`` (half the jobs' base, ``TimingPolicy.for_jobs``:
    the base is the budget's allowance for bookkeeping, and the API keeps the other half for the
    final write, services/jobs.py) starts the slot at the real claim instead, as before this
    schedule: a worker late for its own reasons (a restarted pool, a PostgreSQL worker's poll).

    One slot per concurrent job of the process (``slots``: 1 for the embedded pool's
    processes, a PostgreSQL worker's ``--concurrency``); a job takes the slot that came free
    first."""

    def __init__(self, slots: int = 1) -> None:
        self._slots = slots
        self._free: list[float] = []  # POSIX times at which used slots came free (a heap)
        self._lock = threading.Lock()

    def configure(self, slots: int) -> None:
        """Use ``slots`` concurrent slots (before the process takes any job)."""
        if slots < 1:
            raise ValueError(f"a worker has at least one job slot, got {slots}")
        with self._lock:
            self._slots = slots

    @contextmanager
    def slot(
        self, submitted: datetime, claimed: datetime, *, padded: bool, allowance: float
    ) -> Iterator[HeldSlot]:
        """Take a slot for a job submitted at ``submitted`` and claimed at ``claimed``; give
        it back when the ``with`` block ends, at the job's ``free_at``. An unpadded job takes
        no slot: it starts at its claim and leaves the schedule as it was."""
        if not padded:
            yield HeldSlot(claimed)
            return
        held = HeldSlot(self._take(submitted, claimed, allowance))
        try:
            yield held
        finally:
            self._give_back(held.free_at or utcnow())

    def used_slots(self) -> int:
        """How many slots have been used and given back (at most ``slots``)."""
        with self._lock:
            return len(self._free)

    def _take(self, submitted: datetime, claimed: datetime, allowance: float) -> datetime:
        with self._lock:
            came_free = heapq.heappop(self._free) if len(self._free) >= self._slots else None
        start = submitted if came_free is None else max(submitted, _posix(came_free))
        if start > claimed:
            return claimed
        late = (claimed - start).total_seconds()
        if late > allowance:
            # The owner's signal that the machine is too loaded for its base (never shown to
            # the analyst): the slot is counted from the real claim.
            logger.warning(
                "a job slot was claimed %.0f ms after its public start (allowance %.0f ms): "
                "counted from the claim; raise DPMINE_TIMING_BASE_MS (or re-run dpmine-server "
                "calibrate on this machine) if this recurs",
                late * 1000,
                allowance * 1000,
            )
            return claimed
        return start

    def _give_back(self, free_at: datetime) -> None:
        with self._lock:
            heapq.heappush(self._free, free_at.timestamp())


#: The job slots of this process (one per process: each worker process runs its own jobs).
SCHEDULE = PublicSchedule()


def _posix(moment: float) -> datetime:
    return datetime.fromtimestamp(moment, tz=UTC)


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
    while the slot is held withholds the release even when the kernel had finished.

    An overrun frees the worker at the slot's end too. The kernel runs in a thread of its own
    (:class:`_KernelRun`); when overruns fail closed and it has not claimed its release by the
    end of the slot, this thread settles the job as failed there (:func:`_settle_overrun`) and
    returns at once; the guard's expiry stops the kernel in its thread
    (services/release_guard.py, ``stoppable``). Waiting for the kernel instead would start the
    next job at a time that depends on how far the overrun kernel had got: a data-dependent
    delay of the jobs queued behind it (tests/privacy/test_audit_overruns.py audits it, on an
    idle and on a loaded machine). A compiled call the kernel is inside when it expires runs to
    its return: that CPU is the residual cost of the overrun event, as for an inline request
    (services/admission.py)."""
    if not _claim(runtime.write_sessions, job_id):
        return "skipped"
    claimed, claimed_wall = time.monotonic(), utcnow()
    with runtime.sessions() as session:
        job = session.get_one(Job, job_id)
        entry = session.get_one(LedgerEntry, job.ledger_entry_id)
        principal = session.get_one(Principal, job.principal_id)
        session.expunge_all()
    try:
        slot = slot_seconds(runtime, job)
    except Exception:  # the dataset vanished: hold nothing, the kernel fails the same way
        logger.exception("no padding budget for job %s", job_id)
        slot = 0.0
    padded = slot > 0
    policy = TimingPolicy.from_settings(runtime.settings).for_jobs()
    with SCHEDULE.slot(
        as_utc(job.created_at), claimed_wall, padded=padded, allowance=policy.base / 2
    ) as held:
        settled_at = held.start + timedelta(seconds=slot)
        release_at = claimed + (settled_at - claimed_wall).total_seconds()
        guard = ReleaseGuard()
        guard.bind(entry.id)
        kernel = _KernelRun(runtime, job, entry, principal, guard=guard, release_at=release_at)
        in_time = not (padded and policy.fails_closed) or kernel.wait(release_at - time.monotonic())
        if not in_time and guard.expire():
            cancelled = _cancel_requested(runtime.write_sessions, job_id)
            outcome = _settle_overrun(
                runtime, job_id, entry.id, kernel, settled_at=settled_at, cancelled=cancelled
            )
            held.free_at = settled_at
            return outcome
        status, message = kernel.result()  # claimed in time (or not padded): ends by the slot
        computed = kernel.computed_at
        if padded and computed is not None and computed > release_at:
            # Only without fail-closed overruns (test mode): the release is shown late. The
            # owner's signal to raise DPMINE_TIMING_SCALE (never shown to the analyst).
            logger.warning("job %s (%s) overran its padded slot", job_id, job.operation)
        _sleep_until(release_at)  # failures and cancels hold the slot like releases
        _finish(
            runtime.engine,
            runtime.write_sessions,
            job_id,
            status,
            message,
            settled_at=settled_at if padded else None,
        )
        held.free_at = settled_at if padded else None
    return status


class _KernelRun:
    """One job's kernel, run in a daemon thread of the worker process with its progress
    reporter: the release guard's progress check first (an expired kernel stops at its next
    public step), then the reporter's (cancels). ``settle`` holds a claimed release until the
    slot's end and withholds it if a cancel came meanwhile (:meth:`Executor.finish`)."""

    def __init__(
        self,
        runtime: WorkerRuntime,
        job: Job,
        entry: LedgerEntry,
        principal: Principal,
        *,
        guard: ReleaseGuard,
        release_at: float,
    ) -> None:
        self._runtime = runtime
        self._job = job
        self._entry = entry
        self._principal = principal
        self._guard = guard
        self._release_at = release_at
        self._reporter = _Reporter(runtime.write_sessions, job.id, PROGRESS_INTERVAL_S)
        self._outcome: Future[tuple[Outcome, str]] = Future()
        self._computed_at: float | None = None
        self._thread = threading.Thread(target=self._run, name="dpmine-job-kernel", daemon=True)
        self._thread.start()

    def wait(self, timeout: float) -> bool:
        """Whether the kernel ended within ``timeout`` seconds."""
        return bool(wait_futures([self._outcome], timeout=max(timeout, 0.0)).done)

    def result(self) -> tuple[Outcome, str]:
        """Wait for the kernel's end; its status and the analyst's message."""
        return self._outcome.result()

    def stop_reporting(self) -> None:
        """No more progress writes (the job was settled without its kernel)."""
        self._reporter.close()

    def _progress(self, fraction: float, message: str = "") -> None:
        self._guard.progress(fraction, message)
        self._reporter.report(fraction, message)

    @property
    def computed_at(self) -> float | None:
        """When (monotonic) the kernel had its release ready and began to wait for the slot's
        end; None if it never got there (it failed, or stopped at a cancel or a deadline).
        After the slot's end it is an overrun; the release is stored after that end in any
        case, so the time :meth:`result` returns says nothing about overruns."""
        return self._computed_at

    def _settle(self) -> bool:
        self._computed_at = time.monotonic()
        _sleep_until(self._release_at)
        return not _cancel_requested(self._runtime.write_sessions, self._job.id)

    def _run(self) -> None:
        runtime, job_id = self._runtime, self._job.id
        outcome: tuple[Outcome, str]
        try:
            pending = runtime.executor.resume(self._job, self._entry, self._principal)
            runtime.executor.finish(pending, self._progress, settle=self._settle, guard=self._guard)
            outcome = ("done", "")
        except JobCancelled as cancelled:
            outcome = ("cancelled", cancelled.message)
        except ServerError as error:
            outcome = ("failed", error.message)
        except Exception:
            logger.exception("job %s failed", job_id)
            runtime.ledger.interrupt([self._entry.id], status="failed")
            outcome = ("failed", "internal error; the charge stands, nothing was released")
        finally:
            self._reporter.close()
        self._guard.claim()  # a kernel that ended in time (failed or cancelled too) settles
        self._outcome.set_result(outcome)


def _settle_overrun(
    runtime: WorkerRuntime,
    job_id: str,
    entry_id: int,
    kernel: _KernelRun,
    *,
    settled_at: datetime,
    cancelled: bool = False,
) -> Outcome:
    """A job whose kernel had not claimed its release at the end of its slot (the guard is
    expired): settled failed now, shown at the public time it would have been shown done, its
    ledger entry failed with its charge; the kernel's release is withheld whatever it
    computes. Returns the status it settled.

    A job cancelled before then is settled ``cancelled``, with a cancel's message, as it is
    when its kernel ends in time (the reporter stops it, or the settle step withholds its
    release): the cancel is a public event, and the shown outcome must not say whether the
    kernel was still running at the slot's end. Settled ``failed`` instead, a cancelled job
    whose kernel spins only on one of two neighbouring tables showed ``failed`` in 76 of 150
    runs on a loaded machine, against ``cancelled`` always on the other
    (tests/privacy/test_audit_channels.py, the slow cancel audit)."""
    status: Outcome = "cancelled" if cancelled else "failed"
    logger.warning("job %s overran its padded slot: settled as %s", job_id, status)
    kernel.stop_reporting()
    runtime.ledger.interrupt([entry_id], status="failed")
    message = JobCancelled.MESSAGE if cancelled else OVERRAN
    _finish(runtime.engine, runtime.write_sessions, job_id, status, message, settled_at=settled_at)
    return status


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
