"""The pieces under the worker processes (services/instances.py, services/queues.py, migration
0005): process liveness without files, the job-done notifications, the queue engine's schema on
PostgreSQL, and the settings and command that refuse a deployment without workers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text
from typer.testing import CliRunner

from dpmine_server.cli import app as server_cli
from dpmine_server.db.base import make_engine
from dpmine_server.db.migrate import alembic_config, upgrade_to_head
from dpmine_server.services.instances import LocalProcessLiveness, PostgresLiveness
from dpmine_server.services.queues import _DoneListener, psycopg_conninfo, settings_environment
from dpmine_server.services.workers import JOB_DONE_CHANNEL
from dpmine_server.settings import Settings
from support.servers import PostgresDatabases


@pytest.fixture
def pg_engine(postgres: PostgresDatabases) -> Iterator[Engine]:
    """A fresh PostgreSQL database at the newest revision."""
    url = postgres.create_database()
    engine = make_engine(url)
    upgrade_to_head(engine)
    try:
        yield engine
    finally:
        engine.dispose()
        postgres.drop_database(url)


# -- liveness ----------------------------------------------------------------------------------


def test_a_local_process_is_alive_until_it_exits() -> None:
    me = LocalProcessLiveness()
    assert me.is_alive(me.instance_id)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        ticks = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        child_id = f"p{child.pid}-{ticks}"
        assert me.is_alive(child_id)
        # The same pid with another start time is another (reused) process: dead.
        assert not me.is_alive(f"p{child.pid}-{int(ticks) + 1}")
    finally:
        child.kill()
        child.wait()
    assert not me.is_alive(child_id)
    for unknown in (None, "", "p-1", "pabc-1", "0123456789abcdef0123456789abcdef"):
        assert not me.is_alive(unknown)


def test_a_postgres_instance_is_alive_while_its_connection_lives(pg_engine: Engine) -> None:
    first, second = PostgresLiveness(pg_engine), PostgresLiveness(pg_engine)
    try:
        assert first.instance_id != second.instance_id
        assert first.is_alive(second.instance_id)
        assert second.is_alive(first.instance_id)
        second.close()  # as when its process dies: PostgreSQL drops the session lock
        assert not first.is_alive(second.instance_id)
        # Testing liveness must not take the dead instance's lock for good.
        assert not first.is_alive(second.instance_id)
        assert not first.is_alive(None)
        assert not first.is_alive("not-hex-at-all-xx")
    finally:
        first.close()
        second.close()


# -- notifications -----------------------------------------------------------------------------


def _notify(engine: Engine, job_id: str) -> None:
    with engine.begin() as connection:
        connection.execute(
            text("SELECT pg_notify(:channel, :job_id)"),
            {"channel": JOB_DONE_CHANNEL, "job_id": job_id},
        )


def test_a_waiter_is_woken_by_its_job_notification(pg_engine: Engine) -> None:
    listener = _DoneListener(psycopg_conninfo(pg_engine.url.render_as_string(False)))
    try:
        threading.Timer(0.3, _notify, args=(pg_engine, "job-a")).start()
        started = time.monotonic()
        listener.wait("job-a", timeout=30.0)
        assert time.monotonic() - started < 20.0  # woken, not timed out
    finally:
        listener.close()


def test_a_notification_before_the_wait_is_kept_for_the_waiter(pg_engine: Engine) -> None:
    # The waiter read the job's state just before the job settled: the notification arrives
    # before it waits, and must not be lost (else the waiter sleeps its whole timeout).
    listener = _DoneListener(psycopg_conninfo(pg_engine.url.render_as_string(False)))
    try:
        _notify(pg_engine, "job-b")
        deadline = time.monotonic() + 20.0
        while "job-b" not in listener._early:
            assert time.monotonic() < deadline, "the notification never arrived"
            time.sleep(0.02)
        started = time.monotonic()
        listener.wait("job-b", timeout=30.0)
        assert time.monotonic() - started < 1.0
        assert "job-b" not in listener._early
    finally:
        listener.close()


# -- migration 0005 on PostgreSQL --------------------------------------------------------------


def test_0005_installs_and_removes_the_queue_schema(pg_engine: Engine) -> None:
    def tables() -> set[str]:
        return set(inspect(pg_engine).get_table_names())

    assert {"procrastinate_jobs", "procrastinate_workers"} <= tables()
    columns = {c["name"] for c in inspect(pg_engine).get_columns("jobs")}
    assert {"cancel_requested", "queue_job_id", "remaining_units"} <= columns

    config = alembic_config()
    with pg_engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "0004")
    assert not {name for name in tables() if name.startswith("procrastinate")}
    with pg_engine.connect() as connection:
        leftovers = connection.execute(
            text(
                "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = current_schema() AND p.proname LIKE 'procrastinate%'"
            )
        ).scalar_one()
    assert leftovers == 0
    columns = {c["name"] for c in inspect(pg_engine).get_columns("jobs")}
    assert not {"cancel_requested", "queue_job_id", "remaining_units"} & columns
    upgrade_to_head(pg_engine)
    assert {"procrastinate_jobs", "procrastinate_workers"} <= tables()


# -- settings and the worker command -----------------------------------------------------------


def test_sqlite_refuses_zero_job_workers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="DPMINE_JOB_WORKERS=0"):
        Settings(database_url=f"sqlite:///{tmp_path / 'x.sqlite3'}", job_workers=0)
    assert Settings(database_url="postgresql+psycopg://h/db", job_workers=0).job_workers == 0


def test_a_stalled_timeout_shorter_than_the_heartbeat_is_refused() -> None:
    with pytest.raises(ValueError, match="STALLED_AFTER_S must exceed"):
        Settings(worker_heartbeat_s=10.0, worker_stalled_after_s=5.0)


def test_settings_travel_to_a_child_process_through_the_environment(tmp_path: Path) -> None:
    settings = Settings(
        database_url="postgresql+psycopg://u:p@h/db",
        data_dir=tmp_path,
        environment="test",
        test_seed=7,
        job_workers=3,
        worker_heartbeat_s=0.5,
        worker_stalled_after_s=2.0,
        timing_padding=False,
    )
    environment = settings_environment(settings)
    assert "DPMINE_BOOTSTRAP_OWNER_KEY" not in environment  # unset values stay unset
    rebuilt = subprocess.run(
        [
            sys.executable,
            "-c",
            "from dpmine_server.settings import Settings; print(Settings().model_dump_json())",
        ],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DPMINE_")}, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    assert Settings.model_validate_json(rebuilt.stdout) == settings


def test_the_worker_command_refuses_sqlite(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        server_cli,
        ["worker"],
        env={"DPMINE_DATABASE_URL": f"sqlite:///{tmp_path / 'x.sqlite3'}"},
    )
    assert result.exit_code != 0
    assert "`dpmine-server serve` runs its own worker processes" in result.output
