"""Mining sessions: server-side secret state of a run (e.g. Serenade's ES memo). Free."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Response, status

from dpmine.wire import MiningSessionInfo, MiningSessionRequest
from dpmine_server.api.common import ERRORS
from dpmine_server.api.deps import AnalystDep, ServicesDep, WriteSessionDep
from dpmine_server.db.models import MiningSession
from dpmine_server.errors import NotFound
from dpmine_server.services import sessions as mining_sessions

router = APIRouter(tags=["sessions"])


@router.post(
    "/datasets/{dataset_id}/sessions",
    response_model=MiningSessionInfo,
    status_code=status.HTTP_201_CREATED,
    responses=ERRORS,
)
def start_session(
    dataset_id: str,
    body: MiningSessionRequest,
    analyst: AnalystDep,
    services: ServicesDep,
    session: WriteSessionDep,
) -> MiningSessionInfo:
    """Start a session owned by you on this dataset; its state never leaves the server."""
    services.datasets.get_for_analyst(session, dataset_id, analyst)
    session_id = mining_sessions.create(
        session,
        principal=analyst,
        dataset_id=dataset_id,
        kind=body.kind,
        state={},
        lifetime=timedelta(hours=body.lifetime_hours),
    )
    row = session.get_one(MiningSession, session_id)
    return MiningSessionInfo(session_id=session_id, kind=row.kind, expires_at=row.expires_at)


@router.delete(
    "/datasets/{dataset_id}/sessions/{session_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=ERRORS,
)
def end_session(
    dataset_id: str, session_id: str, analyst: AnalystDep, session: WriteSessionDep
) -> Response:
    """Delete one of your sessions (and its state)."""
    row = session.get(MiningSession, session_id)
    if row is None or row.principal_id != analyst.id or row.dataset_id != dataset_id:
        raise NotFound(f"no mining session {session_id!r} of yours on this dataset")
    session.delete(row)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
