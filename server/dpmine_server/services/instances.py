"""Liveness of server processes, for crash recovery that never touches live work.

Each process holds an exclusive ``flock`` on ``data_dir/instances/<id>.lock`` for its whole
life; the operating system releases it when the process dies, even by SIGKILL. Ledger entries
and jobs record the instance that reserved them, so recovery interrupts only the work of
instances whose lock can be taken (dead) and leaves other live workers alone. Workers that
share a database must share the data folder (they already must, for uploaded files).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session

__all__ = ["InstanceLock", "dead_owners"]


class InstanceLock:
    """This process's liveness token."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.instance_id = uuid.uuid4().hex
        self._fd: int | None = os.open(self._path(self.instance_id), os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def _path(self, instance_id: str) -> Path:
        return self._directory / f"{instance_id}.lock"

    def is_alive(self, instance_id: str | None) -> bool:
        """Whether the instance still runs (its lock is held). Unknown or None: dead."""
        if instance_id is None:
            return False
        if instance_id == self.instance_id:
            return True
        path = self._path(instance_id)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return False

    def close(self) -> None:
        """Release the lock (the process is shutting down cleanly)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            with contextlib.suppress(FileNotFoundError):
                self._path(self.instance_id).unlink()


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
