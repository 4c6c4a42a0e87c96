"""The server's long-lived services, built once per app from the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from dpmine_server.db.base import make_engine, make_session_factory
from dpmine_server.db.migrate import upgrade_to_head
from dpmine_server.db.models import Principal
from dpmine_server.dp.rng import secure_generator, seeded_generator
from dpmine_server.services import audit
from dpmine_server.services.datasets import DatasetService
from dpmine_server.services.executor import Executor
from dpmine_server.services.instances import InstanceLock
from dpmine_server.services.jobs import JobRunner
from dpmine_server.services.ledger import Ledger
from dpmine_server.services.principals import check_secret_key, create_principal
from dpmine_server.services.timing import TimingPolicy
from dpmine_server.settings import Settings

__all__ = ["Services", "build_services"]


@dataclass(frozen=True, slots=True)
class Services:
    """Everything a request handler needs, injected through ``api.deps``."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    write_sessions: sessionmaker[Session]
    ledger: Ledger
    datasets: DatasetService
    executor: Executor
    jobs: JobRunner
    instance: InstanceLock

    def close(self) -> None:
        """Finish jobs, release connections and this process's liveness lock."""
        self.jobs.shutdown()
        self.engine.dispose()
        self.instance.close()


def _rng_factory(settings: Settings) -> Callable[[], np.random.Generator]:
    if settings.test_seed is None:
        return secure_generator
    # Test mode only (Settings refuses a seed elsewhere): reproducible but distinct per request.
    counter = iter(range(1 << 62))
    seed = settings.test_seed

    def next_generator() -> np.random.Generator:
        return seeded_generator(seed * 1_000_003 + next(counter))

    return next_generator


def build_services(settings: Settings, *, migrate: bool = True, recover: bool = True) -> Services:
    """Connect, migrate, bootstrap the first owner and recover from a crash."""
    engine = make_engine(settings.database_url)
    if migrate:
        upgrade_to_head(engine)
    sessions = make_session_factory(engine)
    write_sessions = make_session_factory(engine, immediate=True)
    instance = InstanceLock(settings.data_dir / "instances")
    ledger = Ledger(engine, sessions, instance_id=instance.instance_id)
    datasets = DatasetService(
        data_dir=settings.data_dir,
        sessions=sessions,
        allow_sql=settings.allow_sql_sources,
        max_cached=settings.max_cached_datasets,
    )
    executor = Executor(
        sessions=sessions,
        ledger=ledger,
        datasets=datasets,
        rng_factory=_rng_factory(settings),
    )
    jobs = JobRunner(
        sessions=write_sessions,
        executor=executor,
        workers=settings.job_workers,
        instance_id=instance.instance_id,
        timing=TimingPolicy.from_settings(settings),
    )
    services = Services(
        settings=settings,
        engine=engine,
        sessions=sessions,
        write_sessions=write_sessions,
        ledger=ledger,
        datasets=datasets,
        executor=executor,
        jobs=jobs,
        instance=instance,
    )
    try:
        _check_secret_key(services)
    except BaseException:
        services.close()
        raise
    _bootstrap_owner(services)
    if recover:
        interrupted = ledger.interrupt_reserved(is_alive=instance.is_alive)
        failed_jobs = jobs.interrupt_unfinished(instance.is_alive)
        if interrupted or failed_jobs:
            with write_sessions() as session, session.begin():
                audit.record(
                    session,
                    action="recovery",
                    details={"interrupted_entries": interrupted, "failed_jobs": failed_jobs},
                )
    return services


def _check_secret_key(services: Services) -> None:
    """Refuse to start with another DPMINE_SECRET_KEY than the database's (SecretKeyMismatch)."""
    for _attempt in range(2):
        try:
            with services.write_sessions() as session, session.begin():
                check_secret_key(session, secret=services.settings.secret_key)
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
