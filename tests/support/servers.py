"""Real servers for the end-to-end tests (DESIGN.md "Testing": a real uvicorn on localhost, with
SQLite and with PostgreSQL).

* :class:`LiveServer` runs ``python -m uvicorn --factory dpmine_server.app:create_app`` in a
  subprocess on a free localhost port, configured only through ``DPMINE_*`` environment
  variables, and captures its stdout/stderr in a log file. It can be stopped (SIGTERM), killed
  (SIGKILL) and restarted on the same database and data folder.
* :class:`PostgresCluster` is a throwaway PostgreSQL cluster (``initdb``/``pg_ctl`` from
  ``/usr/lib/postgresql/*/bin``) run by a non-root OS user; :class:`ExternalPostgres` uses the
  server named by ``DPMINE_TEST_POSTGRES_URL`` instead. Both hand out one fresh database per
  caller (:meth:`PostgresDatabases.create_database`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

import dpmine

__all__ = [
    "POSTGRES_URL_ENV",
    "Account",
    "ExternalPostgres",
    "LiveServer",
    "PostgresCluster",
    "PostgresDatabases",
    "ServerStartError",
    "add_analyst",
    "find_postgres_bin_dir",
    "free_port",
    "http_client",
    "open_postgres",
    "postgres_os_user",
]

#: An existing PostgreSQL server to use instead of a throwaway cluster (SQLAlchemy URL of a
#: database the user may CREATE DATABASE from, e.g. ``postgresql+psycopg://u:p@host/postgres``).
POSTGRES_URL_ENV = "DPMINE_TEST_POSTGRES_URL"
#: Optional override of the folder holding ``initdb`` and ``pg_ctl``.
POSTGRES_BIN_ENV = "DPMINE_TEST_POSTGRES_BIN"
_APP_FACTORY = "dpmine_server.app:create_app"
_PG_OS_USER = "dpmine_pg"
_LOG_TAIL_CHARS = 4000


class ServerStartError(RuntimeError):
    """A server or database did not come up; the message carries the end of its log."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError:
        return "(no log)"


class LiveServer:
    """One dpmine server process on 127.0.0.1, restartable on the same database.

    The bootstrap owner key is fixed for the server's lifetime, so owner clients made before a
    restart keep working afterwards (the port is kept too).
    """

    def __init__(
        self,
        *,
        database_url: str,
        workdir: Path,
        name: str = "server",
        owner_key: str | None = None,
        secret_key: str | None = None,
        data_dir: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.workdir = workdir
        # Another server on the same database shares its owner key, secret key and data folder.
        self.data_dir = data_dir or workdir / f"{name}-data"
        self.log_path = workdir / f"{name}.log"
        self.owner_key = owner_key or "dpm_owner_" + secrets.token_urlsafe(24)
        self.secret_key = secret_key or secrets.token_urlsafe(32)
        self.port = free_port()
        self._extra_env = dict(extra_env or {})
        self._process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    # -- description ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:40123``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def backend(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return "sqlite" if self.database_url.startswith("sqlite") else "postgresql"

    @property
    def pid(self) -> int | None:
        """Process id of the running server, if any."""
        return None if self._process is None else self._process.pid

    def is_running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def environment(self) -> dict[str, str]:
        """The process environment: the caller's minus any ``DPMINE_*``, plus the settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPMINE_")}
        env.update(
            {
                "DPMINE_ENVIRONMENT": "test",
                "DPMINE_DATABASE_URL": self.database_url,
                "DPMINE_DATA_DIR": str(self.data_dir),
                "DPMINE_BOOTSTRAP_OWNER_KEY": self.owner_key,
                "DPMINE_SECRET_KEY": self.secret_key,
                "DPMINE_JOB_WORKERS": "2",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self._extra_env)
        return env

    def log_text(self) -> str:
        """Everything the server processes wrote to stdout/stderr so far (all restarts)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- life cycle ----------------------------------------------------------------------------

    def start(self, *, timeout: float = 90.0) -> None:
        """Start the process and wait until ``GET /v1/health`` answers 200."""
        if self.is_running():
            raise RuntimeError("the server is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            _APP_FACTORY,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        with self.log_path.open("ab") as log:
            log.write(f"\n=== start #{self.starts + 1}: {' '.join(command)}\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                env=self.environment(),
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if self.starts == 0:
            atexit.register(self.kill)  # a safety net if the test run dies without teardown
        self.starts += 1
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.url, timeout=5.0) as probe:
            while True:
                process = self._process
                if process is None or process.poll() is not None:
                    code = None if process is None else process.returncode
                    self._process = None
                    raise ServerStartError(
                        f"dpmine server exited with {code} during start-up:\n{_tail(self.log_path)}"
                    )
                with contextlib.suppress(httpx.TransportError):
                    if probe.get("/v1/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    self.kill()
                    raise ServerStartError(
                        f"dpmine server not healthy after {timeout} s:\n{_tail(self.log_path)}"
                    )
                time.sleep(0.05)

    def stop(self, *, timeout: float = 30.0) -> int | None:
        """SIGTERM (graceful shutdown), SIGKILL if it takes longer than ``timeout``; exit code."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None
        return process.returncode

    def kill(self) -> None:
        """SIGKILL the server at once (a crash: no shutdown code runs)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait()
        self._process = None

    def restart(self, *, timeout: float = 90.0) -> None:
        """Stop (if running) and start again on the same database, data folder, key and port."""
        self.stop()
        self.start(timeout=timeout)

    def __enter__(self) -> LiveServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"LiveServer({self.url!r}, backend={self.backend!r}, pid={self.pid})"


@functools.cache
def wait_for(condition: str, check: Callable[[], bool], *, timeout: float = 60.0) -> None:
    """Poll ``check()`` until it is true (a state, not a timing, is awaited)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        time.sleep(0.02)


@contextlib.contextmanager
def sqlite_server(folder: Path, name: str) -> Iterator[LiveServer]:
    """A server of a test's own on SQLite in ``folder`` (one job worker), stopped afterwards:
    for tests that kill or restart it, or read its data folder."""
    live = LiveServer(
        database_url=f"sqlite:///{folder / 'dpmine.sqlite3'}",
        workdir=folder / "work",
        name=name,
        extra_env={"DPMINE_JOB_WORKERS": "1"},
    )
    live.start()
    try:
        yield live
    finally:
        live.stop()


def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def http_client(url: str, *, timeout: float = 60.0) -> httpx.Client:
    """A new HTTP client for ``url``. Plain HTTP needs no TLS, but httpx builds an SSL context
    per client (~20 ms); sharing one keeps 64 racing clients cheap."""
    return httpx.Client(base_url=url, timeout=timeout, verify=_ssl_context())


@dataclass(frozen=True)
class Account:
    """A principal created for a test: its name, its API key and a connection with that key."""

    name: str
    api_key: str
    connection: dpmine.Connection


def add_analyst(server: LiveServer, owner: dpmine.Connection, *, retries: int = 0) -> Account:
    """Create an analyst with a fresh name on ``server`` and connect with its key."""
    name = f"analyst-{secrets.token_hex(4)}"
    created = owner.admin.add_principal(name, "analyst")
    connection = dpmine.connect(server.url, created.api_key, retries=retries)
    return Account(name=name, api_key=created.api_key, connection=connection)


# -- PostgreSQL ----------------------------------------------------------------------------------


def _version_key(path: Path) -> tuple[int, str]:
    match = re.fullmatch(r"(\d+)", path.parent.name)
    return (int(match.group(1)) if match else -1, str(path))


def find_postgres_bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, newest version first, or None.

    Looks at ``$DPMINE_TEST_POSTGRES_BIN``, ``/usr/lib/postgresql/*/bin`` (Debian),
    ``/usr/pgsql-*/bin`` (RPM), ``/usr/local/pgsql/bin``, ``pg_config --bindir`` and ``$PATH``.
    """
    candidates: list[Path] = []
    override = os.environ.get(POSTGRES_BIN_ENV)
    if override:
        candidates.append(Path(override))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    candidates += sorted(Path("/usr").glob("pgsql-*/bin"), reverse=True)
    candidates.append(Path("/usr/local/pgsql/bin"))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(Path(found))
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for folder in candidates:
        if all(os.access(folder / tool, os.X_OK) for tool in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def postgres_os_user() -> pwd.struct_passwd | None:
    """The OS user to run PostgreSQL as: None when we are not root (run as ourselves), else an
    existing ``dpmine_pg`` or ``postgres`` user, else a ``dpmine_pg`` created with useradd."""
    if os.geteuid() != 0:
        return None
    for name in (_PG_OS_USER, "postgres"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    subprocess.run(
        [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _PG_OS_USER],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return pwd.getpwnam(_PG_OS_USER)


class PostgresDatabases:
    """Creates and drops databases on a PostgreSQL server reachable at ``admin_url``."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url

    def database_url(self, name: str) -> str:
        """SQLAlchemy URL of database ``name`` on this server."""
        url = make_url(self.admin_url).set(drivername="postgresql+psycopg", database=name)
        return url.render_as_string(hide_password=False)

    def _admin(self, statement: str) -> None:
        engine = create_engine(
            make_url(self.admin_url).set(drivername="postgresql+psycopg"),
            isolation_level="AUTOCOMMIT",
        )
        try:
            with engine.connect() as connection:
                connection.execute(text(statement))
        finally:
            engine.dispose()

    def create_database(self, prefix: str = "dpmine_test") -> str:
        """A new, empty database; returns its SQLAlchemy URL."""
        name = f"{prefix}_{secrets.token_hex(4)}"
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"database name {name!r} must be a lower-case identifier")
        self._admin(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url`` (closing any connection still open to it)."""
        name = make_url(url).database
        if not name or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise ValueError(f"refusing to drop database {name!r}")
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        """Release the server (nothing to do for an external one)."""


class ExternalPostgres(PostgresDatabases):
    """An existing PostgreSQL server named by ``DPMINE_TEST_POSTGRES_URL``."""


class PostgresCluster(PostgresDatabases):
    """A throwaway PostgreSQL cluster in a temp folder, on a free port of 127.0.0.1.

    Trust authentication (it listens on localhost only and lives for one test session), fsync
    off (the tests crash the dpmine server, never PostgreSQL), the socket inside the folder.
    """

    def __init__(self, bin_dir: Path, user: pwd.struct_passwd | None) -> None:
        self.bin_dir = bin_dir
        self.user = user
        self.port = free_port()
        self.base = Path(tempfile.mkdtemp(prefix="dpmine-pg-"))
        self.data = self.base / "data"
        self.log_path = self.base / "postgres.log"
        super().__init__(f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres")
        if user is not None:
            os.chown(self.base, user.pw_uid, user.pw_gid)

    def _run(self, *args: str, timeout: float = 120.0) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.user is None:
            completed = subprocess.run(
                command, check=False, capture_output=True, text=True, timeout=timeout
            )
        else:
            completed = subprocess.run(
                command,
                check=False,
                capture_output=True,
                text=True,
                timeout=timeout,
                user=self.user.pw_uid,
                group=self.user.pw_gid,
                extra_groups=[],
                cwd=self.base,
                env={**os.environ, "HOME": str(self.base), "USER": self.user.pw_name},
            )
        if completed.returncode != 0:
            raise ServerStartError(
                f"{' '.join(command)} failed ({completed.returncode}):\n"
                f"{completed.stdout[-_LOG_TAIL_CHARS:]}{completed.stderr[-_LOG_TAIL_CHARS:]}\n"
                f"{_tail(self.log_path)}"
            )

    def start(self) -> None:
        """initdb and start the cluster (waits until it accepts connections)."""
        atexit.register(self.close)  # a safety net if the test run dies without teardown
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        options = " ".join(
            [
                f"-p {self.port}",
                f"-k {self.base}",
                "-c listen_addresses=127.0.0.1",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=300",
            ]
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log_path), "-o", options, "-w", "start"
        )

    def close(self) -> None:
        """Stop the cluster at once and delete its folder."""
        with contextlib.suppress(ServerStartError, subprocess.SubprocessError):
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.base, ignore_errors=True)


def open_postgres() -> tuple[PostgresDatabases | None, str]:
    """A PostgreSQL server for the tests (started and ready), or None and the reason why not.

    ``DPMINE_TEST_POSTGRES_URL`` wins; otherwise a throwaway cluster from the local binaries.
    """
    external = os.environ.get(POSTGRES_URL_ENV)
    if external:
        return ExternalPostgres(external), ""
    bin_dir = find_postgres_bin_dir()
    if bin_dir is None:
        return None, (
            f"no PostgreSQL: set {POSTGRES_URL_ENV} or install the server binaries "
            "(initdb, pg_ctl; e.g. apt-get install postgresql)"
        )
    try:
        user = postgres_os_user()
    except (OSError, subprocess.SubprocessError, KeyError) as error:
        return None, f"no non-root OS user to run PostgreSQL as ({error})"
    cluster = PostgresCluster(bin_dir, user)
    try:
        cluster.start()
    except BaseException:
        cluster.close()
        raise
    return cluster, ""
