"""Engine and session factory for the engine's own database (SQLite by default, PostgreSQL).

SQLite runs in WAL mode with a busy timeout; a connection whose execution options carry
``sqlite_begin="IMMEDIATE"`` starts its transaction with ``BEGIN IMMEDIATE`` so that the ledger's
check-and-charge holds the write lock from the first read (DP-ENGINES.md R2).

Write transactions of one process queue on a fair (FIFO) in-process lock per database file
(:class:`WriterLock`), taken before ``BEGIN IMMEDIATE`` and given back right after the COMMIT or
ROLLBACK: threads then wait their turn instead of polling in SQLite's busy handler, whose sleeps
(1, 2, 5, ... 100 ms) are unfair and made the p99 latency under load. Other processes on the
same file still meet the busy handler. Connections commit durably (``PRAGMA synchronous=FULL``)
unless the engine was made with ``synchronous="NORMAL"``: only the ledger's reservation engine is
(see :meth:`dpmine_server.services.ledger.Ledger.reserve` for why that is safe).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import deque
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
    "WriterLock",
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


def make_engine(url: str, *, synchronous: str = "FULL", **kwargs: Any) -> Engine:
    """An engine for ``url`` with the pragmas and transaction handling the ledger relies on.

    The folder of an SQLite file is created if it is missing. ``synchronous`` is SQLite's
    ``PRAGMA synchronous`` of every connection (``NORMAL``: commits do not wait for the disk).
    """
    if url.startswith("sqlite"):
        folder = sqlite_folder(url)
        engine = create_engine(
            url,
            connect_args={
                "check_same_thread": False,
                "timeout": _LOCK_TIMEOUT_S,
                "factory": _SqliteConnection,
            },
            **kwargs,
        )
        database = make_url(url).database
        lock = _writer_lock(
            str(Path(database).expanduser().resolve()) if folder is not None and database else None
        )
        _configure_sqlite(engine, lock, synchronous)
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


#: Longest wait for the write lock (the in-process queue, then SQLite's busy timeout).
_LOCK_TIMEOUT_S = 60.0
_SYNCHRONOUS_MODES = frozenset({"FULL", "NORMAL", "EXTRA"})


class WriterLock:
    """A fair lock: threads get it in the order they asked (FIFO hand-over), with a timeout.

    ``threading.Lock`` promises no order, and SQLite's busy handler polls with growing sleeps, so
    under load some writers starved for seconds; here the releasing thread hands the lock to the
    longest waiter.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._waiters: deque[threading.Lock] = deque()
        self._held = False

    def acquire(self, timeout: float = _LOCK_TIMEOUT_S) -> bool:
        """Wait for the lock (at most ``timeout`` seconds); False when it did not come."""
        with self._mutex:
            if not self._held and not self._waiters:
                self._held = True
                return True
            waiter = threading.Lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(timeout=timeout):
            return True  # handed over by release(): _held stayed True
        with self._mutex:
            try:
                self._waiters.remove(waiter)
            except ValueError:
                return True  # handed over between the timeout and the removal
        return False

    def release(self) -> None:
        """Hand the lock to the longest waiter, or free it."""
        with self._mutex:
            if not self._held:
                raise RuntimeError("release of an unheld WriterLock")
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._held = False


_LOCKS: dict[str, WriterLock] = {}
_LOCKS_GUARD = threading.Lock()


def _writer_lock(database: str | None) -> WriterLock:
    """The process's writer lock of an SQLite file (one per file, shared by its engines)."""
    if database is None:
        return WriterLock()
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(database, WriterLock())


class _SqliteConnection(sqlite3.Connection):
    """A pysqlite connection that holds its file's :class:`WriterLock` from ``BEGIN IMMEDIATE``
    until its COMMIT or ROLLBACK has returned (or it is closed)."""

    writer_lock: WriterLock | None = None
    holds_writer_lock = False

    def take_writer_lock(self) -> None:
        if self.writer_lock is None or self.holds_writer_lock:
            return
        if not self.writer_lock.acquire(_LOCK_TIMEOUT_S):
            raise sqlite3.OperationalError("database is locked (in-process writer queue)")
        self.holds_writer_lock = True

    def give_back_writer_lock(self) -> None:
        if self.holds_writer_lock and self.writer_lock is not None:
            self.holds_writer_lock = False
            self.writer_lock.release()

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.give_back_writer_lock()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.give_back_writer_lock()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.give_back_writer_lock()


def _configure_sqlite(engine: Engine, lock: WriterLock, synchronous: str) -> None:
    if synchronous not in _SYNCHRONOUS_MODES:
        raise ValueError(f"unknown synchronous mode {synchronous!r}")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Let SQLAlchemy, not the driver, emit BEGIN (pysqlite otherwise defers it).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(_LOCK_TIMEOUT_S * 1000)}")
        cursor.close()
        if isinstance(dbapi_connection, _SqliteConnection):
            dbapi_connection.writer_lock = lock

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        raw = connection.connection.dbapi_connection
        if mode == "DEFERRED" or not isinstance(raw, _SqliteConnection):
            connection.exec_driver_sql(f"BEGIN {mode}")
            return
        raw.take_writer_lock()
        try:
            connection.exec_driver_sql(f"BEGIN {mode}")
        except BaseException:
            raw.give_back_writer_lock()
            raise


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
