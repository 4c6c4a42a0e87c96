"""Shared fixtures: live dpmine servers on SQLite and PostgreSQL (DESIGN.md "Testing").

* ``postgres`` (session): one throwaway PostgreSQL cluster for the whole run (or the server
  named by ``DPMINE_TEST_POSTGRES_URL``); skipped when neither exists, except under CI (``CI``
  set), where a missing PostgreSQL is an error.
* ``sqlite_server`` / ``postgres_server`` (module): a real uvicorn server per test module, on a
  temp SQLite file or on a fresh database of the session cluster.
* ``any_server`` (module, parametrised ``sqlite``/``postgres``): for tests that must pass on both
  backends. Tests on PostgreSQL get the ``postgres`` marker automatically.
* ``owner`` / ``analyst``: the bootstrap owner's connection to ``any_server`` and a fresh analyst
  (an :class:`~support.servers.Account`, with its name and key) for each test.

These fixtures are only built when a test asks for them; other test folders are unaffected.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import dpmine
from support.servers import Account, LiveServer, PostgresDatabases, add_analyst, open_postgres

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]
_POSTGRES_FIXTURES = frozenset({"postgres", "postgres_server"})


def pytest_configure(config: pytest.Config) -> None:
    """A ``dpmine.toml`` that ``dpmine-server init`` left in the folder the tests start from
    (the README runs it at the repository's root) must not configure the tests: point
    DPMINE_CONFIG_FILE at an empty settings file unless the caller set one."""
    if "DPMINE_CONFIG_FILE" not in os.environ:
        empty = config.rootpath / ".pytest-empty-settings.toml"
        empty.write_text("# no settings: tests/conftest.py\n", encoding="utf-8")
        os.environ["DPMINE_CONFIG_FILE"] = str(empty)


#: Test modules whose outcome depends on wall time (padded deadlines, latency buckets, kills
#: seconds into a job) or that load both cores: marked ``serial``. ``make test`` runs the rest on
#: two pytest-xdist workers, then these alone, so no other test shares the CPU with them.
SERIAL_MODULES = frozenset(
    {
        "api/test_job_mode.py",
        "e2e/test_console_browser.py",
        "e2e/test_crash_recovery.py",
        "e2e/test_workers.py",
        "privacy/test_audit_channels.py",
        "privacy/test_audit_job_limit.py",
        "privacy/test_audit_kernel_lane.py",
        "privacy/test_audit_overruns.py",
        "privacy/test_audit_timing.py",
        "privacy/test_audit_timing_batches.py",
        "privacy/test_audit_timing_bounded.py",
        "privacy/test_audit_timing_extensions.py",
    }
)


#: Modules that take a minute or more (building and installing the wheel, the benchmarks'
#: smoke runs), then every module of the serial phase, longest first: collected first in this
#: order, so that neither phase ends on one worker running a long module while the other waits
#: (the serial phase hands out whole modules in collection order, the Makefile's
#: ``--no-loadscope-reorder``, so this order is its longest-first schedule). Serial totals
#: measured 2026-11-29 (s): 148, 135, 81, 81, 72, 62, 56, 49, 38, 36, 28, 17, 15.
LONG_FIRST_MODULES = (
    "test_packaging.py",
    "test_benchmarks.py",
    "test_audit_channels.py",
    "test_audit_overruns.py",
    "test_audit_timing_bounded.py",
    "test_audit_timing_batches.py",
    "test_audit_kernel_lane.py",
    "test_audit_job_limit.py",
    "test_audit_timing.py",
    "test_workers.py",
    "test_crash_recovery.py",
    "test_job_mode.py",
    "test_audit_timing_extensions.py",
    "test_audit_admission.py",
    "test_console_browser.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that runs against PostgreSQL with ``postgres``, and the tests of
    :data:`SERIAL_MODULES` with ``serial``; move :data:`LONG_FIRST_MODULES` to the front in
    their order (a stable sort: every other test keeps its order)."""
    tests_dir = config.rootpath / "tests"
    for item in items:
        if _POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)
        module = item.path.relative_to(tests_dir) if item.path.is_relative_to(tests_dir) else None
        if module is not None and module.as_posix() in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)
    rank = {name: position for position, name in enumerate(LONG_FIRST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabases]:
    """A PostgreSQL server for the session (one cluster; a database per module)."""
    databases, reason = open_postgres()
    if databases is None:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is required under CI: {reason}")
        pytest.skip(reason)
    try:
        yield databases
    finally:
        databases.close()


#: Worker liveness settings for the PostgreSQL servers of the tests.
FAST_HEARTBEATS = {"DPMINE_WORKER_HEARTBEAT_S": "0.5", "DPMINE_WORKER_STALLED_AFTER_S": "3"}


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server on a fresh SQLite file (one per test module)."""
    workdir = tmp_path_factory.mktemp("sqlite-server")
    server = LiveServer(
        database_url=f"sqlite:///{workdir / 'dpmine.sqlite3'}", workdir=workdir, name="sqlite"
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def postgres_server(
    postgres: PostgresDatabases, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A live server on a fresh PostgreSQL database (one per test module)."""
    database_url = postgres.create_database()
    workdir = tmp_path_factory.mktemp("postgres-server")
    # Fast heartbeats: a local worker killed with its server is taken for dead within seconds.
    server = LiveServer(
        database_url=database_url, workdir=workdir, name="postgres", extra_env=FAST_HEARTBEATS
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()
        postgres.drop_database(database_url)


@pytest.fixture(scope="module", params=BACKENDS)
def any_server(request: pytest.FixtureRequest) -> LiveServer:
    """The module's live server on each backend in turn."""
    name = "sqlite_server" if request.param == "sqlite" else "postgres_server"
    server: LiveServer = request.getfixturevalue(name)
    return server


@pytest.fixture
def owner(any_server: LiveServer) -> Iterator[dpmine.Connection]:
    """The bootstrap owner's connection (no retries: tests want the first answer)."""
    if not any_server.is_running():  # a previous test of the module stopped it
        any_server.start()
    with dpmine.connect(any_server.url, any_server.owner_key, retries=0) as connection:
        yield connection


@pytest.fixture
def analyst(any_server: LiveServer, owner: dpmine.Connection) -> Iterator[Account]:
    """A fresh analyst on ``any_server`` (no grants yet)."""
    account = add_analyst(any_server, owner)
    try:
        yield account
    finally:
        account.connection.close()
