"""The server's long-lived services, built once per app from the settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dpmine_server.db.base import is_sqlite
from dpmine_server.db.migrate import upgrade_to_head
from dpmine_server.db.models import Principal
from dpmine_server.services import audit
from dpmine_server.services.admission import AdmissionGate
from dpmine_server.services.collector import IdleCollector, defer_full_collections
from dpmine_server.services.datasets import DatasetService
from dpmine_server.services.executor import Executor
from dpmine_server.services.first_start import ensure_first_start_calibration
from dpmine_server.services.instances import Liveness, liveness_for
from dpmine_server.services.jobs import JobRunner
from dpmine_server.services.kernel_lane import KernelLane
from dpmine_server.services.ledger import Ledger
from dpmine_server.services.principals import check_secret_key, create_principal
from dpmine_server.services.queues import JobQueue, LocalPoolQueue, PostgresQueue
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.services.warmup import warm_process
from dpmine_server.services.workers import WorkerRuntime, build_runtime
from dpmine_server.settings import Settings

__all__ = ["Services", "build_services"]


@dataclass(frozen=True, slots=True)
class Services:
    """Everything a request handler needs, injected through ``api.deps``."""

    settings: Settings
    runtime: WorkerRuntime
    jobs: JobRunner
    instance: Liveness
    #: The public in-flight limit of this process (DPMINE_MAX_IN_FLIGHT, services/admission.py).
    admission: AdmissionGate = field(init=False)
    #: The padding policy of the settings, built once (services/timing.py).
    timing: TimingPolicy = field(init=False)
    #: The public order in which this process's inline kernels run (services/kernel_lane.py).
    kernel_lane: KernelLane = field(init=False)
    #: When this process runs its full garbage collections, and their public windows
    #: (services/collector.py); None when padding is off (Python's automatic collections).
    collector: IdleCollector | None = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "admission", AdmissionGate(self.settings.max_in_flight))
        object.__setattr__(self, "timing", TimingPolicy.from_settings(self.settings))
        object.__setattr__(self, "kernel_lane", KernelLane())
        object.__setattr__(self, "collector", None)

    @property
    def engine(self) -> Engine:
        """The engine's own database."""
        return self.runtime.engine

    @property
    def sessions(self) -> sessionmaker[Session]:
        """Sessions for reads."""
        return self.runtime.sessions

    @property
    def write_sessions(self) -> sessionmaker[Session]:
        """Sessions for writes (``BEGIN IMMEDIATE`` on SQLite)."""
        return self.runtime.write_sessions

    @property
    def ledger(self) -> Ledger:
        """The privacy-budget ledger."""
        return self.runtime.ledger

    @property
    def datasets(self) -> DatasetService:
        """Registered datasets and their loaded columns."""
        return self.runtime.datasets

    @property
    def executor(self) -> Executor:
        """Prices and runs operations."""
        return self.runtime.executor

    def close(self) -> None:
        """Stop the workers (running jobs finish), release connections and the liveness
        token."""
        self.jobs.shutdown()
        self.instance.close()
        self.runtime.close()


def _queue_for(runtime: WorkerRuntime, *, start_workers: bool) -> JobQueue:
    """The embedded process pool on SQLite (spawned at the first job); procrastinate on
    PostgreSQL, with ``job_workers`` local worker processes when ``start_workers``."""
    workers = runtime.settings.job_workers
    if is_sqlite(runtime.engine):
        return LocalPoolQueue(runtime, workers=max(workers, 1))
    return PostgresQueue(runtime, workers=workers if start_workers else 0)


def build_services(
    settings: Settings, *, migrate: bool = True, recover: bool = True, start_workers: bool = True
) -> Services:
    """Connect, migrate, bootstrap the first owner, recover from a crash, and set up the job
    queue (``start_workers=False`` for the administration commands: no local workers). A
    serving start with ``DPMINE_TIMING_CALIBRATION=auto`` first measures the time budgets if
    no process has yet (services/first_start.py)."""
    if start_workers:
        ensure_first_start_calibration(settings)
    runtime = build_runtime(settings)
    if migrate:
        upgrade_to_head(runtime.engine)
    instance = liveness_for(runtime.engine)
    runtime.ledger.set_instance(instance.instance_id)
    try:
        _check_secret_key(runtime)
        jobs = JobRunner(
            runtime=runtime,
            queue=_queue_for(runtime, start_workers=start_workers),
            instance_id=instance.instance_id,
            timing=TimingPolicy.from_settings(settings),
            wait_s=settings.job_wait_s,
            max_open_jobs=settings.max_open_jobs,
        )
    except BaseException:
        instance.close()
        runtime.close()
        raise
    services = Services(settings=settings, runtime=runtime, jobs=jobs, instance=instance)
    _bootstrap_owner(services)
    if start_workers:
        _warm(services)
    if recover:
        interrupted = runtime.ledger.interrupt_reserved(is_alive=instance.is_alive)
        failed_jobs = jobs.interrupt_unfinished(instance.is_alive)
        if interrupted or failed_jobs:
            with runtime.write_sessions() as session, session.begin():
                audit.record(
                    session,
                    action="recovery",
                    details={"interrupted_entries": interrupted, "failed_jobs": failed_jobs},
                )
    return services


def _warm(services: Services) -> None:
    """Before the first request (issue #20, item 6): the active datasets resident in this
    process (loads padded to their public budgets) and, with padding on, the embedded pool's
    processes started and warmed (:func:`~dpmine_server.services.warmup.warm_process`), so
    that no request or job pays a first load or a process start; with padding on, this
    process's compiled kernels are loaded too (inline operations run here). Without a padding budget
    (padding off, or test mode's zero budgets) the pool stays lazy: most test servers never
    run a job."""
    queue = services.jobs.queue
    policy = TimingPolicy.from_settings(services.settings)
    pads = policy.enabled and (policy.base > 0 or policy.scale > 0)
    if pads:
        warm_process(services.datasets)  # inline kernels run in this process
        # Full collections only when no request is in flight (services/collector.py).
        defer_full_collections()
        collector = IdleCollector(lambda: services.admission.in_flight)
        services.admission.on_leave = collector.request_left
        object.__setattr__(services, "collector", collector)
    else:
        services.datasets.preload()
    if pads and isinstance(queue, LocalPoolQueue):
        queue.start()


def _check_secret_key(runtime: WorkerRuntime) -> None:
    """Refuse to start with another DPMINE_SECRET_KEY than the database's (SecretKeyMismatch)."""
    for _attempt in range(2):
        try:
            with runtime.write_sessions() as session, session.begin():
                check_secret_key(session, secret=runtime.settings.secret_key)
            return
        except IntegrityError:
            continue  # another process stored the check value first: compare with it


def _bootstrap_owner(services: Services) -> None:
    key = services.settings.bootstrap_owner_key
    if key is None:
        return
    with services.write_sessions() as session, session.begin():
        has_owner = session.scalar(select(Principal.id).where(Principal.role == "owner").limit(1))
        if has_owner is None:
            create_principal(
                session,
                name="admin",
                role="owner",
                secret=services.settings.secret_key,
                api_key=key,
            )
            audit.record(session, action="bootstrap_owner", target="admin")
