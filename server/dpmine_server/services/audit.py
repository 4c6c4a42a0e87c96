"""Append-only audit log of owner actions, authentication failures and refusals."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dpmine.wire import AuditEventInfo
from dpmine_server.db.models import AuditEvent, Principal, utcnow

__all__ = ["MAX_FAILED_LOGIN_ROWS", "FailedLogins", "list_events", "record", "record_all"]


def record(
    session: Session,
    *,
    action: str,
    principal: Principal | None = None,
    target: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Add one event to the session (committed with the caller's transaction)."""
    session.add(
        AuditEvent(
            at=utcnow(),
            principal_id=principal.id if principal else None,
            action=action,
            target=target[:200],
            details=details or {},
        )
    )


def list_events(session: Session, *, limit: int = 10_000) -> list[AuditEventInfo]:
    """The newest events first."""
    names = dict(session.execute(select(Principal.id, Principal.name)).all())
    events = session.scalars(select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit))
    return [
        AuditEventInfo(
            id=event.id,
            at=event.at,
            principal=names.get(event.principal_id) if event.principal_id else None,
            action=event.action,
            target=event.target,
            details=event.details,
        )
        for event in events
    ]


#: Failed logins written one row each per window (one per key prefix); the rest are summarised.
MAX_FAILED_LOGIN_ROWS = 20
#: Key prefixes counted one by one in a summary; more are counted together as "other".
_MAX_SUMMARY_PREFIXES = 50


class FailedLogins:
    """Aggregates failed logins for the audit log, so that a flood of bad keys writes a bounded
    number of rows: per window of ``window_s`` seconds, one ``auth_failed`` row for each of the
    first :data:`MAX_FAILED_LOGIN_ROWS` key prefixes, and one ``auth_failed_summary`` row that
    counts everything else (written when the next window starts or at shutdown).

    :meth:`failed` and :meth:`due` return the events to write as ``(action, details)`` pairs;
    the caller records them (no database work here).
    """

    def __init__(
        self,
        *,
        window_s: float,
        max_rows: int = MAX_FAILED_LOGIN_ROWS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._window = window_s
        self._max_rows = max_rows
        self._clock = clock
        self._lock = threading.Lock()
        self._start = clock()
        self._listed: set[str] = set()
        self._unlisted = 0
        self._refused = 0
        self._prefixes: Counter[str] = Counter()

    def failed(self, key_prefix: str, *, refused: bool) -> list[tuple[str, dict[str, Any]]]:
        """Count one failed (or, ``refused``, rate-limited) login."""
        with self._lock:
            events = self._roll(self._clock())
            room = len(self._listed) < self._max_rows
            if not refused and key_prefix not in self._listed and room:
                self._listed.add(key_prefix)
                events.append(("auth_failed", {"key_prefix": key_prefix}))
                return events
            self._unlisted += 1
            self._refused += int(refused)
            if key_prefix in self._prefixes or len(self._prefixes) < _MAX_SUMMARY_PREFIXES:
                self._prefixes[key_prefix] += 1
            else:
                self._prefixes["other"] += 1
            return events

    def due(self) -> list[tuple[str, dict[str, Any]]]:
        """The summary of a finished window, if one is waiting (cheap when none is)."""
        with self._lock:
            return self._roll(self._clock())

    def flush(self) -> list[tuple[str, dict[str, Any]]]:
        """The summary of the current window so far (at shutdown)."""
        with self._lock:
            return self._roll(self._clock(), force=True)

    def _roll(self, now: float, *, force: bool = False) -> list[tuple[str, dict[str, Any]]]:
        if not force and now - self._start < self._window:
            return []
        events: list[tuple[str, dict[str, Any]]] = []
        if self._unlisted:
            events.append(
                (
                    "auth_failed_summary",
                    {
                        "failed_logins": self._unlisted,
                        "refused_429": self._refused,
                        "window_seconds": self._window,
                        "key_prefixes": dict(self._prefixes.most_common(_MAX_SUMMARY_PREFIXES)),
                    },
                )
            )
        self._start = now
        self._listed.clear()
        self._unlisted = 0
        self._refused = 0
        self._prefixes.clear()
        return events


def record_all(session: Session, events: list[tuple[str, dict[str, Any]]]) -> None:
    """Add ``(action, details)`` events without a principal (see :class:`FailedLogins`)."""
    for action, details in events:
        record(session, action=action, details=details)
