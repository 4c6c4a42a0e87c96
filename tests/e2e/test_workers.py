"""Jobs run in worker processes, never on the API process (issue #8; services/queues.py).

* PostgreSQL: two stateless API processes (``DPMINE_JOB_WORKERS=0``) and two ``dpmine-server
  worker`` processes share one database. Analysts submit concurrent ``test.spin`` jobs through
  both API processes; one worker is SIGKILLed while it certainly holds a running job. Its job
  must end ``interrupted`` with its charge kept and nothing released (reaped by the surviving
  worker once the heartbeat is stale), every other job must be released exactly once, and the
  ledger must stay consistent.
* SQLite (embedded pool): a GIL-holding ``test.spin`` job burns its CPU in a pool process, not
  in the API process, which answers quality calls while the job runs (the latency ratio is
  measured by bench/bench_foundation.py, not asserted here).

Noisy counts are checked against the exact table size with a band of 40 at epsilon 0.5
(Laplace scale 2: P(|noise| >= 40) = e^-20).
"""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

import dpmine
from dpmine.wire import (
    CategoricalAttribute,
    CreateDatasetRequest,
    CsvSource,
    DatasetInfo,
    DatasetMetadata,
    JobInfo,
    NoisyCountResponse,
)
from dpmine_server.operations.testing import SpinCountRequest
from support.datasets import TABLE_ROWS, register_table, unique_id
from support.servers import LiveServer, PostgresDatabases, add_analyst, wait_for

EPSILON = 0.5
HEARTBEAT_S = 0.5
STALLED_AFTER_S = 3.0
#: Public length of each job's busy loop: long enough to catch a job mid-run, short enough that
#: the surviving worker gets through the queue quickly.
SPIN_SECONDS = 2.0
ANALYSTS = 3
JOBS_PER_ANALYST = 2  # one through each API process
WAIT_SECONDS = 90.0
_STARTED = re.compile(r"Starting job dpmine\.run_job\[\d+\]\(job_id='([0-9a-f-]+)'\)")


# -- PostgreSQL: two API processes, two workers -------------------------------------------------


@dataclass
class Worker:
    """A ``dpmine-server worker`` process and its procrastinate worker id."""

    process: subprocess.Popen[bytes]
    log_path: Path
    worker_id: int

    def log_text(self) -> str:
        """What the worker wrote so far."""
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown code runs, the heartbeat stops)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


@dataclass
class Deployment:
    """Two API processes and two workers on one PostgreSQL database."""

    database_url: str
    engine: Engine
    apis: tuple[LiveServer, LiveServer]
    workers: list[Worker]


def _registered_workers(engine: Engine) -> set[int]:
    with engine.connect() as db:
        return set(db.scalars(text("SELECT id FROM procrastinate_workers")))


def start_worker(environment: dict[str, str], log_path: Path, engine: Engine) -> Worker:
    """Start a worker and wait for its registration (the one new procrastinate worker row:
    workers are started one at a time, so the row is this process's)."""
    known = _registered_workers(engine)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "dpmine_server", "worker"],
            env=environment,
            cwd=log_path.parent,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    new: set[int] = set()

    def registered() -> bool:
        assert process.poll() is None, f"worker exited:\n{log_path.read_text(errors='replace')}"
        new.update(_registered_workers(engine) - known)
        return bool(new)

    try:
        wait_for(f"worker {log_path.name} to register", registered, timeout=90.0)
    except BaseException:
        process.kill()
        process.wait()
        raise
    (worker_id,) = new
    return Worker(process=process, log_path=log_path, worker_id=worker_id)


@pytest.fixture
def deployment(postgres: PostgresDatabases, tmp_path: Path) -> Iterator[Deployment]:
    """A fresh database, two API processes without local workers, two worker processes."""
    database_url = postgres.create_database()
    engine = create_engine(database_url, poolclass=NullPool)
    settings = {
        "DPMINE_JOB_WORKERS": "0",
        "DPMINE_WORKER_HEARTBEAT_S": str(HEARTBEAT_S),
        "DPMINE_WORKER_STALLED_AFTER_S": str(STALLED_AFTER_S),
    }
    first = LiveServer(
        database_url=database_url, workdir=tmp_path, name="api-a", extra_env=settings
    )
    second = LiveServer(
        database_url=database_url,
        workdir=tmp_path,
        name="api-b",
        owner_key=first.owner_key,
        secret_key=first.secret_key,
        data_dir=first.data_dir,
        extra_env=settings,
    )
    workers: list[Worker] = []
    try:
        first.start()  # migrates the database; the second one starts on the migrated schema
        second.start()
        for index in range(2):
            workers.append(
                start_worker(first.environment(), tmp_path / f"worker-{index}.log", engine)
            )
        yield Deployment(database_url, engine, (first, second), workers)
    finally:
        for worker in workers:
            worker.kill()
        first.stop()
        second.stop()
        engine.dispose()
        postgres.drop_database(database_url)


def _running_job(engine: Engine, dataset_id: str) -> tuple[str, int] | None:
    """A job of the dataset that a worker claimed and is computing, early in its loop (progress
    below one half: at least a second of work left), and the procrastinate worker holding it."""
    with engine.connect() as db:
        row = db.execute(
            text(
                "SELECT j.id, q.worker_id FROM jobs j "
                "JOIN procrastinate_jobs q ON q.id = j.queue_job_id "
                "WHERE j.dataset_id = :dataset AND j.status = 'running' AND j.progress < 0.5 "
                "AND q.status = 'doing' AND q.worker_id IS NOT NULL "
                "ORDER BY j.created_at LIMIT 1"
            ),
            {"dataset": dataset_id},
        ).one_or_none()
    return None if row is None else (str(row[0]), int(row[1]))


def _job_status(engine: Engine, job_id: str) -> str:
    with engine.connect() as db:
        status: str = db.execute(
            text("SELECT status FROM jobs WHERE id = :id"), {"id": job_id}
        ).scalar_one()
    return status


def _spin(seconds: float = SPIN_SECONDS) -> SpinCountRequest:
    return SpinCountRequest(epsilon=EPSILON, seconds=seconds)


@pytest.mark.postgres
def test_two_api_processes_two_workers_and_a_worker_killed_mid_job(
    deployment: Deployment, tmp_path: Path
) -> None:
    api_a, api_b = deployment.apis
    engine = deployment.engine
    with dpmine.connect(api_a.url, api_a.owner_key, retries=0) as owner:
        dataset = register_table(owner, tmp_path, epsilon_cap=20.0)
        accounts = [add_analyst(api_a, owner) for _ in range(ANALYSTS)]
        for account in accounts:
            owner.admin.grant(dataset.id, account.name, 5.0)
        # Each analyst talks to both API processes.
        connections = [
            dpmine.connect(api.url, account.api_key, retries=0)
            for account in accounts
            for api in (api_a, api_b)
        ]
        try:
            with ThreadPoolExecutor(max_workers=len(connections)) as pool:
                submitted = list(
                    pool.map(
                        lambda connection: connection.dataset(dataset.id).submit(
                            "test.spin", _spin()
                        ),
                        connections,
                    )
                )
            by_job = {
                info.id: connection for info, connection in zip(submitted, connections, strict=True)
            }
            assert len(by_job) == ANALYSTS * JOBS_PER_ANALYST

            # Kill the worker that holds a running job, early in that job's loop.
            found: list[tuple[str, int]] = []

            def a_job_runs() -> bool:
                running = _running_job(engine, dataset.id)
                if running is not None:
                    found.append(running)
                return running is not None

            wait_for("a worker to be computing a job", a_job_runs, timeout=WAIT_SECONDS)
            victim_job, victim_worker_id = found[-1]
            (victim,) = [w for w in deployment.workers if w.worker_id == victim_worker_id]
            (survivor,) = [w for w in deployment.workers if w is not victim]
            victim.kill()
            assert _job_status(engine, victim_job) == "running", (
                "the job finished before its worker was killed: the test proves nothing"
            )

            # The survivor reaps it once the victim's heartbeat is stale (STALLED_AFTER_S).
            interrupted = by_job[victim_job].wait_for_job(
                victim_job, timeout=STALLED_AFTER_S + 30.0
            )
            assert interrupted.status == "interrupted", interrupted
            assert interrupted.result is None
            assert "the charge stands" in interrupted.message
            wait_for(
                "the survivor to log the reaping",
                lambda: f"job {victim_job} interrupted: its worker stopped" in survivor.log_text(),
                timeout=10.0,
            )

            finals: dict[str, JobInfo] = {victim_job: interrupted}
            for job_id, connection in by_job.items():
                if job_id != victim_job:
                    finals[job_id] = connection.wait_for_job(job_id, timeout=WAIT_SECONDS)
            assert {job_id: info.status for job_id, info in finals.items()} == {
                job_id: "interrupted" if job_id == victim_job else "done" for job_id in by_job
            }

            # A new job after the kill runs on the surviving worker.
            late_connection = connections[1]  # the first analyst, through api_b
            late = late_connection.dataset(dataset.id).submit("test.spin", _spin())
            holders: set[int] = set()

            def late_job_settled() -> bool:
                with engine.connect() as db:
                    row = db.execute(
                        text(
                            "SELECT j.status, q.status, q.worker_id FROM jobs j "
                            "LEFT JOIN procrastinate_jobs q ON q.id = j.queue_job_id "
                            "WHERE j.id = :id"
                        ),
                        {"id": late.id},
                    ).one()
                if row[1] == "doing" and row[2] is not None:
                    holders.add(int(row[2]))
                return row[0] in {"done", "failed", "cancelled", "interrupted"}

            wait_for("the job submitted after the kill", late_job_settled, timeout=WAIT_SECONDS)
            assert holders == {survivor.worker_id}
            finals[late.id] = late_connection.wait_for_job(late.id, timeout=WAIT_SECONDS)
            assert finals[late.id].status == "done", finals[late.id]

            # -- the ledger ----------------------------------------------------------------------
            entries = {entry.id: entry for entry in owner.admin.ledger(dataset.id)}
            with engine.connect() as db:
                job_entries: dict[str, int] = dict(
                    db.execute(
                        text("SELECT id, ledger_entry_id FROM jobs WHERE dataset_id = :d"),
                        {"d": dataset.id},
                    ).all()
                )
                victim_queue_status = db.execute(
                    text(
                        "SELECT q.status FROM jobs j JOIN procrastinate_jobs q "
                        "ON q.id = j.queue_job_id WHERE j.id = :id"
                    ),
                    {"id": victim_job},
                ).scalar_one()
            assert victim_queue_status == "failed", "the queue must never hand it out again"
            # One charge per job, one job per charge.
            assert set(job_entries) == set(finals)
            assert sorted(job_entries.values()) == sorted(entries)

            victim_entry = entries[job_entries[victim_job]]
            assert victim_entry.status == "interrupted"
            assert victim_entry.release is None
            assert Decimal(victim_entry.epsilon_exact) == Decimal(str(EPSILON))

            receipts: list[int] = []
            for job_id, info in finals.items():
                if job_id == victim_job:
                    continue
                assert info.result is not None
                response = NoisyCountResponse.model_validate(info.result)
                receipts.append(response.receipt.ledger_entry_id)
                entry = entries[job_entries[job_id]]
                assert response.receipt.ledger_entry_id == entry.id
                assert entry.status == "released"
                assert entry.release == info.result
                assert abs(response.count - TABLE_ROWS) <= 40
            assert len(receipts) == len(set(receipts)) == len(finals) - 1
            for entry in entries.values():
                if entry.release is not None:
                    assert entry.status == "released", entry
                    assert Decimal(entry.epsilon_exact) > 0, entry

            spent: dict[str, Decimal] = {}
            for entry in entries.values():
                spent[entry.principal] = spent.get(entry.principal, Decimal(0)) + Decimal(
                    entry.epsilon_exact
                )
            grants = {grant.analyst: grant.spent for grant in owner.admin.grants(dataset.id)}
            assert grants == {name: float(total) for name, total in spent.items()}
            assert spent[accounts[0].name] == Decimal(str(EPSILON)) * (JOBS_PER_ANALYST + 1)
            assert owner.admin.verify_ledger() == {"consistent": True, "problems": []}

            # No job ran twice: each was started once by the queue, on one worker, and the
            # victim's job by the victim.
            started = Counter(
                _STARTED.findall(victim.log_text()) + _STARTED.findall(survivor.log_text())
            )
            assert started == Counter(set(finals)), started
            assert victim_job in _STARTED.findall(victim.log_text())
        finally:
            for connection in connections:
                connection.close()
            for account in accounts:
                account.connection.close()


# -- SQLite: a long job runs outside the API process --------------------------------------------

QUALITY_CALLS = 10
QUALITY_EPSILON = 0.01
LONG_SPIN_SECONDS = 3.0
VIEW_ROWS = 300
#: Clock ticks per second of /proc/<pid>/stat's CPU fields.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def register_two_views(owner: dpmine.Connection, folder: Path) -> DatasetInfo:
    """A small generated two-view dataset (shape, colour | kind, size)."""
    path = folder / "two-views.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["shape", "colour", "kind", "size"])
        for row in range(VIEW_ROWS):
            writer.writerow(
                ["abc"[row % 3], "rgb"[(row * 7) % 3], "xy"[(row // 3) % 2], "sml"[(row * 5) % 3]]
            )
    attributes = [
        CategoricalAttribute(name="shape", view="left", categories=["a", "b", "c"]),
        CategoricalAttribute(name="colour", view="left", categories=["r", "g", "b"]),
        CategoricalAttribute(name="kind", view="right", categories=["x", "y"]),
        CategoricalAttribute(name="size", view="right", categories=["s", "m", "l"]),
    ]
    request = CreateDatasetRequest(
        id=unique_id("views"),
        name="generated two views",
        epsilon_cap=10.0,
        metadata=DatasetMetadata(kind="views", n_max=1_000, attributes=list(attributes)),
        source=CsvSource(path=path.name),
    )
    registered = owner.admin.upload_dataset(request, {"path": path})
    return DatasetInfo.model_validate(registered["dataset"])


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far (its own threads only, not its
    children's), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def test_a_long_job_spins_outside_the_api_process_which_keeps_answering(
    sqlite_server: LiveServer, tmp_path: Path
) -> None:
    """A GIL-holding ``test.spin`` job burns its CPU in a pool process: the API process's own
    CPU time grows by far less than the spin, and it answers quality calls while the job is
    still running (how fast it answers is measured in bench/bench_foundation.py)."""
    engine = create_engine(sqlite_server.database_url, poolclass=NullPool)
    api_pid = sqlite_server.pid
    assert api_pid is not None
    try:
        with dpmine.connect(sqlite_server.url, sqlite_server.owner_key, retries=0) as owner:
            dataset = register_two_views(owner, tmp_path)
            analyst = add_analyst(sqlite_server, owner)
            owner.admin.grant(dataset.id, analyst.name, 5.0)
        with analyst.connection as connection:
            handle = connection.dataset(dataset.id)
            handle.quality("[shape = a]", "[kind = x]", epsilon=QUALITY_EPSILON)  # first load
            api_cpu_before = _cpu_seconds(api_pid)
            job = handle.submit("test.spin", _spin(LONG_SPIN_SECONDS))
            wait_for(
                "the long job to be claimed by a worker",
                lambda: _job_status(engine, job.id) == "running",
                timeout=WAIT_SECONDS,
            )
            answers = [
                handle.quality("[shape = a]", "[kind = x]", epsilon=QUALITY_EPSILON)
                for _ in range(QUALITY_CALLS)
            ]
            assert _job_status(engine, job.id) == "running", (
                "the job ended before the quality calls were answered: they tested nothing"
            )
            assert len(answers) == QUALITY_CALLS
            done = connection.wait_for_job(job.id, timeout=WAIT_SECONDS)
            api_cpu = _cpu_seconds(api_pid) - api_cpu_before
            assert done.status == "done", done.message
            assert done.result is not None
            assert api_cpu < LONG_SPIN_SECONDS / 2, (
                f"the API process spent {api_cpu:.2f} CPU s during a {LONG_SPIN_SECONDS} s spin: "
                "the job ran on it"
            )
    finally:
        engine.dispose()
