"""Engine and session factory for the engine's own database (SQLite by default, PostgreSQL).

SQLite runs in WAL mode with a busy timeout; a connection whose execution options carry
``sqlite_begin="IMMEDIATE"`` starts its transaction with ``BEGIN IMMEDIATE`` so that the ledger's
check-and-charge holds the write lock from the first read (DP-ENGINES.md R2).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, Dialect, Engine, TypeDecorator, create_engine, event, make_url
from sqlalchemy.engine import Connection, CursorResult, Result
from sqlalchemy.orm import DeclarativeBase, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

__all__ = [
    "Base",
    "SessionFactory",
    "UtcDateTime",
    "is_sqlite",
    "make_engine",
    "make_session_factory",
    "rows_affected",
    "sqlite_folder",
]

SessionFactory = sessionmaker


class Base(DeclarativeBase):
    """Declarative base of every table."""


class UtcDateTime(TypeDecorator[datetime]):
    """Timezone-aware timestamps on every backend: stored in UTC, loaded with tzinfo=UTC
    (SQLite keeps no offset, so its values come back naive otherwise)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        del dialect
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        del dialect
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def is_sqlite(engine: Engine) -> bool:
    """True when the engine talks to SQLite."""
    return engine.dialect.name == "sqlite"


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for ``url`` with the pragmas and transaction handling the ledger relies on.

    The folder of an SQLite file is created if it is missing.
    """
    if url.startswith("sqlite"):
        sqlite_folder(url)
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 60}, **kwargs
        )
        _configure_sqlite(engine)
        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=20, max_overflow=40, **kwargs)


def sqlite_folder(url: str) -> Path | None:
    """Create (if missing) and return the folder of the SQLite file of ``url``; None for an
    in-memory database or a ``file:`` URI."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    folder = Path(database).expanduser().parent
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Let SQLAlchemy, not the driver, emit BEGIN (pysqlite otherwise defers it).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")


def make_session_factory(engine: Engine, *, immediate: bool = False) -> sessionmaker[Any]:
    """Sessions that keep loaded attributes after commit (routes read them afterwards).

    ``immediate``: on SQLite the transaction starts with ``BEGIN IMMEDIATE``. Use it for a
    session that reads and then writes: a deferred one fails at once with "database is locked"
    when another connection committed in between (WAL snapshot) instead of waiting for the lock.
    Such a session must not be open while the same thread opens another write transaction.
    """
    bind = engine.execution_options(sqlite_begin="IMMEDIATE") if immediate else engine
    return sessionmaker(bind=bind, expire_on_commit=False)


def rows_affected(result: Result[Any]) -> int:
    """Rows matched by an UPDATE or DELETE."""
    if not isinstance(result, CursorResult):
        raise TypeError("rows_affected needs the result of an UPDATE or DELETE")
    return int(result.rowcount)
