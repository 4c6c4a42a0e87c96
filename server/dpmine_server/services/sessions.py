"""Mining sessions: server-side secret state of a run (e.g. Serenade's ES memo, §2.4).

The state is stored in the database, so any worker can serve the next call; it belongs to one
analyst and one dataset, expires, and is never sent to a client.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from dpmine_server.db.base import rows_affected
from dpmine_server.db.models import MiningSession, Principal, utcnow

__all__ = ["DEFAULT_LIFETIME", "create", "delete_expired", "load_state", "save_state"]

DEFAULT_LIFETIME = timedelta(hours=24)


def create(
    session: Session,
    *,
    principal: Principal,
    dataset_id: str,
    kind: str,
    state: dict[str, Any],
    lifetime: timedelta = DEFAULT_LIFETIME,
) -> str:
    """Start a session and return its id."""
    session_id = str(uuid.uuid4())
    now = utcnow()
    session.add(
        MiningSession(
            id=session_id,
            principal_id=principal.id,
            dataset_id=dataset_id,
            kind=kind,
            state=state,
            created_at=now,
            expires_at=now + lifetime,
        )
    )
    session.flush()
    return session_id


def _owned(
    session: Session, session_id: str, principal: Principal, dataset_id: str, kind: str
) -> MiningSession | None:
    row = session.get(MiningSession, session_id)
    if row is None or row.principal_id != principal.id or row.dataset_id != dataset_id:
        return None
    if row.kind != kind or row.expires_at <= utcnow():
        return None
    return row


def load_state(
    session: Session, session_id: str, *, principal: Principal, dataset_id: str, kind: str
) -> dict[str, Any] | None:
    """The state of a live session owned by this analyst on this dataset, else None."""
    row = _owned(session, session_id, principal, dataset_id, kind)
    return None if row is None else dict(row.state)


def save_state(
    session: Session,
    session_id: str,
    state: dict[str, Any],
    *,
    principal: Principal,
    dataset_id: str,
    kind: str,
) -> bool:
    """Replace a live session's state; False when it is gone, expired or not this analyst's."""
    row = _owned(session, session_id, principal, dataset_id, kind)
    if row is None:
        return False
    row.state = state
    session.flush()
    return True


def delete_expired(session: Session) -> int:
    """Remove expired sessions; returns how many."""
    result = session.execute(delete(MiningSession).where(MiningSession.expires_at <= utcnow()))
    return rows_affected(result)
