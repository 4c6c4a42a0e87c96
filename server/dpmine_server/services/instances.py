"""Liveness of server processes, for crash recovery that never touches live work.

Ledger entries and jobs record the instance (API process) that reserved them, and recovery at
start-up interrupts only the work of dead instances. Liveness comes from the database engine or
the operating system, with no files and no shared folder:

* **PostgreSQL** (processes on any number of hosts): each process holds a session-level
  advisory lock, keyed by its instance id, on one dedicated connection for its whole life.
  PostgreSQL releases the lock when that connection ends, including when the process is killed
  or its host disappears (TCP keepalive), so any process can test it with
  ``pg_try_advisory_lock``.
* **SQLite** (every process that opens the file runs on one host: SQLite's locking requires
  it): the instance id is the process id and the kernel's start time of that process, so a
  process id reused after a crash is not mistaken for the dead process.

Jobs that a worker runs have their own liveness: the queue engine's worker heartbeats
(services/queues.py).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from sqlalchemy import ColumnElement, Connection, Engine, or_, select, text
from sqlalchemy.orm import InstrumentedAttribute, Session

from dpmine_server.db.base import is_sqlite

__all__ = ["Liveness", "LocalProcessLiveness", "PostgresLiveness", "dead_owners", "liveness_for"]


class Liveness(Protocol):
    """This process's identity and a test of other processes' liveness."""

    instance_id: str

    def is_alive(self, instance_id: str | None) -> bool:
        """Whether the instance still runs. Unknown or None: dead."""
        ...

    def close(self) -> None:
        """Give up this process's token (clean shutdown)."""
        ...


def _process_start_ticks(pid: int) -> str | None:
    """The kernel's start time of process ``pid`` (clock ticks since boot), or None if there is
    no such process. Linux reads ``/proc``; elsewhere only the existence of the pid is known."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return None
        return fields[19]  # field 22 of proc(5), counted after the command name
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return "0"
    return "0"


class LocalProcessLiveness:
    """Liveness of processes on this host (the SQLite deployments)."""

    def __init__(self) -> None:
        pid = os.getpid()
        self.instance_id = f"p{pid}-{_process_start_ticks(pid) or '0'}"[:32]

    def is_alive(self, instance_id: str | None) -> bool:
        """Whether the process named by ``instance_id`` still runs (same pid, same start)."""
        if instance_id is None or not instance_id.startswith("p") or "-" not in instance_id:
            return False
        pid_text, ticks = instance_id[1:].split("-", 1)
        if not pid_text.isdigit():
            return False
        return _process_start_ticks(int(pid_text)) == ticks

    def close(self) -> None:
        """Nothing to release: the process's existence is the token."""


def _advisory_key(instance_id: str) -> int:
    """A signed 64-bit advisory-lock key from a hex instance id."""
    return int(instance_id[:16], 16) - (1 << 63)


class PostgresLiveness:
    """Liveness through a session advisory lock held on a dedicated connection."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.instance_id = uuid.uuid4().hex
        self._connection: Connection | None = engine.connect()
        # Out of the pool: closing it ends the session (and its lock) instead of handing a
        # connection that still holds the lock to someone else.
        self._connection.detach()
        locked = self._connection.execute(
            text("SELECT pg_try_advisory_lock(:key)"), {"key": _advisory_key(self.instance_id)}
        ).scalar_one()
        self._connection.commit()
        if not locked:  # a 64-bit collision with a live process: practically impossible
            raise RuntimeError("could not take this process's liveness lock; start it again")

    def is_alive(self, instance_id: str | None) -> bool:
        """Whether the instance's lock is held (by a live connection)."""
        if instance_id is None or len(instance_id) < 16:
            return False
        if instance_id == self.instance_id:
            return True
        try:
            key = _advisory_key(instance_id)
        except ValueError:
            return False
        with self._engine.connect() as connection:
            taken = connection.execute(
                text("SELECT pg_try_advisory_lock(:key)"), {"key": key}
            ).scalar_one()
            if taken:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": key})
            connection.commit()
        return not taken

    def close(self) -> None:
        """Release the lock (the process is shutting down cleanly)."""
        if self._connection is not None:
            # Unlock first: the server ends a closed session a moment later, and until then
            # the lock would still look held.
            self._connection.execute(
                text("SELECT pg_advisory_unlock(:key)"), {"key": _advisory_key(self.instance_id)}
            )
            self._connection.commit()
            self._connection.close()
            self._connection = None


def liveness_for(engine: Engine) -> Liveness:
    """The liveness token of this process for the database behind ``engine``."""
    if is_sqlite(engine):
        return LocalProcessLiveness()
    return PostgresLiveness(engine)


def dead_owners(
    session: Session,
    owner: InstrumentedAttribute[str | None],
    active: ColumnElement[bool],
    is_alive: Callable[[str | None], bool],
) -> ColumnElement[bool] | None:
    """A condition matching the active rows whose owning instance is dead (None: no such row)."""
    owners = session.scalars(select(owner).where(active).distinct()).all()
    dead = [instance for instance in owners if not is_alive(instance)]
    if not dead:
        return None
    named = [instance for instance in dead if instance is not None]
    if None in dead:
        return or_(owner.in_(named), owner.is_(None))
    return owner.in_(named)
