"""Shared helpers of the dpmine benchmarks: real servers, throwaway PostgreSQL, registration.

Everything here drives the real components: a uvicorn subprocess running
``dpmine_server.app:create_app`` on a free localhost port, a PostgreSQL 15 cluster in a temporary
directory (run as a non-root OS user when we are root; unix socket only), and dataset
registration through the analyst/owner client ``dpmine`` (multipart upload). Every context
manager stops what it started in a ``finally`` block, by process id.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gzip
import importlib
import importlib.metadata
import os
import platform
import pwd
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Generic, Literal, Protocol, TypeVar

import httpx
import numpy as np
import psycopg

import dpmine
from dpmine.miners import RunStopped, RunStoppedWarning
from dpmine.wire import (
    CreateDatasetRequest,
    CsvPairSource,
    CsvSource,
    DatasetMetadata,
    DatasetSource,
    FimiSource,
)

__all__ = [
    "OWNER_KEY",
    "PG_BIN_DIR",
    "REPO_ROOT",
    "Backend",
    "PostgresCluster",
    "ServerHandle",
    "WorkerHandle",
    "add_analysts",
    "add_server_timing_arguments",
    "comma_names",
    "free_port",
    "import_pyfim",
    "load_average",
    "machine_info",
    "median",
    "owner_confirmed",
    "percentile",
    "postgres_cluster",
    "register_files",
    "running_server",
    "running_worker",
    "server_for_backend",
    "server_timing_settings",
    "time_calls",
    "unwind_on_sigterm",
    "wait_if_asked",
    "wait_until_quiet",
    "write_bundled_fimi",
    "write_bundled_pair",
]

Backend = Literal["sqlite", "postgres"]

REPO_ROOT = Path(__file__).resolve().parent.parent
PG_BIN_DIR = Path("/usr/lib/postgresql/15/bin")
#: The UCI Mushroom table bundled with the repository (8,124 rows, 23 categorical columns with
#: ``?`` missing): the data of every benchmark's ``--smoke`` mode, which must run without the
#: shared data folder.
BUNDLED_MUSHROOM = REPO_ROOT / "data" / "uci_mushroom" / "agaricus-lepiota.csv.gz"
#: Smoke-mode views of the bundled table: what a mushroom looks like from above (cap, smell,
#: gills) against the rest (stalk, veil, ring, spores, where it grows, edibility).
BUNDLED_LEFT = (
    "cap-shape",
    "cap-surface",
    "cap-color",
    "bruises",
    "odor",
    "gill-attachment",
    "gill-spacing",
    "gill-size",
    "gill-color",
)
#: Owner key the benchmark servers bootstrap with (a throwaway server; >= 24 characters).
OWNER_KEY = "bench-owner-key-" + "0123456789abcdef"
_STARTUP_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 20.0
_LOG_TAIL_CHARS = 4000
KeyT = TypeVar("KeyT")
ValueT = TypeVar("ValueT")


# -- processes -----------------------------------------------------------------------------------


class KeptOpen(Generic[KeyT, ValueT]):
    """Context managers (servers) opened fresh for every use, or, with ``keep`` (``--smoke``:
    fewer server starts), each left open in ``keep`` after its first use and reused by every
    later use with the same key."""

    def __init__(self, keep: contextlib.ExitStack | None = None) -> None:
        self._keep = keep
        self._kept: dict[KeyT, ValueT] = {}

    @contextlib.contextmanager
    def open(
        self, key: KeyT, start: Callable[[], contextlib.AbstractContextManager[ValueT]]
    ) -> Iterator[ValueT]:
        """What ``start()`` yields: fresh, or the one kept under ``key``."""
        if self._keep is None:
            with start() as fresh:
                yield fresh
            return
        if key not in self._kept:
            self._kept[key] = self._keep.enter_context(start())
        yield self._kept[key]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _log_tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return text[-_LOG_TAIL_CHARS:]


def _stop_process(process: subprocess.Popen[bytes], stop_signal: int = signal.SIGTERM) -> None:
    """Signal one process we started, wait, and kill it if it does not exit in time."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(stop_signal)
    try:
        process.wait(timeout=_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=_STOP_TIMEOUT_S)


def _clean_environment() -> dict[str, str]:
    """Our environment without any ``DPMINE_*`` setting (a stray config must not leak in)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("DPMINE_")}


# -- PostgreSQL ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PostgresCluster:
    """A running throwaway cluster: unix socket in ``socket_dir``, superuser ``user``."""

    socket_dir: Path
    port: int
    user: str
    version: str

    def create_database(self, name: str) -> str:
        """Create database ``name``; returns its SQLAlchemy URL (psycopg 3, unix socket)."""
        with psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user=self.user,
            dbname="postgres",
            autocommit=True,
        ) as connection:
            connection.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    def url(self, database: str) -> str:
        """SQLAlchemy URL of ``database`` on this cluster."""
        return (
            f"postgresql+psycopg://{self.user}@/{database}?host={self.socket_dir}&port={self.port}"
        )


def _as_os_user(os_user: str | None) -> dict[str, Any]:
    """``subprocess`` keywords that run a child as ``os_user`` (only meaningful as root)."""
    if os_user is None:
        return {}
    entry = pwd.getpwnam(os_user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _wait_for_postgres(
    process: subprocess.Popen[bytes], cluster: PostgresCluster, log: Path
) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"PostgreSQL exited at start-up:\n{_log_tail(log)}")
        try:
            with psycopg.connect(
                host=str(cluster.socket_dir),
                port=cluster.port,
                user=cluster.user,
                dbname="postgres",
                connect_timeout=2,
            ):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"PostgreSQL did not accept connections:\n{_log_tail(log)}"
                ) from None
            time.sleep(0.2)


@contextlib.contextmanager
def postgres_cluster(
    *,
    bin_dir: Path = PG_BIN_DIR,
    os_user: str = "postgres",
    superuser: str = "bench",
    settings: Mapping[str, str] | None = None,
) -> Iterator[PostgresCluster]:
    """A fresh PostgreSQL cluster in a temporary directory, removed afterwards.

    As root, the cluster runs as ``os_user`` (PostgreSQL refuses to run as root); otherwise as
    the current user. It listens only on a unix socket in its own directory; local connections
    are trusted. ``settings`` are extra ``-c name=value`` server settings.
    """
    for tool in ("initdb", "postgres"):
        if not (bin_dir / tool).is_file():
            raise RuntimeError(
                f"PostgreSQL 15 is needed: {bin_dir / tool} not found (install postgresql-15 "
                "or run with --backends sqlite)"
            )
    run_as = os_user if os.geteuid() == 0 else None
    base = Path(tempfile.mkdtemp(prefix="dpmine-pg-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        data_dir, socket_dir, log = base / "data", base / "sock", base / "postgres.log"
        socket_dir.mkdir()
        if run_as is not None:
            entry = pwd.getpwnam(run_as)
            for path in (base, socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        child_env = {"PATH": os.environ.get("PATH", ""), "HOME": str(base), "LC_ALL": "C"}
        subprocess.run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(data_dir),
                "-U",
                superuser,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            check=True,
            cwd=base,
            env=child_env,
            capture_output=True,
            **_as_os_user(run_as),
        )
        version = subprocess.run(
            [str(bin_dir / "postgres"), "--version"], check=True, capture_output=True, text=True
        ).stdout.strip()
        port = free_port()
        options = {"listen_addresses": "", "max_connections": "200", **(settings or {})}
        command = [
            str(bin_dir / "postgres"),
            "-D",
            str(data_dir),
            "-p",
            str(port),
            "-k",
            str(socket_dir),
        ]
        for name, value in options.items():
            command += ["-c", f"{name}={value}"]
        with log.open("wb") as log_handle:
            process = subprocess.Popen(
                command,
                cwd=base,
                env=child_env,
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **_as_os_user(run_as),
            )
        cluster = PostgresCluster(socket_dir=socket_dir, port=port, user=superuser, version=version)
        _wait_for_postgres(process, cluster, log)
        yield cluster
    finally:
        if process is not None:
            _stop_process(process, signal.SIGINT)  # SIGINT = PostgreSQL's "fast" shutdown
        shutil.rmtree(base, ignore_errors=True)


# -- whole runs -----------------------------------------------------------------------------------


class StoppedRun(RuntimeError):
    """A miner's run stopped early at a failed call (``stopped_``: an overrun of its padded
    budget, say). A benchmark does not score it as a whole run; it records the failure."""


class Minable(Protocol):
    """A client miner: ``mine()`` and where its last run stopped."""

    def mine(self, dataset: dpmine.DatasetHandle, /) -> object: ...

    @property
    def stopped_(self) -> RunStopped | None: ...


def mine_whole(miner: Minable, handle: dpmine.DatasetHandle) -> None:
    """``miner.mine(handle)``; a run that stopped early raises :class:`StoppedRun` (a miner
    keeps what such a run released and returns, which a benchmark must not take for a whole
    run's figures)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RunStoppedWarning)
        miner.mine(handle)
    if miner.stopped_ is not None:
        raise StoppedRun(miner.stopped_.describe())


# -- the dpmine server ---------------------------------------------------------------------------


#: Log lines of a padded server that missed its public schedule (server/dpmine_server/services:
#: executor.py and workers.py "overran its padded ...", a release withheld; workers.py "a job
#: slot was claimed ... after its public start", a job handed over later than its allowance).
TIMING_WARNINGS = {
    "overruns": "overran its padded",
    "late_job_claims": "after its public start",
}


@dataclass
class ServerHandle:
    """A running dpmine server: its URL, the bootstrap owner's key, where it keeps files."""

    url: str
    owner_key: str
    database_url: str
    data_dir: Path
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)
    #: The server process's environment (``DPMINE_*`` settings included): what its workers get.
    env: dict[str, str] = field(default_factory=dict, repr=False)

    def connect(self, api_key: str | None = None, *, timeout: float = 120.0) -> dpmine.Connection:
        """A new client connection (its own ``httpx.Client``), as the owner by default."""
        return dpmine.connect(self.url, api_key or self.owner_key, timeout=timeout)

    def log_tail(self) -> str:
        """The end of the server's log (for error reports)."""
        return _log_tail(self.log)

    def timing_warnings(self) -> dict[str, int]:
        """How many times the server's log says a padded deadline was missed, by kind
        (:data:`TIMING_WARNINGS`): the owner's signal that the budgets are too short for this
        machine. Overruns fail closed, so they cost results, not privacy; a benchmark of
        padded runs reports them beside its times."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return dict.fromkeys(TIMING_WARNINGS, 0)
        return {kind: text.count(marker) for kind, marker in TIMING_WARNINGS.items()}


def _wait_for_server(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    with httpx.Client(base_url=url, timeout=5.0) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the dpmine server exited at start-up:\n{_log_tail(log)}")
            try:
                if client.get("/v1/health").status_code == httpx.codes.OK:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dpmine server did not become healthy:\n{_log_tail(log)}")
            time.sleep(0.2)


@contextlib.contextmanager
def running_server(
    database_url: str,
    work_dir: Path,
    *,
    owner_key: str = OWNER_KEY,
    extra_env: Mapping[str, str] | None = None,
    uvicorn_args: Sequence[str] = (),
) -> Iterator[ServerHandle]:
    """A real uvicorn server (one process) on a free 127.0.0.1 port, stopped afterwards.

    Files go under ``work_dir/data``, the log to ``work_dir/server.log``. Access logging is off
    so that it does not weigh on the timings.
    """
    data_dir = work_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir / "server.log"
    port = free_port()
    env = _clean_environment() | {
        "DPMINE_DATABASE_URL": database_url,
        "DPMINE_DATA_DIR": str(data_dir),
        "DPMINE_BOOTSTRAP_OWNER_KEY": owner_key,
        "DPMINE_ENVIRONMENT": "development",
        "DPMINE_SECRET_KEY": secrets.token_urlsafe(32),
        **(extra_env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        "dpmine_server.app:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
        "--no-access-log",
        *uvicorn_args,
    ]
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as log_handle:
        process = subprocess.Popen(
            command,
            cwd=work_dir,
            env=env,
            stdout=log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_server(process, url, log)
        yield ServerHandle(
            url=url,
            owner_key=owner_key,
            database_url=database_url,
            data_dir=data_dir,
            log=log,
            process=process,
            env=env,
        )
    finally:
        _stop_process(process)


@dataclass
class WorkerHandle:
    """A running ``python -m dpmine_server worker`` process (PostgreSQL job queue)."""

    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def log_tail(self) -> str:
        """The end of the worker's log (for error reports)."""
        return _log_tail(self.log)


def _registered_workers(database_url: str) -> int:
    """Rows of procrastinate's worker table (0 before its first worker registers)."""
    conninfo = database_url.replace("postgresql+psycopg://", "postgresql://", 1)
    with psycopg.connect(conninfo, connect_timeout=5) as connection:
        exists = connection.execute("SELECT to_regclass('procrastinate_workers')").fetchone()
        if exists is None or exists[0] is None:
            return 0
        row = connection.execute("SELECT count(*) FROM procrastinate_workers").fetchone()
        return 0 if row is None else int(row[0])


@contextlib.contextmanager
def running_worker(server: ServerHandle, work_dir: Path, *, name: str) -> Iterator[WorkerHandle]:
    """A ``dpmine-server worker`` process with ``server``'s environment (same database, data
    folder and secrets), logging to ``work_dir/<name>.log``; returns once it has registered
    with the queue (one more row in ``procrastinate_workers``: start workers one at a time).
    Stopped with SIGTERM afterwards (it finishes its current job first)."""
    if not server.database_url.startswith("postgresql"):
        raise ValueError("worker processes take jobs from a PostgreSQL database")
    work_dir.mkdir(parents=True, exist_ok=True)
    log = work_dir / f"{name}.log"
    known = _registered_workers(server.database_url)
    with log.open("wb") as log_handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "dpmine_server", "worker"],
            cwd=work_dir,
            env=server.env,
            stdin=subprocess.DEVNULL,
            stdout=log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while _registered_workers(server.database_url) <= known:
            if process.poll() is not None:
                raise RuntimeError(f"the worker {name} exited at start-up:\n{_log_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker {name} did not register:\n{_log_tail(log)}")
            time.sleep(0.1)
        yield WorkerHandle(log=log, process=process)
    finally:
        _stop_process(process)


@contextlib.contextmanager
def server_for_backend(
    backend: Backend, work_dir: Path, *, extra_env: Mapping[str, str] | None = None
) -> Iterator[ServerHandle]:
    """A dpmine server on a fresh SQLite file or a fresh throwaway PostgreSQL cluster."""
    if backend == "sqlite":
        database = f"sqlite:///{work_dir / 'dpmine.sqlite3'}"
        with running_server(database, work_dir, extra_env=extra_env) as server:
            yield server
        return
    with postgres_cluster() as cluster:
        url = cluster.create_database("dpmine")
        with running_server(url, work_dir, extra_env=extra_env) as server:
            yield server


# -- datasets and principals ---------------------------------------------------------------------


def register_files(
    owner: dpmine.Connection,
    *,
    dataset_id: str,
    metadata: DatasetMetadata,
    source: DatasetSource,
    files: Mapping[str, Path],
    name: str | None = None,
    epsilon_cap: float = 1_000_000.0,
    attribution: str = "",
) -> dict[str, Any]:
    """Register a file dataset through the client's multipart upload.

    ``files`` maps the source's path fields ("path" for CSV/FIMI, "left"/"right" for a CSV
    pair) to local files; the server stores copies and rewrites the source to them.
    """
    expected = {"left", "right"} if isinstance(source, CsvPairSource) else {"path"}
    if set(files) != expected or not isinstance(source, CsvPairSource | CsvSource | FimiSource):
        raise ValueError(f"a {source.format!r} source needs files for {sorted(expected)}")
    request = CreateDatasetRequest(
        id=dataset_id,
        name=name or dataset_id,
        attribution=attribution,
        epsilon_cap=epsilon_cap,
        metadata=metadata,
        source=source,
    )
    return owner.admin.upload_dataset(request, dict(files))


def add_analysts(
    server: ServerHandle, names: Sequence[str], grants: Mapping[str, float]
) -> dict[str, str]:
    """Create analysts and grant each ``grants[dataset_id]`` epsilon; returns name -> key.

    The server commits each write before answering, so every analyst sees its datasets at once.
    """
    keys: dict[str, str] = {}
    with server.connect() as owner:
        for name in names:
            keys[name] = owner.admin.add_principal(name, "analyst").api_key
            for dataset_id, epsilon in grants.items():
                owner.admin.grant(dataset_id, name, epsilon)
    return keys


# -- measurement ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100, linear interpolation) of ``values``."""
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))


def time_calls(
    call: Callable[[], object], *, repeats: int, inner: int = 1, warmup: int = 1
) -> list[float]:
    """Seconds per call of ``call``: ``repeats`` samples, each the mean over ``inner`` calls."""
    for _ in range(warmup):
        call()
    samples: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            call()
        samples.append((time.perf_counter() - start) / inner)
    return samples


def machine_info() -> dict[str, Any]:
    """Where the numbers come from: CPUs, Python and library versions, the git commit."""
    info: dict[str, Any] = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sqlite": sqlite3.sqlite_version,
        "dpmine": dpmine.__version__,
        "git_commit": _git_commit(),
        "load_average_start": load_average(),
    }
    for module in ("uvicorn", "fastapi", "sqlalchemy", "psycopg", "opendp", "httpx"):
        info[module] = _module_version(module)
    try:
        info["postgres"] = subprocess.run(
            [str(PG_BIN_DIR / "postgres"), "--version"], check=True, capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        info["postgres"] = None
    total_memory = _total_memory_gib()
    if total_memory is not None:
        info["memory_gib"] = total_memory
    return info


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (other work on the machine skews the timings)."""
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def wait_until_quiet(*, max_load: float, timeout: float, poll: float = 5.0) -> bool:
    """Wait until the 1-minute load average is at most ``max_load``; False on timeout."""
    deadline = time.monotonic() + timeout
    while os.getloadavg()[0] > max_load:
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def _module_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _total_memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    except (OSError, ValueError):
        return None
    return None


def _git_commit() -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return result.stdout.strip() or None


def _bundled_rows(every: int) -> tuple[list[str], list[list[str]]]:
    """The bundled table's header and every ``every``-th row (a spread, not the first block)."""
    with gzip.open(BUNDLED_MUSHROOM, "rt", encoding="utf-8", newline="") as handle:
        header, *rows = list(csv.reader(handle))
    return header, rows[::every]


def write_bundled_pair(directory: Path, *, every: int = 48) -> tuple[list[str], list[str]]:
    """Write ``left.csv`` and ``right.csv`` (joined by an ``id`` column) from every
    ``every``-th row of the bundled Mushroom table, views :data:`BUNDLED_LEFT` and the other
    columns; returns the two views' column names. A small two-view table for ``--smoke``."""
    header, rows = _bundled_rows(every)
    left = [name for name in header if name in BUNDLED_LEFT]
    right = [name for name in header if name not in BUNDLED_LEFT]
    directory.mkdir(parents=True, exist_ok=True)
    for file_name, columns in (("left.csv", left), ("right.csv", right)):
        positions = [header.index(name) for name in columns]
        with (directory / file_name).open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["id", *columns])
            writer.writerows([str(i), *(row[p] for p in positions)] for i, row in enumerate(rows))
    return left, right


def write_bundled_fimi(path: Path, *, every: int = 16) -> int:
    """Write every ``every``-th row of the bundled Mushroom table as FIMI transactions (one
    integer item per attribute=value, numbered in order of first appearance, as the FIMI
    mushroom file is); returns the number of transactions."""
    header, rows = _bundled_rows(every)
    ids: dict[tuple[str, str], int] = {}
    lines = []
    for row in rows:
        pairs = zip(header, row, strict=True)
        items = [ids.setdefault(pair, len(ids) + 1) for pair in pairs]
        lines.append(" ".join(str(item) for item in sorted(items)))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def import_pyfim() -> Any | None:
    """pyfim's ``fim`` module, or None when the ``bench`` extra is not installed (``make test``
    does not install it: the smoke modes then skip the pyfim baseline and say so)."""
    try:
        return importlib.import_module("fim")
    except ImportError:
        return None


def owner_confirmed(metadata: DatasetMetadata) -> DatasetMetadata:
    """A ``propose-metadata`` proposal as the benchmark's owner confirms it: taken as proposed,
    marked reviewed (registration refuses an unreviewed proposal)."""
    if metadata.review is None:
        return metadata
    review = metadata.review.model_copy(update={"reviewed": True})
    return metadata.model_copy(update={"review": review})


def median(values: Sequence[float]) -> float:
    """The median of ``values``."""
    return float(statistics.median(values))


def _exit_on_sigterm(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def unwind_on_sigterm() -> None:
    """Make SIGTERM unwind like Ctrl-C, so ``finally`` blocks stop servers and clusters."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def wait_if_asked(seconds: float, *, indent: str = "") -> None:
    """Wait up to ``seconds`` (``--wait-quiet``) for a 1-minute load average below 0.5."""
    if seconds > 0 and not wait_until_quiet(max_load=0.5, timeout=seconds):
        print(f"{indent}load average still {load_average()} after {seconds:.0f} s; going on")


def add_server_timing_arguments(parser: argparse.ArgumentParser) -> None:
    """``--calibration``, ``--max-in-flight``, ``--grid-ms`` and ``--cold-extensions``: the
    timing calibration, admission limit, padding grid and extension pricing of the server a
    benchmark starts (read back by :func:`server_timing_settings`)."""
    parser.add_argument(
        "--calibration",
        type=Path,
        help="DPMINE_TIMING_CALIBRATION of the server (dpmine-server calibrate: measured base "
        "and kernel factors)",
    )
    parser.add_argument("--max-in-flight", type=int, help="DPMINE_MAX_IN_FLIGHT of the server")
    parser.add_argument(
        "--grid-ms", type=float, help="DPMINE_TIMING_GRID_MS of the server (the padding's grid)"
    )
    parser.add_argument(
        "--cold-extensions",
        action="store_true",
        help="DPMINE_TIMING_WARM_EXTENSIONS=false: price every Serenade extension position as "
        "built from the rows (the default before the kernel lane)",
    )


def server_timing_settings(args: argparse.Namespace) -> dict[str, str]:
    """The DPMINE_* settings of :func:`add_server_timing_arguments`' options, as given."""
    settings = {}
    if args.calibration is not None:
        settings["DPMINE_TIMING_CALIBRATION"] = str(args.calibration.resolve())
    if args.max_in_flight is not None:
        settings["DPMINE_MAX_IN_FLIGHT"] = str(args.max_in_flight)
    if args.grid_ms is not None:
        settings["DPMINE_TIMING_GRID_MS"] = f"{args.grid_ms:g}"
    if args.cold_extensions:
        settings["DPMINE_TIMING_WARM_EXTENSIONS"] = "false"
    return settings


def comma_names(value: str, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    """The names of a comma-separated option, each one of ``allowed`` (else exit with the
    choices)."""
    names = tuple(v.strip() for v in value.split(",") if v.strip())
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (choose from {', '.join(allowed)})")
    return names
