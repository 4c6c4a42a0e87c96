"""Append-only audit log of owner actions, authentication failures and refusals."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from dpmine.wire import AuditEventInfo
from dpmine_server.db.models import AuditEvent, Principal, utcnow

__all__ = ["list_events", "record"]


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
