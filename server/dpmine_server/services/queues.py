"""How a submitted job reaches a worker process: two queue engines behind one interface.

Jobs never run on threads of an API process (a Python MCMC loop holds the GIL for seconds and
would stall every request of that process). The job itself (claim exactly once, compute, store
the release, settle) is :func:`dpmine_server.services.workers.run_job`; the queue only carries
job ids and tells waiting requests when a job is settled.

* :class:`LocalPoolQueue`, the embedded default (SQLite): a
  :class:`concurrent.futures.ProcessPoolExecutor` of ``DPMINE_JOB_WORKERS`` spawned processes
  that the server owns; no extra service. SQLite confines a deployment to one host and one
  server, so the pool dies with its server and the start-up recovery interrupts what it left.
  A worker killed mid-job breaks the pool: every job it held is marked ``interrupted`` (charge
  kept) and a fresh pool takes the next jobs.
* :class:`PostgresQueue` (PostgreSQL): `procrastinate <https://procrastinate.readthedocs.io>`_,
  a PostgreSQL task queue (``LISTEN/NOTIFY`` to wake workers, ``SELECT ... FOR UPDATE SKIP
  LOCKED`` to hand each job to one worker, worker heartbeats). ``dpmine-server worker``
  processes on any number of hosts take jobs from the shared database (:func:`run_worker`);
  API processes are stateless. Each worker also reaps the jobs of workers whose heartbeat
  stopped: they are marked ``interrupted`` (charge kept) and never run again. A waiting API
  process is woken by ``NOTIFY dpmine_job_done``.

Imports. procrastinate and psycopg (0.25 s together) are imported by the PostgreSQL queue's
functions, not with this module: a SQLite server, a test server and the owner's administration
commands never load them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_futures
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Protocol

from sqlalchemy import make_url

from dpmine_server.services.first_start import ensure_first_start_calibration
from dpmine_server.services.warmup import warm_process
from dpmine_server.services.workers import (
    JOB_DONE_CHANNEL,
    SCHEDULE,
    WORKER_DIED,
    WorkerRuntime,
    build_runtime,
    interrupt_jobs,
    run_job,
)
from dpmine_server.settings import Settings

if TYPE_CHECKING:
    import procrastinate

__all__ = [
    "JOB_TASK",
    "JobQueue",
    "LocalPoolQueue",
    "PostgresQueue",
    "psycopg_conninfo",
    "run_worker",
    "settings_environment",
]

logger = logging.getLogger(__name__)

#: Notifications kept for waiters that register late.
_EARLY_KEPT = 4096
#: Worker processes run at a lower CPU priority than the API (``nice``): a job is batch work,
#: and on a host shared with API processes the interactive requests keep their latency.
WORKER_NICENESS = 10

#: The GIL switch interval of worker processes (Python's default is 5 ms). A kernel abandoned
#: by an overrun runs on in its thread until the overrun failure raised there is delivered (or,
#: inside a compiled call, until it returns: services/release_guard.py), holding the GIL for
#: whole intervals while the worker settles the job and takes the next one; each blocking call
#: of that bookkeeping (a database write) waits up to one interval for the GIL again, so the
#: handover would stretch by tens of milliseconds on the data that overran
#: (services/workers.py, ``PublicSchedule``). A short interval keeps it within the public
#: allowance.
WORKER_SWITCH_INTERVAL_S = 0.0005

#: The procrastinate queue and task that carry dpmine jobs.
JOB_QUEUE = "dpmine"
JOB_TASK = "dpmine.run_job"


class JobQueue(Protocol):
    """Carries job ids to worker processes."""

    def enqueue(self, job_id: str) -> int | None:
        """Hand the (committed, queued) job to a worker; the queue engine's id, if any."""
        ...

    def wait(self, job_id: str, timeout: float) -> None:
        """Return when the job may have reached a final state, or after ``timeout`` seconds
        (the caller reads the job's state)."""
        ...

    def close(self) -> None:
        """Stop handing out jobs and release the workers this process started."""
        ...


# -- the embedded pool (SQLite) ----------------------------------------------------------------

_POOL_RUNTIME: WorkerRuntime | None = None


def _tune_worker_process() -> None:
    """A worker process's scheduling: a lower CPU priority than the API
    (:data:`WORKER_NICENESS`) and a short GIL switch interval
    (:data:`WORKER_SWITCH_INTERVAL_S`)."""
    os.nice(WORKER_NICENESS)
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL_S)


def _exit_when_orphaned(server_pid: int) -> None:
    """A pool process whose server died (even by SIGKILL) exits: it checks once a second
    whether it was re-parented. (The job it held is interrupted by the next start.)"""
    while os.getppid() == server_pid:
        time.sleep(1.0)
    os._exit(1)


def _init_pool_process(settings: Settings, server_pid: int) -> None:
    """Initializer of a pool process: its own runtime; Ctrl-C is the server's to handle."""
    global _POOL_RUNTIME  # noqa: PLW0603  (one runtime per worker process, built once)
    if os.getppid() != server_pid:  # the server died while this process was starting
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _tune_worker_process()
    threading.Thread(
        target=_exit_when_orphaned, args=(server_pid,), name="dpmine-orphan", daemon=True
    ).start()
    _POOL_RUNTIME = build_runtime(settings)
    warm_process(_POOL_RUNTIME.datasets)


def _pool_ready(barrier: threading.Barrier, timeout: float) -> int:
    """A start-up task: returns once every pool process has started (and so has finished its
    initializer), so that the server's first job never waits for a process to start."""
    barrier.wait(timeout)
    return os.getpid()


def _run_in_pool(job_id: str) -> str:
    """A pool process runs one job."""
    if _POOL_RUNTIME is None:
        raise RuntimeError("the worker process was not initialised")
    return run_job(_POOL_RUNTIME, job_id)


class LocalPoolQueue:
    """A process pool owned by the server (the embedded SQLite deployment)."""

    def __init__(self, runtime: WorkerRuntime, *, workers: int) -> None:
        self._runtime = runtime
        self._workers = workers
        self._pool: ProcessPoolExecutor | None = None
        self._futures: dict[str, Future[str]] = {}
        self._lock = threading.Lock()

    def _ensure_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self._workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_pool_process,
                initargs=(self._runtime.settings, os.getpid()),
            )
        return self._pool

    def start(self, timeout: float = 300.0) -> None:
        """Start every pool process now and wait until each is warm (datasets resident,
        compiled kernels loaded: :func:`warm_process`). One task per process waits on a
        barrier, so the pool must start them all; a process that does not come up in time is
        logged and left to start with the first job."""
        with self._lock:
            pool = self._ensure_pool()
        with multiprocessing.get_context("spawn").Manager() as manager:
            barrier = manager.Barrier(self._workers)
            futures = [
                pool.submit(_pool_ready, barrier, timeout) for _worker in range(self._workers)
            ]
            done, pending = wait_futures(futures, timeout=timeout)
            if pending or any(future.exception() is not None for future in done):
                logger.warning("not every job worker was ready within %.0f s", timeout)

    def enqueue(self, job_id: str) -> int | None:
        """Submit the job to the pool (spawned on first use, or by :meth:`start`)."""
        with self._lock:
            pool = self._ensure_pool()
            try:
                future = pool.submit(_run_in_pool, job_id)
            except BrokenProcessPool:
                self._pool = None
                pool = self._ensure_pool()
                future = pool.submit(_run_in_pool, job_id)
            self._futures[job_id] = future
        future.add_done_callback(lambda done: self._settle(job_id, done))
        return None

    def _settle(self, job_id: str, future: Future[str]) -> None:
        """After the pool gave the job back: a job lost with its process is interrupted."""
        if future.cancelled():
            error: BaseException | None = None  # never started: left queued for the recovery
        else:
            error = future.exception()
        if isinstance(error, BrokenProcessPool):
            with self._lock:
                if self._pool is not None and self._pool._broken:
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None
            interrupt_jobs(self._runtime, [job_id], reason=WORKER_DIED)
        elif error is not None:
            logger.error("job %s escaped its worker", job_id, exc_info=error)
            interrupt_jobs(self._runtime, [job_id], reason=WORKER_DIED)
        with self._lock:
            self._futures.pop(job_id, None)

    def wait(self, job_id: str, timeout: float) -> None:
        """Wait for the job's future (settled before returning)."""
        with self._lock:
            future = self._futures.get(job_id)
        if future is None:
            return
        done, _ = wait_futures([future], timeout=timeout)
        if done:
            self._settle(job_id, future)

    def close(self) -> None:
        """Let running jobs finish; jobs not started stay queued (interrupted at next start)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


# -- procrastinate (PostgreSQL) ----------------------------------------------------------------


def psycopg_conninfo(database_url: str) -> str:
    """The libpq connection string of a SQLAlchemy PostgreSQL URL."""
    url = make_url(database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def settings_environment(settings: Settings) -> dict[str, str]:
    """``DPMINE_*`` variables that reproduce ``settings`` in a child process."""
    environment: dict[str, str] = {}
    for name in type(settings).model_fields:
        value = getattr(settings, name)
        if value is None:
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        environment[f"DPMINE_{name.upper()}"] = text
    return environment


def _die_with_parent() -> None:
    """In a worker started by a server: killed when the server dies, even by SIGKILL, like
    the embedded pool (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere the worker outlives a
    killed server). Its running job is then reaped through the heartbeats: ``interrupted``.
    The server starts its workers from its main thread, which lives as long as the server
    (the signal follows the thread that started the child)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _DoneListener:
    """``LISTEN dpmine_job_done`` on one connection; wakes the requests waiting for a job."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._events: dict[str, threading.Event] = {}
        # Notifications that arrived before their waiter registered (it read the job's state
        # just before the job settled): kept for the waiter, oldest dropped first.
        self._early: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dpmine-listen", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=10.0)

    def _loop(self) -> None:
        import psycopg  # noqa: PLC0415 (module docstring, "Imports")

        while not self._stop.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as connection:
                    connection.execute(f"LISTEN {JOB_DONE_CHANNEL}")
                    self._ready.set()
                    while not self._stop.is_set():
                        for note in connection.notifies(timeout=1.0):
                            self._wake(note.payload)
            except psycopg.Error:
                logger.warning("job notifications lost; reconnecting", exc_info=True)
                self._wake_all()  # waiters re-read their job's state
                self._stop.wait(1.0)

    def _wake(self, job_id: str) -> None:
        with self._lock:
            event = self._events.get(job_id)
            if event is None:
                self._early[job_id] = None
                while len(self._early) > _EARLY_KEPT:
                    self._early.popitem(last=False)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()

    def wait(self, job_id: str, timeout: float) -> None:
        """Wait for the job's notification (the caller re-reads the state either way)."""
        with self._lock:
            if self._early.pop(job_id, "absent") is None:
                return
            event = self._events.setdefault(job_id, threading.Event())
        try:
            event.wait(timeout)
        finally:
            with self._lock:
                self._events.pop(job_id, None)

    def close(self) -> None:
        """Stop listening."""
        self._stop.set()
        self._thread.join(timeout=5.0)


class PostgresQueue:
    """Jobs deferred to procrastinate; ``job_workers`` local ``dpmine-server worker``
    processes started with the server (0: the workers run elsewhere)."""

    def __init__(self, runtime: WorkerRuntime, *, workers: int) -> None:
        import procrastinate  # noqa: PLC0415 (module docstring, "Imports")

        self._settings = runtime.settings
        conninfo = psycopg_conninfo(runtime.settings.database_url)
        self._app = procrastinate.App(
            connector=procrastinate.SyncPsycopgConnector(conninfo=conninfo, min_size=1, max_size=4)
        )
        self._app.open()
        self._task = self._app.configure_task(JOB_TASK, queue=JOB_QUEUE, allow_unknown=True)
        self._listener = _DoneListener(conninfo)
        self._processes = [self._start_worker() for _ in range(workers)]

    def _start_worker(self) -> subprocess.Popen[bytes]:
        environment = {
            key: value for key, value in os.environ.items() if not key.startswith("DPMINE_")
        }
        environment.update(settings_environment(self._settings))
        return subprocess.Popen(
            [sys.executable, "-m", "dpmine_server", "worker"],
            env=environment,
            preexec_fn=_die_with_parent,  # noqa: PLW1509  (prctl only; no locks taken)
        )

    def enqueue(self, job_id: str) -> int | None:
        """Defer the job to procrastinate (committed at once)."""
        return self._task.defer(job_id=job_id)

    def wait(self, job_id: str, timeout: float) -> None:
        """Wait for the job's notification."""
        self._listener.wait(job_id, timeout)

    def close(self) -> None:
        """Stop the local workers (each finishes its current job) and the listener."""
        for process in self._processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self._processes:
            try:
                process.wait(timeout=60.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._listener.close()
        self._app.close()


# -- the worker process (PostgreSQL) -----------------------------------------------------------


async def _reap_stalled(app: procrastinate.App, runtime: WorkerRuntime) -> None:
    """Every heartbeat interval: the jobs of workers whose heartbeat stopped are marked
    ``interrupted`` here (charge kept, never run again), then failed in the queue. Each job on
    its own, interrupted first: both steps are idempotent, so workers sweeping at the same time
    or a sweep cut short leave nothing half done."""
    import procrastinate  # noqa: PLC0415 (module docstring, "Imports")

    settings = runtime.settings
    while True:
        await asyncio.sleep(settings.worker_heartbeat_s)
        try:
            stalled = list(
                await app.job_manager.get_stalled_jobs(
                    queue=JOB_QUEUE, seconds_since_heartbeat=settings.worker_stalled_after_s
                )
            )
        except Exception:  # a failed sweep is retried at the next interval
            logger.exception("listing stalled jobs failed")
            continue
        for job in stalled:
            job_id = str(job.task_kwargs.get("job_id", ""))
            try:
                count = await asyncio.to_thread(
                    interrupt_jobs, runtime, [job_id], reason=WORKER_DIED
                )
                if count:
                    logger.warning("job %s interrupted: its worker stopped", job_id)
                if job.id is not None:
                    await app.job_manager.finish_job_by_id_async(
                        job.id, status=procrastinate.jobs.Status.FAILED, delete_job=False
                    )
            except Exception:  # another worker settled it first, or the database is away
                logger.info("stalled job %s left to the next sweep", job_id, exc_info=True)


def run_worker(settings: Settings, *, concurrency: int = 1) -> None:
    """``dpmine-server worker``: run jobs from the shared PostgreSQL database until SIGTERM or
    SIGINT (the current job finishes first)."""
    import procrastinate  # noqa: PLC0415 (module docstring, "Imports")

    _tune_worker_process()
    SCHEDULE.configure(concurrency)
    ensure_first_start_calibration(settings)  # the API's file, or measured here first
    runtime = build_runtime(settings)
    warm_process(runtime.datasets)
    conninfo = psycopg_conninfo(settings.database_url)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))

    @app.task(name=JOB_TASK, queue=JOB_QUEUE)
    def _run_job(job_id: str) -> str:
        return run_job(runtime, job_id)

    async def main() -> None:
        async with app.open_async():
            reaper = asyncio.create_task(_reap_stalled(app, runtime))
            try:
                await app.run_worker_async(
                    queues=[JOB_QUEUE],
                    concurrency=concurrency,
                    update_heartbeat_interval=settings.worker_heartbeat_s,
                    stalled_worker_timeout=settings.worker_stalled_after_s,
                    delete_jobs="successful",
                )
            finally:
                reaper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reaper

    try:
        asyncio.run(main())
    finally:
        runtime.close()
