"""Start-up checks (issue #9): the SQLite file's folder is created, and a server started with
another DPMINE_SECRET_KEY than its database's refuses to start (instead of silent 401s); and
the in-process pieces that bound failed logins (token buckets, audit aggregation)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, select

from dpmine_server.api.limits import LoginThrottle
from dpmine_server.db.base import make_engine
from dpmine_server.db.migrate import alembic_config, upgrade_to_head
from dpmine_server.db.models import ServerState
from dpmine_server.services.audit import FailedLogins
from dpmine_server.services.container import build_services
from dpmine_server.services.principals import SECRET_CHECK_NAME, SecretKeyMismatch
from dpmine_server.settings import Settings
from support.servers import LiveServer, ServerStartError

SECRET = "startup-tests-secret-0123456789abcdef"


def _settings(folder: Path, *, secret: str = SECRET, database: Path | None = None) -> Settings:
    return Settings(
        database_url=f"sqlite:///{database or folder / 'dpmine.sqlite3'}",
        data_dir=folder / "data",
        secret_key=secret,
        environment="test",
    )


def test_the_sqlite_folder_is_created(tmp_path: Path) -> None:
    database = tmp_path / "not" / "yet" / "there" / "dpmine.sqlite3"
    build_services(_settings(tmp_path, database=database)).close()
    assert database.is_file()


def test_the_secret_key_check_is_stored_then_enforced(tmp_path: Path) -> None:
    build_services(_settings(tmp_path)).close()
    services = build_services(_settings(tmp_path))  # the same secret: starts
    with services.sessions() as session:
        stored = session.get_one(ServerState, SECRET_CHECK_NAME)
        assert SECRET not in stored.value
        assert len(stored.value) == 64
    services.close()
    with pytest.raises(SecretKeyMismatch, match="DPMINE_SECRET_KEY") as refused:
        build_services(_settings(tmp_path, secret="another-secret-0123456789abcdef"))
    assert "must stay the same" in str(refused.value)
    build_services(_settings(tmp_path)).close()  # the original secret still works


def test_an_existing_database_gets_its_check_on_the_next_start(tmp_path: Path) -> None:
    build_services(_settings(tmp_path)).close()
    engine = make_engine(f"sqlite:///{tmp_path / 'dpmine.sqlite3'}")
    config = alembic_config()
    with engine.begin() as connection:  # back to the schema before the check existed
        config.attributes["connection"] = connection
        command.downgrade(config, "0003")
    assert "server_state" not in inspect(engine).get_table_names()
    build_services(_settings(tmp_path)).close()  # migrates and stores the check
    with engine.connect() as connection:
        names = connection.execute(select(ServerState.name)).scalars().all()
    assert names == [SECRET_CHECK_NAME]
    upgrade_to_head(engine)
    engine.dispose()


# -- failed logins, in memory ---------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_throttle() -> None:
    clock = _Clock()
    throttle = LoginThrottle(per_client=3, global_limit=5, window_seconds=30, clock=clock)
    for _ in range(3):
        assert throttle.retry_after(["a"]) is None
        throttle.failed(["a"])
    assert throttle.retry_after(["a"]) == 10  # 3 per 30 s: one every 10 s
    assert throttle.retry_after(["b"]) is None
    throttle.failed(["b"])
    throttle.failed(["b"])
    assert throttle.retry_after(["c"]) == 6  # the global bucket (5 per 30 s) is empty
    clock.now += 10
    assert throttle.retry_after(["a"]) is None


def test_failed_logins_are_aggregated_per_window() -> None:
    clock = _Clock()
    log = FailedLogins(window_s=60, max_rows=3, clock=clock)
    written = [event for i in range(1000) for event in log.failed(f"dpm_{i % 5}", refused=False)]
    assert written == [("auth_failed", {"key_prefix": f"dpm_{i}"}) for i in range(3)]
    assert log.failed("dpm_x", refused=True) == []
    assert log.due() == []
    clock.now += 60
    [(action, details)] = log.due()
    assert action == "auth_failed_summary"
    assert details["failed_logins"] == 998
    assert details["refused_429"] == 1
    assert sum(details["key_prefixes"].values()) == 998
    assert log.due() == []
    assert log.flush() == []
    assert log.failed("dpm_0", refused=False) == [("auth_failed", {"key_prefix": "dpm_0"})]


# -- a live server --------------------------------------------------------------------------------


def _raw_post(port: int, headers: str, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(headers.encode() + body)
        sock.settimeout(5)
        answer = b""
        while b"\r\n\r\n" not in answer:
            part = sock.recv(65536)
            if not part:
                break
            answer += part
        return answer


@pytest.mark.skipif(os.name != "posix", reason="spawns a server process")
def test_live_server_limits_and_secret_check(tmp_path: Path) -> None:
    database = tmp_path / "nested" / "folder" / "dpmine.sqlite3"
    server = LiveServer(database_url=f"sqlite:///{database}", workdir=tmp_path / "work")
    with server:
        assert database.is_file()
        # 50 MB announced, none sent: answered at once, before the body and before auth.
        started = time.monotonic()
        answer = _raw_post(
            server.port,
            "POST /v1/datasets/x/counts HTTP/1.1\r\nHost: t\r\n"
            "Content-Type: application/json\r\nContent-Length: 52428800\r\n\r\n",
        )
        assert time.monotonic() - started < 3
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # Chunked, no length: refused after the limit, the rest is never read.
        chunk = b"x" * (1024 * 1024)
        framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
        started = time.monotonic()
        answer = b""
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/datasets/x/counts HTTP/1.1\r\nHost: t\r\n"
                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            try:
                for _ in range(50):
                    sock.sendall(framed)
            except OSError:
                pass  # the server closed the connection after answering
            sock.settimeout(5)
            try:
                while b"\r\n\r\n" not in answer:
                    part = sock.recv(65536)
                    if not part:
                        break
                    answer += part
            except OSError:
                pass
        assert time.monotonic() - started < 10
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    server.secret_key = "a-changed-secret-0123456789abcdef"
    with pytest.raises(ServerStartError, match="DPMINE_SECRET_KEY"):
        server.start(timeout=60)
