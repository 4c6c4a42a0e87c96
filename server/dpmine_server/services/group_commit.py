"""Group commit: the durable release commits of concurrent requests share one transaction
(issue #23, "throughput with padding on").

Every answered request ends with a durable commit that stores its release in its ledger entry
(:meth:`~dpmine_server.services.ledger.Ledger.complete`): on SQLite an fsync of the WAL under
the file's single writer lock, on PostgreSQL a WAL flush and a round trip. When many requests
finish at once (the admission limit's worst case, which the padding base pays for) these
commits queue one behind the other. :class:`GroupCommitter` lets one of the waiting threads,
the leader, write every release that is waiting when its transaction has started, in that one
transaction, and commit once; the others wait for that commit. A thread that arrives while a
leader is committing waits for the next group.

Why this keeps the ledger's guarantees (DESIGN.md "The budget ledger"):

* **Nothing is shown before it is durable.** :meth:`GroupCommitter.commit` returns to its caller
  only after the transaction holding its write has committed durably (the same engine and
  ``synchronous`` setting as one commit per release); the caller answers only after that. A
  crash (SIGKILL, power loss) before the commit loses every write of the group and answers none
  of them: their entries stay ``reserved``, their charges (committed before any data was read)
  stand and are marked interrupted at the next start, exactly as for one release alone.
* **No charge is touched.** The group only moves entries ``reserved → released`` with the same
  conditional statement as before (``WHERE status = 'reserved'``); an entry that is no longer
  reserved (an overrun failed it at its deadline) changes nothing and only its own caller gets
  the error. The charges were committed by their reservations, each in its own transaction.
* **Failures stay per request.** When the group's transaction fails (a database error raised
  by one write, such as a constraint, or by the commit), nothing of it was kept, so each write
  of the group is applied again alone, in a transaction of its own: a write that fails alone
  gets its own error and answers none of its release, as it would have without grouping, and
  the others commit durably before their callers return. Re-applying is safe because a write
  is only statements inside its transaction (the ledger's is the conditional
  ``reserved → released`` update): a rolled-back group left no trace of it. A group of one
  write is not tried twice. A commit whose outcome is unknown (the connection lost during
  COMMIT) may have kept the group; the conditional update tried again then changes nothing and
  its caller gets an error while the release is stored, as without grouping.

Time: the leader's transaction does at most as many writes as there are requests waiting, each
one indexed update, so no request waits longer than it would behind the same requests
committing one by one; the padding base still covers the request path at the in-flight limit
(request_path.py). Privacy: which releases share a commit depends on when requests finish,
which is hidden by their padded deadlines like every other wait on the request path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

__all__ = ["GroupCommitter", "GroupWrite"]


@dataclass(slots=True)
class GroupWrite:
    """One caller's write: applied by ``write`` in the group's transaction, which returns the
    error to raise to this caller alone (None: the write took effect)."""

    write: Callable[[Connection], Exception | None]
    done: bool = False
    error: BaseException | None = field(default=None)


class GroupCommitter:
    """Batches concurrent writes into one durable transaction on ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._waiting: list[GroupWrite] = []
        self._leading = False
        self._condition = threading.Condition()

    @property
    def waiting(self) -> int:
        """Writes queued for the next group (not yet taken by a leader)."""
        with self._condition:
            return len(self._waiting)

    def commit(self, write: Callable[[Connection], Exception | None]) -> None:
        """Apply ``write`` in a transaction shared with the writes waiting beside it, and return
        once that transaction has committed; raise its own error (see :class:`GroupWrite`) or
        the transaction's."""
        item = GroupWrite(write)
        with self._condition:
            self._waiting.append(item)
            while not item.done and self._leading:
                self._condition.wait()
            if not item.done:
                self._leading = True
        if not item.done:
            self._lead()
        if item.error is not None:
            raise item.error

    def _lead(self) -> None:
        """Commit every waiting write (this thread's included) in one transaction; if that
        transaction fails, each of its writes alone (module docstring)."""
        group: list[GroupWrite] = []
        settled: set[int] = set()  # ids of the writes whose outcome is final
        try:
            try:
                with self._engine.begin() as connection:
                    # Taken once the transaction holds the write lock: the writes that queued
                    # while this thread waited for it join the group.
                    group = self._take()
                    for item in group:
                        item.error = item.write(connection)
                settled.update(id(item) for item in group)
            except Exception as error:  # nothing of the group was kept
                group = group or self._take()  # (the transaction may not even have begun)
                if len(group) == 1:
                    group[0].error = error
                    settled.add(id(group[0]))
                else:
                    for item in group:
                        self._alone(item)
                        settled.add(id(item))
        except BaseException as error:  # interrupted: no writer may wait forever
            group = group or self._take()
            for item in group:
                if id(item) not in settled:
                    item.error = error
            raise
        finally:
            with self._condition:
                for item in group:
                    item.done = True
                self._leading = False
                self._condition.notify_all()

    def _alone(self, item: GroupWrite) -> None:
        """Apply one write in its own transaction, recording its error (its own or the
        transaction's)."""
        try:
            with self._engine.begin() as connection:
                item.error = item.write(connection)
        except Exception as error:
            item.error = error

    def _take(self) -> list[GroupWrite]:
        with self._condition:
            group, self._waiting = self._waiting, []
        return group
